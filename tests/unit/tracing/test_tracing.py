"""fastdispatch.tracing: the recorder's aggregates, the recompile explanations,
the trace file and the switch, driven by synthetic calls.

A fake compiled function stands in for the dispatcher's caller, and the
signatures are real ones, captured from fastdispatch.jit calls, so these tests
pin the aggregates, the explanations and the trace file exactly; tests/e2e
runs the whole dispatcher.
"""

import json
import re
import threading
import time

import jax
import jax.numpy as jnp
import pytest
from frontends import needs_flax

import fastdispatch
from fastdispatch import tracing
from fastdispatch.core import watch as _watch
from fastdispatch.tracing import recorder, report
from fastdispatch.tracing.explain import describe, explain_change
from fastdispatch.tracing.recorder import PHASES, Trace


def step(x):
    return x


class FakeCompiled:
    """What the recorder reads of a CompiledFunction."""

    def __init__(self, fun):
        self.__wrapped__ = fun
        self.__name__ = fun.__name__
        self.__qualname__ = fun.__qualname__


class _Capture:
    def record(self, fn, times, hit, compile_ns, hand_off, signature):
        self.signature = signature


def signature_of(fun, *args, jit_options=None, **kwargs):
    """The CallSignature fastdispatch.jit(fun) keys this call with."""
    capture = _Capture()
    _watch.set_trace_sink(capture)
    try:
        fastdispatch.jit(fun, **(jit_options or {}))(*args, **kwargs)
    finally:
        _watch.set_trace_sink(None)
    return capture.signature


def stamps(start, flatten=100, signature=200, lookup=300, launch=5000, unflatten=400):
    times = [start]
    for phase in (flatten, signature, lookup, launch, unflatten):
        times.append(times[-1] + phase)
    return tuple(times)


def call(t, fn, signature, *, hit=True, compile_ns=0, hand_off=None, start=0, **phases):
    t.record(fn, stamps(start, **phases), hit, compile_ns, hand_off, signature)


F = FakeCompiled(step)
SIG4 = signature_of(step, jnp.ones(4))
SIG8 = signature_of(step, jnp.ones(8))


def test_aggregates_count_calls_hits_compiles_and_hand_offs():
    t = Trace()
    call(t, F, SIG4, hit=False, compile_ns=2_000_000, lookup=2_000_300)
    for i in range(9):
        call(t, F, SIG4, start=10_000 * (i + 1))
    call(t, F, None, hit=False, hand_off="tracer")
    call(t, F, None, hit=False, hand_off="disable_jit")
    call(t, F, None, hit=False, hand_off="tracer")
    (row,) = t.stats().values()
    assert row["name"] == "step"
    assert row["location"].endswith(f"test_tracing.py:{step.__code__.co_firstlineno}")
    assert (row["calls"], row["hits"], row["compiles"]) == (13, 9, 1)
    assert row["compile_seconds"] == pytest.approx(0.002)
    assert row["hand_offs"] == {"tracer": 2, "disable_jit": 1}
    assert row["fallbacks"] == row["hand_offs"]  # the earlier key, kept for a release


def test_overhead_is_the_time_outside_launch_over_hits():
    t = Trace()
    # A miss (its time is its compilation) and a hand-off do not count.
    call(t, F, SIG4, hit=False, compile_ns=1_000_000, launch=1_005_000)
    call(t, F, SIG4, hit=False, hand_off="effects", unflatten=90_000)
    for i in range(99):
        call(t, F, SIG4, start=i * 10_000)
    overhead = t.stats()["step (" + t.stats().popitem()[1]["location"] + ")"]["overhead_ns"]
    # flatten 100 + signature 200 + lookup 300 + unflatten 400
    assert overhead["mean"] == 1000
    assert abs(overhead["p50"] - 1000) <= 1000 / 32
    assert abs(overhead["p99"] - 1000) <= 1000 / 32


