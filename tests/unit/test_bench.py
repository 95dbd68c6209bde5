"""Smoke tests of the benchmark harness: it runs, checks outputs, reports; no timing asserted."""

import json

import jax
import jax.numpy as jnp
import pytest

from fastdispatch import bench
from fastdispatch.bench import report
from fastdispatch.bench.dispatch import WORKLOADS
from fastdispatch.bench.runner import FASTDISPATCH, JAX, RAW, Impl, implementations, run_workload

WORKLOAD = {w.name: w for w in WORKLOADS}


def tiny_run(name, impls=None):
    return run_workload(WORKLOAD[name], impls or implementations(), repeats=2, target_s=0.001)


def test_two_arrays_runs_against_jax_and_the_raw_limit():
    result = tiny_run("two_arrays")
    assert not result.error
    assert result.calls >= 1
    for name in (JAX, RAW):
        assert len(result.samples[name]) == 2
        assert all(us > 0 for us in result.samples[name])
    # fastdispatch imports here, so it is timed: its outputs matched jax.jit's.
    assert [i.unavailable for i in implementations() if i.name == FASTDISPATCH] == [""]
    assert len(result.samples[FASTDISPATCH]) == 2, result.skipped
    assert result.ratio() > 0


def test_donated_workload_with_outputs_fed_back():
    result = tiny_run("sgd_donated")
    assert not result.error
    assert len(result.samples[JAX]) == 2 and len(result.samples[RAW]) == 2


def test_device_put_row_times_given_functions():
    result = tiny_run("device_put_8")
    assert not result.error
    assert {JAX, FASTDISPATCH, RAW} <= set(result.samples), result.skipped
    assert result.ratio() > 0


def test_effect_rows_run_quietly_with_their_raw_limit(capfd):
    for name in ("debug_print", "ordered_callback"):
        result = tiny_run(name)
        assert not result.error
        assert {JAX, FASTDISPATCH, RAW} <= set(result.samples), result.skipped
    assert "x = " not in capfd.readouterr().out  # debug_print's stdout went to os.devnull


def test_an_implementation_that_differs_from_jax_is_not_timed():
    def to_bfloat16(w):
        return jax.jit(lambda x, y: (x + y).astype(jnp.bfloat16))

    result = tiny_run("two_arrays", [Impl(FASTDISPATCH, to_bfloat16)])
    assert FASTDISPATCH not in result.samples
    assert "dtype bfloat16" in result.skipped[FASTDISPATCH]


def test_report_table_summary_and_json():
    results = [tiny_run("two_arrays")]
    table = report.format_table(results, show_equinox=False)
    assert "two arrays" in table and "raw" in table
    assert "two-array overhead" in report.format_summary(report.summary(results))
    json.dumps(report.to_json(results, {"command": "test"}))


def test_main_quick_with_json(tmp_path, capsys):
    # Backends started first: main can't (and mustn't) change this session's devices.
    devices = jax.device_count()
    out = tmp_path / "bench.json"
    assert bench.main(["--only", "identity", "--quick", "--json", str(out)]) == 0
    assert jax.device_count() == devices
    printed = capsys.readouterr().out
    assert "command: python -m fastdispatch bench --only identity --quick" in printed
    assert "jax " + jax.__version__ in printed
    data = json.loads(out.read_text())
    assert [row["name"] for row in data["rows"]] == ["identity"]
    assert data["metadata"]["jax"] == jax.__version__


def test_only_selects_workloads_and_groups():
    assert bench.select("pytree") == ([], True)
    workloads, pytree_group = bench.select("identity,dispatch")
    assert [w.name for w in workloads] == [w.name for w in WORKLOADS] and not pytree_group


def test_unknown_workload_is_refused():
    with pytest.raises(ValueError, match="unknown workload"):
        bench.select("no_such_workload")


def test_host_routes_all_run(capsys):
    from fastdispatch.bench import host

    for group in host.routes().values():
        timings = host.measure(group, repeats=1, target_s=0.0005)
        assert set(timings) == set(group) and all(us > 0 for us in timings.values())
    assert host.main(["--repeats", "1"]) == 0
    assert "batched_device_put" in capsys.readouterr().out
