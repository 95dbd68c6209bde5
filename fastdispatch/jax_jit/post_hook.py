"""jit's post hook: ``hook(function, args, kwargs, output)`` after every call
(jax_jit.cc's post_hook), global or per thread.

While none is set, a call never looks here: the engine ends a call in its
front end's ``returned`` only while some hook is set (``post_hooks_set``).
"""

import threading

from fastdispatch.core.engine import post_hooks_set

_global_hook = None
_thread_hooks = 0  # threads that set a hook of their own
_local = threading.local()


def set_post_hook(hook, *, thread_local=False):
    """Call ``hook(function, args, kwargs, output)`` after every call.

    With ``thread_local=True`` the hook applies to the calling thread only and
    replaces the global one there.  ``None`` removes the hook.
    """
    global _global_hook, _thread_hooks
    if hook is not None and not callable(hook):
        raise TypeError(f"set_post_hook: hook must be callable or None, got {hook!r}")
    if thread_local:
        had_hook = getattr(_local, "post_hook", None) is not None
        _local.post_hook = hook
        _thread_hooks += (hook is not None) - had_hook
    else:
        _global_hook = hook
    post_hooks_set(_global_hook is not None or _thread_hooks > 0)


def get_post_hook(*, thread_local=False):
    """The hook ``set_post_hook`` set: the global one, or with
    ``thread_local=True`` the calling thread's own (None where it has none)."""
    if thread_local:
        return getattr(_local, "post_hook", None)
    return _global_hook


def call_post_hook(function, args, kwargs, out):
    """The calling thread's hook, else the global one, if any, on a call."""
    hook = getattr(_local, "post_hook", None) if _thread_hooks else None
    if hook is None:
        hook = _global_hook
    if hook is not None:
        hook(function, args, kwargs, out)
