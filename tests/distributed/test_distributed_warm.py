"""Warm start in a two-process job (jax.distributed, gloo on loopback): the
first run fills one store with each process's executable, the second loads
them, untraced, and trains to the same parameters in every process."""

import json

from distributed_util import describe, run_workers
from e2e.test_warm_start import store_files

STEPS = 32


def results(run):
    assert run.ok, describe(run)
    rows = {}
    for p in run.processes:
        (line,) = [line for line in p.stdout.splitlines() if line.startswith("WORKER-RESULT ")]
        rows[p.process_id] = json.loads(line.split(" ", 1)[1])
    return rows


def test_each_process_loads_its_own_executable(tmp_path):
    store = str(tmp_path / "store")
    first = results(run_workers("worker_warm.py", store, STEPS, devices=2))
    second = results(run_workers("worker_warm.py", store, STEPS, devices=2))
    for i in (0, 1):
        assert first[i]["traced"] == 1 and first[i]["counts"]["written"] == 1, first[i]
        assert second[i]["traced"] == 0, json.dumps([second[i], first[i]])
        assert second[i]["counts"] == {"loaded": 1, "written": 0, "missed": 0, "damaged": 0}, second[i]
        assert (second[i]["digest"], second[i]["loss"]) == (first[i]["digest"], first[i]["loss"])
    assert first[0]["digest"] == first[1]["digest"]  # replicated params: the same everywhere
    assert len(store_files(tmp_path)) == 2  # one per process
