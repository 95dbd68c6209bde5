# cython: boundscheck=False, wraparound=False
"""The hot path of ``fastdispatch.nnx.jit``: flax NNX's jit, graph mode.

flax's jit splits every argument graph into a GraphDef and its Variables'
values on every call (~200 us for an MLP and its optimizer), runs its jax.jit
of the split function, then merges the outputs back into the caller's objects.
When a call's graph is the one a previous call left behind, the split and the
merge only move values, so this does only that:

  guard      the arguments are the recorded roots, and a Record's guards say
             that every object flax's split would visit holds what it held
             (types, attributes, containers, Variable metadata): the GraphDef
             is the recorded one, without computing it
  gather     each Variable's raw value (and each array attribute), straight
             from its slot, in flax's leaf order; other arguments' leaves
  execute    the executable flax's own jax.jit compiled for that GraphDef
  scatter    the outputs straight into the same Variable slots; the
             function's own output rebuilt from its recorded structure

A call no record serves takes the engine's steps on flax's split (a
``FlaxCall``, nnx/flax_call.py, open across them): found, compiled (flax's
jax.jit and merge) or loaded; ``remember`` then records the graph it left
where its executable keeps the graph's structure.
"""
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem, PyDict_Size
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, Py_TYPE
from cpython.ref cimport Py_XDECREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine cimport (
    Call, CallTimes, Engine, Found, call_args, call_from, call_kwargs, found_arguments,
    found_entry, install_vectorcall, keep, warm_store)
from fastdispatch.core.execute cimport NEVER_HAND_OFF, Executable, Outputs, make_executable
from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport (
    CallSignature, LeafKind, LEAF_ARRAY, LEAF_HOST, classify_leaf, make_signature)
from functools import partial as _partial

from fastdispatch.core.cache import default_cache
from fastdispatch import _jax, _reasons

cdef extern from "Python.h":
    dict PyObject_GenericGetDict(object o, void* context)
    ctypedef PyObject* (*descrgetfunc)(PyObject*, PyObject*, PyObject*)
    ctypedef int (*descrsetfunc)(PyObject*, PyObject*, PyObject*) except -1
    ctypedef struct _TypeWithDescr "PyTypeObject":
        descrgetfunc tp_descr_get
        descrsetfunc tp_descr_set

cdef str _FLAX = "flax"
cdef str _NOT_GRAPH_UPDATES = _reasons.NOT_GRAPH_UPDATES

cdef object _ARRAY = _jax.ARRAY_TYPE
cdef object _KEY_ARRAY = _jax.KEY_ARRAY_TYPE

# Where an array attribute or value lives: its type is checked, not its
# identity (the fast path itself writes new arrays there).
ARRAY_SLOT = object()
# Where a node keeps its PytreeState: flax's merge puts a new one there on
# every call it runs, so its type is checked here and its flags by the
# node's FlagsGuard, never its identity (else each function's flax call
# would void the records of every other function on the same graph).
STATE_SLOT = object()

# Set by fastdispatch.nnx (configure): what of flax the hot path reads.
cdef object _raw_value = None          # Variable._raw_value, a slot (member descriptor)
cdef descrgetfunc _get_raw = NULL
cdef descrsetfunc _set_raw = NULL
cdef object _metadata = None           # Variable._var_metadata, a slot
cdef descrgetfunc _get_metadata = NULL
cdef object _graph_context = None      # flax's thread-local GRAPH_CONTEXT
cdef str _static_cache = None          # its attribute for nnx.cached_partial's traversal cache
cdef tuple _flags_fields = ()          # PytreeState's flag slots, read by FlagsGuard
cdef object _state_type = None         # PytreeState
cdef object _merge = None              # flax's merge: (flax function, outputs) -> output


