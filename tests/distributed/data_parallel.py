"""The data-parallel training step the distributed workers run: a two-layer MLP,
params replicated and the batch's rows split over every process's devices.

The same step as ``python -m fastdispatch bench --distributed`` times
(fastdispatch/bench/distributed.py); the tests keep their own copy so that they
depend on fastdispatch alone, never on the benchmark.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

# jax deadlocks when more than ~32 multi-process steps are queued per device
# and a process has at least as many CPU devices as cores (docs/distributed.md):
# train() blocks at least this often.
SYNC_EVERY = 16

BATCH, FEATURES, HIDDEN = 256, 16, 32  # global batch rows, input width, hidden width
LEARNING_RATE = 0.05  # a Python float: on fastdispatch's fast path as a scalar input


def loss(params, x, y):
    """Mean squared error of a two-layer tanh MLP."""
    hidden = jnp.tanh(x @ params["layer0"]["w"] + params["layer0"]["b"])
    out = hidden @ params["layer1"]["w"] + params["layer1"]["b"]
    return jnp.mean((out[:, 0] - y) ** 2)


def train_step(params, x, y, lr):
    """One SGD step on the global batch: XLA all-reduces the gradients."""
    value, grads = jax.value_and_grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), value


def problem(mesh, process_id: int, num_processes: int, rows: int = BATCH):
    """(params, x, y): params replicated on every device of ``mesh``, the batch's
    rows split over them; each process supplies its own rows (the same
    deterministic data set in every process, sliced)."""
    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    y_all = np.sin(x_all @ rng.normal(size=FEATURES)).astype(np.float32)
    shapes = {"layer0": (FEATURES, HIDDEN), "layer1": (HIDDEN, 1)}
    replicated, by_rows = NamedSharding(mesh, P()), NamedSharding(mesh, P(mesh.axis_names[0]))
    params = {
        name: {
            "w": jax.make_array_from_process_local_data(
                replicated, (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
            ),
            "b": jax.make_array_from_process_local_data(replicated, np.zeros(shape[1], np.float32)),
        }
        for name, shape in shapes.items()
    }
    lo, hi = process_id * rows // num_processes, (process_id + 1) * rows // num_processes
    x = jax.make_array_from_process_local_data(by_rows, x_all[lo:hi])
    y = jax.make_array_from_process_local_data(by_rows, y_all[lo:hi])
    return params, x, y


def train(step, params, x, y, steps: int, lr: float = LEARNING_RATE):
    """``steps`` steps from ``params``; blocks every SYNC_EVERY steps.
    Returns the last params and the loss of every step."""
    losses = []
    for i in range(steps):
        params, value = step(params, x, y, lr)
        losses.append(value)
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            value.block_until_ready()
    losses[-1].block_until_ready()
    return params, losses
