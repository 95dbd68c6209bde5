"""One process of test_distributed_train: data-parallel training under
fastdispatch.jit and jax.jit on global arrays, compared call by call.

Run by the test as ``python -m fastdispatch --no-patch --trace --trace-out
DIR/run.json worker_train.py STEPS`` in each process: jax.jit stays jax's own,
fastdispatch.stats() reads the command line's trace.  Prints
``WORKER-RESULT {json}`` when every check passed; any failure raises (exit 1).
"""

import hashlib
import json
import os
import socket
import sys
import warnings

import numpy as np

from fastdispatch.distributed import LOOPBACK, initialize

steps = int(sys.argv[1])
process_id, num_processes = initialize()

import jax  # noqa: E402
from contract import assert_same_tree  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import fastdispatch  # noqa: E402
from fastdispatch.bench.distributed import SYNC_EVERY, loss, problem, train, train_step  # noqa: E402

warnings.simplefilter("error")  # as pytest runs the suite
mesh = Mesh(np.array(jax.devices()), ("data",))
params, x, y = problem(mesh, process_id, num_processes)
assert jax.process_count() == num_processes == 2 and jax.process_index() == process_id
assert not x.is_fully_addressable and len(x.addressable_shards) == jax.local_device_count()

# The data-parallel step: the same outputs as jax.jit's, call by call, in
# every process (both run the same executable: XLA all-reduces the gradients).
step = fastdispatch.jit(train_step)
reference = jax.jit(train_step)
ours_params, theirs_params = params, params
for i in range(steps):
    ours_params, ours_loss = ours = step(ours_params, x, y, 0.05)
    theirs_params, theirs_loss = theirs = reference(theirs_params, x, y, 0.05)
    if i % SYNC_EVERY == SYNC_EVERY - 1:  # below jax's small-machine deadlock
        jax.block_until_ready((ours, theirs))
        assert_same_tree(ours, theirs)
assert_same_tree(ours, theirs)
assert ours_loss.sharding.is_fully_replicated and ours_params["layer0"]["w"].committed

# A second signature (the loss alone, on half the batch), and train(): blocking every SYNC_EVERY steps.
evaluate = fastdispatch.jit(loss)
half = jax.jit(lambda v: v[: v.shape[0] // 2])
x_half, y_half = half(x), half(y)
for i in range(steps):
    value = evaluate(ours_params, x_half, y_half)
    if i % SYNC_EVERY == SYNC_EVERY - 1:
        value.block_until_ready()
assert_same_tree(value, jax.jit(loss)(ours_params, x_half, y_half))
_, losses = train(step, params, x, y, SYNC_EVERY)

# fastdispatch.stats(): the running trace of the command line.
stats = {entry["name"]: entry for entry in fastdispatch.stats().values()}
assert set(stats) == {"train_step", "loss"}, stats
for name, calls in (("train_step", steps + SYNC_EVERY), ("loss", steps)):
    entry = stats[name]
    assert entry["calls"] == calls and entry["compiles"] == 1 and not entry["hand_offs"], entry
    assert entry["hits"] == calls - 1, entry  # every call after the first: 100% fast
assert all(entry.is_fast for entry in step._cache_entries() + evaluate._cache_entries())


def tcp_addresses():
    """The local addresses of this process's TCP sockets (Linux /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, family in (("/proc/self/net/tcp", socket.AF_INET), ("/proc/self/net/tcp6", socket.AF_INET6)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                raw = bytes.fromhex(fields[1].split(":")[0])
                # /proc writes each 32-bit word in host (little-endian) order.
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.add(socket.inet_ntop(family, words))
    return found


# Every socket of the job (coordinator, its clients, gloo) is on loopback.
addresses = tcp_addresses()
if os.path.exists("/proc/self/net/tcp"):
    assert addresses and addresses <= {LOOPBACK, "::ffff:" + LOOPBACK}, addresses

digest = hashlib.sha1(b"".join(np.asarray(a).tobytes() for a in jax.tree.leaves(ours_params))).hexdigest()
result = {"process": process_id, "local_devices": jax.local_device_count(), "digest": digest}
print("WORKER-RESULT " + json.dumps(dict(result, loss=float(losses[-1]))))
