"""Where the wall time goes, by the program's line: the main thread's stack, sampled on it.

The wall-time split says how much went to compiled calls, compiling, eager
ops, host syncs and the rest; this says at which lines.  Under ``python -m
fastdispatch --trace`` a timer signals the main thread every ``INTERVAL``
seconds (tracing/timer.pyx: the signal goes to that thread only), and the
signal's Python handler, which runs on that thread between two bytecodes,
charges the time since the previous sample to the program's line it
interrupted, with the library function that line was in
(``numpy.lib._npyio_impl.load``).  No other thread ever reads the main
thread's frames.  A line's time is all of it: dispatch on jax's C++ path and
fastdispatch's Cython one runs no Python frame to tell it apart, and a line
blocked in C (a host sync, a compile) is charged when the call returns.

System calls the signal interrupts are restarted (``siginterrupt(False)``),
or retried by Python itself (PEP 475).  Where no such timer exists (not
Linux), or the signal's slot is taken, ``start`` returns None: no lines.
"""

from __future__ import annotations

import collections
import signal
import sys
import threading
import time

from fastdispatch.tracing.sites import library_code, short_path

__all__ = ["INTERVAL", "Sampler"]

INTERVAL = 0.01  # seconds between samples (each runs a Python handler, ~10 us)
_OWN = "fastdispatch."  # the modules whose frames never name a line's library call
# The real-time signal the timer sends: one no runtime we know of uses.
SIGNAL_OFFSET = 7


class Sampler:
    """Samples the main thread's stack until ``stop``."""

    def __init__(self, interval=INTERVAL):
        self.interval = interval
        self.lines = collections.Counter()  # (file, line, library call) -> ns
        self.unplaced_ns = 0  # samples with no frame of the program's (start-up, exit)
        self.sampled_ns = 0  # all the time between samples
        self._signal = None
        self._previous = None
        self._timer = None
        self._last = 0

    def start(self) -> Sampler | None:
        """Begin sampling (from the main thread); None where it cannot: not
        the main thread, no per-thread timer here, or the signal taken."""
        from fastdispatch.tracing.timer import ThreadTimer

        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGRTMIN"):
            return None
        signo = signal.SIGRTMIN + SIGNAL_OFFSET
        if signal.getsignal(signo) not in (signal.SIG_DFL, None):
            return None  # the program's, or a library's: never taken from it
        library_code(sys._getframe().f_code)  # where libraries live: found now, not in the first sample
        self._previous = signal.signal(signo, self._sample)
        signal.siginterrupt(signo, False)
        self._signal, self._last = signo, time.perf_counter_ns()
        try:
            self._timer = ThreadTimer().start(signo, threading.get_native_id(), int(self.interval * 1e9))
        except OSError:
            signal.signal(signo, self._previous)
            self._signal = None
            return None
        return self

    def stop(self):
        """Stop sampling; the handler goes back where it can (the main thread)."""
        if self._timer is not None:
            self._timer.stop()
        if self._signal is not None and threading.current_thread() is threading.main_thread():
            signal.signal(self._signal, self._previous)
            self._signal = None

    def _sample(self, signum, frame):
        now = time.perf_counter_ns()
        ns, self._last = now - self._last, now
        self.sampled_ns += ns
        where = self._where(frame)
        if where is None:
            self.unplaced_ns += ns
        else:
            self.lines[where] += ns

    @staticmethod
    def _where(frame):
        """(file, line, library call) of the program's innermost frame, or
        None when no frame is the program's.  The library call is the
        outermost library function the line called, fastdispatch's own left
        out (a call's dispatch, the trace's bookkeeping: the function table
        has their time): the library below them, else none."""
        callee = None
        while frame is not None and library_code(frame.f_code):
            if not frame.f_globals.get("__name__", "").startswith(_OWN):
                callee = frame
            frame = frame.f_back
        if frame is None:
            return None
        return (frame.f_code.co_filename, frame.f_lineno, _name(callee))

    def by_line(self, cwd):
        """Every line the time went to, most first, as dicts."""
        return [
            {"file": short_path(file, cwd), "line": line, "in_library": call, "seconds": ns / 1e9}
            for (file, line, call), ns in self.lines.most_common()
        ]


def _name(frame):
    """``module.qualname`` of the library function a program's line is in."""
    if frame is None:
        return ""
    module = frame.f_globals.get("__name__", "")
    return f"{module}.{frame.f_code.co_qualname}" if module else frame.f_code.co_qualname
