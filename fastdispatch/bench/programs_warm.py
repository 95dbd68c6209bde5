"""Whole programs rerun with their caches warm: ``bench --programs --warm-start``.

What a user who reruns a program compares: each program of bench/programs
(whole_programs.py) rerun whole, in fresh processes, three ways:

    jax cache   stock python, jax's persistent compilation cache warm (a)
    fd warm     python -m fastdispatch --warm-start STORE, the store warm (b)
                (jax's own cache on underneath it, as warm start sets it up)
    no cache    stock python, no cache (context; not with --quick)

Both caches are filled by one untimed run each first; then the modes run in
turns, the order alternating, a few repeats.  Two numbers per run:

* the whole-process wall time (imports, start-up, compiles, the loop);
* the time to the first step's result, from the first step's own start:
  from the program's ``training N steps`` line (printed right before its
  loop) to its ``step 1`` line (printed right after the first step's result,
  as flax's examples print at step 0).  Imports and model initialisation are
  the wall time's, not the step's.  A program without the start line is timed
  from its process's start; one without a ``step 1`` line, to its first line;
* the time to the first step's start (imports, start-up, the model made).

Medians over the repeats; b/a for both (targets: wall <= 1.0, first step
<= 0.35 where the step can be described).  The warm runs print warm start's
summary at their exit (the store's counts and reasons, for the notes); the
last one's is kept.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from .cold_start import clean_environment, compile_package_bytecode, jax_cache_environment, warm_start_argv
from .whole_programs import PROGRAMS_DIR, find_programs, selected, table

# (repeats, steps): full and --quick.
FULL = (5, 200)  # five: a 2.5 s program wanders by 5% from run to run on a shared machine
QUICK = (1, 100)
MODES = ("jax cache", "fd warm", "no cache")
QUICK_MODES = MODES[:2]  # the two compared; the third is context
TIMEOUT_S = 900
_FIRST_STEP = re.compile(r"^step 1\b")
_STEPS_BEGIN = re.compile(r"^training \d+ steps$")


def run_timed(argv: list[str], cwd: str, env: dict, label: str) -> dict:
    """One whole-process run: ``wall_s``; ``first_s``, the first step's time
    (from the ``training N steps`` line, else from the start, to the ``step 1``
    line, else to the first line; None if it printed nothing); ``begin_s``,
    when the ``training`` line came (None: it did not); ``stdout``, ``stderr``
    and ``error`` (None, or why the run failed)."""
    env = dict(env, PYTHONUNBUFFERED="1")  # each line as printed, so that it can be timed
    first_line = first_step = begin = None
    lines = []
    # stderr to a file: a pipe left unread while stdout is read could fill and stall the program.
    with tempfile.TemporaryFile("w+") as errors:
        cpu_before = _children_cpu()
        start = time.perf_counter()
        launched = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
        with launched as proc:
            try:
                for line in proc.stdout:
                    now = time.perf_counter() - start
                    if begin is None and _STEPS_BEGIN.match(line):
                        begin = now
                        lines.append(line)
                        continue
                    first_line = now if first_line is None else first_line
                    if first_step is None and _FIRST_STEP.match(line):
                        first_step = now
                    lines.append(line)
                proc.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return {"wall_s": time.perf_counter() - start, "error": f"{label} timed out", "stdout": ""}
        wall = time.perf_counter() - start
        cpu = _children_cpu() - cpu_before
        errors.seek(0)
        stderr = errors.read()
    error = None
    if proc.returncode != 0:
        last = (stderr.strip().splitlines() or ["(no stderr)"])[-1]
        error = f"{label} exited {proc.returncode}: {last}"
    first = first_step if first_step is not None else first_line
    if first is not None and begin is not None:
        first -= begin
    return {
        "wall_s": wall,
        "first_s": first,
        "begin_s": begin,
        "cpu_s": cpu,
        "stdout": "".join(lines),
        "stderr": stderr,
        "error": error,
    }


def _children_cpu() -> float:
    """User and system seconds of this process's waited-for children: one
    run's is the difference around it (the runs are one at a time)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_program(name: str, directory: str, repeats: int, steps: int, modes: tuple = MODES) -> dict:
    """One program's row: samples per mode (of ``modes``), then their medians and ratios."""
    path = os.path.join(directory, name + ".py")
    cwd = os.getcwd()
    args = [path, "--steps", str(steps)]
    samples = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="fd-programs-warm-") as scratch:
        store = os.path.join(scratch, "store")
        launchers = {
            "jax cache": ([sys.executable], jax_cache_environment(os.path.join(scratch, "jax-cache"))),
            "fd warm": (warm_start_argv(store), report_environment(scratch)),
            "no cache": ([sys.executable], clean_environment()),
        }
        for mode in ("jax cache", "fd warm"):  # fill both caches, untimed
            launcher, env = launchers[mode]
            run = run_timed([*launcher, *args], cwd, env, f"{name}, filling for {mode}")
            if run["error"]:
                return {"program": name, "error": run["error"], "samples": samples}
        stdout = {}
        for r in range(repeats):
            order = modes if r % 2 == 0 else modes[::-1]
            for mode in order:
                launcher, env = launchers[mode]
                run = run_timed([*launcher, *args], cwd, env, f"{name}, {mode}")
                if run["error"]:
                    return {"program": name, "error": run["error"], "samples": samples}
                samples[mode].append({key: run[key] for key in ("wall_s", "first_s", "begin_s", "cpu_s")})
                stdout.setdefault(mode, run["stdout"])
                if mode == "fd warm":
                    store_summary = store_lines(run["stderr"])
    return summarize(name, samples, stdout, store_summary)


