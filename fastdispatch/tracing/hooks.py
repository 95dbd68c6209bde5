"""What happens between compiled calls: host syncs, eager jax operations, compiles.

Installed only while ``python -m fastdispatch --trace`` runs (``install`` /
``uninstall``); without it nothing here is imported and no jax or numpy name
is touched.  While installed:

- host syncs: the jax Array's reads to the host (``float``, ``int``, ``bool``,
  ``.item()``, ``.tolist()``, ``__array__``, ``block_until_ready``, its
  ``str``/``repr``/``format`` as ``print`` and f-strings use them) and
  ``np.asarray`` / ``np.array`` / ``jax.device_get`` of a jax Array.  Counted
  only when called by the program's own code: jax reads its own arrays too.
  (numpy reads a CPU array through the buffer protocol, not ``__array__``, so
  numpy's functions are watched themselves.)
- eager ops: the functions of ``jax.numpy``, ``jax.lax``, ``jax.random`` and
  ``jax.nn``, and the jax Array's operators, called while no transformation
  traces (outside any jit): each is one dispatch of its own.
- compile phases: jax.monitoring's durations of tracing, lowering and XLA.

Each event is counted once, at its outermost hook (an eager op that reads
an array is one eager op), by the user's file and line (``sites.user_site``).
"""

from __future__ import annotations

import sys
import threading
import time
import types

import jax
import numpy as np

from fastdispatch import _jax
from fastdispatch.tracing.sites import library_code, user_site

__all__ = ["Tally", "install", "uninstall"]

_ARRAY = _jax.ARRAY_TYPE

# The jax Array's reads to the host, with the words a finding uses for them.
_SYNC_METHODS = {
    "__float__": "float()",
    "__int__": "int()",
    "__index__": "int()",
    "__bool__": "bool()",
    "__complex__": "complex()",
    "item": ".item()",
    "tolist": ".tolist()",
    "__array__": "np.asarray()",
    "block_until_ready": ".block_until_ready()",
    "__str__": "print/str()",
    "__repr__": "print/repr()",
    "__format__": "an f-string",
}
_SYNC_FUNCTIONS = (
    (np, "asarray", "np.asarray()"),
    (np, "array", "np.array()"),
    (np, "asanyarray", "np.asarray()"),
)

# The jax Array's operators: each, outside jit, dispatches one operation.
_OPERATORS = tuple(
    f"__{name}__"
    for name in (
        "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow matmul rmatmul "
        "neg pos abs invert and rand or ror xor rxor lshift rlshift rshift rrshift "
        "lt le gt ge eq ne getitem"
    ).split()
)
_EAGER_MODULES = ("jax.numpy", "jax.lax", "jax.random", "jax.nn")


class Tally:
    """What the hooks saw while one trace ran."""

    def __init__(self):
        self.syncs = {}  # (site, how) -> [count, ns]
        self.eager = {}  # site -> [count, ns]
        self.compile_seconds = dict.fromkeys(_jax.COMPILE_PHASE_EVENTS.values(), 0.0)

    def add(self, table, key, ns):
        entry = table.get(key)
        if entry is None:
            table[key] = [1, ns]
        else:
            entry[0] += 1
            entry[1] += ns

    def sync_seconds(self):
        return sum(ns for _, ns in self.syncs.values()) / 1e9

    def eager_seconds(self):
        return sum(ns for _, ns in self.eager.values()) / 1e9


_tallies = []  # the tallies of the traces now on
_local = threading.local()  # .busy: inside a hook on this thread
_undo = []  # (owner, name, original) to put back


def _busy():
    return getattr(_local, "busy", False)


def _sync_hook(original, how):
    def read(*args, **kwargs):
        if _busy() or not _tallies or library_code(sys._getframe(1).f_code):
            return original(*args, **kwargs)
        return _timed(original, args, kwargs, "syncs", (user_site(sys._getframe(1)), how))

    return _named(read, original)


def _sync_function_hook(original, how):
    def read(a, *args, **kwargs):
        if type(a) is not _ARRAY or _busy() or not _tallies or library_code(sys._getframe(1).f_code):
            return original(a, *args, **kwargs)
        return _timed(original, (a,) + args, kwargs, "syncs", (user_site(sys._getframe(1)), how))

    return _named(read, original)


def _eager_hook(original):
    def op(*args, **kwargs):
        if _busy() or not _tallies or not _jax.trace_state_is_clean():
            return original(*args, **kwargs)
        site = user_site(sys._getframe(1))
        if site is None:
            return original(*args, **kwargs)
        return _timed(original, args, kwargs, "eager", site)

    return _named(op, original)


def _named(wrapper, original):
    """``wrapper`` under ``original``'s name and doc (for help() and reprs)."""
    for name in ("__name__", "__qualname__", "__doc__"):
        value = getattr(original, name, None)
        if isinstance(value, str):
            setattr(wrapper, name, value)
    wrapper.__wrapped__ = original
    return wrapper


def _timed(original, args, kwargs, table, key):
    _local.busy = True
    began = time.perf_counter_ns()
    try:
        return original(*args, **kwargs)
    finally:
        ns = time.perf_counter_ns() - began
        _local.busy = False
        for tally in _tallies:
            tally.add(getattr(tally, table), key, ns)


def _compile_phase(event, seconds, **kwargs):
    phase = _jax.COMPILE_PHASE_EVENTS.get(event)
    if phase is None or _busy():  # an eager op's compile is the op's time
        return
    for tally in _tallies:
        tally.compile_seconds[phase] += seconds


def _replace(owner, name, replacement):
    _undo.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
    setattr(owner, name, replacement)


def _is_eager_function(value):
    return isinstance(value, types.FunctionType) or type(value) is type(jax.numpy.sin)


def install(tally):
    """Start counting into ``tally`` (hooks go in with the first tally)."""
    _tallies.append(tally)
    if len(_tallies) > 1:
        return
    for name, how in _SYNC_METHODS.items():
        if name in _ARRAY.__dict__:
            _replace(_ARRAY, name, _sync_hook(_ARRAY.__dict__[name], how))
    for owner, name, how in _SYNC_FUNCTIONS:
        _replace(owner, name, _sync_function_hook(getattr(owner, name), how))
    _replace(jax, "device_get", _sync_hook(jax.device_get, "jax.device_get()"))
    for name in _OPERATORS:
        if name in _ARRAY.__dict__:
            _replace(_ARRAY, name, _eager_hook(_ARRAY.__dict__[name]))
    for module_name in _EAGER_MODULES:
        module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
        for name, value in list(vars(module).items()):
            if not name.startswith("_") and _is_eager_function(value):
                _replace(module, name, _eager_hook(value))
    jax.monitoring.register_event_duration_secs_listener(_compile_phase)


def uninstall(tally):
    """Stop counting into ``tally``; the last one out takes the hooks away."""
    if tally in _tallies:
        _tallies.remove(tally)
    if _tallies or not _undo:
        return
    while _undo:
        owner, name, original = _undo.pop()
        setattr(owner, name, original)
    jax.monitoring.unregister_event_duration_listener(_compile_phase)
