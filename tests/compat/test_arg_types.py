"""Results, dtypes and weak types for every kind of array argument, x64 off and on."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from contract import against_jax, arange, assert_same_array, expect_same


def identity(x):
    return x


def plus_one(x):
    return x + 1


# (value, dtype with x64 off, weak type): what jax.jit gives for identity.
ARGS_X32 = [
    (1, jnp.int32, True),
    (-7, jnp.int32, True),
    (2.5, jnp.float32, True),
    (True, jnp.bool_, False),
    (1 + 2j, jnp.complex64, True),
    (np.int32(3), jnp.int32, False),
    (np.int64(3), jnp.int32, False),
    (np.float16(1.5), jnp.float16, False),
    (np.float64(1.5), jnp.float32, False),
    (np.bool_(True), jnp.bool_, False),
    (np.complex128(1j), jnp.complex64, False),
    (np.arange(4, dtype=np.float64), jnp.float32, False),
    (np.arange(4, dtype=np.uint8), jnp.uint8, False),
    (np.array(2.0, np.float32), jnp.float32, False),
    (jnp.float32(1), jnp.float32, False),
    (jnp.asarray(1.0), jnp.float32, True),  # a weakly typed jax Array stays weak
    (jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3), jnp.bfloat16, False),
    (jnp.zeros((0, 3)), jnp.float32, False),
]

ARGS_X64 = [
    (1, jnp.int64, True),
    (2.5, jnp.float64, True),
    (True, jnp.bool_, False),
    (1 + 2j, jnp.complex128, True),
    (np.int64(3), jnp.int64, False),
    (np.float64(1.5), jnp.float64, False),
    (np.float32(1.5), jnp.float32, False),
    (np.arange(4, dtype=np.float64), jnp.float64, False),
]


@pytest.mark.parametrize("value,dtype,weak", ARGS_X32, ids=repr)
def test_identity_x32(jit, value, dtype, weak):
    out = expect_same(jit, identity, value)
    assert out.dtype == dtype and out.weak_type == weak
    np.testing.assert_array_equal(np.asarray(out), np.asarray(value).astype(dtype))
    expect_same(jit, plus_one, value)


@pytest.mark.parametrize("value,dtype,weak", ARGS_X64, ids=repr)
def test_identity_x64(jit, value, dtype, weak):
    with jax.enable_x64(True):
        out = expect_same(jit, identity, value)
        assert out.dtype == dtype and out.weak_type == weak
        expect_same(jit, plus_one, value)


def test_x64_toggle_on_one_function(jit):
    # One jitted function used with x64 off, on, then off again: the x64 mode is
    # part of the signature, so each mode gets its own (correct) executable.
    f = jit(lambda x, y: x * y)
    assert f(2, 1.5).dtype == jnp.float32
    with jax.enable_x64(True):
        assert f(2, 1.5).dtype == jnp.float64
        assert f(np.float64(2), 3).dtype == jnp.float64
    out = f(2, 1.5)
    assert out.dtype == jnp.float32 and out.weak_type
    assert f(np.float64(2), 3).dtype == jnp.float32


def test_x64_toggle_with_array_arguments(jit):
    # Arrays made outside x64 keep their dtype, so only jax's trace context
    # tells the two modes apart: it must be part of the cache key.
    f = jit(lambda x: (x * 2, jnp.arange(2), x.sum() + 1))
    x = arange((3,))
    modes = [False, True, False, True]
    for x64 in modes:
        with jax.enable_x64(x64):
            out = f(x)
            assert_same_array(out[0], x * 2)
            assert out[1].dtype == (jnp.int64 if x64 else jnp.int32)
            expect_same(jit, lambda x: (x * 2, jnp.arange(2), x.sum() + 1), x)


@against_jax
def test_weak_type_promotion(jit):
    def f(x, s):
        return x * s

    for x in [arange((3,), jnp.float16), arange((3,), jnp.int8), np.ones(3, np.float32)]:
        for s in [2, 2.0, np.float32(2), jnp.asarray(2.0), True]:
            expect_same(jit, f, x, s)


def test_python_int_overflow(jit):
    msg = (
        "An overflow was encountered while parsing an argument to a jitted computation, "
        "whose argument path is x."
    )
    with pytest.raises(OverflowError, match=msg):
        jit(identity)(2**40)


@pytest.mark.parametrize("bad", ["text", object(), b"bytes"], ids=["str", "object", "bytes"])
def test_non_array_argument(jit, bad):
    with pytest.raises(
        TypeError,
        match="Error interpreting argument to <function identity at .*> as an abstract array. "
        f"The problematic value is of type {type(bad)!r}",
    ):
        jit(identity)(bad)


@against_jax
def test_multiple_outputs_and_constants(jit):
    def f(x, y):
        return x + y, x * 2, 3.0, jnp.float32(1), y

    expect_same(jit, f, arange((2, 3)), np.ones((2, 3), np.float32))
    expect_same(jit, f, 1, 2.0)


@against_jax
def test_output_is_fresh_array_for_passthrough(jit):
    # jax.jit returns an Array equal to its input for identity; the contract is
    # only that both implementations agree on every property.
    x = arange((4,))
    out = expect_same(jit, identity, x)
    assert isinstance(out, jax.Array)


def test_no_output(jit):
    assert jit(lambda x: None)(arange((2,))) is None
    assert jit(lambda x: ())(arange((2,))) == ()
    assert jit(lambda: {})() == {}
