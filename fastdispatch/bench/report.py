"""The benchmark's outputs: the text table with its summary, the JSON file, the plot."""

from __future__ import annotations

import json
import math

from .runner import FASTDISPATCH, FED_BACK_CALLS, RAW, Result

# The hot-path budget (docs/architecture.md, "Speed budget").
GEOMEAN_TARGET = 0.8  # geometric mean of fastdispatch/jax.jit
MAX_TARGET = 1.0  # never slower than jax.jit
OVERHEAD_TARGET = 0.25  # (fd - raw) / (jax - raw) on pytree-heavy calls
ABOVE_RAW_TARGET_US = 0.5  # fixed cost per call above the raw limit
HAND_OFF_TARGET_US = 1.0  # a hand-off to jax.jit (hand_off rows): fastdispatch - jax.jit
HOST_DATA_TARGET = 1.2  # fastdispatch / raw, where raw puts the row's host data each call
# Rows whose numpy data repeats every call, and fastdispatch / jax.jit there.
REPEATED_HOST_DATA = ("numpy_repeated",)
REPEATED_HOST_DATA_TARGET = 0.8
# 100+ leaves.  Not sgd_donated: its raw limit is the non-donated twin's, which allocates
# the outputs that donation saves, so its overhead ratio reads low.
PYTREE_HEAVY = ("positional_200", "sgd_params", "adam_step")
TWO_ARRAYS = "two_arrays"


def format_header(meta: dict) -> str:
    lines = [
        f"fastdispatch bench | jax {meta['jax']}, jaxlib {meta['jaxlib']}, Python {meta['python']} | "
        f"{meta['cpu']} ({meta['cores']} cores), {meta['devices']} CPU devices",
        f"command: {meta['command']}",
        f"fastdispatch git {meta['fastdispatch_commit'] or '?'}"
        + "".join(f", {name} {version}" for name, version in meta["versions"].items()),
        f"us per call, median of {meta['repeats']} interleaved repeats; "
        "ratios are medians of paired repeats; "
        "loops dispatch only and block once at the end, unless marked 'block every call'",
    ]
    return "\n".join(lines)


