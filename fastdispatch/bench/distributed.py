"""The multi-process row: a data-parallel training step under ``jax.distributed``,
jax.jit, fastdispatch.jit and the raw PjRt call side by side in every process.

    python -m fastdispatch bench --distributed [--quick] [--processes N] [--devices D] [--json FILE]

``main`` starts the processes on loopback (``fastdispatch.distributed.launch``);
each runs this module as ``worker()``: it joins the job, builds global arrays
over every process's devices, checks that fastdispatch's outputs equal
jax.jit's bit for bit and that its calls stay on the fast path, then times the
three.  Every process makes the same calls in the same order (each call is a
collective: a process that called a different number of times would wait for
the others forever), so the loops have fixed lengths, never timeit's autorange.

Two numbers per implementation: ``call``, the median time for a call to return
(dispatch, while the executable runs asynchronously), and ``step``, the wall
time per step of a loop that blocks every ``SYNC_EVERY`` steps (the gloo
all-reduce over loopback costs milliseconds and dominates it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import fastdispatch
from fastdispatch.distributed import initialize, launch

from . import report
from .raw import raw_runner

RESULT_MARK = "FASTDISPATCH-BENCH-RESULT "

# jax deadlocks when more than ~32 multi-process steps are queued per device
# and a process has at least as many CPU devices as cores (docs/distributed.md):
# every loop here blocks at least this often.
SYNC_EVERY = 16

BATCH, FEATURES, HIDDEN = 256, 16, 32  # global batch rows, input width, hidden width
LEARNING_RATE = 0.05  # a Python float: on fastdispatch's fast path as a scalar input

# (repeats, steps per timed loop): full and --quick.  Loops are whole multiples of SYNC_EVERY.
FULL = (15, 64)
QUICK = (5, 32)


# -- the workload (the distributed tests run it too) --


def loss(params, x, y):
    """Mean squared error of a two-layer tanh MLP."""
    hidden = jnp.tanh(x @ params["layer0"]["w"] + params["layer0"]["b"])
    out = hidden @ params["layer1"]["w"] + params["layer1"]["b"]
    return jnp.mean((out[:, 0] - y) ** 2)


def train_step(params, x, y, lr):
    """One SGD step on the global batch: XLA all-reduces the gradients."""
    value, grads = jax.value_and_grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), value


def problem(mesh, process_id: int, num_processes: int, rows: int = BATCH):
    """(params, x, y): params replicated on every device of ``mesh``, the batch's
    rows split over them; each process supplies its own rows (the same
    deterministic data set in every process, sliced)."""
    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    y_all = np.sin(x_all @ rng.normal(size=FEATURES)).astype(np.float32)
    shapes = {"layer0": (FEATURES, HIDDEN), "layer1": (HIDDEN, 1)}
    replicated, by_rows = NamedSharding(mesh, P()), NamedSharding(mesh, P(mesh.axis_names[0]))
    params = {
        name: {
            "w": jax.make_array_from_process_local_data(
                replicated, (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
            ),
            "b": jax.make_array_from_process_local_data(replicated, np.zeros(shape[1], np.float32)),
        }
        for name, shape in shapes.items()
    }
    lo, hi = process_id * rows // num_processes, (process_id + 1) * rows // num_processes
    x = jax.make_array_from_process_local_data(by_rows, x_all[lo:hi])
    y = jax.make_array_from_process_local_data(by_rows, y_all[lo:hi])
    return params, x, y


def train(step, params, x, y, steps: int, lr: float = LEARNING_RATE):
    """``steps`` steps from ``params``; blocks every SYNC_EVERY steps.
    Returns the last params and the loss of every step."""
    losses = []
    for i in range(steps):
        params, value = step(params, x, y, lr)
        losses.append(value)
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            value.block_until_ready()
    losses[-1].block_until_ready()
    return params, losses


# -- one process ---------------------------------------------------------------------


def worker(repeats: int, steps: int) -> None:
    """Join the job, check, time; print the result as one marked JSON line."""
    process_id, num_processes = initialize()

    mesh = Mesh(np.array(jax.devices()), ("data",))
    params, x, y = problem(mesh, process_id, num_processes)
    reference = jax.jit(train_step)
    ours = fastdispatch.jit(train_step)

    # Checks: the same outputs, bit for bit, and the fast path after the first call.
    expected = train(reference, params, x, y, SYNC_EVERY)
    with fastdispatch.trace() as t:
        got = train(ours, params, x, y, SYNC_EVERY)
    (stats,) = t.stats().values()
    problems = _differences(expected, got)
    if stats["compiles"] != 1 or stats["hand_offs"] or stats["hits"] != SYNC_EVERY - 1:
        problems.append(f"fastdispatch left its fast path: {stats}")

    compiled = reference.lower(params, x, y, LEARNING_RATE).compile()
    run_raw = raw_runner(compiled, (params, x, y, LEARNING_RATE))

    def raw(params, x, y, lr):  # the first call's inputs every time: the floor
        return params, run_raw()[-1]  # the loss is the last output

    loops = {"jax.jit": reference, "fastdispatch": ours, "raw": raw}
    samples = {name: {"call": [], "step": []} for name in loops}
    names = list(loops)
    for name in names:  # warm-up
        _timed_loop(loops[name], params, x, y, steps)
    for r in range(repeats):
        start = r % len(names)
        for name in names[start:] + names[:start]:
            call_us, step_us = _timed_loop(loops[name], params, x, y, steps)
            samples[name]["call"].append(call_us)
            samples[name]["step"].append(step_us)
    result = {
        "process": process_id,
        "processes": num_processes,
        "local_devices": jax.local_device_count(),
        "devices": jax.device_count(),
        "problems": problems,
        "fast_path": stats,
        "samples_us": samples,
    }
    print(RESULT_MARK + json.dumps(result), flush=True)


def _timed_loop(fn, params, x, y, steps):
    """(median us for a call to return, wall us per step) over ``steps`` steps."""
    returns = []
    value = None
    start = time.perf_counter_ns()
    for i in range(steps):
        before = time.perf_counter_ns()
        params, value = fn(params, x, y, LEARNING_RATE)
        returns.append(time.perf_counter_ns() - before)
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            value.block_until_ready()
    value.block_until_ready()
    wall = time.perf_counter_ns() - start
    return statistics.median(returns) / 1e3, wall / steps / 1e3


def _differences(expected, got) -> list[str]:
    """Where fastdispatch's (params, losses) differ from jax.jit's: shardings,
    avals and this process's shards, bit for bit."""
    out = []
    flat_e, tree_e = jax.tree_util.tree_flatten_with_path(expected)
    flat_g, tree_g = jax.tree_util.tree_flatten(got)
    if tree_e != tree_g:
        return [f"output tree {tree_g}, jax.jit gives {tree_e}"]
    for (path, e), g in zip(flat_e, flat_g):
        where = "output" + jax.tree_util.keystr(path)
        if e.aval != g.aval or e.sharding != g.sharding:
            out.append(f"{where}: {g.aval} on {g.sharding}, jax.jit gives {e.aval} on {e.sharding}")
            continue
        for se, sg in zip(e.addressable_shards, g.addressable_shards):
            if se.index != sg.index or not np.array_equal(np.asarray(se.data), np.asarray(sg.data)):
                out.append(f"{where}: the shard on {sg.device} differs from jax.jit's")
    return out


