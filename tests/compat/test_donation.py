"""Donation: donated inputs are invalidated as jax.jit invalidates them, warnings included."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from contract import arange, assert_same_array

NOT_USABLE = r"Some donated buffers were not usable: float32\[4\]\."


def test_donated_array_is_deleted(jit):
    f = jit(lambda x, y: x + y, donate_argnums=0)
    for _ in range(2):  # first call compiles, second takes the cached path
        x, y = arange((4,)), jnp.ones(4)
        out = f(x, y)
        assert x.is_deleted() and not y.is_deleted()
        assert_same_array(out, arange((4,)) + 1)


def test_donate_argnames_positional_and_keyword(jit):
    f = jit(lambda p, s: jax.tree_util.tree_map(lambda a: a * s, p), donate_argnames="p")
    for call in [lambda p: f(p, 2.0), lambda p: f(p=p, s=2.0), lambda p: f(p, s=2.0)]:
        p = {"a": arange((2,)), "b": arange((3,))}
        out = call(p)
        assert all(v.is_deleted() for v in p.values())
        assert_same_array(out["b"], arange((3,)) * 2.0)


def test_unusable_donation_warns_once(jit):
    # jax warns when it compiles, not on the calls that reuse the executable.
    f = jit(lambda x: x.sum(), donate_argnums=0)
    x = arange((4,))
    with pytest.warns(UserWarning, match=NOT_USABLE):
        f(x)
    assert not x.is_deleted()
    f(x)  # filterwarnings = error: a second warning would fail here
    assert not x.is_deleted()


def test_numpy_and_scalar_donation_is_silent(jit):
    f = jit(lambda x: x + 1, donate_argnums=0)
    x = np.ones(4, np.float32)
    for _ in range(2):
        assert_same_array(f(x), jnp.full(4, 2.0, jnp.float32))  # filterwarnings=error: no warning
    np.testing.assert_array_equal(x, np.ones(4))
    assert_same_array(f(1.0), jax.jit(lambda x: x + 1)(1.0))


def test_deleted_input_error_cold_and_warm(jit):
    # The installed jax's wording of PjRt's error (it changed between jax minors).
    stock, y = jax.jit(lambda x: x * 2, donate_argnums=0), arange((3,))
    stock(y)
    with pytest.raises(ValueError, match="(?i)buffer has been deleted or donated") as stock_error:
        stock(y)
    f = jit(lambda x: x * 2, donate_argnums=0)
    x = arange((3,))
    f(x)
    # The executable is cached now: jax.jit's fast path reports PjRt's error.
    with pytest.raises(ValueError, match="^" + re.escape(str(stock_error.value)) + "$"):
        f(x)
    # A function never called with this signature reports the deleted array.
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[3\]\."):
        jit(lambda x: x + 1)(x)


def test_explicitly_deleted_input_warm(jit):
    # .delete() frees the buffers outright: jax.jit reports the deleted array even when warm.
    f = jit(lambda x, y: x + y)
    x, y = arange((3,)), jnp.ones(3)
    f(x, y)
    f(x, y)
    y.delete()
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[3\]\."):
        f(x, y)


def test_same_buffer_donated_and_used(jit):
    f = jit(lambda x, y: (x + y, y), donate_argnums=0)
    x = arange((3,))
    with pytest.raises(
        Exception, match="Attempt to use a buffer that was previously donated in the same call"
    ) as info:
        f(x, x)
    assert type(info.value).__name__ == "JaxRuntimeError"
    assert not x.is_deleted()


def test_same_buffer_donated_and_used_warm(jit):
    # Once the executable is cached, jax.jit's fast path reports PjRt's error as ValueError.
    f = jit(lambda x, y: (x + y, y), donate_argnums=0)
    f(arange((3,)), arange((3,)) + 1)
    x = arange((3,))
    with pytest.raises(
        ValueError, match="Attempt to use a buffer that was previously donated in the same call"
    ):
        f(x, x)
