"""Warm start across processes: the first run fills a store, a later run reads it.

Each test runs tests/e2e/warm_program.py (nine small jitted functions, each
printing ``TRACED name`` when jax traces it) in fresh processes over one store,
and checks every result against numpy's, which functions jax traced, and the
store's counts.  The contract above speed: a change to anything a function's
trace reads recompiles it; a damaged, foreign or read-only store is a miss,
never a crash or a wrong result.
"""

from __future__ import annotations

import collections
import importlib.metadata
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from fastdispatch.warm import jax_own

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_program.py")
CONFIGS = """\
import dataclasses


@dataclasses.dataclass(frozen=True)
class Config:
    scale: float
    depth: int
"""
# Every function of the program, and those whose executables are stored
# (printing's jax.debug.print holds a Python callback: not serializable).
FUNCTIONS = ("control", "body", "helper", "global_array", "closed", "static", "config", "donated", "printing")
STORED = FUNCTIONS[:-1]


def write_program(directory, add=2.0, helper=1.0):
    with open(PROGRAM) as f:
        source = f.read().replace("x + ADD", f"x + {add!r}")
    (directory / "prog.py").write_text(source)
    (directory / "helpers.py").write_text(f"def h(x):\n    return x * 2 + {helper!r}\n")
    (directory / "configs.py").write_text(CONFIGS)


def command(directory, cfg, python=sys.executable):
    return [python, str(directory / "prog.py"), json.dumps(cfg), str(directory / "store")]


def environment(extra=None):
    env = dict(os.environ)  # PYTHONPATH included: the fastdispatch under test
    env.pop("FASTDISPATCH_WARM_START", None)
    env.update(extra or {})
    return env


def report_of(returncode, stdout, stderr):
    """A warm-start program's report: its last line's JSON, which functions
    jax traced (``TRACED name`` lines), and its outputs; it must have exited 0."""
    assert returncode == 0, f"exit {returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    report = json.loads(stdout.strip().splitlines()[-1])
    report["traced"] = collections.Counter(
        line.split()[1] for line in stdout.splitlines() if line.startswith("TRACED ")
    )
    report["stdout"], report["stderr"] = stdout, stderr
    return report


def finished(proc, stdout, stderr):
    report = report_of(proc.returncode, stdout, stderr)
    assert report["results"] == report["expected"], "a result differs from numpy's"
    return report