def configure(raw_value, metadata, graph_context, static_cache, flags_fields, state_type, merge):
    """Hand the hot path what it reads of flax (called once by fastdispatch.nnx)."""
    global _raw_value, _get_raw, _set_raw, _metadata, _get_metadata, _graph_context, _static_cache
    global _flags_fields, _state_type, _merge
    _raw_value = raw_value
    _get_raw = (<_TypeWithDescr*>Py_TYPE(raw_value)).tp_descr_get
    _set_raw = (<_TypeWithDescr*>Py_TYPE(raw_value)).tp_descr_set
    _metadata = metadata
    _get_metadata = (<_TypeWithDescr*>Py_TYPE(metadata)).tp_descr_get
    _graph_context = graph_context
    _static_cache = static_cache
    _flags_fields = tuple(flags_fields)
    _state_type = state_type
    _merge = merge


def raw_value(variable):
    """A Variable's raw value, read from its slot."""
    return _slot_read(_raw_value, _get_raw, variable)


def metadata(variable):
    """A Variable's metadata dict, read from its slot."""
    return _slot_read(_metadata, _get_metadata, variable)


def signature_of(TreeDef treedef, list leaves, tuple static_args=(), front=None):
    """The CallSignature of a split call's dynamic leaves and its static
    arguments' (label, type, value) triples, under jax's context now;
    ``front`` names its leaves for reports (see CallSignature.front)."""
    signature = _signature_of(treedef, leaves, static_args, _jax.trace_context(), front)
    if signature is None:
        raise TypeError("a leaf the dispatcher does not key")
    return signature


cdef CallSignature _signature_of(TreeDef treedef, list leaves, tuple static_args, tuple context,
                                 object front):
    cdef LeafKind unkeyed = LEAF_ARRAY
    return make_signature(treedef, leaves, static_args, context, (), &unkeyed, front)


cdef inline object _slot_read(object descriptor, descrgetfunc get, object owner):
    """``descriptor.__get__(owner)`` through the descriptor's C slot."""
    cdef PyObject* value = get(<PyObject*>descriptor, <PyObject*>owner, NULL)
    if value == NULL:
        raise AttributeError("an empty Variable slot")
    result = <object>value
    Py_XDECREF(value)
    return result


cdef inline bint _is_array(object value):
    cdef object value_type = type(value)
    return value_type is _ARRAY or value_type is _KEY_ARRAY


cdef inline bint _same_entries(dict d, tuple keys, tuple values) except -1:
    cdef Py_ssize_t i
    cdef PyObject* found
    cdef object expected
    for i in range(PyTuple_GET_SIZE(keys)):
        found = PyDict_GetItem(d, <object>PyTuple_GET_ITEM(keys, i))
        if found == NULL:
            return False
        expected = <object>PyTuple_GET_ITEM(values, i)
        if expected is ARRAY_SLOT:
            if not _is_array(<object>found):
                return False
        elif expected is STATE_SLOT:
            if type(<object>found) is not _state_type:
                return False
        elif found != <PyObject*>expected:
            return False
    return True


cdef class Guard:
    """One check of a Record's guard program: an object flax's split would
    visit still holds what it held when recorded (see nnx/guards.py)."""

    def holds_now(self):
        """Whether the object still holds what it held when recorded."""
        return self.holds()

    cdef bint holds(self) except -1:
        raise NotImplementedError


cdef class NodeGuard(Guard):
    """A graph node or a State: its type, and its __dict__'s recorded entries."""

    def __init__(self, target, tuple keys, tuple values):
        self.target, self.target_type = target, type(target)
        self.keys, self.values, self.size = keys, values, len(keys)

    cdef bint holds(self) except -1:
        if type(self.target) is not self.target_type:
            return False
        cdef dict d = PyObject_GenericGetDict(self.target, NULL)
        return PyDict_Size(d) == self.size and _same_entries(d, self.keys, self.values)


cdef class DictGuard(Guard):
    """A dict container of the graph: its recorded items."""

    def __init__(self, dict target, tuple keys, tuple values):
        self.target = target
        self.keys, self.values, self.size = keys, values, len(keys)

    cdef bint holds(self) except -1:
        cdef dict d = <dict>self.target
        return PyDict_Size(d) == self.size and _same_entries(d, self.keys, self.values)


