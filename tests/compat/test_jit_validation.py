"""jit's own arguments: validation with jax.jit's errors, and the decorator forms."""

import re

import jax.numpy as jnp
import pytest
from contract import assert_same_array


def add(x, y):
    return x + y


def keyword_only(x, *, n):
    return x * n


def gen():
    yield 1


def test_non_callable(jit):
    with pytest.raises(TypeError, match="^Expected a callable value, got 3"):
        jit(3)


def test_generator_function(jit):
    with pytest.raises(TypeError, match="^Expected a function, got a generator function: <function gen at "):
        jit(gen)


def test_staticmethod(jit):
    with pytest.raises(
        TypeError, match=re.escape("staticmethod arguments are not supported, got <staticmethod(")
    ):
        jit(staticmethod(add))


@pytest.mark.parametrize("argnums", [2, 5, -3, (0, 7)])
def test_static_argnums_out_of_range(jit, argnums):
    shown = argnums if isinstance(argnums, tuple) else (argnums,)
    msg = f"Jitted function has static_argnums={shown}, but only accepts 2 positional arguments."
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}"):
        jit(add, static_argnums=argnums)


def test_donate_argnums_out_of_range(jit):
    msg = "Jitted function has donate_argnums=(5,), but only accepts 2 positional arguments."
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}"):
        jit(add, donate_argnums=5)


def test_static_argnums_unchecked_for_varargs(jit):
    # A function taking *args accepts any argnum: jax cannot check, neither do we.
    def varargs(*args):
        return args[0] * args[3]

    f = jit(varargs, static_argnums=3)
    assert_same_array(f(jnp.float32(2), 0, 0, 4), jnp.asarray(8, jnp.float32))


@pytest.mark.parametrize("option", ["static_argnames", "donate_argnames"])
def test_argnames_not_in_signature(jit, option):
    msg = f"Jitted function has invalid argnames {{'z'}} in {option}. Function does not take these args."
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}"):
        jit(add, **{option: "z"})


@pytest.mark.parametrize(
    "options",
    [
        dict(static_argnums=0, donate_argnums=0),
        dict(static_argnames="x", donate_argnames="x"),
        dict(static_argnums=0, donate_argnames="x"),
    ],
)
def test_donate_static_overlap(jit, options):
    msg = (
        "static_argnames and donate_argnames cannot intersect. Argument names "
        "{'x'} appear in both static_argnames and donate_argnames"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}"):
        jit(add, **options)


def test_argnums_wrong_type(jit):
    with pytest.raises(TypeError, match="'str' object cannot be interpreted as an integer"):
        jit(add, static_argnums="x")


def test_decorator_bare(jit):
    @jit
    def f(x):
        return x * 2

    assert_same_array(f(jnp.float32(3)), jnp.asarray(6, jnp.float32))


def test_decorator_with_options_only(jit):
    decorator = jit(static_argnames="n")
    assert callable(decorator)

    @decorator
    def f(x, n):
        return x * n

    assert_same_array(f(jnp.float32(3), n=2), jnp.asarray(6, jnp.float32))
    assert_same_array(f(jnp.float32(3), 2), jnp.asarray(6, jnp.float32))


def test_call_form_with_static_keyword_only(jit):
    f = jit(keyword_only, static_argnames="n")
    assert_same_array(f(jnp.float32(3), n=4), jnp.asarray(12, jnp.float32))


def test_static_argnums_resolves_to_name(jit):
    # static_argnums=1 makes y static whether it is passed by position or by name.
    f = jit(add, static_argnums=1)
    assert_same_array(f(jnp.float32(1), 2), jnp.asarray(3, jnp.float32))
    assert_same_array(f(jnp.float32(1), y=2), jnp.asarray(3, jnp.float32))
