"""What happens between compiled calls: host syncs, eager jax operations, compiles,
the garbage collector.

Installed only while ``python -m fastdispatch --trace`` runs (``install`` /
``uninstall``); without it nothing here is imported.  No public function of
jax or numpy is ever replaced: libraries compare them by identity (given
``lax.add``, ``lax.reduce_window`` picks a differentiable reduction; given
anything else, one with no reverse-mode rule).  While installed:

- host syncs: the jax Array type's own reads to the host (``float``, ``int``,
  ``bool``, ``.item()``, ``.tolist()``, ``__array__``, ``block_until_ready``,
  its ``str``/``repr``/``format`` as ``print`` and f-strings use them), which
  ``jax.device_get`` and numpy (where it cannot read the memory through the
  buffer protocol: arrays off the CPU) call too.  Counted only when the
  program's own code reads, directly or through ``jax.device_get``: jax and
  the libraries read their own arrays too.
- eager ops: every executable jax dispatches while no transformation traces
  (outside any jit).  Each is a jax.jit dispatch (jnp's functions are jitted;
  a primitive bound eagerly is jitted by jax), on jax.jit's C++ fast path or
  its Python path (a miss: trace, compile, run), both watched in ``_jax``.
  Only jax's own jitted functions count: the program's and the libraries'
  jits are compiled calls.  The post hook is jax's global one, and a
  thread's own once jax sets that (a ``jax.debug_nans`` block, which jax's
  gradient of ``relu`` enters): ours again, calling jax's.
- compile phases: jax.monitoring's durations of tracing, lowering and XLA.
- Python's garbage collector: each collection's time (``gc.callbacks``),
  wherever an allocation started it.

Each event is counted once, at its outermost hook (an eager op that reads
an array is one eager op), by the user's file and line (``sites.user_frame``);
an eager op inside constructors, at the line that builds the outermost object
(a model: one finding there, not one per layer); one in the program's code
that a jax library called back (flax's ``init`` running a Module's
``__call__``, ``jax.tree.map`` a lambda), at the program's line that called
that library (``CNN().init(...)``: one finding, not one per layer's line).
An eager op on jax's Python path is timed with its compile (tracing,
lowering, XLA: each op's first shape), which is kept apart.

Times: a sync, and an eager op on jax's Python path, are timed around the
call.  The C++ fast path runs no Python before the op, only after it (the
post hook), so an op there is timed from the end of the previous event of
its thread when that was in the same pass over the same line (``x =
jnp.sin(x) * 0.5``: the multiply), and otherwise at the mean of such
times of the same jax function (0 until there is one).
"""

from __future__ import annotations

import gc
import sys
import threading
import time

import jax

from fastdispatch import _jax
from fastdispatch.core import packing
from fastdispatch.core.watch import output_owner
from fastdispatch.tracing.sites import library_code, user_frame

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
_DEVICE_GET = jax.device_get.__code__  # its reads are the program's, as "jax.device_get()"


class Tally:
    """What the hooks saw while one trace ran."""

    def __init__(self, key_of=None):
        self.syncs = {}  # (site, how) -> [count, ns]
        # (site, how) -> function key -> [count, ns]: the syncs that read a
        # compiled function's output, by that function (``key_of(its id)``)
        self.sync_owners = {}
        self.key_of = key_of
        self.eager = {}  # site -> [count, ns, compile ns]
        self.built = {}  # site of eager ops in constructors -> the class it builds
        self.called = {}  # site of eager ops a library's call ran -> that library function
        self.compile_seconds = dict.fromkeys(_jax.COMPILE_PHASE_EVENTS.values(), 0.0)
        # jax's persistent cache: compiles that asked it, that it served, written to it
        self.jax_cache = dict.fromkeys(_jax.JAX_CACHE_EVENTS.values(), 0)
        # Python's garbage collector: its time, and its collections by generation
        self.gc_ns = 0
        self.gc_collections = [0, 0, 0]

    def add(self, table, key, ns):
        entry = table.get(key)
        if entry is None:
            table[key] = [1, ns]
        else:
            entry[0] += 1
            entry[1] += ns

    def add_op(self, site, ns, compile_ns):
        entry = self.eager.get(site)
        if entry is None:
            self.eager[site] = [1, ns, compile_ns]
        else:
            entry[0] += 1
            entry[1] += ns
            entry[2] += compile_ns

    def add_sync_owner(self, key, function_id, ns):
        function_key = self.key_of(function_id)
        if function_key is not None:
            self.add(self.sync_owners.setdefault(key, {}), function_key, ns)

    def gc_seconds(self):
        return self.gc_ns / 1e9

    def sync_seconds(self):
        return sum(ns for _, ns in self.syncs.values()) / 1e9

    def eager_seconds(self):
        return sum(ns for _, ns, _ in self.eager.values()) / 1e9


