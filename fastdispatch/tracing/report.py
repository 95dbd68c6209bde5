"""The report: one row per function, its phases, each recompile explained."""

from __future__ import annotations

import textwrap

from fastdispatch.tracing.names import PHASES, label, trace_title
from fastdispatch.tracing.sampler import INTERVAL

__all__ = [
    "compile_count_message",
    "fit_lines",
    "format_findings",
    "format_report",
    "format_split",
    "trace_title",
]

# A p99 of fewer hits than this says nothing beyond the slowest hit, which the
# report shows instead (4 hits once gave "6.8 / 3.9 / 4.5": a p99 under the mean).
P99_MIN_HITS = 100

# No line of the report is longer (a cell is clipped first, then the line):
# the whole of every name stays in --trace-json.
MAX_LINE = 160
MAX_LABEL = 64
MAX_HAND_OFFS = 40

OVERHEAD_NOTE = (
    "overhead: time of a call outside its executable launch, (end - start) - launch, "
    "over hits on the fast path,\n"
    f"  mean / p50 / p99; below {P99_MIN_HITS} such hits, max: the slowest of them stands in for p99;\n"
    "in calls: time inside calls of the function (compiles included), "
    "as a share of the traced wall time."
)


DEVICE_NOTE = (
    "host or device: period, the median time between calls on the host; device, the device's time\n"
    "  for a call run alone past its launch (a few of each function's calls are waited for), and\n"
    "  times its calls that ran, in seconds; device-bound when that is at least 80% of the period\n"
    "  (a faster dispatch would not help), else host-bound:"
)