def format_table(results: list[Result], impls: list[str]) -> str:
    """One row per workload: us per call of each implementation (the first is
    the reference) and of the raw limit, each one's ratio to the reference,
    and fastdispatch's overhead ratio."""
    reference, others = impls[0], impls[1:]
    columns = [*impls, RAW]
    head = ["workload", "calls/loop", *columns]
    head += [f"{_short(name)}/{_short(reference)}" for name in others] + ["overhead"]
    rows = []
    notes = []
    for res in results:
        w = res.workload
        if res.error:
            rows.append([w.title] + ["-"] * (len(head) - 1))
            notes.append(f"{w.name}: {res.error}")
            continue
        cells = [w.title, str(res.calls)]
        cells += [_num(res.median(name)) for name in columns]
        cells += [_num(res.ratio(name)) for name in others] + [_num(res.overhead_ratio())]
        rows.append(cells)
        if w.note:
            notes.append(f"{w.name}: {w.note}")
        if res.hand_offs:
            reasons = ", ".join(
                f"{why!r} on {calls} of {FED_BACK_CALLS} calls" for why, calls in res.hand_offs.items()
            )
            notes.append(f"{w.name}: fastdispatch left its fast path: {reasons}")
        if w.hand_off and FASTDISPATCH in res.samples and w.hand_off not in res.hand_offs:
            notes.append(f"{w.name}: EXPECTED fastdispatch to hand off for {w.hand_off!r}")
        for name, why in res.skipped.items():
            notes.append(f"{w.name}: {name} not timed: {why}")
    widths = [max(len(row[i]) for row in [head] + rows) for i in range(len(head))]
    lines = ["  ".join(_pad(c, widths[i], i) for i, c in enumerate(row)) for row in [head] + rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(
        f"overhead = (fastdispatch - raw) / ({reference} - raw); raw = the bare PjRt call on prepared"
    )
    lines.append(
        "  leaves, through fastdispatch.bench.raw.raw_runner's closure (one Python frame, ~0.1 us here);"
    )
    lines.append(
        "  host data (numpy leaves, a step counter) put on the device every call, one batched_device_put each"
    )
    lines += [f"  {note}" for note in notes]
    return "\n".join(lines)


def _short(name: str) -> str:
    return {FASTDISPATCH: "fd"}.get(name, name)


def dispatch_summary(results: list[Result]) -> list[dict]:
    """The hot-path budget's numbers: each {name, value, target, ok}; value None
    when not measured."""
    by_name = {res.workload.name: res for res in results if not res.error}
    ratios = {
        n: r.ratio()
        for n, r in by_name.items()
        if not r.workload.traced and not r.workload.hand_off and r.ratio() is not None
    }
    items = []
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
        worst = max(ratios, key=ratios.get)
        items.append(
            _item(f"geomean fastdispatch/jax.jit over {len(ratios)} workloads", geomean, GEOMEAN_TARGET)
        )
        items.append(_item(f"max fastdispatch/jax.jit ({worst})", ratios[worst], MAX_TARGET))
    else:
        items.append(_item("geomean fastdispatch/jax.jit", None, GEOMEAN_TARGET))
        items.append(_item("max fastdispatch/jax.jit", None, MAX_TARGET))
    for name in PYTREE_HEAVY:
        if name in by_name:
            items.append(
                _item(
                    f"overhead ratio, {by_name[name].workload.title}",
                    by_name[name].overhead_ratio(),
                    OVERHEAD_TARGET,
                )
            )
    if TWO_ARRAYS in by_name:
        items.append(
            _item(
                "two-array overhead above the raw limit, us",
                by_name[TWO_ARRAYS].above_raw(),
                ABOVE_RAW_TARGET_US,
            )
        )
    # Host data: the floor of a call fed from the host is the raw call plus the
    # transfer of that data, not the raw call on leaves already on the device.
    for res in by_name.values():
        if res.raw_host_transfers:
            items.append(
                _item(
                    f"host data, {res.workload.name}: fd / (raw + {res.raw_host_transfers} transfers)",
                    res.paired(lambda f, r: f / r, FASTDISPATCH, RAW),
                    HOST_DATA_TARGET,
                )
            )
    # Numpy data that repeats: fastdispatch reuses its device arrays where
    # jax.jit transfers it again every call.
    for name in REPEATED_HOST_DATA:
        if name in by_name:
            items.append(
                _item(
                    f"host data that repeats, {name}: fd / jax.jit",
                    by_name[name].ratio(),
                    REPEATED_HOST_DATA_TARGET,
                )
            )
    # Hand-offs: jax.jit runs the call, so the ratio targets can't apply; what
    # fastdispatch may add is the time to decide.
    for res in by_name.values():
        if res.workload.hand_off:
            above = res.paired(lambda f, j: f - j, FASTDISPATCH, res.reference)
            items.append(
                _item(
                    f"hand-off {res.workload.hand_off!r}, {res.workload.name}: fd - jax.jit, us",
                    above,
                    HAND_OFF_TARGET_US,
                )
            )
    return items


# The equinox front end's goals: fd/eqx on the tiny forward pass,
# overhead above raw against equinox's on every row, fd/eqx on the training step.
EQX_FORWARD_TARGET, EQX_OVERHEAD_TARGET, EQX_STEP_TARGET = 0.2, 0.15, 0.6


def equinox_summary(results: list[Result]) -> list[dict]:
    """The equinox group's goals, as dispatch_summary gives the budget's."""
    by_name = {res.workload.name: res for res in results if not res.error}
    items = []
    if "eqx_forward" in by_name:
        items.append(_item("fd/eqx, tiny MLP forward", by_name["eqx_forward"].ratio(), EQX_FORWARD_TARGET))
    if "eqx_train_step" in by_name:
        items.append(_item("fd/eqx, MLP training step", by_name["eqx_train_step"].ratio(), EQX_STEP_TARGET))
    for res in by_name.values():
        items.append(
            _item(f"overhead ratio, {res.workload.title}", res.overhead_ratio(), EQX_OVERHEAD_TARGET)
        )
    return items


# The NNX front end's goals: fd/nnx.jit on the MLP + Adam step, and
# faster than tree mode and than cached_partial on every row (through cached_partial too).
NNX_STEP_TARGET = 0.25


def nnx_summary(results: list[Result]) -> list[dict]:
    """The flax group's goals, as dispatch_summary gives the budget's."""
    by_name = {res.workload.name: res for res in results if not res.error}
    items = []
    if "nnx_mlp_adam" in by_name:
        items.append(_item("fd/nnx.jit, MLP + Adam step", by_name["nnx_mlp_adam"].ratio(), NNX_STEP_TARGET))
    for res in by_name.values():
        for other in ("nnx.jit(graph=False)", "nnx.cached_partial"):
            ratio = res.paired(lambda f, o: f / o, FASTDISPATCH, other)
            items.append(_item(f"fd/{other}, {res.workload.title}", ratio, 1.0))
        # fastdispatch.nnx.jit through cached_partial, against flax's.
        ratio = res.paired(lambda f, o: f / o, "fd cached_partial", "nnx.cached_partial")
        items.append(_item(f"fd cached_partial/nnx.cached_partial, {res.workload.title}", ratio, 1.0))
    return items


def format_summary(items: list[dict]) -> str:
    width = max(len(item["name"]) for item in items)
    lines = []
    for item in items:
        value = "n/a" if item["value"] is None else f"{item['value']:.3f}"
        verdict = "" if item["ok"] is None else ("ok" if item["ok"] else "MISSED")
        lines.append(f"{item['name']:<{width}}  {value:>7}  (target <= {item['target']})  {verdict}")
    return "\n".join(lines)


def to_json(results: list[Result], meta: dict, summaries: dict, extra: dict | None = None) -> dict:
    """All rows, the metadata and each group's summary items, as one JSON object."""
    rows = []
    for res in results:
        w = res.workload
        rows.append(
            {
                "name": w.name,
                "title": w.title,
                "reference": res.reference,
                "note": w.note,
                "error": res.error,
                "calls_per_loop": res.calls,
                "us_per_call": {name: res.median(name) for name in res.samples},
                "samples_us": res.samples,
                "skipped": res.skipped,
                "fastdispatch_hand_offs": res.hand_offs,
                "ratios_to_reference": {name: res.ratio(name) for name in res.samples},
                "fastdispatch_over_reference": res.ratio(),
                "overhead_ratio": res.overhead_ratio(),
                "fastdispatch_above_raw_us": res.above_raw(),
                "raw_host_transfers": res.raw_host_transfers,
            }
        )
    return {"metadata": meta, "rows": rows, "summary": summaries, **(extra or {})}


def write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def plot(results: list[Result], path: str) -> str:
    """Writes a bar chart of us per call; returns what it did, in one line."""
    results = [res for res in results if not res.error]
    if not results:
        return "--plot: no dispatch rows to plot"
    try:
        import matplotlib
    except ImportError:
        return "--plot: matplotlib is not installed, no plot written (pip install matplotlib)"
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    impls = list(dict.fromkeys(name for r in results for name in r.samples))
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 0.45 * len(results) + 1.5), sharey=True, gridspec_kw={"width_ratios": [3, 1]}
    )
    height = 0.8 / len(impls)
    for i, name in enumerate(impls):
        ys = [row + i * height for row in range(len(results))]
        left.barh(ys, [res.median(name) or 0 for res in results], height, label=name)
    left.set_xscale("log")
    left.set_xlabel("us per call (log)")
    left.set_yticks(
        [row + 0.4 - height / 2 for row in range(len(results))], [r.workload.title for r in results]
    )
    left.invert_yaxis()
    left.legend()
    right.barh(
        [row + 0.4 - height / 2 for row in range(len(results))],
        [r.ratio() or 0 for r in results],
        0.6,
        color=f"C{impls.index(FASTDISPATCH)}" if FASTDISPATCH in impls else None,
    )
    right.axvline(MAX_TARGET, color="k", lw=0.8)
    right.axvline(GEOMEAN_TARGET, color="k", lw=0.8, ls="--")
    right.set_xlabel(f"fastdispatch / {results[0].reference}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"


def _item(name: str, value: float | None, target: float) -> dict:
    return {"name": name, "value": value, "target": target, "ok": None if value is None else value <= target}


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.0f}"


def _pad(cell: str, width: int, column: int) -> str:
    return cell.ljust(width) if column == 0 else cell.rjust(width)
