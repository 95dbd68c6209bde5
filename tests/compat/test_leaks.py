"""Leaks: nothing holds inputs, outputs or the function after the call."""

import gc
import sys
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def collected(ref):
    gc.collect()
    return ref() is None


@jax.tree_util.register_pytree_node_class
class Box:
    """A weakly referenceable pytree node."""

    def __init__(self, value):
        self.value = value

    def tree_flatten(self):
        return (self.value,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(4, dtype=np.float32),
        lambda: jnp.arange(4, dtype=jnp.float32),
        lambda: jax.device_put(jnp.arange(4, dtype=jnp.float32), jax.devices()[0]),
        lambda: Box(jnp.ones(4)),
    ],
    ids=["numpy", "jax", "committed", "pytree_node"],
)
def test_inputs_not_held(jit, make):
    f = jit(lambda x: jax.tree_util.tree_map(lambda a: a * 2, x))
    for _ in range(2):  # the miss, then the hit
        x = make()
        ref = weakref.ref(x)
        out = f(x)
        del x
        assert collected(ref)
        del out


def test_outputs_not_held(jit):
    f = jit(lambda x: (x + 1, {"y": x * 2}))
    for _ in range(2):
        out = f(jnp.ones(3))
        refs = [weakref.ref(leaf) for leaf in jax.tree_util.tree_leaves(out)]
        del out
        gc.collect()
        assert all(r() is None for r in refs)


def test_refcounts_stable_on_hits(jit):
    f = jit(lambda x, s, n: x * s * len(n), static_argnums=2)
    x, s, n = jnp.ones(3), 2.0, (1, 2)
    f(x, s, n)
    gc.collect()  # count only live references, not garbage awaiting collection
    before = sys.getrefcount(x), sys.getrefcount(s), sys.getrefcount(n)
    for _ in range(50):
        f(x, s, n)
    gc.collect()
    assert (sys.getrefcount(x), sys.getrefcount(s), sys.getrefcount(n)) == before


def test_function_freed_with_jit_object(jit):
    def make():
        def fun(x):
            return x * 3

        return fun

    fun = make()
    f = jit(fun)
    f(jnp.ones(2))
    f(jnp.ones(2))
    fun_ref, f_ref = weakref.ref(fun), weakref.ref(f)
    del fun, f
    assert collected(f_ref)
    assert collected(fun_ref)


def test_function_with_cycle_freed(jit):
    # The function refers to its own jitted object (a reference cycle through
    # the closure): the gc must still free both.
    def make():
        def fun(x):
            return x + 1 if holder else x

        holder = []
        jitted = jit(fun)
        holder.append(jitted)
        return fun, jitted

    fun, f = make()
    f(jnp.ones(2))
    fun_ref, f_ref = weakref.ref(fun), weakref.ref(f)
    del fun, f
    assert collected(f_ref)
    assert collected(fun_ref)


def test_error_does_not_hold_arguments(jit):
    def fun(x):
        raise ValueError("nope")

    f = jit(fun)
    x = np.ones(3, np.float32)
    ref = weakref.ref(x)
    with pytest.raises(ValueError):
        f(x)
    del x
    assert collected(ref)