def test_percentiles_follow_the_distribution():
    t = Trace()
    for i in range(1000):
        # overhead = 100 + 200 + 300 + unflatten; a slow tail of 2% at ~100 us
        call(t, F, SIG4, unflatten=100_000 if i % 50 == 0 else 400, start=i * 1_000_000)
    (row,) = t.stats().values()
    assert row["overhead_ns"]["p50"] == pytest.approx(1000, rel=0.04)
    assert row["overhead_ns"]["p99"] == pytest.approx(100_600, rel=0.04)
    assert row["phase_ns_mean"]["launch"] == 5000


def overhead_figures(text):
    """step's row of the report: its mean, p50 and third figure ("max 100.6" or "1.0")."""
    row = next(line for line in text.splitlines() if line.startswith("step ("))
    mean, p50, tail = re.search(r"([\d.]+) / ([\d.]+) / ((?:max )?[\d.]+)", row).groups()
    return float(mean), float(p50), tail


def test_few_hits_show_their_max_where_p99_would_be():
    # Three hits of 1 us and one of 100.6 us: a p99 of 4 samples is their max,
    # never a figure below the mean, and the report says which it shows.
    t = Trace()
    for i, unflatten in enumerate([400, 400, 100_000, 400]):
        call(t, F, SIG4, unflatten=unflatten, start=i * 1_000_000)
    t.stop()
    text = t.report()
    assert overhead_figures(text) == (25.9, 1.0, "max 100.6")
    assert f"below {report.P99_MIN_HITS} such hits, max: the slowest of them" in text
    (row,) = t.stats().values()
    assert row["overhead_ns"]["p99"] == pytest.approx(100_600, rel=0.02)


def test_enough_hits_show_p99():
    t = Trace()
    for i in range(report.P99_MIN_HITS):
        call(t, F, SIG4, unflatten=100_000 if i == 0 else 400, start=i * 1_000_000)
    t.stop()
    # One slow hit in 100 is above the 99th percentile: p99 is a fast one.
    assert overhead_figures(t.report()) == (2.0, 1.0, "1.0")


def test_aggregates_never_drop_though_the_event_ring_does():
    t = Trace(max_events=10)
    for i in range(recorder._FOLD_EVERY + 50):
        call(t, F, SIG4, start=i * 10_000)
    (row,) = t.stats().values()
    assert row["calls"] == recorder._FOLD_EVERY + 50
    spans = [e for e in t.chrome_trace()["traceEvents"] if e.get("cat") == "call"]
    assert len(spans) == 10


def test_functions_are_keyed_by_code_location():
    # A new jit wrapper of the same function (jit inside a loop) is one row.
    t = Trace()
    call(t, FakeCompiled(step), SIG4, hit=False, compile_ns=10)
    call(t, FakeCompiled(step), SIG4, hit=False, compile_ns=10)
    (row,) = t.stats().values()
    assert row["compiles"] == 2
    assert row["recompiles"][0]["changes"][0].startswith("signature unchanged")


def test_report_has_a_row_per_function_and_explains_recompiles():
    def other(y):
        return y

    t = Trace()
    call(t, F, SIG4, hit=False, compile_ns=5_000_000)
    call(t, F, SIG4)
    call(t, F, SIG8, hit=False, compile_ns=4_000_000)
    call(t, FakeCompiled(other), None, hit=False, hand_off="tracer")
    t.stop()
    text = t.report()
    assert "4 calls of 2 functions" in text
    step_row = next(line for line in text.splitlines() if line.startswith("step ("))
    assert step_row.split()[2:6] == ["3", "1", "2", "0.009"]
    other_row = next(line for line in text.splitlines() if "other" in line and "(" in line)
    assert other_row.rstrip().endswith("tracer 1")
    assert "compile 2:" in text
    assert "    x: f32[4] -> f32[8]" in text
    assert "overhead: time of a call outside its executable launch" in text


def test_no_report_line_is_over_160_characters_and_labels_keep_their_end():
    def a_function_whose_name_goes_on_and_on_well_past_what_a_table_column_can_hold(y):
        return y

    long = FakeCompiled(a_function_whose_name_goes_on_and_on_well_past_what_a_table_column_can_hold)
    t = Trace()
    for reason in ("tracer", "numpy arguments", "a new Python scalar value", "debug_nans or debug_infs"):
        call(t, long, None, hit=False, hand_off=reason)
    t.stop()
    text = t.report()
    assert max(len(line) for line in text.splitlines()) <= report.MAX_LINE
    row = next(line for line in text.splitlines() if "can_hold (" in line)
    assert row.startswith("...") and "test_tracing.py:" in row
    assert "tracer 1" in row
    everything = tracing.findings.summary(t)["functions"][0]
    assert everything["name"].endswith("can_hold")  # the JSON keeps the whole


