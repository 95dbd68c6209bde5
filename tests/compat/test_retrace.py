"""Retrace counts: what makes a new trace, compared call by call with jax.jit."""

import jax
import jax.numpy as jnp
import numpy as np
from contract import TraceCounter, arange, assert_same_tree


def scaled(x, s):
    return x * s


def trace_counts(jit, fun, calls, **jit_kwargs):
    """Run ``calls`` (a list of (args, kwargs)) through ``jit(count(fun))`` and
    return the trace count after each call; outputs are checked against jax.jit
    of an independent counted copy, whose counts must be the same."""
    ours, theirs = TraceCounter(), TraceCounter()
    f, g = jit(ours(fun), **jit_kwargs), jax.jit(theirs(fun), **jit_kwargs)
    counts_ours, counts_theirs = [], []
    for args, kwargs in calls:
        assert_same_tree(f(*args, **kwargs), g(*args, **kwargs))
        counts_ours.append(ours.n)
        counts_theirs.append(theirs.n)
    assert counts_ours == counts_theirs
    return counts_ours


def test_same_signature_no_retrace(jit):
    x = arange((3,))
    calls = [((x, 2.0), {})] * 3 + [((x + 1, 3.0), {})] * 2
    assert trace_counts(jit, scaled, calls) == [1, 1, 1, 1, 1]


def test_numpy_and_jax_inputs_share_a_trace(jit):
    calls = [((jnp.ones(2), 2.0), {}), ((np.ones(2, np.float32), 2.0), {})]
    assert trace_counts(jit, scaled, calls) == [1, 1]


def test_shape_dtype_weak_type_retrace(jit):
    x = arange((3,))
    calls = [
        ((x, 2.0), {}),
        ((arange((4,)), 2.0), {}),  # shape
        ((arange((4,), jnp.int32), 2.0), {}),  # dtype
        ((x, np.float32(2.0)), {}),  # weak -> strong
        ((x, jnp.asarray(2.0)), {}),  # weak jax scalar: same as the Python float
        ((x, 2), {}),  # int instead of float
        ((x, 2.0), {}),  # back to the first signature
    ]
    assert trace_counts(jit, scaled, calls) == [1, 2, 3, 4, 4, 5, 5]


def test_committed_input_no_retrace(jit):
    device = jax.devices()[0]
    calls = [((jnp.ones(2), 2.0), {}), ((jax.device_put(jnp.ones(2), device), 2.0), {})]
    assert trace_counts(jit, scaled, calls) == [1, 1]


def test_static_value_retrace(jit):
    calls = [((1.0, 2), {}), ((1.0, 2), {}), ((1.0, 3), {}), ((1.0,), dict(s=3))]
    counts = trace_counts(jit, scaled, calls, static_argnums=1)
    assert counts[:3] == [1, 1, 2]


def test_keyword_vs_positional_and_order(jit):
    calls = [
        ((1.0, 2.0), {}),
        ((1.0,), dict(s=2.0)),
        ((), dict(x=1.0, s=2.0)),
        ((), dict(s=2.0, x=1.0)),
    ]
    counts = trace_counts(jit, scaled, calls)
    assert counts[2] == counts[3]  # keyword order never matters


def test_tree_structure_retrace(jit):
    def total(t):
        return sum(jax.tree_util.tree_leaves(t))

    calls = [
        (({"a": 1.0, "b": 2.0},), {}),
        (({"b": 2.0, "a": 1.0},), {}),
        (({"a": 1.0, "c": 2.0},), {}),
        (([1.0, 2.0],), {}),
        (((1.0, 2.0),), {}),
        (((1.0, None),), {}),
    ]
    assert trace_counts(jit, total, calls) == [1, 1, 2, 3, 4, 5]


def test_x64_retrace(jit):
    count = TraceCounter()
    f = jit(count(scaled))
    f(1.0, 2.0)
    with jax.enable_x64(True):
        assert f(1.0, 2.0).dtype == jnp.float64
    assert f(1.0, 2.0).dtype == jnp.float32
    assert count.n == 2


def test_cache_size_and_clear_cache(jit):
    f = jit(scaled)
    s = jnp.float32(2)
    f(arange(()), s)
    f(arange((2,)), s)
    f(arange((2,)), s)
    assert f._cache_size() == 2
    f._clear_cache()
    assert f._cache_size() == 0
    f(arange(()), s)
    assert f._cache_size() == 1
    f.clear_cache()
    assert f._cache_size() == 0


def test_cache_size_counts_every_argument_kind(jit):
    # User test suites count compiles with _cache_size(): every call that
    # compiled counts, whatever its argument types (Python scalars, numpy).
    f = jit(scaled)
    f(1.0, 2.0)
    assert f._cache_size() == 1
    f(np.ones(2, np.float32), 2.0)
    assert f._cache_size() == 2
    f(np.ones(2, np.float32), np.float32(2))
    assert f._cache_size() == 3
    f(1.0, 2.0)
    assert f._cache_size() == 3
