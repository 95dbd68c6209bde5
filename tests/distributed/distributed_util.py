"""Start the worker scripts beside this file as the processes of one
jax.distributed job on loopback (fastdispatch.distributed.launch), with a
timeout on everything: no test here can hang.

Each process pays jax's start-up (~1 s here) and the gloo connection, so one
worker checks many things, and a test asserts on its processes' exit codes,
outputs and files.
"""

from __future__ import annotations

import os
import sys

from fastdispatch.distributed import launch

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)

# Two CPU devices per process: the issue allows 2 or 4.  The workers block
# every 16 steps, below the ~32 queued multi-process steps at which jax
# deadlocks when a process has as many CPU devices as cores (docs/distributed.md).
DEVICES = 2


def run_workers(script, *args, devices=DEVICES, timeout=90.0, **options):
    """Run ``script`` (a file beside this one) as processes 0 and 1 of a job;
    the Launch, with the workers' outputs.  ``options`` go to launch()."""
    env = dict(options.pop("env", None) or {})
    # The workers import the test helpers (contract.py) by name, as the tests do.
    paths = [TESTS, os.path.join(TESTS, "compat"), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    argv = options.pop("argv_prefix", [sys.executable]) + [os.path.join(HERE, script), *map(str, args)]
    return launch(argv, 2, cpu_devices=devices, timeout=timeout, env=env, **options)


def describe(run):
    """Everything a failing assertion should show: the summary and each output."""
    parts = [run.summary()]
    for p in run.processes:
        parts.append(f"--- process {p.process_id} stdout:\n{p.stdout}")
        parts.append(f"--- process {p.process_id} stderr:\n{p.stderr}")
    return "\n".join(parts)
