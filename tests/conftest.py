"""Fixtures shared by the whole suite.

``jit`` runs a test against both implementations of the contract: every test
that takes it runs once with ``jax.jit`` (what jax does today) and once with
``fastdispatch.jit`` (which must do the same).  Helper modules beside this
file (contract, treecases, subprocess_util) are importable by name: pytest's
``pythonpath`` setting puts tests/ on the path.
"""

from __future__ import annotations

import jax
import pytest


@pytest.fixture(params=["jax", "fastdispatch"])
def jit(request):
    """``jax.jit`` or ``fastdispatch.jit``: the two implementations of the contract."""
    if request.param == "jax":
        return jax.jit
    # Imported here, not at module level: a missing or broken fastdispatch fails
    # the fastdispatch half of the suite and leaves the jax half running.
    import fastdispatch

    return fastdispatch.jit