_tallies = []  # the tallies of the traces now on
# Per thread: .busy (inside a timed event), .last (where and when its latest
# event ended: id of the user's frame, line, instruction, ns).
_local = threading.local()
_undo = []  # (name, original) on the Array type to put back
_fast_path_ns = {}  # jax function -> [ns, count] of fast-path ops timed exactly
_chained = None  # the post hook jax had (jax_debug_nans's check): ours calls it


def _busy():
    return getattr(_local, "busy", False)


def _count(table, key, frame, ns, end, compile_ns=0, owner=None):
    """One event of ``ns`` ending at ``end``, at ``frame``'s current line
    (a sync: of an output of the compiled function of id ``owner``, where known)."""
    _local.last = (id(frame), frame.f_lineno, frame.f_lasti, end)
    for tally in _tallies:
        if table == "eager":
            tally.add_op(key, ns, compile_ns)
        else:
            tally.add(getattr(tally, table), key, ns)
            if owner is not None and tally.key_of is not None:
                tally.add_sync_owner(key, owner, ns)


def _timed(call, table, frame, how=None, site=None, owner=None):
    """``call()``, timed, as one event at ``frame``'s line (or ``site``),
    with the compile jax made inside it."""
    _local.busy = True
    _local.compile_ns = 0
    began = time.perf_counter_ns()
    try:
        return call()
    finally:
        end = time.perf_counter_ns()
        _local.busy = False
        site = site or (frame.f_code.co_filename, frame.f_lineno)
        key = site if how is None else (site, how)
        _count(table, key, frame, end - began, end, _local.compile_ns, owner)


_COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


def _op_site(frame):
    """Where an eager op at ``frame`` is reported: its line, or, inside
    constructors (a model's layers, whose initialisers run one op at a
    time), the program's line that builds the outermost object, which the
    tallies remember with its class's name; or, inside the program's code a
    jax library called back, the program's line that called the library,
    remembered with the library function it called."""
    built = called = None
    outer = frame
    while True:
        body = outer
        while body.f_code.co_name in _COMPREHENSIONS and body.f_back is not None:
            body = body.f_back  # [Block(k) for k in keys] in a constructor: the constructor's
        if body.f_code.co_name == "__init__" and (caller := user_frame(body.f_back)) is not None:
            built, called, outer = body.f_code.co_qualname.rpartition(".__init__")[0], None, caller
            continue
        caller, library = _library_caller(outer)
        if caller is not None:
            built, called, outer = None, library, caller
            continue
        if _model_method(body) and (caller := user_frame(body.f_back)) is not None:
            built, called, outer = None, body.f_code.co_qualname, caller  # model(x), outside jit
            continue
        break
    site = (outer.f_code.co_filename, outer.f_lineno)
    if built or called:
        for tally in _tallies:
            (tally.built if built else tally.called)[site] = built or called
    return site


_model_methods = {}  # code object -> whether it is a method of a model (a flax or equinox Module)


def _model_method(frame) -> bool:
    """Whether ``frame`` runs a method of a model, a flax (nnx or linen) or
    equinox Module of the program's: the ops of ``model(x)`` outside jit are
    one call of the program's.  Decided once per code object."""
    code = frame.f_code
    found = _model_methods.get(code)
    if found is None:
        found = False
        if code.co_argcount and code.co_varnames[0] == "self":
            bases = tuple(
                base
                for module, name in (("flax.nnx", "Module"), ("flax.linen", "Module"), ("equinox", "Module"))
                if (base := getattr(sys.modules.get(module), name, None)) is not None
            )
            found = bool(bases) and isinstance(frame.f_locals.get("self"), bases)
        _model_methods[code] = found
    return found


# Packages whose calls into the program are one call of the program's (the
# top-level package of a frame's module): jax and the libraries built on it.
_JAX_LIBRARIES = frozenset({"jax", "jaxlib", "flax", "equinox", "optax", "chex"})
_jax_library = {}  # code object -> bool


def _is_jax_library(frame) -> bool:
    code = frame.f_code
    found = _jax_library.get(code)
    if found is None:
        module = frame.f_globals.get("__name__", "")
        found = _jax_library[code] = module.partition(".")[0] in _JAX_LIBRARIES
    return found


