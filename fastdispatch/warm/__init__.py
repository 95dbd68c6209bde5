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

Checked mode (``warm_start(dir, checked=True)``) traces every miss and keys it
on the traced program instead (keys.checked_key): a load skips lowering and
compiling only, and no function is refused for what its code reaches.
"""

from __future__ import annotations

import collections
import contextlib
import pickle
import threading
import time
import weakref

import jax

from fastdispatch import _jax, _reasons
from fastdispatch.core import engine as _engine
from fastdispatch.warm import jax_cache, jax_own, refill, warned
from fastdispatch.warm import outputs as described_outputs
from fastdispatch.warm import preload as preload_module
from fastdispatch.warm.identity import NotStored, function_digest
from fastdispatch.warm.keys import call_key, checked_key, machine
from fastdispatch.warm.store import DEFAULT_MAX_BYTES, Store, WarmStartWarning, function_name

# The thread's count of functions jax traced at top level (jax.monitoring's
# trace event): a compile is written only when jax traced it in this process,
# not when it reused a trace from before a global changed.
_traces = threading.local()


# jax.monitoring's event for one XLA compile (or a load from jax's persistent
# cache); a hit in that cache is _jax.JAX_CACHE_SERVED_EVENT.
_XLA_EVENT = next(name for name, phase in _jax.COMPILE_PHASE_EVENTS.items() if phase == "XLA")


class _Compiles:
    """What jax compiled since warm start began, by computation name, and how
    many of those jax's persistent cache served: the compiles warm start did
    not key explain themselves by these (eager operations, say)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.names = collections.Counter()
        self.jax_cache_hits = 0


_compiles = _Compiles()


def _count_trace(event, duration, **kwargs):
    if event == _jax.JAXPR_TRACE_EVENT:
        _traces.count = getattr(_traces, "count", 0) + 1
        pending = getattr(_traces, "pending", None)
        current = _current
        if pending is not None and pending[2] is not None and current is not None:
            # A miss's trace, of the function as its key's identity digest says.
            with contextlib.suppress(TypeError):  # a callable without weak references
                current.traced[pending[3]] = pending[2]
    elif event == _XLA_EVENT and not refill.active():
        with _compiles.lock:
            _compiles.names[str(kwargs.get("fun_name", "?"))] += 1


def _count_event(event, **kwargs):
    if event == _jax.JAX_CACHE_SERVED_EVENT:
        _traces.jax_cache_hits = getattr(_traces, "jax_cache_hits", 0) + 1
        if refill.active():
            return
        with _compiles.lock:
            _compiles.jax_cache_hits += 1


class Checked:
    """A checked-mode key: its digest, and the trace it digests, whose compile
    alone may be written under it (or that of another trace of the call with
    the same digest: jax 0.8 traces the call again rather than reuse it)."""

    __slots__ = ("digest", "options", "signature", "traced")

    def __init__(self, digest: str, traced, options, signature):
        self.digest = digest
        self.traced = traced
        self.options = options
        self.signature = signature

    def describes(self, traced) -> bool:
        """Whether ``traced`` is the keyed trace, or one with the same digest."""
        if traced.jaxpr is self.traced.jaxpr:
            return True
        try:
            return checked_key(traced, self.options, self.signature) == self.digest
        except Exception:  # NotStored, or a key that fails: not the same program
            return False


