"""Warm start for nnx.jit across processes: the first run fills a store, a
later run reads it, and every result is flax's own.

Each test runs tests/e2e/nnx_warm_program.py (an MLP trained with
nnx.Optimizer and optax.adam, its Module counting its calls in a raw array
attribute; the same through nnx.cached_partial; BatchNorm and Dropout
switched between train and eval; small functions whose body, closure or
Module static attributes a run changes; two that cannot be stored) under
``python -m fastdispatch --warm-start`` over one store, and compares its
results with the same program run stock (flax's own nnx.jit).  The contract
above speed: a change to anything a trace reads recompiles it; a call whose
graph updates a load could not reproduce is never stored.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from e2e.test_warm_start import environment, report_of, store_files

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nnx_warm_program.py")
# A function is traced once per graph structure: forward twice (train, eval).
TRACES = collections.Counter(
    {
        "train_step": 1,
        "cached_step": 1,
        "forward": 2,
        "body": 1,
        "closed": 1,
        "scaled": 1,
        "shifted": 1,
        "grows": 2,
    }
)
NOT_STORED = ("shifted", "grows")
STORED = sum(count for name, count in TRACES.items() if name not in NOT_STORED)
MODULES = """\
import jax.numpy as jnp
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.linear1 = nnx.Linear(4, 16, rngs=rngs)
        self.linear2 = nnx.Linear(16, 2, rngs=rngs)

    def __call__(self, x):
        return self.linear2(nnx.relu(self.linear1(x)))


class CountingMLP(MLP):
    # Counts its calls in a raw array attribute, updated in the step.  (Not
    # through nnx.cached_partial: flax's static cache takes every leaf for a
    # Variable.)

    def __init__(self, rngs):
        super().__init__(rngs)
        self.calls = jnp.zeros((), jnp.int32)

    def __call__(self, x):
        self.calls = self.calls + 1
        return super().__call__(x)


class Net(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(4, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.dropout(self.bn(self.linear(x)))


class Scaled(nnx.Module):
    def __init__(self, power, flag):
        self.w = nnx.Param(jnp.ones(3))
        self.power = power
        self.flag = flag

    def __call__(self, x):
        y = self.w * x**self.power
        return y + 1 if self.flag else y
"""


def write_program(directory, add=2.0):
    with open(PROGRAM) as f:
        (directory / "prog.py").write_text(f.read().replace("+ ADD", f"+ {add!r}"))
    (directory / "modules.py").write_text(MODULES)


def run(directory, stock=False, **cfg):
    store = str(directory / "store")
    prefix = [] if stock or cfg.get("direct") else ["-m", "fastdispatch", "--warm-start", store]
    command = [sys.executable, *prefix, str(directory / "prog.py"), json.dumps(cfg), store]
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=environment(), cwd=directory
    )
    return report_of(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A program, the store its first run filled, that run's report, and the
    stock run's (flax's own nnx.jit)."""
    directory = tmp_path_factory.mktemp("nnx-filled")
    write_program(directory)
    stock = run(directory, stock=True)
    return directory, run(directory), stock


def test_first_run_fills_the_store_with_flax_results(filled):
    directory, first, stock = filled
    assert first["results"] == stock["results"]
    assert first["traced"] == TRACES
    assert first["stats"]["written"] == STORED == len(store_files(directory))
    assert first["stats"]["loaded"] == 0


def test_second_run_loads_untraced_with_flax_results(filled, program):
    _, first, stock = filled
    second = run(program)
    # Only what is not stored is traced; every loss, output, parameter, the
    # raw array attribute's count, BatchNorm's statistics are flax's own.
    assert second["traced"] == collections.Counter({name: TRACES[name] for name in NOT_STORED})
    assert second["stats"]["loaded"] == STORED and second["stats"]["written"] == 0
    assert second["results"] == stock["results"]
    assert second["results"]["train_step_calls"] == 4
    assert second["results"]["train_step_opt_step"] == 4


def test_the_direct_api_loads_the_same_store(filled, program):
    stock = filled[2]
    direct = run(program, direct=True)
    assert direct["traced"] == collections.Counter({name: TRACES[name] for name in NOT_STORED})
    assert direct["results"] == stock["results"]


def test_what_cannot_be_stored_is_compiled_with_its_reason(filled, program):
    stock = filled[2]
    for report in (filled[1], run(program)):
        not_stored = report["stats"]["not_stored"]
        assert (
            "shifted reads the global SETTINGS, an object of type __main__.Settings" in not_stored["shifted"]
        )
        assert not_stored["grows"].startswith("not stored: grows is run by flax's own call")
        assert report["results"]["shifted"] == stock["results"]["shifted"]
        assert report["results"]["grows"] == stock["results"]["grows"]


@pytest.mark.parametrize(
    "changed, change",
    [
        ("body", {"add": 5.0}),  # the function's source
        ("closed", {"closure": 4.0}),  # a closure cell
        ("scaled", {"power": 3}),  # an int attribute of a Module argument
        ("scaled", {"flag": False}),  # a Python flag attribute of a Module argument
    ],
)
def test_a_change_recompiles_that_function_only(filled, program, changed, change):
    if changed == "body":
        write_program(program, **change)
    second = run(program, **change)
    expected = collections.Counter({name: TRACES[name] for name in NOT_STORED})
    expected[changed] += 1
    assert second["traced"] == expected
    assert second["stats"]["loaded"] == STORED - 1
    assert second["stats"]["written"] == 1
    # A recompile, not the old result: flax's own for the changed program.
    stock = run(program, stock=True, **change)
    assert second["results"] == stock["results"]
    assert second["results"][changed] != filled[2]["results"][changed]


def test_a_key_changed_where_the_computation_did_not_is_stored_again(filled, program):
    # A comment in the Modules' file changes the keys of the calls over them,
    # not their programs: jax's cache underneath serves each compile (from the
    # first edit's run on: the copy's paths are in its programs' locations),
    # which is compiled again for the store, so that the next run loads it.
    for edit in range(2):
        with open(program / "modules.py", "a") as f:
            f.write(f"# comment {edit}\n")
        second = run(program)
        # Lowered again from jax's caches: no function traced twice.
        assert all(count <= TRACES[name] for name, count in second["traced"].items()), second["traced"]
    refilled = {name: tally for name, tally in second["stats"]["functions"].items() if tally.get("refilled")}
    assert "train_step" in refilled, second["stats"]
    assert all(tally.get("written") == tally["refilled"] for tally in refilled.values()), second["stats"]
    third = run(program)
    assert third["traced"] == collections.Counter({name: TRACES[name] for name in NOT_STORED})
    assert third["stats"]["loaded"] == STORED
    assert third["results"] == filled[2]["results"]
