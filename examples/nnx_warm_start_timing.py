"""First call of an nnx.jit training step in a fresh process, with and
without a filled warm-start store (docs/warm-start.md's nnx.jit numbers).

    python examples/nnx_warm_start_timing.py [runs]

Each run is a fresh process: an MLP (4-64-64-2) and nnx.Optimizer(optax.adam)
built, then the first call of the step timed to its result; the modes
alternate: no warm start, warm start filling an empty store, warm start
loading the filled store."""

import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time
import jax, jax.numpy as jnp, optax
from flax import nnx
import fastdispatch
from fastdispatch import nnx as fnnx
if sys.argv[1] != "-":
    fastdispatch.warm_start(sys.argv[1])

class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(4, 64, rngs=rngs)
        self.l2 = nnx.Linear(64, 64, rngs=rngs)
        self.l3 = nnx.Linear(64, 2, rngs=rngs)
    def __call__(self, x):
        return self.l3(nnx.relu(self.l2(nnx.relu(self.l1(x)))))

@fnnx.jit
def step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss

model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
x, y = jnp.ones((32, 4)), jnp.zeros((32, 2))
jax.block_until_ready((x, y))
began = time.perf_counter()
loss = float(step(model, optimizer, x, y))
print(time.perf_counter() - began, loss)
"""


def once(store):
    out = subprocess.run([sys.executable, "-c", CHILD, store], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0]) * 1e3


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    times = {"no warm start": [], "filling": [], "loading": []}
    with tempfile.TemporaryDirectory() as root:
        for i in range(runs):
            store = os.path.join(root, f"store{i}")
            times["no warm start"].append(once("-"))
            times["filling"].append(once(store))
            times["loading"].append(once(store))
    print(json.dumps({name: [round(t) for t in values] for name, values in times.items()}))
    for name, values in times.items():
        print(f"{name:>14}: median {statistics.median(values):.0f} ms of {[round(t) for t in values]}")


if __name__ == "__main__":
    main()
