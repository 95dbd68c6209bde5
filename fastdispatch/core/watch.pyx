# cython: boundscheck=False, wraparound=False
"""Who watches a call, and what each watcher is given.

Two watchers, read once at the start of every call (``start_watch``):

  --trace        its sink (fastdispatch.tracing) gets one event a call: the
                 clock at each phase boundary (CallTimes), hit or not, the
                 seconds compiling, the reason a call was handed off; and a
                 sample of fast-path calls' outputs, to time the device
  jax.profiler   while a capture runs, a span a call (the function's name)
                 and, inside it, one a phase, the hand-off's reason its metadata

With neither on (``times.watch`` is 0), a call takes no stamp and makes no span:
``reached`` and ``ended`` are one test of an int.
"""
from cpython.ref cimport Py_INCREF, Py_XDECREF

from fastdispatch import _jax

# jax.profiler: is a capture running?  One call of jaxlib's static
# TraceMe.is_enabled (an atomic load in C++), ~5 ns from here, a call
# (docs/performance.md).  Spans begin when made and end at __exit__.
cdef object _TraceMe = _jax.TRACE_ME
cdef object _end_span = _jax.TRACE_ME.__exit__

cdef Watchers _watchers = Watchers.__new__(Watchers)
_watchers.profiling = _jax.TRACE_ME.is_enabled


cdef Watchers watchers():
    return _watchers


def set_trace_sink(sink):
    """Send every call's timings to ``sink.record(...)``, and a sample of
    fast-path calls' outputs to ``sink.device_time(...)`` where the sink has
    it; None stops it."""
    _watchers.sink = sink
    _watchers.device_time = getattr(sink, "device_time", None)
    _recent[:] = [None] * RECENT_CALLS


# --trace charges a host sync to the function whose output it reads: the
# outputs of the latest RECENT_CALLS calls watched on the fast path are kept,
# whole (a reference each: a weak reference a leaf would cost more than the
# call), so that at most these few outputs outlive the program's own use; the
# function by its id (the trace keeps no dropped function alive).
cdef enum:
    RECENT_CALLS = 4
cdef list _recent = [None] * RECENT_CALLS
cdef Py_ssize_t _recent_next = 0


def output_owner(array):
    """The id of the compiled function that returned ``array`` in one of the
    latest calls --trace watched on the fast path, or None."""
    cdef Py_ssize_t i
    for i in range(1, RECENT_CALLS + 1):
        call = _recent[(_recent_next - i + RECENT_CALLS) % RECENT_CALLS]
        if call is not None:
            for output in (<tuple>call)[1]:
                if output is array:
                    return (<tuple>call)[0]
    return None


cdef object trace_sink():
    return _watchers.sink


cdef object begin_spans(CallTimes* times, str name):
    span = _TraceMe(name)
    stamp(times, AT_START, "flatten", None)
    return span


cdef int end_watch(CallTimes* times, object span) except -1:
    try:
        _end_phase(times)   # still open when the call raised
    finally:
        _end_span(span, None, None, None)
    return 0


cdef int stamp(CallTimes* times, Stage stage, str next_phase, str reason) except -1:
    """``reached`` with a watcher on: with --trace, every stamp up to ``stage``
    not taken yet is taken now (so stamps never go backwards); under
    jax.profiler, the open phase's span ends and ``next_phase``'s begins, with
    the hand-off's ``reason`` as its metadata."""
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
        _end_phase(times)
        if next_phase is not None:
            span = _TraceMe(next_phase) if reason is None else _TraceMe(next_phase, reason=reason)
            Py_INCREF(span)
            times.span = <PyObject*>span
    return 0


cdef int stamp_end(PyObject* function, CallTimes* times, bint hit, long long compile_ns,
                   str reason, CallSignature signature) except -1:
    """``ended`` with a watcher on: the last stamp, the last span closed, and
    with --trace the call's one trace event, handed to the sink."""
    stamp(times, AT_END, None, None)
    sink = _watchers.sink
    if times.watch & WATCH_CLOCK and sink is not None:
        sink.record(
            <object>function,
            (times.start, times.flattened, times.keyed, times.found, times.launched, times.end),
            hit, compile_ns, reason, signature)
    return 0


# --trace learns what a call costs the device by waiting for the outputs of
# the first DEVICE_BURST of every so many launches of each function, once the
# call is recorded: the first of a burst empties the device's queue, so that
# each next one runs alone, and the wait after its launch returned is the
# device's work the launch left (sink.device_time).  A burst every
# DEVICE_EVERY_FIRST launches over a function's first DEVICE_FIRST, then every
# DEVICE_EVERY: 24 calls run alone by its 256th launch, then 3 in every 256
# (about 1% of its calls waited for, afterwards).
cdef enum:
    DEVICE_BURST = 4
    DEVICE_FIRST = 256
    DEVICE_EVERY_FIRST = 32
    DEVICE_EVERY = 256
DEVICE_SAMPLING = {"burst": DEVICE_BURST, "first": DEVICE_FIRST,
                   "every_first": DEVICE_EVERY_FIRST, "every": DEVICE_EVERY}


cdef int sample_device(PyObject* function, CallTimes* times, object outputs,
                       unsigned long long* launches) except -1:
    global _recent_next
    _recent[_recent_next] = (<Py_ssize_t>function, outputs)
    _recent_next = (_recent_next + 1) % RECENT_CALLS
    cdef unsigned long long n = launches[0]
    launches[0] = n + 1
    cdef unsigned long long index = n % (DEVICE_EVERY_FIRST if n < DEVICE_FIRST else DEVICE_EVERY)
    device_time = _watchers.device_time
    if index < DEVICE_BURST and device_time is not None:
        device_time(<object>function, index, times.start, times.launched, outputs)
    return 0


cdef object _ARRAY = _jax.ARRAY_TYPE


cdef object top_arrays(object out):
    """The arrays at the top of a library call's output (an array, or a
    tuple, list or dict of them: no flatten), to sample as a hit's outputs;
    None where there are none."""
    if type(out) is _ARRAY:
        return (out,)
    if type(out) is dict:
        out = (<dict>out).values()
    elif type(out) is not tuple and type(out) is not list:
        return None
    arrays = [leaf for leaf in out if type(leaf) is _ARRAY]
    return arrays if arrays else None


cdef int _end_phase(CallTimes* times) except -1:
    cdef PyObject* span = times.span
    if span != NULL:
        times.span = NULL
        try:
            _end_span(<object>span, None, None, None)
        finally:
            Py_XDECREF(span)
    return 0
