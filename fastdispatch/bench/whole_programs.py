"""Whole programs, stock against ``python -m fastdispatch``: ``bench --programs``.

The programs are fastdispatch/bench/programs/*.py, installed with the package
(each written as its library's documentation writes it, never importing
fastdispatch; their stock-vs-fastdispatch output equality is
tests/programs/test_programs.py).
Each runs in its own process, stock (``python prog.py --steps N``) and under
``python -m fastdispatch prog.py --steps N``, alternately, a few repeats each.

Two numbers per program and implementation:

* whole-process wall time at the larger step count (start-up, compiles and
  the loop together: what a user waits for), median over the repeats;
* time per step, ``(wall(N2) - wall(N1)) / (N2 - N1)`` at two step counts,
  which cancels start-up and compiles out.  Start-up (seconds) is noisy next to
  a few hundred steps of microseconds each, and noise only ever adds time: the
  difference is taken between the best (minimum) walls at each step count.

The stdouts of the two implementations at N2 are compared too: a program whose
output differs under fastdispatch is flagged under the table.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

# (repeats, small steps N1, large steps N2): full and --quick.
FULL = (5, 200, 2000)
QUICK = (3, 100, 500)
IMPLS = ("stock", "fd")
TIMEOUT_S = 900


PROGRAMS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")


def readme_example() -> str | None:
    """examples/train_mlp.py of the checkout this package runs from, or None
    in an installed package (the README's example is not installed)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    example = os.path.join(repo, "examples", "train_mlp.py")
    return example if os.path.exists(example) else None


def find_programs(directory: str) -> list[str]:
    return sorted(
        name[: -len(".py")]
        for name in os.listdir(directory)
        if name.endswith(".py") and not name.startswith(("test_", "_"))
    )


def command(impl: str, path: str, steps: int) -> list[str]:
    fd = ["-m", "fastdispatch"] if impl == "fd" else []
    return [sys.executable, *fd, path, "--steps", str(steps)]


def run_once(argv: list[str], cwd: str, label: str, env: dict | None = None) -> tuple[float, str, str | None]:
    """(wall seconds, stdout, error or None) of one whole-process run of
    ``argv`` (in ``env``, else this process's environment); ``label`` names
    the run in the error."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, "", f"{label} timed out after {TIMEOUT_S} s"
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return wall, proc.stdout, f"{label} exited {proc.returncode}: {last}"
    return wall, proc.stdout, None


def bench_program(name: str, directory: str, repeats: int, n1: int, n2: int) -> dict:
    """One program's row: wall samples per (impl, steps), medians, per-step times."""
    path = os.path.join(directory, name + ".py")
    cwd = os.getcwd()
    samples = {impl: {n1: [], n2: []} for impl in IMPLS}
    stdout = {}
    error = None
    for r in range(repeats):
        # Alternate which implementation goes first, so that drift hits both alike.
        order = IMPLS if r % 2 == 0 else IMPLS[::-1]
        for steps in (n1, n2):
            for impl in order:
                wall, out, error = run_once(command(impl, path, steps), cwd, f"{impl} at --steps {steps}")
                if error:
                    return {"program": name, "error": error, "samples_s": samples}
                samples[impl][steps].append(wall)
                if steps == n2:
                    stdout.setdefault(impl, out)
    row = {"program": name, "error": None, "steps": [n1, n2], "samples_s": samples}
    for impl in IMPLS:
        row[f"{impl}_wall_s"] = statistics.median(samples[impl][n2])
        best1, best2 = min(samples[impl][n1]), min(samples[impl][n2])
        row[f"{impl}_us_per_step"] = (best2 - best1) / (n2 - n1) * 1e6
    row["wall_ratio"] = row["fd_wall_s"] / row["stock_wall_s"]
    stock_step, fd_step = row["stock_us_per_step"], row["fd_us_per_step"]
    row["step_ratio"] = fd_step / stock_step if stock_step > 0 and fd_step > 0 else None
    row["same_output"] = stdout.get("stock") == stdout.get("fd")
    return row


def selected(names: list[str], only: str | None, mode: str) -> list[str] | None:
    """The ``names`` that ``only`` (comma-separated) picks, in their order, or
    all; None, said on stderr, when it names one that is not there."""
    if not only:
        return names
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in names]
    if unknown:
        known = ", ".join(names)
        print(f"bench {mode}: unknown program {', '.join(unknown)}; known: {known}", file=sys.stderr)
        return None
    return [name for name in names if name in wanted]


def aligned(head: list[str], cells: list[list[str]]) -> list[str]:
    """A table's lines: the first column left-aligned, the others right, a rule under the head."""
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(head))]

    def line(r):
        return "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))

    return [line(head), "  ".join("-" * w for w in widths), *map(line, cells)]


def table(head: list[str], rows: list[dict], cells_of, legend: str, title=lambda row: row["program"]) -> str:
    """A bench's table: a line per row, ``cells_of(row, notes)`` its cells
    after the title (appending to ``notes`` what the row has to say), a row
    that failed all dashes, with its error as a note; then ``legend``, then
    the notes."""
    cells, notes = [], []
    for row in rows:
        if row["error"]:
            cells.append([title(row)] + ["-"] * (len(head) - 1))
            notes.append(f"{title(row)}: {row['error']}")
        else:
            cells.append([title(row), *cells_of(row, notes)])
    return "\n".join([*aligned(head, cells), legend, *(f"  {note}" for note in notes)])


def format_table(rows: list[dict], n1: int, n2: int, repeats: int) -> str:
    head = ["program", "stock wall s", "fd wall s", "fd/stock", "stock us/step", "fd us/step", "fd/stock"]

    def cells_of(row, notes):
        if not row["same_output"]:
            notes.append(f"{row['program']}: stdout differs between stock and fastdispatch")
        return [
            f"{row['stock_wall_s']:.2f}",
            f"{row['fd_wall_s']:.2f}",
            f"{row['wall_ratio']:.2f}",
            f"{row['stock_us_per_step']:.0f}",
            f"{row['fd_us_per_step']:.0f}",
            "-" if row["step_ratio"] is None else f"{row['step_ratio']:.2f}",
        ]

    legend = (
        f"wall: whole process at --steps {n2}, median of {repeats}; "
        f"us/step: (best wall at {n2} - best wall at {n1}) / {n2 - n1}"
    )
    return table(head, rows, cells_of, legend)


def main(quick: bool, only: str | None, json_path: str | None, header: str) -> int:
    """Runs the group and prints its table; 2 when ``only`` names an unknown program."""
    directory = PROGRAMS_DIR
    names = selected(find_programs(directory), only, "--programs")
    if names is None:
        return 2
    repeats, n1, n2 = QUICK if quick else FULL
    print(header, flush=True)
    print(f"programs from {directory}", flush=True)
    rows = []
    for name in names:
        print(f"  running {name} ...", file=sys.stderr, flush=True)
        rows.append(bench_program(name, directory, repeats, n1, n2))
    print("\nprograms: whole programs, stock python against python -m fastdispatch")
    print(format_table(rows, n1, n2, repeats))
    if json_path:
        from .report import write_json

        meta = {"command": header, "repeats": repeats, "steps": [n1, n2], "directory": directory}
        write_json(json_path, {"metadata": meta, "programs": rows})
        print(f"\nJSON written to {json_path}")
    return 0
