"""Shared by the warm-start tests, each of which defines its own ``filled``
(a program and the store its first run filled, then that run's report...)."""

import shutil

import pytest


@pytest.fixture
def program(filled, tmp_path):
    """A copy of the filled program and store, for one test to change."""
    directory = tmp_path / "run"
    shutil.copytree(filled[0], directory)
    return directory
