"""Warm start: a restarted program skips tracing, lowering and compiling.

    fastdispatch.warm_start("~/.cache/myprog")      # or FASTDISPATCH_WARM_START=DIR,
                                                     # or python -m fastdispatch --warm-start DIR

Every executable ``fastdispatch.jit``, ``fastdispatch.filter_jit`` and
``fastdispatch.nnx.jit`` compile is written to the store
(warm/store.py) under a key (warm/keys.py) that covers the call's signature,
the function's identity (warm/identity.py: its code and everything it reaches)
and the environment.  In a later process, a miss computes the key before
tracing; a file under it is loaded and run, and the call is then an ordinary
cache entry.  A call whose key cannot be described stably is compiled as
always and never stored; ``warm_start_stats()`` says why (docs/warm-start.md).
"""

from __future__ import annotations

import threading
import time

import jax

from fastdispatch import _engine, _jax
from fastdispatch.warm import outputs
from fastdispatch.warm.identity import NotStored
from fastdispatch.warm.keys import call_key, filter_call_key, filter_call_objects, nnx_call_key
from fastdispatch.warm.store import DEFAULT_MAX_BYTES, Store, WarmStartWarning, function_name

# The thread's count of functions jax traced at top level (jax.monitoring's
# trace event): a compile is written only when jax traced it in this process,
# not when it reused a trace from before a global changed.
_traces = threading.local()


def _count_trace(event, duration, **kwargs):
    if event == _jax.JAXPR_TRACE_EVENT:
        _traces.count = getattr(_traces, "count", 0) + 1


class WarmStart:
    """The engine's view of the store: key, load, save (jit's hooks call these)."""

    def __init__(self, store: Store):
        self.store = store
        # Per function name: its loads, misses, writes, and the seconds its
        # loads took (warm_start_stats()["functions"], the --trace summary).
        self.functions = {}

    def tally(self, fun) -> dict:
        with self.store._lock:
            return self.functions.setdefault(function_name(fun), {"load_seconds": 0.0})

    def key(self, fun, options, signature):
        """The store key of this call of ``jit(fun, **options)``, or None (the
        reason recorded)."""
        return self._key(fun, call_key, fun, options, signature)

    def filter_key(self, fun, options, signature):
        """The store key of this filter_jit call of ``fun``, or None (the
        reason recorded); ``options`` as ``keys.filter_call_key`` takes them."""
        return self._key(fun, filter_call_key, options, signature)

    def nnx_key(self, fun, options, signature, static_args, node_types):
        """The store key of this nnx.jit call of ``fun``, or None (the reason
        recorded); the parts as ``keys.nnx_call_key`` takes them."""
        return self._key(fun, nnx_call_key, fun, options, signature, static_args, node_types)

    def _key(self, fun, describe, *parts):
        _traces.fun = fun  # for the load that follows, on this thread
        try:
            return describe(*parts)
        except NotStored as refusal:
            self.store.refuse(fun, str(refusal))
        except Exception as error:  # never let a key break a call: compile instead
            self.store.refuse(fun, f"has a key that failed ({type(error).__name__}: {error})")
        return None

    def load(self, key):
        """The Compiled stored under ``key``, or None; on None, the compile
        that follows may write it (``save``)."""
        fun, _traces.fun = getattr(_traces, "fun", None), None
        tally = self.tally(fun)
        began = time.perf_counter()
        compiled = self.store.load(key, tally)
        if compiled is not None:
            with self.store._lock:
                tally["load_seconds"] += time.perf_counter() - began
        else:
            _traces.pending = (key, getattr(_traces, "count", 0))
        return compiled

    def save(self, key, compiled, fun, recipe=None, flat_inputs=False):
        """Write ``compiled`` (and a front end's ``recipe``: plain data) under
        ``key``, when jax traced it in this process; ``flat_inputs``: its
        input tree as a flat tuple (nnx.jit's holds GraphDefs, not data)."""
        pending = getattr(_traces, "pending", None)
        _traces.pending = None
        if pending is None or pending[0] != key or getattr(_traces, "count", 0) <= pending[1]:
            # jax served this compile from a trace made earlier in this process
            # (before a global it reads may have changed): not written.
            self.store.refuse(fun, "was compiled from a trace jax made earlier in this process")
            return
        self.store.save(key, compiled, fun, recipe, self.tally(fun), flat_inputs)

    def refuse(self, fun, reason: str):
        """``fun``'s compile is not written, for ``reason`` (a front end's)."""
        _traces.pending = None
        self.store.refuse(fun, reason)

    def save_filter(self, key, compiled, fun, signature, out_treedef, sources, statics):
        """Write a filter_jit compile with its output recipe (the output tree
        ``out_treedef``, each leaf's executable output in ``sources`` or its
        value in ``statics``), described as plain data (warm/outputs.py); a
        recipe that cannot be is not written, its reason recorded."""
        try:
            recipe = outputs.describe(out_treedef, sources, statics, filter_call_objects(signature))
        except NotStored as refusal:
            self.refuse(fun, str(refusal))
        except Exception as error:  # never let the store break a call
            self.refuse(fun, f"has outputs that failed to describe ({type(error).__name__}: {error})")
        else:
            self.save(key, compiled, fun, recipe)

    def save_nnx(self, key, compiled, fun, out_treedef, first_output):
        """Write an nnx.jit compile whose executable keeps every graph it is
        given, with the function's own output structure ``out_treedef`` (its
        leaves the executable's outputs from ``first_output`` on), described
        as plain data (warm/outputs.py); the graphs' outputs are the call's
        own GraphDefs again, derived from the arguments when loaded."""
        n = out_treedef.num_leaves
        try:
            sources = range(first_output, first_output + n)
            recipe = ("nnx", outputs.describe(out_treedef, sources, [None] * n, []))
        except NotStored as refusal:
            self.refuse(fun, str(refusal))
        except Exception as error:  # never let the store break a call
            self.refuse(fun, f"has outputs that failed to describe ({type(error).__name__}: {error})")
        else:
            self.save(key, compiled, fun, recipe, flat_inputs=True)


