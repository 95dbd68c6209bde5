"""The side-by-side benchmark: ``python -m fastdispatch bench``.

Groups of workloads, each timed on its implementations side by side with the
raw PjRt limit, and checked against the group's reference first:

    dispatch   jax.jit (reference), fastdispatch.jit, equinox.filter_jit   (dispatch.py);
               also one row per hand-off reason (fastdispatch hands the call
               to jax.jit) and flax TrainState steps on numpy batches
    equinox    equinox.filter_jit (reference), fastdispatch.filter_jit      (eqx.py)
    flax       flax.nnx.jit (reference), its tree mode, nnx.cached_partial,
               fastdispatch.nnx.jit, and it through nnx.cached_partial      (nnx.py)
    pytree     fastdispatch.core.pytree against jax.tree_util                   (pytree.py)

``runner.py`` checks and times, ``report.py`` prints and writes.  Options::

    --only NAMES   comma-separated workload names or groups; --list shows them
    --json FILE    all rows, samples and metadata
    --plot FILE    a bar chart of the dispatch group (needs matplotlib)
    --quick        fewer, shorter repeats (~20 s instead of ~2 min on an idle 2-core machine)
    --distributed  instead: a data-parallel training step over jax.distributed, in
                   --processes processes (2) of --devices CPU devices (2) on loopback
                   (distributed.py)
    --programs     instead: the whole programs of bench/programs, stock against
                   python -m fastdispatch: wall time and time per step (whole_programs.py);
                   --only names programs, --json and --quick apply
    --programs --warm-start
                   instead: the same programs rerun with warm caches: stock with jax's
                   persistent cache, --warm-start with its store, stock without a cache;
                   wall time and time to the first step's result (programs_warm.py)
    --trace-cost   instead: what --trace costs whole programs (the README's example
                   and 10,000 small calls), with and without it (trace_cost.py)
    --cold-start   instead: the first call of three train steps in fresh processes,
                   jax's persistent cache against --warm-start, and the README's
                   example with its store empty and filled (cold_start.py);
                   --only names programs, --json and --quick apply
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable

import jax

from . import dispatch, eqx, nnx, report
from .machine import cpu_model
from .runner import run_workload

# (repeats, seconds per timed loop): full and --quick.
FULL = (21, 0.05)
QUICK = (7, 0.025)


@dataclasses.dataclass(frozen=True)
class Group:
    title: str
    workloads: list
    implementations: Callable  # () -> [Impl]: the reference first
    summary: Callable  # results -> summary items


GROUPS = {
    "dispatch": Group(
        "jax.jit and fastdispatch.jit", dispatch.WORKLOADS, dispatch.implementations, report.dispatch_summary
    ),
    "flax": Group(
        "flax.nnx.jit and fastdispatch.nnx.jit", nnx.WORKLOADS, nnx.implementations, report.nnx_summary
    ),
    "equinox": Group(
        "equinox.filter_jit and fastdispatch.filter_jit",
        eqx.WORKLOADS,
        eqx.implementations,
        report.equinox_summary,
    ),
}
PYTREE = "pytree"


def main(argv: list[str] | None = None, prog: str = "fastdispatch bench") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="NAMES", help="comma-separated workload names or groups")
    parser.add_argument("--json", metavar="FILE", help="write all rows and metadata as JSON")
    parser.add_argument("--plot", metavar="FILE", help="write a bar chart PNG (needs matplotlib)")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument("--list", action="store_true", help="list workloads and groups, then exit")
    parser.add_argument(
        "--distributed", action="store_true", help="the multi-process data-parallel step instead"
    )
    parser.add_argument("--processes", type=int, default=2, help="with --distributed: processes (2)")
    parser.add_argument("--devices", type=int, default=2, help="with --distributed: CPU devices each (2)")
    parser.add_argument(
        "--programs",
        action="store_true",
        help="the whole programs that ship in bench/programs instead, stock against python -m fastdispatch",
    )
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="with --programs: rerun each program with warm caches (jax's persistent cache, warm start)",
    )
    parser.add_argument(
        "--trace-cost",
        action="store_true",
        help="what --trace costs whole programs instead: python -m fastdispatch with and without it",
    )
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="the first call in a fresh process instead: jax's persistent cache against --warm-start",
    )
    options = parser.parse_args(argv)
    if options.warm_start and not options.programs:
        parser.error("--warm-start applies to --programs")
    if options.cold_start:
        return _run_cold_start(options, f"python -m {prog} {shlex.join(argv)}")
    if options.trace_cost:
        return _run_trace_cost(options, f"python -m {prog} {shlex.join(argv)}")
    if options.distributed:
        return _run_distributed(options, f"python -m {prog} {shlex.join(argv)}")
    if options.programs:
        return _run_programs(options, f"python -m {prog} {shlex.join(argv)}")
    if options.list:
        for name, group in GROUPS.items():
            for w in group.workloads:
                print(f"{w.name:<27} {w.title}  [{name}]")
        print("groups: " + ", ".join([*GROUPS, PYTREE]))
        return 0
    try:
        selected, pytree_group = select(options.only)
    except ValueError as e:
        parser.error(str(e))

    _request_cpu_devices(max(w.devices for group in GROUPS.values() for w in group.workloads))
    repeats, target_s = QUICK if options.quick else FULL
    impls = {name: GROUPS[name].implementations() for name in selected}
    meta = metadata(f"python -m {prog} {shlex.join(argv)}".rstrip(), impls, repeats, target_s)
    print(report.format_header(meta), flush=True)

    all_results, summaries, extra = [], {}, {}
    for name, workloads in selected.items():
        results = []
        for w in workloads:
            print(f"  running {w.name} ...", file=sys.stderr, flush=True)
            results.append(run_workload(w, impls[name], repeats, target_s))
        names = [impl.name for impl in impls[name] if not impl.unavailable]
        print(f"\n{name}: {GROUPS[name].title}")
        print(report.format_table(results, names or [impls[name][0].name]))
        summaries[name] = GROUPS[name].summary(results)
        print()
        print(report.format_summary(summaries[name]))
        all_results += results
    if pytree_group:
        extra["pytree"] = _run_pytree_group(options.quick)
    if options.json:
        report.write_json(options.json, report.to_json(all_results, meta, summaries, extra))
        print(f"\nJSON written to {options.json}")
    if options.plot:
        dispatch_names = {w.name for w in dispatch.WORKLOADS}
        print(report.plot([r for r in all_results if r.workload.name in dispatch_names], options.plot))
    return 0


def select(only: str | None):
    """({group: its selected workloads}, whether the pytree group runs) for --only."""
    if not only:
        return {name: list(group.workloads) for name, group in GROUPS.items()}, True
    names = [name.strip() for name in only.split(",") if name.strip()]
    known = {w.name for group in GROUPS.values() for w in group.workloads} | set(GROUPS) | {PYTREE}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown workload or group {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    selected = {}
    for group_name, group in GROUPS.items():
        chosen = [w for w in group.workloads if group_name in names or w.name in names]
        if chosen:
            selected[group_name] = chosen
    return selected, PYTREE in names


def metadata(command: str, impls: dict, repeats: int, target_s: float) -> dict:
    import jaxlib
    import numpy

    status = {
        group: {impl.name: impl.unavailable or "available" for impl in group_impls}
        for group, group_impls in impls.items()
    }
    return {
        "command": command,
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": numpy.__version__,
        "versions": _library_versions(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "devices": jax.device_count(),
        "backend": jax.default_backend(),
        "fastdispatch_commit": _git_commit(),
        "implementations": status,
        "repeats": repeats,
        "seconds_per_loop": target_s,
    }


def _library_versions() -> dict:
    """Versions of the front ends' libraries that are installed."""
    from importlib import metadata as importlib_metadata

    versions = {}
    for name in ("equinox", "flax", "optax"):
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            pass
    return versions