class WarmStart:
    """The engine's view of the store: key, load, save (jit's hooks call these)."""

    def __init__(self, store: Store, checked: bool = False):
        self.store = store
        # The same store, counting jax's own compiles apart (warm/jax_own.py).
        self.own_store = store.sharing()
        self.checked = checked
        # Per function name: its loads, misses, writes, and the seconds its
        # loads took (warm_start_stats()["functions"], the --trace summary).
        self.functions = {}
        # Per function: its identity digest when jax last traced it under warm
        # start.  jax reuses a trace for a call that differs in what tracing
        # does not read (committed arguments after the first step's outputs):
        # such a compile is written when the function is as it was traced.
        self.traced = weakref.WeakKeyDictionary()
        # id -> executable, of those jax's persistent cache served to misses
        # (kept alive, so that an id is never another's): they do not
        # serialize whole, nor does a compile jax answers with one of them.
        self.served = {}
        self.machine_noted = False

    def tally(self, fun) -> dict:
        return self.tally_of(function_name(fun))

    def tally_of(self, name: str) -> dict:
        """The counts of the functions of this name (warm_start_stats()["functions"])."""
        with self.store._lock:
            return self.functions.setdefault(name, {"load_seconds": 0.0})

    def jax_cache_hits(self) -> int:
        """How many compiles jax's persistent cache served on this thread so far."""
        return getattr(_traces, "jax_cache_hits", 0)

    def key(self, fun, label, options, signature, parts=(), node_types=(), identified=True):
        """The store key of this call of a front end's function ``fun``, or
        None (the reason recorded).  ``label`` names the front end;
        ``identified``: ``fun`` is keyed by its identity (its code and what
        the code reaches), which is kept for ``save``; else ``parts``
        describe it.  The rest as ``keys.call_key`` takes them."""
        _traces.fun = fun  # for the load that follows, on this thread
        _traces.identity = None
        try:
            self.note_machine()
            if identified:
                # The methods of the call's tree nodes, as far as its code may call them.
                _traces.identity = function_digest(fun, node_types)
                node_types = ()
            return call_key(label, options, signature, parts, node_types, _traces.identity)
        except Exception as error:
            self.not_keyed(fun, error)
        return None

    def checked_key(self, fun, jitted, options, signature, args, kwargs):
        """Checked mode: jax traces the call (``jitted.trace``, into jax's own
        cache, where the compile of a miss finds it) and the key is the traced
        program's (a Checked), or None: not stored (the reason recorded), or
        the trace failed (the compile raises its error)."""
        try:
            traced = jitted.trace(*args, **kwargs)
        except Exception:
            _traces.fun = None
            return None
        _traces.fun = fun
        _traces.identity = None
        try:
            self.note_machine()
            return Checked(checked_key(traced, options, signature), traced, options, signature)
        except Exception as error:
            self.not_keyed(fun, error)
        return None

    def note_machine(self) -> None:
        """At this process's first key: the store warns if it was filled on
        another machine only (Store.note_machine)."""
        if not self.machine_noted:
            self.machine_noted = True
            self.store.note_machine(machine())

    def not_keyed(self, fun, error, store=None):
        """``fun``'s call has no key, for ``error`` (NotStored, or a key that
        failed): its refusal goes to ``store`` (the front ends' by default)."""
        store = self.store if store is None else store
        if isinstance(error, NotStored):
            store.refuse(fun, error.reason, str(error))
        else:  # never let a key break a call: compile instead
            failed = f"has a key that failed ({type(error).__name__}: {error})"
            store.refuse(fun, _reasons.WARM_KEY_FAILED, failed)

    def load(self, key):
        """The Compiled stored under ``key``, or None; on None, the compile
        that follows may write it (``save``)."""
        fun, _traces.fun = getattr(_traces, "fun", None), None
        tally = self.tally(fun)
        began = time.perf_counter()
        if type(key) is Checked:
            # The trees are this process's trace's: they need not pickle.
            trees = (jax.tree_util.tree_structure(key.traced.args_info), key.traced.out_tree)
            compiled = self.store.load(key.digest, tally, trees)
        else:
            compiled = self.store.load(key, tally)
        if compiled is not None:
            with self.store._lock:
                tally["load_seconds"] += time.perf_counter() - began
        else:
            _traces.warned = ()
            _traces.pending = (
                key,
                getattr(_traces, "count", 0),
                getattr(_traces, "identity", None),
                fun,
                getattr(_traces, "jax_cache_hits", 0),
            )
        return compiled

    def recording_warnings(self):
        """The context of a miss's library call whose compile may be written:
        the warnings this thread issues in it are written with it, for a load
        to issue again (warm/warned.py)."""
        _traces.warned = []
        return warned.recording(_traces.warned)

    def save(self, key, compiled, fun, traced=None, lower=None, outputs=None, call_objects=()):
        """Write ``compiled`` under ``key``, when jax traced it in this process
        (in checked mode, when it was compiled from ``traced``, the very trace
        the key digests), with what its compile warned (``recording_warnings``).

        ``outputs`` is the front end's recipe of its call's result, ``(out
        treedef, sources, statics)`` (warm/outputs.py), stored as plain data
        that names ``call_objects`` (the call's objects at places its key fixes)
        by place; None: the executable's own trees, stored as they are where
        they pickle, else its output tree so described.  With a recipe the
        executable's inputs are stored flat: the front end feeds them itself.
        ``lower`` gives the call's jax Lowered (from jax's caches;
        ``traced.lower`` by default), should jax's persistent cache have
        served the compile: it is compiled again for the store."""
        recipe = None
        if type(key) is not Checked and (outputs is not None or not _trees_pickle(compiled)):
            if outputs is None:
                n = compiled.out_tree.num_leaves
                outputs = (compiled.out_tree, range(n), [None] * n)
            try:
                recipe = described_outputs.describe(*outputs, call_objects)
            except NotStored as refusal:
                self.refuse(fun, refusal.reason, str(refusal))
                return
            except Exception as error:  # never let the store break a call
                self.refuse(
                    fun,
                    _reasons.WARM_OUTPUTS,
                    f"has outputs that failed to describe ({type(error).__name__}: {error})",
                )
                return
        pending = getattr(_traces, "pending", None)
        _traces.pending = None
        issued, _traces.warned = getattr(_traces, "warned", ()), ()
        from_jax_cache = self.served_by_jax_cache(
            compiled, pending is not None and getattr(_traces, "jax_cache_hits", 0) > pending[4]
        )
        if type(key) is Checked:
            if traced is None or not key.describes(traced):
                self.store.refuse(
                    fun, _reasons.WARM_OTHER_TRACE, "was compiled from another trace than the one keyed"
                )
                return

            def write(fresh):
                self.store.save(key.digest, fresh, fun, None, self.tally(fun), trees=False, warned=issued)

        else:
            if pending is None or pending[0] != key:
                self.store.refuse(
                    fun,
                    _reasons.WARM_OTHER_TRACE,
                    "was compiled from a trace jax made earlier in this process",
                )
                return
            identity = pending[2]
            if getattr(_traces, "count", 0) <= pending[1] and (
                identity is None or _get(self.traced, fun) != identity
            ):
                # jax served this compile from a trace made earlier in this process
                # (before a global it reads may have changed): not written.  A
                # trace made under warm start, of the function as it is now (its
                # identity digest unchanged since), is the trace a load skips.
                self.store.refuse(
                    fun,
                    _reasons.WARM_OTHER_TRACE,
                    "was compiled from a trace jax made earlier in this process",
                )
                return

            def write(fresh):
                self.store.save(
                    key, fresh, fun, recipe, self.tally(fun), flat_inputs=recipe is not None, warned=issued
                )

        if lower is None and traced is not None:
            lower = traced.lower
        if not from_jax_cache:
            write(compiled)
        elif lower is None:
            # An executable jax loaded from its persistent cache does not
            # serialize again whole (on CPU its code is missing from the copy).
            self.store.refuse(
                fun,
                _reasons.WARM_FROM_JAX_CACHE,
                "was served by jax's persistent cache: not written (a loaded executable does not "
                "serialize again whole); it is written where jax compiles it",
            )
        else:
            self.refill(fun, lower, key.digest if type(key) is Checked else key, write)

    def served_by_jax_cache(self, compiled, hit: bool) -> bool:
        """Whether ``compiled`` came from jax's persistent cache: it was a hit
        there (``hit``), or it is the very executable of one (jax reuses an
        executable for another signature of a call, the committed outputs of a
        first step, without a second lookup)."""
        try:
            executable = compiled.runtime_executable()
        except Exception:
            return hit
        with self.store._lock:
            if hit:
                self.served[id(executable)] = executable
                return True
            return self.served.get(id(executable)) is executable

    def refill(self, fun, lower, seed, write, name=None, store=None):
        """A miss jax's persistent cache served: compiled once more for the
        store, beside the program (warm/refill.py), so that the next run loads
        it; lowered here, where the call's context is.  ``name``: the tally
        it counts in (``fun``'s by default), ``store``: the view of the store
        its refusal goes to (the front ends' by default)."""
        store = self.store if store is None else store
        tally = self.tally(fun) if name is None else self.tally_of(name)
        with store._lock:
            tally["refilled"] = tally.get("refilled", 0) + 1

        def failed(why):
            store.refuse(fun, _reasons.WARM_FROM_JAX_CACHE, f"was served by jax's persistent cache and {why}")

        try:
            lowered = lower()
        except Exception as error:  # never let the store break a call
            failed(f"did not lower again ({type(error).__name__}: {error})")
            return
        refill.start(lowered, seed, write, failed, self.jax_cache_hits)

    def outputs(self, recipe, call_objects):
        """``(out treedef, sources, statics)`` of the recipe ``save`` stored,
        rebuilt with this call's own objects; raises LookupError when they
        cannot be."""
        return described_outputs.rebuild(recipe, call_objects)

    def refuse(self, fun, reason: str, detail: str):
        """``fun``'s compile is not written, for ``reason`` (one of
        fastdispatch._reasons' WARM_ constants; ``detail``: what and where)."""
        _traces.pending = None
        self.store.refuse(fun, reason, detail)


