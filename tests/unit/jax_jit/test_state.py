"""fastdispatch.jax_jit.state: JitState views of jax's jit settings, against jax's own reads.

Every read is compared with what jax itself says (``jax.config.jax_enable_x64``
and friends, the arrays jax makes) under each context manager the field
reflects, in the calling thread and in another one.
"""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from subprocess_util import run_in_subprocess

import fastdispatch
from fastdispatch import _jax
from fastdispatch.jax_jit.state import (
    JitState,
    get_enable_x64,
    global_state,
    jit_is_disabled,
    set_thread_local_state_initialization_callback,
    thread_local_state,
)


def in_thread(fn):
    """``fn()`` run in a new thread; its result (or its exception, raised here)."""
    box = {}

    def body():
        try:
            box["result"] = fn()
        except BaseException as error:  # noqa: BLE001 - re-raised below
            box["error"] = error

    t = threading.Thread(target=body)
    t.start()
    t.join(60)
    assert not t.is_alive()
    if "error" in box:
        raise box["error"]
    return box["result"]


def jax_view():
    """What jax itself says of its settings in the calling thread."""
    return {
        "disable_jit": jax.config.jax_disable_jit,
        "enable_x64": jax.config.jax_enable_x64,
        "default_device": jax.config.jax_default_device,
        "int_dtype": jnp.array(1).dtype,
    }


def our_view():
    return {
        "disable_jit": jit_is_disabled(),
        "enable_x64": get_enable_x64(),
        "default_device": _effective(thread_local_state().default_device, global_state().default_device),
        "int_dtype": np.dtype(np.int64 if get_enable_x64() else np.int32),
    }


def _effective(local, global_):
    return global_ if local is None else local


@pytest.fixture(autouse=True)
def restore_settings():
    yield
    jax.config.update("jax_disable_jit", False)
    jax.config.update("jax_enable_x64", False)
    jax.config.update("jax_default_device", None)
    for setting in (_jax.DISABLE_JIT, _jax.ENABLE_X64, _jax.DEFAULT_DEVICE):
        _jax.set_local_setting(setting, None)
    fastdispatch.set_post_hook(None)
    fastdispatch.set_post_hook(None, thread_local=True)
    set_thread_local_state_initialization_callback(None)


CPU = jax.devices("cpu")[0]
CONTEXTS = {
    "none": lambda: _nothing(),
    "disable_jit": lambda: jax.disable_jit(),
    "disable_jit(False)": lambda: jax.disable_jit(False),
    "enable_x64": lambda: jax.enable_x64(True),
    "enable_x64(False)": lambda: jax.enable_x64(False),
    "default_device": lambda: jax.default_device(CPU),
    "default_device('cpu')": lambda: jax.default_device("cpu"),
}


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("globally", [False, True], ids=["global-default", "global-set"])
@pytest.mark.parametrize("context", list(CONTEXTS))
def test_reads_match_jax_in_every_context_and_thread(context, globally):
    if globally:
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_disable_jit", True)
    with CONTEXTS[context]():
        assert our_view() == jax_view()
        # Another thread sees the global values only, as jax does.
        assert in_thread(our_view) == in_thread(jax_view)
        assert in_thread(lambda: thread_local_state().enable_x64) is None
    assert our_view() == jax_view()


def test_global_and_thread_local_fields_inside_contexts():
    with jax.disable_jit():
        assert thread_local_state().disable_jit is True
        assert global_state().disable_jit is False
        with jax.disable_jit(False):
            assert thread_local_state().disable_jit is False and not jit_is_disabled()
    assert thread_local_state().disable_jit is None
    with jax.enable_x64(True):
        assert (thread_local_state().enable_x64, global_state().enable_x64) == (True, False)
    with jax.default_device(CPU):
        assert thread_local_state().default_device == CPU
        assert global_state().default_device is None
    jax.config.update("jax_default_device", CPU)
    assert global_state().default_device == CPU and thread_local_state().default_device is None


def test_global_writes_are_jax_config_updates():
    global_state().enable_x64 = True
    assert jax.config.jax_enable_x64 and jnp.array(1).dtype == np.int64
    assert in_thread(lambda: jnp.array(1).dtype) == np.int64  # every thread
    global_state().enable_x64 = False
    assert jnp.array(1).dtype == np.int32
    global_state().disable_jit = True
    assert jax.config.jax_disable_jit and in_thread(jit_is_disabled)
    global_state().disable_jit = False
    global_state().default_device = CPU
    assert jax.config.jax_default_device == CPU
    global_state().default_device = None
    assert jax.config.jax_default_device is None


def test_thread_local_writes_apply_to_the_calling_thread_only():
    thread_local_state().enable_x64 = True
    assert jax.config.jax_enable_x64 and jnp.array(1).dtype == np.int64
    assert global_state().enable_x64 is False
    assert in_thread(lambda: (jnp.array(1).dtype, thread_local_state().enable_x64)) == (np.int32, None)
    thread_local_state().enable_x64 = None  # unset: the global value again
    assert jnp.array(1).dtype == np.int32 and thread_local_state().enable_x64 is None

    def set_in_thread():
        thread_local_state().disable_jit = True
        return jit_is_disabled(), jax.config.jax_disable_jit

    assert in_thread(set_in_thread) == (True, True)
    assert not jit_is_disabled() and not jax.config.jax_disable_jit


