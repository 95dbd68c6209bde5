# cython: boundscheck=False, wraparound=False
"""CompiledFunction, the hot path of ``fastdispatch.jit``.

One call, as data flows (docs/architecture.md):
  1. state      jax's trace context; a transformation tracing right now? -> jax
  2. guard      f(a, b, ...) laid out as the previous call, its leaves checked
                in the caller's argument array (vectorcall): on to 5
  3. flatten    static args split off; dynamic args -> leaves + TreeDef;
     signature  the same identity guard, else a CallSignature looked up in our
                part of the shared LRU
  4. miss       one thread runs the call through jax.jit, then takes its
                executable from jax.jit(fun).lower(...).compile();
                the others wait on the entry's event
  5. execute    the entry's Executable (execute layer)
  6. return     post hook; trace event

While jax.profiler captures, each call is a span on the host timeline named
after its function (``FastDispatch(<name>)``, as jax.jit's are
``PjitFunction(<name>)``), with one span per phase inside.  The spans and the
``--trace`` clock stamps are one mechanism: ``_reached`` at each phase boundary.

Python calls arrive through the vectorcall slot, the only way in (``__call__``
forwards to it).  Whatever the fast path cannot run, jax.jit itself runs
(``_fallback``), with the reason recorded for ``--trace``; so results never
differ from jax.jit's.
"""
import functools
import inspect
import threading
import types

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

from fastdispatch._cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch._clock cimport now_ns
from fastdispatch._execute cimport Delegate, Executable, make_executable
from fastdispatch._keys cimport same_items
from fastdispatch._pytree cimport TreeDef, flatten_into
from fastdispatch._signature cimport (
    CallSignature, LeafKind, LEAF_HOST, LEAF_TRACER, classify_leaf, make_signature)
from fastdispatch._cache import default_cache
from fastdispatch._execute import HOST_DATA_REASON, NEW_SCALAR_REASON
from fastdispatch import _jax

cdef extern from "Python.h":
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf,
                               PyObject* kwnames)
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct _VectorcallType "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags


cdef object _trace_context = _jax.trace_context
cdef object _trace_state = _jax.TRACE_STATE
cdef object _clean_trace_state = _jax.CLEAN_TRACE_STATE
cdef object _slow_path_reason = _jax.slow_path_reason

# Tracing: a C-level flag checked once per call; see fastdispatch.tracing.
trace_sink = None

# jax.profiler: is a capture running?  One call of jaxlib's static
# TraceMe.is_enabled (an atomic load in C++), ~5 ns from here, per call
# (docs/performance.md).  Spans begin when made and end at __exit__.
cdef object _profiling = _jax.TRACE_ME.is_enabled
cdef object _TraceMe = _jax.TRACE_ME
cdef object _end_span = _jax.TRACE_ME.__exit__


cdef int reached(CallTimes* times, Stage stage, str next_phase, str reason=None) except -1:
    """A call reached a phase boundary.  With --trace, every stamp up to
    ``stage`` not taken yet is taken now (so stamps never go backwards); under
    jax.profiler, the open phase's span ends and ``next_phase``'s begins (None:
    none), with the fallback ``reason`` as its metadata."""
    cdef long long now
    if times.watch & WATCH_CLOCK:
        now = now_ns()
        if times.start == 0:
            times.start = now
        if stage >= AT_FLATTENED and times.flattened == 0:
            times.flattened = now
        if stage >= AT_KEYED and times.keyed == 0:
            times.keyed = now
        if stage >= AT_FOUND and times.found == 0:
            times.found = now
        if stage >= AT_LAUNCHED and times.launched == 0:
            times.launched = now
        if stage >= AT_END and times.end == 0:
            times.end = now
    if times.watch & WATCH_SPANS:
        end_phase(times)
        if next_phase is not None:
            span = _TraceMe(next_phase) if reason is None else _TraceMe(next_phase, reason=reason)
            Py_INCREF(span)
            times.span = <PyObject*>span
    return 0