def _library_caller(frame):
    """``(the program's frame, the library function it called)`` where
    ``frame``, the program's, runs inside a call the program made into a jax
    library (flax's init calling a Module's ``__call__``): the outermost such
    call above it; else ``(None, None)``.

    The stack above is walked once per frame (a loop's ops at one line ask
    again and again): the answer is kept as how many callers up it is, with
    that frame's code, so that no frame is kept alive by it."""
    key = (id(frame), frame.f_code)
    last = getattr(_local, "library_caller", None)
    if last is not None and last[0] == key:
        steps, code, library = last[1]
        if steps is None:
            return None, None
        found = frame
        for _ in range(steps):
            found = found.f_back if found is not None else None
        if found is not None and found.f_code is code:
            return found, library
    found = library = None
    steps = walked = 0
    crossed = None  # the outermost jax-library function (not a wrapper) of the run of library frames passed
    f = frame.f_back
    while f is not None:
        walked += 1
        if library_code(f.f_code):
            if _is_jax_library(f) and f.f_code.co_name not in _WRAPPERS:
                crossed = f
        elif crossed is not None:
            found, library, steps, crossed = f, _function_name(crossed), walked, None
        f = f.f_back
    _local.library_caller = (key, (steps if found is not None else None, found and found.f_code, library))
    return found, library


# Library frames that only wrap the function a call reached (jax's traceback
# filter, functools.wraps closures): the function is named, not its wrapper.
_WRAPPERS = frozenset({"reraise_with_filtered_traceback", "wrapper", "wrapped", "inner", "wrapped_fun"})


def _function_name(frame):
    """``flax's Module.init``: the library by its package, the function by its qualified name."""
    package = frame.f_globals.get("__name__", "").partition(".")[0]
    return f"{package}'s {frame.f_code.co_qualname}" if package else frame.f_code.co_qualname


# -- host syncs ------------------------------------------------------------------


def _reader(frame):
    """The program's frame that made a read whose caller is ``frame``, with how
    it read when that was not the Array's own method (None: not the program's)."""
    if not library_code(frame.f_code):
        return frame, None
    outermost = frame
    while frame is not None and library_code(frame.f_code):
        outermost, frame = frame, frame.f_back
    if frame is not None and outermost.f_code is _DEVICE_GET:
        return frame, "jax.device_get()"
    return None, None


def _sync_hook(original, how):
    def read(*args, **kwargs):
        if _busy() or not _tallies:
            return original(*args, **kwargs)
        frame, through = _reader(sys._getframe(1))
        if frame is None:
            return original(*args, **kwargs)
        owner = output_owner(args[0]) if args else None
        return _timed(lambda: original(*args, **kwargs), "syncs", frame, through or how, owner=owner)

    for name in ("__name__", "__qualname__", "__doc__"):
        value = getattr(original, name, None)
        if isinstance(value, str):
            setattr(read, name, value)
    read.__wrapped__ = original
    return read


# -- eager ops -------------------------------------------------------------------


def _jax_own(fun) -> bool:
    module = getattr(fun, "__module__", None)
    if not isinstance(module, str):
        module = getattr(getattr(fun, "func", None), "__module__", "")  # a functools.partial
    return module == "jax" or module.startswith("jax.")


def _after_fast_path(jitted, args, kwargs, out):
    """jax's post hook: ``jitted`` just ran on jax.jit's C++ fast path."""
    _count_fast_path(jitted, sys._getframe(1))
    if _chained is not None:
        _chained(jitted, args, kwargs, out)


def _after_fast_path_here(jitted, args, kwargs, out):
    """The post hook of a thread jax gave its own (``_thread_hook``)."""
    _count_fast_path(jitted, sys._getframe(1))
    chained = getattr(_local, "chained", None)
    if chained is not None:
        chained(jitted, args, kwargs, out)


def _thread_hook(jax_hook):
    """This thread's post hook when jax sets it to ``jax_hook`` (leaving a
    ``jax.debug_nans`` block sets None, which would hide ours from then on):
    ours, calling jax's."""
    if jax_hook is not _after_fast_path_here:
        _local.chained = jax_hook
    return _after_fast_path_here


def _count_fast_path(jitted, caller):
    end = time.perf_counter_ns()
    if _tallies and not _busy():
        fun = _jax.jitted_function(jitted)
        if fun is None or _jax_own(fun):
            frame = user_frame(caller)
            if frame is not None:
                _count("eager", _op_site(frame), frame, _fast_path_time(fun, frame, end), end)