def test_one_call_is_told_in_the_singular():
    t = Trace()
    call(t, F, SIG4)
    assert "1 call of 1 function in" in t.report()


def test_empty_report():
    assert "no compiled function was called" in Trace().report()


def test_a_process_of_a_multi_process_program_says_which_it_is(monkeypatch):
    t = Trace()
    call(t, F, SIG4)
    assert t.report().startswith("fastdispatch trace: 1 call of 1 function in")
    assert t.chrome_trace()["traceEvents"][0]["args"]["name"] == "fastdispatch trace"
    # Under jax.distributed (tests/distributed runs it for real):
    monkeypatch.setattr(recorder, "process_of_program", lambda: (1, 2))
    assert t.report().startswith("fastdispatch trace, process 1 of 2: 1 call of 1 function in")
    assert t.chrome_trace()["traceEvents"][0]["args"]["name"] == "fastdispatch trace, process 1 of 2"


# -- explanations --------------------------------------------------------------


def scaled(x, lr):
    return x, lr


def with_params(params, x=None):
    return params


def moded(x, mode):
    return x


X4 = jnp.ones(4)


def explained(old, new):
    return explain_change(describe(old), describe(new))


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (lambda: signature_of(step, X4), lambda: signature_of(step, jnp.ones(8)), ["x: f32[4] -> f32[8]"]),
        (
            lambda: signature_of(step, X4),
            lambda: signature_of(step, jnp.ones(4, jnp.int32)),
            ["x: f32[4] -> i32[4]"],
        ),
        (
            lambda: signature_of(scaled, X4, 0.5),
            lambda: signature_of(scaled, X4, jnp.float32(0.5)),
            ["lr: weak_type changed (f32[]{weak} -> f32[])"],
        ),
        (
            lambda: signature_of(moded, X4, mode="train", jit_options={"static_argnames": "mode"}),
            lambda: signature_of(moded, X4, mode="eval", jit_options={"static_argnames": "mode"}),
            ["static mode: 'train' -> 'eval'"],
        ),
        (
            lambda: signature_of(step, X4),
            lambda: signature_of(step, jax.device_put(X4, jax.devices()[0])),
            [f"x: f32[4], committed (on {jax.devices()[0]})"],
        ),
        (
            lambda: signature_of(with_params, {"a": X4}),
            lambda: signature_of(with_params, {"a": X4, "b": X4}),
            ["params: tree structure changed (key 'b' added)"],
        ),
        (
            lambda: signature_of(with_params, {"layer0": {"a": X4}}),
            lambda: signature_of(with_params, {"layer0": {"a": X4, "b": X4}}),
            ["params: tree structure changed (key 'b' added at params['layer0'])"],
        ),
        (
            lambda: signature_of(with_params, X4, x=[X4, X4, X4]),
            lambda: signature_of(with_params, X4, x=[X4, X4, X4, X4]),
            ["x: tree structure changed (list of 3 -> list of 4)"],
        ),
        (
            lambda: signature_of(with_params, (X4,)),
            lambda: signature_of(with_params, [X4]),
            ["arguments: tree structure changed (tuple -> list at params)"],
        ),
        (
            lambda: signature_of(step, X4),
            lambda: signature_of(step, X4),
            [
                "signature unchanged: compiled again (a new jit wrapper of the same function, "
                "or its entry was evicted from the cache)"
            ],
        ),
    ],
)
def test_explain_change(old, new, expected):
    assert explained(old(), new()) == expected


