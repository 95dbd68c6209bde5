"""Time to the first result in a fresh process: ``bench --cold-start``.

Warm start (docs/warm-start.md) exists to shorten what a restarted program
waits for before its first step; jax's own persistent compilation cache is
what a user has without it.  Three train steps (cold_start_models.py: a flax
NNX transformer under ``jax.jit`` over split/merge, the same under
``nnx.jit``, an equinox MLP under ``filter_jit``) each run in fresh
processes, the modes alternating, a few repeats:

    no cache       stock python, no compilation cache (context)
    jax cache      stock python, jax's persistent compilation cache warm (a)
    fd filling     python -m fastdispatch --warm-start EMPTY (a normal compile
                   that writes the store: the steady-state reference)
    fd warm        python -m fastdispatch --warm-start STORE, filled earlier (b)

The fastdispatch modes set no cache of their own: warm start turns jax's
cache on underneath its store (docs/warm-start.md), empty with an empty
store, so that b is what a user of --warm-start gets.

Per program: the first call's seconds (just before it to its result ready),
median over the repeats; b/a (the target: at most 0.25); the mean us per
call of the steady-state calls that follow, warm against filling (a loaded
executable must be no slower); whether the warm runs loaded from the store
(their ``warm_start_stats()``), and if not, why.  Then one whole-process row:
the README's example under ``python -m fastdispatch --warm-start``, its
store empty against filled.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from .whole_programs import readme_example, run_once, selected, table

# (repeats, steady-state calls): full and --quick.
FULL = (3, 50)
QUICK = (1, 20)
MODELS = {
    "nnx-split": "NNX transformer, jax.jit over split/merge",
    "nnx-jit": "NNX transformer, nnx.jit",
    "eqx": "equinox MLP, filter_jit",
}
MODES = ("no cache", "jax cache", "fd filling", "fd warm")
# Settings that would let a run use a cache it should not: none reach a run
# unless its mode sets them.
_CACHE_VARIABLES = (
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
    "FASTDISPATCH_WARM_START",
)


def models_script() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "cold_start_models.py")


def clean_environment() -> dict:
    return {name: value for name, value in os.environ.items() if name not in _CACHE_VARIABLES}


def jax_cache_environment(cache: str) -> dict:
    """jax's persistent cache on, for every compile however short or small."""
    return clean_environment() | {
        "JAX_COMPILATION_CACHE_DIR": cache,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }


def compile_package_bytecode() -> None:
    """Writes fastdispatch's bytecode, as installing a wheel does.  In a
    checkout run under PYTHONDONTWRITEBYTECODE=1, every process would
    otherwise compile the package's Python source (about 0.1 s), a cost no
    installed copy has and stock's installed packages never pay."""
    import compileall

    compileall.compile_dir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), quiet=2)


def warm_start_argv(store: str) -> list[str]:
    return [sys.executable, "-m", "fastdispatch", "--warm-start", store]


def run_model(launcher: list[str], env: dict, model: str, calls: int, layers: int, label: str):
    """(the program's JSON line as a dict, or None; error or None): one process."""
    argv = [*launcher, models_script(), "--model", model, "--calls", str(calls), "--layers", str(layers)]
    _, out, error = run_once(argv, os.getcwd(), label, env)
    if error:
        return None, error
    try:
        return json.loads(out.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, f"{label} printed no result: {out.strip()[-200:]!r}"


def bench_model(model: str, repeats: int, calls: int, layers: int = 6) -> dict:
    """One program's row: its samples per mode, then ``summarize``."""
    samples = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="fd-cold-start-") as scratch:
        cache, store = os.path.join(scratch, "jax-cache"), os.path.join(scratch, "store")
        launchers = {
            "no cache": ([sys.executable], clean_environment()),
            "jax cache": ([sys.executable], jax_cache_environment(cache)),
            "fd warm": (warm_start_argv(store), clean_environment()),
        }
        # Fill jax's cache and the store first, untimed.
        for mode in ("jax cache", "fd warm"):
            _, error = run_model(*launchers[mode], model, calls, layers, f"{model}, filling for {mode}")
            if error:
                return {"program": model, "error": error, "samples": samples}
        for r in range(repeats):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                launcher, env = launchers.get(mode) or (
                    warm_start_argv(os.path.join(scratch, f"empty-{r}")),
                    clean_environment(),
                )
                sample, error = run_model(launcher, env, model, calls, layers, f"{model}, {mode}")
                if error:
                    return {"program": model, "error": error, "samples": samples}
                samples[mode].append(sample)
    return summarize(model, samples)


def summarize(model: str, samples: dict) -> dict:
    """Medians and ratios of one program's samples ({mode: [program output]})."""
    first = {mode: statistics.median(s["first_s"] for s in samples[mode]) for mode in MODES}
    steady = {mode: statistics.median(s["steady_us"] for s in samples[mode]) for mode in MODES}
    warm = [s["warm_start"] for s in samples["fd warm"]]
    loaded = [counts["loaded"] for counts in warm]
    not_stored = sorted({reason for counts in warm for reason in counts["not_stored"]})
    losses = {mode: {s["loss"] for s in samples[mode]} for mode in MODES}
    return {
        "program": model,
        "error": None,
        "samples": samples,
        "first_s": first,
        "steady_us": steady,
        "warm_over_jax_cache": first["fd warm"] / first["jax cache"],
        "steady_warm_over_filling": steady["fd warm"] / steady["fd filling"],
        "store_used": all(n > 0 for n in loaded),
        "loaded": loaded,
        "written": [s["warm_start"]["written"] for s in samples["fd filling"]],
        "not_stored": not_stored,
        "same_loss": len(set().union(*losses.values())) == 1,
    }