def fit_lines(text: str) -> str:
    """``text`` with each line over MAX_LINE wrapped at its words, the rest
    indented two spaces past the line's own indent (for what is printed
    beside the report, warm start's summary)."""
    out = []
    for line in text.split("\n"):
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out.append(
            textwrap.fill(
                line,
                MAX_LINE,
                subsequent_indent=indent + "  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            if len(line) > MAX_LINE
            else line
        )
    return "\n".join(out)


def format_report(functions, wall_ns, process=None, summary=None):
    """The report of these FunctionStats; ``process``: ``(index, count)`` in a
    program of several processes, named in the header; ``summary``: the
    model of findings.summary, for the wall-time split and the findings."""
    calls = sum(s.calls for s in functions)
    lines = [
        f"{trace_title(process)}: {_count(calls, 'call')} of {_count(len(functions), 'function')} "
        f"in {wall_ns / 1e9:.3f} s wall"
    ]
    if summary is not None:
        lines += format_split(summary["split"], summary["wall_seconds"])
        lines += format_lines(summary.get("lines"), summary["wall_seconds"]) + [""]
    if not functions:
        lines.append("(no compiled function was called)")
        if summary is not None:
            lines += format_findings(summary["findings"])
        return _joined(lines)
    header = (
        "function",
        "calls",
        "hits",
        "compiles",
        "compile s",
        "overhead us mean/p50/p99",
        "in calls",
        "hand-offs",
    )
    rows = [header]
    for s in functions:
        fast = s.fast_calls
        overhead = (
            f"{s.overhead_ns / fast / 1e3:.1f} / {s.overhead.quantile(0.5) / 1e3:.1f} / {_tail(s)}"
            if fast
            else "-"
        )
        hand_offs = ", ".join(f"{reason} {n}" for reason, n in s.hand_offs.most_common())
        rows.append(
            (
                _clip_label(s),
                str(s.calls),
                str(s.hits),
                str(s.compiles),
                f"{s.compile_ns / 1e9:.3f}",
                overhead,
                f"{100 * s.call_ns / wall_ns:.1f}%" if wall_ns else "-",
                _clip(hand_offs, MAX_HAND_OFFS) or "-",
            )
        )
    lines += _table(rows, right_aligned=range(1, 7))
    lines += ["", "phases, mean us per fast-path hit:"]
    phase_rows = [("function",) + PHASES]
    for s in functions:
        if s.fast_calls:
            phase_rows.append(
                (_clip_label(s),) + tuple(f"{total / s.fast_calls / 1e3:.1f}" for total in s.phase_ns)
            )
    lines += _table(phase_rows, right_aligned=range(1, 6))
    lines += _device_table(functions)
    recompiled = [s for s in functions if s.recompiles]
    if recompiled:
        lines += ["", "recompiles (what changed against the closest earlier signature):"]
        for s in recompiled:
            for number, changes in s.recompiles:
                lines.append(f"  {label(s)}, compile {number}:")
                lines += [f"    {change}" for change in changes]
            if s.recompiles_dropped:
                lines.append(f"  {label(s)}: {s.recompiles_dropped} more recompiles not shown")
    if summary is not None:
        lines += format_executables(summary["executables"])
        lines += format_findings(summary["findings"])
    lines += ["", OVERHEAD_NOTE]
    return _joined(lines)


def _device_table(functions):
    """Host-bound or device-bound, per function whose calls were sampled."""
    rows = [("function", "period us", "device us", "device s", "waited", "verdict")]
    for s in functions:
        device = s.device()
        if device is not None and device["verdict"]:
            rows.append(
                (
                    _clip_label(s),
                    f"{device['period_us']:.1f}",
                    f"{device['device_us']:.1f}",
                    f"{s.device_seconds():.3f}",
                    str(device["waited_calls"]),
                    device["verdict"],
                )
            )
    if len(rows) == 1:
        return []
    return ["", DEVICE_NOTE] + _table(rows, right_aligned=range(1, 5))


def _tail(s):
    """The third overhead figure: p99, or the max of too few hits, so marked."""
    if s.fast_calls >= P99_MIN_HITS:
        return f"{s.overhead.quantile(0.99) / 1e3:.1f}"
    return f"max {s.overhead_max_ns / 1e3:.1f}"


# The share of the wall time compiling from which the report says how a rerun could skip it.
COMPILE_BOUND_SHARE = 0.1


def format_split(split, wall_seconds):
    """Where the wall time went: compiled calls, compiling, eager ops, host syncs, the rest."""
    phases = ", ".join(
        f"{name} {seconds:.3f}" for name, seconds in split["compile_phases"].items() if seconds
    )
    parts = [
        ("python start-up, imports", split.get("start_up") or None, ""),
        ("inside compiled calls", split["compiled_calls"], ""),
        ("compiling", split["compiling"], f"jax: {phases}" if phases else ""),
        ("eager jax ops outside jit", split["eager_ops"], ""),
        ("blocked on host syncs", split["host_syncs"], ""),
        ("the rest (your Python)", split["rest"], ""),
    ]
    rows = [
        (name, f"{seconds:.3f} s", f"{100 * seconds / wall_seconds:.1f}%" if wall_seconds else "-", note)
        for name, seconds, note in parts
        if seconds is not None
    ]
    lines = ["wall time:"] + ["  " + row for row in _table(rows, right_aligned=(1, 2))]
    cache = split.get("jax_cache")
    if cache and cache["on"] and cache["asked"]:
        # What a rerun with the same cache would still compile: every compile here not served.
        compiled = cache["asked"] - cache["served"]
        under = compiled - cache["written"]
        lines.append(
            f"  jax's persistent cache: {cache['served']} of {cache['asked']} compiles served, "
            f"{cache['written']} written"
            + (f", {under} under its thresholds (compiled again by a rerun)" if under > 0 else "")
        )
    elif cache and not cache["on"] and split["compiling"] >= COMPILE_BOUND_SHARE * (wall_seconds or 1.0):
        lines.append(
            "  jax's persistent cache is off: a rerun compiles all of it again "
            "(--warm-start DIR, or jax's jax_compilation_cache_dir)"
        )
    device = split.get("device_work")
    if device and wall_seconds:
        share = 100 * device / wall_seconds
        lines.append(
            f"  device work of compiled calls, estimated: {device:.3f} s ({share:.1f}%), "
            f"which host syncs and launches wait for"
        )
    collector = split.get("garbage_collection")
    if collector and wall_seconds:
        counts = split["gc_collections"]
        lines.append(
            f"  Python's garbage collector, inside the phases above: {collector:.3f} s "
            f"({100 * collector / wall_seconds:.1f}%), {sum(counts)} collections, {counts[2]} of them full"
        )
    return lines


# How many of the program's lines the text shows (--trace-json has them all).
LINES_SHOWN = 8


def format_lines(by_line, wall_seconds):
    """The lines the wall time went to, most first, with the library call each was in."""
    if not by_line or not wall_seconds:
        return []
    every = f"{1e3 * INTERVAL:.0f} ms"
    lines = [f"  by your line (the main thread sampled every {every}; a line's time is all of it):"]
    rows = [
        (
            f"{row['file']}:{row['line']}",
            f"{row['seconds']:.3f} s",
            f"{100 * row['seconds'] / wall_seconds:.1f}%",
            f"in {row['in_library']}" if row["in_library"] else "",
        )
        for row in by_line[:LINES_SHOWN]
    ]
    lines += ["    " + row for row in _table(rows, right_aligned=(1, 2))]
    if len(by_line) > LINES_SHOWN:
        lines.append(f"    and {len(by_line) - LINES_SHOWN} more lines (--trace-json: lines)")
    return lines


def format_executables(rows):
    """Executables kept per function, with a warning where they differ by object identity only."""
    if not any(row["compiles"] > 1 for row in rows):
        return []
    lines = ["", "executables kept (in the shared cache, at exit):"]
    for row in rows:
        if row["compiles"] > 1:
            line = f"  {row['function']}: {row['kept']} kept of {row['compiles']} compiled"
            if row["memory_bytes"] is not None:
                line += f", holding {row['memory_bytes'] / 2**20:.1f} MiB"
            if row["identity_only"]:
                line += (
                    f"; warning: {row['identity_only']} compiled for signatures that differ only by "
                    "object identity (see findings)"
                )
            lines.append(line)
    return lines


def format_findings(findings):
    """One paragraph per finding: where, what, how often, how long, what to change."""
    if not findings:
        return []
    lines = ["", "findings (what to change, at your line):"]
    for f in findings:
        lines.append(f"  {f['file']}:{f['line']}  {f['kind']}, {f['count']}x, {f['seconds']:.3f} s")
        lines.append(f"    {f['message']}")
    return lines


def _joined(lines):
    """The report's text, no line over MAX_LINE."""
    return "".join(_clip(line, MAX_LINE) + "\n" for line in "\n".join(lines).split("\n"))


def _clip(text, limit):
    """``text``, or its start and "..." to fit ``limit``."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clip_label(s):
    """A function's label within MAX_LABEL: its name whole where it can be,
    its location's start clipped first (``step (.../programs/train.py:12)``)."""
    text = label(s)
    if len(text) <= MAX_LABEL:
        return text
    room = MAX_LABEL - len(s.name) - len(" (...)")
    if room >= 12:
        return f"{s.name} (...{s.location[len(s.location) - room :]})"
    return "..." + text[len(text) - MAX_LABEL + 3 :]


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


def compile_count_message(offenders, n):
    lines = []
    for s in offenders:
        lines.append(f"{label(s)} compiled {_count(s.compiles, 'time')} (at most {n} allowed)")
        first = s.first_signature
        if first is not None:
            described = [f"{leaf.label}: {leaf.text}" for leaf in first.args]
            described += [f"static {name}: {value}" for name, value in first.static]
            lines.append("  first compile: " + (", ".join(described) or "no arguments"))
        for number, changes in s.recompiles:
            lines.append(f"  compile {number}: " + "; ".join(changes))
    return "\n".join(lines)