cdef class ListGuard(Guard):
    """A list container of the graph: its recorded items, by identity."""

    def __init__(self, list target):
        self.target, self.values = target, tuple(target)

    cdef bint holds(self) except -1:
        cdef list items = <list>self.target
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self.values)
        if PyList_GET_SIZE(items) != n:
            return False
        for i in range(n):
            if PyList_GET_ITEM(items, i) != PyTuple_GET_ITEM(self.values, i):
                return False
        return True


cdef class VariableGuard(Guard):
    """A Variable: its type, a jax array as its value, its metadata."""

    def __init__(self, target, dict metadata):
        self.target, self.target_type, self.metadata = target, type(target), metadata

    cdef bint holds(self) except -1:
        cdef object target = self.target
        if type(target) is not self.target_type:
            return False
        if not _is_array(_slot_read(_raw_value, _get_raw, target)):
            return False
        metadata = _slot_read(_metadata, _get_metadata, target)
        return metadata is self.metadata or metadata == self.metadata


cdef class FlagsGuard(Guard):
    """A node's PytreeState (at ``key``, whichever object holds it now: flax's
    merge replaces it): its flags."""

    def __init__(self, target, str key, tuple flags):
        self.target, self.key, self.flags = target, key, flags

    cdef bint holds(self) except -1:
        cdef Py_ssize_t i
        state = PyObject_GenericGetDict(self.target, NULL).get(self.key)
        if type(state) is not _state_type:
            return False
        for i in range(PyTuple_GET_SIZE(_flags_fields)):
            if getattr(state, <str>PyTuple_GET_ITEM(_flags_fields, i)) is not \
                    <object>PyTuple_GET_ITEM(self.flags, i):
                return False
        return True


cdef class Input:
    """How one argument of a call reaches the executable."""

    def __init__(self, int kind, position, root=None, TreeDef treedef=None,
                 Py_ssize_t slot_start=0, Py_ssize_t slot_stop=0):
        self.kind, self.position = kind, position
        self.root, self.treedef = root, treedef
        self.slot_start, self.slot_stop = slot_start, slot_stop


cdef inline object _argument(object position, tuple args, dict kwargs):
    if type(position) is int:
        return <object>PyTuple_GET_ITEM(args, <Py_ssize_t>position)
    return <object>PyDict_GetItem(kwargs, position)


# The most records kept per function: train and eval states of one model, say;
# and the most shapes one record runs (a decode loop's prompt lengths).
cdef enum:
    MAX_RECORDS = 4
    MAX_SHAPES = 128