def test_a_sharding_change_names_only_what_changed():
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from fastdispatch.tracing.explain import ArgumentLeaf, Description, placement_change

    # Explicit axes, jax 0.10's default, named so that older jax does not warn.
    explicit = (jax.sharding.AxisType.Explicit,)
    mesh = jax.make_mesh((1,), ("batch",), axis_types=explicit)
    other = jax.make_mesh((1,), ("data",), axis_types=explicit)

    def leaf(sharding, aval="i32[8,4]"):
        return ArgumentLeaf((), "x", "x", aval, False, str(sharding) if sharding else "", sharding=sharding)

    # A spec reads as the installed jax writes it (P(...); PartitionSpec(...) before 0.9).
    assert placement_change(leaf(NamedSharding(mesh, P())), leaf(NamedSharding(mesh, P("batch")))) == (
        f"spec {P()!r} -> {P('batch')!r}"
    )
    assert placement_change(leaf(NamedSharding(mesh, P())), leaf(NamedSharding(other, P()))) == (
        "mesh ('batch': 1) -> ('data': 1)"
    )
    assert placement_change(leaf(NamedSharding(mesh, P())), leaf(NamedSharding(mesh, P()))) == ""
    committed = placement_change(leaf(None), leaf(NamedSharding(mesh, P())))
    assert committed == f"committed ({P()!r} on ('batch': 1))"
    # A key's physical P() and P(None,) are one logical sharding: no change.
    key = "key<fry>[]"
    was, now = leaf(NamedSharding(mesh, P()), key), leaf(NamedSharding(mesh, P(None)), key)
    assert placement_change(was, now) == ""
    [line] = explain_change(Description((was,), (), ()), Description((now,), (), ()))
    assert line.kind == "unchanged"


@needs_flax
def test_nnx_leaves_are_named_by_attribute_path(sink):
    from flax import nnx

    from fastdispatch import nnx as fnnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs)])
            self.dropout = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.dropout(self.layers[0](x))

    @fnnx.jit
    def step(model, x):
        return model(x)

    step(Net(nnx.Rngs(0)), jnp.ones((1, 2)))
    labels = [leaf.label for leaf in describe(sink.calls[-1].signature, ("model", "x")).args]
    assert "model.layers[0].kernel" in labels and "model.dropout.rngs.key" in labels, labels
    assert "x" in labels and not any("states" in label for label in labels), labels


def test_x64_and_other_settings_are_named():
    old = signature_of(step, 1)
    with jax.enable_x64(True):
        new = signature_of(step, 1)
    assert explained(old, new) == ["x: i32[]{weak} -> i64[]{weak}", "x64 mode changed (False -> True)"]
    with jax.default_device(jax.devices()[0]):
        moved = signature_of(step, 1)
    (line,) = explained(old, moved)
    assert line.startswith("jax_default_device: None -> ")


def test_keys_and_numpy_leaves_are_described():
    described = describe(signature_of(with_params, jax.random.key(0), x=jnp.zeros(2).__array__()))
    assert [(leaf.label, leaf.text) for leaf in described.args] == [
        ("params", "key<fry>[]"),
        ("x", "f32[2] (numpy)"),
    ]


def test_a_recompile_is_explained_against_the_closest_earlier_signature():
    t = Trace()
    a = signature_of(scaled, X4, X4)
    b = signature_of(scaled, jnp.ones(8), jnp.ones(8))
    c = signature_of(scaled, X4, jnp.ones(2))
    for signature in (a, b, c):
        call(t, F, signature, hit=False, compile_ns=1)
    (row,) = t.stats().values()
    assert row["recompiles"] == [
        {"compile": 2, "changes": ["x: f32[4] -> f32[8]", "lr: f32[4] -> f32[8]"]},
        {"compile": 3, "changes": ["lr: f32[4] -> f32[2]"]},
    ]


# -- Chrome trace file -----------------------------------------------------------