def _get(weak: weakref.WeakKeyDictionary, key):
    try:
        return weak.get(key)
    except TypeError:  # a key without weak references: never put in
        return None


def _trees_pickle(compiled) -> bool:
    """Whether the executable's trees come back from a pickle as they are: a
    node whose data holds a sentinel (equinox's ``MISSING``, compared by
    identity) pickles, but into another object, which its unflatten rejects."""
    trees = (compiled.in_tree, compiled.out_tree)
    try:
        return pickle.loads(pickle.dumps(trees, protocol=pickle.HIGHEST_PROTOCOL)) == trees
    except Exception:
        return False


_current = None
_listening = False


def warm_start(
    directory,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    checked: bool = False,
    preload: bool = True,
    program=None,
):
    """Keep every executable ``fastdispatch.jit``, ``fastdispatch.filter_jit``
    and ``fastdispatch.nnx.jit`` compile in ``directory``, and load it there in
    later processes instead of tracing and compiling.

    ``checked=True`` traces each call first and keys it on the traced program
    (jit only): a load skips lowering and compiling, not tracing, and any
    function that traces to a describable program is stored, whatever its
    code reaches.  The two modes never read each other's files.
    ``max_bytes`` bounds the directory (least recently used files go first).
    ``None`` turns warm start off.  A call whose key or (filter_jit) non-array
    outputs cannot be described stably is not stored, nor an nnx.jit call whose
    executable changes its graph (new Variables, modules, static attributes);
    ``warm_start_stats()["not_stored"]`` says why (docs/warm-start.md).

    ``preload``: load the executables this program used last time in a
    background thread from now on (warm/preload.py), the program named by
    ``program`` (default: the ``__main__`` script's path)."""
    global _current, _listening, _compiles
    if directory is None:
        _engine.set_warm_store(None)
        jax_own.serve(None)
        _current = None
        jax_cache.restore()
        return
    store = Store(directory, max_bytes)
    store.jax_cache = jax_cache.enable(store.directory, max_bytes, store.writable)
    current = WarmStart(store, checked=bool(checked))
    if preload:
        _preload(current, program if program is not None else preload_module.program_of_main())
    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_count_trace)
        jax.monitoring.register_event_listener(_count_event)
        _listening = True
    _compiles = _Compiles()
    _current = current
    _engine.set_warm_store(current)
    jax_own.serve(current)


