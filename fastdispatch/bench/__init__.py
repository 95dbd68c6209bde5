"""The side-by-side dispatch benchmark: ``python -m fastdispatch bench``.

For each workload of ``dispatch.py``: microseconds per call of jax.jit,
fastdispatch.jit, the raw PjRt limit and equinox.filter_jit (when equinox is
installed), with the ratios of the design's hot-path budget.  ``runner.py``
times, ``report.py`` prints and writes.  Options::

    --only NAMES   comma-separated workload names or groups (dispatch, pytree); --list shows them
    --json FILE    all rows, samples and metadata
    --plot FILE    a bar chart (needs matplotlib)
    --quick        fewer, shorter repeats (~10 s instead of ~1 min on an idle 2-core machine)
    --distributed  instead: a data-parallel training step over jax.distributed, in
                   --processes processes (2) of --devices CPU devices (2) on loopback
                   (distributed.py)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys

import jax

from . import report
from .dispatch import WORKLOADS
from .runner import EQUINOX, FASTDISPATCH, implementations, run_workload

# (repeats, seconds per timed loop): full and --quick.
FULL = (21, 0.05)
QUICK = (7, 0.025)
GROUPS = {"dispatch": [w.name for w in WORKLOADS], "pytree": []}


def main(argv: list[str] | None = None, prog: str = "fastdispatch bench") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="NAMES", help="comma-separated workload names or groups")
    parser.add_argument("--json", metavar="FILE", help="write all rows and metadata as JSON")
    parser.add_argument("--plot", metavar="FILE", help="write a bar chart PNG (needs matplotlib)")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats (~10 s)")
    parser.add_argument("--list", action="store_true", help="list workloads and groups, then exit")
    parser.add_argument(
        "--distributed", action="store_true", help="the multi-process data-parallel step instead"
    )
    parser.add_argument("--processes", type=int, default=2, help="with --distributed: processes (2)")
    parser.add_argument("--devices", type=int, default=2, help="with --distributed: CPU devices each (2)")
    options = parser.parse_args(argv)
    if options.distributed:
        return _run_distributed(options, f"python -m {prog} {shlex.join(argv)}")
    if options.list:
        for w in WORKLOADS:
            print(f"{w.name:<22} {w.title}")
        print("groups: " + ", ".join(GROUPS))
        return 0
    try:
        workloads, pytree_group = select(options.only)
    except ValueError as e:
        parser.error(str(e))

    _request_cpu_devices(max(w.devices for w in WORKLOADS))
    repeats, target_s = QUICK if options.quick else FULL
    impls = implementations()
    meta = metadata(f"python -m {prog} {shlex.join(argv)}".rstrip(), impls, repeats, target_s)
    print(report.format_header(meta), flush=True)

    results = []
    for w in workloads:
        print(f"  running {w.name} ...", file=sys.stderr, flush=True)
        results.append(run_workload(w, impls, repeats, target_s))
    extra = {}
    if results:
        print()
        show_equinox = not any(impl.name == EQUINOX and impl.unavailable for impl in impls)
        print(report.format_table(results, show_equinox))
        print()
        print(report.format_summary(report.summary(results)))
    if pytree_group:
        extra["pytree"] = _run_pytree_group(options.quick)
    if options.json:
        report.write_json(options.json, report.to_json(results, meta, extra))
        print(f"\nJSON written to {options.json}")
    if options.plot:
        print(report.plot(results, options.plot))
    return 0


def select(only: str | None):
    """(dispatch workloads, whether the pytree group runs) for --only."""
    if not only:
        return list(WORKLOADS), True
    names = [name.strip() for name in only.split(",") if name.strip()]
    known = {w.name for w in WORKLOADS} | set(GROUPS)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown workload or group {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    wanted = set(names)
    for group in names:
        wanted.update(GROUPS.get(group, ()))
    return [w for w in WORKLOADS if w.name in wanted], "pytree" in wanted


def metadata(command: str, impls, repeats: int, target_s: float) -> dict:
    import jaxlib
    import numpy

    status = {impl.name: impl.unavailable or "available" for impl in impls}
    commit = _git_commit() if status[FASTDISPATCH] == "available" else ""
    if commit:
        status[FASTDISPATCH] = f"available (git {commit})"
    if status[EQUINOX] == "available":
        import equinox

        status[EQUINOX] = equinox.__version__
    return {
        "command": command,
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": numpy.__version__,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "devices": jax.device_count(),
        "backend": jax.default_backend(),
        "fastdispatch": status[FASTDISPATCH],
        "equinox": status[EQUINOX],
        "repeats": repeats,
        "seconds_per_loop": target_s,
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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


def _run_distributed(options, command: str) -> int:
    """distributed.py: launches the processes; this process starts no backend."""
    from . import distributed

    if options.only or options.plot:
        print("--only and --plot do not apply to --distributed", file=sys.stderr)
        return 2
    import jaxlib

    header = (
        f"fastdispatch bench --distributed | jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
        f"Python {platform.python_version()} | {cpu_model()} ({os.cpu_count()} cores) | "
        f"{options.processes} processes x {options.devices} CPU devices, gloo over loopback\n"
        f"command: {command}"
    )
    return distributed.main(options.quick, options.processes, options.devices, options.json, header)


def _run_pytree_group(quick: bool) -> list[dict]:
    """fastdispatch/bench/pytree.py: flatten/unflatten against jax.tree_util."""
    from . import pytree

    print("  running pytree ...", file=sys.stderr, flush=True)
    rows = pytree.run(repeats=QUICK[0] if quick else FULL[0])
    print(
        "\npytree: fastdispatch._pytree against jax.tree_util, us per call "
        "(from fastdispatch/bench/pytree.py)"
    )
    print(pytree.format_table(rows))
    return rows