cdef int end_phase(CallTimes* times) except -1:
    cdef PyObject* span = times.span
    if span != NULL:
        times.span = NULL
        try:
            _end_span(<object>span, None, None, None)
        finally:
            Py_XDECREF(span)
    return 0

# Post hooks: the global one, and a count of threads that set their own so
# that a call looks at thread-local storage only when one might be there.
cdef object _global_post_hook = None
cdef int _thread_post_hooks = 0
_thread_local = threading.local()


cdef void record_call(object fn, CallTimes* times, bint hit, long long compile_ns, object reason,
                      CallSignature signature):
    sink = trace_sink
    if not times.watch & WATCH_CLOCK or sink is None:
        return
    sink.record(
        fn, (times.start, times.flattened, times.keyed, times.found, times.launched, times.end),
        hit, compile_ns, reason, signature)


cdef object begin_call(CallTimes* times, str span_name):
    start_watch(times)
    if not times.watch & WATCH_SPANS:
        if times.watch:
            times.start = now_ns()
        return None
    span = _TraceMe(span_name)
    reached(times, AT_START, "flatten")
    return span


cdef int end_call(CallTimes* times, object span) except -1:
    try:
        end_phase(times)   # still open when the call raised
    finally:
        _end_span(span, None, None, None)
    return 0


cdef bint trace_state_clean() noexcept:
    return _trace_state.value is _clean_trace_state


cdef tuple trace_context():
    return _trace_context()


cdef void start_watch(CallTimes* times):
    times.start = times.flattened = times.keyed = times.found = 0
    times.launched = times.end = 0
    times.span = NULL
    times.watch = WATCH_CLOCK if trace_sink is not None else 0
    if _profiling():
        times.watch |= WATCH_SPANS


def set_trace_sink(sink):
    """Send every call's timings to ``sink.record(...)``; None stops it."""
    global trace_sink
    trace_sink = sink


def set_post_hook(hook, *, thread_local=False):
    """Call ``hook(function, args, kwargs, output)`` after every call.

    With ``thread_local=True`` the hook applies to the calling thread only and
    replaces the global one there.  ``None`` removes the hook.
    """
    global _global_post_hook, _thread_post_hooks
    if hook is not None and not callable(hook):
        raise TypeError(f"set_post_hook: hook must be callable or None, got {hook!r}")
    if not thread_local:
        _global_post_hook = hook
        return
    had_hook = getattr(_thread_local, "post_hook", None) is not None
    _thread_local.post_hook = hook
    _thread_post_hooks += (hook is not None) - had_hook


def get_post_hook(*, thread_local=False):
    """The hook ``set_post_hook`` set: the global one, or with
    ``thread_local=True`` the calling thread's own (None where it has none)."""
    if thread_local:
        return getattr(_thread_local, "post_hook", None)
    return _global_post_hook


cdef inline object _current_post_hook():
    if _thread_post_hooks:
        hook = getattr(_thread_local, "post_hook", None)
        if hook is not None:
            return hook
    return _global_post_hook


def _call_post_hook(CompiledFunction fn, tuple args, dict kwargs, out):
    hook = _current_post_hook()
    if hook is not None:
        hook(fn, args, {} if kwargs is _NO_KWARGS else kwargs, out)


# The dynamic kwargs of a call with no keyword arguments, or only static ones;
# never mutated, and never handed to user code (the post hook gets a new dict).
cdef dict _NO_KWARGS = {}


def _first(triple):
    return triple[0]


cdef tuple _tuple_from_array(PyObject** items, Py_ssize_t n):
    cdef tuple result = PyTuple_New(n)
    cdef Py_ssize_t i
    for i in range(n):
        Py_INCREF(<object>items[i])
        PyTuple_SET_ITEM(result, i, <object>items[i])
    return result


cdef dict _kwargs_from_array(PyObject** items, Py_ssize_t nargs, PyObject* kwnames):
    if kwnames == NULL:
        return _NO_KWARGS
    cdef tuple names = <tuple>kwnames
    cdef dict kwargs = {}
    cdef Py_ssize_t i
    for i in range(PyTuple_GET_SIZE(names)):
        kwargs[<object>PyTuple_GET_ITEM(names, i)] = <object>items[nargs + i]
    return kwargs