def _preload(current, program) -> None:
    """Begin loading what ``program`` used last time, in the background, where
    no load has begun yet.  Checked mode's files load with the trees of this
    process's trace: not ahead of it."""
    store = current.store
    if program is not None and not current.checked and store.preloader is None:
        # Shared with the view that counts jax's own compiles (own_store).
        store.preloader = current.own_store.preloader = preload_module.Preloader(store, program)
        store.preloader.start()


def preload_program(program: str) -> None:
    """Begin the background loads of ``program`` (a script's path, or
    ``-m module``) where warm start is on and loads nothing yet: it began as
    fastdispatch was imported, before the program was known
    (FASTDISPATCH_WARM_START under ``python -m fastdispatch``)."""
    if _current is not None:
        _preload(_current, program)


def wait_for_preload(timeout: float | None = None) -> bool:
    """Block until the background loads warm start began are done (True), or
    ``timeout`` seconds passed (False); for benchmarks and tests."""
    if _current is None or _current.store.preloader is None:
        return True
    return _current.store.preloader.join(timeout)


def warm_start_stats() -> dict | None:
    """None when warm start is off; else the store's directory, its counts
    (loaded (preloaded: of them, loaded in the background), missed, written,
    damaged, not_written, evicted), whether it is writable and ``checked``,
    ``not_stored``: per function, why its calls are not stored, and
    ``functions``: per function, the same counts of its own and the seconds
    its loads took (``load_seconds``)."""
    if _current is None:
        return None
    store = _current.store
    with store._lock:
        return {
            "directory": store.directory,
            "checked": _current.checked,
            "writable": store.writable,
            "max_bytes": store.max_bytes,
            **store.counts,
            "not_stored": dict(store.not_stored),
            "jax_cache": dict(store.jax_cache),
            "reasons": dict(store.reasons),
            "outside": _outside(set(_current.functions) | set(store.not_stored)),
            "jax_own": {**_current.own_store.counts, "not_stored": dict(_current.own_store.not_stored)},
            "functions": {name: dict(tally) for name, tally in _current.functions.items()},
        }