def _git_commit() -> str:
    """The commit of the fastdispatch checkout being measured, when it is one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=os.path.dirname(__file__),
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _request_cpu_devices(n: int) -> None:
    # Every workload runs with 8 CPU devices, whether or not the sharded one is
    # selected, so that runs compare.  It doesn't distort the one-device
    # workloads: best of 6 processes each, jax.jit and raw on two arrays, 200
    # positional arrays, the SGD param dict and the Adam step all came out
    # within 3% of a one-device process (jax 0.10.2, 2-core EPYC).
    # Only possible before jax's backends start; where they already have, the
    # workloads that need more devices say so in their row.
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        pass


def _versions_line(mode: str, extra: str = "") -> str:
    """The first line of a --distributed or --programs header: versions and machine."""
    import jaxlib

    return (
        f"fastdispatch bench {mode} | jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
        f"Python {platform.python_version()} | {cpu_model()} ({os.cpu_count()} cores){extra}"
    )


def _run_distributed(options, command: str) -> int:
    """distributed.py: launches the processes; this process starts no backend."""
    from . import distributed

    if options.only or options.plot:
        print("--only and --plot do not apply to --distributed", file=sys.stderr)
        return 2
    header = _versions_line(
        "--distributed",
        f" | {options.processes} processes x {options.devices} CPU devices, gloo over loopback",
    )
    header += f"\ncommand: {command}"
    return distributed.main(options.quick, options.processes, options.devices, options.json, header)


def _program_header(mode: str, command: str) -> str:
    """The header of a group of whole programs: versions, commit, libraries, command."""
    return (
        _versions_line(mode)
        + f"\nfastdispatch git {_git_commit() or '?'}"
        + "".join(f", {name} {version}" for name, version in _library_versions().items())
        + f"\ncommand: {command}"
    )


def _run_programs(options, command: str) -> int:
    """whole_programs.py: each program in its own processes; this process starts no backend."""
    from . import whole_programs

    if options.plot or options.distributed:
        print("--plot and --distributed do not apply to --programs", file=sys.stderr)
        return 2
    if options.warm_start:
        from . import programs_warm

        header = _program_header("--programs --warm-start", command)
        return programs_warm.main(options.quick, options.only, options.json, header)
    header = _program_header("--programs", command)
    return whole_programs.main(options.quick, options.only, options.json, header)


def _run_trace_cost(options, command: str) -> int:
    """trace_cost.py: each program in its own processes; this process starts no backend."""
    from . import trace_cost

    if options.plot or options.distributed or options.programs or options.only:
        print("--plot, --distributed, --programs and --only do not apply to --trace-cost", file=sys.stderr)
        return 2
    return trace_cost.main(options.quick, options.json, _program_header("--trace-cost", command))


def _run_cold_start(options, command: str) -> int:
    """cold_start.py: each program in its own processes; this process starts no backend."""
    from . import cold_start

    if options.plot or options.distributed or options.programs or options.trace_cost:
        print(
            "--plot, --distributed, --programs and --trace-cost do not apply to --cold-start", file=sys.stderr
        )
        return 2
    return cold_start.main(
        options.quick, options.json, _program_header("--cold-start", command), options.only
    )


def _run_pytree_group(quick: bool) -> list[dict]:
    """fastdispatch/bench/pytree.py: flatten/unflatten against jax.tree_util."""
    from . import pytree

    print("  running pytree ...", file=sys.stderr, flush=True)
    rows = pytree.run(repeats=QUICK[0] if quick else FULL[0])
    print(
        "\npytree: fastdispatch.core.pytree against jax.tree_util, us per call "
        "(from fastdispatch/bench/pytree.py)"
    )
    print(pytree.format_table(rows))
    return rows
