"""One process of test_distributed_faults: a data-parallel loop under
fastdispatch.jit, blocking on every step, in which one process fails.

    worker_fault.py MODE VICTIM [INIT_TIMEOUT]

MODE ``die``: process VICTIM kills itself (SIGKILL) at step 10.  ``stall``: it
stops at step 10 and sleeps, alive, never reaching the next collective.
``none``: nobody fails (for the tests that start only some processes).
A collective that fails in a survivor is reported on stderr and ends the
process with ``os._exit(3)``: the communicator is dead, and a normal exit would
wait out jax's shutdown barrier (docs/distributed.md, "Faults").
"""

import os
import signal
import sys
import time

import numpy as np

from fastdispatch.distributed import INITIALIZATION_TIMEOUT_S, initialize

mode, victim = sys.argv[1], int(sys.argv[2])
init_timeout = int(sys.argv[3]) if len(sys.argv) > 3 else INITIALIZATION_TIMEOUT_S
process_id, num_processes = initialize(initialization_timeout=init_timeout)

import jax  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import fastdispatch  # noqa: E402
from fastdispatch.bench.distributed import problem, train_step  # noqa: E402

params, x, y = problem(Mesh(np.array(jax.devices()), ("data",)), process_id, num_processes)
step = fastdispatch.jit(train_step)
for i in range(10**6):
    if i == 10 and process_id == victim:
        print(f"process {process_id}: failing now ({mode})", flush=True)
        if mode == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "stall":
            time.sleep(3600)
    try:
        params, value = step(params, x, y, 0.05)
        value.block_until_ready()
    except jax.errors.JaxRuntimeError as error:
        print(f"process {process_id}: step {i} failed: {error}", file=sys.stderr, flush=True)
        os._exit(3)
    if mode == "none" and i == 20:
        break
