# cython: boundscheck=False, wraparound=False
"""CompiledFunction: ``fastdispatch.jit``, the jax.jit front end of the engine.

A call takes the engine's steps (core/engine.pyx's docstring lists them);
jit's own is ``parse``, in this order (before it, the engine's hand-off
memo sends a call shaped as the last one jax.jit took for what its arguments
are, ``hand_off_like``: numpy values, a new step count, an unhashable static
argument, to jax.jit before anything is read):
  guard      f(a, b, ...) laid out as the last call that passed the
             previous call's signature (CallLayout, made then: guard_passed):
             its leaves and static arguments checked in the caller's
             argument array; host data jax.jit converts faster is handed off here
  settings   a guarded call runs the previous call's entry (the engine
             checks its context); else, with no previous call to guess by or
             jax's context changed since it (the engine says), a setting
             jax.jit runs itself (disable_jit) hands the call off
  flatten    static args split off; dynamic args -> leaves + TreeDef, for
             the engine's find

Python calls arrive through the engine's vectorcall slot (``__call__``
forwards to it).  Whatever the fast path cannot run, jax.jit itself runs (the
engine's hand-off), with the reason recorded for ``--trace``; so results never
differ from jax.jit's.
"""
import functools
import inspect
import types

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine cimport (
    Call, Engine, Found, PyVectorcall_NARGS, call_args, call_from, call_kwargs, found_arguments,
    found_entry, install_vectorcall, same_kwnames, warm_store)
from fastdispatch.core.execute cimport HAND_OFF_NOW, Executable, make_executable, output_tree
from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport CallSignature, LEAF_HOST, classify_leaf
from fastdispatch.core.watch cimport AT_LAUNCHED, CallTimes, reached, trace_sink
from fastdispatch.jax_jit.layout cimport CallShape, shape_of, split_static
from fastdispatch.core.cache import default_cache
from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff
from fastdispatch.jax_jit import warm as _warm
from fastdispatch.jax_jit.post_hook import call_post_hook

cdef extern from "Python.h":
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf,
                               PyObject* kwnames)


cdef object _settings_hand_off = _jax.settings_hand_off
cdef str _HOST_DATA = _reasons.HOST_DATA
cdef str _NEW_SCALAR = _reasons.NEW_SCALAR
cdef str _SCALAR_CONVERSION = _reasons.SCALAR_CONVERSION
cdef str _JAX_JIT = "jax.jit"

# The calls whose numpy values and new Python scalars an entry loaded by warm
# start converts itself, before it leaves them to jax.jit as a compiled entry
# does (make_executable's calls_before_hand_off).  jax.jit then traces and compiles
# the call once (from jax's persistent cache underneath: what stock pays on
# its first call, some 10 to 100 ms) and converts them in C++, a few us a
# leaf faster: worth it only to a longer loop, which this many calls tell
# (a flax TrainState step over numpy batches: ~5 ms converted here first).
LOADED_CALLS_BEFORE_JAX = 256


