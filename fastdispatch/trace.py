"""Dispatch tracing: where the time between Python and the executables goes.

A ``Trace`` is the sink that ``fastdispatch._dispatch.set_trace_sink`` calls on
every call of every compiled function (see docs/api.md for the hook and
docs/tracing.md for the report).  Recording stays cheap: ``record`` appends one
tuple to a list.  Every ``_FOLD_EVERY`` calls (and before a report) the pending
tuples are folded into per-function aggregates, which never drop anything, and
into a ring of the last ``max_events`` calls, which the Chrome trace file
shows.  Memory stays bounded however long the program runs.

Public API (re-exported by ``fastdispatch``):

    with fastdispatch.trace() as t:
        ...
    print(t.report()); t.save("run.trace.json")

    fastdispatch.stats()                    # per-function aggregates, as dicts
    with fastdispatch.assert_max_compiles(1):
        ...                                 # AssertionError on a recompile
"""
from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import itertools
import json
import os
import re
import threading
import time
import weakref
from _thread import get_ident

import numpy as np

__all__ = ["Trace", "trace", "stats", "assert_max_compiles", "explain_change"]

# Calls are folded into the aggregates in batches of this many: a batch costs
# a few hundred ns per call with numpy, one call at a time several us in Python.
_FOLD_EVERY = 4096

# The five phases of a call, between the six stamps of ``times``.
PHASES = ("flatten", "signature", "lookup", "launch", "unflatten")
_LAUNCH = PHASES.index("launch")

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
        total = sum(self.counts.values())
        if total == 0:
            return 0
        rank = q * (total - 1)
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen > rank:
                return _bucket_value(bucket)
        return _bucket_value(max(self.counts))


def _bucket_value(bucket):
    """The middle of a bucket of _Histogram."""
    shift, top = bucket >> 6, bucket & 63
    if shift == 0:
        return top
    return (top << shift) + (1 << (shift - 1))


class FunctionStats:
    """Aggregates of one function (keyed by its code location) over a trace."""

    def __init__(self, name, location):
        self.name = name
        self.location = location
        self.calls = 0
        self.hits = 0
        self.compiles = 0
        self.compile_ns = 0
        self.call_ns = 0                      # end - start, summed over all calls
        self.fallbacks = collections.Counter()
        self.fast_calls = 0                   # hits that stayed on the fast path
        self.phase_ns = [0] * len(PHASES)     # summed over fast-path hits
        self.overhead_ns = 0                  # summed over fast-path hits
        self.overhead = _Histogram()
        # (describe() dict, treedef) of the latest distinct compiled signatures
        self.signatures = collections.deque(maxlen=_SIGNATURES_KEPT)
        self.first_signature = None           # describe() of the first compile
        self.recompiles = []                  # (compile number, [what changed])
        self.recompiles_dropped = 0

    def add_calls(self, phases, overhead, hit, fast):
        """Fold a batch of calls: ``phases`` (calls x 5 ns), ``overhead``
        (ns per call) and the ``hit`` and ``fast`` (hit, no fallback) masks."""
        self.calls += len(phases)
        self.hits += int(hit.sum())
        self.call_ns += int(phases.sum())
        if not fast.all():
            phases, overhead = phases[fast], overhead[fast]
        self.fast_calls += len(phases)
        self.phase_ns = [a + b for a, b in zip(self.phase_ns, phases.sum(axis=0).tolist())]
        self.overhead_ns += int(overhead.sum())
        self.overhead.add_array(overhead)

    def as_dict(self, wall_ns):
        fast = self.fast_calls or 1
        return {
            "name": self.name,
            "location": self.location,
            "calls": self.calls,
            "hits": self.hits,
            "compiles": self.compiles,
            "compile_seconds": self.compile_ns / 1e9,
            "fallbacks": dict(self.fallbacks),
            "overhead_ns": {
                "mean": self.overhead_ns / fast,
                "p50": self.overhead.quantile(0.50),
                "p99": self.overhead.quantile(0.99),
            },
            "phase_ns_mean": {
                phase: total / fast for phase, total in zip(PHASES, self.phase_ns)
            },
            "call_seconds": self.call_ns / 1e9,
            "wall_share": self.call_ns / wall_ns if wall_ns else 0.0,
            "recompiles": [
                {"compile": number, "changes": list(changes)}
                for number, changes in self.recompiles
            ],
        }


