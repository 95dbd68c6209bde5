"""Leaks: nothing holds inputs, outputs or the function after the call; post hooks.

The reference behaviours jax.jit shares run against both implementations; the
post hook is fastdispatch's API.
"""
import gc
import sys
import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest


@pytest.fixture(params=["jax", "fastdispatch"])
def jit(request):
    if request.param == "jax":
        return jax.jit
    import fastdispatch

    return fastdispatch.jit


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


# The post hook (fastdispatch only).


@pytest.fixture
def fd():
    import fastdispatch

    yield fastdispatch
    fastdispatch.set_post_hook(None)
    fastdispatch.set_post_hook(None, thread_local=True)


def test_post_hook_global(fd):
    seen = []
    f = fd.jit(lambda x, y=1.0: x * y)
    fd.set_post_hook(lambda fn, args, kwargs, out: seen.append((fn, args, kwargs, out)))
    x = jnp.ones(2)
    out1 = f(x)  # miss
    out2 = f(x, y=2.0)  # miss, keyword
    out3 = f(x, y=2.0)  # hit
    assert len(seen) == 3
    for (fn, args, kwargs, out), (want_args, want_kwargs, want_out) in zip(
        seen, [((x,), {}, out1), ((x,), {"y": 2.0}, out2), ((x,), {"y": 2.0}, out3)]
    ):
        assert fn is f
        assert type(args) is tuple and len(args) == len(want_args)
        assert all(a is b for a, b in zip(args, want_args))
        assert type(kwargs) is dict and kwargs == want_kwargs
        assert out is want_out
    fd.set_post_hook(None)
    f(x)
    assert len(seen) == 3


def test_post_hook_thread_local(fd):
    seen_global, seen_local = [], []
    f = fd.jit(lambda x: x + 1)
    fd.set_post_hook(lambda *a: seen_global.append(threading.get_ident()))

    def other_thread():
        fd.set_post_hook(lambda *a: seen_local.append(threading.get_ident()), thread_local=True)
        f(jnp.ones(2))
        f(jnp.ones(2))
        fd.set_post_hook(None, thread_local=True)
        f(jnp.ones(2))  # back to the global hook

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(60)
    assert not t.is_alive()
    f(jnp.ones(2))  # this thread never had a local hook
    assert len(seen_local) == 2 and len(set(seen_local)) == 1
    assert len(seen_global) == 2 and seen_global[1] == threading.get_ident()
    assert seen_global[0] == seen_local[0]  # the other thread, after unsetting its hook


def test_post_hook_error_propagates(fd):
    f = fd.jit(lambda x: x + 1)

    def hook(*args):
        raise RuntimeError("hook failed")

    fd.set_post_hook(hook)
    with pytest.raises(RuntimeError, match="hook failed"):
        f(jnp.ones(2))
    fd.set_post_hook(None)
    assert float(f(jnp.ones(2))[0]) == 2.0


def test_post_hook_not_held_args(fd):
    # The hook sees the arguments; once it drops them, nothing else keeps them.
    f = fd.jit(lambda x: x * 2)
    fd.set_post_hook(lambda *a: None)
    x = np.ones(2, np.float32)
    ref = weakref.ref(x)
    f(x)
    f(x)
    del x
    assert collected(ref)
