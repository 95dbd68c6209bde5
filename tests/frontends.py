"""Which front ends this environment can test, and why not.

flax 0.12 (the library behind fastdispatch.nnx) requires jax 0.10: CI's runs on
jax 0.8 and 0.9 go without it (.ci/run, docs/versions.md), and every test that
needs flax skips there, saying so.  A test needing flax either calls
``import_flax()`` (a whole module: at its top) or carries ``needs_flax``.
"""

import importlib.util

import pytest

FLAX_REASON = (
    "flax is not installed: flax 0.12, the library of fastdispatch.nnx, needs jax 0.10, "
    "so the runs on older jax test without it"
)
EQUINOX_REASON = "equinox is not installed (the test-core extra installs it, on every supported jax)"

HAS_FLAX = importlib.util.find_spec("flax") is not None
needs_flax = pytest.mark.skipif(not HAS_FLAX, reason=FLAX_REASON)
needs_equinox = pytest.mark.skipif(importlib.util.find_spec("equinox") is None, reason=EQUINOX_REASON)


def import_flax():
    """``flax``, or this module's tests skipped with the reason."""
    return pytest.importorskip("flax", reason=FLAX_REASON)
