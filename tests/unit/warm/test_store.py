"""fastdispatch.warm.store: what a store notes of the machines its executables
were compiled for, and what it says to a process of another machine.  Its
files, bounds and damage: tests/unit/warm/test_warm.py and
tests/e2e/test_warm_start.py."""

from __future__ import annotations

import json
import os
import shutil
import warnings

import jax.numpy as jnp
import pytest

import fastdispatch
from fastdispatch.warm.keys import machine
from fastdispatch.warm.store import Store, WarmStartWarning


def test_a_store_notes_its_machine_once(tmp_path):
    store = Store(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.note_machine(machine())
        store.note_machine(machine())
    (noted,) = os.listdir(tmp_path / ".machines")
    with open(tmp_path / ".machines" / noted) as f:
        assert json.load(f) == machine()
    assert noted == machine()["digest"] + ".json"
    assert "jax " in machine()["versions"] and "cpu" in machine()["devices"]


@pytest.mark.parametrize(
    "part, value, says",
    [
        ("devices", "tpu: 1 x TPU v5 lite, PJRT C API", "devices tpu: 1 x TPU v5 lite"),
        ("versions", "fastdispatch 0.0.1, jax 0.0.1, jaxlib 0.0.1, Python 3.0.0", "versions fastdispatch"),
        (None, None, "jax's settings or XLA's flags"),
    ],
)
def test_a_store_of_another_machine_says_so_and_serves_nothing(tmp_path, part, value, says):
    fastdispatch.warm_start(tmp_path, preload=False)
    try:
        fastdispatch.jit(lambda x: x + 1)(jnp.ones(2))
    finally:
        fastdispatch.warm_start(None)
    # The store as another machine (or versions, or settings) left it.
    (noted,) = (tmp_path / ".machines").iterdir()
    other = json.loads(noted.read_text())
    other["digest"] = "another"
    if part:
        other[part] = value
    noted.unlink()
    (tmp_path / ".machines" / "another.json").write_text(json.dumps(other))
    for path in tmp_path.glob("*.jit"):  # what the other machine compiled: no key of ours
        path.rename(path.with_name("other-" + path.name))
    fastdispatch.warm_start(tmp_path, preload=False)
    try:
        with pytest.warns(WarmStartWarning, match="another machine") as caught:
            assert fastdispatch.jit(lambda x: x + 1)(jnp.ones(2)).tolist() == [2.0, 2.0]
        (message,) = [str(w.message) for w in caught if "another machine" in str(w.message)]
        assert says in message and "none of them is served here" in message
        if part:
            assert f"(this process: {machine()[part]})" in message
        stats = fastdispatch.warm_start_stats()
        assert (stats["loaded"], stats["missed"]) == (0, 1)
    finally:
        fastdispatch.warm_start(None)
    # This machine is noted now: its next process is told nothing.
    fastdispatch.warm_start(tmp_path, preload=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", WarmStartWarning)
            fastdispatch.jit(lambda x: x + 1)(jnp.ones(2))
    finally:
        fastdispatch.warm_start(None)


def test_a_store_copied_elsewhere_serves_there(tmp_path):
    fastdispatch.warm_start(tmp_path / "here", preload=False)
    try:
        fastdispatch.jit(lambda x: x * 3)(jnp.ones(2))
    finally:
        fastdispatch.warm_start(None)
    shutil.copytree(tmp_path / "here", tmp_path / "there")
    shutil.rmtree(tmp_path / "here")
    fastdispatch.warm_start(tmp_path / "there", preload=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", WarmStartWarning)
            assert fastdispatch.jit(lambda x: x * 3)(jnp.ones(2)).tolist() == [3.0, 3.0]
        stats = fastdispatch.warm_start_stats()
        assert (stats["loaded"], stats["missed"], stats["written"]) == (1, 0, 0)
    finally:
        fastdispatch.warm_start(None)