# CallLayout.guard's answer when the leaves are the call's positional
# arguments themselves: the tuple is only built if the executable runs.
cdef object ARGV_LEAVES = object()


cdef inline bint _all_keyable(tuple values):
    for value in values:
        if classify_leaf(value) > LEAF_HOST:
            return False
    return True


@cython.final
cdef class CallLayout:
    """Where the leaves of a call sit in its argument array, for calls whose
    every dynamic argument is a leaf, e.g. ``f(x, y)``, ``f(x, lr=0.1, mode="eval")``
    or ``f(x, 3, y=y)`` with the 3 static.

    A call with the same keyword names, in the same order, and as many
    positional arguments has the previous call's structure: its leaves can be
    read from the array, in jax's order (positional, then keywords by sorted
    name), without flattening, and its static values compared in place."""

    cdef object guard(self, Call* call, CallSignature signature, tuple context):
        cdef Py_ssize_t nargs = PyVectorcall_NARGS(call.nargsf)
        cdef tuple leaves
        if nargs != self.nargs or not self._same_keywords(call.kwnames):
            return None
        if not self._statics_match(call.argv, signature.static_args):
            return None
        if self.leaf_index is None:
            if not signature.matches_leaves(call.argv, nargs, context):
                return None
            return ARGV_LEAVES
        leaves = self._gather(call.argv)
        if not signature.matches_leaves(PySequence_Fast_ITEMS(leaves),
                                        PyTuple_GET_SIZE(leaves), context):
            return None
        return leaves

    cdef bint _same_keywords(self, PyObject* kwnames):
        # Names compared by address: identifiers are interned, and a call site
        # passes the very same names (often the very same tuple) every time.
        if kwnames == NULL or self.kwnames is None:
            return kwnames == NULL and self.kwnames is None
        return same_items(<tuple>kwnames, <tuple>self.kwnames)

    cdef tuple _gather(self, PyObject** argv):
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self.leaf_index)
        cdef tuple leaves = PyTuple_New(n)
        cdef object item
        for i in range(n):
            item = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.leaf_index, i)]
            Py_INCREF(item)
            PyTuple_SET_ITEM(leaves, i, item)
        return leaves

    cdef bint _statics_match(self, PyObject** argv, tuple static_args):
        # static_args holds (name, type, value) triples in static_index's order.
        cdef Py_ssize_t i
        for i in range(PyTuple_GET_SIZE(self.static_index)):
            value = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.static_index, i)]
            expected = <object>PyTuple_GET_ITEM(static_args, 3 * i + 2)
            if type(value) is not <object>PyTuple_GET_ITEM(static_args, 3 * i + 1):
                return False
            if value is not expected:
                try:
                    if not value == expected:
                        return False
                except Exception:
                    return False    # the general path reports it as jax does
        return True


cdef CallLayout _layout_of(tuple args, dict kwargs, object kwnames,
                           frozenset static_names, CallSignature signature):
    """The CallLayout of a call, or None when some dynamic argument is not a leaf."""
    cdef tuple static_args = signature.static_args
    cdef Py_ssize_t nargs = PyTuple_GET_SIZE(args)
    # Static positions come first in static_args, in increasing order.
    cdef tuple static_positions = tuple([label for label in static_args[::3] if type(label) is int])
    cdef tuple dynamic_positions = tuple([i for i in range(nargs) if i not in static_positions])
    if not _all_keyable(tuple([args[i] for i in dynamic_positions])):
        return None
    cdef CallLayout layout = CallLayout.__new__(CallLayout)
    layout.kwnames = kwnames
    layout.nargs = nargs
    layout.leaf_index = None
    layout.static_index = static_positions
    if kwnames is not None or static_positions:
        dynamic = sorted(name for name in kwnames or () if name not in static_names)
        if not _all_keyable(tuple([kwargs[name] for name in dynamic])):
            return None
        layout.leaf_index = dynamic_positions + tuple(
            nargs + kwnames.index(name) for name in dynamic)
        layout.static_index += tuple(
            nargs + kwnames.index(name)
            for name in sorted(name for name in kwnames or () if name in static_names))
    num_leaves = nargs if layout.leaf_index is None else len(layout.leaf_index)
    return layout if num_leaves == signature.treedef.num_leaves else None


