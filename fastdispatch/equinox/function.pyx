# cython: boundscheck=False, wraparound=False
"""The hot path of ``fastdispatch.filter_jit``: equinox's filter_jit on the engine.

A call ``wrapper(*args, **kwargs)`` is, as equinox makes it:
  bind       the arguments to the function's signature; a BindPlan per call
             layout says where each bound argument comes from
  partition  the leaves of (bound args, bound kwargs): jax arrays are traced,
             every other leaf is static (compared with ==, hashed); the
             function's own arrays (a Module's, a bound method's) are traced too
  key        a CallSignature: the tree, the static leaves (None where an array
             is), the function's static part and donation, the arrays' keys;
             the guard against the previous call's signature first
  same call  before all of that: a call on the very objects of an earlier one
             (an unchanged model) is proved so by identity (SameCall), and
             skips binding, flattening, partitioning and keying
  execute    the executable compiled by equinox's shared jax.jit for that key,
             its inputs in equinox's order (first argument, function, rest)
  rebuild    the output tree: arrays from the executable, every other leaf the
             very object the trace returned (as equinox returns them)
Whatever the fast path does not run (tracers, numpy arrays, effects,
disable_jit, a first call) is equinox's own call, with its frames, warnings and
errors; a first call then hands its executable to the fast path.
"""
import sys
import warnings

from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

from fastdispatch.core.keys cimport hash_mix
from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.pytree.paths import leaf_paths
from fastdispatch.core.signature cimport (
    CallSignature, LeafKind, LEAF_ARRAY, LEAF_HOST, LEAF_KEY, LEAF_SCALAR, LEAF_TRACER, LEAF_OTHER,
    classify_leaf)
from fastdispatch.core.execute cimport (
    NEVER_HAND_OFF, Executable, Outputs, make_executable, our_treedef)
from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine cimport (
    Call, Engine, Found, PreviousCall, call_args, call_from, call_kwargs, found_arguments,
    found_entry, warm_store)
from fastdispatch.core.watch cimport AT_LAUNCHED, CallTimes, reached
from fastdispatch.equinox.bind cimport BindPlan, bound_argument, make_plan
from fastdispatch.equinox.same_call cimport SameCall, record_same
from fastdispatch.core.cache import default_cache
from fastdispatch.core.engine import library_function
from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff
from fastdispatch.equinox import warm as _warm

cdef extern from "Python.h":
    dict PyObject_GenericGetDict(object o, void* context)
    PyObject* PyWeakref_GET_OBJECT(object ref)

cdef str _EQUINOX = "equinox"
cdef str _TRACER = _reasons.TRACER
cdef str _UNSUPPORTED_LEAF = _reasons.UNSUPPORTED_LEAF
cdef str _ARGUMENT_BINDING = _reasons.ARGUMENT_BINDING
cdef str _HOST_DATA = _reasons.HOST_DATA

cdef str _CACHED = sys.intern("_cached")
cdef str _SIGNATURE = sys.intern("_signature")
cdef str _DYNAMIC_FUN = sys.intern("_dynamic_fun")
cdef str _STATIC_FUN = sys.intern("_static_fun")
cdef str _DONATE_FIRST = sys.intern("donate_first")
cdef str _DONATE_REST = sys.intern("donate_rest")


# A call's static part, as its CallSignature's static_args hold it: (label,
# type, value) triples as for every front end.  Written by _static_part, read
# by the three below it: the one place its layout is.
cdef inline tuple _static_part(object static_fun, bint donate_first, bint donate_rest,
                               tuple leaves):
    return ("fun", type(static_fun), static_fun,              # the function's static part
            "donate", tuple, (donate_first, donate_rest),     # which arrays it donates
            "leaves", tuple, leaves)                          # each leaf's static value; None: an array


cdef inline object _static_fun_of(CallSignature signature):
    return <object>PyTuple_GET_ITEM(signature.static_args, 2)


cdef inline tuple _donation_of(CallSignature signature):
    return <tuple>PyTuple_GET_ITEM(signature.static_args, 5)


cdef inline tuple _static_leaves_of(CallSignature signature):
    return <tuple>PyTuple_GET_ITEM(signature.static_args, 8)


cdef inline list _input_order(list first, list fun, list rest, bint donate_first, bint donate_rest):
    """The executable's inputs (or their paths) in equinox's order: the first
    argument's arrays, the function's own, the rest's.  jax flattens equinox's
    dicts of donated and kept arrays by key ("first" < "fun" < "rest"), so with
    the rest donated and the first kept, the donated dict (fun, rest) leads."""
    if donate_rest and not donate_first:
        return fun + rest + first
    return first + fun + rest

