# cython: boundscheck=False, wraparound=False
"""CompiledFunction, the hot path of ``fastdispatch.jit``.

One call, as data flows (docs/architecture.md):
  1. state      jax's trace context; a transformation tracing right now? -> jax
  2. guard      f(a, b, ...) with leaves of the previous call's kinds, checked
                in the caller's argument array (vectorcall): on to 5
  3. flatten    static args split off; dynamic args -> leaves + TreeDef;
     signature  the same identity guard, else a CallSignature looked up in our
                part of the shared LRU
  4. miss       one thread runs the call through jax.jit, then takes its
                executable from jax.jit(fun).lower(...).compile();
                the others wait on the entry's event
  5. execute    execute_sharded(leaves).consume_with_handlers(out_handlers)
  6. unflatten  the output tree; post hook; trace event

Whatever the fast path cannot run, jax.jit itself runs (``_slow``), with the
reason recorded for ``--trace``; so results never differ from jax.jit's.
"""
import functools
import inspect
import threading
import types

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

from fastdispatch._keys cimport same_items
from fastdispatch._pytree cimport TreeDef, flatten_into
from fastdispatch._signature cimport (
    CallSignature, LeafStatus, LEAVES_OK, LEAVES_TRACER, all_leaves, make_signature,
    read_leaf_keys)
from fastdispatch._cache cimport CacheEntry, CompiledFunctionCache, FunctionCache
from fastdispatch._cache import DELEGATE, default_cache
from fastdispatch import _compile


cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clock_id, timespec* tp)
    int CLOCK_MONOTONIC


cdef inline long long _now_ns() noexcept nogil:
    # The clock of time.perf_counter_ns() on Linux, without a Python call.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef object _trace_context = _compile.trace_context
cdef object _trace_state = _compile.TRACE_STATE
cdef object _clean_trace_state = _compile.CLEAN_TRACE_STATE
cdef object _slow_path_reason = _compile.slow_path_reason

# Tracing: a C-level flag checked once per call; see fastdispatch.trace.
cdef object _trace_sink = None

# Post hooks: the global one, and a count of threads that set their own so
# that a call looks at thread-local storage only when one might be there.
cdef object _global_post_hook = None
cdef int _thread_post_hooks = 0
_thread_local = threading.local()


def set_trace_sink(sink):
    """Send every call's timings to ``sink.record(...)``; None stops it."""
    global _trace_sink
    _trace_sink = sink


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


cdef inline object _current_post_hook():
    if _thread_post_hooks:
        hook = getattr(_thread_local, "post_hook", None)
        if hook is not None:
            return hook
    return _global_post_hook


# The dynamic kwargs of a call with no keyword arguments, or only static ones;
# never mutated, and never handed to user code (the post hook gets a new dict).
cdef dict _NO_KWARGS = {}


def _first(triple):
    return triple[0]


cdef extern from "Python.h":
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf,
                               PyObject* kwnames)
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct _VectorcallType "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags


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


cdef object _vectorcall(CompiledFunction self, PyObject** argv, size_t nargsf,
                        PyObject* kwnames):
    """Python's way into a call (PEP 590).  The arguments stay in the caller's
    array: a call laid out as the previous one (CallLayout) takes its leaves
    from there, guards them, and runs, with no tuple or dict built for a
    positional call; a call jax must run reaches it the same way."""
    cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf)
    cdef long long start = 0, now = 0
    if _trace_sink is not None:
        start = _now_ns()
    context = _trace_context()
    cdef PreviousCall previous = self._previous
    cdef CallLayout layout = previous.layout if previous is not None else None
    cdef CacheEntry entry
    cdef object leaves
    cdef PyObject** items = argv
    cdef Py_ssize_t count = nargs
    if (layout is not None and not previous.entry.evicted and layout.nargs == nargs
            and layout.same_keywords(kwnames)
            and _trace_state.value is _clean_trace_state
            and layout.statics_match(argv, previous.signature.static_args)):
        entry = previous.entry
        if layout.leaf_index is not None:
            leaves = layout.gather(argv)
            items = PySequence_Fast_ITEMS(leaves)
            count = PyTuple_GET_SIZE(leaves)
        if previous.signature.matches_leaves(items, count, context):
            if entry.slow_reason is not None:
                self._entries.touch(entry)
                return self._slow_vectorcall(argv, nargsf, kwnames, entry.slow_reason,
                                             start, entry.signature)
            if layout.leaf_index is None:
                leaves = _tuple_from_array(argv, nargs)
            if _global_post_hook is None and not _thread_post_hooks:
                if _trace_sink is not None:
                    now = _now_ns()
                out = self._execute(entry, leaves, start, now, now, now)
                if out is not DELEGATE:
                    return out
    return self._call(_tuple_from_array(argv, nargs),
                      _kwargs_from_array(argv, nargs, kwnames), context, start,
                      None if kwnames == NULL else <object>kwnames)


