"""Warm start for filter_jit across processes: the first run fills a store,
a later run reads it.

Each test runs tests/e2e/filter_warm_program.py (filter_jit functions: an
equinox MLP's forward pass and its optax training step with donate="all", a
Module with a static field, a closure, one that returns an object its trace
makes) in fresh processes over one store, and checks the results against the
first run's and numpy's, which functions jax traced, and the store's counts.
The contract above speed: a change to anything a function's trace reads
recompiles it; an output no other process can rebuild is never stored.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest
from e2e.test_warm_start import environment, report_of, store_files

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filter_warm_program.py")
FUNCTIONS = ("forward", "train_step", "tagged", "scaled", "body", "closed")
# tagged returns a Tag its trace makes: not stored.
STORED = tuple(name for name in FUNCTIONS if name != "tagged")
MODULES = """\
import equinox as eqx
import jax


class Scaled(eqx.Module):
    w: jax.Array
    power: int = eqx.field(static=True)

    def __call__(self, x):
        return self.w * x**self.power
"""


def write_program(directory, add=2.0):
    with open(PROGRAM) as f:
        (directory / "prog.py").write_text(f.read().replace("x + ADD", f"x + {add!r}"))
    (directory / "modules.py").write_text(MODULES)


def run(directory, **cfg):
    command = [sys.executable, str(directory / "prog.py"), json.dumps(cfg), str(directory / "store")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment())
    report = report_of(proc.returncode, proc.stdout, proc.stderr)
    for name, expected in report["expected"].items():
        assert report["results"][name] == pytest.approx(expected), f"{name} differs from numpy's"
    return report


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A program and the store its first run filled, and that run's report."""
    directory = tmp_path_factory.mktemp("filter-filled")
    write_program(directory)
    return directory, run(directory)


def test_first_run_fills_the_store(filled):
    directory, first = filled
    assert first["traced"] == collections.Counter(FUNCTIONS)
    assert first["stats"]["written"] == len(STORED) == len(store_files(directory))
    assert first["stats"]["loaded"] == 0


def test_second_run_loads_without_tracing(filled, program):
    first = filled[1]
    second = run(program)
    assert second["traced"] == collections.Counter(["tagged"])  # not stored, so traced
    assert second["stats"]["written"] == 0
    assert second["stats"]["loaded"] == len(STORED)
    # The same results: the MLP's outputs, its static depth and the label
    # forward returns, three optax steps' losses and the trained weights.
    assert second["results"] == first["results"]
    # Donation as after a compile; the stepped model (its static leaves the
    # argument's own) runs on the entry of the first call: one entry, no
    # recompile.  (On jax 0.8 and 0.9 a loaded executable's outputs have avals
    # equal to its inputs' that hash apart, their dtypes unpickled: the guard
    # takes them as equal, so they neither key anew nor load again.)
    assert second["donated_deleted"] and first["donated_deleted"]
    assert first["train_step_entries"] == second["train_step_entries"] == 1


def test_an_output_no_process_can_rebuild_is_not_stored(filled, program):
    first = filled[1]
    for report in (first, run(program)):
        reason = report["stats"]["not_stored"]["tagged"]
        assert "tagged returns a non-array output of type __main__.Tag" in reason
        # Compiled as always: equinox's own result, the trace's very object.
        assert report["tag_is_the_traced_one"]
        assert report["results"]["tagged"] == report["expected"]["tagged"]


@pytest.mark.parametrize(
    "changed, change",
    [
        ("body", {"add": 5.0}),  # the function's source
        ("closed", {"closure": 4.0}),  # a closure cell
        ("scaled", {"power": 3}),  # a static field of a Module argument
    ],
)
def test_a_change_recompiles_that_function_only(program, changed, change):
    if changed == "body":
        write_program(program, **change)
    second = run(program, **change)
    assert second["traced"] == collections.Counter([changed, "tagged"])
    assert second["stats"]["loaded"] == len(STORED) - 1
    assert second["stats"]["written"] == 1


def test_a_key_changed_where_the_computation_did_not_is_stored_again(program):
    # A comment in the module of Scaled changes scaled's key, not its program:
    # jax's cache underneath serves the compile (from the first edit's run on:
    # the copy's paths are in its programs' locations),
    # which is compiled again for the store, so that the next run loads it.
    for edit in range(2):
        with open(program / "modules.py", "a") as f:
            f.write(f"# comment {edit}\n")
        second = run(program)
        assert second["traced"] == collections.Counter(["scaled", "tagged"])  # lowered again untraced
        scaled = second["stats"]["functions"]["scaled"]
        assert (scaled["missed"], scaled["written"]) == (1, 1), second["stats"]
    assert scaled["refilled"] == 1, second["stats"]
    third = run(program)
    assert third["traced"] == collections.Counter(["tagged"])
    assert third["stats"]["loaded"] == len(STORED)
    assert third["results"] == second["results"]
