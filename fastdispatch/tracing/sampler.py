"""Where the wall time goes, by the program's line: the main thread's stack, sampled off it.

The wall-time split says how much went to compiled calls, compiling, eager
ops, host syncs and the rest; this says at which lines.  Under ``python -m
fastdispatch --trace`` a daemon thread reads the main thread's innermost
frame every ``INTERVAL`` seconds and charges the time since its previous
look to the program's line it was at, with the library function that line
was in (``numpy.lib._npyio_impl.load``).  A line's time is all of it:
dispatch on jax's C++ path and fastdispatch's Cython one runs no Python
frame to tell it apart.
"""

from __future__ import annotations

import collections
import sys
import threading
import time

from fastdispatch.tracing.sites import library_code, short_path

__all__ = ["INTERVAL", "Sampler"]

INTERVAL = 0.01  # seconds between looks (the thread needs the GIL for each)


class Sampler:
    """Samples one thread's stack until ``stop``."""

    def __init__(self, thread_id, interval=INTERVAL):
        self.thread_id = thread_id
        self.interval = interval
        self.lines = collections.Counter()  # (file, line, library call) -> ns
        self.unplaced_ns = 0  # samples with no frame of the program's (start-up, exit)
        self.sampled_ns = 0  # all the time between samples
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastdispatch-sampler", daemon=True)

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
            if where is None:
                self.unplaced_ns += ns
            else:
                self.lines[where] += ns
            del frame

    @staticmethod
    def _where(frame):
        """(file, line, library call) of the program's innermost frame, or
        None when no frame is the program's."""
        callee = None
        while frame is not None and library_code(frame.f_code):
            callee, frame = frame, frame.f_back
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
