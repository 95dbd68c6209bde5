"""Where "the rest" goes: the main thread's stack, sampled off it.

The wall-time split accounts for compiled calls, compiling, eager ops and host
syncs; what is left is the program's own Python and the libraries it calls
that are not jax (a numpy data loader, a tokenizer, model construction in
flax).  Under ``python -m fastdispatch --trace`` a daemon thread reads the
main thread's innermost frame every ``INTERVAL`` seconds and charges the
time since its previous look to the line of the program it was at, with the
library function that line was in (``numpy.lib._npyio_impl.load``).  A
sample with a jax or fastdispatch frame on the stack is not "the rest": its
time is in one of the accounted parts already.
"""

from __future__ import annotations

import collections
import sys
import threading
import time

from fastdispatch.tracing.sites import library_code

__all__ = ["INTERVAL", "Sampler"]

INTERVAL = 0.01  # seconds between looks (the thread needs the GIL for each)

# Packages whose frames mean the time is accounted elsewhere (a compiled
# call, a compile, an eager op, a host sync).
_ACCOUNTED = ("fastdispatch", "jax", "jaxlib")


class Sampler:
    """Samples one thread's stack until ``stop``."""

    def __init__(self, thread_id, interval=INTERVAL):
        self.thread_id = thread_id
        self.interval = interval
        self.lines = collections.Counter()  # (file, line, library call) -> ns
        self.accounted_ns = 0  # samples inside jax or fastdispatch
        self.unplaced_ns = 0  # samples with no frame of the program's (start-up, exit)
        self.sampled_ns = 0  # all the time between samples
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastdispatch-sampler", daemon=True)
        self._accounted = {}  # code object -> bool

    def start(self):
        library_code(sys._getframe().f_code)  # where libraries live: found now, not in the first look
        self._thread.start()
        return self

    def stop(self):
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self):
        last = time.perf_counter_ns()
        while not self._stopped.wait(self.interval):
            frame = sys._current_frames().get(self.thread_id)
            now = time.perf_counter_ns()
            ns, last = now - last, now
            if frame is None:
                continue
            self.sampled_ns += ns
            where = self._where(frame)
            if where is _ACCOUNTED:
                self.accounted_ns += ns
            elif where is None:
                self.unplaced_ns += ns
            else:
                self.lines[where] += ns
            del frame

    def _where(self, frame):
        """(file, line, library call) of the program's innermost frame;
        _ACCOUNTED when the stack is inside jax or fastdispatch, None when
        no frame is the program's."""
        callee = None
        found = None
        while frame is not None:
            code = frame.f_code
            if self._is_accounted(frame):
                return _ACCOUNTED
            if found is None and not library_code(code):
                found = (code.co_filename, frame.f_lineno, _name(callee))
            elif found is None:
                callee = frame
            frame = frame.f_back
        return found

    def _is_accounted(self, frame):
        accounted = self._accounted.get(frame.f_code)
        if accounted is None:
            module = frame.f_globals.get("__name__") or ""
            accounted = module.partition(".")[0] in _ACCOUNTED and library_code(frame.f_code)
            self._accounted[frame.f_code] = accounted
        return accounted

    def rest_lines(self, cwd):
        """Every line the rest went to, most time first, as dicts."""
        from fastdispatch.tracing.sites import short_path

        return [
            {"file": short_path(file, cwd), "line": line, "library_call": call, "seconds": ns / 1e9}
            for (file, line, call), ns in self.lines.most_common()
        ]


def _name(frame):
    """``module.qualname`` of the library function a program's line is in."""
    if frame is None:
        return ""
    module = frame.f_globals.get("__name__", "")
    return f"{module}.{frame.f_code.co_qualname}" if module else frame.f_code.co_qualname