@cython.final
cdef class CallLayout:
    """Where the leaves of a call sit in its argument array, for calls whose
    every dynamic argument is a leaf or a list or tuple of leaves, e.g.
    ``f(x, y)``, ``f(x, lr=0.1, mode="eval")``, ``f(x, 3, y=y)`` with the 3
    static, or ``f(x, w=[w1, w2], b=[b1, b2])``.

    A call with the same keyword names, in the same order, as many positional
    arguments, and lists and tuples of the same lengths where the previous
    call had them, has the previous call's structure: its leaves can be read
    from the array, in jax's order (positional, then keywords by sorted name;
    a list's items in order), without flattening, and its static values
    compared in place."""

    cdef tuple guard(self, Call* call, CallSignature signature):
        """The call's leaves, in flatten order, where the call is laid out as
        this one and they and its static arguments pass the signature's
        guard; else None."""
        cdef PyObject** argv = call.argv
        cdef Py_ssize_t i, nargs = PyVectorcall_NARGS(call.nargsf)
        cdef tuple leaves
        if nargs != self.nargs or not same_kwnames(call, self.kwnames):
            return None
        # Static values, (label, type, value) triples in static_index's order.
        cdef tuple static_args = signature.static_args
        for i in range(PyTuple_GET_SIZE(self.static_index)):
            value = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.static_index, i)]
            expected = <object>PyTuple_GET_ITEM(static_args, 3 * i + 2)
            if type(value) is not <object>PyTuple_GET_ITEM(static_args, 3 * i + 1):
                return None
            if value is not expected:
                try:
                    if not value == expected:
                        return None
                except Exception:
                    return None    # flatten's path reports it as jax does
        if self.leaf_index is None:
            leaves = PyTuple_New(nargs)
            for i in range(nargs):
                Py_INCREF(<object>argv[i])
                PyTuple_SET_ITEM(leaves, i, <object>argv[i])
        else:
            leaves = self._gather(argv)
            if leaves is None:
                return None
        if signature.adopt_leaves(PySequence_Fast_ITEMS(leaves), PyTuple_GET_SIZE(leaves)):
            return leaves
        return None

    cdef tuple _gather(self, PyObject** argv):
        """The leaves at leaf_index, or None where a list or tuple is not the
        previous call's type and length."""
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self.leaf_index)
        cdef tuple leaves
        cdef object item
        if self.containers is None:
            leaves = PyTuple_New(n)
            for i in range(n):
                item = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.leaf_index, i)]
                Py_INCREF(item)
                PyTuple_SET_ITEM(leaves, i, item)
            return leaves
        cdef list gathered = []
        for i in range(n):
            item = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.leaf_index, i)]
            kind = <object>PyTuple_GET_ITEM(self.containers, i)
            if kind is None:
                gathered.append(item)
            elif (type(item) is kind and len(item)
                    == <Py_ssize_t><object>PyTuple_GET_ITEM(self.lengths, i)):
                gathered.extend(item)
            else:
                return None
        return tuple(gathered)


cdef inline object _container_of(object value):
    """The exact list or tuple type of a value whose items are all leaves jax
    keys (``f(x, w=[w1, w2])``), else None."""
    cdef type kind = type(value)
    if kind is not list and kind is not tuple:
        return None
    for item in value:
        if classify_leaf(item) > LEAF_HOST:
            return None
    return kind


