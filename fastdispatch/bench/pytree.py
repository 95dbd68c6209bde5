"""Flatten and unflatten: fastdispatch.core.pytree against jax.tree_util, side by side.

Run: ``python -m fastdispatch.bench.pytree [--repeats N]``.

Each workload is timed for both libraries in the same run, repeats interleaved
(ours, jax, ours, jax, ...) so that machine noise hits both alike; the table
gives medians per call and the ratio ours/jax (below 1: we are faster).
Not a test: nothing here asserts; the numbers go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import platform
import statistics
import timeit

import jax
import jax.tree_util as jtu
import jaxlib
import numpy as np

from fastdispatch.bench.machine import cpu_model
from fastdispatch.core import pytree as _pytree


@jtu.register_dataclass
@dataclasses.dataclass
class Layer:
    """A registered dataclass as models use them: two arrays and a static name."""

    w: object
    b: object
    name: str = dataclasses.field(metadata=dict(static=True))


def workloads() -> dict:
    """name -> tree. Leaves are small numpy arrays (any non-container is a leaf).
    The same tree object is flattened on every call, as a training loop does."""
    w, b = np.ones((8, 8), np.float32), np.ones((8,), np.float32)
    return {
        "tuple, 10 leaves": tuple(np.float32(i) for i in range(10)),
        "flat dict, 200 keys": {f"key_{i}": np.float32(i) for i in range(200)},
        "param dict, 50 layers {w, b}": {f"layer_{i}": {"w": w, "b": b} for i in range(50)},
        "nested list, 1000 leaves": [[np.float32(j) for j in range(10)] for _ in range(100)],
        "list of 50 dataclasses": [Layer(w, b, f"layer_{i}") for i in range(50)],
    }


def cold_workloads() -> dict:
    """name -> a pool of trees flattened in turn (flatten only): the cases our
    caches help least. Both sides pay the same `next()` per call."""
    w, b = np.ones((8, 8), np.float32), np.ones((8,), np.float32)
    return {
        # Equal keys, but new str objects each call (dicts rebuilt with f-strings).
        "param dict, new key objects each call": [
            {f"layer_{i}": {"w": w, "b": b} for i in range(50)} for _ in range(64)
        ],
        # More distinct key sets than the key-order cache holds: every call sorts.
        "20-key dicts never seen before": [
            {f"key_{shape}_{i}": w for i in range(20)} for shape in range(1500)
        ],
    }


def _per_call(fn, number: int) -> float:
    return timeit.timeit(fn, number=number) / number


def _time_pair(ours, theirs, repeats: int) -> tuple[float, float]:
    # Calibrate the loop to ~2 ms per repeat on jax's side.
    number = max(1, int(2e-3 / max(_per_call(theirs, 20), 1e-9)))
    ours_times, jax_times = [], []
    for _ in range(repeats):
        ours_times.append(_per_call(ours, number))
        jax_times.append(_per_call(theirs, number))
    return statistics.median(ours_times), statistics.median(jax_times)


def _row(name, operation, leaves, ours_s, jax_s) -> dict:
    return {
        "workload": name,
        "operation": operation,
        "leaves": leaves,
        "fastdispatch_us": ours_s * 1e6,
        "jax_us": jax_s * 1e6,
        "ratio": ours_s / jax_s,
    }


def run(repeats: int = 15) -> list[dict]:
    """One row per (workload, operation): medians in microseconds and the ratio."""
    rows = []
    for name, tree in workloads().items():
        leaves, treedef = _pytree.flatten(tree)
        jax_leaves, jax_treedef = jtu.tree_flatten(tree)
        assert all(a is b for a, b in zip(leaves, jax_leaves))
        assert treedef.to_jax() == jax_treedef
        pairs = {
            "flatten": (lambda: _pytree.flatten(tree), lambda: jtu.tree_flatten(tree)),
            "unflatten": (
                lambda: treedef.unflatten(leaves),
                lambda: jtu.tree_unflatten(jax_treedef, jax_leaves),
            ),
        }
        for operation, (ours, theirs) in pairs.items():
            rows.append(_row(name, operation, treedef.num_leaves, *_time_pair(ours, theirs, repeats)))
    for name, pool in cold_workloads().items():
        ours_pool, jax_pool = itertools.cycle(pool), itertools.cycle(pool)
        rows.append(
            _row(
                name,
                "flatten",
                _pytree.flatten(pool[0])[1].num_leaves,
                *_time_pair(
                    lambda: _pytree.flatten(next(ours_pool)),
                    lambda: jtu.tree_flatten(next(jax_pool)),
                    repeats,
                ),
            )
        )
    return rows


def environment() -> str:
    return (
        f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
        f"Python {platform.python_version()}, numpy {np.__version__}, CPU: {cpu_model()}"
    )


def format_table(rows: list[dict]) -> str:
    """A Markdown table of `rows` as `run` returns them."""
    lines = [
        "| workload | operation | leaves | fastdispatch (us) | jax.tree_util (us) | ratio |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['workload']} | {row['operation']} | {row['leaves']} | "
            f"{row['fastdispatch_us']:.2f} | {row['jax_us']:.2f} | {row['ratio']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=15, help="interleaved repeats per measurement (medians are reported)"
    )
    args = parser.parse_args(argv)
    print(environment())
    print(f"command: python -m fastdispatch.bench.pytree --repeats {args.repeats}")
    print()
    print(format_table(run(repeats=args.repeats)))


if __name__ == "__main__":
    main()