def test_trace_file_has_spans_per_call_phase_and_compile(tmp_path):
    t = Trace()
    # As the dispatcher stamps a miss: it compiles right after the lookup.
    call(t, F, SIG4, hit=False, compile_ns=1_000_000, launch=1_005_000, start=t.start_ns)
    worker = threading.Thread(
        target=call, args=(t, F, SIG4), kwargs={"start": t.start_ns + 10**7}, name="worker"
    )
    worker.start()
    worker.join()
    path = tmp_path / "run.json"
    t.save(path)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    for e in spans:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= e.keys()
    names = [e["name"] for e in spans]
    assert names.count("step") == 2
    assert names.count("step: compile") == 1
    for phase in PHASES:
        assert names.count(f"step: {phase}") == 2
    compile_span = next(e for e in spans if e["name"] == "step: compile")
    assert compile_span["dur"] == 1000.0  # microseconds
    assert compile_span["ts"] == pytest.approx(0.1 + 0.2 + 0.3)  # starts after the lookup
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {threading.main_thread().name, "worker"}
    assert len({e["tid"] for e in spans}) == 2


def test_zero_length_phases_are_left_out():
    t = Trace()
    t.record(F, (0, 100, 300, 300, 5000, 5100), True, 0, None, SIG4)
    names = [e["name"] for e in t.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    assert names == ["step", "step: flatten", "step: signature", "step: launch", "step: unflatten"]


def test_a_hand_off_is_one_jax_jit_span():
    t = Trace()
    t.record(F, (0, 9000, 9000, 9000, 9000, 9000), False, 0, "disable_jit", None)
    spans = [e for e in t.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["dur"]) for e in spans] == [("step", 9.0), ("step: jax.jit (disable_jit)", 9.0)]
    assert spans[0]["args"]["hand_off"] == "disable_jit"


def test_the_trace_keeps_no_compiled_function_alive():
    import gc
    import weakref

    t = Trace(max_events=10)
    fn = FakeCompiled(step)
    alive = weakref.ref(fn)
    for i in range(recorder._FOLD_EVERY):
        call(t, fn, SIG4, start=i)
    del fn
    gc.collect()
    assert alive() is None
    assert t._keys == {}
    (row,) = t.stats().values()
    assert row["calls"] == recorder._FOLD_EVERY


def test_a_live_function_keeps_no_finished_trace_alive():
    import gc
    import weakref

    t = Trace()
    call(t, F, SIG4)
    t.report()
    finished = weakref.ref(t)
    del t
    gc.collect()
    assert finished() is None


# -- the public API (through a fake sink setter) -----------------------------------


@pytest.fixture
def sinks(monkeypatch):
    """Captures what trace() installs as the dispatcher's sink."""
    installed = []
    monkeypatch.setattr(_watch, "set_trace_sink", installed.append)
    return installed


def test_trace_installs_and_removes_the_sink_and_nests(sinks):
    with tracing.trace() as outer:
        assert sinks[-1] is outer
        with tracing.trace() as inner:
            sinks[-1].record(F, stamps(0), True, 0, None, SIG4)
        assert sinks[-1] is outer
    assert sinks[-1] is None
    (outer_row,) = outer.stats().values()
    (inner_row,) = inner.stats().values()
    assert outer_row["calls"] == inner_row["calls"] == 1
    assert tracing.stats().keys() == outer.stats().keys()


def test_assert_max_compiles_passes_within_the_limit(sinks):
    with tracing.assert_max_compiles(1):
        sinks[-1].record(F, stamps(0), False, 10, None, SIG4)
        sinks[-1].record(F, stamps(0), True, 0, None, SIG4)
    assert sinks[-1] is None


def test_assert_max_compiles_names_the_function_and_the_change(sinks):
    with pytest.raises(AssertionError) as error:
        with tracing.assert_max_compiles(1):
            sinks[-1].record(F, stamps(0), False, 10, None, SIG4)
            sinks[-1].record(F, stamps(0), False, 10, None, SIG8)
    message = str(error.value)
    assert message.splitlines()[1:] == [
        "  first compile: x: f32[4]",
        "  compile 2: x: f32[4] -> f32[8]",
    ]
    assert message.startswith("step (") and "compiled 2 times (at most 1 allowed)" in message
    assert sinks[-1] is None


def test_assert_max_compiles_does_not_hide_the_blocks_own_error(sinks):
    with pytest.raises(KeyError):
        with tracing.assert_max_compiles(0):
            sinks[-1].record(F, stamps(0), False, 10, None, SIG4)
            raise KeyError("mine")


