"""Errors raised while tracing or checking the function: same type and message as jax.jit."""

import jax
import jax.numpy as jnp
import pytest
from contract import TraceCounter, against_jax, arange


def raise_value_error(x):
    raise ValueError(f"boom {x.shape}")


def bad_reshape(x):
    return x.reshape(5)


def python_branch(x):
    if x > 0:
        return x
    return -x


def wrong_output(x):
    return object()


@against_jax
@pytest.mark.parametrize("fun", [raise_value_error, bad_reshape, python_branch, wrong_output])
def test_same_error_as_jax(jit, fun):
    x = arange((2,))
    with pytest.raises(Exception) as theirs:
        jax.jit(fun)(x)
    with pytest.raises(type(theirs.value)) as ours:
        jit(fun)(x)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def test_user_frame_in_traceback(jit):
    with pytest.raises(ValueError) as info:
        jit(raise_value_error)(arange((2,)))
    assert any(entry.name == "raise_value_error" for entry in info.traceback)


def test_error_leaves_no_entry(jit):
    # A failed trace caches nothing: the next call traces again and fails again,
    # and a good signature afterwards works.
    count = TraceCounter()

    def only_scalars(x):
        if x.ndim:
            raise TypeError("scalars only")
        return x + 1

    f = jit(count(only_scalars))
    for n in (1, 2):
        with pytest.raises(TypeError, match="^scalars only"):
            f(arange((2,)))
        assert count.n == n
    assert float(f(1.0)) == 2.0
    assert float(f(1.0)) == 2.0
    assert count.n == 3


def test_no_tracing(jit):
    f = jit(lambda x: x * 2)
    x2 = jnp.ones(2)
    f(1.0)
    with jax.no_tracing():
        assert float(f(3.0)) == 6.0  # cached: allowed
        with pytest.raises(
            RuntimeError, match="re-tracing function <lambda> at .* for `jit`, but 'no_tracing' is set"
        ):
            f(x2)


def test_no_execution(jit):
    f = jit(lambda x: x * 2)
    f(1.0)
    with jax.no_execution():
        with pytest.raises(
            RuntimeError,
            match="JAX tried to execute function jit\\(<lambda>\\), "
            "but the no_execution config option is set",
        ):
            f(1.0)
    assert float(f(1.0)) == 2.0