@cython.final
cdef class CallLayout:
    """Where the leaves of a call sit in its argument array, for calls whose
    every argument is a leaf, e.g. ``f(x, y)`` or ``f(x, lr=0.1, mode="eval")``.

    A call with the same keyword names, in the same order, and as many
    positional arguments has the previous call's structure: its leaves can be
    read from the array, in jax's order (positional, then keywords by sorted
    name), without flattening, and its static keyword values compared in place."""

    cdef bint same_keywords(self, PyObject* kwnames):
        # Names compared by address: identifiers are interned, and a call site
        # passes the very same names (often the very same tuple) every time.
        if kwnames == NULL or self.kwnames is None:
            return kwnames == NULL and self.kwnames is None
        return same_items(<tuple>kwnames, <tuple>self.kwnames)

    cdef tuple gather(self, PyObject** argv):
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self.leaf_index)
        cdef tuple leaves = PyTuple_New(n)
        cdef object item
        for i in range(n):
            item = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.leaf_index, i)]
            Py_INCREF(item)
            PyTuple_SET_ITEM(leaves, i, item)
        return leaves

    cdef bint statics_match(self, PyObject** argv, tuple static_args):
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
    """The CallLayout of a call, or None when some dynamic argument is not a
    leaf or a static argument was passed by position."""
    cdef tuple static_args = signature.static_args
    cdef Py_ssize_t i
    for i in range(0, PyTuple_GET_SIZE(static_args), 3):
        if type(<object>PyTuple_GET_ITEM(static_args, i)) is int:   # a static position
            return None
    if not all_leaves(args):
        return None
    cdef CallLayout layout = CallLayout.__new__(CallLayout)
    cdef Py_ssize_t nargs = PyTuple_GET_SIZE(args)
    layout.kwnames = kwnames
    layout.nargs = nargs
    layout.leaf_index = None
    layout.static_index = ()
    if kwnames is not None:
        dynamic = sorted(name for name in kwnames if name not in static_names)
        if not all_leaves(tuple([kwargs[name] for name in dynamic])):
            return None
        layout.leaf_index = tuple(range(nargs)) + tuple(
            nargs + kwnames.index(name) for name in dynamic)
        layout.static_index = tuple(
            nargs + kwnames.index(name)
            for name in sorted(name for name in kwnames if name in static_names))
    num_leaves = nargs if layout.leaf_index is None else len(layout.leaf_index)
    return layout if num_leaves == signature.treedef.num_leaves else None


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


