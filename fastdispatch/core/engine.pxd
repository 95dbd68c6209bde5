# The engine: one call's steps between a front end and the cache, written once.
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from fastdispatch.core.cache cimport CacheEntry, FunctionCache
from fastdispatch.core.keys cimport same_items
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport CallSignature
from fastdispatch.core.watch cimport CallTimes

cdef extern from "Python.h":
    ctypedef PyObject* (*vectorcallfunc)(PyObject* callable, PyObject* const* args,
                                         size_t nargsf, PyObject* kwnames)
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)

# One call as its caller made it, in PEP 590's form (vectorcall): the
# engine never reads the arguments, it hands the call to the front end's hooks.
cdef struct Call:
    PyObject* function     # what the caller called: the report's function
    PyObject** argv        # the positional arguments, then the keyword values
    size_t nargsf          # the positional count, with PEP 590's offset flag
    PyObject* kwnames      # the keyword names (a tuple), or NULL

# A call of `function` made with a tuple and a dict (through tp_call), laid
# out as a vectorcall would pass it.  Returns what holds its argument array:
# the caller keeps it for as long as the call runs.
cdef inline tuple call_from(Call* call, object function, tuple args, dict kwargs):
    cdef tuple values = args
    cdef tuple names = None
    call.function = <PyObject*>function
    call.nargsf = PyTuple_GET_SIZE(args)
    call.kwnames = NULL
    if kwargs:
        values = args + tuple(kwargs.values())
        names = tuple(kwargs)
        call.kwnames = <PyObject*>names
    call.argv = PySequence_Fast_ITEMS(values)
    return (values, names)

# The call's keyword names are `kwnames` (a tuple, or None).  Compared by
# address: identifiers are interned, and a call site passes the very same
# names (often the very same tuple) every time.
cdef inline bint same_kwnames(Call* call, object kwnames) noexcept:
    if call.kwnames == NULL or kwnames is None:
        return call.kwnames == NULL and kwnames is None
    return same_items(<tuple>call.kwnames, <tuple>kwnames)

# A call's positional arguments, as a new tuple.
cdef inline tuple call_args(Call* call):
    cdef Py_ssize_t i, n = PyVectorcall_NARGS(call.nargsf)
    cdef tuple args = PyTuple_New(n)
    for i in range(n):
        Py_INCREF(<object>call.argv[i])
        PyTuple_SET_ITEM(args, i, <object>call.argv[i])
    return args

# A call's keyword arguments, as a new dict.
cdef inline dict call_kwargs(Call* call):
    cdef dict kwargs = {}
    if call.kwnames == NULL:
        return kwargs
    cdef Py_ssize_t i, nargs = PyVectorcall_NARGS(call.nargsf)
    for i in range(PyTuple_GET_SIZE(<tuple>call.kwnames)):
        kwargs[<object>PyTuple_GET_ITEM(<tuple>call.kwnames, i)] = <object>call.argv[nargs + i]
    return kwargs

# jax's state: no transformation is tracing right now.
cdef bint trace_state_clean() noexcept

# The warm-start store (fastdispatch.warm.WarmStart) while warm start is on,
# else None.
cdef object warm_store()


# What a call's steps found, filled as they go: the front end's ``parse``
# (its leaves and static part, or an entry its own guard proved), then the
# engine's ``find`` (the entry, or the output of a miss's library call), then
# ``execute`` (the output).  Owned references, or NULL; ``Engine.call``
# releases them.  Every hook of a front end is given the call and its Found.
cdef struct Found:
    PyObject* treedef      # parse: the structure of the traced arguments
    PyObject* leaves       # parse: the executable's inputs (a list or a tuple)
    PyObject* static_args  # parse: (label, type, value) triples, in key order
    PyObject* context      # jax's trace context, part of every key (Engine.trace_context)
    PyObject* arg_names    # parse: the leaves' argument names, for reports
    PyObject* front        # parse: how reports name the leaves (or NULL)
    # parse: what the front end keeps open across the steps (nnx.jit: flax's
    # split, in flax's update context); ``Engine.call`` closes it (its
    # ``close()``) when they end
    PyObject* scope
    PyObject* entry        # the CacheEntry that runs the call
    PyObject* finish       # its Outputs where they are not entry.finish (nnx's Record)
    PyObject* signature    # the signature a hand-off is reported with, where not entry's
    PyObject* out          # the call's output, once the library or the executable returned it
    bint loaded            # warm: the entry was loaded for this call (a miss, not a hit)
    # parse again with no guess: the guard's entry was made under another
    # trace context than this call's (Engine.parse_unguessed)
    bint unguessed
    # --trace: the output arrays to sample for the device's time once the
    # call's spans have ended (its flat outputs, or the library's top arrays)
    PyObject* sample

# Set a Found field to `value` (owned; the old one released).
cdef inline void keep(PyObject** field, object value) noexcept:
    Py_INCREF(value)
    Py_XDECREF(field[0])
    field[0] = <PyObject*>value