cdef class Record(Outputs):
    """A graph state a call left behind, proved again by its guards, and how
    calls on it reach their executable and write back: the Outputs of its
    calls (the graph's new values go to their slots, the function's own
    output is rebuilt)."""

    def __init__(self, Py_ssize_t nargs, tuple kwnames, tuple inputs, tuple statics, tuple guards,
                 tuple slots, CacheEntry entry, CallSignature signature, TreeDef out_treedef):
        # The graph: how calls on it are laid out, proved, read and written.
        self.nargs, self.kwnames, self.inputs, self.statics = nargs, kwnames, inputs, statics
        self.guards, self.slots, self.num_slots = guards, slots, len(slots)
        # The executable this record runs on it, and those of its other shapes.
        self.entry, self.signature, self.out_treedef = entry, signature, out_treedef
        self.shapes = {}

    cdef bint switch_to(self, CallSignature signature) except -1:
        """Make the executable of another shape (``signature``) of this graph
        the current one, when one is known and kept; whether it is."""
        found = self.shapes.pop(signature, None)
        if found is None:
            return False
        cdef CacheEntry entry = <CacheEntry>(<tuple>found)[0]
        if entry.evicted:
            return False
        self.add_shape(signature, entry, <TreeDef>(<tuple>found)[1])
        return True

    cdef int add_shape(self, CallSignature signature, CacheEntry entry, TreeDef out_treedef) except -1:
        """Make ``entry`` (the executable of ``signature`` on this graph) the
        current one, the current one one of the other shapes."""
        if not self.entry.evicted and not (self.signature == signature):
            self.shapes[self.signature] = (self.entry, self.out_treedef)
            if len(self.shapes) > MAX_SHAPES:
                del self.shapes[next(iter(self.shapes))]
        self.entry, self.signature, self.out_treedef = entry, signature, out_treedef
        return 0

    def shape_count(self):
        """How many shapes of this graph the record runs (the current one included)."""
        return 1 + len(self.shapes)

    cdef bint matches(self, tuple args, dict kwargs) except -1:
        """The call's layout, roots and static arguments are the recorded ones,
        and every guard holds."""
        cdef Py_ssize_t pos = 0, i = 0
        cdef PyObject* key
        cdef PyObject* value
        cdef Input input
        if PyTuple_GET_SIZE(args) != self.nargs or PyDict_Size(kwargs) != PyTuple_GET_SIZE(self.kwnames):
            return False
        while PyDict_Next(kwargs, &pos, &key, &value):
            if key != PyTuple_GET_ITEM(self.kwnames, i):
                return False
            i += 1
        for item in self.inputs:
            input = <Input>item
            if input.kind == INPUT_ROOT and _argument(input.position, args, kwargs) is not input.root:
                return False
        for position, expected in self.statics:
            given = _argument(position, args, kwargs)
            if given is not expected:
                try:
                    if type(given) is not type(expected) or not (given == expected):
                        return False
                except Exception:
                    return False   # flax's call reports it its way
        for guard in self.guards:
            if not (<Guard>guard).holds():
                return False
        return True

    cdef list gather(self, tuple args, dict kwargs):
        """The executable's inputs: each root's leaves from its slots, each other
        argument's leaves; None when an argument's structure changed."""
        cdef list leaves = []
        cdef Input input
        cdef Py_ssize_t j
        cdef TreeDef treedef
        for item in self.inputs:
            input = <Input>item
            if input.kind == INPUT_ROOT:
                for j in range(input.slot_start, input.slot_stop):
                    slot = <object>PyTuple_GET_ITEM(self.slots, j)
                    if type(slot) is tuple:
                        leaves.append(PyObject_GenericGetDict(slot[0], NULL)[slot[1]])
                    else:
                        leaves.append(_slot_read(_raw_value, _get_raw, slot))
            else:
                treedef = flatten_into(_argument(input.position, args, kwargs), leaves)
                if treedef is not input.treedef and not treedef.same_as(input.treedef):
                    return None
        return leaves

    def gather_now(self, tuple args, dict kwargs):
        """The leaves a call with these arguments would feed the executable (or None)."""
        return self.gather(args, kwargs)

    def write_slots(self, list outputs):
        """Write the roots' new values (the first outputs) into their slots."""
        self.write(outputs)

    cdef object rebuild(self, list outputs):
        """Write the roots' new values into their slots; return the function's output."""
        self.write(outputs)
        if self.out_treedef.num_nodes == 1 and self.out_treedef.num_leaves == 1:
            return <object>PyList_GET_ITEM(outputs, self.num_slots)
        return self.out_treedef.unflatten(outputs[self.num_slots:])

    cdef int write(self, list outputs) except -1:
        cdef Py_ssize_t j
        cdef object value
        for j in range(self.num_slots):
            slot = <object>PyTuple_GET_ITEM(self.slots, j)
            value = <object>PyList_GET_ITEM(outputs, j)
            if type(slot) is tuple:
                PyDict_SetItem(PyObject_GenericGetDict(slot[0], NULL), slot[1], value)
            else:
                _set_raw(<PyObject*>_raw_value, <PyObject*>slot, <PyObject*>value)
        return 0


cdef tuple _arguments_key(tuple args, dict kwargs):
    """What identifies a call's arguments, holding none of them: each
    argument's id, or its type for arrays, host data and scalars (a batch is
    new every call), and the keyword names."""
    cdef list key = []
    for value in args:
        key.append(type(value) if classify_leaf(value) <= LEAF_HOST else id(value))
    for name, value in kwargs.items():
        key.append(name)
        key.append(type(value) if classify_leaf(value) <= LEAF_HOST else id(value))
    return tuple(key)


