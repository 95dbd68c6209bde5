"""The recorder: the trace sink the dispatcher calls on every call.

A ``Trace`` is what ``fastdispatch.core.watch.set_trace_sink`` hands every call
of every compiled function to.  Recording stays cheap: ``record`` appends one
tuple to a list.  Every ``_FOLD_EVERY`` calls (and before a report) the pending
tuples are folded into per-function aggregates (``FunctionStats``), which never
drop anything, and into a ring of the last ``max_events`` calls, which the
Chrome trace file shows.  Memory stays bounded however long the program runs.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import json
import math
import os
import sys
import threading
import time
import weakref
from _thread import get_ident

import numpy as np

from fastdispatch import _reasons
from fastdispatch._jax import process_of_program
from fastdispatch.tracing.explain import closest_change, describe
from fastdispatch.tracing.names import PHASES, label
from fastdispatch.tracing.sites import made_at, remember_made, short_path, user_site

__all__ = ["FunctionStats", "PHASES", "Trace"]

# Calls are folded into the aggregates in batches of this many: a batch costs
# a few hundred ns per call with numpy, one call at a time several us in Python.
_FOLD_EVERY = 4096

# The five phases of a call, between the six stamps of ``times``.
_LAUNCH = PHASES.index("launch")

# A function is device-bound when a call of it, run alone, keeps the device
# busy for at least this share of the time between its calls on the host.
DEVICE_BOUND_SHARE = 0.8

# How many earlier signatures of one function a recompile is compared against,
# and how many explanations per function are kept for the report.
_SIGNATURES_KEPT = 64
_EXPLANATIONS_KEPT = 20


class _Histogram:
    """Counts of non-negative integers in buckets of about 3% width: the top
    six bits of a value and its power of two.  Bounded (a few hundred buckets
    cover 1 ns to hours) and good enough for p50/p99 of dispatch overhead."""

    def __init__(self):
        self.counts = collections.Counter()

    def add_array(self, values):
        values = np.maximum(values, 0)
        _, bit_length = np.frexp(values.astype(np.float64))
        shift = np.maximum(bit_length - 6, 0)
        counts = np.bincount((shift << 6) | (values >> shift))
        buckets = np.flatnonzero(counts)
        self.counts.update(dict(zip(buckets.tolist(), counts[buckets].tolist())))

    def quantile(self, q):
        """By nearest rank: the least value with a share ``q`` of all at or
        below it.  So p99 of fewer than 100 values is their maximum, never a
        value below the mean (as interpolating ranks gave: 3 of 4 under it)."""
        total = sum(self.counts.values())
        if total == 0:
            return 0
        rank = max(1, math.ceil(q * total))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return _bucket_value(bucket)
        return _bucket_value(max(self.counts))


def _bucket_value(bucket):
    """The middle of a bucket of _Histogram."""
    shift, top = bucket >> 6, bucket & 63
    if shift == 0:
        return top
    return (top << shift) + (1 << (shift - 1))


class Cause:
    """Recompiles of one function for one cause (a new object at ``m.act``,
    new shapes of ``x``, a new jit wrapper): the data of one finding."""

    def __init__(self):
        self.count = 0
        self.ns = 0
        self.sites = collections.Counter()  # (file, line) -> compiles
        self.shapes = []  # "x: f32[40,8]" per shape recompile (the latest 8)
        self.made_at = None  # where the new object was defined (a function)

    def add(self, ns, site):
        self.count += 1
        self.ns += ns
        if site is not None:
            self.sites[site] += 1


class FunctionStats:
    """Aggregates of one function (keyed by its code location) over a trace."""

    def __init__(self, name, location):
        self.name = name
        self.location = location
        self.calls = 0
        self.hits = 0
        self.compiles = 0
        self.compile_ns = 0
        self.call_ns = 0  # end - start, summed over all calls
        self.hand_offs = collections.Counter()
        self.fast_calls = 0  # hits that stayed on the fast path
        self.phase_ns = [0] * len(PHASES)  # summed over fast-path hits
        self.overhead_ns = 0  # summed over fast-path hits
        self.overhead = _Histogram()
        self.overhead_max_ns = 0  # the slowest fast-path hit, exactly
        # explain.Description of the latest distinct compiled signatures
        self.signatures = collections.deque(maxlen=_SIGNATURES_KEPT)
        self.first_signature = None  # Description of the first compile
        self.recompiles = []  # (compile number, [what changed])
        self.recompiles_dropped = 0
        self.causes = {}  # (kind, paths) -> Cause: recompiles a finding reports
        self.wrappers = set()  # serials of the wrapper objects that compiled
        self.arg_names = None  # positional parameter names, for front ends whose signatures have none
        self.period = _Histogram()  # ns between the starts of its calls (after no waited call)
        self.device_ns = 0  # launch returned to outputs ready, run alone, over the waited calls
        self.device_calls = 0
        self.ran_handed_off = 0  # calls handed off whose executable ran (not _reasons.NOT_RUN)

    def add_periods(self, periods):
        self.period.add_array(periods)

    def add_device_time(self, ns):
        self.device_ns += ns
        self.device_calls += 1

    def _device_ns_a_call(self, period_ns):
        """The mean time alone past the launch of the calls waited for, at
        most ``period_ns``, the median period between calls: in a steady run
        the device cannot take longer a call than the calls come (what was
        seen bounds what a few samples say)."""
        mean = self.device_ns / self.device_calls
        return min(mean, period_ns) if period_ns else mean

    def device_seconds(self, wall_ns=None):
        """The device's time of the calls that ran an executable (on the fast
        path, or handed off), estimated from the calls waited for (their time
        a call, times the calls), at most the wall time; None when no call
        was waited for."""
        if not self.device_calls:
            return None
        a_call = self._device_ns_a_call(self.period.quantile(0.5))
        seconds = a_call * (self.fast_calls + self.ran_handed_off) / 1e9
        return min(seconds, wall_ns / 1e9) if wall_ns else seconds

    def device(self):
        """What the sampled calls say (None: no call was waited for): the
        median period between its calls on the host, the device's time for a
        call run alone past its launch (us), and the verdict."""
        if not self.device_calls:
            return None
        period_ns = self.period.quantile(0.5)
        device_us = self._device_ns_a_call(period_ns) / 1e3
        period_us = period_ns / 1e3
        bound = "device-bound" if device_us >= DEVICE_BOUND_SHARE * period_us else "host-bound"
        return {
            "period_us": period_us,
            "device_us": device_us,
            "waited_calls": self.device_calls,
            "verdict": bound if period_us else None,
        }

    def add_calls(self, phases, overhead, hit, fast):
        """Fold a batch of calls: ``phases`` (calls x 5 ns), ``overhead``
        (ns per call) and the ``hit`` and ``fast`` (hit, no hand-off) masks."""
        self.calls += len(phases)
        self.hits += int(hit.sum())
        self.call_ns += int(phases.sum())
        if not fast.all():
            phases, overhead = phases[fast], overhead[fast]
        self.fast_calls += len(phases)
        self.phase_ns = [a + b for a, b in zip(self.phase_ns, phases.sum(axis=0).tolist())]
        self.overhead_ns += int(overhead.sum())
        self.overhead.add_array(overhead)
        if len(overhead):
            self.overhead_max_ns = max(self.overhead_max_ns, int(overhead.max()))

    def as_dict(self, wall_ns):
        fast = self.fast_calls or 1
        return {
            "name": self.name,
            "location": self.location,
            "calls": self.calls,
            "hits": self.hits,
            "compiles": self.compiles,
            "compile_seconds": self.compile_ns / 1e9,
            "hand_offs": dict(self.hand_offs),
            # The same counts under the key published before: until 2027-06.
            "fallbacks": dict(self.hand_offs),
            "overhead_ns": {
                "mean": self.overhead_ns / fast,
                "p50": self.overhead.quantile(0.50),
                "p99": self.overhead.quantile(0.99),
            },
            "phase_ns_mean": {phase: total / fast for phase, total in zip(PHASES, self.phase_ns)},
            "call_seconds": self.call_ns / 1e9,
            "wall_share": self.call_ns / wall_ns if wall_ns else 0.0,
            "device": self.device(),
            "device_seconds": self.device_seconds(wall_ns),
            "recompiles": [
                {"compile": number, "changes": list(changes)} for number, changes in self.recompiles
            ],
        }


class Trace:
    """The trace sink: records calls, keeps aggregates, writes the report and
    the Chrome trace file.  Use ``fastdispatch.trace()`` to switch it on."""

    def __init__(self, max_events=100_000):
        self.max_events = max_events
        self._pending = []
        self._batches = collections.deque()  # folded batches, the latest max_events calls
        self._batched_calls = 0  # calls in self._batches
        self._calls_seen = 0
        self._functions = {}  # (name, location) -> FunctionStats
        self._keys = {}  # id(compiled function) -> ((name, location), weakref)
        self._thread_names = {}
        self._fold_lock = threading.Lock()
        self._cwd = os.getcwd()  # locations are shown relative to it
        self.start_ns = time.perf_counter_ns()
        self.end_ns = None
        # The process's life before the trace began (Python's start, imports):
        # part of the wall under ``--trace`` (process_age_ns), else none.
        self.start_up_ns = 0
        self._host_bytes = {}  # id(signature) -> (signature, numpy bytes each call converts)
        self._transfers = {}  # site -> [calls, bytes, ns outside the launch, calls handed off]
        self._serials = itertools.count()  # one per wrapper object seen
        self._compiled = {}  # id(signature) -> (signature, function key): whose executable
        self.tally = None  # hooks.Tally while host syncs and eager ops are watched
        self.sampler = None  # sampler.Sampler while the main thread's stack is sampled
        self._waited = collections.defaultdict(set)  # function key -> starts of the calls waited for
        self._last_start = {}  # function key -> start of its latest folded call

    def made(self, fn):
        """The dispatcher made compiled function ``fn`` (called by whoever called jit)."""
        remember_made(fn, sys._getframe(1))

    # -- the hook (hot: with the folding, ~0.7 us a call) ----------------
    def record(self, fn, times, hit, compile_ns, hand_off, signature):
        tid = get_ident()
        if tid not in self._thread_names:  # named now: a thread may end before the fold
            self._thread_names[tid] = threading.current_thread().name
        # The user's line, for findings: taken on misses and hand-offs (rare)
        # and on calls that convert numpy data, never on a plain hit.
        site = None
        if not hit or hand_off is not None:
            site = user_site(sys._getframe(1))
        if signature is not None:
            host = self._host_bytes.get(id(signature))
            if host is None or host[0] is not signature:
                host = self._host_bytes[id(signature)] = (signature, _host_bytes(signature))
            if host[1]:
                site = site or user_site(sys._getframe(1))
                entry = self._transfers.setdefault(site, [0, 0, 0, 0])
                entry[0] += 1
                entry[1] += host[1]
                entry[2] += (times[5] - times[0]) - (times[4] - times[3])
                entry[3] += hand_off is not None
        # A pending call holds its function's key, not the function: the trace
        # must not keep a dropped function (and what it closes over) alive.
        # What a compile's fold reads of the function is read now.
        key = self._key_of(fn)
        about = None
        if compile_ns or (not hit and hand_off is None):
            about = (_positional_names(fn), self._serial_of(fn), made_at(fn))
        self._pending.append((key, times, hit, compile_ns, hand_off, signature, tid, site, about))
        if len(self._pending) >= _FOLD_EVERY:
            self._fold()

    # -- device time (sampled per function: core.watch's DEVICE_SAMPLING) --
    def device_time(self, fn, index, start, launched, outputs):
        """A call just ran on the fast path (it started at ``start``; its
        launch returned at ``launched``): wait for its ``outputs``, and
        count the device's time for it (``device_wait``)."""
        self.add_device_time(fn, index, start, device_wait(launched, outputs))

    def add_device_time(self, fn, index, start, ns):
        key = self._key_of(fn)
        self._waited[key].add(start)  # the next period is the wait's, not the program's
        if index:  # the first of a burst may wait for work queued before it
            self._functions[key].add_device_time(ns)

    # -- folding (batched) ------------------------------------------------
    def _fold(self):
        with self._fold_lock:
            pending = self._pending
            count = len(pending)
            if not count:
                return
            # Slicing, not swapping lists: a thread appending right now keeps
            # its call, at an index past `count`.
            batch = pending[:count]
            del pending[:count]
            self._fold_batch(batch)

    def _fold_batch(self, batch):
        call_keys, times, hits, compiles, hand_offs, signatures, tids, sites, abouts = zip(*batch)
        n = len(batch)
        stamps = np.fromiter(itertools.chain.from_iterable(times), np.int64, 6 * n).reshape(n, 6)
        phases = np.diff(stamps, axis=1)
        hit = np.array(hits, dtype=bool)
        no_hand_off = hand_offs.count(None) == n
        fast = hit if no_hand_off else hit & np.array([f is None for f in hand_offs])
        # Dispatch overhead: the time of a call outside its executable launch.
        # Only hits on the fast path count: a miss's time is its compilation,
        # a hand-off's is jax's own dispatch (or tracing).
        overhead = phases.sum(axis=1) - phases[:, _LAUNCH]

        distinct = set(call_keys)
        if len(distinct) == 1:
            groups = [(call_keys[0], slice(None))]
        else:
            index = {key: i for i, key in enumerate(distinct)}
            codes = np.fromiter(map(index.__getitem__, call_keys), np.int64, n)
            groups = [(key, codes == i) for key, i in index.items()]
        for key, rows in groups:
            self._functions[key].add_calls(phases[rows], overhead[rows], hit[rows], fast[rows])
            self._fold_periods(key, stamps[rows, 0])

        # Misses, compiles and hand-offs are rare: one at a time, in order.
        if not (no_hand_off and hit.all() and compiles.count(0) == n):
            for key, one_hit, one_compile_ns, hand_off, signature, site, about in zip(
                call_keys, hits, compiles, hand_offs, signatures, sites, abouts
            ):
                stats = self._functions[key]
                if hand_off is not None:
                    stats.hand_offs[hand_off] += 1
                    stats.ran_handed_off += hand_off not in _reasons.NOT_RUN
                if one_compile_ns or (not one_hit and hand_off is None):
                    arg_names, serial, made = about
                    if signature is not None:
                        self._compiled[id(signature)] = (signature, key)
                    if stats.arg_names is None:
                        stats.arg_names = arg_names
                    self._count_compile(stats, one_compile_ns, signature, site, serial, made)

        # Keep the batch for the trace file (by function key: neither compiled
        # functions nor signatures stay alive), then only as many old batches
        # as the latest max_events calls need.
        self._batches.append((list(call_keys), stamps, hits, compiles, hand_offs, tids))
        self._batched_calls += n
        self._calls_seen += n
        while self._batched_calls - len(self._batches[0][0]) >= self.max_events:
            self._batched_calls -= len(self._batches.popleft()[0])

    def _fold_periods(self, key, starts):
        """The periods between a function's calls, but those after a call
        whose outputs were waited for."""
        last = self._last_start.get(key)
        self._last_start[key] = int(starts[-1])
        earlier = starts[:-1] if last is None else np.concatenate(([last], starts[:-1]))
        later = starts[1:] if last is None else starts
        waited = self._waited.get(key)
        if waited:
            seen = tuple(waited)  # one step: a thread may add to it meanwhile
            kept = ~np.isin(earlier, np.array(seen, np.int64))
            earlier, later = earlier[kept], later[kept]
            waited.difference_update([w for w in seen if w < self._last_start[key]])
        self._functions[key].add_periods(later - earlier)

    def _key_of(self, fn):
        """The (name, location) of a compiled function, looked up once per function."""
        fn_id = id(fn)
        entry = self._keys.get(fn_id)
        if entry is not None and entry[1]() is fn:
            return entry[0]
        name, location = _name_and_location(fn, self._cwd)
        key = (name, location)
        if key not in self._functions:
            self._functions[key] = FunctionStats(name, location)
        # A weak reference, dropped with the function: a jit inside a loop
        # makes a new function per call, and the trace must not keep them all.
        # (The callback holds the dict, not the trace: a long-lived function
        # must not keep a finished trace and its calls alive.)
        keys = self._keys
        try:
            ref = weakref.ref(fn, lambda _: keys.pop(fn_id, None))
        except TypeError:
            ref = lambda: fn  # not weakly referenceable: hold it
        self._keys[fn_id] = (key, ref, next(self._serials))
        return key

    def _key_of_id(self, fn_id):
        """The (name, location) of the live compiled function of id ``fn_id``
        this trace has recorded, or None."""
        entry = self._keys.get(fn_id)
        return entry[0] if entry is not None and entry[1]() is not None else None

    def _serial_of(self, fn):
        """A number per wrapper object (a new jax.jit(f) gets a new one)."""
        return self._keys[id(fn)][2]

    @staticmethod
    def _count_compile(stats, compile_ns, signature, site=None, serial=None, made=None):
        stats.compiles += 1
        stats.compile_ns += compile_ns
        new_wrapper = serial is not None and serial not in stats.wrappers
        if serial is not None:
            stats.wrappers.add(serial)
        if signature is None:
            return
        current = describe(signature, stats.arg_names)
        if stats.first_signature is None:
            stats.first_signature = current
        if stats.signatures:
            changes = closest_change(stats.signatures, current)
            if len(stats.recompiles) < _EXPLANATIONS_KEPT:
                stats.recompiles.append((stats.compiles, changes))
            else:
                stats.recompiles_dropped += 1
            _count_cause(stats, changes, compile_ns, site, new_wrapper and made or site, new_wrapper)
        stats.signatures.append(current)

    # -- results ----------------------------------------------------------
    def stop(self):
        """Stamp the end of the traced wall time (done by the context manager)."""
        if self.end_ns is None:
            self.end_ns = time.perf_counter_ns()

    def _wall_ns(self):
        end = self.end_ns if self.end_ns is not None else time.perf_counter_ns()
        return end - self.start_ns + self.start_up_ns

    def function_stats(self):
        """FunctionStats of every traced function, most time in calls first."""
        self._fold()
        return sorted(self._functions.values(), key=lambda s: -s.call_ns)

    def stats(self):
        """Per-function aggregates as dicts, keyed by ``name (file:line)``."""
        wall = self._wall_ns()
        return {label(s): s.as_dict(wall) for s in self.function_stats()}

    # The report and the trace file read the recorder's data; their modules
    # import this one, so they are imported when used.

    def report(self):
        """The report text: the wall-time split, one row per function, each
        recompile explained, the executables kept, the findings."""
        from fastdispatch.tracing.report import format_report

        return format_report(self.function_stats(), self._wall_ns(), process_of_program(), self.summary())

    def summary(self):
        """The report as data (findings.summary): what the text and the JSON show."""
        from fastdispatch.tracing.findings import summary

        return summary(self)

    def save_report(self, path):
        """Write the report as JSON (``--trace-json``)."""
        with open(path, "w") as f:
            json.dump(self.summary(), f, indent=1)

    def latest_calls(self):
        """The latest (up to max_events) calls, oldest first, as tuples
        ``((name, location), times, hit, compile_ns, hand_off, tid)``."""
        self._fold()
        calls = []
        for keys, stamps, hits, compiles, hand_offs, tids in self._batches:
            calls += zip(keys, stamps.tolist(), hits, compiles, hand_offs, tids)
        return calls[-self.max_events :]

    def chrome_trace(self):
        """The Chrome trace-event dict (the JSON object that Perfetto opens)."""
        from fastdispatch.tracing.chrome import chrome_trace

        return chrome_trace(self.latest_calls(), self._thread_names, self.start_ns, process_of_program())

    def save(self, path):
        """Write the last ``max_events`` calls as Chrome trace-event JSON."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f, separators=(",", ":"))


def _count_cause(stats, changes, compile_ns, site, wrapper_site, new_wrapper):
    """File a recompile under the cause a finding reports, when it has one:
    only new objects changed, only shapes changed, or nothing changed but
    the jit wrapper."""
    kinds = {getattr(change, "kind", "") for change in changes}
    if kinds == {"new_object"}:
        key = ("new_object", tuple(change.path for change in changes))
    elif kinds == {"shape"}:
        key = ("shape", tuple(change.path for change in changes))
    elif kinds == {"unchanged"} and new_wrapper:
        key, site = ("new_wrapper", ()), wrapper_site
    else:
        return
    cause = stats.causes.get(key)
    if cause is None:
        cause = stats.causes[key] = Cause()
    cause.add(compile_ns, site)
    if key[0] == "shape":
        cause.shapes = (cause.shapes + [", ".join(changes)])[-8:]
    elif key[0] == "new_object":
        cause.made_at = changes[0].made_at


def device_wait(launched, outputs):
    """Wait for a call's ``outputs``: ns from its launch returning
    (``launched``) to their being ready, the device's time for the call past
    the launch when the call ran alone.  Outputs ready before the wait: 0 (a
    backend that runs a small program inside the launch, XLA's CPU client,
    leaves none; else the device was done within the host's own work)."""
    busy = False
    for output in outputs:
        try:
            if not output.is_ready():
                busy = True
                output.block_until_ready()
        except Exception:  # deleted, or the run's own error: whoever reads it gets that
            pass
    return time.perf_counter_ns() - launched if busy else 0


def _host_bytes(signature):
    """Bytes of numpy data a call of this signature converts to device arrays."""
    total = 0
    for key in signature.leaf_keys():
        if key.kind == "host":
            total += int(np.prod(key.shape, dtype=np.int64)) * np.dtype(key.dtype).itemsize
    return total


def _positional_names(fn):
    """The positional parameter names of the user's function behind ``fn``."""
    target = inspect.unwrap(getattr(fn, "__wrapped__", fn))
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in parameters if p.kind in kinds)


def _name_and_location(fn, cwd):
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    target = inspect.unwrap(getattr(fn, "__wrapped__", fn))
    while isinstance(target, functools.partial):
        target = target.func
    code = getattr(target, "__code__", None)
    if code is None:
        return name, "?"
    return name, f"{short_path(code.co_filename, cwd)}:{code.co_firstlineno}"


def process_age_ns() -> int:
    """Nanoseconds since this process started (Linux: /proc; elsewhere 0)."""
    try:
        with open("/proc/self/stat") as f:
            # The fields after the command's name (which may hold spaces), from the third.
            fields = f.read().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time since boot
        return max(0, int((time.clock_gettime(time.CLOCK_BOOTTIME) - started) * 1e9))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0
