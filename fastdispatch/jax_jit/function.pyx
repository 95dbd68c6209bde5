# cython: boundscheck=False, wraparound=False
"""CompiledFunction: ``fastdispatch.jit``, the jax.jit front end of the engine.

A call takes the engine's steps (core/engine.pyx's docstring lists them);
jit's own is ``parse``, in this order:
  guard      f(a, b, ...) laid out as the previous call: its leaves and static
             arguments checked in the caller's argument array (vectorcall);
             a call jax.jit takes for its leaves' sake (numpy values, a step
             counter's new value) is handed off here, before anything is read
  state      a transformation tracing right now, jax_debug_nans, or a setting
             jax.jit runs itself (disable_jit): handed off; else a guarded
             call runs the previous call's entry
  flatten    static args split off; dynamic args -> leaves + TreeDef, for
             the engine's find

Python calls arrive through the vectorcall slot, the only way in (``__call__``
forwards to it).  Whatever the fast path cannot run, jax.jit itself runs (the
engine's hand-off), with the reason recorded for ``--trace``; so results never
differ from jax.jit's.
"""
import functools
import inspect
import threading
import types

cimport cython
from cpython.object cimport PyObject
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine cimport (
    Call, CallTimes, Engine, Found, PreviousCall, found_arguments, found_entry, keep,
    trace_context, trace_sink, jax_state_hand_off, warm_store)
from fastdispatch.core.execute cimport HAND_OFF_NOW, Executable, make_executable
from fastdispatch.core.outputs cimport output_tree
from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport CallSignature
from fastdispatch.jax_jit.layout cimport CallShape, layout_of, shape_of, tuple_from_array
from fastdispatch.core.cache import default_cache
from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff
from fastdispatch.jax_jit import warm as _warm

cdef extern from "Python.h":
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf,
                               PyObject* kwnames)
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct _VectorcallType "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags


cdef object _settings_hand_off = _jax.settings_hand_off
cdef str _HOST_DATA = _reasons.HOST_DATA
cdef str _NEW_SCALAR = _reasons.NEW_SCALAR
cdef str _JAX_JIT = "jax.jit"
cdef str _NOT_MADE_BY_JIT = ("CompiledFunction was created without __init__: "
                             "make one with fastdispatch.jit(fun)")

# The calls whose numpy values and new Python scalars an entry loaded by warm
# start converts itself, before it leaves them to jax.jit as a compiled entry
# does (make_executable's calls_before_hand_off).  jax.jit then traces and compiles
# the call once (from jax's persistent cache underneath: what stock pays on
# its first call, some 10 to 100 ms) and converts them in C++, a few us a
# leaf faster: worth it only to a longer loop, which this many calls tell
# (a flax TrainState step over numpy batches: ~5 ms converted here first).
LOADED_CALLS_BEFORE_JAX = 256

# Post hooks: the global one, and a count of threads that set their own so
# that a call looks at thread-local storage only when one might be there.
cdef object _global_post_hook = None
cdef int _thread_post_hooks = 0
_thread_local = threading.local()


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


cdef dict _kwargs_from_array(PyObject** items, Py_ssize_t nargs, PyObject* kwnames):
    if kwnames == NULL:
        return _NO_KWARGS
    cdef tuple names = <tuple>kwnames
    cdef dict kwargs = {}
    cdef Py_ssize_t i
    for i in range(PyTuple_GET_SIZE(names)):
        kwargs[<object>PyTuple_GET_ITEM(names, i)] = <object>items[nargs + i]
    return kwargs


cdef inline str _hand_off_reason(PreviousJitCall previous, tuple leaves):
    """Why jax.jit takes this call, laid out as the previous one (its
    ``leaves``), whatever jax's context, or None: the previous call's entry is
    one jax.jit runs for its numpy leaves, or this call brings a Python scalar
    value its executable leaves to jax (see Inputs.new_scalar_in)."""
    if previous.hand_off_guarded:
        return _HOST_DATA
    cdef Executable executable = previous.entry.executable
    if executable is None:
        return None
    if executable.inputs.host_hand_off:
        return _HOST_DATA
    if executable.inputs.new_scalars_hand_off and executable.inputs.new_scalar_in(
            PySequence_Fast_ITEMS(leaves)):
        return _NEW_SCALAR
    return None


