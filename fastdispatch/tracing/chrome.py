"""The trace file: the latest calls as Chrome trace-event JSON, which Perfetto opens."""

from __future__ import annotations

import os

from fastdispatch.tracing.names import PHASES, trace_title

__all__ = ["chrome_trace"]


def chrome_trace(events, thread_names, start_ns, process=None):
    """Complete ("X") events per call, per phase and per compile; metadata
    events naming the process (with its index in a program of several
    processes: ``process`` is ``(index, count)``) and each thread.  Times in
    microseconds."""
    pid = os.getpid()
    out = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": trace_title(process)}}]
    for tid, name in thread_names.items():
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})

    def span(name, category, begin, end, tid, args=None):
        event = {
            "name": name,
            "cat": category,
            "ph": "X",
            "ts": (begin - start_ns) / 1e3,
            "dur": (end - begin) / 1e3,
            "pid": pid,
            "tid": tid,
        }
        if args:
            event["args"] = args
        out.append(event)

    for (name, location), times, hit, compile_ns, hand_off, tid in events:
        span(
            name,
            "call",
            times[0],
            times[5],
            tid,
            {"location": location, "hit": hit, "hand_off": hand_off, "compile_ms": compile_ns / 1e6},
        )
        if hand_off is not None:
            # jax.jit ran the call: its phases are not fastdispatch's.
            span(f"{name}: jax.jit ({hand_off})", "hand_off", times[0], times[5], tid)
        else:
            for phase, begin, end in zip(PHASES, times, times[1:]):
                if end > begin:
                    span(f"{name}: {phase}", "phase", begin, end, tid)
        if compile_ns:
            # A miss compiles right after its lookup, inside the launch phase.
            span(f"{name}: compile", "compile", times[3], min(times[3] + compile_ns, times[5]), tid)
    return {"traceEvents": out, "displayTimeUnit": "ns"}
