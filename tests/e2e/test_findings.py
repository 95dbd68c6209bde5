"""``--trace`` findings end to end: a small program with one problem planted on
a known line (marked ``# PLANTED``), run under
``python -m fastdispatch --trace --trace-json``, must be reported at that line
with the right kind; a clean training loop must have no finding at all.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from frontends import needs_equinox, needs_flax


def run_prog(tmp_path, *options, env=None):
    """Run tmp_path/prog.py under ``python -m fastdispatch [options]`` (with
    ``env`` added to the environment); the finished process, which must have
    exited 0."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-m", "fastdispatch", *options, "prog.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def run_traced(tmp_path, source, env=None):
    """Run ``source`` as prog.py under --trace and --trace-json; return
    (the JSON report, stderr, the planted line number)."""
    source = textwrap.dedent(source)
    (tmp_path / "prog.py").write_text(source)
    planted = [i for i, line in enumerate(source.splitlines(), 1) if "# PLANTED" in line]
    proc = run_prog(tmp_path, "--trace", "--trace-json", "report.json", env=env)
    report = json.loads((tmp_path / "report.json").read_text())
    return report, proc.stderr, planted[0] if planted else None


def eager_finding_at(report, line):
    """The eager-op finding at ``line``; every other one costs its share of the wall."""
    from fastdispatch.tracing.findings import MIN_EAGER_SHARE

    traced = report["wall_seconds"] - report["split"]["start_up"]
    found = [f for f in report["findings"] if f["kind"] == "eager_ops"]
    assert all(f["seconds"] >= MIN_EAGER_SHARE * traced for f in found), found
    (finding,) = [f for f in found if f["line"] == line]
    return finding


def only_finding(report, kind):
    found = [f for f in report["findings"] if f["kind"] == kind]
    assert len(found) == 1, report["findings"]
    finding = found[0]
    assert set(finding) >= {"kind", "file", "line", "count", "seconds", "message"}
    assert finding["file"] == "prog.py"
    return finding


@needs_flax
def test_nnx_module_rebuilt_each_epoch_names_the_attribute(tmp_path):
    report, stderr, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp
        from flax import nnx


        class Model(nnx.Module):
            def __init__(self, rngs):
                self.linear = nnx.Linear(4, 4, rngs=rngs)
                self.act = lambda x: jax.nn.relu(x)

            def __call__(self, x):
                return self.act(self.linear(x))


        @nnx.jit
        def step(model, x):
            return jnp.sum(model(x))


        x = jnp.ones((2, 4))
        for epoch in range(4):
            model = Model(nnx.Rngs(0))
            for _ in range(3):
                loss = step(model, x)  # PLANTED
        """,
    )
    finding = only_finding(report, "recompile_new_object")
    assert finding["line"] == line and finding["count"] == 3
    assert "model.act" in finding["message"] and "prog.py:9" in finding["message"]
    # The explanation names the attribute, never a repr of the whole graph.
    assert "model.act: a new object of the same kind" in stderr
    assert "GraphDef(" not in stderr
    (row,) = [r for r in report["executables"] if r["function"].startswith("step ")]
    assert row["kept"] == 4 and row["identity_only"] == 3
    assert row["memory_bytes"] > 0
    assert "differ only by object identity" in stderr


def test_static_argument_new_lambda(tmp_path):
    report, stderr, line = run_traced(
        tmp_path,
        """\
        import functools

        import jax
        import jax.numpy as jnp


        @functools.partial(jax.jit, static_argnums=0)
        def apply(f, x):
            return f(x)


        x = jnp.ones(3)
        for _ in range(3):
            apply(lambda v: v * 2, x)  # PLANTED
        """,
    )
    finding = only_finding(report, "recompile_new_object")
    assert finding["line"] == line and finding["count"] == 2
    assert "f held a new object" in finding["message"]


def test_filter_jit_names_the_equinox_static_field(tmp_path):
    report, stderr, line = run_traced(
        tmp_path,
        """\
        import equinox as eqx
        import jax
        import jax.numpy as jnp


        class Block(eqx.Module):
            w: jax.Array
            f: object = eqx.field(static=True)


        @eqx.filter_jit
        def step(block, x):
            return jnp.sum(block.f(block.w * x))


        x = jnp.ones(3)
        for epoch in range(3):
            block = Block(jnp.ones(3), lambda v: v + 1)
            step(block, x)  # PLANTED
        """,
    )
    finding = only_finding(report, "recompile_new_object")
    assert finding["line"] == line and finding["count"] == 2
    # By field name, where the pytree holds it by position.
    assert "block.f held a new object" in finding["message"] and "prog.py:18" in finding["message"]
    assert "block.f: a new object of the same kind" in stderr and "block[1]" not in stderr


def test_shape_churn_names_the_argument(tmp_path):
    report, _, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp


        @jax.jit
        def total(tokens):
            return jnp.sum(tokens * 2)


        for length in (3, 5, 7, 9, 3, 5):
            total(jnp.ones(length))  # PLANTED
        """,
    )
    finding = only_finding(report, "shape_churn")
    assert finding["line"] == line and finding["count"] == 3
    assert "tokens" in finding["message"] and "pad" in finding["message"]


