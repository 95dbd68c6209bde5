"""Runs one workload: checks every implementation against the group's reference
(jax.jit for the dispatch rows, equinox.filter_jit, flax.nnx.jit), then times them.

Fairness rules, all here:
- every implementation is called with the same argument shapes, so each times
  one compiled executable;
- each output is checked against the reference's (tree, shape, dtype, weak_type,
  sharding, values; other leaves by equality) before any timing; an
  implementation that differs is not timed; on a raising workload, the error
  (its type and message) is the output;
- warm-up calls run before timing; gc is off inside timed loops; time.perf_counter_ns;
- implementations are interleaved within each repeat (the starting one rotates),
  so that machine noise hits them alike, and ratios are medians over the paired
  repeats, never ratios of medians.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import importlib.util
import statistics
import time
from collections.abc import Callable

import jax
import numpy as np

from ..core import packing
from .raw import raw_runner
from .workload import Raised, Workload, quiet_stdout, raised

# Every group names its own implementation "fastdispatch", and the raw limit "raw".
FASTDISPATCH, RAW = "fastdispatch", "raw"


@dataclasses.dataclass(frozen=True)
class Impl:
    name: str
    wrap: Callable[[Workload], Callable] | None  # workload -> the callable to time
    unavailable: str = ""  # why it can't run at all in this process


@dataclasses.dataclass
class Result:
    workload: Workload
    reference: str = ""  # the implementation the ratios divide by
    calls: int = 0  # calls per timed loop
    samples: dict = dataclasses.field(default_factory=dict)  # impl -> [us per call, one per repeat]
    skipped: dict = dataclasses.field(default_factory=dict)  # impl -> why it has no timing
    error: str = ""  # why the whole row has no timing
    hand_offs: dict = dataclasses.field(
        default_factory=dict
    )  # fastdispatch.trace: reason -> calls of FED_BACK_CALLS
    raw_host_transfers: int = 0  # host leaves the raw limit puts on the device each call

    def median(self, name: str) -> float | None:
        return statistics.median(self.samples[name]) if name in self.samples else None

    def paired(self, f: Callable[..., float], *names: str) -> float | None:
        """Median over repeats of f(sample of each name, same repeat)."""
        if not all(name in self.samples for name in names):
            return None
        return statistics.median(f(*values) for values in zip(*(self.samples[n] for n in names)))

    def ratio(self, name: str = FASTDISPATCH) -> float | None:
        """time(name) / time(reference)."""
        return self.paired(lambda t, j: t / j, name, self.reference)

    def overhead_ratio(self) -> float | None:
        """(fastdispatch - raw) / (reference - raw): the share of the reference's overhead left."""
        return self.paired(lambda t, j, r: (t - r) / (j - r), FASTDISPATCH, self.reference, RAW)

    def above_raw(self) -> float | None:
        """fastdispatch - raw, in us per call."""
        return self.paired(lambda t, r: t - r, FASTDISPATCH, RAW)


def run_workload(w: Workload, impls: list[Impl], repeats: int, target_s: float) -> Result:
    """Checks, then times each available implementation and the raw limit on w;
    ``impls[0]`` is the reference the others are checked against."""
    reference = impls[0]
    result = Result(w, reference.name)
    if jax.device_count() < w.devices:
        result.error = (
            f"needs {w.devices} CPU devices, this process has {jax.device_count()} "
            "(run the benchmark in a fresh process: jax's backends had already started)"
        )
        return result
    if reference.unavailable:
        result.error = f"{reference.name} {reference.unavailable}"
        return result
    missing = [name for name in w.needs if importlib.util.find_spec(name) is None]
    if missing:
        result.error = f"needs {', '.join(missing)}: not installed"
        return result
    with quiet_stdout() if w.quiet else contextlib.nullcontext():
        _run_checked(w, impls, repeats, target_s, result)
    return result


