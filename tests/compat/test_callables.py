"""Every callable jax.jit accepts, accepted alike: unhashable objects, callable
equinox Modules holding arrays, partials, bound methods, classes, builtins,
custom_jvp functions; and the decorator factory. jax.jit never hashes the
function when it wraps it: only a call, whose trace cache is keyed by it, does.
"""

import functools
import gc
import inspect
import operator
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from contract import TraceCounter, arange, assert_same_array, expect_same


class Unhashable:
    """A callable with ``__eq__`` and no ``__hash__``, so unhashable."""

    def __call__(self, x):
        return x + 1

    def __eq__(self, other):
        return self is other


def test_unhashable_callable_wraps_and_its_call_raises_as_jax_does(jit):
    fun = Unhashable()
    f = jit(fun)
    assert f.__wrapped__ is fun
    for _ in range(3):  # every call, not only the first
        with pytest.raises(TypeError, match=r"^unhashable type: 'Unhashable'"):
            f(jnp.float32(1))


def test_callable_whose_hash_raises(jit):
    class BadHash:
        def __call__(self, x):
            return x + 1

        def __hash__(self):
            raise ValueError("no hash today")

    f = jit(BadHash())
    with pytest.raises(ValueError, match="^no hash today"):
        f(jnp.float32(1))


def test_unhashable_callable_runs_under_disable_jit(jit):
    f = jit(Unhashable())
    with jax.disable_jit():
        assert f(1.0) == 2.0


def test_module_holding_arrays(jit):
    linear = eqx.nn.Linear(2, 2, key=jax.random.key(0))
    f = jit(linear)
    assert type(f) is type(jit(lambda x: x))
    assert f.__wrapped__ is linear
    # A Module's hash reaches its arrays: jax's trace cache raises.
    with pytest.raises(TypeError, match=r"^unhashable type: 'jaxlib._jax.ArrayImpl'"):
        f(jnp.ones(2))


def test_module_holding_arrays_inside_a_transformation(jit):
    linear = eqx.nn.Linear(2, 2, key=jax.random.key(0))
    f = jit(linear)
    with pytest.raises(TypeError, match=r"^unhashable type: 'jaxlib._jax.ArrayImpl'"):
        jax.vmap(f)(jnp.ones((3, 2)))


def test_partial_of_unhashable_values(jit):
    # A partial hashes by identity, whatever it holds.
    p = functools.partial(lambda table, x: x + len(table), [1, 2])
    expect_same(jit, p, arange((2,)))
    assert jit(p).__wrapped__ is p


def test_bound_method_of_a_module_holding_arrays(jit):
    linear = eqx.nn.Linear(2, 2, key=jax.random.key(0))
    expect_same(jit, linear.__call__, jnp.ones(2))


def test_callable_object_and_class(jit):
    class Triple:
        def __call__(self, x):
            return x * 3

    expect_same(jit, Triple(), arange((2,)))
    # jit of a class traces its constructor, whose result jax cannot return.
    with pytest.raises(TypeError, match="returned a value of type"):
        jit(Triple)()


@pytest.mark.parametrize(
    "fun, args",
    [(jnp.sin, (jnp.float32(1),)), (operator.add, (1.0, 2.0)), (jnp.dot, (jnp.ones(3), jnp.ones(3)))],
    ids=["jnp.sin", "operator.add", "jnp.dot"],
)
def test_builtins_and_jitted_functions(jit, fun, args):
    expect_same(jit, fun, *args)


def test_custom_jvp_function(jit):
    @jax.custom_jvp
    def double(x):
        return 2 * x

    double.defjvp(lambda primals, tangents: (2 * primals[0], 3 * tangents[0]))
    expect_same(jit, double, jnp.float32(1))
    # The custom rule is the one differentiated.
    assert jax.grad(jit(double))(1.0) == 3.0


def test_decorator_factory_is_a_function_as_jit_is(jit):
    # jax.jit's factory is a lambda, not a functools.partial.
    decorate = jit(static_argnums=1)
    assert type(decorate) is type(jit) and inspect.isroutine(decorate)
    f = decorate(lambda x, n: x * n)
    assert type(f) is type(jit(lambda x: x))
    assert_same_array(f(jnp.float32(2), 3), jnp.asarray(6, jnp.float32))


def test_equal_callables_share_traces_as_jax_does(jit):
    # jax's trace cache is keyed by the function's hash and equality: an
    # equal callable made anew reuses the trace.
    count = TraceCounter()

    class Equal:
        def __call__(self, x):
            return count(lambda y: y + 1)(x)

        def __eq__(self, other):
            return isinstance(other, Equal)

        def __hash__(self):
            return 0

    first, second = Equal(), Equal()
    jit(first)(jnp.float32(1))
    jit(second)(jnp.float32(1))
    jit(first)(jnp.float32(1))
    assert count.n == 1


def test_unhashable_callable_is_freed_with_its_jitted_function():
    import fastdispatch

    cache = fastdispatch.CompiledFunctionCache()
    fun = Unhashable()
    alive = weakref.ref(fun)
    f = fastdispatch.jit(fun, cache=cache)
    with pytest.raises(TypeError):
        f(jnp.float32(1))
    del f, fun
    gc.collect()
    assert alive() is None
    assert cache.size() == 0
