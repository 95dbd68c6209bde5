"""One process of test_distributed_warm: the data-parallel step under
fastdispatch.jit with warm start on a store both processes share (each keys its
own executables: the process index is in the key).

``worker_warm.py STORE STEPS``; prints ``WORKER-RESULT {json}``: the final
params' digest, the last loss, how often jax traced the step, and the store's
counts.
"""

import hashlib
import json
import sys

import numpy as np

from fastdispatch.distributed import initialize

store, steps = sys.argv[1], int(sys.argv[2])
process_id, num_processes = initialize()

import jax  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import fastdispatch  # noqa: E402
from fastdispatch.bench.distributed import SYNC_EVERY, problem, train_step  # noqa: E402

fastdispatch.warm_start(store)
traced = []


def step(params, x, y, lr):
    traced.append(1)  # runs only when jax traces
    return train_step(params, x, y, lr)


mesh = Mesh(np.array(jax.devices()), ("data",))
params, x, y = problem(mesh, process_id, num_processes)
jitted = fastdispatch.jit(step)
for i in range(steps):
    params, loss = jitted(params, x, y, 0.05)
    if i % SYNC_EVERY == SYNC_EVERY - 1:
        jax.block_until_ready(params)
jax.block_until_ready(params)
digest = hashlib.sha1(
    b"".join(np.asarray(a.addressable_shards[0].data).tobytes() for a in jax.tree.leaves(params))
).hexdigest()
stats = fastdispatch.warm_start_stats()
result = {
    "process": process_id,
    "digest": digest,
    "loss": float(np.asarray(loss.addressable_shards[0].data)),
    "traced": len(traced),
    "counts": {name: stats[name] for name in ("loaded", "written", "missed", "damaged")},
    "not_stored": list(stats["not_stored"].values()),
}
print("WORKER-RESULT " + json.dumps(result))