def _run_checked(w: Workload, impls: list[Impl], repeats: int, target_s: float, result: Result) -> None:
    reference = impls[0]
    given = w.given() if w.given is not None else None
    try:
        reference_fn = given[reference.name] if given is not None else reference.wrap(w)
        expected = _outputs(w, reference_fn)
    except Exception as e:
        result.error = f"{reference.name} {_raised(e)}"
        return
    if w.raises and not isinstance(expected[1], Raised):
        result.error = f"{reference.name} did not raise: a raising workload times errors"
        return

    loops = {reference.name: _bind(w, reference_fn)}
    for impl in impls[1:]:
        if impl.unavailable:
            continue  # said once, in the report's header
        context = _trace_context() if w.traced and impl.name == FASTDISPATCH else None
        why = w.skip.get(impl.name, "")
        if not why and given is not None and impl.name not in given:
            why = "no such function"
        if not why:
            try:
                fn = given[impl.name] if given is not None else impl.wrap(w)
                first, fed_back = _outputs(w, fn, context)
                why = _difference(expected[0], first, reference.name) or _difference(
                    expected[1], fed_back, reference.name, label=f"output after {FED_BACK_CALLS} calls"
                )
            except Exception as e:
                why = _raised(e)
        if why:
            result.skipped[impl.name] = why
        else:
            loops[impl.name] = _bind(w, fn, context)
            if impl.name == FASTDISPATCH and not w.traced:
                result.hand_offs = _hand_offs(w, fn)
    why = "the calls raise: no executable runs" if w.raises else ""
    try:
        if not why:
            run, skip = (given[RAW], 0) if given is not None else (w.raw or jit_raw_runner)(w)
            raw_outputs = run()[skip:]
            why = _difference(_array_leaves(expected[0]), raw_outputs, reference.name, flat=True)
    except Exception as e:
        why = _raised(e)
    if why:
        result.skipped[RAW] = why
    else:
        loops[RAW] = _raw_loop(run, w.blocking)
        result.raw_host_transfers = getattr(run, "host_transfers", 0)

    result.calls = n = calls_per_loop(loops[reference.name], target_s)
    for name, loop in list(loops.items()):
        try:
            loop(max(1, n // 5))  # warm-up
        except Exception as e:
            result.skipped[name] = f"warm-up {_raised(e)}"
            del loops[name]
    packing.wait_for_packing()  # the steady state: an entry's packed variant compiled (accelerators)
    gc.collect()
    result.samples = time_interleaved(loops, n, repeats)


FED_BACK_CALLS = 3  # outputs are also checked after this many calls of the workload's loop


def _outputs(w: Workload, fn: Callable, context: Callable | None = None) -> tuple:
    """fn's output after one call and after a few calls of w's loop, each from fresh arguments
    (donated arguments are consumed by a call)."""
    with (context or contextlib.nullcontext)():
        args, kwargs = w.make_args()
        first = raised(fn, args, kwargs) if w.raises else fn(*args, **kwargs)
        args, kwargs = w.make_args()
        last = w.loop(fn, args, kwargs, FED_BACK_CALLS)[1]
    return first, last


def _hand_offs(w: Workload, fn: Callable) -> dict:
    """Why fastdispatch left its fast path, by reason: calls out of FED_BACK_CALLS (after
    the checks, so compiled already), as fastdispatch.trace counts them."""
    trace = _trace_context()
    if trace is None:
        return {}
    with trace() as t:
        args, kwargs = w.make_args()
        w.loop(fn, args, kwargs, FED_BACK_CALLS)
    counts = collections.Counter()
    for stats in t.stats().values():
        counts.update(stats.get("hand_offs", {}))
    return dict(counts)


def _raised(e: Exception) -> str:
    return f"raised {type(e).__name__}: {e}"


def _trace_context() -> Callable | None:
    """fastdispatch.trace, the context manager, when the tracing layer provides it."""
    import fastdispatch

    trace = getattr(fastdispatch, "trace", None)
    return trace if callable(trace) else None


def _bind(w: Workload, fn: Callable, context: Callable | None = None) -> Callable[[int], object]:
    """A loop(n) that calls fn n times on its own arguments, kept between loops."""
    args, kwargs = w.make_args()
    state = [args]
    context = context or contextlib.nullcontext

    def loop(n):
        with context():
            state[0], out = w.loop(fn, state[0], kwargs, n)
        return out

    return loop


def jit_raw_runner(w: Workload) -> tuple[Callable[[], list], int]:
    """raw_runner for w's jax.jit executable; donation dropped (the non-donated twin)."""
    options = {k: v for k, v in w.jit_options.items() if not k.startswith("donate_")}
    args, kwargs = w.make_args()
    compiled = jax.jit(w.fun, **options).lower(*args, **kwargs).compile()
    # raw_runner takes the dynamic arguments only.
    names = options.get("static_argnames") or ()
    names = {names} if isinstance(names, str) else set(names)
    nums = options.get("static_argnums")
    nums = {nums} if isinstance(nums, int) else set(nums or ())
    args = [a for i, a in enumerate(args) if i not in nums]
    kwargs = {k: v for k, v in kwargs.items() if k not in names}
    return raw_runner(compiled, args, kwargs, w.new_scalars, feed_back=w.feeds_back), 0


def _raw_loop(run: Callable[[], list], blocking: bool) -> Callable[[int], object]:
    if blocking:

        def loop(n):
            for _ in range(n):
                out = run()
                out[0].block_until_ready()
            return out
    else:

        def loop(n):
            for _ in range(n):
                out = run()
            return out

    return loop


def time_interleaved(loops: dict[str, Callable[[int], object]], n: int, repeats: int) -> dict[str, list]:
    """us per call of each loop of n calls, per repeat; the loops take turns within
    a repeat and the starting one rotates, so that machine noise hits them alike."""
    names = list(loops)
    samples = {name: [] for name in names}
    for r in range(repeats):
        start = r % len(names)
        for name in names[start:] + names[:start]:
            samples[name].append(time_loop(loops[name], n))
    return samples


def time_loop(loop: Callable[[int], object], n: int) -> float:
    """Microseconds per call of one loop of n calls, blocking once at the end."""
    gc.disable()
    try:
        start = time.perf_counter_ns()
        jax.block_until_ready(loop(n))
        stop = time.perf_counter_ns()
    finally:
        gc.enable()
    return (stop - start) / n / 1e3


MIN_CALLS = 10  # per timed loop, however slow the call, so that one stall doesn't make a sample


def calls_per_loop(loop: Callable[[int], object], target_s: float) -> int:
    """Calls that make one loop last about target_s (timeit's autorange, scaled)."""
    n = 1
    while True:
        total_s = time_loop(loop, n) * n / 1e6
        if total_s >= target_s / 5 or n >= 10**6:
            return max(MIN_CALLS, round(n * target_s / total_s))
        n *= 4


def _array_leaves(tree) -> list:
    return [leaf for leaf in jax.tree_util.tree_leaves(tree) if isinstance(leaf, jax.Array)]


def _difference(expected, got, reference: str, flat: bool = False, label: str = "output") -> str:
    """How got differs from the reference's expected output; "" when it doesn't.
    flat: got is a flat list of arrays (the raw runner's result), expected too."""
    if flat:
        paths_leaves = [((), leaf) for leaf in expected]
        got_leaves = list(got)
        if len(got_leaves) != len(paths_leaves):
            return f"{len(got_leaves)} {label} arrays, {reference} gives {len(paths_leaves)}"
    else:
        paths_leaves, tree = jax.tree_util.tree_flatten_with_path(expected)
        got_leaves, got_tree = jax.tree_util.tree_flatten(got)
        if got_tree != tree:
            return f"{label} tree {got_tree}, {reference} gives {tree}"
    for (path, e), g in zip(paths_leaves, got_leaves):
        where = f"{label}{jax.tree_util.keystr(path)}"
        if not isinstance(e, jax.Array):
            if type(g) is not type(e) or not (g is e or g == e):
                return f"{where} is {g!r}, {reference} gives {e!r}"
            continue
        if not isinstance(g, jax.Array):
            return f"{where} is a {type(g).__name__}, {reference} gives a jax.Array"
        e_aval, g_aval = jax.typeof(e), jax.typeof(g)
        for attr in ("shape", "dtype", "weak_type"):
            if getattr(e_aval, attr) != getattr(g_aval, attr):
                return f"{where} {attr} {getattr(g_aval, attr)}, {reference} gives {getattr(e_aval, attr)}"
        if g.sharding != e.sharding:
            return f"{where} sharding {g.sharding}, {reference} gives {e.sharding}"
        if not np.array_equal(_values(g), _values(e), equal_nan=True):
            return f"{where} values differ from {reference}'s"
    return ""


def _values(x: jax.Array) -> np.ndarray:
    if jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)