def _outside(keyed: set) -> dict:
    """The compiles jax made since warm start began for computations other
    than the functions warm start keyed (``keyed``: their qualified names):
    eager operations, transformations run outside a jit, a library's own jit.
    jax's persistent cache (warm/jax_cache.py) is what serves those."""
    short = {name.rpartition(".")[2] for name in keyed}
    with _compiles.lock:
        names = {
            name: n
            for name, n in _compiles.names.items()
            if name.removeprefix("jit_").removeprefix("jit(").removesuffix(")") not in short
        }
        hits = _compiles.jax_cache_hits
    return {
        "reason": _reasons.WARM_OUTSIDE if names else None,
        "compiles": sum(names.values()),
        "names": dict(collections.Counter(names).most_common()),
        "jax_cache_hits": hits,
    }


def summary() -> str:
    """warm_start_stats() as text, for the end of the --trace report."""
    stats = warm_start_stats()
    if stats is None:
        return ""
    counts = ", ".join(
        f"{stats[name]} {name}" for name in ("loaded", "missed", "written", "damaged", "evicted")
    )
    if stats["preloaded"]:
        counts = counts.replace(" loaded,", f" loaded ({stats['preloaded']} in the background),", 1)
    where = (
        stats["directory"]
        + ("" if stats["writable"] else ", read-only")
        + (", checked" if stats["checked"] else "")
    )
    lines = [f"warm start ({where}): {counts}", "  " + jax_cache.describe(stats["jax_cache"])]
    for name, tally in sorted(stats["functions"].items()):
        lines.append(f"  {name}: {_function_line(tally)}")
    lines += [f"  {reason}" for reason in stats["not_stored"].values()]
    lines += [f"  {reason}" for reason in stats["jax_own"]["not_stored"].values()]
    outside = stats["outside"]
    if outside["compiles"]:
        names = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in list(outside["names"].items())[:6])
        more = ", ..." if len(outside["names"]) > 6 else ""
        lines.append(
            f"  {outside['compiles']} {_reasons.WARM_OUTSIDE} ({names}{more}): eager operations, "
            "transformations outside a jit, a library's own jit; stored as jax's own compiles where "
            "their programs can be keyed"
        )
    if outside["jax_cache_hits"]:
        lines.append(f"  jax's persistent cache served {outside['jax_cache_hits']} compiles in this process")
    return "\n".join(lines) + "\n"


def _function_line(tally: dict) -> str:
    """``2 loaded in 0.41 s; 1 missed (not in the store: compiled), 1 written``."""
    parts = []
    if tally.get("loaded"):
        preloaded = f", {tally['preloaded']} of them in the background" if tally.get("preloaded") else ""
        parts.append(f"{tally['loaded']} loaded in {tally['load_seconds']:.2f} s{preloaded}")
    if tally.get("missed"):
        parts.append(f"{tally['missed']} missed (not in the store: compiled)")
    if tally.get("damaged"):
        parts.append(f"{tally['damaged']} damaged in the store (compiled instead)")
    if tally.get("refilled"):
        parts.append(f"{tally['refilled']} served by jax's persistent cache, compiled again for the store")
    if tally.get("written"):
        parts.append(f"{tally['written']} written")
    if tally.get("not_written"):
        parts.append(f"{tally['not_written']} not written")
    return ", ".join(parts) or "no store lookups"


__all__ = ["WarmStartWarning", "warm_start", "warm_start_stats"]
