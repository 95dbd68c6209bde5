"""What ``--trace`` costs a whole program: ``bench --trace-cost``.

Two programs, each run in its own processes under ``python -m fastdispatch``
and under ``python -m fastdispatch --trace``, alternately, a few repeats each:
the README's example (examples/train_mlp.py, from the checkout) and a loop of
10,000 small calls (small_calls.py).  The figures are the ratios of the
whole-process walls, traced over untraced (the target: at most 1.05), of the
medians and of the best runs: start-up here is I/O-bound, and its noise (it only
ever adds time) can exceed what --trace costs; the stdouts must match.
"""

from __future__ import annotations

import os
import statistics
import sys

from .whole_programs import readme_example, run_once

FULL = 7  # repeats
QUICK = 3
MODES = {"untraced": ["-m", "fastdispatch"], "traced": ["-m", "fastdispatch", "--trace"]}


def programs() -> list[tuple[str, list[str]]]:
    """(name, script and its arguments) of each program; the README's example
    only in a checkout (it is not installed)."""
    found = [("10,000 small calls", [os.path.join(os.path.dirname(__file__), "small_calls.py"), "10000"])]
    example = readme_example()
    if example is not None:
        found.insert(0, ("README example (train_mlp.py)", [example]))
    return found


def bench_program(name: str, script: list[str], repeats: int, cwd: str) -> dict:
    samples = {mode: [] for mode in MODES}
    stdout = {}
    for r in range(repeats):
        order = list(MODES) if r % 2 == 0 else list(MODES)[::-1]
        for mode in order:
            wall, out, error = run_once([sys.executable, *MODES[mode], *script], cwd, f"{name}, {mode}")
            if error:
                return {"program": name, "error": error, "samples_s": samples}
            samples[mode].append(wall)
            stdout.setdefault(mode, out)
    untraced, traced = (statistics.median(samples[mode]) for mode in MODES)
    best_untraced, best_traced = (min(samples[mode]) for mode in MODES)
    return {
        "program": name,
        "error": None,
        "samples_s": samples,
        "untraced_wall_s": untraced,
        "traced_wall_s": traced,
        "ratio": traced / untraced,
        "best_ratio": best_traced / best_untraced,
        "same_output": stdout["untraced"] == stdout["traced"],
    }


def format_table(rows: list[dict], repeats: int) -> str:
    lines = [
        f"{'program':<32} {'untraced s':>10} {'--trace s':>10} {'traced/untraced':>16} {'best/best':>10}"
    ]
    for row in rows:
        if row["error"]:
            lines.append(f"{row['program']:<32} {'-':>10} {'-':>10} {'-':>16} {'-':>10}  {row['error']}")
            continue
        flag = "" if row["same_output"] else "  stdout differs"
        lines.append(
            f"{row['program']:<32} {row['untraced_wall_s']:>10.2f} {row['traced_wall_s']:>10.2f} "
            f"{row['ratio']:>16.3f} {row['best_ratio']:>10.3f}{flag}"
        )
    lines.append(
        f"whole-process wall time, median of {repeats} (best/best: of the fastest runs), "
        "the two modes alternating"
    )
    return "\n".join(lines)


def main(quick: bool, json_path: str | None, header: str) -> int:
    repeats = QUICK if quick else FULL
    print(header, flush=True)
    rows = []
    for name, script in programs():
        print(f"  running {name} ...", file=sys.stderr, flush=True)
        rows.append(bench_program(name, script, repeats, cwd=os.getcwd()))
    print("\ntrace cost: python -m fastdispatch with and without --trace")
    print(format_table(rows, repeats))
    if json_path:
        from .report import write_json

        write_json(json_path, {"metadata": {"command": header, "repeats": repeats}, "trace_cost": rows})
        print(f"\nJSON written to {json_path}")
    return 1 if any(row["error"] for row in rows) else 0