def test_a_thread_local_write_inside_a_with_block_ends_with_it():
    # jax's context manager restores what it found on entry, as it would for a
    # nested `with`.
    with jax.enable_x64(True):
        thread_local_state().enable_x64 = False
        assert jnp.array(1).dtype == np.int32
    assert thread_local_state().enable_x64 is None


def test_invalid_values_fail_as_jax_does():
    with pytest.raises(ValueError) as jax_error:
        jax.config.update("jax_default_device", 3)
    with pytest.raises(ValueError) as ours:
        global_state().default_device = 3
    assert str(ours.value) == str(jax_error.value)
    with pytest.raises(ValueError) as jax_error:
        jax.default_device(3)
    with pytest.raises(ValueError) as ours:
        thread_local_state().default_device = 3
    assert str(ours.value) == str(jax_error.value)
    assert global_state().default_device is None and thread_local_state().default_device is None


def test_post_hook_is_set_post_hook():
    def hook(*args):
        pass

    def other(*args):
        pass

    fastdispatch.set_post_hook(hook)
    assert global_state().post_hook is hook and thread_local_state().post_hook is None
    global_state().post_hook = other
    assert fastdispatch.jax_jit.post_hook.get_post_hook() is other
    seen = []
    f = fastdispatch.jit(lambda x: x + 1)
    thread_local_state().post_hook = lambda fn, args, kwargs, out: seen.append("local")
    global_state().post_hook = lambda fn, args, kwargs, out: seen.append("global")
    f(jnp.ones(2))
    in_thread(lambda: f(jnp.ones(2)))
    assert seen == ["local", "global"]
    assert in_thread(lambda: thread_local_state().post_hook) is None
    thread_local_state().post_hook = None
    f(jnp.ones(2))
    assert seen == ["local", "global", "global"]
    with pytest.raises(TypeError, match="must be callable"):
        global_state().post_hook = 3


def test_extra_jit_context_is_jax_trace_context():
    assert global_state().extra_jit_context == _jax.trace_context()
    names = _jax.trace_context_names()
    with jax.enable_x64(True):
        context = thread_local_state().extra_jit_context
        assert context == _jax.trace_context()
        assert context[names.index("jax_enable_x64")] is True
    with pytest.raises(AttributeError, match="read only"):
        thread_local_state().extra_jit_context = ()


def test_jit_state_fields_are_fixed():
    with pytest.raises(AttributeError):
        global_state().not_a_field = 1
    with pytest.raises(AttributeError):
        global_state().thread_local = True
    assert isinstance(global_state(), JitState) and global_state() is global_state()
    assert repr(global_state()).startswith("JitState(global: disable_jit=False")


def test_initialization_callback_runs_once_per_thread():
    calls = []

    def init():
        calls.append(threading.get_ident())
        thread_local_state().enable_x64 = True  # reading the state inside: no recursion

    set_thread_local_state_initialization_callback(init)
    try:

        def in_new_thread():
            first = thread_local_state().enable_x64
            thread_local_state()
            return first, jnp.array(1).dtype

        assert in_thread(in_new_thread) == (True, np.int64)
        assert in_thread(in_new_thread) == (True, np.int64)
        in_thread(lambda: None)  # a thread that never asks: no call
        assert len(calls) == 2  # (thread idents may be reused: not compared)
        assert jnp.array(1).dtype == np.int32  # this thread has not asked yet
    finally:
        set_thread_local_state_initialization_callback(None)
    with pytest.raises(TypeError, match="callable"):
        set_thread_local_state_initialization_callback(3)


def test_a_failed_initialization_runs_again():
    attempts = []

    def init():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("not yet")

    set_thread_local_state_initialization_callback(init)

    def body():
        with pytest.raises(RuntimeError, match="not yet"):
            thread_local_state()
        thread_local_state()
        thread_local_state()

    in_thread(body)
    assert len(attempts) == 2


def default_device_moves_arrays_per_thread():
    """(In a subprocess with 2 CPU devices.)  A default_device written through
    either view places new arrays and both jits' outputs as jax's own
    ``jax.default_device`` does: the thread-local one in its thread only."""
    import threading

    import jax
    import jax.numpy as jnp

    import fastdispatch

    d0, d1 = jax.devices()
    fast = fastdispatch.jit(lambda x: x * 2)
    slow = jax.jit(lambda x: x * 2)

    def placed():
        x = jnp.ones(3)
        return {next(iter(a.devices())) for a in (x, fast(x), slow(x))}

    assert placed() == {d0}
    with jax.default_device(d1):
        expected = placed()
    assert expected == {d1}
    fastdispatch.thread_local_state().default_device = d1
    assert placed() == expected
    box = {}
    t = threading.Thread(target=lambda: box.update(other=placed()))
    t.start()
    t.join()
    assert box["other"] == {d0}
    fastdispatch.thread_local_state().default_device = None
    assert placed() == {d0}
    fastdispatch.global_state().default_device = d1
    t = threading.Thread(target=lambda: box.update(other=placed()))
    t.start()
    t.join()
    assert placed() == {d1} and box["other"] == {d1}


def test_default_device_places_arrays_as_jax_does():
    run_in_subprocess(default_device_moves_arrays_per_thread, n_devices=2)