def test_new_wrapper_names_the_line_that_made_it(tmp_path):
    report, _, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp


        x = jnp.ones(3)
        for _ in range(4):
            step = jax.jit(lambda v: v * 2)  # PLANTED
            x = step(x)
        """,
    )
    finding = only_finding(report, "new_wrapper")
    assert finding["line"] == line and finding["count"] == 3
    assert "new jit wrapper" in finding["message"]


def test_host_sync_every_step(tmp_path):
    report, stderr, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp


        @jax.jit
        def step(w):
            return w * 0.99, jnp.sum(w)


        w = jnp.ones(8)
        losses = []
        for _ in range(30):
            w, loss = step(w)
            losses.append(float(loss))  # PLANTED
        """,
    )
    finding = only_finding(report, "host_sync")
    assert finding["line"] == line and finding["count"] == 30
    assert "float()" in finding["message"]
    assert report["split"]["host_syncs"] > 0
    assert "blocked on host syncs" in stderr
    # Charged to the function whose output each read waited for: all but the
    # first (its compile's call returned through jax.jit).
    (step,) = report["functions"]
    assert finding["function"].startswith("step (") and step["host_syncs"] == 29
    assert "float() of an output of step waits for the device" in finding["message"]
    assert 0 < step["host_sync_seconds"] <= report["split"]["host_syncs"]


def test_host_syncs_that_cost_next_to_nothing_are_no_finding(tmp_path):
    report, _, _ = run_traced(
        tmp_path,
        """\
        import time

        import jax.numpy as jnp

        w = jnp.ones(8)
        losses = [float(w[0]) for _ in range(12)]  # 12 reads, well under 0.1% of the wall
        time.sleep(3.0)  # the program's own work
        """,
    )
    assert [f for f in report["findings"] if f["kind"] == "host_sync"] == []
    assert report["split"]["host_syncs"] > 0  # counted in the split all the same


def test_host_transfer_of_numpy_batches(tmp_path):
    report, _, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp
        import numpy as np


        @jax.jit
        def step(w, batch):
            return w + jnp.sum(batch)


        w = jnp.zeros(())
        data = np.ones((20, 16, 4), np.float32)
        for batch in data:
            w = step(w, batch)  # PLANTED
        """,
    )
    finding = only_finding(report, "host_transfer")
    assert finding["line"] == line and finding["count"] >= 19
    assert "256 bytes a call" in finding["message"]


def test_host_transfer_of_nested_trees_counts_every_call(tmp_path):
    # A call of trees jax.jit takes for its numpy leaves is handed off before
    # it is read, but every 64th: each is still a transfer of the same data.
    report, _, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp
        import numpy as np


        @jax.jit
        def step(batch):
            return sum(jnp.sum(part["x"]) for part in batch)


        for i in range(200):
            batch = [{"x": np.full((8,), i, np.float32)}, {"x": np.ones((8,), np.float32)}]
            step(batch)  # PLANTED
        """,
    )
    finding = only_finding(report, "host_transfer")
    assert finding["line"] == line and finding["count"] == 200
    assert "64 bytes a call" in finding["message"]
    assert "by jax.jit, faster here than the fast path" in finding["message"]


