"""bench --programs (fastdispatch/bench/whole_programs.py): the programs ship
inside the package, so that the bench runs from an installed wheel."""

import fnmatch
import os
import tomllib

import fastdispatch
from fastdispatch.bench.whole_programs import PROGRAMS_DIR, find_programs, selected

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_the_programs_live_in_the_package():
    package = os.path.dirname(os.path.abspath(fastdispatch.__file__))
    assert os.path.commonpath([package, PROGRAMS_DIR]) == package
    assert "trainstate_numpy" in find_programs(PROGRAMS_DIR)


def test_the_wheel_takes_every_program():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        patterns = tomllib.load(f)["tool"]["setuptools"]["package-data"]["fastdispatch.bench"]
    for name in find_programs(PROGRAMS_DIR):
        relative = f"programs/{name}.py"
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), relative


def test_only_picks_programs_by_name_and_refuses_unknown_ones(capsys):
    names = find_programs(PROGRAMS_DIR)
    assert selected(names, "trainstate_numpy, rl_step_counter", "--programs") == [
        "rl_step_counter",
        "trainstate_numpy",
    ]
    assert selected(names, None, "--programs") == names
    assert selected(names, "no_such_program", "--programs") is None
    assert "unknown program no_such_program" in capsys.readouterr().err
