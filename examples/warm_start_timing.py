"""Time to the first result of a train step in a fresh process: stock jax.jit
(cold, and with jax's persistent compilation cache warm) against
fastdispatch.jit with warm start (cold: filling the store; warm: loading it);
then the steady-state time per call after a warm start against after a
normal compile.  docs/warm-start.md shows its table.

    python examples/warm_start_timing.py            # runs every case, 3 times each
    python examples/warm_start_timing.py CASE DIR   # one case in this process (JSON)
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [32, 128, 128, 8]  # three dense layers
BATCH = 64
LEARNING_RATE = 0.01
CALLS = 3000


def one_case(case, directory):
    import jax
    import jax.numpy as jnp

    if case == "stock-cache":
        jax.config.update("jax_compilation_cache_dir", directory)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jit = jax.jit
    if case.startswith("fastdispatch"):
        import fastdispatch

        jit = fastdispatch.jit
        if case == "fastdispatch-warm":
            fastdispatch.warm_start(directory)

    def loss_fn(params, x, y):
        for i, (w, b) in enumerate(params):
            x = x @ w + b
            if i < len(params) - 1:
                x = jax.nn.relu(x)
        return jnp.mean((x - y) ** 2)

    @jit
    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), loss

    keys = jax.random.split(jax.random.key(0), 5)
    params = [
        (jax.random.normal(k, (m, n)) / m**0.5, jnp.zeros(n)) for k, m, n in zip(keys, SIZES[:-1], SIZES[1:])
    ]
    x = jax.random.normal(keys[3], (BATCH, SIZES[0]))
    y = jax.random.normal(keys[4], (BATCH, SIZES[-1]))
    jax.block_until_ready((params, x, y))

    start = time.perf_counter()
    params, loss = jax.block_until_ready(train_step(params, x, y))
    first = time.perf_counter() - start

    steps = {"this": train_step}
    loaded = None
    if case == "fastdispatch-warm":
        loaded = fastdispatch.warm_start_stats()["loaded"]
        fastdispatch.warm_start(None)
        # The same function compiled the usual way, in its own cache: timed
        # in turns with the loaded one, in this process.
        steps["compiled"] = fastdispatch.jit(train_step.fun, cache=fastdispatch.CompiledFunctionCache())
    rounds = {name: [] for name in steps}
    for _ in range(7):
        for name, step in steps.items():
            p = params
            start = time.perf_counter()
            for _ in range(CALLS // 7):
                p, loss = step(p, x, y)
            jax.block_until_ready(loss)
            rounds[name].append((time.perf_counter() - start) / (CALLS // 7) * 1e6)
    per_call = {name: statistics.median(times) for name, times in rounds.items()}
    return {"first_s": first, "per_call_us": per_call, "loss": float(loss), "loaded": loaded}


def run_case(case, directory):
    out = subprocess.run(
        [sys.executable, __file__, case, directory], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    import jax

    rows = {}
    for _ in range(3):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as store:
            samples = {
                "stock jax.jit, cold": run_case("stock", cache),
                "stock, persistent cache filling": run_case("stock-cache", cache),
                "stock, persistent cache warm": run_case("stock-cache", cache),
                "fastdispatch, no warm start": run_case("fastdispatch", store),
                "fastdispatch --warm-start, cold (filling)": run_case("fastdispatch-warm", store),
                "fastdispatch --warm-start, warm (loading)": run_case("fastdispatch-warm", store),
            }
        for name, sample in samples.items():
            rows.setdefault(name, []).append(sample)
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, median of 3 fresh processes each")
    print("| case | first call to its result | steady state per call |")
    print("| --- | ---: | ---: |")
    for name, samples in rows.items():
        first = statistics.median(s["first_s"] for s in samples) * 1e3
        per_call = statistics.median(s["per_call_us"]["this"] for s in samples)
        print(f"| {name} | {first:.1f} ms | {per_call:.1f} us |")
    warm = rows["fastdispatch --warm-start, warm (loading)"]
    assert all(s["loaded"] == 1 for s in warm)
    loaded = statistics.median(s["per_call_us"]["this"] for s in warm)
    compiled = statistics.median(s["per_call_us"]["compiled"] for s in warm)
    print(f"\nin the loading process, in turns: loaded {loaded:.1f} us per call, compiled {compiled:.1f} us")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(one_case(sys.argv[1], sys.argv[2])))
    else:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        main()