cdef inline str _hand_off_reason(PreviousCall previous, object leaves, Call* call):
    """Why jax.jit takes this call whatever jax's context, or None: the
    previous call's entry is one jax.jit runs for its numpy leaves, or this
    call brings a Python scalar value its executable leaves to jax (see
    Executable.new_scalar_in)."""
    if previous.hands_off:
        return HOST_DATA_REASON
    cdef Executable executable = previous.entry.executable
    if executable is None or not executable.new_scalars_to_jax:
        return None
    if executable.new_scalar_in(
            call.argv if leaves is ARGV_LEAVES else PySequence_Fast_ITEMS(leaves)):
        return NEW_SCALAR_REASON
    return None


cdef inline bint _same_shape(PreviousCall previous, Call* call):
    """The call's argument array holds as many arguments of the same types,
    under the same keyword names, as the previous call's."""
    cdef Py_ssize_t i, n = PyVectorcall_NARGS(call.nargsf)
    if n != previous.nargs:
        return False
    if call.kwnames == NULL or previous.kwnames is None:
        if call.kwnames != NULL or previous.kwnames is not None:
            return False
    elif not same_items(<tuple>call.kwnames, <tuple>previous.kwnames):
        return False
    else:
        n += PyTuple_GET_SIZE(<tuple>call.kwnames)
    for i in range(n):
        if type(<object>call.argv[i]) is not <object>PyTuple_GET_ITEM(previous.arg_types, i):
            return False
    return True


@cython.final
cdef class PreviousCall:
    """The guard's guess for the next call: the previous call's entry, its own
    signature (the very aval and sharding objects it held) and its layout.
    One object, replaced whole, so that a thread never pairs one call's entry
    with another's signature."""


cdef class _NotGiven:
    def __repr__(self):
        return "<not given>"

# Marks a jit option the caller left out, so that jax.jit applies its own default.
NOT_GIVEN = _NotGiven()


