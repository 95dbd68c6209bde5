"""Dispatch tracing: where the time between Python and the executables goes.

The package, by job:
  recorder.py   the sink the dispatcher calls on every call; per-function aggregates
  explain.py    signatures for people, and what changed at each recompile
  report.py     the text report
  findings.py   the report's model: wall-time split, executables, findings (--trace-json)
  sites.py      the user's file and line of an event
  hooks.py      host syncs, eager ops and compile phases, watched under --trace only
  sampler.py    the main thread's stack, sampled on it under --trace
  chrome.py     the Chrome trace-event file (Perfetto)
  here          the switch: which traces are on, and the public API

Public API (re-exported by ``fastdispatch``):

    with fastdispatch.trace() as t:
        ...
    print(t.report()); t.save("run.trace.json")

    fastdispatch.stats()                    # per-function aggregates, as dicts
    with fastdispatch.assert_max_compiles(1):
        ...                                 # AssertionError on a recompile
"""

from __future__ import annotations

import contextlib
import os
import threading

from fastdispatch.core import watch as _watch

# The recorder and the report (numpy, inspect, json) are imported by the first
# trace, not by ``import fastdispatch``: a program that never traces skips them.

__all__ = ["assert_max_compiles", "start", "stats", "stop", "trace"]

_active = []  # traces switched on, innermost last
_last = None  # the latest trace, for stats() after it ended
_install_lock = threading.Lock()


class _FanOut:
    """The sink while traces are nested: hands each call to all of them."""

    def __init__(self, traces):
        self.traces = tuple(traces)

    def record(self, *call):
        for t in self.traces:
            t.record(*call)

    def made(self, fn):
        self.traces[0].made(fn)  # one record of where: sites.made_at

    def device_time(self, fn, index, start, launched, outputs):
        from fastdispatch.tracing.recorder import device_wait

        ns = device_wait(launched, outputs)  # once: then the outputs are ready
        for t in self.traces:
            t.add_device_time(fn, index, start, ns)


def _install():
    if not _active:
        sink = None
    elif len(_active) == 1:
        sink = _active[0]
    else:
        sink = _FanOut(_active)
    _watch.set_trace_sink(sink)


def start(max_events=100_000, watch_host=False):
    """Switch a new Trace on and return it (``trace()`` without ``with``);
    ``watch_host``: also count host syncs, eager ops and compile phases
    (``python -m fastdispatch --trace`` does; it watches jax.jit's dispatch
    and the jax Array's host reads until the trace stops, replacing no public
    name of jax or numpy)."""
    global _last
    from fastdispatch.tracing.recorder import Trace

    t = Trace(max_events)
    if watch_host:
        from fastdispatch.tracing import hooks
        from fastdispatch.tracing.sampler import Sampler

        t.tally = hooks.Tally(t._key_of_id)
        hooks.install(t.tally)
        if os.environ.get(LINES_VARIABLE, "") != "0":
            t.sampler = Sampler().start()
    with _install_lock:
        _active.append(t)
        _install()
        _last = t
    return t


# Set to 0, --trace samples no lines (the sampler's signal left alone).
LINES_VARIABLE = "FASTDISPATCH_TRACE_LINES"


def stop(t):
    """Switch ``t`` off; its results stay readable."""
    t.stop()
    if t.sampler is not None:
        t.sampler.stop()
    if t.tally is not None:
        from fastdispatch.tracing import hooks

        hooks.uninstall(t.tally)
    with _install_lock:
        if t in _active:
            _active.remove(t)
            _install()


@contextlib.contextmanager
def trace(max_events=100_000):
    """Trace every compiled-function call in the block.

    ``with fastdispatch.trace() as t: ...`` then ``t.report()`` (the text) and
    ``t.save(path)`` (Chrome trace JSON for ui.perfetto.dev).  Traces nest.
    """
    t = start(max_events)
    try:
        yield t
    finally:
        stop(t)


def stats():
    """Per-function aggregates of the innermost running trace (or of the
    latest one that ended) as dicts keyed by ``name (file:line)``; empty when
    nothing was traced."""
    current = _active[-1] if _active else _last
    return current.stats() if current is not None else {}


@contextlib.contextmanager
def assert_max_compiles(n):
    """Fail when any compiled function compiles more than ``n`` times in the block.

    The AssertionError names each such function and says what changed in its
    signature at every recompile, e.g. ``x: f32[4] -> f32[8]``.
    """
    t = start(max_events=1)
    try:
        yield t
    finally:
        stop(t)
    offenders = [s for s in t.function_stats() if s.compiles > n]
    if offenders:
        from fastdispatch.tracing.report import compile_count_message

        raise AssertionError(compile_count_message(offenders, n))
