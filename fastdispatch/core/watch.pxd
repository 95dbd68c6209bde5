# Who watches a call: --trace (the clock's stamps, one event a call, a sample
# of device time) and jax.profiler (a span a phase).  Asked once a call.
cimport cython
from cpython.object cimport PyObject
from fastdispatch.core.clock cimport now_ns
from fastdispatch.core.signature cimport CallSignature

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


@cython.final
cdef class Watchers:
    cdef object sink          # --trace's sink (fastdispatch.tracing), or None
    cdef object device_time   # the sink's device_time, if it has one, or None
    cdef object profiling     # jaxlib's TraceMe.is_enabled: is a jax.profiler capture running?

# The one Watchers of the process, for the engine to keep.
cdef Watchers watchers()

# A call begins: who watches it, in `times`; with jax.profiler capturing, its
# span (`name`) begun and returned, for end_watch; else None.
cdef inline object start_watch(CallTimes* times, Watchers watchers, str name):
    times.start = times.flattened = times.keyed = times.found = 0
    times.launched = times.end = 0
    times.span = NULL
    times.watch = WATCH_CLOCK if watchers.sink is not None else 0
    if watchers.profiling():
        times.watch |= WATCH_SPANS
        return begin_spans(times, name)
    if times.watch:
        times.start = now_ns()
    return None

cdef object begin_spans(CallTimes* times, str name)

# The call's steps are over, returned or raised: its open spans end.
cdef int end_watch(CallTimes* times, object span) except -1

# A phase boundary: with a watcher on, stamp the clock up to `stage` and
# switch the profiler span to `next_phase` (None: none); else nothing.
cdef inline int reached(CallTimes* times, Stage stage, str next_phase,
                        str reason=None) except -1:
    if times.watch:
        stamp(times, stage, next_phase, reason)
    return 0

cdef int stamp(CallTimes* times, Stage stage, str next_phase, str reason) except -1

# The output of a call of `function` is ready, or it raised: with a watcher
# on, the last stamp and, with --trace, its one trace event (hit or not, the
# seconds compiling in ns, why it left the fast path, its signature); else nothing.
cdef inline int ended(PyObject* function, CallTimes* times, bint hit, long long compile_ns,
                      str reason, CallSignature signature) except -1:
    if times.watch:
        stamp_end(function, times, hit, compile_ns, reason, signature)
    return 0

cdef int stamp_end(PyObject* function, CallTimes* times, bint hit, long long compile_ns,
                   str reason, CallSignature signature) except -1

# A launch --trace watched returned `outputs`: kept among the latest (whose
# outputs a host sync reads), and a sample of them waited for (the device's time).
# `launches` counts the function's watched launches (its sampling's clock).
cdef int sample_device(PyObject* function, CallTimes* times, object outputs,
                       unsigned long long* launches) except -1
# The arrays to sample of `out`, a call the library ran, or None.
cdef object top_arrays(object out)

# The trace sink while tracing is on, else None.
cdef object trace_sink()