def _freeze(value):
    """A hashable stand-in for a jit option, for the shared cache's key."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _positional_names(fun):
    try:
        parameters = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in parameters
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


cdef object _vectorcall(CompiledFunction self, PyObject** argv, size_t nargsf,
                        PyObject* kwnames):
    # The type's PEP 590 slot: Python's way into every call.
    cdef Call call
    call.argv = argv
    call.nargsf = nargsf
    call.kwnames = kwnames
    return self._call(&call)


@cython.final
cdef class CompiledFunction:
    """A function compiled by ``fastdispatch.jit``: call it as the function.

    Behaves as ``jax.jit(fun, **options)`` in every observable way (results,
    dtypes, weak types, shardings, errors, retraces), with less time spent per
    call between Python and the executable.
    """

    def __cinit__(self):
        self._vectorcall_slot = <vectorcallfunc>_vectorcall

    def __init__(self, fun, dict options=None, cache=None):
        options = {} if options is None else options
        self._span_name = f"FastDispatch({_jax.fun_name(fun)})"
        if cache is not None and not isinstance(cache, CompiledFunctionCache):
            raise TypeError(
                f"jit: cache must be a fastdispatch.CompiledFunctionCache, got {cache!r}")
        # jax.jit validates fun and every option, with its own messages.
        self._jitted = _jax.jax_jit(fun, **options)
        self.fun = fun
        self._options = options
        self._cache = default_cache() if cache is None else cache
        try:
            options_key = _freeze(options)
            hash(options_key)
        except TypeError:
            options_key = object()   # unhashable option: this object's entries only
        self._entries = self._cache.function_cache(fun, options_key)
        resolved = _jax.resolved_arguments(self._jitted)
        self._static_argnums = resolved.static_argnums
        self._static_argnames = frozenset(resolved.static_argnames)
        self._has_static = bool(self._static_argnums or self._static_argnames)
        self._donates = bool(resolved.donate_argnums or resolved.donate_argnames)
        static_positions = {i for i in self._static_argnums if i >= 0}
        self._dynamic_arg_names = tuple(
            name for i, name in enumerate(_positional_names(fun))
            if i not in static_positions)
        functools.update_wrapper(self, fun)

    # -- the hot path ------------------------------------------------------

    def __call__(self, *args, **kwargs):
        # Reached through PyObject_Call only (functools.partial, say): the
        # arguments are laid out as a vectorcall would pass them.
        cdef tuple values = args + tuple(kwargs.values()) if kwargs else args
        cdef tuple names = tuple(kwargs) if kwargs else None
        cdef Call call
        call.argv = PySequence_Fast_ITEMS(values)
        call.nargsf = PyTuple_GET_SIZE(args)
        call.kwnames = <PyObject*>names if names is not None else NULL
        return self._call(&call)

    cdef object _call(self, Call* call):
        """Every call: which watchers are on (--trace, jax.profiler), then the steps."""
        cdef CallTimes times
        if self._entries is None:
            raise TypeError("CompiledFunction was created without __init__: "
                            "make one with fastdispatch.jit(fun)")
        span = begin_call(&times, self._span_name)
        if span is None:
            return self._guarded(call, &times)
        try:
            return self._guarded(call, &times)
        finally:
            end_call(&times, span)

    cdef object _guarded(self, Call* call, CallTimes* times):
        """Steps 1 and 2: the guard on the argument array, then jax's state."""
        cdef PreviousCall previous = self._previous
        cdef object leaves = None
        if previous is not None and previous.layout is not None and not previous.entry.evicted:
            leaves = previous.layout.guard(call, previous.signature, None)
            if leaves is not None and not times.watch:
                # jax.jit takes a call for what its leaves are (numpy arguments,
                # a step counter's new value: it converts them faster); jax's
                # context and trace state cannot change that, so neither is read.
                reason = _hand_off_reason(previous, leaves, call)
                if reason is not None:
                    self._entries.touch(previous.entry)
                    return self._fallback(call, reason, times, None)
        elif (previous is not None and previous.tree_hand_off is not None and not times.watch
              and _same_shape(previous, call)):
            # A call of trees laid out as the previous one, which jax.jit took
            # for its leaves' sake: it takes this one too, unflattened, but for
            # every 64th, which is flattened and keyed again in case its leaves
            # (or jax's choice) have changed.
            previous.tree_hand_offs += 1
            if previous.tree_hand_offs & 63:
                return self._fallback(call, previous.tree_hand_off, times, None)
        context = _trace_context()
        if not trace_state_clean():
            return self._fallback(call, "tracer", times, None)
        if previous is not None and not previous.signature.same_context(context):
            # jax's settings changed since the previous call: one jax.jit
            # itself runs (disable_jit, say) goes to it before flattening.
            reason = _slow_path_reason()
            if reason is not None:
                return self._fallback(call, reason, times, None)
        elif leaves is not None:
            return self._run(previous.entry, leaves, call, times)
        return self._general(call, context, times)

    cdef object _general(self, Call* call, tuple context, CallTimes* times):
        """Steps 3 and 4: split, flatten, guard or look up, compile on a miss."""
        cdef Py_ssize_t nargs = PyVectorcall_NARGS(call.nargsf)
        cdef tuple args = _tuple_from_array(call.argv, nargs)
        cdef dict kwargs = _kwargs_from_array(call.argv, nargs, call.kwnames)
        cdef tuple dynamic_args = args
        cdef dict dynamic_kwargs = kwargs
        cdef tuple static_args = ()
        if self._has_static:
            dynamic_args, dynamic_kwargs, static_args = self._split_static(args, kwargs)
        cdef list leaves = []
        cdef TreeDef treedef = flatten_into((dynamic_args, dynamic_kwargs), leaves)
        if times.watch:
            reached(times, AT_FLATTENED, "signature")

        # The guard compares with the previous call's own objects, not the
        # entry's: a training loop feeds back outputs whose avals differ (by
        # identity) from those of the arrays it was first called with.
        cdef PreviousCall previous = self._previous
        if (previous is not None and not previous.entry.evicted
                and previous.signature.matches_call(treedef, leaves, static_args, context)):
            return self._run(previous.entry, leaves, call, times)

        cdef CallSignature signature
        cdef LeafKind refused = LEAF_HOST
        try:
            signature = make_signature(treedef, leaves, static_args, context,
                                       self._dynamic_arg_names, &refused)
        except Exception:
            # An unhashable static argument: jax raises its own error.
            return self._fallback(call, "static_argument_error", times, None)
        if signature is None:
            return self._fallback(
                call, "tracer" if refused == LEAF_TRACER else "unsupported_leaf", times, None)
        if times.watch:
            reached(times, AT_KEYED, "lookup")
        cdef CacheEntry entry
        try:
            entry = self._entries.entries.get(signature)
        except Exception:
            # A static argument's __eq__ raised: jax reports it its way.
            return self._fallback(call, "static_argument_error", times, signature)
        if entry is None:
            reason = _slow_path_reason()
            if reason is not None:
                return self._fallback(call, reason, times, signature)
            entry = self._entries.insert(signature)
            return self._compile(entry, args, kwargs, leaves, call, times)
        entry.wait(self)
        self._remember(entry, signature, args, kwargs, call.kwnames)
        return self._run(entry, leaves, call, times)

    cdef object _run(self, CacheEntry entry, object leaves, Call* call, CallTimes* times):
        """Step 5, a hit: the entry's executable runs, or jax for an entry it must run."""
        self._entries.touch(entry)
        if entry.executable is None:
            # An entry jax runs (numpy arguments, effects): still a hit, found
            # by the guard, so the hand-off costs as little as it can.
            self._handed_off(entry, entry.slow_reason)
            return self._fallback(call, entry.slow_reason, times, entry.signature)
        if times.watch:
            reached(times, AT_FOUND, "launch")
        if leaves is ARGV_LEAVES:
            leaves = _tuple_from_array(call.argv, PyVectorcall_NARGS(call.nargsf))
        out = entry.executable.run(leaves, &times.launched if times.watch & WATCH_CLOCK else NULL)
        if type(out) is Delegate:
            self._handed_off(entry, (<Delegate>out).reason)
            return self._fallback(call, (<Delegate>out).reason, times, entry.signature)
        if times.watch:
            reached(times, AT_END, None)
            self._record(times, True, 0, None, entry.signature)
        return self._returned(call, out)

    cdef object _compile(self, CacheEntry entry, tuple args, dict kwargs, list leaves,
                         Call* call, CallTimes* times):
        """The miss path, on the one thread that compiles this signature.

        jax.jit itself runs this first call (tracing, compiling, converting,
        donating, warning and failing exactly as it does); asking it for the
        Compiled afterwards costs ~0.2 ms, since jax caches both the trace and
        the executable."""
        if times.watch:
            reached(times, AT_FOUND, "compile")   # jax.jit's own spans nest inside
        cdef long long began = now_ns()
        try:
            out = PyObject_Vectorcall(self._jitted, call.argv, call.nargsf, call.kwnames)
        except BaseException as error:
            self._entries.fail(entry, error)
            if times.watch:
                reached(times, AT_END, None)
                self._record(times, False, times.end - began, "compile_error", entry.signature)
            raise
        cdef long long compiled_at = now_ns()
        if times.watch:
            reached(times, AT_LAUNCHED, "build entry")
        try:
            compiled = self._jitted.lower(*args, **kwargs).compile()
            built = make_executable(compiled, entry.signature, leaves, self._donates, True)
        except Exception as error:
            built = f"jax's executable could not be reused: {error!r}"
        self._entries.complete(entry, built, (compiled_at - began) / 1e9)
        self._remember(entry, entry.signature, args, kwargs, call.kwnames)
        if times.watch:
            reached(times, AT_END, None)
            self._record(times, False, compiled_at - began, entry.slow_reason, entry.signature)
        return self._returned(call, out)

    cdef object _fallback(self, Call* call, str reason, CallTimes* times,
                          CallSignature signature):
        """The one hand-off: jax.jit runs the call as the caller made it."""
        if times.watch:
            reached(times, AT_FOUND, "jax.jit", reason)   # jax.jit's own spans nest inside
        try:
            out = PyObject_Vectorcall(self._jitted, call.argv, call.nargsf, call.kwnames)
        finally:
            # Recorded also when jax raises: the report counts the hand-off.
            if times.watch:
                reached(times, AT_END, None)
                self._record(times, False, 0, reason, signature)
        return self._returned(call, out)

    cdef void _handed_off(self, CacheEntry entry, str reason):
        """jax.jit takes a call on ``entry``: where it did for the leaves' sake
        and the call's arguments are trees, the next call laid out alike goes
        to jax.jit before it is flattened (see _guarded)."""
        cdef PreviousCall previous = self._previous
        if previous is None or previous.entry is not entry or previous.layout is not None:
            return
        if reason is HOST_DATA_REASON or reason is NEW_SCALAR_REASON:
            previous.tree_hand_off = reason

    cdef inline object _returned(self, Call* call, object out):
        """Step 6: the one post-hook check, then the output."""
        cdef Py_ssize_t nargs
        if _global_post_hook is not None or _thread_post_hooks:
            nargs = PyVectorcall_NARGS(call.nargsf)
            _call_post_hook(self, _tuple_from_array(call.argv, nargs),
                            _kwargs_from_array(call.argv, nargs, call.kwnames), out)
        return out

    cdef void _record(self, CallTimes* times, bint hit, long long compile_ns, object reason,
                      CallSignature signature):
        """The one trace event of a call, handed to the sink (--trace only)."""
        record_call(self, times, hit, compile_ns, reason, signature)

    cdef void _remember(self, CacheEntry entry, CallSignature signature, tuple args,
                        dict kwargs, PyObject* kwnames):
        """Make this call the guard's guess for the next one."""
        cdef PreviousCall previous = PreviousCall.__new__(PreviousCall)
        previous.entry = entry
        previous.signature = signature
        previous.layout = _layout_of(args, kwargs, None if kwnames == NULL else <object>kwnames,
                                     self._static_argnames, signature)
        previous.hands_off = (previous.layout is not None and entry.executable is None
                              and entry.slow_reason is HOST_DATA_REASON)
        previous.nargs = PyTuple_GET_SIZE(args)
        previous.kwnames = None if kwnames == NULL else <object>kwnames
        previous.arg_types = tuple([type(value) for value in args])
        if kwargs:
            previous.arg_types += tuple([type(value) for value in kwargs.values()])
        self._previous = previous

    cdef tuple _split_static(self, tuple args, dict kwargs):
        """(dynamic args, dynamic kwargs, static (label, type, value) triples).

        Static positions in increasing order, then static names in sorted
        order, so that the key does not depend on how the call spelled them."""
        cdef Py_ssize_t n = PyTuple_GET_SIZE(args), i, index
        cdef list static = []
        cdef list positions = None
        cdef tuple dynamic_args = args
        cdef dict dynamic_kwargs = kwargs
        for i in self._static_argnums:
            index = i + n if i < 0 else i
            if 0 <= index < n:
                if positions is None:
                    positions = []
                positions.append(index)
        if positions is not None:
            if len(positions) > 1:
                positions.sort()
            for index in positions:
                value = <object>PyTuple_GET_ITEM(args, index)
                static += (index, type(value), value)
            dynamic_args = tuple([a for index, a in enumerate(args) if index not in positions])
        if kwargs and self._static_argnames:
            named = [(name, type(value), value) for name, value in kwargs.items()
                     if name in self._static_argnames]
            if named:
                if len(named) > 1:
                    named.sort(key=_first)
                for triple in named:
                    static += triple
                if len(named) == len(kwargs):
                    dynamic_kwargs = _NO_KWARGS
                else:
                    dynamic_kwargs = {name: value for name, value in kwargs.items()
                                      if name not in self._static_argnames}
        return dynamic_args, dynamic_kwargs, tuple(static)

    # -- the Python object ---------------------------------------------------

    def __get__(self, instance, owner):
        # A CompiledFunction in a class body is a method, as a function would be.
        if instance is None:
            return self
        return types.MethodType(self, instance)

    @property
    def __signature__(self):
        return inspect.signature(self.fun)

    def __repr__(self):
        try:
            fun_repr = repr(self.fun)
        except Exception:
            return "<CompiledFunction>"   # as jax.jit: repr never raises
        return f"<CompiledFunction of {fun_repr}>"

    def __reduce__(self):
        cache = None if self._cache is default_cache() else self._cache
        return _rebuild, (self.fun, self._options, cache)

    def lower(self, *args, **kwargs):
        """``jax.jit(fun).lower(...)``: a jax.stages.Lowered."""
        return self._jitted.lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        """``jax.jit(fun).trace(...)``: a jax.stages.Traced."""
        return self._jitted.trace(*args, **kwargs)

    def eval_shape(self, *args, **kwargs):
        """``jax.jit(fun).eval_shape(...)``: output shapes and dtypes."""
        return self._jitted.eval_shape(*args, **kwargs)

    def clear_cache(self):
        """Forget this function's executables and jax's traces of it."""
        self._clear_cache()
        self._jitted.clear_cache()

    def _cache_size(self):
        """The number of executables held for this function."""
        return len(self._entries)

    def _clear_cache(self):
        self._entries.clear()
        self._previous = None

    @property
    def cache(self):
        """The CompiledFunctionCache holding this function's executables."""
        return self._cache

    def _cache_entries(self):
        """This function's CacheEntry objects (for tests and the tracer)."""
        return self._entries.values()


