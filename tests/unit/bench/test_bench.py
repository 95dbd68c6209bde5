"""Smoke tests of the benchmark harness: it runs, checks outputs, reports; no timing asserted."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import pytest
from frontends import needs_equinox, needs_flax

from fastdispatch import bench
from fastdispatch.bench import dispatch, eqx, nnx, report
from fastdispatch.bench.runner import FASTDISPATCH, RAW, Impl, run_workload

WORKLOAD = {w.name: w for group in bench.GROUPS.values() for w in group.workloads}


def tiny_run(name, impls):
    return run_workload(WORKLOAD[name], impls, repeats=2, target_s=0.001)


def test_two_arrays_runs_against_jax_and_the_raw_limit():
    result = tiny_run("two_arrays", dispatch.implementations())
    assert not result.error and result.reference == dispatch.JAX
    assert result.calls >= 1
    for name in (dispatch.JAX, RAW):
        assert len(result.samples[name]) == 2
        assert all(us > 0 for us in result.samples[name])
    # fastdispatch imports here, so it is timed: its outputs matched jax.jit's.
    assert len(result.samples[FASTDISPATCH]) == 2, result.skipped
    assert result.ratio() > 0


def test_donated_workload_with_outputs_fed_back():
    result = tiny_run("sgd_donated", dispatch.implementations())
    assert not result.error
    assert len(result.samples[dispatch.JAX]) == 2 and len(result.samples[RAW]) == 2
    assert "donate only the first argument" in result.skipped[dispatch.EQUINOX]


def test_the_raw_limit_of_a_loop_fed_back_runs_on_its_outputs():
    from fastdispatch.bench.raw import raw_runner

    def step(params, key, lr):
        new_key, sub = jax.random.split(key)
        return {k: v - lr * jax.random.normal(sub, v.shape) for k, v in params.items()}, new_key, lr * 1.0

    params, key = {"w": jnp.ones(3), "b": jnp.zeros(2)}, jax.random.key(0)
    compiled = jax.jit(step).lower(params, key, 0.5).compile()
    run = raw_runner(compiled, (params, key, 0.5), feed_back=True)
    for _ in range(3):
        got = run()
    expected = (params, key, 0.5)
    for _ in range(3):
        expected = step(*expected)
    # The params and the typed key are fed back (their avals lead the outputs);
    # lr is not: a Python float in, an array out, it ends the prefix.
    want = [*jax.tree_util.tree_leaves(expected[0]), jax.random.key_data(expected[1])]
    assert [g.tolist() for g in got[:2]] == [w.tolist() for w in want[:2]]
    assert jax.random.key_data(got[2]).tolist() == want[2].tolist()
    same = raw_runner(compiled, (params, key, 0.5))  # the first call's inputs, every call
    assert same()[0].tolist() == same()[0].tolist()


def test_equinox_rows_run_against_equinox_and_its_executable():
    for name in ("eqx_forward", "eqx_static_fields"):
        result = tiny_run(name, eqx.implementations())
        assert not result.error and result.reference == eqx.EQX
        assert len(result.samples[FASTDISPATCH]) == 2, result.skipped
        assert len(result.samples[RAW]) == 2, result.skipped
        assert not result.hand_offs


@needs_equinox
def test_the_equinox_training_step_s_raw_limit_runs_on_the_model_it_returned():
    import equinox

    (workload,) = [w for w in eqx.WORKLOADS if w.name == "eqx_train_step"]
    run, own_outputs = workload.raw(workload)
    args, kwargs = workload.make_args()
    model, value = args[0], None
    for _ in range(3):
        got = run()
        model, value = equinox.filter_jit(workload.fun)(model, *args[1:], **kwargs)
    # Past equinox's marker, the model's leaves, then the loss: each call on
    # the model the last one returned, as the loop's own calls are.
    assert own_outputs == 1
    arrays = jax.tree.leaves(equinox.filter(model, equinox.is_array))
    assert [leaf.tolist() for leaf in got[1:-1]] == [leaf.tolist() for leaf in arrays]
    assert got[-1].tolist() == value.tolist()


@needs_flax
def test_nnx_rows_run_against_flax_and_its_executable():
    result = tiny_run("nnx_mlp_adam", nnx.implementations())
    assert not result.error and result.reference == nnx.NNX
    for name in (nnx.TREE, nnx.CACHED, FASTDISPATCH, nnx.FD_CACHED, RAW):
        assert len(result.samples[name]) == 2, result.skipped
    # Fresh objects of a structure compiled before: the call on a graph no
    # record proves yet is split and finds that entry, then a record serves.
    assert not result.hand_offs
    assert [item["name"] for item in report.nnx_summary([result])][0] == "fd/nnx.jit, MLP + Adam step"


@needs_flax
def test_array_attributes_row_checks_their_updates():
    result = tiny_run("array_attributes", nnx.implementations())
    assert not result.error
    assert {nnx.NNX, FASTDISPATCH, RAW} <= set(result.samples), result.skipped
    # Tree mode leaves raw array attributes as they were: its losses differ.
    assert "values differ" in result.skipped[nnx.TREE]


def test_hand_off_rows_hand_off_for_their_reason():
    impls = dispatch.implementations()
    results = [tiny_run(name, impls) for name in ("hand_off_numpy_tree", "hand_off_scalar_conversion")]
    for result in results:
        assert not result.error
        assert {dispatch.JAX, FASTDISPATCH} <= set(result.samples), result.skipped
        assert result.workload.hand_off in result.hand_offs
    assert RAW in results[0].samples and "calls raise" in results[1].skipped[RAW]
    items = report.dispatch_summary(results)
    assert "geomean" in items[0]["name"] and items[0]["value"] is None  # hand-offs are not in it
    # The numpy row's floor is the raw call plus the transfer of its numpy leaf.
    assert results[0].raw_host_transfers == 1
    assert [item["target"] for item in items[2:]] == [report.HOST_DATA_TARGET] + [
        report.HAND_OFF_TARGET_US
    ] * 2
    table = report.format_table(results, [impl.name for impl in impls])
    assert "EXPECTED" not in table


def test_raising_row_compares_errors():
    def no_static(w):
        return jax.jit(w.fun)  # the list is traced, not hashed: no error

    result = tiny_run("hand_off_static_error", [dispatch.implementations()[0], Impl(FASTDISPATCH, no_static)])
    assert not result.error and dispatch.JAX in result.samples
    assert "Raised(type='ValueError'" in result.skipped[FASTDISPATCH]


def test_a_row_whose_library_is_missing_says_so():
    w = dataclasses.replace(WORKLOAD["two_arrays"], needs=("no_such_module_here",))
    result = run_workload(w, dispatch.implementations(), repeats=2, target_s=0.001)
    assert result.error == "needs no_such_module_here: not installed"


@needs_flax
def test_trainstate_row_on_numpy_batches():
    # flax comes with the test extra: the row must run, not report "needs flax".
    result = tiny_run("trainstate_np_u8", dispatch.implementations())
    assert not result.error
    assert {dispatch.JAX, FASTDISPATCH, RAW} <= set(result.samples), result.skipped
    assert result.hand_offs == {"numpy arguments": 3}


def test_device_batch_row_runs_on_the_fast_path():
    # Each batch's arrays hold objects of their own: taken by the guard, not handed off.
    result = tiny_run("device_batch", dispatch.implementations())
    assert not result.error and not result.hand_offs
    assert len(result.samples[FASTDISPATCH]) == 2 and len(result.samples[RAW]) == 2


def test_device_put_row_times_given_functions():
    result = tiny_run("device_put_8", dispatch.implementations())
    assert not result.error
    assert {dispatch.JAX, FASTDISPATCH, RAW} <= set(result.samples), result.skipped
    assert result.ratio() > 0


def test_effect_rows_run_quietly_with_their_raw_limit(capfd):
    for name in ("debug_print", "ordered_callback"):
        result = tiny_run(name, dispatch.implementations())
        assert not result.error
        assert {dispatch.JAX, FASTDISPATCH, RAW} <= set(result.samples), result.skipped
    assert "x = " not in capfd.readouterr().out  # debug_print's stdout went to os.devnull


def test_an_implementation_that_differs_from_the_reference_is_not_timed():
    def to_bfloat16(w):
        return jax.jit(lambda x, y: (x + y).astype(jnp.bfloat16))

    result = tiny_run("two_arrays", [dispatch.implementations()[0], Impl(FASTDISPATCH, to_bfloat16)])
    assert FASTDISPATCH not in result.samples
    assert "dtype bfloat16" in result.skipped[FASTDISPATCH]


def test_report_table_summary_and_json():
    impls = dispatch.implementations()
    results = [tiny_run("two_arrays", impls)]
    table = report.format_table(results, [impl.name for impl in impls])
    assert "two arrays" in table and "raw" in table and "fd/jax.jit" in table
    items = report.dispatch_summary(results)
    assert "two-array overhead" in report.format_summary(items)
    json.dumps(report.to_json(results, {"command": "test"}, {"dispatch": items}))


def test_main_quick_with_json(tmp_path, capsys):
    # Backends started first: main can't (and mustn't) change this session's devices.
    devices = jax.device_count()
    out = tmp_path / "bench.json"
    assert bench.main(["--only", "identity,eqx_forward", "--quick", "--json", str(out)]) == 0
    assert jax.device_count() == devices
    printed = capsys.readouterr().out
    assert "command: python -m fastdispatch bench --only identity,eqx_forward --quick" in printed
    assert "jax " + jax.__version__ in printed
    assert "dispatch: jax.jit and fastdispatch.jit" in printed and "fd/eqx.filter_jit" in printed
    data = json.loads(out.read_text())
    assert [row["name"] for row in data["rows"]] == ["identity", "eqx_forward"]
    assert set(data["summary"]) == {"dispatch", "equinox"}
    assert data["metadata"]["jax"] == jax.__version__


def test_only_selects_workloads_and_groups():
    assert bench.select("pytree") == ({}, True)
    selected, pytree_group = bench.select("identity,dispatch")
    assert list(selected) == ["dispatch"] and not pytree_group
    assert [w.name for w in selected["dispatch"]] == [w.name for w in dispatch.WORKLOADS]
    selected, _ = bench.select("eqx_deep")
    assert {name: [w.name for w in ws] for name, ws in selected.items()} == {"equinox": ["eqx_deep"]}


def test_unknown_workload_is_refused():
    with pytest.raises(ValueError, match="unknown workload"):
        bench.select("no_such_workload")


def test_distributed_rows_give_paired_ratios_per_process():
    from fastdispatch.bench import distributed

    samples = {
        "jax.jit": {"call": [20.0, 10.0], "step": [3000.0, 3000.0]},
        "fastdispatch": {"call": [10.0, 10.0], "step": [2400.0, 3300.0]},
        "raw": {"call": [9.0, 9.0], "step": [2400.0, 3300.0]},
    }
    fast = {"calls": 16, "hits": 15, "compiles": 1, "hand_offs": {}}
    row = {
        "process": 0,
        "processes": 2,
        "devices": 4,
        "problems": [],
        "fast_path": fast,
        "samples_us": samples,
    }
    assert distributed.paired_ratio(samples, "call") == 0.75  # median of 0.5 and 1.0
    text = distributed.format_rows([row, dict(row, process=1, problems=["the shard differs"])], 2, 32)
    lines = text.splitlines()
    assert lines[2].split()[:2] == ["process", "jax.jit"]
    assert lines[3].split() == ["0", "of", "2", "15.0", "10.0", "9.0", "0.750", "3000.0", "2850.0", "0.950"]
    assert "process 1: PROBLEM: the shard differs" in text


def test_distributed_takes_no_workload_selection(capsys):
    assert bench.main(["--distributed", "--only", "identity"]) == 2
    assert "do not apply to --distributed" in capsys.readouterr().err


def test_host_routes_all_run(capsys):
    from fastdispatch.bench import host

    for group in host.routes().values():
        timings = host.measure(group, repeats=1, target_s=0.0005)
        assert set(timings) == set(group) and all(us > 0 for us in timings.values())
    assert host.main(["--repeats", "1"]) == 0
    assert "batched_device_put" in capsys.readouterr().out


def test_trace_cost_runs_each_program_with_and_without_trace():
    from fastdispatch.bench import trace_cost

    names = [name for name, _ in trace_cost.programs()]
    assert names == ["README example (train_mlp.py)", "10,000 small calls"]
    script = [trace_cost.programs()[1][1][0], "100"]
    row = trace_cost.bench_program("100 small calls", script, repeats=1, cwd=".")
    assert row["error"] is None and row["same_output"]
    assert [len(row["samples_s"][mode]) for mode in trace_cost.MODES] == [1, 1]
    assert row["ratio"] == row["traced_wall_s"] / row["untraced_wall_s"] and row["best_ratio"] > 0
    text = trace_cost.format_table([row, {"program": "broken", "error": "exited 1"}], repeats=1)
    assert "100 small calls" in text and "broken" in text and "exited 1" in text


def test_trace_cost_takes_no_workload_selection(capsys):
    assert bench.main(["--trace-cost", "--only", "identity"]) == 2
    assert "do not apply to --trace-cost" in capsys.readouterr().err


def _cold_sample(first_s, steady_us, loaded=0, written=0, reasons=()):
    counts = {"loaded": loaded, "missed": 0, "written": written, "not_stored": list(reasons)}
    return {"first_s": first_s, "steady_us": steady_us, "loss": 1.5, "warm_start": counts}


def test_cold_start_rows_say_the_ratios_and_whether_the_store_was_used():
    from fastdispatch.bench import cold_start

    stored = {
        "no cache": [_cold_sample(3.0, 110), _cold_sample(5.0, 130)],
        "jax cache": [_cold_sample(1.0, 100), _cold_sample(1.4, 120)],
        "fd filling": [_cold_sample(3.2, 100, written=1), _cold_sample(3.6, 100, written=1)],
        "fd warm": [_cold_sample(0.2, 90, loaded=1), _cold_sample(0.4, 100, loaded=1)],
    }
    row = cold_start.summarize("nnx-split", stored)
    medians = {"no cache": 4.0, "jax cache": 1.2, "fd filling": 3.4, "fd warm": 0.3}
    assert row["first_s"] == pytest.approx(medians)
    assert row["warm_over_jax_cache"] == pytest.approx(0.25)
    assert row["steady_warm_over_filling"] == pytest.approx(0.95)
    assert row["store_used"] and row["same_loss"] and row["not_stored"] == []
    unstored = {mode: [_cold_sample(1.0, 50)] for mode in cold_start.MODES}
    refused = dict(unstored, **{"fd warm": [_cold_sample(1.0, 50, reasons=["not stored: step takes X"])]})
    readme = {
        "program": "README example (train_mlp.py)",
        "error": None,
        "cold_wall_s": 8.0,
        "warm_wall_s": 6.0,
        "ratio": 0.75,
        "warm_start": "3 loaded, 0 missed, 0 written, 0 damaged, 0 evicted",
        "same_output": True,
    }
    rows = [
        row,
        cold_start.summarize("eqx", unstored),
        cold_start.summarize("nnx-jit", refused),
        {"program": "nnx-jit", "error": "nnx-jit, fd warm exited 1: boom"},
    ]
    lines = cold_start.format_table(rows, readme, repeats=2, calls=20).splitlines()
    assert lines[2].split("  ")[0].strip() == "NNX transformer, jax.jit over split/merge"
    assert lines[2].split()[-11:-3] == ["4.00", "1.20", "3.40", "0.30", "0.25", "100", "95", "0.95"]
    assert lines[2].endswith("yes (1 loaded)")
    assert lines[3].split()[-1] == "no" and lines[4].split()[-1] == "no"
    text = "\n".join(lines)
    assert "equinox MLP, filter_jit: nothing loaded or written, no reason" in text
    assert "NNX transformer, nnx.jit: not stored: step takes X" in text
    assert "boom" in text
    assert "empty store 8.00 s, filled 6.00 s, filled/empty 0.75" in text and "3 loaded" in text


def test_cold_start_program_reports_its_first_call_and_the_store(tmp_path):
    from fastdispatch.bench import cold_start

    launcher = cold_start.warm_start_argv(str(tmp_path / "store"))
    sample, error = cold_start.run_model(launcher, cold_start.clean_environment(), "eqx", 2, 1, "eqx")
    assert error is None
    assert sample["first_s"] > 0 and sample["steady_us"] > 0 and sample["loss"] > 0
    assert set(sample["warm_start"]) == {"loaded", "missed", "written", "not_stored"}


def test_cold_start_takes_no_other_mode_and_only_its_programs(capsys):
    assert bench.main(["--cold-start", "--programs"]) == 2
    assert "do not apply to --cold-start" in capsys.readouterr().err
    assert bench.main(["--cold-start", "--only", "identity"]) == 2
    assert "unknown program identity; known: nnx-split, nnx-jit, eqx, readme" in capsys.readouterr().err