cdef CallLayout _layout_of(tuple args, dict kwargs, object kwnames,
                           frozenset static_names, CallSignature signature):
    """The CallLayout of a call, or None when some dynamic argument is neither
    a leaf nor a list or tuple of leaves."""
    cdef tuple static_args = signature.static_args
    cdef Py_ssize_t nargs = PyTuple_GET_SIZE(args)
    # Static positions come first in static_args, in increasing order.
    cdef tuple static_positions = tuple([label for label in static_args[::3] if type(label) is int])
    cdef tuple dynamic_positions = tuple([i for i in range(nargs) if i not in static_positions])
    dynamic_names = sorted(name for name in kwnames or () if name not in static_names)
    cdef list values = [args[i] for i in dynamic_positions] + [kwargs[name] for name in dynamic_names]
    # None for a leaf, else the list or tuple type of leaves it is.
    cdef list kinds = []
    for value in values:
        kind = None
        if classify_leaf(value) > LEAF_HOST:
            kind = _container_of(value)
            if kind is None:
                return None
        kinds.append(kind)
    containers = tuple(kinds)
    cdef CallLayout layout = CallLayout.__new__(CallLayout)  # leaf_index, containers, lengths: None
    layout.kwnames = kwnames
    layout.nargs = nargs
    layout.static_index = static_positions
    cdef bint nested = any(kind is not None for kind in containers)
    if kwnames is not None or static_positions or nested:
        layout.leaf_index = dynamic_positions + tuple(
            nargs + kwnames.index(name) for name in dynamic_names)
        layout.static_index += tuple(
            nargs + kwnames.index(name)
            for name in sorted(name for name in kwnames or () if name in static_names))
    if nested:
        layout.containers = containers
        layout.lengths = tuple([0 if kind is None else len(value)
                                for value, kind in zip(values, containers)])
    num_leaves = sum([1 if kind is None else len(value) for value, kind in zip(values, containers)])
    return layout if num_leaves == signature.treedef.num_leaves else None


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
cdef class CompiledFunction(Engine):
    """A function compiled by ``fastdispatch.jit``: call it as the function.

    Behaves as ``jax.jit(fun, **options)`` in every observable way (results,
    dtypes, weak types, shardings, errors, retraces), with less time spent per
    call between Python and the executable.
    """

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
        cdef Call call
        _held = call_from(&call, self, args, kwargs)   # the argument array, while the call runs
        return self.call(&call)

    cdef str parse(self, Call* call, Found* found, CallTimes* times):
        """The guard on the argument array, else jax's settings, and flatten."""
        cdef PreviousCall previous = self.previous
        cdef CacheEntry entry
        cdef Executable executable
        cdef tuple guarded = None   # the leaves of a call the previous one's layout guards
        if previous is not None and (previous.entry.evicted or found.unguessed):
            previous = None   # its entry left the cache, or jax's context changed: no guess
        if previous is not None and type(previous.guard) is CallLayout:
            guarded = (<CallLayout>previous.guard).guard(call, previous.signature)
            if guarded is not None:
                # jax.jit converts host data (numpy values, a step counter's
                # new value) faster than the entry would: such a call goes to
                # it before jax's context is read (it cannot change that).
                entry = previous.entry
                executable = entry.executable
                if executable is None:
                    reason = entry.hand_off_reason if entry.hand_off_reason is _HOST_DATA else None
                elif executable.inputs.host_hand_off and not executable.inputs.host_repeats(
                        PySequence_Fast_ITEMS(guarded)):
                    reason = _HOST_DATA
                elif executable.inputs.new_scalars_hand_off and executable.inputs.new_scalar_in(
                        PySequence_Fast_ITEMS(guarded)):
                    reason = _NEW_SCALAR
                else:
                    reason = None
                found_entry(found, entry, guarded, None)   # a hit (the engine checks its context)
                return reason   # None: run, else handed off
        if previous is None or self.context_changed(found, previous):
            # No guess, or jax's settings changed since the previous call: a
            # call jax.jit itself runs (disable_jit, say) goes to it before
            # anything is read or flattened.
            reason = _settings_hand_off()
            if reason is not None:
                return reason
        # Static arguments split off, the dynamic ones flattened.
        cdef tuple args = call_args(call)
        cdef dict kwargs = call_kwargs(call)
        cdef tuple static_args = ()
        if self._has_static:
            args, kwargs, static_args = split_static(args, kwargs, self._static_argnums,
                                                     self._static_argnames)
        cdef list leaves = []
        cdef TreeDef treedef = flatten_into((args, kwargs), leaves)
        found_arguments(found, treedef, leaves, static_args, self._dynamic_arg_names, None)
        return None

    # -- the engine's hooks ------------------------------------------------

    cdef object library_call(self, Call* call, Found* found):
        """jax.jit runs the call as the caller made it."""
        return PyObject_Vectorcall(self._jitted, call.argv, call.nargsf, call.kwnames)

    cdef tuple cache_miss(self, Call* call, Found* found, CacheEntry entry, CallTimes* times,
                          object recording):
        """jax.jit runs the call, then its executable is taken for the entry
        (asking jax.jit for the Compiled costs ~0.2 ms: jax caches both the
        trace and the executable) and written to the warm-start store."""
        with recording:
            out = PyObject_Vectorcall(self._jitted, call.argv, call.nargsf, call.kwnames)
        reached(times, AT_LAUNCHED, "build entry")
        traced = compiled = None
        try:
            traced = self._jitted.trace(*call_args(call), **call_kwargs(call))
            compiled = traced.lower().compile()
            fast = (make_executable(compiled, entry.signature, <list>found.leaves, self._donates,
                                    HAND_OFF_NOW),
                    output_tree(compiled.out_tree))
        except Exception as error:
            fast = MustHandOff.from_error(error)
        if entry.warm_key is not None and compiled is not None:
            self._warm_save(entry, compiled, traced, None if type(fast) is tuple else fast.reason)
        return out, fast

    cdef object _warm_save(self, CacheEntry entry, object compiled, object traced, str reason):
        """Write the compile under the entry's warm-start key.  One jax.jit runs
        here for its host arguments (``reason``: numpy arguments, say) is written
        too: a loaded entry converts them itself.  One jax.jit runs for what its
        executable is (effects, a reshard) is not, and says why."""
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
        if store.checked:
            return store.checked_key(self.fun, self._jitted, self._options, signature,
                                     call_args(call), call_kwargs(call))
        return store.key(self.fun, _warm.LABEL, self._options, signature, _warm.key_parts(signature))

    cdef tuple build_loaded(self, Call* call, Found* found, CacheEntry entry, object loaded):
        """The entry of an executable loaded from the warm-start store.  It
        converts host values itself for its first LOADED_CALLS_BEFORE_JAX
        calls: handing them to jax.jit, whose caches are empty in this
        process, would trace and compile after all; then, as a compiled
        entry, it leaves those jax.jit converts faster to it.  One stored
        with a recipe has its output tree rebuilt from this call's arguments
        (their trees' node data did not pickle)."""
        compiled, out_tree = loaded, None
        if type(loaded) is tuple:
            compiled, recipe = loaded
            out_tree = warm_store().outputs(recipe, _warm.call_objects(entry.signature))[0]
        return (make_executable(compiled, entry.signature, <list>found.leaves, self._donates,
                                LOADED_CALLS_BEFORE_JAX),
                output_tree(compiled.out_tree if out_tree is None else out_tree))

    cdef void guard_passed(self, Call* call, PreviousCall previous, list leaves):
        """A call proved alike the previous one (its structure, static
        arguments and leaves): its layout guards the next ones, read in
        place; False where its arguments are trees."""
        if previous.guard is not None:
            return
        layout = _layout_of(call_args(call), call_kwargs(call),
                            None if call.kwnames == NULL else <object>call.kwnames,
                            self._static_argnames, previous.signature)
        previous.guard = False if layout is None else layout

    cdef object hand_off_like(self, Call* call, CacheEntry entry, str reason):
        """The call's shape, for the hand-off memo: where jax.jit took it
        before any entry was found (jax.jit raises for it, as a rule: an
        unhashable static argument, a leaf it rejects), or on ``entry`` for
        its leaves' sake (numpy values, a step counter's new value: jax.jit
        converts them faster; a value jax.jit raises for) where its arguments
        are trees, which the previous call's layout does not guard.  The next
        call of that shape goes to jax.jit unflattened."""
        if entry is None:
            return shape_of(call)
        cdef PreviousCall previous = self.previous
        if previous is None or previous.entry is not entry or type(previous.guard) is CallLayout:
            return None
        if reason is _HOST_DATA or reason is _NEW_SCALAR or reason is _SCALAR_CONVERSION:
            return shape_of(call)
        return None

    cdef bint alike(self, Call* call, object like):
        return (<CallShape>like).matches(call)

    cdef object traced(self, Call* call):
        """jax.jit's trace of the call: cached, as jax.jit ran one like it."""
        return self._jitted.trace(*call_args(call), **call_kwargs(call))

    cdef object returned(self, Call* call, object out):
        """The post hook (post_hook.py), while one is set."""
        call_post_hook(self, call_args(call), call_kwargs(call), out)
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
        self.forget_calls()

    @property
    def cache(self):
        """The CompiledFunctionCache holding this function's executables."""
        return self._shared_cache

    def _cache_entries(self):
        """This function's CacheEntry objects (for tests and the tracer)."""
        return self.executables.values()


install_vectorcall(CompiledFunction)


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
