# cython: boundscheck=False, wraparound=False
"""The hot path of ``fastdispatch.nnx.jit``: flax NNX's jit, graph mode.

flax's jit splits every argument graph into a GraphDef and its Variables'
values on every call (~200 us for an MLP and its optimizer), runs its jax.jit
of the split function, then merges the outputs back into the caller's objects.
When a call's graph is the one a previous call left behind, the split and the
merge only move values, so this does only that: a Record (record.pyx) proves
the graph unchanged, gathers its leaves, and writes the outputs back.

A call no record serves takes the engine's steps on flax's split (a
``FlaxCall``, nnx/flax_call.py, open across them): found, compiled (flax's
jax.jit and merge) or loaded; the graph it left is then recorded where its
executable keeps the graph's structure.
"""
from cpython.list cimport PyList_GET_SIZE
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine import current_trace_context
from fastdispatch.core.engine cimport (
    Call, Engine, Found, call_args, call_from, call_kwargs, found_arguments, found_entry,
    install_vectorcall, keep, warm_store)
from fastdispatch.core.execute cimport NEVER_HAND_OFF, Executable, Outputs, make_executable
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport (
    CallSignature, LeafKind, LEAF_ARRAY, LEAF_HOST, classify_leaf, make_signature)
from fastdispatch.core.watch cimport AT_LAUNCHED, CallTimes, reached
from fastdispatch.nnx.record cimport MAX_RECORDS, Record
from functools import partial as _partial

from fastdispatch.core.cache import default_cache
from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff

cdef str _FLAX = "flax"
cdef str _NOT_GRAPH_UPDATES = _reasons.NOT_GRAPH_UPDATES

# Set by fastdispatch.nnx (configure): what of flax the front end reads.
cdef object _graph_context = None      # flax's thread-local GRAPH_CONTEXT
cdef str _static_cache = None          # its attribute for nnx.cached_partial's traversal cache
cdef object _merge = None              # flax's merge: (flax function, outputs) -> output


def configure(graph_context, static_cache, merge):
    """Hand the front end what it reads of flax (called once by fastdispatch.nnx)."""
    global _graph_context, _static_cache, _merge
    _graph_context = graph_context
    _static_cache = static_cache
    _merge = merge


def signature_of(TreeDef treedef, list leaves, tuple static_args=(), front=None):
    """The CallSignature of a split call's dynamic leaves and its static
    arguments' (label, type, value) triples, under jax's context now;
    ``front`` names its leaves for reports (see CallSignature.front)."""
    signature = _signature_of(treedef, leaves, static_args, current_trace_context(), front)
    if signature is None:
        raise TypeError("a leaf the dispatcher does not key")
    return signature


cdef CallSignature _signature_of(TreeDef treedef, list leaves, tuple static_args, tuple context,
                                 object front):
    cdef LeafKind unkeyed = LEAF_ARRAY
    return make_signature(treedef, leaves, static_args, context, (), &unkeyed, front)


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
        if not self.fast:
            return _NOT_GRAPH_UPDATES
        cdef tuple args = call_args(call)
        cdef dict kwargs = call_kwargs(call)
        cdef Record record
        cdef list inputs
        cdef Py_ssize_t i
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
            # Equal avals, other objects (a fresh batch, values another
            # executable made): the same executable; the call's objects guard
            # the next call (adopt_leaves).
            if found.unguessed or not record.signature.adopt_leaves(
                    PySequence_Fast_ITEMS(inputs), PyList_GET_SIZE(inputs)):
                # Another shape of this graph, or (asked again by the engine)
                # another trace context: one another executable runs, or none yet.
                signature = _signature_of(record.signature.treedef, inputs,
                                          record.signature.static_args, self.trace_context(found),
                                          record.signature.front)
                if signature is None:
                    continue
                if not record.switch_to(signature) and not signature.runs_as(record.signature):
                    continue   # a shape of this graph no executable runs yet
            if i:
                self.records = (record,) + records[:i] + records[i + 1:]
            # nnx.cached_partial hands its call a static cache of the graph's
            # traversal, for flax's update context to take; a call a record
            # serves traverses nothing, so the cache is taken here (a call
            # flax splits leaves it to flax).
            if getattr(_graph_context, _static_cache) is not None:
                setattr(_graph_context, _static_cache, None)
            found_entry(found, record.entry, inputs, record)
            return None
        split = self.flax_call(self, args, kwargs, holding)
        keep(&found.scope, split)
        found_arguments(found, split.treedef, split.leaves, split.static_args, (),
                        split.paths)
        return None

    cdef object library_call(self, Call* call, Found* found):
        """flax's own nnx.jit call."""
        return self.flax_function(*call_args(call), **call_kwargs(call))

    cdef tuple cache_miss(self, Call* call, Found* found, CacheEntry entry, CallTimes* times,
                          object recording):
        """flax's jax.jit on the open split, then its merge (or the write-back
        into a record holding the graph, for a new shape); then the executable
        of the Graph the call left (MustHandOff: one no record can serve, its
        entry's calls flax's), written to the warm-start store (``remember``
        then makes the graph's record).  Entries found later merge as flax
        does (``Merged``)."""
        split = <object>found.scope
        with recording:
            out = split.run()
        reached(times, AT_LAUNCHED, "build entry")
        try:
            graph = split.built(entry.warm_key, warm_store())
            fast = (self._executable(graph, entry), Merged(self.flax_function, graph.compiled))
        except Exception as error:
            return out, MustHandOff.from_error(error)
        return out, fast   # remember makes the graph's record

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
        """A split call ``entry`` runs, found, loaded or compiled: the Record
        of its graph, for this call (a write-back, not flax's merge, where it
        has yet to run) and the next."""
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
        self._record(found, split, graph, entry)
        return 0

    cdef int _record(self, Found* found, object split, object graph, CacheEntry entry) except -1:
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

    cdef object hand_off_like(self, Call* call, CacheEntry entry, str reason):
        """flax takes the call: the next on the same arguments goes to it
        before they are split (the hand-off memo)."""
        return _arguments_key(call_args(call), call_kwargs(call))

    cdef bint alike(self, Call* call, object like):
        return like == _arguments_key(call_args(call), call_kwargs(call))

    def clear_cache(self):
        """Forget the records and executables (flax's jit keeps its own traces)."""
        self.records = ()
        self.forget_calls()

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