cdef void _install_vectorcall():
    # Cython gives cdef classes tp_call only; point the type's vectorcall slot
    # at the instance field that __cinit__ fills.  The class is final, so no
    # subclass can inherit a slot that would skip its own __call__.
    cdef CompiledFunction probe = CompiledFunction.__new__(CompiledFunction)
    cdef _VectorcallType* type_object = <_VectorcallType*>CompiledFunction
    type_object.tp_vectorcall_offset = (
        <char*>&probe._vectorcall_slot - <char*><PyObject*>probe)
    type_object.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL


_install_vectorcall()


def jax_function(jitted):
    """jax's own jit object behind ``jitted``.  Under ``python -m fastdispatch``,
    jax.jit is fastdispatch.jit, and a library's own jax.jit (equinox's, flax's)
    is a CompiledFunction: front ends take its jax.jit, so that a call is
    recorded once, as the front end's."""
    if isinstance(jitted, CompiledFunction):
        return (<CompiledFunction>jitted)._jitted
    return jitted


def _rebuild(fun, options, cache):
    return CompiledFunction(fun, options, cache)


def jit(fun=NOT_GIVEN, /, *, in_shardings=NOT_GIVEN, out_shardings=NOT_GIVEN,
        static_argnums=NOT_GIVEN, static_argnames=NOT_GIVEN,
        donate_argnums=NOT_GIVEN, donate_argnames=NOT_GIVEN, keep_unused=NOT_GIVEN,
        device=NOT_GIVEN, backend=NOT_GIVEN, inline=NOT_GIVEN,
        compiler_options=NOT_GIVEN, cache=None):
    """``jax.jit`` with less dispatch time; same arguments, same behaviour.

    Usable as ``@jit``, ``jit(f, ...)`` and ``@jit(static_argnames=...)``.
    ``cache`` is the CompiledFunctionCache to keep executables in (default:
    ``fastdispatch.default_cache()``).  Returns a CompiledFunction.
    """
    given = dict(in_shardings=in_shardings, out_shardings=out_shardings,
                 static_argnums=static_argnums, static_argnames=static_argnames,
                 donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                 keep_unused=keep_unused, device=device, backend=backend,
                 inline=inline, compiler_options=compiler_options)
    options = {name: value for name, value in given.items() if value is not NOT_GIVEN}
    if fun is NOT_GIVEN:
        return functools.partial(CompiledFunction, options=options, cache=cache)
    return CompiledFunction(fun, options, cache)
