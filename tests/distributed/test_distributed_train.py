"""Data-parallel training over two processes of 2 and of 4 CPU devices each
(jax.distributed, gloo on loopback): fastdispatch.jit gives jax.jit's outputs in every process,
stays on its fast path, and each process writes its own trace report and file.
"""

import json
import os
import subprocess
import sys

import pytest
from distributed_util import TESTS, describe, run_workers

STEPS = 128  # >= 100 calls per function, so that one compile leaves >= 99% hits


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}_devices_each")
def training(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    trace_out = str(out / "run.json")
    cli = [sys.executable, "-m", "fastdispatch", "--no-patch", "--trace", "--trace-out", trace_out]
    run = run_workers("worker_train.py", STEPS, devices=request.param, argv_prefix=cli)
    return run, out, request.param


def results(run):
    rows = []
    for p in run.processes:
        lines = [line for line in p.stdout.splitlines() if line.startswith("WORKER-RESULT ")]
        assert len(lines) == 1, describe(run)
        rows.append(json.loads(lines[0].split(" ", 1)[1]))
    return rows


def test_every_process_matches_jax_jit_on_the_fast_path(training):
    run, _, devices = training
    # The worker asserts, in each process: outputs equal jax.jit's call by call
    # (values, dtypes, weak types, shardings), one compile per signature, every
    # later call a fast-path hit in fastdispatch.stats(), sockets on loopback.
    assert run.ok, describe(run)
    rows = results(run)
    assert [(row["process"], row["local_devices"]) for row in rows] == [(0, devices), (1, devices)]
    assert rows[0]["digest"] == rows[1]["digest"] and rows[0]["loss"] == rows[1]["loss"]


def test_each_process_reports_with_its_index(training):
    run, out, _ = training
    assert run.ok, describe(run)
    for p in run.processes:
        header = f"fastdispatch trace, process {p.process_id} of 2: "
        assert header in p.stderr, p.stderr
        assert f"wrote {out / f'run.process{p.process_id}.json'}" in p.stderr
        row = next(line for line in p.stderr.splitlines() if line.startswith("train_step ("))
        calls, hits, compiles = row.split()[2:5]
        assert (calls, compiles) == (str(STEPS + 16), "1") and int(hits) == int(calls) - 1
    assert sorted(f.name for f in out.iterdir()) == ["run.process0.json", "run.process1.json"]
    for i in (0, 1):
        events = json.loads((out / f"run.process{i}.json").read_text())["traceEvents"]
        assert events[0]["args"]["name"] == f"fastdispatch trace, process {i} of 2"
        assert any(e["name"] == "train_step: launch" for e in events)


def test_the_example_trains_the_same_in_every_process():
    example = os.path.join(os.path.dirname(TESTS), "examples", "distributed_train.py")
    proc = subprocess.run(
        [sys.executable, example, "--steps", "48", "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    digests = {line.split()[-1] for line in proc.stdout.splitlines() if "final params digest" in line}
    assert len(digests) == 1, proc.stdout
    assert "process 0: exited 0" in proc.stdout and "process 1: exited 0" in proc.stdout


def test_the_benchmark_checks_then_times_every_process(tmp_path, capsys):
    from fastdispatch import bench

    out = tmp_path / "bench.json"
    assert bench.main(["--distributed", "--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 processes x 2 CPU devices, gloo over loopback" in printed
    assert "fd/jax call" in printed and "0 of 2" in printed and "1 of 2" in printed
    rows = json.loads(out.read_text())["rows"]
    assert [(row["process"], row["problems"]) for row in rows] == [(0, []), (1, [])]
    for row in rows:
        assert set(row["samples_us"]) == {"jax.jit", "fastdispatch", "raw"}
        assert row["fast_path"]["compiles"] == 1 and not row["fast_path"]["hand_offs"]