# Bound plans kept per dispatcher (wrappers made anew each call bring new
# signature objects): past this many, the table starts again.
cdef enum:
    MAX_PLANS = 64

# After this many SameCalls refused or dropped unused, a dispatcher stops
# recording them: its calls change what the guard proves too often.
cdef enum:
    MAX_STRIKES = 8

cdef object _ARRAY_TYPE = _jax.ARRAY_TYPE

# Leaf types classify_leaf calls OTHER, by whether equinox.is_array accepts
# them (an array type jax does not run directly): decided once per type.
cdef dict _array_like_types = {}


cdef bint _array_like(object leaf, object is_array) except -1:
    cdef type leaf_type = type(leaf)
    found = _array_like_types.get(leaf_type)
    if found is None:
        found = bool(is_array(leaf))
        if len(_array_like_types) >= 4096:
            _array_like_types.clear()
        _array_like_types[leaf_type] = found
    return found


cdef class OutputRecipe(Outputs):
    """How the flat outputs of an executable become the call's result: the
    output tree, with each leaf an output of the executable (output 0 is
    equinox's marker) or the static value the trace returned."""

    def __dealloc__(self):
        PyMem_Free(self.source)

    cdef object rebuild(self, list outputs):
        cdef Py_ssize_t i, k
        cdef object value
        if self.single >= 0:
            return <object>PyList_GET_ITEM(outputs, self.single)
        cdef list leaves = PyList_New(self.num_leaves)
        for i in range(self.num_leaves):
            k = self.source[i]
            if k >= 0:
                value = <object>PyList_GET_ITEM(outputs, k)
            else:
                value = <object>PyTuple_GET_ITEM(self.statics, i)
            Py_INCREF(value)
            PyList_SET_ITEM(leaves, i, value)
        return self.treedef.unflatten(leaves)


cdef OutputRecipe _make_recipe(object out, Py_ssize_t num_outputs):
    """The OutputRecipe of a call whose result was ``out`` (from equinox's own
    call), for an executable with ``num_outputs`` outputs; MustHandOff if none."""
    cdef list leaves = []
    cdef TreeDef treedef = flatten_into(out, leaves)
    cdef Py_ssize_t i, n = len(leaves), k = 1
    cdef LeafKind kind
    cdef list sources = []
    statics = []
    for i in range(n):
        kind = classify_leaf(leaves[i])
        if kind == LEAF_ARRAY or kind == LEAF_KEY:
            sources.append(k)
            k += 1
            statics.append(None)
        elif kind == LEAF_SCALAR or kind == LEAF_OTHER:
            sources.append(-1)
            statics.append(leaves[i])
        else:
            raise MustHandOff(_reasons.NON_ARRAY_OUTPUTS)
    return _new_recipe(treedef, sources, tuple(statics), num_outputs)


cdef OutputRecipe _new_recipe(TreeDef treedef, list sources, tuple statics,
                              Py_ssize_t num_outputs):
    """The OutputRecipe of output tree ``treedef`` whose leaf i is the
    executable's output ``sources[i]`` (>= 1), or else ``statics[i]``."""
    cdef OutputRecipe recipe = OutputRecipe.__new__(OutputRecipe)
    cdef Py_ssize_t i, n = len(sources), k = 1
    if treedef is None or treedef.num_leaves != n or len(statics) != n:
        raise MustHandOff(_reasons.OUTPUTS_FLATTEN_UNLIKE_EQUINOX)
    recipe.treedef = treedef
    recipe.num_leaves = n
    recipe.source = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    if recipe.source == NULL:
        raise MemoryError()
    for i in range(n):
        recipe.source[i] = sources[i]
        if recipe.source[i] >= 0:
            if recipe.source[i] != k:
                raise MustHandOff(_reasons.OUTPUTS_FLATTEN_UNLIKE_EQUINOX)
            k += 1
    if k != num_outputs:
        raise MustHandOff(_reasons.OUTPUTS_FLATTEN_UNLIKE_EQUINOX)
    recipe.statics = statics
    recipe.single = 1 if treedef.num_nodes == 1 and n == 1 and recipe.source[0] == 1 else -1
    return recipe


cdef list _recipe_sources(OutputRecipe recipe):
    return [recipe.source[i] for i in range(recipe.num_leaves)]