_current = None
_listening = False


def warm_start(directory, *, max_bytes: int = DEFAULT_MAX_BYTES):
    """Keep every executable ``fastdispatch.jit``, ``fastdispatch.filter_jit``
    and ``fastdispatch.nnx.jit`` compile in ``directory``, and load it there in
    later processes instead of tracing and compiling.

    ``max_bytes`` bounds the directory (least recently used files go first).
    ``None`` turns warm start off.  A call whose key or (filter_jit) non-array
    outputs cannot be described stably is not stored, nor an nnx.jit call whose
    executable changes its graph (new Variables, modules, static attributes);
    ``warm_start_stats()["not_stored"]`` says why (docs/warm-start.md)."""
    global _current, _listening
    if directory is None:
        _engine.set_warm_store(None)
        _current = None
        return
    current = WarmStart(Store(directory, max_bytes))
    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_count_trace)
        _listening = True
    _current = current
    _engine.set_warm_store(current)


def warm_start_stats() -> dict | None:
    """None when warm start is off; else the store's directory, its counts
    (loaded, missed, written, damaged, not_written, evicted), whether it is
    writable, ``not_stored``: per function, why its calls are not stored, and
    ``functions``: per function, the same counts of its own and the seconds
    its loads took (``load_seconds``)."""
    if _current is None:
        return None
    store = _current.store
    with store._lock:
        return {
            "directory": store.directory,
            "writable": store.writable,
            "max_bytes": store.max_bytes,
            **store.counts,
            "not_stored": dict(store.not_stored),
            "functions": {name: dict(tally) for name, tally in _current.functions.items()},
        }


def summary() -> str:
    """warm_start_stats() as text, for the end of the --trace report."""
    stats = warm_start_stats()
    if stats is None:
        return ""
    counts = ", ".join(
        f"{stats[name]} {name}" for name in ("loaded", "missed", "written", "damaged", "evicted")
    )
    lines = [f"warm start ({stats['directory']}{'' if stats['writable'] else ', read-only'}): {counts}"]
    for name, tally in sorted(stats["functions"].items()):
        lines.append(f"  {name}: {_function_line(tally)}")
    lines += [f"  {reason}" for reason in stats["not_stored"].values()]
    return "\n".join(lines) + "\n"


def _function_line(tally: dict) -> str:
    """``2 loaded in 0.41 s; 1 missed (not in the store: compiled), 1 written``."""
    parts = []
    if tally.get("loaded"):
        parts.append(f"{tally['loaded']} loaded in {tally['load_seconds']:.2f} s")
    if tally.get("missed"):
        parts.append(f"{tally['missed']} missed (not in the store: compiled)")
    if tally.get("damaged"):
        parts.append(f"{tally['damaged']} damaged in the store (compiled instead)")
    if tally.get("written"):
        parts.append(f"{tally['written']} written")
    if tally.get("not_written"):
        parts.append(f"{tally['not_written']} not written")
    return ", ".join(parts) or "no store lookups"


__all__ = ["WarmStartWarning", "warm_start", "warm_start_stats"]
