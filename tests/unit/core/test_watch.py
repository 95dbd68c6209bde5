"""core.watch: what --trace's sink is given of each call (jax.profiler's spans:
tests/e2e/test_profiler.py)."""

import jax.numpy as jnp
import pytest

import fastdispatch
from fastdispatch import _reasons
from fastdispatch.core import watch


class Sink:
    """A trace sink that keeps what it is given."""

    def __init__(self):
        self.records = []
        self.samples = []

    def record(self, function, times, hit, compile_ns, reason, signature):
        self.records.append((function, times, hit, compile_ns, reason, signature))

    def device_time(self, function, index, start, launched, outputs):
        self.samples.append((function, index, start, launched, outputs))


@pytest.fixture
def sink():
    sink = Sink()
    watch.set_trace_sink(sink)
    yield sink
    watch.set_trace_sink(None)


def test_one_record_a_call_with_its_stamps_in_order(sink):
    f = fastdispatch.jit(lambda x: x * 2)
    x = jnp.ones(3)
    f(x)
    f(x)
    (miss, hit) = sink.records
    for function, times, _, _, reason, signature in (miss, hit):
        assert function is f and reason is None and signature is not None
        assert len(times) == 6 and all(times) and list(times) == sorted(times)
    assert (miss[2], hit[2]) == (False, True)
    assert miss[3] > 0 and hit[3] == 0  # ns compiling


def test_a_hand_off_is_recorded_with_its_reason(sink):
    f = fastdispatch.jit(lambda x: x + 1)
    f(jnp.ones(2))
    with pytest.raises(TypeError):
        f("text")
    (_, times, hit, _, reason, _) = sink.records[-1]
    assert not hit and reason == _reasons.UNSUPPORTED_LEAF and list(times) == sorted(times)


def test_device_time_samples_bursts_of_each_function_s_launches(sink):
    sampling = watch.DEVICE_SAMPLING
    burst = sampling["burst"]
    f = fastdispatch.jit(lambda x: x - 1)
    g = fastdispatch.jit(lambda x: x + 1)
    x = jnp.ones(2)
    f(x), g(x)  # misses: no launch of the fast path's
    for _ in range(sampling["first"] + sampling["every"]):
        f(x), g(x)  # interleaved: each function keeps its own count
    bursts = sampling["first"] // sampling["every_first"] + 1
    for function in (f, g):
        indices = [index for fn, index, _, _, _ in sink.samples if fn is function]
        assert indices == list(range(burst)) * bursts
    for _, _, start, launched, outputs in sink.samples:
        assert 0 < start <= launched and len(outputs) == 1


def test_no_sink_no_record():
    sink = Sink()
    watch.set_trace_sink(sink)
    watch.set_trace_sink(None)
    f = fastdispatch.jit(lambda x: x / 2)
    f(jnp.ones(2))
    assert sink.records == [] and sink.samples == []


def test_an_output_of_the_latest_calls_names_its_function(sink):
    f = fastdispatch.jit(lambda x: (x * 2, x + 1))
    g = fastdispatch.jit(lambda x: x - 1)
    x = jnp.ones(2)
    f(x)  # a miss: returned through jax.jit, not watched on the fast path
    doubled, _ = f(x)
    assert watch.output_owner(doubled) == id(f)
    assert watch.output_owner(x) is None  # an input, not an output
    for _ in range(5):  # the first a miss, then 4 latest calls: f's is pushed out
        g(x)
    assert watch.output_owner(doubled) is None
    watch.set_trace_sink(None)
    assert watch.output_owner(g(x)) is None  # unwatched: not kept