def run(directory, env=None, python=sys.executable, **cfg):
    proc = subprocess.run(
        command(directory, cfg, python), capture_output=True, text=True, timeout=180, env=environment(env)
    )
    return finished(proc, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A program and the store its first run filled, and that run's report."""
    directory = tmp_path_factory.mktemp("filled")
    write_program(directory)
    return directory, run(directory)


def store_files(directory):
    """The store's files of fastdispatch's calls (not of jax's own compiles)."""
    files = (directory / "store").glob("*.jit")
    return sorted(path for path in files if not path.name.startswith(jax_own.FILE_PREFIX))


def test_first_run_fills_the_store(filled):
    directory, first = filled
    assert first["traced"] == collections.Counter(FUNCTIONS)
    assert first["stats"]["written"] == len(STORED) == len(store_files(directory))
    assert first["stats"]["loaded"] == 0
    assert "printing" in first["stats"]["not_stored"]["printing"]
    # jax's own compiles (the program's eager operations), in files of their own.
    own = first["stats"]["jax_own"]
    assert own["written"] == own["missed"] > 0 and own["loaded"] == 0
    assert own["written"] == len(list((directory / "store").glob("jax-*.jit")))


def test_second_run_loads_without_tracing(filled, program):
    first = filled[1]
    second = run(program)
    assert second["results"] == first["results"]
    assert second["traced"] == collections.Counter(["printing"])  # not stored, so traced
    assert second["stats"]["loaded"] == len(STORED)
    assert second["stats"]["written"] == 0
    # jax's own compiles are keyed alike in another process: each one loaded.  (Fewer
    # than the first run wrote: that run's traces ran eager operations of their own.)
    own = second["stats"]["jax_own"]
    assert own["loaded"] > 0 and (own["missed"], own["written"]) == (0, 0)
    # Donation and effects as in the first run.
    assert second["donated_deleted"] == first["donated_deleted"]
    assert second["stdout"].count("printing 3.0") == first["stdout"].count("printing 3.0") == 1


def test_the_next_run_loads_in_the_background(tmp_path):
    write_program(tmp_path)
    first = run(tmp_path)
    assert first["stats"]["preloaded"] == 0  # nothing to preload: the store was empty
    second = run(tmp_path, await_preload=True)
    assert second["results"] == first["results"]
    assert second["traced"] == collections.Counter(["printing"])
    # Every stored executable was loaded by the preloader before its first call.
    assert second["stats"]["preloaded"] == second["stats"]["loaded"] == len(STORED)
    assert second["stdout"].count("printing 3.0") == 1
    assert second["donated_deleted"] == first["donated_deleted"]
    # A copy of the program and its store elsewhere (another folder, another
    # machine of the same kind) is the same program: it finds its manifest by
    # the script's name and content, and loads in the background too.
    shutil.copytree(tmp_path, tmp_path / "copy", ignore=shutil.ignore_patterns("copy"))
    third = run(tmp_path / "copy", await_preload=True)
    assert third["results"] == first["results"]
    assert third["traced"] == collections.Counter(["printing"])
    assert third["stats"]["preloaded"] == third["stats"]["loaded"] == len(STORED)
    assert "another machine" not in third["stderr"]


@pytest.mark.parametrize(
    "changed, change",
    [
        ("body", {"add": 5.0}),  # the function's source
        ("helper", {"helper": 4.0}),  # a helper in another user module
        ("global_array", {"w": [3.0, 2.0, 1.0]}),
        ("closed", {"closure": 4.0}),
        ("static", {"n": 3}),
        ("config", {"scale": 5.0}),  # a frozen dataclass of scalars
    ],
)
def test_a_change_recompiles_that_function_only(program, changed, change):
    if changed in ("body", "helper"):
        write_program(program, **change)  # the source files themselves
    second = run(program, **change)
    assert second["traced"] == collections.Counter([changed, "printing"])
    assert second["stats"]["loaded"] == len(STORED) - 1


def test_a_key_changed_where_the_computation_did_not_is_stored_again(tmp_path):
    # A comment in the module of config's dataclass changes its key, not its
    # program: jax's cache underneath serves the compile, which does not
    # serialize whole; it is compiled again for the store, and then loads.
    # Every edit so, however many: each refill has a key of jax's cache of
    # its own.
    write_program(tmp_path)
    first = run(tmp_path)
    for edit in range(4):
        with open(tmp_path / "configs.py", "a") as f:
            f.write(f"# comment {edit}\n")
        second = run(tmp_path)
        assert second["traced"] == collections.Counter(["config", "printing"])
        config = second["stats"]["functions"]["config"]
        assert (config["missed"], config["refilled"], config["written"]) == (1, 1, 1), second["stats"]
    third = run(tmp_path)
    assert third["traced"] == collections.Counter(["printing"])
    assert third["stats"]["loaded"] == len(STORED)
    assert third["results"] == second["results"] == first["results"]


@pytest.mark.parametrize("change", [{"x64": True}, {"devices": 2}])
def test_an_environment_change_recompiles_everything(program, change):
    second = run(program, **change)
    assert second["traced"] == collections.Counter(FUNCTIONS)
    assert second["stats"]["loaded"] == 0


def test_another_jax_version_neither_reads_nor_spoils_the_store(program):
    other = run(program, jax_version="0.0.1")
    assert other["traced"] == collections.Counter(FUNCTIONS)
    assert other["stats"]["loaded"] == 0 and other["stats"]["damaged"] == 0
    assert other["stats"]["written"] == len(STORED)
    # Said once, naming what differs: nothing in the store was for this process.
    warned = [line for line in other["stderr"].splitlines() if "another machine" in line]
    assert len(warned) == 1, other["stderr"]
    stored, _, this_process = warned[0].partition("this process: ")
    assert f"jax {importlib.metadata.version('jax')}," in stored and "jax 0.0.1," in this_process, warned[0]
    again = run(program)  # this version's files are still there
    assert again["stats"]["loaded"] == len(STORED)
    assert "another machine" not in again["stderr"]


# An interpreter with another jax installed, and this fastdispatch importable
# (.ci/run sets it in its runs on older jax, naming the jax 0.10 environment's).
OTHER_JAX_PYTHON = os.environ.get("FASTDISPATCH_OTHER_JAX_PYTHON")


@pytest.mark.skipif(
    not OTHER_JAX_PYTHON, reason="FASTDISPATCH_OTHER_JAX_PYTHON names no interpreter with another jax"
)
def test_a_store_written_under_another_installed_jax_is_never_served(program):
    import jax

    other_version = subprocess.run(
        [OTHER_JAX_PYTHON, "-c", "import jax; print(jax.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    assert other_version and other_version != jax.__version__, other_version
    # The store was filled under this jax; the other reads none of it, and writes its own beside.
    other = run(program, python=OTHER_JAX_PYTHON)
    assert other["traced"] == collections.Counter(FUNCTIONS)
    assert other["stats"]["loaded"] == 0 and other["stats"]["damaged"] == 0
    assert other["stats"]["written"] == len(STORED)
    # Neither is served the other's: each loads exactly its own.
    again = run(program)
    assert again["stats"]["loaded"] == len(STORED) and again["stats"]["damaged"] == 0
    again_other = run(program, python=OTHER_JAX_PYTHON)
    assert again_other["stats"]["loaded"] == len(STORED) and again_other["traced"] == collections.Counter(
        ["printing"]
    )


def _garbage(data):
    return b"\x00garbage" * 10


def _truncated(data):
    return data[: len(data) // 2]


def _flipped(data):
    return data[:-10] + bytes([data[-10] ^ 1]) + data[-9:]


@pytest.mark.parametrize("damage", [_garbage, _truncated, _flipped], ids=["garbage", "truncated", "bit"])
def test_a_damaged_file_is_a_miss_with_one_warning(program, damage):
    for path in store_files(program):
        path.write_bytes(damage(path.read_bytes()))
    second = run(program)
    assert second["traced"] == collections.Counter(FUNCTIONS)
    assert second["stats"]["damaged"] == len(STORED)
    assert second["stderr"].count("WarmStartWarning") == len(STORED)
    assert second["stats"]["written"] == len(STORED)  # whole again


def test_a_read_only_store_loads_and_never_writes(program, tmp_path):
    store = program / "store"
    for path in store_files(program):
        path.chmod(stat.S_IRUSR)
    store.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        second = run(program, readonly=True)
        assert second["traced"] == collections.Counter(["printing"])
        assert second["stats"]["loaded"] == len(STORED)
        assert not second["stats"]["writable"] and second["stats"]["written"] == 0
        assert "Warning" not in second["stderr"]
        # An empty read-only store: everything compiles, nothing is written.
        empty = tmp_path / "empty"
        shutil.copytree(program, empty, ignore=shutil.ignore_patterns("*.jit"))
        (empty / "store").chmod(stat.S_IRUSR | stat.S_IXUSR)
        fresh = run(empty, readonly=True)
        assert fresh["traced"] == collections.Counter(FUNCTIONS)
        assert fresh["stats"]["written"] == 0 and not store_files(empty)
    finally:
        store.chmod(stat.S_IRWXU)


def test_two_processes_fill_one_store_at_once(tmp_path):
    write_program(tmp_path)
    procs = [
        subprocess.Popen(
            command(tmp_path, {}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        for _ in range(2)
    ]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=180)
        report = finished(proc, stdout, stderr)
        assert "another machine" not in stderr
        # Each function compiled here, or loaded as the other process wrote it.
        assert max(report["traced"].values()) == 1 and report["traced"]["printing"] == 1
        assert sum(report["traced"][name] for name in STORED) + report["stats"]["loaded"] == len(STORED)
    assert len(store_files(tmp_path)) == len(STORED)
    # No temporary file left; beside the executables, only the programs'
    # manifests and the one note of the machine they were compiled for.
    store = tmp_path / "store"
    beside = sorted(name for name in os.listdir(store) if not name.endswith(".jit"))
    assert beside == [".machines", ".programs"]
    assert [name.endswith(".json") for name in os.listdir(store / ".machines")] == [True]
    after = run(tmp_path)
    assert after["stats"]["loaded"] == len(STORED) and after["stats"]["damaged"] == 0


def test_environment_variable_turns_it_on(tmp_path):
    write_program(tmp_path)
    env = {"FASTDISPATCH_WARM_START": str(tmp_path / "store")}
    first = run(tmp_path, env=env)
    assert first["stats"]["written"] == len(STORED)
    second = run(tmp_path, env=env)
    assert second["traced"] == collections.Counter(["printing"])


def test_environment_variable_under_the_command_line_loads_in_the_background(tmp_path):
    # Warm start begins as fastdispatch is imported, before python -m
    # fastdispatch knows the program: its background loads begin with it.
    write_program(tmp_path)
    env = environment({"FASTDISPATCH_WARM_START": str(tmp_path / "store")})
    routed = [sys.executable, "-m", "fastdispatch", *command(tmp_path, {"await_preload": True})[1:]]
    runs = []
    for _ in range(2):
        proc = subprocess.run(routed, capture_output=True, text=True, timeout=180, env=env)
        runs.append(finished(proc, proc.stdout, proc.stderr))
    assert runs[0]["stats"]["written"] == len(STORED)
    assert runs[1]["traced"] == collections.Counter(["printing"])
    assert runs[1]["stats"]["preloaded"] == runs[1]["stats"]["loaded"] == len(STORED)


CLI_PROGRAM = """\
import jax
import jax.numpy as jnp


@jax.jit
def step(w, x):
    print("TRACED step")
    return w - 0.1 * jnp.tanh(w * x)


print(step(jnp.ones(4), jnp.arange(4.0)).tolist())
"""


def test_command_line_option(tmp_path):
    (tmp_path / "cli.py").write_text(CLI_PROGRAM)
    store, program = str(tmp_path / "store"), str(tmp_path / "cli.py")
    cmd = [sys.executable, "-m", "fastdispatch", "--warm-start", store]
    outputs = [
        subprocess.run(cmd + options + [program], capture_output=True, text=True, timeout=180)
        for options in ([], ["--trace"])
    ]
    for out in outputs:
        assert out.returncode == 0, out.stderr
    assert outputs[0].stdout.count("TRACED step") == 1
    assert outputs[1].stdout == outputs[0].stdout.replace("TRACED step\n", "")
    # --trace ends its report with the store's counts.
    # (The load is the preloader's, where its thread was first: "(1 in the background)".)
    assert re.search(
        rf"warm start \({re.escape(store)}\): 1 loaded( \(1 in the background\))?, 0 missed, 0 written",
        outputs[1].stderr,
    )
    # The report's lines and the summary's (not jaxlib's own log lines, which
    # jax 0.8 writes when it loads an executable compiled for other CPU features).
    report = outputs[1].stderr[outputs[1].stderr.index("fastdispatch trace:") :]
    assert max(len(line) for line in report.splitlines() if not re.match(r"[EWIF]\d{4} ", line)) <= 160


def test_several_devices_load_onto_the_executable_s_own(tmp_path):
    # An executable of one device among two: loaded onto that device, not
    # onto every device jax has (which fails at the first call).
    write_program(tmp_path)
    assert run(tmp_path, devices=2)["stats"]["written"] == len(STORED)
    second = run(tmp_path, devices=2)
    assert second["traced"] == collections.Counter(["printing"])
    assert second["stats"]["loaded"] == len(STORED)


SHARDED_PROGRAM = """\
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 8)
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import fastdispatch

fastdispatch.warm_start(sys.argv[1])
mesh = Mesh(np.array(jax.devices()), ("data",))
rows, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())


@fastdispatch.jit
def step(w, x):
    print("TRACED step")
    loss = jnp.mean((x @ w) ** 2)
    return w - 0.1 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w), loss


w = jax.device_put(jnp.eye(4), replicated)
losses = []
for i in range(3):
    x = jax.device_put(jnp.arange(32.0).reshape(8, 4) / (10.0 + i), rows)
    w, loss = step(w, x)
    losses.append(float(loss))
print(json.dumps({"losses": losses, "w": np.asarray(w).tolist(), "sharding": str(w.sharding.spec),
                  "stats": fastdispatch.warm_start_stats()}))
"""


def test_sharded_inputs_over_eight_devices_load_with_their_shardings(tmp_path):
    (tmp_path / "sharded.py").write_text(SHARDED_PROGRAM)

    def sharded_run():
        proc = subprocess.run(
            [sys.executable, str(tmp_path / "sharded.py"), str(tmp_path / "store")],
            capture_output=True,
            text=True,
            timeout=180,
            env=environment(),
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.count("TRACED step"), json.loads(proc.stdout.strip().splitlines()[-1])

    traced, first = sharded_run()
    assert traced == 1 and first["stats"]["written"] == 1
    traced, second = sharded_run()
    assert traced == 0 and second["stats"]["missed"] == 0
    # Loaded once: the fed-back outputs run on its entry (on jax 0.8 and 0.9
    # their avals hash apart from the inputs', equal to them: the guard takes them).
    assert second["stats"]["loaded"] == 1
    for name in ("losses", "w", "sharding"):
        assert second[name] == first[name], name