@cython.final
cdef class CompiledFunction:
    """A function compiled by ``fastdispatch.jit``: call it as the function.

    Behaves as ``jax.jit(fun, **options)`` in every observable way (results,
    dtypes, weak types, shardings, errors, retraces), with less time spent per
    call between Python and the executable.
    """

    def __init__(self, fun, dict options=None, cache=None):
        options = {} if options is None else options
        if cache is not None and not isinstance(cache, CompiledFunctionCache):
            raise TypeError(
                f"jit: cache must be a fastdispatch.CompiledFunctionCache, got {cache!r}")
        # jax.jit validates fun and every option, with its own messages.
        self._jitted = _compile.jax_jit(fun, **options)
        self.fun = fun
        self._options = options
        self._cache = default_cache() if cache is None else cache
        try:
            options_key = _freeze(options)
            hash(options_key)
        except TypeError:
            options_key = object()   # unhashable option: this object's entries only
        self._entries = self._cache.function_cache(fun, options_key)
        resolved = _compile.resolved_arguments(self._jitted)
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

    def __cinit__(self):
        self._vectorcall_slot = <vectorcallfunc>_vectorcall

    def __call__(self, *args, **kwargs):
        # Reached through PyObject_Call only (functools.partial, say): Python
        # calls arrive through the vectorcall slot, _vectorcall.
        cdef long long start = _now_ns() if _trace_sink is not None else 0
        return self._call(args, kwargs, _trace_context(), start,
                          tuple(kwargs) if kwargs else None)

    cdef object _call(self, tuple args, dict kwargs, tuple context, long long start,
                      object kwnames):
        """The general path: static split, flatten, guard or lookup, run.
        ``kwnames``: the keyword names as the call spelled them, or None."""
        cdef long long flattened = 0, keyed = 0, found = 0
        cdef bint tracing = _trace_sink is not None
        if self._entries is None:
            raise TypeError("CompiledFunction was created without __init__: "
                            "make one with fastdispatch.jit(fun)")
        if _trace_state.value is not _clean_trace_state:
            return self._slow(args, kwargs, "tracer", start, None)
        cdef PreviousCall previous = self._previous
        cdef CacheEntry entry = previous.entry if previous is not None else None

        cdef tuple dynamic_args = args
        cdef dict dynamic_kwargs = kwargs
        cdef tuple static_args = ()
        if self._has_static:
            dynamic_args, dynamic_kwargs, static_args = self._split_static(args, kwargs)
        cdef list leaves = []
        cdef TreeDef treedef = flatten_into((dynamic_args, dynamic_kwargs), leaves)
        if tracing:
            flattened = _now_ns()

        cdef CallSignature signature
        cdef list keys
        cdef LeafStatus status
        # The guard compares with the previous call's own objects, not the
        # entry's: a training loop feeds back outputs whose avals differ (by
        # identity) from those of the arrays it was first called with.
        if (entry is not None and not entry.evicted
                and previous.signature.matches_call(treedef, leaves, static_args, context)):
            if tracing:
                keyed = found = _now_ns()
        else:
            keys = []
            status = read_leaf_keys(leaves, keys)
            if status != LEAVES_OK:
                return self._slow(args, kwargs,
                                  "tracer" if status == LEAVES_TRACER else "unsupported_leaf",
                                  start, None)
            try:
                signature = make_signature(treedef, keys, static_args, context,
                                           self._dynamic_arg_names)
            except Exception:
                # An unhashable static argument: jax raises its own error.
                return self._slow(args, kwargs, "static_argument_error", start, None)
            if tracing:
                keyed = _now_ns()
            try:
                entry = self._entries.entries.get(signature)
            except Exception:
                # A static argument's __eq__ raised: jax reports it its way.
                return self._slow(args, kwargs, "static_argument_error", start, signature)
            if entry is None:
                reason = _slow_path_reason()
                if reason is not None:
                    return self._slow(args, kwargs, reason, start, signature)
                entry = self._entries.insert(signature)
                return self._compile_and_run(entry, args, kwargs, leaves, start, kwnames)
            if not entry.done.is_set():
                if entry.compiling_thread == threading.get_ident():
                    raise RecursionError(
                        f"{getattr(self, '__name__', self)!r}: called again with the same argument types "
                        "while compiling for them (recursive call from the compiling thread)")
                entry.done.wait()
            if entry.compile_error is not None:
                raise entry.compile_error
            if tracing:
                found = _now_ns()
            self._remember(entry, signature, args, kwargs, kwnames)

        return self._run(entry, leaves, args, kwargs, start, flattened, keyed, found)

    cdef void _remember(self, CacheEntry entry, CallSignature signature, tuple args,
                        dict kwargs, object kwnames):
        """Make this call the guard's guess for the next one."""
        cdef PreviousCall previous = PreviousCall.__new__(PreviousCall)
        previous.entry = entry
        previous.signature = signature
        previous.layout = _layout_of(args, kwargs, kwnames, self._static_argnames, signature)
        self._previous = previous

    cdef object _run(self, CacheEntry entry, object leaves, tuple args, dict kwargs,
                            long long start, long long flattened, long long keyed,
                            long long found):
        """A hit: execute the entry, then the post hook and the trace event."""
        if entry.slow_reason is not None:
            # An entry jax runs (numpy arguments, effects): still a cache hit,
            # found by the guard, so the hand-off costs as little as it can.
            self._entries.touch(entry)
            return self._slow(args, kwargs, entry.slow_reason, start, entry.signature)
        out = self._execute(entry, leaves, start, flattened, keyed, found)
        if out is DELEGATE:
            return self._slow(args, kwargs, "scalar_conversion", start, entry.signature)
        if _global_post_hook is not None or _thread_post_hooks:
            _call_post_hook(self, args, kwargs, out)
        return out

    cdef object _execute(self, CacheEntry entry, object leaves, long long start,
                         long long flattened, long long keyed, long long found):
        """Run a fast entry and record the hit; DELEGATE if jax must run it."""
        self._entries.touch(entry)
        out = entry.run(leaves)
        if out is not DELEGATE and _trace_sink is not None:
            launched = _now_ns()
            _trace_sink.record(self, (start, flattened, keyed, found, launched, _now_ns()),
                               True, 0, None, entry.signature)
        return out

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

    cdef object _compile_and_run(self, CacheEntry entry, tuple args, dict kwargs,
                                 list leaves, long long start, object kwnames):
        """The miss path, on the one thread that compiles this signature.

        jax.jit itself runs this first call (tracing, compiling, converting,
        donating, warning and failing exactly as it does); asking it for the
        Compiled afterwards costs ~0.2 ms, since jax caches both the trace and
        the executable."""
        cdef long long began = _now_ns()
        try:
            out = self._jitted(*args, **kwargs)
        except BaseException as error:
            # No broken entry stays behind; waiters see this very error.
            entry.compile_error = error
            self._entries.remove(entry)
            entry.done.set()
            if _trace_sink is not None:
                now = _now_ns()
                _trace_sink.record(self, (start, start, began, began, now, now), False,
                                   now - began, "compile_error", entry.signature)
            raise
        cdef long long compiled_at = _now_ns()
        try:
            compiled = self._jitted.lower(*args, **kwargs).compile()
            entry.fill(compiled, leaves, (compiled_at - began) / 1e9, self._donates)
        except Exception as error:
            entry.slow_reason = f"jax's executable could not be reused: {error!r}"
        self._cache._compile_seconds += entry.compile_seconds
        entry.done.set()
        self._remember(entry, entry.signature, args, kwargs, kwnames)
        if _trace_sink is not None:
            now = _now_ns()
            _trace_sink.record(
                self, (start, start, began, began, compiled_at, now), False,
                compiled_at - began, entry.slow_reason, entry.signature)
        if _global_post_hook is not None or _thread_post_hooks:
            _call_post_hook(self, args, kwargs, out)
        return out

    cdef object _slow(self, tuple args, dict kwargs, str reason, long long start,
                      object signature):
        """jax.jit runs the call: transformations, conversions, effects."""
        try:
            out = self._jitted(*args, **kwargs)
        finally:
            # Recorded also when jax raises: the report counts the hand-off.
            if _trace_sink is not None:
                now = _now_ns()
                _trace_sink.record(self, (start, now, now, now, now, now), False, 0,
                                   reason, signature)
        if _global_post_hook is not None or _thread_post_hooks:
            _call_post_hook(self, args, kwargs, out)
        return out

    cdef object _slow_vectorcall(self, PyObject** argv, size_t nargsf, PyObject* kwnames,
                                 str reason, long long start, object signature):
        """_slow for a call still in its caller's array."""
        try:
            out = PyObject_Vectorcall(self._jitted, argv, nargsf, kwnames)
        finally:
            if _trace_sink is not None:
                now = _now_ns()
                _trace_sink.record(self, (start, now, now, now, now, now), False, 0,
                                   reason, signature)
        cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf)
        if _global_post_hook is not None or _thread_post_hooks:
            _call_post_hook(self, _tuple_from_array(argv, nargs),
                            _kwargs_from_array(argv, nargs, kwnames), out)
        return out

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


def _call_post_hook(CompiledFunction fn, tuple args, dict kwargs, out):
    hook = _current_post_hook()
    if hook is not None:
        hook(fn, args, {} if kwargs is _NO_KWARGS else kwargs, out)


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
