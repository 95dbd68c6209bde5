"""jax's jit settings, as the old ``jax_jit`` module exposed them: JitState.

The C++ dispatcher jax once had (``jax_jit.cc``, the design fastdispatch
follows) kept its settings in two ``JitState`` structs, a global one and one
per thread, the thread's value winning where set.  jax keeps the same settings today in its config, each
with a global and a per-thread value, so a JitState here is a view of those:
nothing is copied, and every read or write goes to jax.

    global_state()          reads and writes the global values
                            (a write is ``jax.config.update(name, value)``)
    thread_local_state()    the calling thread's own values: None where the
                            thread has none; a write is what entering
                            ``with jax.enable_x64(value):`` does, for good

Fields: ``disable_jit``, ``enable_x64``, ``default_device`` (jax's settings of
those names), ``post_hook`` (the hook of ``fastdispatch.set_post_hook``) and
``extra_jit_context`` (read only: jax's trace context, the part of every cache
key that jax's config decides).
"""

from __future__ import annotations

import threading

import jax

from fastdispatch import _jax
from fastdispatch.jax_jit import post_hook as _post_hook

__all__ = [
    "JitState",
    "get_enable_x64",
    "global_state",
    "jit_is_disabled",
    "set_thread_local_state_initialization_callback",
    "thread_local_state",
]


def jit_is_disabled() -> bool:
    """Whether jit is disabled in the calling thread: inside ``jax.disable_jit()``,
    or with ``jax_disable_jit`` set."""
    return bool(_jax.DISABLE_JIT.value)


def get_enable_x64() -> bool:
    """Whether 64-bit types are enabled in the calling thread: inside
    ``jax.enable_x64(True)``, or with ``jax_enable_x64`` set."""
    return bool(_jax.ENABLE_X64.value)


class _Setting:
    """A JitState field bound to one of jax's settings."""

    def __init__(self, setting):
        self.setting = setting

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, state, owner=None):
        if state is None:
            return self
        if state.thread_local:
            return _jax.local_setting(self.setting)
        return self.setting.get_global()

    def __set__(self, state, value):
        if state.thread_local:
            _jax.set_local_setting(self.setting, value)
        else:
            jax.config.update(self.setting.name, value)  # jax validates, with its messages


class _PostHook:
    """The post_hook field: the hook ``fastdispatch.set_post_hook`` manages."""

    def __get__(self, state, owner=None):
        if state is None:
            return self
        return _post_hook.get_post_hook(thread_local=state.thread_local)

    def __set__(self, state, hook):
        _post_hook.set_post_hook(hook, thread_local=state.thread_local)


class JitState:
    """jax's jit settings, global (``global_state()``) or the calling thread's
    own (``thread_local_state()``).  A view: reads and writes go to jax."""

    __slots__ = ("thread_local",)

    disable_jit = _Setting(_jax.DISABLE_JIT)
    enable_x64 = _Setting(_jax.ENABLE_X64)
    default_device = _Setting(_jax.DEFAULT_DEVICE)
    post_hook = _PostHook()

    def __init__(self, thread_local: bool):
        object.__setattr__(self, "thread_local", thread_local)

    def __setattr__(self, name, value):
        if name == "thread_local":
            raise AttributeError("JitState.thread_local cannot be changed")
        if name == "extra_jit_context":
            raise AttributeError(
                "JitState.extra_jit_context is read only: jax derives it from its config; "
                "set the jax option itself (jax.config.update, or its context manager)"
            )
        object.__setattr__(self, name, value)

    @property
    def extra_jit_context(self) -> tuple:
        """jax's trace context in the calling thread: the value of every config
        option that changes tracing (x64, default device, mesh, ...), in the
        order of ``jax._src.config.trace_context_names()``.  Every cache key
        holds it.  The same for both views: jax keeps no separate global one."""
        return _jax.trace_context()

    def __repr__(self):
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in ("disable_jit", "enable_x64", "default_device", "post_hook")
        )
        return f"JitState({'thread-local' if self.thread_local else 'global'}: {fields})"


_GLOBAL = JitState(thread_local=False)
_THREAD_LOCAL = JitState(thread_local=True)

_initialization_callback = None
_initialized = threading.local()


def global_state() -> JitState:
    """The global settings: what applies in every thread that has no value of its own."""
    return _GLOBAL


def thread_local_state() -> JitState:
    """The calling thread's own settings (None where it has none).

    A thread's first call runs the callback set with
    ``set_thread_local_state_initialization_callback``, if any, before the
    state is read.
    """
    callback = _initialization_callback
    if callback is not None and not getattr(_initialized, "done", False):
        _initialized.done = True  # first: the callback may read the state itself
        try:
            callback()
        except BaseException:
            _initialized.done = False
            raise
    return _THREAD_LOCAL


def set_thread_local_state_initialization_callback(f) -> None:
    """Call ``f()`` once in each thread, on that thread's first
    ``thread_local_state()`` (after ``f`` was set); None removes it.

    jax's config needs no per-thread set-up any more: the dispatcher never
    calls ``f`` itself.  Use it to give threads their own settings."""
    global _initialization_callback
    if f is not None and not callable(f):
        raise TypeError(
            f"set_thread_local_state_initialization_callback: f must be callable or None, got {f!r}"
        )
    _initialization_callback = f