# What the front end's parse found: the call's traced arguments, for `find`.
# (jax's trace context is the engine's: its ``find`` reads it, once a call.)
cdef inline void found_arguments(Found* found, object treedef, object leaves, tuple static_args,
                                 tuple arg_names, object front) noexcept:
    keep(&found.treedef, treedef)
    keep(&found.leaves, leaves)
    keep(&found.static_args, static_args)
    keep(&found.arg_names, arg_names)
    keep(&found.front, front)

# What a front end's own guard proved: `entry` runs the call on `leaves`,
# its outputs rebuilt by `finish` (None: the entry's).  The engine checks the
# entry's trace context against the call's; with `found.unguessed` (asked
# again after that check failed) a guard gives no entry but one it keyed in
# the call's context (Engine.trace_context).
cdef inline void found_entry(Found* found, object entry, object leaves, object finish) noexcept:
    keep(&found.entry, entry)
    keep(&found.leaves, leaves)
    if finish is not None:
        keep(&found.finish, finish)


cdef class PreviousCall:
    cdef CacheEntry entry                  # the entry that served it
    cdef CallSignature signature           # its own signature: the objects it held
    # The front end's own guard of calls like it, which the front end makes
    # when a call first passes ``signature``'s guard (guard_passed): jit's
    # CallLayout, or False where no layout guards its arguments; None until then.
    cdef object guard


cdef class Engine:
    # The PEP 590 entry point of the types given install_vectorcall: Python's
    # way into every call of theirs (found through tp_vectorcall_offset).
    cdef vectorcallfunc vectorcall_slot
    cdef FunctionCache executables         # this function's part of the shared LRU
    cdef str span_name                     # its calls' span under jax.profiler
    cdef str library                       # the span of a call the library runs: "jax.jit"...
    cdef PreviousCall previous             # the guard's guess: the previous call
    # The hand-off memo: the last call the library took for what its
    # arguments are, as the front end describes them (`handed_off_like`), and
    # why.  Calls the front end finds alike go to the library before they are
    # read (`handed_off_again`), but every 64th, which takes the whole path
    # again in case they (or the library's choice) changed.
    cdef object handed_off_like
    cdef str memo_reason
    cdef unsigned int memo_repeats
    cdef CallSignature memo_signature      # the leaves it took, as --trace reports them
    cdef CacheEntry memo_entry             # the entry of those leaves, or None
    cdef unsigned long long watched_launches   # launches --trace watched (its device sampling)

    # jax's trace context at this call: read once, the first time a step
    # asks (a call under another context is another program: the engine
    # compares it with the entry a front end's guard found).
    cdef tuple trace_context(self, Found* found)
    # Whether it differs from ``previous``'s (for a front end that hands off
    # before it flattens when jax's settings may have changed: jit's parse).
    cdef bint context_changed(self, Found* found, PreviousCall previous) except -1

    # The steps, in the order a call takes them (each returns why the library
    # runs the call, or None).
    cdef object call(self, Call* call)
    cdef str parse_unguessed(self, Call* call, Found* found, CallTimes* times)
    cdef str find(self, Call* call, Found* found, CallTimes* times)
    cdef str compile(self, Call* call, Found* found, CacheEntry entry, CallTimes* times)
    cdef str warm(self, Call* call, Found* found, CacheEntry entry, CallTimes* times, object store)
    cdef str execute(self, Call* call, Found* found, CallTimes* times)
    cdef void handed_off(self, Call* call, CacheEntry entry, str reason)
    # Forget the function's executables, its previous call and the hand-off
    # memo (a front end's clear_cache).
    cdef void forget_calls(self)
    cdef void remember_hand_off(self, object like, str reason, CallSignature signature)
    cdef str handed_off_again(self, Found* found)
    # Compile an entry's packed variant (core/packing.pyx), from the call's trace.
    cdef void start_packing(self, Call* call, CacheEntry entry)

    # The front end's hooks.
    cdef str parse(self, Call* call, Found* found, CallTimes* times)
    cdef object library_call(self, Call* call, Found* found)
    cdef tuple cache_miss(self, Call* call, Found* found, CacheEntry entry, CallTimes* times,
                          object recording)
    cdef object warm_key(self, Call* call, Found* found, CallSignature signature, object store)
    cdef tuple build_loaded(self, Call* call, Found* found, CacheEntry entry, object loaded)
    cdef int remember(self, Call* call, Found* found, CacheEntry entry,
                      CallSignature signature) except -1
    cdef void guard_passed(self, Call* call, PreviousCall previous, list leaves)
    cdef object hand_off_like(self, Call* call, CacheEntry entry, str reason)
    cdef bint alike(self, Call* call, object like)
    cdef object returned(self, Call* call, object out)
    cdef object traced(self, Call* call)


# Give a final Engine subclass Python's vectorcall (PEP 590): its calls go
# straight to Engine.call, with the caller's argument array.
cdef void install_vectorcall(type kind)
