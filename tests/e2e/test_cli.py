"""``python -m fastdispatch`` end to end: small programs written into tmp_path,
run in a subprocess, judged by their output, exit code and trace file.

Each jax start costs a second or two, so one program checks many things.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from frontends import needs_flax

import fastdispatch.__main__ as cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(cwd, *argv, timeout=120):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-m", "fastdispatch", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write(path, source):
    path.write_text(textwrap.dedent(source))
    return path


def report_section(stderr, title):
    """The lines of one section of the report, up to the next blank line."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    section = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        section.append(line)
    return section


def row_of(stderr, name):
    return next(line for line in stderr.splitlines() if line.startswith(name + " ("))


RECOMPILES = """\
    import functools
    import sys

    import jax
    import jax.numpy as jnp

    import fastdispatch

    assert jax.jit is fastdispatch.jit


    @jax.jit
    def scale(x):
        return x * 2


    @functools.partial(jax.jit, static_argnames="mode")
    def step(x, mode):
        return x + (1.0 if mode == "train" else 0.0)


    @jax.jit
    def update(params, lr):
        return jax.tree_util.tree_map(lambda p: p - lr, params)


    scale(jnp.ones(4))
    scale(jnp.ones(4))
    scale(jnp.ones(8))                                        # compile 2: shape
    step(jnp.ones(4), mode="train")
    step(jnp.ones(4), mode="eval")                            # compile 2: static
    update({"a": jnp.ones(2)}, jnp.asarray(0.1))
    update({"a": jnp.ones(2)}, jnp.float32(0.1))              # compile 2: weak type
    update({"a": jnp.ones(2), "b": jnp.ones(2)}, jnp.float32(0.1))  # compile 3: tree
    jax.grad(lambda x: scale(x).sum())(jnp.ones(4))           # hand-off: tracer
    with jax.disable_jit():
        scale(jnp.ones(4))                                    # hand-off: disable_jit
    jax.config.update("jax_enable_x64", True)
    scale(jnp.ones(4, jnp.float32))                           # compile 3: x64
    print("done", sys.argv[1:])
"""


@pytest.fixture(scope="module")
def recompiles(tmp_path_factory):
    """One traced run of RECOMPILES, with a trace file."""
    tmp = tmp_path_factory.mktemp("recompiles")
    write(tmp / "prog.py", RECOMPILES)
    result = run_cli(tmp, "--trace", "--trace-out", "out.json", "prog.py", "a", "--b")
    return result, tmp / "out.json"


def test_traced_program_runs_with_its_own_argv(recompiles):
    result, _ = recompiles
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done ['a', '--b']\n"


def test_report_rows_count_calls_compiles_and_hand_offs(recompiles):
    result, _ = recompiles
    stderr = result.stderr
    assert "fastdispatch trace:" in stderr
    scale = row_of(stderr, "scale").split()
    # name, location, calls, hits, compiles
    assert scale[2:5] == ["6", "1", "3"], stderr
    assert "tracer 1" in row_of(stderr, "scale")
    assert "disable_jit 1" in row_of(stderr, "scale")
    assert row_of(stderr, "step").split()[2:5] == ["2", "0", "2"]
    assert row_of(stderr, "update").split()[2:5] == ["3", "0", "3"]


def test_report_explains_each_recompile(recompiles):
    stderr = recompiles[0].stderr
    section = report_section(stderr, "recompiles")
    text = "\n".join(section)
    assert "scale (prog.py:12), compile 2:\n    x: f32[4] -> f32[8]" in text
    assert "scale (prog.py:12), compile 3:\n    x64 mode changed" in text
    assert "step (prog.py:17), compile 2:\n    static mode: 'train' -> 'eval'" in text
    assert "update (prog.py:22), compile 2:\n    lr: weak_type changed (f32[]{weak} -> f32[])" in text
    assert "update (prog.py:22), compile 3:\n    params: tree structure changed (key 'b' added)" in text


def test_trace_file_is_chrome_trace_json(recompiles):
    result, path = recompiles
    assert "python -m fastdispatch: wrote out.json" in result.stderr
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    assert isinstance(events, list)
    spans = [e for e in events if e["ph"] == "X"]
    for e in spans:
        assert isinstance(e["name"], str)
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    names = {e["name"] for e in spans}
    assert {
        "scale",
        "scale: launch",
        "scale: compile",
        "step: compile",
        "update",
        "scale: jax.jit (tracer)",
        "scale: jax.jit (disable_jit)",
    } <= names
    assert sum(e["name"] == "scale" for e in spans) == 6
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert [t["args"]["name"] for t in threads] == ["MainThread"]
    assert {e["tid"] for e in spans} == {threads[0]["tid"]}