class Trace:
    """The trace sink: records calls, keeps aggregates, writes the report and
    the Chrome trace file.  Use ``fastdispatch.trace()`` to switch it on."""

    def __init__(self, max_events=100_000):
        self.max_events = max_events
        self._pending = []
        self._batches = collections.deque()   # folded batches, the latest max_events calls
        self._batched_calls = 0               # calls in self._batches
        self._calls_seen = 0
        self._functions = {}                  # (name, location) -> FunctionStats
        self._keys = {}                       # id(compiled function) -> ((name, location), weakref)
        self._thread_names = {}
        self._fold_lock = threading.Lock()
        self._cwd = os.getcwd()               # locations are shown relative to it
        self.start_ns = time.perf_counter_ns()
        self.end_ns = None

    # -- the hook (hot: with the folding, ~0.7 us a call) ----------------
    def record(self, fn, times, hit, compile_ns, fallback, signature):
        tid = get_ident()
        if tid not in self._thread_names:     # named now: a thread may end before the fold
            self._thread_names[tid] = threading.current_thread().name
        self._pending.append((fn, times, hit, compile_ns, fallback, signature, tid))
        if len(self._pending) >= _FOLD_EVERY:
            self._fold()

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
        fns, times, hits, compiles, fallbacks, signatures, tids = zip(*batch)
        n = len(batch)
        stamps = np.fromiter(itertools.chain.from_iterable(times), np.int64, 6 * n).reshape(n, 6)
        phases = np.diff(stamps, axis=1)
        hit = np.array(hits, dtype=bool)
        no_fallback = fallbacks.count(None) == n
        fast = hit if no_fallback else hit & np.array([f is None for f in fallbacks])
        # Dispatch overhead: the time of a call outside its executable launch.
        # Only hits on the fast path count: a miss's time is its compilation,
        # a fallback's is jax's own dispatch (or tracing).
        overhead = phases.sum(axis=1) - phases[:, _LAUNCH]

        keys = {fn: self._key_of(fn) for fn in set(fns)}
        if len(keys) == 1:
            groups = [(next(iter(keys.values())), slice(None))]
        else:
            index = {fn: i for i, fn in enumerate(keys)}
            codes = np.fromiter(map(index.__getitem__, fns), np.int64, n)
            groups = [(key, codes == index[fn]) for fn, key in keys.items()]
        for key, rows in groups:
            self._functions[key].add_calls(phases[rows], overhead[rows], hit[rows], fast[rows])

        # Misses, compiles and fallbacks are rare: one at a time, in order.
        if not (no_fallback and hit.all() and compiles.count(0) == n):
            for fn, one_hit, one_compile_ns, fallback, signature in zip(
                    fns, hits, compiles, fallbacks, signatures):
                stats = self._functions[keys[fn]]
                if fallback is not None:
                    stats.fallbacks[fallback] += 1
                if one_compile_ns or (not one_hit and fallback is None):
                    self._count_compile(stats, one_compile_ns, signature)

        # Keep the batch for the trace file (by function key: neither compiled
        # functions nor signatures stay alive), then only as many old batches
        # as the latest max_events calls need.
        call_keys = list(map(keys.__getitem__, fns))
        self._batches.append((call_keys, stamps, hits, compiles, fallbacks, tids))
        self._batched_calls += n
        self._calls_seen += n
        while self._batched_calls - len(self._batches[0][0]) >= self.max_events:
            self._batched_calls -= len(self._batches.popleft()[0])

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
            ref = lambda: fn            # not weakly referenceable: hold it
        self._keys[fn_id] = (key, ref)
        return key

    @staticmethod
    def _count_compile(stats, compile_ns, signature):
        stats.compiles += 1
        stats.compile_ns += compile_ns
        if signature is None:
            return
        current = (signature.describe(), signature.treedef)
        if stats.first_signature is None:
            stats.first_signature = current[0]
        if stats.signatures:
            changes = _closest_change(stats.signatures, current)
            if len(stats.recompiles) < _EXPLANATIONS_KEPT:
                stats.recompiles.append((stats.compiles, changes))
            else:
                stats.recompiles_dropped += 1
        stats.signatures.append(current)

    # -- results ----------------------------------------------------------
    def stop(self):
        """Stamp the end of the traced wall time (done by the context manager)."""
        if self.end_ns is None:
            self.end_ns = time.perf_counter_ns()

    def _wall_ns(self):
        end = self.end_ns if self.end_ns is not None else time.perf_counter_ns()
        return end - self.start_ns

    def function_stats(self):
        """FunctionStats of every traced function, most time in calls first."""
        self._fold()
        return sorted(self._functions.values(), key=lambda s: -s.call_ns)

    def stats(self):
        """Per-function aggregates as dicts, keyed by ``name (file:line)``."""
        wall = self._wall_ns()
        return {_label(s): s.as_dict(wall) for s in self.function_stats()}

    def report(self):
        """The report text: one row per function, then each recompile explained."""
        return format_report(self.function_stats(), self._wall_ns())

    def latest_calls(self):
        """The latest (up to max_events) calls, oldest first, as tuples
        ``((name, location), times, hit, compile_ns, fallback, tid)``."""
        self._fold()
        calls = []
        for keys, stamps, hits, compiles, fallbacks, tids in self._batches:
            calls += zip(keys, stamps.tolist(), hits, compiles, fallbacks, tids)
        return calls[-self.max_events:]

    def chrome_trace(self):
        """The Chrome trace-event dict (the JSON object that Perfetto opens)."""
        return _chrome_trace(self.latest_calls(), self._thread_names, self.start_ns)

    def save(self, path):
        """Write the last ``max_events`` calls as Chrome trace-event JSON."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f, separators=(",", ":"))


def _label(stats):
    return f"{stats.name} ({stats.location})"


def _name_and_location(fn, cwd):
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    target = inspect.unwrap(getattr(fn, "__wrapped__", fn))
    while isinstance(target, functools.partial):
        target = target.func
    code = getattr(target, "__code__", None)
    if code is None:
        return name, "?"
    return name, f"{_short_path(code.co_filename, cwd)}:{code.co_firstlineno}"


def _short_path(filename, cwd):
    try:
        relative = os.path.relpath(filename, cwd)
    except ValueError:                      # another drive on Windows
        return filename
    return filename if relative.startswith("..") else relative


# -- what changed between two signatures -----------------------------------

def _closest_change(earlier, current):
    """What changed against the earlier signature that differs least."""
    best = None
    for previous in reversed(earlier):
        changes = explain_change(previous[0], current[0], previous[1], current[1])
        if best is None or len(changes) < len(best):
            best = changes
    return best


def _root(path):
    return re.match(r"[^\[.]*", path).group(0) or path


def _strip_weak(text):
    return text.replace("{weak}", "")


def explain_change(old, new, old_tree=None, new_tree=None):
    """Lines saying how signature description ``new`` differs from ``old``
    (both ``CallSignature.describe()`` dicts), by argument path."""
    changes = []
    old_args, new_args = dict(old["args"]), dict(new["args"])
    changes += _structure_changes(old_args, new_args, old_tree, new_tree)
    for path, text in new["args"]:
        before = old_args.get(path)
        if before is None or before == text:
            continue
        if _strip_weak(before) == _strip_weak(text):
            changes.append(f"{path}: weak_type changed ({before} -> {text})")
        else:
            changes.append(f"{path}: {before} -> {text}")
    changes += _labelled_changes("static ", dict(old["static"]), dict(new["static"]))
    for line in _labelled_changes("", dict(old["context"]), dict(new["context"])):
        label, _, values = line.partition(": ")
        if label in ("x64", "jax_enable_x64"):
            line = f"x64 mode changed ({values})"
        changes.append(line)
    if not changes:
        changes.append(
            "signature unchanged: compiled again (a new jit wrapper of the same "
            "function, or its entry was evicted from the cache)")
    return changes


def _structure_changes(old_args, new_args, old_tree, new_tree):
    added = [p for p in new_args if p not in old_args]
    removed = [p for p in old_args if p not in new_args]
    trees_differ = old_tree is not None and new_tree is not None and old_tree != new_tree
    if not added and not removed and not trees_differ:
        return []
    difference = _tree_difference(old_tree, new_tree) if trees_differ else None
    roots = list(dict.fromkeys(_root(p) for p in removed + added))
    if not roots:
        return [f"arguments: tree structure changed ({difference or 'node types'})"]
    lines = []
    for root in roots:
        if difference and len(roots) == 1:
            detail = _relabel(difference, root)
        else:
            parts = [f"{p} added" for p in added if _root(p) == root]
            parts += [f"{p} removed" for p in removed if _root(p) == root]
            detail = ", ".join(parts)
        lines.append(f"{root}: tree structure changed ({detail})")
    return lines


def _relabel(difference, root):
    """Name the argument in a difference of the whole ``(args, kwargs)`` tree:
    ``key 'b' added at [0][0]['w']`` -> ``key 'b' added at params['w']``, and
    no location at all when it is the argument itself."""
    relabelled = re.sub(r" at (\[0\]\[\d+\]|\[1\]\[[^\]]+\])", " at " + root, difference, count=1)
    return relabelled.removesuffix(" at " + root)


def _tree_difference(old_tree, new_tree):
    try:
        from fastdispatch._pytree import describe_difference
    except ImportError:
        return None
    return describe_difference(old_tree, new_tree)


def _labelled_changes(prefix, old, new):
    lines = []
    for label in dict.fromkeys(list(old) + list(new)):
        if label not in old:
            lines.append(f"{prefix}{label}: added ({new[label]})")
        elif label not in new:
            lines.append(f"{prefix}{label}: removed (was {old[label]})")
        elif old[label] != new[label]:
            lines.append(f"{prefix}{label}: {old[label]} -> {new[label]}")
    return lines


# -- the report ------------------------------------------------------------

OVERHEAD_NOTE = (
    "overhead: time of a call outside its executable launch, (end - start) - launch, "
    "over hits on the fast path;\n"
    "in calls: time inside calls of the function (compiles included), "
    "as a share of the traced wall time.")


def format_report(functions, wall_ns):
    calls = sum(s.calls for s in functions)
    lines = [
        f"fastdispatch trace: {_count(calls, 'call')} of {_count(len(functions), 'function')} "
        f"in {wall_ns / 1e9:.3f} s wall"
    ]
    if not functions:
        return "\n".join(lines + ["(no compiled function was called)"]) + "\n"
    header = ("function", "calls", "hits", "compiles", "compile s",
              "overhead us mean/p50/p99", "in calls", "fallbacks")
    rows = [header]
    for s in functions:
        fast = s.fast_calls
        overhead = (
            f"{s.overhead_ns / fast / 1e3:.1f} / {s.overhead.quantile(0.5) / 1e3:.1f}"
            f" / {s.overhead.quantile(0.99) / 1e3:.1f}" if fast else "-")
        fallbacks = ", ".join(f"{reason} {n}" for reason, n in s.fallbacks.most_common())
        rows.append((
            _label(s), str(s.calls), str(s.hits), str(s.compiles),
            f"{s.compile_ns / 1e9:.3f}", overhead,
            f"{100 * s.call_ns / wall_ns:.1f}%" if wall_ns else "-", fallbacks or "-",
        ))
    lines += _table(rows, right_aligned=range(1, 7))
    lines += ["", "phases, mean us per fast-path hit:"]
    phase_rows = [("function",) + PHASES]
    for s in functions:
        if s.fast_calls:
            phase_rows.append((_label(s),) + tuple(
                f"{total / s.fast_calls / 1e3:.1f}" for total in s.phase_ns))
    lines += _table(phase_rows, right_aligned=range(1, 6))
    recompiled = [s for s in functions if s.recompiles]
    if recompiled:
        lines += ["", "recompiles (what changed against the closest earlier signature):"]
        for s in recompiled:
            for number, changes in s.recompiles:
                lines.append(f"  {_label(s)}, compile {number}:")
                lines += [f"    {change}" for change in changes]
            if s.recompiles_dropped:
                lines.append(f"  {_label(s)}: {s.recompiles_dropped} more recompiles not shown")
    lines += ["", OVERHEAD_NOTE]
    return "\n".join(lines) + "\n"


def _count(n, noun):
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _table(rows, right_aligned):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths))
        ]
        out.append("  ".join(cells).rstrip())
    return out


# -- Chrome trace-event JSON -----------------------------------------------

def _chrome_trace(events, thread_names, start_ns):
    """Complete ("X") events per call, per phase and per compile; metadata
    events naming the process and each thread.  Times in microseconds."""
    pid = os.getpid()
    out = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": {"name": "fastdispatch trace"}}]
    for tid, name in thread_names.items():
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": name}})

    def span(name, category, begin, end, tid, args=None):
        event = {"name": name, "cat": category, "ph": "X",
                 "ts": (begin - start_ns) / 1e3, "dur": (end - begin) / 1e3,
                 "pid": pid, "tid": tid}
        if args:
            event["args"] = args
        out.append(event)

    for (name, location), times, hit, compile_ns, fallback, tid in events:
        span(name, "call", times[0], times[5], tid, {
            "location": location, "hit": hit, "fallback": fallback,
            "compile_ms": compile_ns / 1e6})
        if fallback is not None:
            # jax.jit ran the call: its phases are not fastdispatch's.
            span(f"{name}: jax.jit ({fallback})", "fallback", times[0], times[5], tid)
        else:
            for phase, begin, end in zip(PHASES, times, times[1:]):
                if end > begin:
                    span(f"{name}: {phase}", "phase", begin, end, tid)
        if compile_ns:
            # A miss compiles right after its lookup, inside the launch phase.
            span(f"{name}: compile", "compile", times[3], min(times[3] + compile_ns, times[5]), tid)
    return {"traceEvents": out, "displayTimeUnit": "ns"}


# -- the public API ----------------------------------------------------------

_active = []        # traces switched on, innermost last
_last = None        # the latest trace, for stats() after it ended
_install_lock = threading.Lock()


class _FanOut:
    """The sink while traces are nested: hands each call to all of them."""

    def __init__(self, traces):
        self.traces = tuple(traces)

    def record(self, *call):
        for t in self.traces:
            t.record(*call)


def _install():
    from fastdispatch import _dispatch
    if not _active:
        sink = None
    elif len(_active) == 1:
        sink = _active[0]
    else:
        sink = _FanOut(_active)
    _dispatch.set_trace_sink(sink)


def start(max_events=100_000):
    """Switch a new Trace on and return it (``trace()`` without ``with``)."""
    global _last
    t = Trace(max_events)
    with _install_lock:
        _active.append(t)
        _install()
        _last = t
    return t


def stop(t):
    """Switch ``t`` off; its results stay readable."""
    t.stop()
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
        raise AssertionError(compile_count_message(offenders, n))


def compile_count_message(offenders, n):
    lines = []
    for s in offenders:
        lines.append(f"{_label(s)} compiled {_count(s.compiles, 'time')} (at most {n} allowed)")
        first = s.first_signature
        if first is not None:
            described = [f"{path}: {text}" for path, text in first["args"]]
            described += [f"static {label}: {value}" for label, value in first["static"]]
            lines.append("  first compile: " + (", ".join(described) or "no arguments"))
        for number, changes in s.recompiles:
            lines.append(f"  compile {number}: " + "; ".join(changes))
    return "\n".join(lines)