def _fast_path_time(fun, frame, end):
    last = getattr(_local, "last", None)
    timed = _fast_path_ns.get(fun)
    if last is not None and last[0] == id(frame) and last[1] == frame.f_lineno and last[2] < frame.f_lasti:
        ns = end - last[3]
        if timed is None:
            _fast_path_ns[fun] = [ns, 1]
        else:
            timed[0] += ns
            timed[1] += 1
        return ns
    return timed[0] // timed[1] if timed is not None else 0


def _python_path(fun, run):
    """jax.jit's Python path, about to run ``fun``'s call."""
    if _jax.jit_post_hook() is not _after_fast_path:
        _hook_fast_path()  # jax set its own since (jax_debug_nans switched): chain it
    if _busy() or not _tallies or not _jax_own(fun) or not _jax.trace_state_is_clean():
        return run()
    frame = user_frame(sys._getframe(1))
    if frame is None:
        return run()
    return _timed(run, "eager", frame, site=_op_site(frame))


def _hook_fast_path():
    global _chained
    _chained = _jax.jit_post_hook()
    _jax.set_jit_post_hook(_after_fast_path)


# -- compiles ----------------------------------------------------------------------


def _beside_the_program():
    """Whether this thread compiles beside the program, for warm start's store
    (warm/refill.py) or an entry's packed variant (core/packing.pyx): those
    compiles are not the program's.  The store's module is asked only where
    warm start was imported (it is never, without it)."""
    if packing.compiling_here():
        return True
    refill = sys.modules.get("fastdispatch.warm.refill")
    return refill is not None and refill.active()


def _compile_phase(event, seconds, **kwargs):
    phase = _jax.COMPILE_PHASE_EVENTS.get(event)
    if phase is None or _beside_the_program():
        return
    if _busy():  # an eager op's compile is the op's time, kept apart in its tally
        _local.compile_ns = getattr(_local, "compile_ns", 0) + int(seconds * 1e9)
        return
    for tally in _tallies:
        tally.compile_seconds[phase] += seconds


def _jax_cache_event(event, **kwargs):
    kind = _jax.JAX_CACHE_EVENTS.get(event)
    if kind is not None and not _beside_the_program():
        for tally in _tallies:
            tally.jax_cache[kind] += 1


# When the collection under way began (collections never nest: the GIL holds them).
_gc_began = 0


def _gc_event(phase, info):
    """gc.callbacks: each collection's time, in whatever phase it fell (the
    allocations of a call, an eager op or the program's own code start it)."""
    global _gc_began
    now = time.perf_counter_ns()
    if phase == "start":
        _gc_began = now
        return
    if _gc_began:
        ns, _gc_began = now - _gc_began, 0
        for tally in _tallies:
            tally.gc_ns += ns
            tally.gc_collections[info["generation"]] += 1


def install(tally):
    """Start counting into ``tally`` (hooks go in with the first tally)."""
    _tallies.append(tally)
    if len(_tallies) > 1:
        return
    for name, how in _SYNC_METHODS.items():
        if name in _ARRAY.__dict__:
            original = _ARRAY.__dict__[name]
            _undo.append((name, original))
            setattr(_ARRAY, name, _sync_hook(original, how))
    _hook_fast_path()
    _jax.keep_thread_post_hook(_thread_hook)
    _jax.observe_jit_python_path(_python_path)
    jax.monitoring.register_event_duration_secs_listener(_compile_phase)
    jax.monitoring.register_event_listener(_jax_cache_event)
    gc.callbacks.append(_gc_event)


def uninstall(tally):
    """Stop counting into ``tally``; the last one out takes the hooks away."""
    global _chained
    if tally in _tallies:
        _tallies.remove(tally)
    if _tallies or not _undo:
        return
    while _undo:
        name, original = _undo.pop()
        setattr(_ARRAY, name, original)
    if _jax.jit_post_hook() is _after_fast_path:
        _jax.set_jit_post_hook(_chained)
    _chained = None
    _jax.keep_thread_post_hook(None)  # threads that have ours keep it: it only calls jax's then
    _jax.observe_jit_python_path(None)
    _fast_path_ns.clear()
    jax.monitoring.unregister_event_duration_listener(_compile_phase)
    jax.monitoring.unregister_event_listener(_jax_cache_event)
    if _gc_event in gc.callbacks:
        gc.callbacks.remove(_gc_event)