# Prints warm start's summary (the --trace report's last part) when a run
# ends, without --trace: --trace observes jax by hooks whose functions some
# programs' objects hold (a Linear's dot_general), so its keys are another run's.
_SITECUSTOMIZE = """import atexit, sys


def _summary():
    warm = sys.modules.get("fastdispatch.warm")
    if warm is not None:
        sys.stderr.write(warm.summary())


atexit.register(_summary)
"""


def report_environment(scratch: str) -> dict:
    """The clean environment, with a sitecustomize that prints warm start's
    summary to stderr at exit (after the program's work: not in its timings)."""
    site = os.path.join(scratch, "site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE)
    env = clean_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
    return env


def store_lines(stderr: str) -> list[str]:
    """The warm-start summary of a --trace report: its counts line, then its
    per-function and reason lines."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("warm start ("):
            found = [line.partition("): ")[2]]
            found += [item.strip() for item in lines[i + 1 :] if item.startswith("  ")]
            return found
    return ["no warm start summary"]


def summarize(name: str, samples: dict, stdout: dict, store: list[str]) -> dict:
    wall = {mode: statistics.median(s["wall_s"] for s in samples[mode]) for mode in samples}
    firsts = {mode: [s["first_s"] for s in samples[mode] if s["first_s"] is not None] for mode in samples}
    first = {mode: statistics.median(values) if values else None for mode, values in firsts.items()}
    begins = {mode: [s.get("begin_s") for s in samples[mode]] for mode in samples}
    begin = {
        mode: statistics.median(values) if values and None not in values else None
        for mode, values in begins.items()
    }
    cpus = {mode: [s.get("cpu_s") for s in samples[mode]] for mode in samples}
    cpu = {
        mode: statistics.median(values) if values and None not in values else None
        for mode, values in cpus.items()
    }
    first_ratio = None
    if first["fd warm"] is not None and first["jax cache"]:
        first_ratio = first["fd warm"] / first["jax cache"]
    return {
        "program": name,
        "error": None,
        "samples": samples,
        "wall_s": wall,
        "first_s": first,
        "begin_s": begin,
        "cpu_s": cpu,
        "cpu_ratio": cpu["fd warm"] / cpu["jax cache"] if cpu["fd warm"] and cpu["jax cache"] else None,
        "wall_ratio": wall["fd warm"] / wall["jax cache"],
        "first_ratio": first_ratio,
        "same_output": len(set(stdout.values())) == 1,
        "store": store,
    }


def format_table(rows: list[dict], repeats: int, steps: int) -> str:
    head = ["program", *(f"{mode} s" for mode in MODES), "b/a wall"]
    head += ["b/a cpu", "a begin s", "b begin s"]
    head += [f"{mode} first s" for mode in MODES] + ["b/a first"]

    def cells_of(row, notes):
        firsts = [row["first_s"].get(mode) for mode in MODES]
        begins = [row.get("begin_s", {}).get(mode) for mode in ("jax cache", "fd warm")]
        # *: no `training` line; its first step is timed from its process's start.
        mark = "" if None not in begins else "*"
        notes.append(f"{row['program']}: store {row['store'][0]}")
        notes += [f"    {line}" for line in row["store"][1:]]
        if not row["same_output"]:
            notes.append(f"{row['program']}: stdout differs between the modes")
        return [
            *("-" if mode not in row["wall_s"] else f"{row['wall_s'][mode]:.2f}" for mode in MODES),
            f"{row['wall_ratio']:.2f}",
            "-" if row.get("cpu_ratio") is None else f"{row['cpu_ratio']:.2f}",
            *("-" if value is None else f"{value:.2f}" for value in begins),
            *("-" if value is None else f"{value:.2f}{mark}" for value in firsts),
            "-" if row["first_ratio"] is None else f"{row['first_ratio']:.2f}",
        ]

    legend = (
        f"a: stock, jax's persistent cache warm; b: python -m fastdispatch --warm-start, store warm; "
        f"whole processes at --steps {steps}, median of {repeats}, modes alternating; "
        "cpu: the process's user and system seconds, all threads (less shaken by other jobs than wall); "
        "begin: from the process's start to the program's `training N steps` line (imports, model made); "
        "first: from that line to its `step 1` line (*: from the process's start, or to its first line); "
        "targets b/a wall <= 1.0, first <= 0.35"
    )
    return table(head, rows, cells_of, legend)


def main(quick: bool, only: str | None, json_path: str | None, header: str) -> int:
    """Runs the programs (``only``: some of them) and prints the table; 2 when
    ``only`` names an unknown program."""
    directory = PROGRAMS_DIR
    names = selected(find_programs(directory), only, "--programs")
    if names is None:
        return 2
    repeats, steps = QUICK if quick else FULL
    modes = QUICK_MODES if quick else MODES
    print(header, flush=True)
    print(f"programs from {directory}", flush=True)
    compile_package_bytecode()
    rows = []
    for name in names:
        print(f"  running {name} ...", file=sys.stderr, flush=True)
        rows.append(bench_program(name, directory, repeats, steps, modes))
    print("\nprograms rerun with warm caches: jax's persistent cache against warm start")
    print(format_table(rows, repeats, steps))
    if json_path:
        from .report import write_json

        meta = {"command": header, "repeats": repeats, "steps": steps, "directory": directory}
        write_json(json_path, {"metadata": meta, "programs_warm": rows})
        print(f"\nJSON written to {json_path}")
    return 1 if any(row["error"] for row in rows) else 0
