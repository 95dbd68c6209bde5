"""Host data to device: each way jaxlib offers, timed side by side.

    python -m fastdispatch.bench.host [--repeats N]

What one numpy f32[64] array or one Python int costs to become a jax Array (or
an executable's input) by each route reachable from Python, and what jax.jit's
own C++ conversion costs, read as the difference between a call with that
argument on the host and the same call with it already on the device.  The
numbers behind fastdispatch's choices (docs/performance.md, "Host data").
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import jax
import jax.numpy as jnp
import numpy as np

from fastdispatch import _jax, device_put

from .runner import calls_per_loop, time_interleaved


def measure(routes: dict, repeats: int, target_s: float = 0.02) -> dict:
    """Median us per call of each route, interleaved repeats of ~target_s loops."""
    loops = {name: _calling(fn) for name, fn in routes.items()}
    n = calls_per_loop(next(iter(loops.values())), target_s)
    samples = time_interleaved(loops, n, repeats)
    return {name: statistics.median(values) for name, values in samples.items()}


def _calling(fn):
    """A loop(n) for the runner's timers: fn called n times, its last result returned."""

    def loop(n):
        for _ in range(n):
            out = fn()
        return out

    return loop


def routes() -> dict[str, dict]:
    device = jax.devices()[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    x_np = np.ones(64, np.float32)
    x_dev = jnp.asarray(x_np)
    y = jnp.ones(64, jnp.float32)
    aval = jax.typeof(x_dev)
    int_aval = _jax.python_scalar_aval(1)
    put = _jax.batched_device_put
    buffer = put(aval, sharding, [x_np], [device], False)
    add = jax.jit(lambda a, b: a + b)
    steps = itertools.count()
    cached = jnp.asarray(7)
    return {
        "numpy f32[64]": {
            "jax.jit(f)(x_numpy, y)": lambda: add(x_np, y),
            "jax.jit(f)(x_on_device, y)": lambda: add(x_dev, y),
            "batched_device_put": lambda: put(aval, sharding, [x_np], [device], False),
            "ArrayImpl constructor alone (no transfer)": lambda: _jax.ARRAY_TYPE(
                aval, sharding, [buffer], False, True
            ),
            "fastdispatch.device_put": lambda: device_put(x_np),
            "jnp.asarray": lambda: jnp.asarray(x_np),
            "jax.device_put": lambda: jax.device_put(x_np),
        },
        "Python int, new each call": {
            "jax.jit(f)(y, step)": lambda: add(y, next(steps)),
            "jax.jit(f)(y, on_device)": lambda: add(y, cached),
            "batched_device_put": lambda: put(int_aval, sharding, [next(steps)], [device], False),
            "fastdispatch.device_put": lambda: device_put(next(steps)),
            "jax.device_put": lambda: jax.device_put(next(steps)),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fastdispatch.bench.host", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--repeats", type=int, default=15)
    options = parser.parse_args(argv)
    print(f"jax {jax.__version__}, us per call, medians of {options.repeats} interleaved repeats")
    for group, group_routes in routes().items():
        print(f"\n{group}")
        for name, us in measure(group_routes, options.repeats).items():
            print(f"  {name:<44} {us:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