def test_host_transfer_the_fast_path_makes_says_to_keep_the_data_on_the_device(tmp_path):
    # 16 arrays beside one numpy leaf: the fast path converts it itself.
    report, _, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp
        import numpy as np


        @jax.jit
        def step(params, batch):
            return {k: w + jnp.sum(batch) for k, w in params.items()}


        params = {f"w{i:02d}": jnp.zeros(4) for i in range(16)}
        for i in range(30):
            params = step(params, np.full((8,), i, np.float32))  # PLANTED
        """,
    )
    finding = only_finding(report, "host_transfer")
    assert finding["line"] == line and finding["count"] == 30
    assert "jax.device_put it once before the loop" in finding["message"]
    assert report["functions"][0]["hits"] >= 28


def test_eager_ops_after_a_gradient_through_relu(tmp_path):
    # jax's gradient of relu enters a debug_nans block, which sets the
    # thread's own post hook (where --trace counts fast-path eager ops).
    report, _, line = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp

        jax.grad(lambda v: jnp.sum(jax.nn.relu(v)))(jnp.ones(3))
        x = jnp.ones(4)
        for _ in range(150):
            x = jnp.sin(x) * 0.5  # PLANTED
        """,
    )
    assert eager_finding_at(report, line)["count"] == 300


def test_eager_ops_in_a_loop(tmp_path):
    report, stderr, line = run_traced(
        tmp_path,
        """\
        import jax.numpy as jnp

        x = jnp.ones(4)
        for _ in range(150):
            x = jnp.sin(x) * 0.5  # PLANTED
        """,
    )
    finding = eager_finding_at(report, line)
    assert finding["count"] == 300 and "outside jit here" in finding["message"]
    assert report["split"]["eager_ops"] > 0
    assert "eager jax ops outside jit" in stderr


# One call of the program's that runs eager ops inside a library or a model,
# with the expected words of its finding: linen's init (flax's wrapper calls
# the Module's __call__), an nnx model called outside jit, an equinox one, and
# jax.tree.map calling the program's function.
LIBRARY_CALLS = {
    "linen": (
        """\
        import jax
        import jax.numpy as jnp
        import flax.linen as nn


        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.relu(nn.Dense(16)(x))
                return nn.Dense(4)(x)


        params = MLP().init(jax.random.key(0), jnp.ones([1, 8]))  # PLANTED
        """,
        "inside flax's Module.init here",
    ),
    "nnx": (
        """\
        import jax.numpy as jnp
        import numpy as np
        from flax import nnx


        class MLP(nnx.Module):
            def __init__(self, rngs):
                self.l1 = nnx.Linear(8, 16, rngs=rngs)
                self.l2 = nnx.Linear(16, 4, rngs=rngs)

            def __call__(self, x):
                return self.l2(nnx.relu(self.l1(x)))


        model = MLP(nnx.Rngs(0))
        x = jnp.asarray(np.ones((2, 8), np.float32))
        for _ in range(40):
            y = model(x)  # PLANTED
        """,
        "inside MLP.__call__ here",
    ),
    "equinox": (
        """\
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        import numpy as np

        model = eqx.nn.MLP(8, 4, 16, 2, key=jax.random.key(0))
        x = jnp.asarray(np.ones(8, np.float32))
        for _ in range(40):
            y = model(x)  # PLANTED
        """,
        "outside jit here",  # equinox's own model: its ops run inside the library, called at the line
    ),
    "jax": (
        """\
        import jax
        import jax.numpy as jnp
        import numpy as np


        def scaled(leaf):
            return jnp.tanh(leaf) * 2.0 + 1.0


        tree = {f"w{i}": jnp.asarray(np.full(3, i, np.float32)) for i in range(20)}
        for _ in range(10):
            tree = jax.tree.map(scaled, tree)  # PLANTED
        """,
        "inside jax's map here",
    ),
}


@pytest.mark.parametrize(
    "library",
    [
        pytest.param("linen", marks=needs_flax),
        pytest.param("nnx", marks=needs_flax),
        pytest.param("equinox", marks=needs_equinox),
        "jax",
    ],
)
def test_eager_ops_are_one_finding_at_the_call_that_made_them(tmp_path, library):
    source, words = LIBRARY_CALLS[library]
    report, stderr, line = run_traced(tmp_path, source)
    finding = eager_finding_at(report, line)
    assert words in finding["message"], finding
    # Every op the call ran is counted there, none at the lines it ran inside.
    (site,) = [row for row in report["eager_sites"] if row["line"] == line]
    inner = [row for row in report["eager_sites"] if row["line"] >= line or row["inside"]]
    assert inner == [site] and finding["count"] == site["count"] > 1
    # Its compile apart (each op's first shape), advice to match.
    assert 0 < site["compile_seconds"] <= site["seconds"] and "compiling them" in finding["message"]
    assert max(len(text) for text in stderr.splitlines()) <= 160


