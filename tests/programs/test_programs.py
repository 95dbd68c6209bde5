"""Real programs, written the way each library's documentation writes them, run
whole: stock (``python prog.py``) and under ``python -m fastdispatch prog.py``
in subprocesses.  Each must exit 0 and print the same stdout both ways: the
programs are deterministic (fixed seeds) and print their results rounded.

The programs ship with the package, in fastdispatch/bench/programs, and never
import fastdispatch; the bench (``python -m fastdispatch bench --programs``)
times the same files.  Each run
pays jax's (and flax's) start-up, so the step counts here are small.
"""

import functools
import os
import re
import subprocess
import sys

import pytest
from frontends import needs_flax

from fastdispatch.bench.whole_programs import PROGRAMS_DIR, find_programs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAMS = find_programs(PROGRAMS_DIR)
STEPS = "100"


def uses_flax(program):
    with open(os.path.join(PROGRAMS_DIR, program + ".py")) as f:
        return any(line.startswith(("from flax", "import flax")) for line in f)


def params(*programs):
    """Each program as a parameter, skipped where it needs flax and this jax has none."""
    return [pytest.param(*p, marks=[needs_flax] if uses_flax(p[0]) else []) for p in programs]


def run(*argv, timeout=180):
    """``python *argv`` from the repository root, on CPU, as run_cli in tests/e2e/test_cli.py."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def path_of(program):
    return os.path.relpath(os.path.join(PROGRAMS_DIR, program + ".py"), REPO)


def test_the_suite_has_its_programs():
    assert set(PROGRAMS) >= {
        "nnx_cached_partial",
        "trainstate_numpy",
        "nnx_array_attributes",
        "nnx_bn_dropout",
        "nnx_scan_layers",
        "nnx_data_parallel",
        "nnx_fsdp",
        "equinox_optax",
        "rl_step_counter",
        "float_loss_every_step",
        "nnx_minigpt",
        "nnx_minigpt_cached_partial",
        "nnx_minigpt_tutorial",
        "equinox_sampling",
        "rl_numpy_dqn",
    }
    for program in PROGRAMS:
        with open(os.path.join(PROGRAMS_DIR, program + ".py")) as f:
            source = f.read()
        assert "fastdispatch" not in source, f"{program} must run unmodified, without fastdispatch"
        assert 'if __name__ == "__main__":' in source and "--steps" in source, program


# The step each program calls every step, where the fast path must serve it
# (all but its first calls); the others' steps are handed to jax.jit by design
# (numpy batches or a step counter beside few arrays: docs/tracing.md).
FAST_STEPS = {
    "nnx_cached_partial": "train_step",
    "nnx_array_attributes": "train_step",
    "nnx_bn_dropout": "train_step",
    "nnx_scan_layers": "train_step",
    "nnx_data_parallel": "train_step",
    "nnx_fsdp": "train_step",
}


# Programs whose every call is served but a shape's first (a compile): a
# decode loop beside a train step, each function of them.
SERVED = {
    "nnx_minigpt": ("train_step", "MiniGPT.generate_step"),
    "nnx_minigpt_cached_partial": ("train_step", "MiniGPT.generate_step"),
    "nnx_minigpt_tutorial": ("train_step", "MiniGPT.generate_step"),
    "equinox_sampling": ("main.<locals>.make_step", "generate_step"),
}
# The longest line a recompile explanation or a finding may take.
MAX_REPORT_LINE = 160


def report_row(stderr, function):
    """``(calls, hits)`` of a function's row in the --trace report."""
    calls, hits, _ = report_counts(stderr, function)
    return calls, hits


def report_counts(stderr, function):
    """``(calls, hits, compiles)`` of a function's row in the --trace report."""
    row = next((line for line in stderr.splitlines() if line.startswith(f"{function} (")), None)
    assert row is not None, f"no row for {function} in the report:\n{stderr}"
    cells = row.split(") ", 1)[1].split()
    return int(cells[0]), int(cells[1]), int(cells[2])


def explanation_and_finding_lines(stderr):
    """The report's lines under "recompiles" and "findings"."""
    lines, inside = [], False
    for line in stderr.splitlines():
        if line.startswith(("recompiles (", "findings (")):
            inside = True
        elif not line.startswith("  "):
            inside = False
        elif inside:
            lines.append(line)
    return lines


@pytest.mark.parametrize("program", params(*((p,) for p in PROGRAMS)))
def test_same_output_stock_and_under_fastdispatch(program):
    stock = run(path_of(program), "--steps", STEPS)
    assert stock.returncode == 0, f"{program} fails stock:\n{stock.stderr}"
    assert stock.stdout.strip(), f"{program} printed nothing"

    # --trace reports on stderr: stdout is the program's alone.
    patched = run("-m", "fastdispatch", "--trace", path_of(program), "--steps", STEPS)
    assert patched.returncode == 0, f"{program} fails under python -m fastdispatch:\n{patched.stderr}"
    assert patched.stdout == stock.stdout, (
        f"{program}: stdout differs under python -m fastdispatch\n"
        f"--- stock\n{stock.stdout}--- fastdispatch\n{patched.stdout}"
    )
    if program in FAST_STEPS:
        calls, hits = report_row(patched.stderr, FAST_STEPS[program])
        assert calls >= int(STEPS) and hits >= calls - 3, patched.stderr
    for function in SERVED.get(program, ()):
        calls, hits, compiles = report_counts(patched.stderr, function)
        assert calls - hits - compiles <= calls // 100, patched.stderr
    if program in SERVED:
        long = [line for line in explanation_and_finding_lines(patched.stderr) if len(line) > MAX_REPORT_LINE]
        assert not long, "\n".join(long)


