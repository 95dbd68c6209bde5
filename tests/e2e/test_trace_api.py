"""The Python tracing API on the real dispatcher: trace(), stats(),
assert_max_compiles()."""

import json

import jax
import jax.numpy as jnp
import pytest

import fastdispatch


def test_trace_records_every_call_and_reports_it(tmp_path):
    @fastdispatch.jit
    def add(x, y):
        return x + y

    with fastdispatch.trace() as t:
        for _ in range(5):
            add(jnp.ones(3), jnp.ones(3))
    add(jnp.ones(3), jnp.ones(3))  # after the block: not traced

    (row,) = [r for r in t.stats().values() if r["name"].endswith("add")]
    assert (row["calls"], row["hits"], row["compiles"]) == (5, 4, 1)
    assert row["compile_seconds"] > 0
    assert row["hand_offs"] == {}
    overhead = row["overhead_ns"]
    assert 0 < overhead["p50"] <= overhead["p99"]
    assert overhead["mean"] < row["call_seconds"] * 1e9 / 5
    assert "add (tests/e2e/test_trace_api.py:" in t.report()
    assert fastdispatch.stats().keys() == t.stats().keys()

    t.save(tmp_path / "t.json")
    spans = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    assert sum(e["name"].endswith("add") for e in spans) == 5


def test_assert_max_compiles_passes_when_nothing_recompiles():
    @fastdispatch.jit
    def mul(x):
        return x * 3

    with fastdispatch.assert_max_compiles(1):
        for _ in range(3):
            mul(jnp.ones(4))


def test_assert_max_compiles_names_the_function_and_what_changed():
    @fastdispatch.jit
    def sub(x):
        return x - 1

    with pytest.raises(AssertionError) as error:
        with fastdispatch.assert_max_compiles(1):
            sub(jnp.ones(4))
            sub(jnp.ones(8))
    message = str(error.value)
    assert "sub (tests/e2e/test_trace_api.py:" in message
    assert "compiled 2 times (at most 1 allowed)" in message
    assert "compile 2: x: f32[4] -> f32[8]" in message


def test_hand_offs_under_grad_are_recorded_with_their_reason():
    @fastdispatch.jit
    def square(x):
        return (x * x).sum()

    with fastdispatch.trace() as t:
        jax.grad(square)(jnp.ones(2))
    (row,) = [r for r in t.stats().values() if r["name"].endswith("square")]
    assert row["hand_offs"] == {"tracer": 1}
    assert row["compiles"] == 0


def test_each_thread_gets_its_own_named_track():
    import threading

    @fastdispatch.jit
    def neg(x):
        return -x

    x = jnp.ones(2)
    neg(x)
    with fastdispatch.trace() as t:
        neg(x)
        worker = threading.Thread(target=neg, args=(x,), name="loader")
        worker.start()
        worker.join()
    events = t.chrome_trace()["traceEvents"]
    calls = [e for e in events if e["ph"] == "X" and e["name"].endswith("neg")]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(names[e["tid"]] for e in calls) == ["MainThread", "loader"]