def test_clean_training_loop_has_no_findings(tmp_path):
    report, stderr, _ = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp
        import numpy as np


        @jax.jit
        def train_step(params, x):
            grads = jax.grad(lambda p: jnp.sum((x @ p["w"] + p["b"]) ** 2))(params)
            return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)


        # The data made with numpy and put on the device: no eager op compiles.
        params = jax.device_put({"w": np.ones((4, 2), np.float32), "b": np.zeros(2, np.float32)})
        x = jax.device_put(np.ones((8, 4), np.float32))
        for _ in range(200):
            params = train_step(params, x)
        print(np.asarray(params["b"])[0])  # read on the host: no eager op
        """,
    )
    assert report["findings"] == []
    assert "findings" not in stderr
    split = report["split"]
    assert split["compiled_calls"] > 0 and split["compiling"] > 0 and split["rest"] >= 0
    assert set(split["compile_phases"]) == {"tracing", "lowering", "XLA"}
    (row,) = report["functions"]
    assert row["calls"] == 200 and row["compiles"] == 1


def test_trace_replaces_no_name_routing_does_not(tmp_path):
    # --trace changes no attribute of jax, jax.numpy, jax.lax, jax.random, jax.nn
    # or numpy: each is the object it is under plain routing (jax.jit is
    # fastdispatch.jit in both), the program's line for a new wrapper notwithstanding.
    source = textwrap.dedent(
        """\
        import hashlib
        import sys

        import jax
        import jax.numpy as jnp
        import numpy as np

        import fastdispatch

        names = []
        for module in ("jax", "jax.numpy", "jax.lax", "jax.random", "jax.nn", "numpy"):
            for name, value in sorted(vars(sys.modules[module]).items()):
                if not name.startswith("_") and callable(value):
                    where = getattr(value, "__module__", None)
                    names.append(f"{module}.{name} {where} {type(value).__name__}")
        print(jax.jit is fastdispatch.jit, hashlib.sha256("\\n".join(names).encode()).hexdigest())
        jnp.sin(jnp.ones(2)).block_until_ready()
        """
    )
    (tmp_path / "prog.py").write_text(source)
    outputs = [run_prog(tmp_path, *options).stdout for options in ([], ["--trace"])]
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith("True ")


def verdict_of(report, name):
    (function,) = [f for f in report["functions"] if f["name"] == name]
    return function["device"]


def test_many_tiny_steps_are_host_bound(tmp_path):
    report, stderr, _ = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp


        @jax.jit
        def tiny(x):
            return x + 1


        x = jnp.zeros(4)
        for _ in range(2000):
            x = tiny(x)
        """,
    )
    device = verdict_of(report, "tiny")
    assert device["verdict"] == "host-bound" and device["waited_calls"] >= 20
    assert device["device_us"] < device["period_us"]
    assert "host-bound" in stderr