cdef class _Front:
    """Describes filter_jit's signatures for reports (CallSignature.front):
    its keyed leaves are the call's arrays (first argument, the function's
    own arrays, the rest, in the executable's order), not the tree's leaves."""

    def leaf_paths(self, CallSignature signature):
        from jax.tree_util import FlattenedIndexKey

        donate_first, donate_rest = _donation_of(signature)
        static = _static_leaves_of(signature)
        paths = leaf_paths(signature.treedef)
        dynamic = [path for path, value in zip(paths, static) if value is None]
        first = [path for path in dynamic if _in_first(path)]
        rest = [path for path in dynamic if not _in_first(path)]
        fun = [("fun", FlattenedIndexKey(i)) for i in range(signature.num_leaves - len(dynamic))]
        return _input_order(first, fun, rest, donate_first, donate_rest)

    def static_items(self, CallSignature signature):
        # Labelled by path (reports name the argument), then the function's own.
        items = [(path, value) for path, value in zip(
            leaf_paths(signature.treedef), _static_leaves_of(signature)) if value is not None]
        items.append((("fun",), _static_fun_of(signature)[0]))
        return items


def _in_first(path):
    # A leaf of the first bound positional argument: (args, kwargs)[0][0]...
    return len(path) >= 2 and getattr(path[0], "idx", None) == 0 and getattr(
        path[1], "idx", None) == 0


cdef _Front _FRONT = _Front()


cdef list _executable_inputs(tuple fun_arrays, list dynamic, Py_ssize_t first_dynamic,
                             bint donate_first, bint donate_rest):
    """The executable's inputs, in equinox's order (_input_order): the
    arrays as they are where that is their order already; None where the
    function's own arrays include host data (the library runs the call)."""
    cdef LeafKind kind
    fun_dynamic = [value for value in fun_arrays if value is not None]
    for leaf in fun_dynamic:
        kind = classify_leaf(leaf)
        if kind != LEAF_ARRAY and kind != LEAF_KEY:
            return None
    if fun_dynamic or (donate_rest and not donate_first):
        return _input_order(dynamic[:first_dynamic], fun_dynamic, dynamic[first_dynamic:],
                            donate_first, donate_rest)
    return dynamic


