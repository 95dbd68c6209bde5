"""Static arguments: hashing, equality, errors, and what they key."""

import re

import jax
import jax.numpy as jnp
import pytest
from contract import TraceCounter, against_jax, arange, assert_same_array, expect_same


def times(x, n):
    return x * n


def branchy(x, mode, *, opts=("a",)):
    return x + 1 if mode == "train" else x - len(opts)


@against_jax
def test_static_values(jit):
    for n in [2, 3.5, True, (1, 2), "s", None, frozenset({1})]:
        n_val = n if isinstance(n, (int, float)) else 1
        expect_same(jit, lambda x, n: x * n_val, arange((2,)), n, jit_kwargs=dict(static_argnums=1))


@against_jax
def test_static_by_name_and_position(jit):
    expect_same(
        jit, branchy, arange((2,)), "train", jit_kwargs=dict(static_argnums=1, static_argnames="opts")
    )
    expect_same(
        jit,
        branchy,
        arange((2,)),
        mode="eval",
        opts=(1, 2),
        jit_kwargs=dict(static_argnames=("mode", "opts")),
    )


@against_jax
def test_negative_static_argnums(jit):
    expect_same(jit, times, arange((2,)), 3, jit_kwargs=dict(static_argnums=-1))


class Unhashable:
    __hash__ = None


@pytest.mark.parametrize(
    "value", [[1], {"a": 1}, jnp.ones(2), Unhashable()], ids=["list", "dict", "array", "class"]
)
def test_unhashable_static(jit, value):
    msg = (
        "Non-hashable static arguments are not supported. An error occurred while trying to hash "
        f"an object of type {type(value)}, {value}. The error was:\nTypeError: unhashable type: "
    )
    for f in [jit(times, static_argnums=1), jit(times, static_argnames="n")]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            f(1.0, value)
        with pytest.raises(ValueError, match=re.escape(msg)):
            f(1.0, n=value)


class HashRaises:
    def __hash__(self):
        raise RuntimeError("no hash for you")


def eq_raises_class():
    # A new class per test: jax's global caches compare the static arguments
    # of earlier calls by type first, so an instance from another test (jax's
    # run of this same test, say) can never reach this __eq__.
    class EqRaises:
        def __hash__(self):
            return 7

        def __eq__(self, other):
            raise RuntimeError("no eq for you")

    return EqRaises


def test_hash_raises(jit):
    f = jit(lambda x, n: x, static_argnums=1)
    with pytest.raises(RuntimeError, match="^no hash for you"):
        f(1.0, HashRaises())


def test_eq_raises(jit):
    EqRaises = eq_raises_class()
    f = jit(lambda x, n: x, static_argnums=1)
    assert_same_array(f(jnp.float32(1), EqRaises()), jnp.asarray(1, jnp.float32))
    msg = (
        "static arguments should be comparable using __eq__.The following error was raised when "
        f"comparing two objects of types {EqRaises} and {EqRaises}. The error was:\n"
    )
    with pytest.raises(ValueError, match=re.escape(msg) + "(.|\n)*RuntimeError: no eq for you"):
        f(jnp.float32(1), EqRaises())


class Key:
    """Hashable by value: equal keys share a trace."""

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return hash(self.v)

    def __eq__(self, other):
        return isinstance(other, Key) and other.v == self.v


def test_static_equality_keys_the_cache(jit):
    count = TraceCounter()
    f = jit(count(lambda x, k: x * k.v), static_argnums=1)
    f(1.0, Key(2))
    f(1.0, Key(2))  # a different but equal object: no retrace
    assert count.n == 1
    assert_same_array(f(1.0, Key(3)), jax.jit(lambda x: x * 3)(1.0))
    assert count.n == 2


def test_static_type_is_part_of_the_key(jit):
    # 2, 2.0, True and 1 hash and compare equal in pairs, yet jax traces each type apart.
    count = TraceCounter()
    f = jit(count(times), static_argnums=1)
    for n, dtype in [(2, jnp.float32), (2.0, jnp.float32), (True, jnp.float32), (1, jnp.float32)]:
        assert f(1.0, n).dtype == dtype
    assert count.n == 4
    f(1.0, 2)
    assert count.n == 4


def test_static_output_is_python_value_in_trace(jit):
    # A static argument is a Python value inside the trace (not a tracer).
    seen = []

    def f(x, n):
        seen.append(type(n))
        return x

    jit(f, static_argnums=1)(1.0, 5)
    assert seen == [int]


def scaled(x, n, *, y, mode):
    return (x + y if mode == "add" else x * y) * n


def test_static_positions_and_names_in_repeated_keyword_calls(jit):
    # f(x, n, y=..., mode=...) with n static by position and mode by name: calls laid
    # out alike, whose static values change, retrace exactly when jax.jit does.
    count = TraceCounter()
    f = jit(count(scaled), static_argnums=1, static_argnames="mode")
    g = jax.jit(scaled, static_argnums=1, static_argnames="mode")
    x, y = arange((3,)), arange((3,)) + 1
    calls = [(2, "add"), (2, "add"), (3, "add"), (2, "mul"), (3, "add"), (2, "add"), (3.0, "add")]
    for n, mode in calls * 2:
        assert_same_array(f(x, n, y=y, mode=mode), g(x, n, y=y, mode=mode))
    assert count.n == 4  # 3.0 == 3: jax.jit keys static values by equality
    # A static position with negative numbering, and a dynamic keyword after it.
    h = jit(scaled, static_argnums=-1, static_argnames="mode")
    for n in [2, 2, 4]:
        assert_same_array(h(x, n, y=y, mode="add"), g(x, n, y=y, mode="add"))