def test_a_large_matmul_printing_its_loss_is_device_bound(tmp_path):
    report, stderr, _ = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp


        @jax.jit
        def big(w, x):
            x = jnp.tanh(x @ w)
            return x, jnp.mean(x)


        w = jnp.ones((2048, 2048)) / 2048
        x = jnp.ones((2048, 2048))
        for step in range(80):
            x, loss = big(w, x)
            print(f"step {step}: loss {float(loss):.4f}")
        """,
    )
    device = verdict_of(report, "big")
    assert device["verdict"] == "device-bound" and device["waited_calls"] >= 3  # one burst: 3 run alone
    (big,) = [f for f in report["functions"] if f["name"] == "big"]
    assert 0.5 * report["split"]["host_syncs"] < big["device_seconds"] <= report["wall_seconds"]
    # The print waits for big's work: its syncs are big's.
    assert big["host_syncs"] == 79 and only_finding(report, "host_sync")["function"].startswith("big (")
    assert "device s" in stderr
    assert report["split"]["device_work"] > 0.5 * report["split"]["host_syncs"]
    assert "device-bound" in stderr and "device work of compiled calls" in stderr


def test_a_function_jax_jit_runs_still_gets_its_device_time_and_verdict(tmp_path):
    # New numpy data every step: each call is handed to jax.jit, whose executable
    # runs all the same; its outputs are waited for as a hit's are.
    report, stderr, _ = run_traced(
        tmp_path,
        """\
        import jax
        import jax.numpy as jnp
        import numpy as np


        @jax.jit
        def big(w, x):
            return jnp.tanh(x @ w).sum()


        w = jnp.ones((2048, 2048)) / 2048
        rng = np.random.default_rng(0)
        for step in range(40):
            total = big(w, rng.standard_normal((64, 2048), np.float32))
        print(float(total))
        """,
    )
    (big,) = report["functions"]
    assert big["hits"] == 0 and big["hand_offs"] == {"numpy arguments": 40}
    assert big["device"]["waited_calls"] >= 3 and big["device"]["verdict"] in ("host-bound", "device-bound")
    assert 0 < big["device_seconds"] <= report["wall_seconds"]
    assert big["host_syncs"] == 1  # float(total) read its output


def test_the_wall_is_the_process_s_from_its_start(tmp_path):
    report, stderr, _ = run_traced(tmp_path, "import time\nimport jax\ntime.sleep(0.3)\n")
    split = report["split"]
    # Python's start and the imports before --trace began (jax's among them) are part of it.
    assert split["start_up"] > 0.05 and "python start-up, imports" in stderr
    named = sum(v for k, v in split.items() if k in ("start_up", "compiled_calls", "compiling", "eager_ops"))
    assert abs(report["wall_seconds"] - named - split["host_syncs"] - split["rest"]) < 1e-6
    assert report["wall_seconds"] >= split["start_up"] + 0.3


def test_the_wall_time_goes_to_the_programs_lines(tmp_path):
    # The main thread sampled on itself by default; FASTDISPATCH_TRACE_LINES=0 turns it off.
    report, stderr, line = run_traced(
        tmp_path,
        """\
        import time

        import jax
        import jax.numpy as jnp
        import numpy as np


        def tokenize(text):
            end = time.perf_counter() + 0.02
            while time.perf_counter() < end: pass  # PLANTED
            return np.frombuffer(text.encode(), np.uint8)


        step = jax.jit(lambda w, t: w + jnp.sum(t))
        w = jnp.zeros((), jnp.int32)
        for i in range(40):
            w = step(w, jnp.asarray(tokenize("some text")))
        """,
    )
    rest = report["lines"]
    # The planted line's 0.8 s outweighs the loop line's, which holds the compile.
    assert rest and (rest[0]["file"], rest[0]["line"]) == ("prog.py", line)
    assert 0.7 * 40 * 0.02 <= rest[0]["seconds"] <= 1.3 * 40 * 0.02
    assert "by your line (the main thread sampled" in stderr
    off, off_stderr, _ = run_traced(
        tmp_path, (tmp_path / "prog.py").read_text(), env={"FASTDISPATCH_TRACE_LINES": "0"}
    )
    assert off["lines"] == [] and "by your line" not in off_stderr


JAX_CACHE_PROGRAM = """\
import jax
import jax.numpy as jnp

step = jax.jit(lambda x: jnp.sin(x) * 2)
x = jnp.ones(8)  # PLANTED
for _ in range(3):
    x = step(x)
print(float(x.sum()))
"""


def test_the_report_counts_jax_s_persistent_cache_and_a_rerun_is_served(tmp_path):
    env = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax-cache")}
    every = dict(env, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    first, stderr, _ = run_traced(tmp_path, JAX_CACHE_PROGRAM, env=every)
    cache = first["split"]["jax_cache"]
    assert cache["on"] and cache["asked"] >= 2 and cache["served"] == 0 and cache["written"] == cache["asked"]
    again, stderr, _ = run_traced(tmp_path, JAX_CACHE_PROGRAM, env=every)
    cache = again["split"]["jax_cache"]
    assert cache["served"] == cache["asked"] == first["split"]["jax_cache"]["asked"], cache
    assert f"jax's persistent cache: {cache['asked']} of {cache['asked']} compiles served" in stderr
    # jax's default thresholds write no compile under a second: a rerun compiles them again.
    _, stderr, _ = run_traced(
        tmp_path, JAX_CACHE_PROGRAM, env={"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "other")}
    )
    assert "under its thresholds (compiled again by a rerun)" in stderr
    off, _, _ = run_traced(tmp_path, JAX_CACHE_PROGRAM)
    assert off["split"]["jax_cache"]["on"] is False