@pytest.mark.parametrize(
    "program, step_function",
    params(("trainstate_numpy", "train_step"), ("rl_step_counter", "env_step"), ("rl_numpy_dqn", "act")),
)
def test_trace_reports_the_step_function(program, step_function):
    result = run("-m", "fastdispatch", "--trace", path_of(program), "--steps", STEPS)
    assert result.returncode == 0, result.stderr
    assert "fastdispatch trace:" in result.stderr, result.stderr
    row = next(
        (line for line in result.stderr.splitlines() if line.startswith(f"{step_function} (")),
        None,
    )
    assert row is not None, f"no row for {step_function} in the report:\n{result.stderr}"
    assert f"{path_of(program)}:" in row
    assert row.split()[2] == STEPS, row  # one call per step


def test_trace_finds_the_host_data_at_the_programs_own_lines():
    # The programs live inside the package, yet are the user's code: the
    # findings name their lines (an RL loop's observation and replay batch,
    # handed to jax.jit, which converts them faster).
    result = run("-m", "fastdispatch", "--trace", path_of("rl_numpy_dqn"), "--steps", STEPS)
    assert result.returncode == 0, result.stderr
    with open(os.path.join(PROGRAMS_DIR, "rl_numpy_dqn.py")) as f:
        source = f.read().splitlines()
    act_line = 1 + next(i for i, text in enumerate(source) if "action = int(act(" in text)
    transfers = re.findall(r"rl_numpy_dqn.py:(\d+)  host_transfer, (\d+)x", result.stderr)
    assert (str(act_line), STEPS) in transfers, result.stderr
    assert "by jax.jit, faster here than the fast path" in result.stderr


@pytest.mark.parametrize("program", params(("trainstate_numpy",), ("nnx_train_state",)))
def test_rerun_under_warm_start_loads_every_step_after_an_edit(program, tmp_path):
    # A TrainState whose apply_fn is a Linen Module's (each holds a FlaxId), or
    # whose node data hold nnx GraphDefs.  An edit of the program's file
    # changes the keys (its classes are keyed by its source), not the
    # programs: jax's cache underneath serves those compiles, which are
    # compiled again for the store, so that the next run loads every step.
    copy = tmp_path / f"{program}.py"
    with open(os.path.join(PROGRAMS_DIR, program + ".py")) as f:
        copy.write_text(f.read())

    def edit(text):
        with open(copy, "a") as f:
            f.write(text)

    assert_last_rerun_loads_every_call(
        str(copy), tmp_path, [functools.partial(edit, text) for text in ("", "# an edit\n", "")]
    )


@pytest.mark.parametrize("program", params(("nnx_data_parallel",), ("nnx_minigpt",), ("equinox_optax",)))
def test_rerun_under_warm_start_loads_every_call(program, tmp_path):
    # nnx_data_parallel's first step takes parameters device_put as P() and
    # returns them as the equivalent P(None,): a call no record serves, stored
    # all the same.  nnx_minigpt's graph holds PartitionSpecs (its kernels'
    # sharding metadata), which the key describes.  equinox_optax's jax.jit
    # step takes equinox Modules, whose tree nodes hold equinox's MISSING
    # sentinel: their trees pickle, but not back into themselves.
    assert_last_rerun_loads_every_call(os.path.join(PROGRAMS_DIR, program + ".py"), tmp_path, [None, None])


def assert_last_rerun_loads_every_call(path, tmp_path, before_each):
    """Run ``path`` stock, then under --warm-start once per item of
    ``before_each`` (a callable run first, or None), each with stock's
    output and warnings (nnx_minigpt's step donates a batch it cannot use:
    a load warns as jax's lowering does); the last run loaded every call and
    stored nothing new."""
    stock = run(path, "--steps", "3")
    assert stock.returncode == 0, stock.stderr
    warm = ("-m", "fastdispatch", "--trace", "--warm-start", str(tmp_path / "store"), path, "--steps", "3")
    for step in before_each:
        if step is not None:
            step()
        result = run(*warm)
        assert result.returncode == 0, result.stderr
        assert result.stdout == stock.stdout
        assert warning_lines(result.stderr) == warning_lines(stock.stderr), result.stderr
    summary = result.stderr[result.stderr.index("warm start (") :]
    assert " 0 missed, 0 written, 0 damaged" in summary.splitlines()[0], summary
    assert "not stored" not in summary, summary


def warning_lines(stderr):
    """The warnings a run showed, as Python shows them: ``file:line: Category: message``."""
    return [line for line in stderr.splitlines() if re.match(r"\S+:\d+: \w*Warning: ", line)]
