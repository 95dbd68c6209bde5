"""Data-parallel training over several jax processes, on one machine.

    python examples/distributed_train.py                 # 2 processes x 2 CPU devices
    python examples/distributed_train.py --trace         # each process reports its dispatch
    python examples/distributed_train.py --kill 1        # process 1 dies mid-run: how the others end
    python examples/distributed_train.py --processes 2 --devices 4 --steps 400

Run without options, this script is the launcher: it starts itself as the
processes of one ``jax.distributed`` job on 127.0.0.1 (through
``fastdispatch.distributed.launch``), prints their output prefixed
``[process i]``, and at the end how each process ended.  Each process joins
the job, builds one global mesh over every process's CPU devices, gives it
its own slice of the batch (``jax.make_array_from_process_local_data``) and
trains with ``fastdispatch.jit``; XLA all-reduces the gradients over gloo.
Every process computes the same parameters, so every process prints the same
loss.  docs/distributed.md explains the set-up and how to run the same
program on a cluster.
"""

import argparse
import hashlib
import os
import signal
import sys

import numpy as np

from fastdispatch import distributed

FEATURES, CLASSES, HIDDEN = 8, 3, 32
BATCH = 192  # global batch: each process supplies BATCH / processes rows
LEARNING_RATE = 0.1
MOMENTUM = 0.9
# jax can deadlock when more than ~32 multi-process steps are queued and a
# process has as many CPU devices as the machine has cores: block every 16.
SYNC_EVERY = 16


def make_data(rows, seed=0):
    """Three Gaussian blobs in 8 dimensions: the same data set in every process."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=0.5, size=(CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, size=rows)
    x = centres[labels] + rng.normal(size=(rows, FEATURES))
    return x.astype(np.float32), labels.astype(np.int32)


def worker(steps, kill):
    # Before anything starts a jax backend: join the job the launcher set up.
    process_id, num_processes = distributed.initialize()

    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import fastdispatch

    def loss_fn(params, x, labels):
        hidden = jax.nn.relu(x @ params["hidden"]["w"] + params["hidden"]["b"])
        logits = hidden @ params["out"]["w"] + params["out"]["b"]
        log_probs = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))

    @fastdispatch.jit
    def train_step(params, velocity, x, labels, lr):
        """SGD with momentum on the global batch; lr is a Python float."""
        loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
        velocity = jax.tree.map(lambda v, g: MOMENTUM * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
        return params, velocity, loss

    # One mesh over the devices of every process; rows split over all of them.
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    replicated, by_rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    x_all, labels_all = make_data(BATCH)
    lo, hi = process_id * BATCH // num_processes, (process_id + 1) * BATCH // num_processes
    x = jax.make_array_from_process_local_data(by_rows, x_all[lo:hi])
    labels = jax.make_array_from_process_local_data(by_rows, labels_all[lo:hi])

    rng = np.random.default_rng(1)  # the same initial parameters everywhere
    shapes = {"hidden": (FEATURES, HIDDEN), "out": (HIDDEN, CLASSES)}
    initial = {
        name: {
            "w": (rng.normal(size=shape) * np.sqrt(2 / shape[0])).astype(np.float32),
            "b": np.zeros(shape[1], np.float32),
        }
        for name, shape in shapes.items()
    }
    params = jax.tree.map(lambda a: jax.make_array_from_process_local_data(replicated, a), initial)
    velocity = jax.tree.map(lambda a: jax.make_array_from_process_local_data(replicated, 0 * a), initial)

    print(
        f"process {process_id} of {num_processes}: {jax.local_device_count()} of "
        f"{jax.device_count()} devices, rows {lo}:{hi} of the batch",
        flush=True,
    )
    for step in range(1, steps + 1):
        if step == 50 and process_id == kill:
            print(f"process {process_id}: killing myself at step {step} (--kill)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        params, velocity, loss = train_step(params, velocity, x, labels, LEARNING_RATE)
        if step % SYNC_EVERY == 0:
            loss.block_until_ready()
        if step % 100 == 0 or step == steps:
            print(f"process {process_id}: step {step:4d}  loss {float(loss):.4f}", flush=True)
    leaves = jax.tree.leaves(params)
    digest = hashlib.sha1(b"".join(np.asarray(leaf).tobytes() for leaf in leaves)).hexdigest()[:12]
    print(f"process {process_id}: final params digest {digest}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="processes of the job (2)")
    parser.add_argument("--devices", type=int, default=2, help="CPU devices per process (2)")
    parser.add_argument("--steps", type=int, default=200, help="training steps (200)")
    parser.add_argument(
        "--trace", action="store_true", help="run each process under python -m fastdispatch --trace"
    )
    parser.add_argument("--kill", type=int, default=-1, metavar="I", help="process I dies at step 50")
    parser.add_argument("--timeout", type=float, default=300, help="kill everything after this many seconds")
    options = parser.parse_args()

    if distributed.PROCESS_ID_ENV in os.environ:  # started by the launcher: one process of the job
        worker(options.steps, options.kill)
        return 0

    trace = ["-m", "fastdispatch", "--trace"] if options.trace else []
    argv = [sys.executable, *trace, os.path.abspath(__file__), "--steps", str(options.steps)]
    argv += ["--kill", str(options.kill)]
    print(
        f"launching {options.processes} processes x {options.devices} CPU devices on {distributed.LOOPBACK}",
        flush=True,
    )
    run = distributed.launch(
        argv, options.processes, cpu_devices=options.devices, timeout=options.timeout, echo=True
    )
    print("\n" + run.summary(), flush=True)
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
