"""fastdispatch.set_post_hook: global and per thread, what the hook sees, what it holds."""

import gc
import threading
import weakref

import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch


def collected(ref):
    gc.collect()
    return ref() is None


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


def test_post_hook_global_and_thread_local():
    seen = []
    f = fastdispatch.jit(lambda x: x + 1)
    fastdispatch.set_post_hook(lambda fn, args, kwargs, out: seen.append(("global", args)))
    try:
        f(1.0)
        fastdispatch.set_post_hook(
            lambda fn, args, kwargs, out: seen.append(("local", args)), thread_local=True
        )
        f(2.0)
    finally:
        fastdispatch.set_post_hook(None, thread_local=True)
        fastdispatch.set_post_hook(None)
    f(3.0)
    assert seen == [("global", (1.0,)), ("local", (2.0,))]
    with pytest.raises(TypeError, match="set_post_hook: hook must be callable"):
        fastdispatch.set_post_hook(42)


def test_post_hook_gets_a_dict_of_its_own():
    seen = []

    def hook(fn, args, kwargs, out):
        kwargs["spoiled"] = True  # must not leak into later calls
        seen.append(args)

    f = fastdispatch.jit(lambda x: x + 1)
    x = jnp.ones(2)
    f(x)
    fastdispatch.set_post_hook(hook)
    try:
        f(x)
        f(x)
    finally:
        fastdispatch.set_post_hook(None)
    assert len(seen) == 2 and all(args == (x,) for args in seen)
    np.testing.assert_array_equal(f(x), np.full(2, 2.0))
