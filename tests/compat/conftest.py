"""The ``jit`` fixture: every contract test runs against jax.jit and fastdispatch.jit."""
from __future__ import annotations

import os
import sys

import jax
import pytest

# tests/ holds subprocess_util.py, shared by compat and unit tests.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fastdispatch_jit():
    # Imported here, not at module level: a missing or broken fastdispatch fails
    # the fastdispatch half of the suite and leaves the jax half running.
    import fastdispatch

    return fastdispatch.jit


@pytest.fixture(params=["jax", "fastdispatch"])
def jit(request):
    """``jax.jit`` or ``fastdispatch.jit``: the two implementations of the contract."""
    if request.param == "jax":
        return jax.jit
    return _fastdispatch_jit()
