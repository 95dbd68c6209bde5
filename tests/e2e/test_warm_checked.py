"""Warm start's checked mode across processes: the key is the traced program.

The program of tests/e2e/test_warm_start.py (warm_program.py) runs in checked
mode, with a tenth function closing over an object the identity digest
refuses.  Each run reports, per function, jax's traces, lowerings and
compiles: in checked mode every call is traced; a load skips lowering and
compiling, a miss traces once and compiles from that trace.
"""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest
from e2e.test_warm_start import CLI_PROGRAM, STORED, run, store_files, write_program

CHECKED = {"checked": True, "opaque": True}
CHECKED_STORED = (*STORED, "opaque")


def events(report, name):
    return report["events"].get(name, {"traces": 0, "lowerings": 0, "compiles": 0})


def compiled_functions(report):
    """The functions jax lowered (and so compiled) in this run."""
    return collections.Counter(
        name for name in CHECKED_STORED for _ in range(events(report, name)["lowerings"])
    )


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    directory = tmp_path_factory.mktemp("checked")
    write_program(directory)
    return directory, run(directory, **CHECKED)


def test_a_miss_traces_once_and_compiles_that_trace(filled):
    directory, first = filled
    assert first["stats"]["checked"]
    assert first["stats"]["written"] == len(CHECKED_STORED) == len(store_files(directory))
    for name in CHECKED_STORED:
        assert events(first, name) == {"traces": 1, "lowerings": 1, "compiles": 1}, name
    # Effects are not stored in checked mode; the opaque closure is.
    assert "printing" in first["stats"]["not_stored"]
    assert "opaque" not in str(first["stats"]["not_stored"])


def test_a_later_process_loads_without_lowering_or_compiling(filled, program):
    first = filled[1]
    second = run(program, **CHECKED)
    assert second["results"] == first["results"]
    assert second["stats"]["loaded"] == len(CHECKED_STORED)
    assert second["stats"]["written"] == second["stats"]["missed"] == 0
    for name in CHECKED_STORED:
        assert events(second, name) == {"traces": 1, "lowerings": 0, "compiles": 0}, name
    assert second["donated_deleted"] == first["donated_deleted"]
    assert second["stdout"].count("printing 3.0") == 1


@pytest.mark.parametrize(
    "change, recompiled",
    [
        ({"add": 5.0}, ["body"]),  # the function's source
        ({"helper": 4.0}, ["helper"]),  # a helper in another user module
        ({"w": [3.0, 2.0, 1.0]}, ["global_array"]),  # a global array's values
        ({"closure": 4.0}, ["closed", "opaque"]),  # a closure's value, the object's too
    ],
)
def test_a_changed_program_recompiles(program, change, recompiled):
    if "add" in change or "helper" in change:
        write_program(program, **change)
    second = run(program, **CHECKED, **change)
    assert compiled_functions(second) == collections.Counter(recompiled)
    assert second["stats"]["loaded"] == len(CHECKED_STORED) - len(recompiled)


def test_the_normal_mode_refuses_the_opaque_closure(program):
    normal = run(program, opaque=True)
    assert (
        "closes over an object of type __main__.Scale"
        in normal["stats"]["not_stored"]["make_opaque.<locals>.opaque"]
    )


def test_the_two_modes_never_read_each_other_s_files(program):
    normal = run(program, opaque=True)
    assert normal["stats"]["loaded"] == 0 and normal["stats"]["damaged"] == 0
    assert normal["stats"]["written"] == len(STORED)  # opaque is not stored
    assert len(store_files(program)) == len(CHECKED_STORED) + len(STORED)
    assert run(program, opaque=True)["stats"]["loaded"] == len(STORED)
    assert run(program, **CHECKED)["stats"]["loaded"] == len(CHECKED_STORED)


def test_environment_variable_turns_it_on(program):
    env = {"FASTDISPATCH_WARM_START": str(program / "store"), "FASTDISPATCH_WARM_START_CHECKED": "1"}
    second = run(program, env=env, opaque=True)
    assert second["stats"]["checked"]
    assert second["stats"]["loaded"] == len(CHECKED_STORED)


def test_command_line_option(tmp_path):
    (tmp_path / "cli.py").write_text(CLI_PROGRAM)
    store, program = str(tmp_path / "store"), str(tmp_path / "cli.py")
    cmd = [sys.executable, "-m", "fastdispatch", "--warm-start", store, "--warm-start-checked"]
    outputs = [
        subprocess.run(cmd + options + [program], capture_output=True, text=True, timeout=180)
        for options in ([], ["--trace"])
    ]
    for out in outputs:
        assert out.returncode == 0, out.stderr
    # Checked mode traces every run; the second loads.
    assert outputs[0].stdout == outputs[1].stdout
    assert f"warm start ({store}, checked): 1 loaded, 0 missed, 0 written" in outputs[1].stderr