def test_the_example_reports_its_recompile():
    result = run_cli(REPO, "--trace", "examples/train_mlp.py", "2", timeout=300)
    assert result.returncode == 0, result.stderr
    losses = [float(line.split()[-1]) for line in result.stdout.splitlines()]
    assert losses[-1] < losses[0]
    assert row_of(result.stderr, "train_step").split()[2:5] == ["32", "30", "2"]
    section = "\n".join(report_section(result.stderr, "recompiles"))
    assert "train_step (examples/train_mlp.py:" in section
    assert "x: f32[64,8] -> f32[40,8]" in section
    assert "y: f32[64,1] -> f32[40,1]" in section


def test_the_dispatcher_works_while_jax_jit_is_patched(tmp_path):
    # fastdispatch.jit builds its slow path with jax's own jit; were it to look
    # up the public jax.jit at call time, the patch would make it call itself.
    write(
        tmp_path / "prog.py",
        """\
        import jax
        import jax.numpy as jnp
        print(jax.jit(lambda x: x + 1)(jnp.ones(2)).tolist())
    """,
    )
    result = run_cli(tmp_path, "prog.py")
    assert (result.returncode, result.stdout) == (0, "[2.0, 2.0]\n"), (
        "fastdispatch.jit failed with jax.jit replaced by it (does the dispatcher "
        f"call the public jax.jit?): exit code {result.returncode}\n{result.stderr}"
    )


# -- running the program as python would ----------------------------------------

FAILING = """\
    import sys

    import jax
    import jax.numpy as jnp


    @jax.jit
    def double(x):
        return 2 * x


    def main():
        double(jnp.ones(3))
        if sys.argv[1] == "raise":
            raise ValueError("bad input")
        sys.exit(int(sys.argv[1]))


    main()
"""


def test_an_uncaught_exception_prints_its_traceback_exits_1_and_still_reports(tmp_path):
    write(tmp_path / "prog.py", FAILING)
    result = run_cli(tmp_path, "--trace", "prog.py", "raise")
    assert result.returncode == 1
    traceback = result.stderr.split("\nfastdispatch trace:")[0]
    assert traceback.splitlines() == [
        "Traceback (most recent call last):",
        f'  File "{tmp_path / "prog.py"}", line 19, in <module>',
        "    main()",
        f'  File "{tmp_path / "prog.py"}", line 15, in main',
        '    raise ValueError("bad input")',
        "ValueError: bad input",
    ]
    assert row_of(result.stderr, "double").split()[2:5] == ["1", "0", "1"]


def test_sys_exit_passes_its_code_through_and_the_missing_script_message(tmp_path):
    write(tmp_path / "prog.py", FAILING)
    result = run_cli(tmp_path, "--trace", "prog.py", "3")
    assert result.returncode == 3
    assert "double (prog.py:" in result.stderr

    write(tmp_path / "syntax.py", "x = (\n")
    syntax = run_cli(tmp_path, "syntax.py")
    assert syntax.returncode == 1
    assert syntax.stderr == (
        f'  File "{tmp_path / "syntax.py"}", line 1\n    x = (\n        ^\n'
        "SyntaxError: '(' was never closed\n"
    )

    missing = run_cli(tmp_path, "--trace", "nope.py")
    assert missing.returncode == 2
    assert missing.stderr.endswith(
        f"can't open file '{tmp_path / 'nope.py'}': [Errno 2] No such file or directory\n"
    )
    assert missing.stdout == ""


def test_an_unwritable_trace_out_is_refused_before_the_program_starts(tmp_path):
    write(tmp_path / "prog.py", "open('started', 'w').close()\n")
    result = run_cli(tmp_path, "--trace-out", "no/such/dir/out.json", "prog.py")
    assert result.returncode == 2
    assert result.stderr == (
        "python -m fastdispatch: error: cannot write --trace-out "
        "'no/such/dir/out.json': No such file or directory\n"
    )
    assert not (tmp_path / "started").exists()
    assert not (tmp_path / "no").exists()


def test_dash_m_runs_a_module_and_no_patch_leaves_jax_jit_alone(tmp_path):
    write(
        tmp_path / "mymod.py",
        """\
        import sys

        import jax
        import jax.numpy as jnp

        import fastdispatch

        print(__name__, sys.argv[1:], jax.jit is fastdispatch.jit)
        fastdispatch.jit(lambda x: x + 1)(jnp.ones(2))
        jax.jit(lambda x: x - 1)(jnp.ones(2))
    """,
    )
    patched = run_cli(tmp_path, "--trace", "-m", "mymod", "x", "-y")
    assert patched.returncode == 0, patched.stderr
    assert patched.stdout == "__main__ ['x', '-y'] True\n"
    assert patched.stderr.count("<lambda> (mymod.py:") == 2

    unpatched = run_cli(tmp_path, "--trace", "--no-patch", "-m", "mymod")
    assert unpatched.returncode == 0, unpatched.stderr
    assert unpatched.stdout == "__main__ [] False\n"
    # only the function wrapped by fastdispatch.jit itself is traced
    assert unpatched.stderr.count("<lambda> (mymod.py:") == 1
    assert "<lambda> (mymod.py:9)" in unpatched.stderr


