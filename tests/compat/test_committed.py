"""Committed and uncommitted inputs, and the committedness of outputs."""

import jax
import jax.numpy as jnp
import numpy as np
from contract import against_jax, arange, expect_same


def add(x, y):
    return x + y


def test_uncommitted_inputs(jit):
    x = arange((3,))
    assert not x.committed
    out = expect_same(jit, add, x, 1.0)
    assert not out.committed
    assert not expect_same(jit, add, np.ones(3, np.float32), 1.0).committed
    assert not expect_same(jit, add, 1.0, 2).committed


def test_committed_input_commits_output(jit):
    device = jax.devices()[0]
    x = jax.device_put(arange((3,)), device)
    assert x.committed
    out = expect_same(jit, add, x, 1.0)
    assert out.committed and out.sharding == jax.sharding.SingleDeviceSharding(device)
    out = expect_same(jit, add, jnp.ones(3), x)
    assert out.committed


def test_device_put_without_device_stays_uncommitted(jit):
    x = jax.device_put(np.arange(3, dtype=np.float32))
    assert not x.committed
    assert not expect_same(jit, add, x, x).committed


def test_committed_then_uncommitted_same_function(jit):
    # One function, the same shapes, committed and uncommitted in turn: each
    # output carries the committedness of its own call.
    f = jit(add)
    device = jax.devices()[0]
    for committed in [False, True, False, True]:
        x = jax.device_put(arange((2,)), device) if committed else arange((2,))
        assert f(x, 1.0).committed == committed


@against_jax
def test_explicit_device_option(jit):
    # jit(..., device=) is deprecated in jax but still accepted; check what jax warns.
    import warnings

    device = jax.devices()[0]
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        expected = jax.jit(add, device=device)(arange((2,)), 1.0)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        got = jit(add, device=device)(arange((2,)), 1.0)
    assert [(w.category, str(w.message)) for w in ours] == [(w.category, str(w.message)) for w in theirs]
    assert got.committed == expected.committed
    assert got.sharding == expected.sharding