cdef class FilterDispatcher(Engine):
    """The fast path of every filter_jit wrapper of one function: equinox
    shares one jax.jit between them (by function, or by name for other
    callables), and so does this, with its entries, plans and guard."""

    def __init__(self, jitted, equinox_call, equinox_lower, is_array, warm_options=None):
        self.jitted = library_function(jitted)
        self.warm_options = warm_options
        # equinox names its jit's function after the user's: the name jax.jit's span would have.
        self.span_name = f"FastDispatch({_jax.fun_name(self.jitted)})"
        self.library = _EQUINOX
        self.equinox_call = equinox_call
        self.equinox_lower = equinox_lower
        self.is_array = is_array
        self.executables = (<CompiledFunctionCache>default_cache()).function_cache(self, None)
        self.plans = {}

    # equinox's own call uses the shared jax.jit as wrapper._cached(...):
    def __call__(self, *args, **kwargs):
        return self.jitted(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self.jitted.lower(*args, **kwargs)

    def clear(self):
        """Forget the executables and plans (equinox.clear_caches())."""
        self.forget_calls()
        self.plans.clear()
        self.last_plan = None
        if self.same is not None:
            self._drop_same(self.same)

    def library_function(self):
        """equinox's shared jax.jit of the function."""
        return self.jitted

    def _cache_size(self):
        return len(self.executables)

    def _same_call(self):
        """The identity guard's state, for tests: (calls its record served, or
        None without one; records refused or dropped unused)."""
        return (None if self.same is None else self.same.hits), self.strikes

    def __repr__(self):
        return f"<fastdispatch filter_jit dispatcher of {self.jitted!r}>"

    cdef BindPlan plan_for(self, object signature, tuple args, dict kwargs):
        cdef BindPlan plan = self.last_plan
        if plan is not None and plan.fits(signature, args, kwargs):
            return plan
        key = (id(signature), len(args), tuple(kwargs))
        plan = self.plans.get(key)
        if plan is None or plan.signature is not signature:
            plan = make_plan(signature, args, kwargs)
            if len(self.plans) >= MAX_PLANS:
                self.plans.clear()
            self.plans[key] = plan
        self.last_plan = plan
        return plan

    cdef str parse(self, Call* call, Found* found, CallTimes* times):
        """Bind, flatten and partition as equinox does, for the engine's find;
        or the entry of a SameCall."""
        cdef tuple args = call_args(call)
        cdef dict kwargs = call_kwargs(call)
        cdef dict fields = PyObject_GenericGetDict(<object>call.function, NULL)
        cdef BindPlan plan = self.plan_for(<object>PyDict_GetItem(fields, _SIGNATURE), args, kwargs)
        if plan.refused:
            return _ARGUMENT_BINDING
        cdef SameCall same = self.same
        cdef list inputs
        if same is not None:
            inputs = None
            if not found.unguessed:   # (asked again: jax's context changed since its call)
                inputs = same.inputs_for(<object>call.function, fields, plan, args, kwargs)
            if inputs is not None:
                same.hits += 1
                found_entry(found, same.entry, inputs, None)
                return None
            self._drop_same(same)
        elif self.strikes < MAX_STRIKES:
            self._watch_roots(plan, args, kwargs)
        cdef tuple bound = plan.bind(args, kwargs)
        cdef list leaves = []
        cdef TreeDef treedef = flatten_into(bound, leaves)
        cdef tuple static = PyTuple_New(PyList_GET_SIZE(leaves))
        cdef list dynamic = []
        cdef Py_ssize_t first_dynamic = 0
        reason = self._partition(treedef, bound, leaves, static, dynamic, &first_dynamic)
        if reason is not None:
            return reason
        cdef bint donate_first = <object>PyDict_GetItem(fields, _DONATE_FIRST) is True
        cdef bint donate_rest = <object>PyDict_GetItem(fields, _DONATE_REST) is True
        inputs = _executable_inputs(<tuple>PyDict_GetItem(fields, _DYNAMIC_FUN), dynamic, first_dynamic,
                                    donate_first, donate_rest)
        if inputs is None:
            return _HOST_DATA
        static_args = _static_part(<object>PyDict_GetItem(fields, _STATIC_FUN),
                                   donate_first, donate_rest, static)
        found_arguments(found, treedef, inputs, static_args, plan.arg_names, _FRONT)
        return None

    cdef str _partition(self, TreeDef treedef, tuple bound, list leaves, tuple static, list dynamic,
                        Py_ssize_t* first_dynamic):
        """Partition as equinox does: arrays are traced (into ``dynamic``, in
        order), every other leaf is static (into ``static``, at its place);
        ``first_dynamic``: how many of ``dynamic`` are the first argument's.
        The reason to hand the call off, or None."""
        cdef Py_ssize_t i, n = PyList_GET_SIZE(leaves)
        cdef Py_ssize_t first_end = 0
        cdef LeafKind kind
        cdef object leaf, slot
        if PyTuple_GET_SIZE(<tuple>bound[0]):
            first_end = (<TreeDef>(<TreeDef>treedef.children[0]).children[0]).num_leaves
        for i in range(n):
            if i == first_end:
                first_dynamic[0] = PyList_GET_SIZE(dynamic)
            leaf = <object>PyList_GET_ITEM(leaves, i)
            kind = classify_leaf(leaf)
            if kind == LEAF_ARRAY or kind == LEAF_KEY or kind == LEAF_HOST:
                # numpy values are arrays to equinox (traced); the executable
                # puts them on the device as jax.jit would have converted them.
                dynamic.append(leaf)
                slot = None
            elif kind == LEAF_SCALAR or (kind == LEAF_OTHER and not _array_like(leaf, self.is_array)):
                slot = leaf
            else:
                return _TRACER if kind == LEAF_TRACER else _UNSUPPORTED_LEAF
            Py_INCREF(slot)
            PyTuple_SET_ITEM(static, i, slot)
        if n <= first_end:
            first_dynamic[0] = PyList_GET_SIZE(dynamic)
        return None

    cdef void _watch_roots(self, BindPlan plan, tuple args, dict kwargs):
        """Arm the recording of a SameCall when this call passes the previous
        call's objects again (arrays aside: each call may bring new ones)."""
        cdef Py_uhash_t roots = 0
        cdef Py_ssize_t i
        cdef tuple sources = plan.sources
        for i in range(PyTuple_GET_SIZE(sources)):
            value = bound_argument(<object>PyTuple_GET_ITEM(sources, i), args, kwargs)
            if type(value) is not _ARRAY_TYPE:
                roots = hash_mix(roots, <Py_uhash_t><PyObject*>value)
        self.arm = roots == self.last_roots
        self.last_roots = roots

    cdef void _drop_same(self, SameCall same):
        if self.same is same:
            self.same = None
        if same.hits == 0:
            self.strikes += 1
        same.strong.drop()

    # -- the engine's hooks ------------------------------------------------

    cdef void guard_passed(self, Call* call, PreviousCall previous, list leaves):
        """A call on the previous call's objects again: record it (SameCall),
        so that the next such call is proved by identity."""
        if not self.arm or self.same is not None:
            return
        self.arm = False
        cdef SameCall same = None
        try:
            fields = PyObject_GenericGetDict(<object>call.function, NULL)
            plan = self.plan_for(<object>PyDict_GetItem(fields, _SIGNATURE), call_args(call),
                                 call_kwargs(call))
            same = record_same(call, previous, leaves, plan)
        except Exception:
            pass   # not recorded: the call runs as it would have
        if same is None:
            self.strikes += 1
        else:
            self.same = same

    cdef object library_call(self, Call* call, Found* found):
        """equinox's own call (its frames, warnings and errors)."""
        return self.equinox_call(<object>call.function, *call_args(call), **call_kwargs(call))

    cdef tuple cache_miss(self, Call* call, Found* found, CacheEntry entry, CallTimes* times,
                          object recording):
        """equinox's own call, then its executable from its lowering and the
        recipe of its outputs from what the call returned."""
        with recording:
            out = self.library_call(call, found)
        reached(times, AT_LAUNCHED, "build entry")
        try:
            fast = self._built(call, found, entry, out)
        except Exception as error:
            fast = MustHandOff.from_error(error)
        return out, fast

    cdef tuple _built(self, Call* call, Found* found, CacheEntry entry, object out):
        # Lowering again comes from jax's caches; anything it warns was just
        # said (or silenced) by the call itself.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lowered = self.equinox_lower(
                <object>call.function, *call_args(call), **call_kwargs(call)).lowered
            compiled = lowered.compile()
        cdef Executable executable
        cdef OutputRecipe recipe
        try:
            executable = self._executable(compiled, entry, <list>found.leaves)
            recipe = _make_recipe(out, len(executable.out_handlers))
        except MustHandOff as hand_off:
            if entry.warm_key is not None and warm_store() is not None:
                # Only equinox's own call runs it: nothing to load it for.
                warm_store().refuse(self.jitted, _reasons.WARM_LIBRARY_CALL,
                                    f"is run by equinox's own call ({hand_off.reason})")
            raise
        if entry.warm_key is not None:
            store = warm_store()
            if store is not None:
                store.save(entry.warm_key, compiled, self.jitted, lower=lambda: lowered,
                           outputs=(recipe.treedef.to_jax(), _recipe_sources(recipe),
                                    recipe.statics),
                           call_objects=_warm.call_objects(entry.signature))
        return executable, recipe

    cdef Executable _executable(self, object compiled, CacheEntry entry, list leaves):
        cdef bint donates = any(_donation_of(entry.signature))
        cdef Executable executable = make_executable(
            compiled, entry.signature, leaves, donates, NEVER_HAND_OFF)
        if executable.calls_host:
            # equinox blocks such calls so that error_if raises at the call,
            # as its own error: its call runs them.
            raise MustHandOff(_reasons.EFFECTS)
        return executable

    cdef object warm_key(self, Call* call, Found* found, CallSignature signature, object store):
        """The call's key in the warm-start store (fastdispatch.warm), or None."""
        if self.warm_options is None:
            return None
        if store.checked:
            # equinox's own call traces it: its trace cannot be keyed first.
            store.refuse(self.jitted, _reasons.WARM_CHECKED_FILTER,
                         "is a filter_jit function, not stored in checked mode")
            return None
        return store.key(self.jitted, _warm.LABEL, self.warm_options, signature,
                         _warm.key_parts(signature), _warm.node_types(signature), False)

    cdef tuple build_loaded(self, Call* call, Found* found, CacheEntry entry, object loaded):
        """The entry of an executable loaded from the warm-start store, with
        the output recipe stored beside it (warm/outputs.py): the call's
        non-array outputs rebuilt from its own inputs and names, untraced."""
        compiled, described = loaded
        cdef Executable executable = self._executable(compiled, entry, <list>found.leaves)
        out_treedef, sources, statics = warm_store().outputs(described,
                                                             _warm.call_objects(entry.signature))
        return executable, _new_recipe(our_treedef(out_treedef), sources, tuple(statics),
                                       len(executable.out_handlers))


def call(wrapper, *args, **kwargs):
    """``FilterJitWrapper.__call__``: equinox's filter_jit call, fast."""
    cdef PyObject* found = PyDict_GetItem(PyObject_GenericGetDict(wrapper, NULL), _CACHED)
    if found == NULL or type(<object>found) is not FilterDispatcher:
        raise TypeError(f"{type(wrapper).__name__} was not made by fastdispatch.filter_jit")
    cdef Call one
    _held = call_from(&one, wrapper, args, kwargs)   # the argument array, while the call runs
    return (<FilterDispatcher>found).call(&one)
