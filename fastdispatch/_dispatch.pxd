# The jitted function object and its hot path.
cimport cython
from cpython.object cimport PyObject
from fastdispatch._cache cimport CacheEntry, CompiledFunctionCache, FunctionCache
from fastdispatch._signature cimport CallSignature

cdef extern from "Python.h":
    ctypedef PyObject* (*vectorcallfunc)(PyObject* callable, PyObject* const* args,
                                         size_t nargsf, PyObject* kwnames)

# One call as Python made it (PEP 590): the arguments stay in the caller's array.
cdef struct Call:
    PyObject** argv        # the positional arguments, then the keyword values
    size_t nargsf          # the positional count, with PEP 590's offset flag
    PyObject* kwnames      # the keyword names (a tuple), or NULL

# The clock readings of one traced call; the report's phases lie between them.
# The same boundaries open and close the call's jax.profiler spans.
cdef struct CallTimes:
    long long start        # the call arrived
    long long flattened    # its leaves and structure are known
    long long keyed        # its signature is known (or the guard passed)
    long long found        # its entry is found (or its compile began)
    long long launched     # the executable returned (or the compile ended)
    long long end          # the output is ready
    int watch              # who watches this call: WATCH_CLOCK | WATCH_SPANS, read once, at its start
    PyObject* span         # WATCH_SPANS: the open phase's TraceMe span (owned), or NULL

# CallTimes.watch: --trace takes the stamps; jax.profiler gets the spans.
cdef enum:
    WATCH_CLOCK = 1
    WATCH_SPANS = 2

# The boundaries of a call's phases, in order: the fields of CallTimes.
cdef enum Stage:
    AT_START
    AT_FLATTENED
    AT_KEYED
    AT_FOUND
    AT_LAUNCHED
    AT_END


# The trace sink (fastdispatch.tracing) while tracing is on, else None: the
# one C-level flag a call checks.  Front ends read it too.
cdef object trace_sink

# A call's watchers, read once at its start: --trace (the clock) and
# jax.profiler (spans).  Front ends share these with CompiledFunction:
#     span = begin_call(&times, name)
#     if span is None: return work()
#     try: return work()
#     finally: end_call(&times, span)
cdef void start_watch(CallTimes* times)
cdef object begin_call(CallTimes* times, str span_name)   # the call's span, or None
cdef int end_call(CallTimes* times, object span) except -1
# jax's state at a call: no transformation is tracing right now; the trace
# context, part of every key.
cdef bint trace_state_clean() noexcept
cdef tuple trace_context()
# A phase boundary: stamp the clock up to `stage`; switch the profiler span.
cdef int reached(CallTimes* times, Stage stage, str next_phase, str reason=*) except -1
cdef int end_phase(CallTimes* times) except -1
# Hand one call's trace event to the sink (--trace on only).
cdef void record_call(object fn, CallTimes* times, bint hit, long long compile_ns, object reason,
                      CallSignature signature)


@cython.final
cdef class CallLayout:
    cdef object kwnames                    # the call's keyword names (a tuple), or None
    cdef Py_ssize_t nargs                  # positional arguments
    cdef tuple leaf_index                  # argv index of each leaf, flatten order; None: 0..nargs-1
    cdef tuple static_index                # argv index of each static argument, static_args order
    # The leaves of a call laid out like this one whose leaves and static
    # arguments pass the signature's guard (ARGV_LEAVES: its positional
    # arguments); else None.  context None: jax's context is not compared.
    cdef object guard(self, Call* call, CallSignature signature, tuple context)
    cdef bint _same_keywords(self, PyObject* kwnames)
    cdef tuple _gather(self, PyObject** argv)
    cdef bint _statics_match(self, PyObject** argv, tuple static_args)


@cython.final
cdef class PreviousCall:
    cdef CacheEntry entry                  # the entry that served it
    cdef CallSignature signature           # its own signature: the objects it held
    cdef CallLayout layout                 # its layout, when all its arguments were leaves
    cdef bint hands_off                    # jax.jit runs its entry for the leaves' sake (numpy)
    # Calls whose arguments are trees (no layout): the shape of the call's
    # argument array, and why jax.jit took its last call for its leaves' sake
    # (numpy values it converts faster, a step counter's new value), or None.
    cdef Py_ssize_t nargs                  # positional arguments
    cdef object kwnames                    # keyword names (a tuple), or None
    cdef tuple arg_types                   # the type of each argument in the array
    cdef str tree_hand_off                 # jax.jit took the last call: hand off before flattening
    cdef unsigned int tree_hand_offs       # calls handed off so: every 64th is flattened again


@cython.final
cdef class CompiledFunction:
    cdef vectorcallfunc _vectorcall_slot   # PEP 590 entry point, found via tp_vectorcall_offset
    cdef readonly object fun               # the Python function being jitted
    cdef object _jitted                    # jax.jit(fun, same options): the slow path
    cdef dict _options                     # the jit options given, for pickling
    cdef CompiledFunctionCache _cache      # the shared LRU holding our entries
    cdef FunctionCache _entries            # our part of it
    cdef tuple _static_argnums             # as jax resolved them; may be negative
    cdef frozenset _static_argnames        # as jax resolved them
    cdef bint _has_static                  # any static argument at all
    cdef bint _donates                     # any donated argument at all
    cdef tuple _dynamic_arg_names          # positional parameter names minus static ones
    cdef PreviousCall _previous            # the guard's guess: the previous call
    cdef str _span_name                    # its calls' span under jax.profiler: FastDispatch(<name>)
    cdef dict __dict__                     # as functools.wraps fills it
    cdef object __weakref__

    cdef object _call(self, Call* call)
    cdef object _guarded(self, Call* call, CallTimes* times)
    cdef object _general(self, Call* call, tuple context, CallTimes* times)
    cdef object _run(self, CacheEntry entry, object leaves, Call* call, CallTimes* times)
    cdef object _compile(self, CacheEntry entry, tuple args, dict kwargs, list leaves,
                         Call* call, CallTimes* times)
    cdef object _fallback(self, Call* call, str reason, CallTimes* times, CallSignature signature)
    cdef void _handed_off(self, CacheEntry entry, str reason)
    cdef object _returned(self, Call* call, object out)
    cdef void _record(self, CallTimes* times, bint hit, long long compile_ns, object reason,
                      CallSignature signature)
    cdef void _remember(self, CacheEntry entry, CallSignature signature, tuple args,
                        dict kwargs, PyObject* kwnames)
    cdef tuple _split_static(self, tuple args, dict kwargs)