@cython.final
cdef class PreviousJitCall(PreviousCall):
    """The engine's PreviousCall, with what jit guards a call by before
    flattening it: its layout in the argument array, and whether jax.jit runs
    its entry for its leaves' sake."""

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
    call.function = <PyObject*>self
    if self.executables is None:
        raise TypeError(_NOT_MADE_BY_JIT)
    return self.call(&call)


@cython.final
cdef class CompiledFunction(Engine):
    """A function compiled by ``fastdispatch.jit``: call it as the function.

    Behaves as ``jax.jit(fun, **options)`` in every observable way (results,
    dtypes, weak types, shardings, errors, retraces), with less time spent per
    call between Python and the executable.
    """

    def __cinit__(self):
        self._vectorcall_slot = <vectorcallfunc>_vectorcall

    def __init__(self, fun, dict options=None, cache=None):
        options = {} if options is None else options
        self.span_name = f"FastDispatch({_jax.fun_name(fun)})"
        self.library = _JAX_JIT
        if cache is not None and not isinstance(cache, CompiledFunctionCache):
            raise TypeError(
                f"jit: cache must be a fastdispatch.CompiledFunctionCache, got {cache!r}")
        # jax.jit validates fun and every option, with its own messages.
        self._jitted = _jax.jax_jit(fun, **options)
        self.fun = fun
        self._options = options
        self._shared_cache = default_cache() if cache is None else cache
        try:
            options_key = _freeze(options)
            hash(options_key)
        except TypeError:
            options_key = object()   # unhashable option: this object's entries only
        self.executables = self._shared_cache.function_cache(fun, options_key)
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
        # Tracing: the trace learns where this was made (a new wrapper in a loop is a finding).
        made = getattr(trace_sink(), "made", None)
        if made is not None:
            made(self)

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
        call.function = <PyObject*>self
        if self.executables is None:
            raise TypeError(_NOT_MADE_BY_JIT)
        return self.call(&call)

    cdef str parse(self, Call* call, Found* found, CallTimes* times):
        """The guard on the argument array, jax's state, then flatten."""
        cdef PreviousJitCall previous = <PreviousJitCall>self.previous
        cdef tuple guarded = None   # the leaves of a call the previous one's layout guards
        if self.handed_off_like is not None and (<CallShape>self.handed_off_like).matches(call):
            # jax.jit took the last call of this shape: one it raises for (an
            # unhashable static argument, a leaf it rejects), or a call of
            # trees for its leaves' sake (numpy values, a step counter's new
            # value: it converts them faster).  This one goes to it unflattened.
            reason = self.handed_off_again(found)
            if reason is not None:
                return reason
        if previous is not None and not previous.entry.evicted:
            if previous.layout is not None:
                guarded = previous.layout.guard(call, previous.signature)
                if guarded is not None:
                    # jax.jit takes a call for what its leaves are (numpy
                    # arguments, a step counter's new value: it converts them
                    # faster); jax's context and trace state cannot change
                    # that, so neither is read.
                    reason = _hand_off_reason(previous, guarded)
                    if reason is not None:
                        self.executables.touch(previous.entry)
                        keep(&found.signature, previous.signature)
                        return reason
        reason = jax_state_hand_off()
        if reason is not None:   # first: a hand-off under a transformation needs no context
            return reason
        context = trace_context()
        if previous is not None and not previous.signature.same_context(context):
            # jax's settings changed since the previous call: one jax.jit
            # itself runs (disable_jit, say) goes to it before flattening.
            reason = _settings_hand_off()
            if reason is not None:
                return reason
        elif guarded is not None:
            found_entry(found, previous.entry, guarded, None)
            return None
        # Static arguments split off, the dynamic ones flattened.
        cdef Py_ssize_t nargs = PyVectorcall_NARGS(call.nargsf)
        cdef tuple args = tuple_from_array(call.argv, nargs)
        cdef dict kwargs = _kwargs_from_array(call.argv, nargs, call.kwnames)
        cdef tuple static_args = ()
        if self._has_static:
            args, kwargs, static_args = self._split_static(args, kwargs)
        cdef list leaves = []
        cdef TreeDef treedef = flatten_into((args, kwargs), leaves)
        found_arguments(found, treedef, leaves, static_args, context, self._dynamic_arg_names, None)
        return None

    # -- the engine's hooks ------------------------------------------------

    cdef object library_call(self, Call* call, Found* found):
        """jax.jit runs the call as the caller made it."""
        return PyObject_Vectorcall(self._jitted, call.argv, call.nargsf, call.kwnames)

    cdef tuple build(self, Call* call, Found* found, CacheEntry entry, object out):
        """jax's executable for the call it just ran: asking jax.jit for the
        Compiled costs ~0.2 ms, since jax caches both the trace and the
        executable."""
        cdef Py_ssize_t nargs = PyVectorcall_NARGS(call.nargsf)
        traced = self._jitted.trace(*tuple_from_array(call.argv, nargs),
                                    **_kwargs_from_array(call.argv, nargs, call.kwnames))
        compiled = traced.lower().compile()
        cdef tuple built
        try:
            built = self._from_compiled(entry, <list>found.leaves, compiled, HAND_OFF_NOW)
        except MustHandOff as hand_off:
            self._warm_save(entry, compiled, traced, hand_off.reason)
            raise
        self._warm_save(entry, compiled, traced, None)
        return built

    cdef object _warm_save(self, CacheEntry entry, object compiled, object traced, str reason):
        """Write the compile under the entry's warm-start key.  One jax.jit runs
        here for its host arguments (``reason``: numpy arguments, say) is written
        too: a loaded entry converts them itself.  One jax.jit runs for what its
        executable is (effects, a reshard) is not, and says why."""
        if entry.warm_key is None:
            return
        store = warm_store()
        if store is None:
            return
        if reason is None or reason is _HOST_DATA:
            store.save(entry.warm_key, compiled, self.fun, traced,
                       call_objects=_warm.call_objects(entry.signature))
        else:
            store.refuse(self.fun, _reasons.WARM_LIBRARY_CALL, f"is run by jax.jit ({reason})")

    cdef object warm_key(self, Call* call, Found* found, CallSignature signature, object store):
        """The call's key in the warm-start store (fastdispatch.warm), or None.
        In checked mode jax traces the call here, into its cache: the compile
        of a miss reuses that trace."""
        cdef Py_ssize_t nargs
        if store.checked:
            nargs = PyVectorcall_NARGS(call.nargsf)
            return store.checked_key(self.fun, self._jitted, self._options, signature,
                                     tuple_from_array(call.argv, nargs),
                                     _kwargs_from_array(call.argv, nargs, call.kwnames))
        return store.key(self.fun, _warm.LABEL, self._options, signature, _warm.key_parts(signature))

    cdef tuple build_loaded(self, Call* call, Found* found, CacheEntry entry, object loaded):
        """The entry of an executable loaded from the warm-start store.  It
        converts host values itself for its first LOADED_CALLS_BEFORE_JAX
        calls: handing them to jax.jit, whose caches are empty in this
        process, would trace and compile after all; then, as a compiled
        entry, it leaves those jax.jit converts faster to it.  One stored
        with a recipe has its output tree rebuilt from this call's arguments
        (their trees' node data did not pickle)."""
        cdef list leaves = <list>found.leaves
        if type(loaded) is not tuple:
            return self._from_compiled(entry, leaves, loaded, LOADED_CALLS_BEFORE_JAX)
        compiled, recipe = loaded
        out_tree = warm_store().outputs(recipe, _warm.call_objects(entry.signature))[0]
        return (make_executable(compiled, entry.signature, leaves, self._donates,
                                LOADED_CALLS_BEFORE_JAX),
                output_tree(out_tree))

    cdef tuple _from_compiled(self, CacheEntry entry, list leaves, object compiled,
                              Py_ssize_t calls_before_hand_off):
        """(Executable, Outputs) of a jax.stages.Compiled: jax.jit's just now,
        or one loaded from the warm-start store (see make_executable)."""
        return (make_executable(compiled, entry.signature, leaves, self._donates,
                                calls_before_hand_off),
                output_tree(compiled.out_tree))

    cdef int remember(self, Call* call, Found* found, CacheEntry entry,
                      CallSignature signature) except -1:
        """Make this call the guard's guess for the next one."""
        cdef Py_ssize_t nargs = PyVectorcall_NARGS(call.nargsf)
        cdef tuple args = tuple_from_array(call.argv, nargs)
        cdef dict kwargs = _kwargs_from_array(call.argv, nargs, call.kwnames)
        cdef PreviousJitCall previous = PreviousJitCall.__new__(PreviousJitCall)
        previous.entry = entry
        previous.signature = signature
        previous.layout = layout_of(args, kwargs,
                                    None if call.kwnames == NULL else <object>call.kwnames,
                                    self._static_argnames, signature)
        previous.hand_off_guarded = (previous.layout is not None and entry.executable is None
                                     and entry.hand_off_reason is _HOST_DATA)
        self.previous = previous
        self.remember_hand_off(None, None, None)
        return 0

    cdef void handed_off(self, Call* call, CacheEntry entry, str reason):
        """jax.jit takes a call.  Handed off before any entry was found (None: jax.jit
        raises for it, as a rule): the next of its shape goes to jax.jit before
        it is flattened.  On ``entry``, for the leaves' sake, where the call's
        arguments are trees: the next call laid out alike goes to jax.jit
        before it is flattened (see parse)."""
        if entry is None:
            self.remember_hand_off(shape_of(call), reason, None)
            return
        cdef PreviousJitCall previous = <PreviousJitCall>self.previous
        if previous is None or previous.entry is not entry or previous.layout is not None:
            return
        if reason is _HOST_DATA or reason is _NEW_SCALAR:
            self.remember_hand_off(shape_of(call), reason, entry.signature)

    cdef object returned(self, Call* call, object out):
        """The one post-hook check, then the output."""
        cdef Py_ssize_t nargs
        if _global_post_hook is not None or _thread_post_hooks:
            nargs = PyVectorcall_NARGS(call.nargsf)
            _call_post_hook(self, tuple_from_array(call.argv, nargs),
                            _kwargs_from_array(call.argv, nargs, call.kwnames), out)
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
        # jax.jit's words: a drop-in prints as the wrapper it replaces.
        try:
            fun_repr = repr(self.fun)
        except Exception:
            return "<PjitFunction>"   # as jax.jit: repr never raises
        return f"<PjitFunction of {fun_repr}>"

    def __getstate__(self):
        """Part of what jax.jit's wrapper reports of itself: its
        ``function_name`` (through functools.partial), the function and its
        static arguments.  Pickling goes through ``__reduce__``."""
        return {
            "function_name": _jax.fun_name(self.fun),
            "fun": self.fun,
            "static_argnums": self._static_argnums,
            "static_argnames": tuple(sorted(self._static_argnames)),
        }

    def __reduce__(self):
        cache = None if self._shared_cache is default_cache() else self._shared_cache
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

    def library_function(self):
        """jax's own jit of the function: ``jax.jit(fun, same options)``."""
        return self._jitted

    def warm_identity(self):
        """The function and its jit options (fastdispatch.warm.identity)."""
        return self.fun, self._options

    def _cache_size(self):
        """The number of executables held for this function."""
        return len(self.executables)

    def _clear_cache(self):
        self.executables.clear()
        self.previous = None

    @property
    def cache(self):
        """The CompiledFunctionCache holding this function's executables."""
        return self._shared_cache

    def _cache_entries(self):
        """This function's CacheEntry objects (for tests and the tracer)."""
        return self.executables.values()


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
        # A plain function, as jax.jit's decorator form is.
        return lambda fun: CompiledFunction(fun, options, cache)
    return CompiledFunction(fun, options, cache)
