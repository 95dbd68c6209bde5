"""Shared helpers for the compat contract: one contract, two implementations.

Every test in tests/compat/ takes the ``jit`` fixture (conftest.py), which is
``jax.jit`` or ``fastdispatch.jit``; the jax run states what jax does today, the
fastdispatch run requires the same. Where a test can, it also computes jax.jit's
answer directly and compares the two (``expect_same``).
"""

from __future__ import annotations

import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# For tests whose every assertion compares jit with jax.jit: they run once, on
# fastdispatch. Tests that also assert values of their own (a dtype, a trace
# count, a message) keep both runs, so that the jax run checks jax says so.
against_jax = pytest.mark.parametrize("jit", ["fastdispatch"], indirect=True)


def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def assert_same_array(a, b) -> None:
    """``a`` and ``b`` are the same jax Array: type, values, dtype, weak type,
    shape, sharding and committedness (``committed``)."""
    assert type(a) is type(b), (type(a), type(b))
    assert isinstance(a, jax.Array), type(a)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.aval.weak_type == b.aval.weak_type, (a.aval, b.aval)
    assert a.sharding == b.sharding, (a.sharding, b.sharding)
    assert a.committed == b.committed, ("committed", a.committed, b.committed)
    if _is_key(a):
        assert jax.random.key_impl(a) == jax.random.key_impl(b)
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    if a.is_fully_addressable:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        return
    # A global array of a multi-process program: this process's shards.
    for shard_a, shard_b in zip(a.addressable_shards, b.addressable_shards, strict=True):
        assert (shard_a.device, shard_a.index) == (shard_b.device, shard_b.index)
        np.testing.assert_array_equal(np.asarray(shard_a.data), np.asarray(shard_b.data))


def assert_same_tree(a, b) -> None:
    """Same tree structure, and every pair of leaves the same: arrays through
    ``assert_same_array``, anything else (disable_jit results) by type and value."""
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b, (tree_a, tree_b)
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, jax.Array) or isinstance(y, jax.Array):
            assert_same_array(x, y)
        else:
            assert type(x) is type(y), (type(x), type(y))
            np.testing.assert_array_equal(x, y)


def expect_same(jit, fun, *args, jit_kwargs=None, **kwargs):
    """Call ``fun`` through ``jax.jit`` and through ``jit`` with the same options
    and arguments; require the same output tree. Returns ``jit``'s output.

    With ``jit`` being jax.jit (the jax run of a test that asserts values of its
    own) it only calls it: there is nothing to compare it with."""
    jit_kwargs = jit_kwargs or {}
    if jit is jax.jit:
        return jit(fun, **jit_kwargs)(*args, **kwargs)
    expected = jax.jit(fun, **jit_kwargs)(*args, **kwargs)
    got = jit(fun, **jit_kwargs)(*args, **kwargs)
    assert_same_tree(got, expected)
    return got


class TraceCounter:
    """Counts traces of a function: a Python side effect runs once per trace.

    ``count = TraceCounter(); f = count(fun)`` gives a function to jit whose
    every trace adds one to ``count.n``; ``functools.wraps`` keeps the
    signature, so static_argnames still resolve.
    """

    def __init__(self):
        self.n = 0
        self._lock = threading.Lock()

    def __call__(self, fun):
        @functools.wraps(fun)
        def counted(*args, **kwargs):
            with self._lock:
                self.n += 1
            return fun(*args, **kwargs)

        return counted


def arange(shape, dtype=jnp.float32):
    """A small deterministic jax array of ``shape``."""
    size = int(np.prod(shape))
    return jnp.arange(size, dtype=dtype).reshape(shape)
