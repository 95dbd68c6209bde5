"""The report: one row per function, its phases, each recompile explained."""

from __future__ import annotations

from fastdispatch.tracing.recorder import PHASES, label

__all__ = ["compile_count_message", "format_report", "trace_title"]

# A p99 of fewer hits than this says nothing beyond the slowest hit, which the
# report shows instead (4 hits once gave "6.8 / 3.9 / 4.5": a p99 under the mean).
P99_MIN_HITS = 100

OVERHEAD_NOTE = (
    "overhead: time of a call outside its executable launch, (end - start) - launch, "
    "over hits on the fast path,\n"
    f"  mean / p50 / p99; below {P99_MIN_HITS} such hits, max: the slowest of them stands in for p99;\n"
    "in calls: time inside calls of the function (compiles included), "
    "as a share of the traced wall time."
)


def format_report(functions, wall_ns, process=None):
    """The report of these FunctionStats; ``process``: ``(index, count)`` in a
    program of several processes, named in the header."""
    calls = sum(s.calls for s in functions)
    lines = [
        f"{trace_title(process)}: {_count(calls, 'call')} of {_count(len(functions), 'function')} "
        f"in {wall_ns / 1e9:.3f} s wall"
    ]
    if not functions:
        return "\n".join(lines + ["(no compiled function was called)"]) + "\n"
    header = (
        "function",
        "calls",
        "hits",
        "compiles",
        "compile s",
        "overhead us mean/p50/p99",
        "in calls",
        "fallbacks",
    )
    rows = [header]
    for s in functions:
        fast = s.fast_calls
        overhead = (
            f"{s.overhead_ns / fast / 1e3:.1f} / {s.overhead.quantile(0.5) / 1e3:.1f} / {_tail(s)}"
            if fast
            else "-"
        )
        fallbacks = ", ".join(f"{reason} {n}" for reason, n in s.fallbacks.most_common())
        rows.append(
            (
                label(s),
                str(s.calls),
                str(s.hits),
                str(s.compiles),
                f"{s.compile_ns / 1e9:.3f}",
                overhead,
                f"{100 * s.call_ns / wall_ns:.1f}%" if wall_ns else "-",
                fallbacks or "-",
            )
        )
    lines += _table(rows, right_aligned=range(1, 7))
    lines += ["", "phases, mean us per fast-path hit:"]
    phase_rows = [("function",) + PHASES]
    for s in functions:
        if s.fast_calls:
            phase_rows.append(
                (label(s),) + tuple(f"{total / s.fast_calls / 1e3:.1f}" for total in s.phase_ns)
            )
    lines += _table(phase_rows, right_aligned=range(1, 6))
    recompiled = [s for s in functions if s.recompiles]
    if recompiled:
        lines += ["", "recompiles (what changed against the closest earlier signature):"]
        for s in recompiled:
            for number, changes in s.recompiles:
                lines.append(f"  {label(s)}, compile {number}:")
                lines += [f"    {change}" for change in changes]
            if s.recompiles_dropped:
                lines.append(f"  {label(s)}: {s.recompiles_dropped} more recompiles not shown")
    lines += ["", OVERHEAD_NOTE]
    return "\n".join(lines) + "\n"


def _tail(s):
    """The third overhead figure: p99, or the max of too few hits, so marked."""
    if s.fast_calls >= P99_MIN_HITS:
        return f"{s.overhead.quantile(0.99) / 1e3:.1f}"
    return f"max {s.overhead_max_ns / 1e3:.1f}"


def trace_title(process=None):
    """The report's title: with "process 1 of 2" in a program of several processes."""
    if process is None:
        return "fastdispatch trace"
    index, count = process
    return f"fastdispatch trace, process {index} of {count}"


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