# -- options, without a subprocess ----------------------------------------------


def test_trace_out_is_named_per_process_in_a_multi_process_program():
    # tests/distributed runs it for real.
    assert cli.per_process_path("out/run.json", None) == "out/run.json"
    assert cli.per_process_path("out/run.json", (1, 2)) == "out/run.process1.json"
    assert cli.per_process_path("run.trace.json", (0, 4)) == "run.trace.process0.json"
    assert cli.per_process_path("trace", (3, 4)) == "trace.process3"


def test_bench_is_handed_its_arguments(monkeypatch):
    import fastdispatch.bench

    seen = []
    monkeypatch.setattr(fastdispatch.bench, "main", lambda argv: seen.append(argv) or 7)
    assert cli.main(["bench", "--quick", "x"]) == 7
    assert seen == [["--quick", "x"]]


def test_options_stop_at_the_script():
    options = cli.parse(["--trace", "--trace-out=t.json", "prog.py", "--no-patch", "-m"])
    assert (options.trace, options.trace_out, options.patch) == (True, "t.json", True)
    assert (options.script, options.args) == ("prog.py", ["--no-patch", "-m"])
    options = cli.parse(["--no-patch", "-m", "pkg.mod", "--trace"])
    assert (options.patch, options.trace, options.module, options.args) == (
        False,
        False,
        "pkg.mod",
        ["--trace"],
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "no script or -m module to run"),
        (["--trace-out"], "--trace-out needs a file name"),
        (["-m"], "-m needs a module name"),
        (["--frobnicate", "prog.py"], "unknown option --frobnicate"),
    ],
)
def test_bad_options_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.parse(argv)
    assert exit.value.code == 2
    assert capsys.readouterr().err.endswith(f"python -m fastdispatch: error: {message}\n")


EQUINOX_PROGRAM = """\
    import sys

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import fastdispatch

    model = eqx.nn.MLP(4, 1, 8, 2, key=jax.random.key(0))


    @eqx.filter_jit
    def step(model, x, y):
        def loss(m):
            return jnp.mean((jax.vmap(m)(x) - y) ** 2)

        value, grads = eqx.filter_value_and_grad(loss)(model)
        return eqx.apply_updates(model, jax.tree.map(lambda g: -0.1 * g, grads)), value


    assert isinstance(step, fastdispatch.equinox.FilterJitWrapper)
    x, y = jnp.ones((16, 4)), jnp.zeros((16, 1))
    for _ in range(20):
        model, value = step(model, x, y)
    print("loss", float(value))
    """


def traced_training_run(tmp_path, script, program, step):
    """Run a training program under --trace; its stderr, and the step's row as
    (label, calls, hits, compiles)."""
    write(tmp_path / script, program)
    result = run_cli(tmp_path, "--trace", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("loss ")
    row = row_of(result.stderr, step)
    return result.stderr, (" ".join(row.split()[:2]), *row.split()[2:5])


def test_equinox_filter_jit_is_routed_and_named_after_the_user_function(tmp_path):
    stderr, row = traced_training_run(tmp_path, "train_eqx.py", EQUINOX_PROGRAM, "step")
    # Named where the decorated step starts.
    assert row == ("step (train_eqx.py:12)", "20", "19", "1")
    assert "equinox/_jit.py" not in stderr


def test_a_program_without_equinox_does_not_import_it(tmp_path):
    write(tmp_path / "plain.py", "import sys\nimport jax\nprint('equinox' in sys.modules)\n")
    result = run_cli(tmp_path, "--trace", "plain.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


NNX_PROGRAM = """\
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import fastdispatch


    class Model(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(4, 1, rngs=rngs)

        def __call__(self, x):
            return self.linear(x)


    model = Model(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)


    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss


    assert isinstance(train_step, fastdispatch.nnx.NnxJitFunction)
    x, y = jnp.ones((8, 4)), jnp.zeros((8, 1))
    for _ in range(10):
        loss = train_step(model, optimizer, x, y)
    print("loss", float(loss))
    """


@needs_flax
def test_flax_nnx_jit_is_routed_and_named_after_the_user_function(tmp_path):
    stderr, row = traced_training_run(tmp_path, "train_nnx.py", NNX_PROGRAM, "train_step")
    # Named where the decorated step starts.
    assert row == ("train_step (train_nnx.py:21)", "10", "9", "1")
    assert "compilation.py" not in stderr