def bench_readme_example(path: str, repeats: int) -> dict:
    """Whole-process walls of the README's example under --warm-start: an
    empty store (a fresh one each run) against one filled before; then one
    untimed warm run under --trace, for the store's counts."""
    name = "README example (train_mlp.py)"
    samples = {"cold": [], "warm": []}
    stdout = {}
    env = clean_environment()
    with tempfile.TemporaryDirectory(prefix="fd-cold-start-") as scratch:
        store = os.path.join(scratch, "store")
        _, _, error = run_once([*warm_start_argv(store), path], os.getcwd(), f"{name}, filling", env)
        for r in range(repeats * 2 if not error else 0):
            mode = ("cold", "warm")[(r + r // 2) % 2]  # cold, warm, warm, cold, ...
            directory = store if mode == "warm" else os.path.join(scratch, f"empty-{r}")
            argv = [*warm_start_argv(directory), path]
            wall, out, error = run_once(argv, os.getcwd(), f"{name}, {mode}", env)
            if error:
                break
            samples[mode].append(wall)
            stdout.setdefault(mode, out)
        if error:
            return {"program": name, "error": error, "samples_s": samples}
        counts = traced_counts([*warm_start_argv(store), path], env)
    cold, warm = (statistics.median(samples[mode]) for mode in ("cold", "warm"))
    return {
        "program": name,
        "error": None,
        "samples_s": samples,
        "cold_wall_s": cold,
        "warm_wall_s": warm,
        "ratio": warm / cold,
        "warm_start": counts,
        "same_output": stdout["cold"] == stdout["warm"],
    }


def traced_counts(argv: list[str], env: dict) -> str:
    """The store's counts line of the --trace report of one run, e.g.
    "2 loaded, 0 missed, 0 written, 0 damaged, 0 evicted" (or why none)."""
    argv = [argv[0], "-m", "fastdispatch", "--trace", *argv[3:]]
    proc = subprocess.run(argv, cwd=os.getcwd(), env=env, capture_output=True, text=True, timeout=900)
    found = re.search(r"^warm start \(.*\): (.*)$", proc.stderr, re.MULTILINE)
    return found.group(1) if found else f"no warm start line (exit {proc.returncode})"


def _store_cell(row: dict) -> str:
    if row["store_used"]:
        return f"yes ({min(row['loaded'])} loaded)"
    return "no" if not any(row["loaded"]) else f"partly ({row['loaded']} loaded)"


def format_table(rows: list[dict], readme: dict | None, repeats: int, calls: int) -> str:
    head = [
        "program",
        "no cache s",
        "jax cache s (a)",
        "fd filling s",
        "fd warm s (b)",
        "b/a",
        "filling us/call",
        "warm us/call",
        "warm/filling",
        "store used",
    ]

    def title(row):
        return MODELS.get(row["program"], row["program"])

    def cells_of(row, notes):
        notes += [f"{title(row)}: {reason}" for reason in row["not_stored"]]
        if not any(row["loaded"]) and not any(row["written"]) and not row["not_stored"]:
            notes.append(
                f"{title(row)}: nothing loaded or written, no reason: its jit does not use the store"
            )
        if not row["same_loss"]:
            notes.append(f"{title(row)}: the loss after the steps differs between modes")
        first, steady = row["first_s"], row["steady_us"]
        return [
            *(f"{first[mode]:.2f}" for mode in MODES),
            f"{row['warm_over_jax_cache']:.2f}",
            f"{steady['fd filling']:.0f}",
            f"{steady['fd warm']:.0f}",
            f"{row['steady_warm_over_filling']:.2f}",
            _store_cell(row),
        ]

    legend = (
        f"s: the first call, just before it to its result ready, median of {repeats} fresh processes "
        f"(modes alternating); us/call: the mean of the {calls} calls after it; b/a target <= 0.25"
    )
    lines = [table(head, rows, cells_of, legend, title=title)]
    if readme is not None:
        lines.append("")
        if readme["error"]:
            lines.append(f"{readme['program']}: {readme['error']}")
        else:
            flag = "" if readme["same_output"] else "; stdout differs"
            lines.append(
                f"{readme['program']}, whole process under python -m fastdispatch --warm-start: "
                f"empty store {readme['cold_wall_s']:.2f} s, filled {readme['warm_wall_s']:.2f} s, "
                f"filled/empty {readme['ratio']:.2f} (median of {repeats}); "
                f"store: {readme['warm_start']}{flag}"
            )
    return "\n".join(lines)


README = "readme"


def main(quick: bool, json_path: str | None, header: str, only: str | None = None) -> int:
    """Runs the programs (``only``: some of MODELS and README) and prints the table."""
    names = selected([*MODELS, README], only, "--cold-start")
    if names is None:
        return 2
    repeats, calls = QUICK if quick else FULL
    print(header, flush=True)
    compile_package_bytecode()
    rows = []
    for model in (name for name in names if name in MODELS):
        print(f"  running {model} ...", file=sys.stderr, flush=True)
        rows.append(bench_model(model, repeats, calls))
    readme = None
    example = readme_example()
    if example is not None and README in names:
        print("  running the README example ...", file=sys.stderr, flush=True)
        readme = bench_readme_example(example, repeats)
    print("\ncold start: the first call in a fresh process, jax's persistent cache against warm start")
    print(format_table(rows, readme, repeats, calls))
    if json_path:
        from .report import write_json

        meta = {"command": header, "repeats": repeats, "calls": calls}
        write_json(json_path, {"metadata": meta, "cold_start": rows, "readme_example": readme})
        print(f"\nJSON written to {json_path}")
    errors = [row for row in [*rows, readme] if row is not None and row["error"]]
    return 1 if errors else 0