# -- the launcher side -----------------------------------------------------------------


def main(quick: bool, processes: int, devices: int, json_path: str | None, header: str) -> int:
    """Launch the workers, then print one row per process (and write JSON)."""
    repeats, steps = QUICK if quick else FULL
    argv = [sys.executable, "-m", "fastdispatch.bench.distributed", str(repeats), str(steps)]
    print(header, flush=True)
    print(f"  running {processes} processes x {devices} CPU devices on loopback ...", file=sys.stderr)
    run = launch(argv, processes, cpu_devices=devices, timeout=300)
    results = []
    for p in run.processes:
        for line in p.stdout.splitlines():
            if line.startswith(RESULT_MARK):
                results.append(json.loads(line[len(RESULT_MARK) :]))
    if not run.ok or len(results) != processes:
        print(f"the distributed benchmark failed:\n{run.summary()}", file=sys.stderr)
        for p in run.processes:
            print(f"--- process {p.process_id} stderr (tail):\n{p.stderr[-3000:]}", file=sys.stderr)
        return 1
    print()
    print(format_rows(results, repeats, steps))
    if json_path:
        report.write_json(json_path, {"command": header, "repeats": repeats, "steps": steps, "rows": results})
        print(f"\nJSON written to {json_path}")
    return 0 if not any(r["problems"] for r in results) else 1


def paired_ratio(samples: dict, kind: str) -> float:
    """Median over repeats of fastdispatch / jax.jit, each pair from one repeat."""
    return statistics.median(f / j for f, j in zip(samples["fastdispatch"][kind], samples["jax.jit"][kind]))


def format_rows(results: list[dict], repeats: int, steps: int) -> str:
    first = results[0]
    lines = [
        f"data-parallel step: 2-layer MLP (params dict, lr a Python float), global batch "
        f"{BATCH}x{FEATURES} over {first['devices']} devices of {first['processes']} processes; "
        f"SGD with gradients all-reduced by XLA (gloo)",
        f"us, median of {repeats} interleaved repeats of {steps}-step loops that block every "
        f"{SYNC_EVERY} steps; call = time for a call to return, step = wall time per step",
    ]
    head = ["process", "jax.jit call", "fastdispatch call", "raw call", "fd/jax call"]
    head += ["jax.jit step", "fastdispatch step", "fd/jax step"]
    rows = []
    for r in results:
        s = r["samples_us"]

        def med(name, kind, s=s):
            return f"{statistics.median(s[name][kind]):.1f}"

        rows.append(
            [
                f"{r['process']} of {r['processes']}",
                med("jax.jit", "call"),
                med("fastdispatch", "call"),
                med("raw", "call"),
                f"{paired_ratio(s, 'call'):.3f}",
                med("jax.jit", "step"),
                med("fastdispatch", "step"),
                f"{paired_ratio(s, 'step'):.3f}",
            ]
        )
    widths = [max(len(row[i]) for row in [head] + rows) for i in range(len(head))]
    for row in [head] + rows:
        cells = [cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells))
    for r in results:
        fast = r["fast_path"]
        lines.append(
            f"process {r['process']}: fastdispatch {fast['hits']} hits, {fast['compiles']} compile, "
            f"hand-offs {fast['hand_offs'] or 'none'} over its {fast['calls']} checked calls"
        )
        lines += [f"process {r['process']}: PROBLEM: {problem}" for problem in r["problems"]]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="one process of the distributed benchmark")
    parser.add_argument("repeats", type=int)
    parser.add_argument("steps", type=int)
    options = parser.parse_args()
    worker(options.repeats, options.steps)