def test_a_python_scalar_that_becomes_an_array_is_named():
    # TrainState.create sets step=0, a Python int; the first step returns an array.
    f = fastdispatch.jit(lambda step: step + 1)
    with fastdispatch.trace() as t:
        f(f(0))
    (row,) = [r for r in t.stats().values() if r["compiles"] == 2]
    assert row["recompiles"][0]["changes"] == ["step: a Python int -> an array (i32[]{weak})"]


def test_trace_keeps_no_dropped_function_alive():
    # jax's api_test (test_jit_reference_dropping): once the jitted function
    # goes, what it closes over goes too, while a trace records its calls.
    import weakref

    with fastdispatch.trace() as t:
        x = jnp.ones(10)
        f = (lambda x: lambda: x)(x)
        g = fastdispatch.jit(f)
        x = weakref.ref(x)
        g()
        g()
        del f
        g()
        del g
        assert x() is None
    (row,) = t.stats().values()
    assert (row["calls"], row["compiles"]) == (3, 1)


class _Output:
    """An output the device is still computing (``busy``), or has computed."""

    def __init__(self, busy):
        self.busy = busy

    def is_ready(self):
        return not self.busy

    def block_until_ready(self):
        return self


def test_device_time_and_periods_make_the_verdict():
    t = Trace()
    for i in range(10):
        call(t, F, SIG4, start=i * 10_000)  # a call every 10 us
        if i in (3, 4):  # a burst: the first waits for the queue, the second counts
            launched = time.perf_counter_ns() - 50_000  # 50 us before the wait ends
            t.device_time(F, i - 3, i * 10_000, launched, [_Output(busy=True)])
    t.stop()
    stats = t.function_stats()[0]
    assert stats.device_calls == 1
    device = stats.device()
    # The periods after the waited calls (3 and 4) are not the program's.
    assert device["period_us"] == pytest.approx(10.0, rel=0.05)
    assert device["waited_calls"] == 1
    # The wait, run alone, past the launch (50 us), bounded by the period seen.
    assert device["device_us"] == pytest.approx(device["period_us"])
    assert device["verdict"] == "device-bound"  # at least 80% of the 10 us period
    assert stats.device_seconds() == pytest.approx(10 * device["device_us"] / 1e6)


def test_outputs_ready_before_the_wait_cost_the_device_nothing_past_the_launch():
    t = Trace()
    call(t, F, SIG4, start=0)
    t.device_time(F, 1, 0, 5_000, [_Output(busy=False)])
    call(t, F, SIG4, start=20_000)
    call(t, F, SIG4, start=40_000)
    t.stop()
    device = t.function_stats()[0].device()
    assert device["device_us"] == 0 and device["verdict"] == "host-bound"


def test_text_beside_the_report_is_fitted_to_its_width():
    names = ", ".join(f"jit(operation_{i}) x{i}" for i in range(20))
    text = f"warm start (/tmp/s): 1 loaded\n  57 compiled outside ({names}): eager operations\n  short\n"
    fitted = report.fit_lines(text)
    lines = fitted.splitlines()
    assert max(len(line) for line in lines) <= report.MAX_LINE
    assert lines[0] == "warm start (/tmp/s): 1 loaded" and lines[-1] == "  short"
    assert all(line.startswith("    ") for line in lines[2:-1])  # the wrapped line's continuation
    assert fitted.split() == text.split()  # every word kept, in order
    assert fitted.endswith("\n")


def test_the_split_says_what_the_garbage_collector_took():
    split = {
        "start_up": 1.0,
        "compiled_calls": 2.0,
        "compiling": 0.5,
        "compile_phases": {},
        "jax_cache": None,
        "eager_ops": 0.25,
        "host_syncs": 0.25,
        "rest": 1.0,
        "device_work": None,
        "garbage_collection": 0.5,
        "gc_collections": [120, 10, 2],
    }
    lines = report.format_split(split, 5.0)
    assert lines[-1] == (
        "  Python's garbage collector, inside the phases above: 0.500 s (10.0%), "
        "132 collections, 2 of them full"
    )
    assert not any(
        "garbage" in line for line in report.format_split(dict(split, garbage_collection=0.0), 5.0)
    )