cdef class Merged(Outputs):
    """The Outputs of an nnx.jit entry that the cache found for a call no
    record serves (a graph of a structure seen before, in other objects):
    flax's merge of the outputs into the caller's objects, inside the call's
    update context (still open: the engine closes it after ``execute``).
    Also what a record of that graph is made from (``compiled``)."""

    def __init__(self, flax_function, compiled):
        self.flax_function, self.compiled = flax_function, compiled

    cdef object rebuild(self, list outputs):
        return _merge(self.flax_function, self.compiled.out_tree.unflatten(outputs))


cdef class NnxJitFunction(Engine):
    """What ``fastdispatch.nnx.jit`` returns: flax's nnx.jit, called through the
    fast path when the call's graph is one a record proves."""

    def __init__(self, flax_function, jitted, bint fast, flax_call):
        self.flax_function = flax_function
        self.jitted = jitted
        self.fast = fast
        self.flax_call = flax_call
        self.records = ()
        self.executables = (<CompiledFunctionCache>default_cache()).function_cache(self, None)
        self.span_name = f"FastDispatch({_jax.fun_name(flax_function.fun)})"
        self.library = _FLAX

    def __call__(self, *args, **kwargs):
        # Reached through PyObject_Call only: as a vectorcall would pass them.
        cdef Call call
        _held = call_from(&call, self, args, kwargs)   # the argument array, while the call runs
        return self.call(&call)

    cdef str parse(self, Call* call, Found* found, CallTimes* times):
        """A record that proves the call's graph runs it; else flax's split
        (a FlaxCall, open across the steps: ``found.scope``), whose leaves
        the engine looks up, compiles or loads."""
        cdef tuple args = call_args(call)
        cdef dict kwargs = call_kwargs(call)
        cdef tuple context = <tuple>found.context
        cdef Record record
        cdef list inputs
        cdef Py_ssize_t i
        if not self.fast:
            return _NOT_GRAPH_UPDATES
        # nnx.cached_partial hands its call a static cache of the graph's
        # traversal, for flax's update context to take; a call a record serves
        # traverses nothing, so the cache is taken here, and given back to
        # flax for a call it splits.
        static_cache = getattr(_graph_context, _static_cache)
        if static_cache is not None:
            setattr(_graph_context, _static_cache, None)
        records = self.records
        cdef Record holding = None   # a record whose graph this call has, for other shapes
        for i in range(PyTuple_GET_SIZE(records)):
            record = <Record>PyTuple_GET_ITEM(records, i)
            if record.entry.evicted or not record.matches(args, kwargs):
                continue
            inputs = record.gather(args, kwargs)
            if inputs is None:
                continue
            holding = record
            if not (record.signature.same_context(context) and record.signature.matches_leaves(
                    PySequence_Fast_ITEMS(inputs), PyList_GET_SIZE(inputs))):
                # Equal avals, other objects (values another executable made):
                # the same executable; its own objects guard the next call.
                signature = _signature_of(record.signature.treedef, inputs,
                                          record.signature.static_args, context,
                                          record.signature.front)
                if signature is None:
                    continue
                if signature == record.signature:
                    signature.accept_shardings_of(record.signature)
                    record.signature = signature
                elif not record.switch_to(signature) and not signature.runs_as(record.signature):
                    continue   # a shape of this graph no executable runs yet
            if i:
                self.records = (record,) + records[:i] + records[i + 1:]
            found_entry(found, record.entry, inputs, record)
            return None
        setattr(_graph_context, _static_cache, static_cache)
        if (holding is None and self.handed_off_like is not None
                and self.handed_off_like == _arguments_key(args, kwargs)):
            # flax's call, as the last one on these arguments was, without
            # splitting them first.
            reason = self.handed_off_again(found)
            if reason is not None:
                return reason
        split = self.flax_call(self, args, kwargs, holding)
        keep(&found.scope, split)
        found_arguments(found, split.treedef, split.leaves, split.static_args, (), split.paths)
        return None

    cdef object library_call(self, Call* call, Found* found):
        """A miss's: flax's jax.jit on the open split, then its merge; a
        hand-off's: flax's own nnx.jit call."""
        if found.scope != NULL:
            return (<object>found.scope).run()
        return self.flax_function(*call_args(call), **call_kwargs(call))

    cdef tuple build(self, Call* call, Found* found, CacheEntry entry, object out):
        """The executable of the Graph the split call left (MustHandOff: one no
        record can serve, its entry's calls flax's), written to the warm-start
        store under the entry's key; entries found later merge their outputs
        as flax does (``Merged``)."""
        graph = (<object>found.scope).built(entry.warm_key, warm_store())
        return self._executable(graph, entry), Merged(self.flax_function, graph.compiled)

    cdef object warm_key(self, Call* call, Found* found, CallSignature signature, object store):
        """The split call's key in the warm-start store, or None."""
        return (<object>found.scope).warm_key(store)

    cdef tuple build_loaded(self, Call* call, Found* found, CacheEntry entry, object loaded):
        """The executable loaded from the store, for the graph as the split
        found it (raises where it does not fit the call)."""
        graph = (<object>found.scope).loaded(loaded, warm_store())
        return self._executable(graph, entry), Merged(self.flax_function, graph.compiled)

    cdef Executable _executable(self, object graph, CacheEntry entry):
        return make_executable(graph.compiled, entry.signature, graph.leaves, graph.donates,
                               NEVER_HAND_OFF)

    cdef int remember(self, Call* call, Found* found, CacheEntry entry,
                      CallSignature signature) except -1:
        """A split call ``entry`` runs: the Record of its graph, for this call
        (when it has yet to run: a write-back, not flax's merge) and the next."""
        if found.scope == NULL or entry.executable is None:
            return 0
        split = <object>found.scope
        graph = split.graph
        if graph is None:   # found by its signature: an executable that keeps the graph
            if type(entry.finish) is not Merged:
                return 0
            graph = split.kept_graph((<Merged>entry.finish).compiled)
            if graph is None:
                return 0   # no record of this graph: flax's merge (Merged) runs this call
        self.remember_hand_off(None, None, None)
        cdef Record record
        if split.holding is not None and graph.guards is split.holding.guards:
            record = <Record>split.holding
            record.add_shape(graph.signature, entry, graph.out_treedef)
        else:
            record = Record(graph.nargs, graph.kwnames, graph.inputs, graph.statics, graph.guards,
                            graph.slots, entry, graph.signature, graph.out_treedef)
            self.records = ((record,) + self.records)[:MAX_RECORDS]
        keep(&found.finish, record)
        keep(&found.leaves, graph.leaves)
        return 0

    cdef void handed_off(self, Call* call, CacheEntry entry, str reason):
        """flax takes the call: the next on the same arguments goes to it
        before they are split, but every 64th (see parse)."""
        self.remember_hand_off(_arguments_key(call_args(call), call_kwargs(call)), reason,
                               None if entry is None else entry.signature)

    def clear_cache(self):
        """Forget the records and executables (flax's jit keeps its own traces)."""
        self.records = ()
        self.remember_hand_off(None, None, None)
        self.executables.clear()

    def library_function(self):
        """flax's own nnx.jit of the function."""
        return self.flax_function

    def _cache_size(self):
        return len(self.executables)

    def _records(self):
        return list(self.records)

    def __get__(self, instance, owner):
        # flax's jit binds a method as functools.partial(self, instance).
        if instance is None:
            return self
        return _partial(self, instance)

    def __getattr__(self, name):
        # What flax's JitWrapped offers is flax's: lower, trace, eval_shape
        # (and the AOT objects they make), fun, jitted_fn, the shardings and
        # static arguments.  Python's protocols (__deepcopy__, say) are not.
        if not (name.startswith("__") and name.endswith("__")):
            try:
                return getattr(self.flax_function, name)
            except AttributeError:
                pass
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        return f"<fastdispatch nnx.jit of {self.flax_function.fun!r}>"


install_vectorcall(NnxJitFunction)
