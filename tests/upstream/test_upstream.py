"""CI's share of the upstream proof (tests/upstream/run.py runs it all): a
fixed set of flax's own nnx test files, the ones about compiling (nnx.jit, the
transforms, graphs), run stock, routed and traced; every test that passes
stock must pass the other two ways.

flax's tests come from its sdist on PyPI, fetched with pip into the runner's
cache (FASTDISPATCH_UPSTREAM_CACHE, default ~/.cache/fastdispatch/upstream) or
found in FASTDISPATCH_UPSTREAM.  Where they cannot be had, the test skips,
saying why; in CI (CI=true) it fails instead.  Marked ``upstream``: it runs
three pytest processes, about a minute each; ``-m "not upstream"`` leaves it out.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from upstream import run

pytestmark = pytest.mark.upstream

# Chosen for what they exercise (nnx.jit, and jax.jit under it; graph splits
# and merges; Variables holding mutable arrays) and for their time: the three
# ways in about three minutes on two cores.  Fixed, so that CI runs the same
# tests every time (about 320 of flax's 1,500).
FLAX_FILES = (
    "tests/nnx/transforms_test.py::TestJIT",
    "tests/nnx/transforms_test.py::TestTreeJIT",
    "tests/nnx/graph_utils_test.py",
    "tests/nnx/mutable_array_test.py",
)


@pytest.fixture(scope="module")
def flax_tests():
    suite = run.SUITES["flax"]
    try:
        root = run.locate(suite, os.environ.get("FASTDISPATCH_UPSTREAM"), run.default_cache())
    except run.SuiteMissing as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the upstream tests: {e}")
        pytest.skip(f"flax's tests cannot be had here: {e}")
    return dataclasses.replace(suite, paths=FLAX_FILES), root


def test_flax_nnx_passes_routed_and_traced(flax_tests, tmp_path):
    suite, root = flax_tests
    runs = [run.run_way(suite, root, way, tmp_path, timeout=600) for way in run.WAYS]
    stock = runs[0]
    problems = [p for p in map(run.check_routing, runs) if p]
    differences = run.compare(runs)
    text = run.report(suite, root, runs, differences, problems)
    # The files ran: a run that collected nothing would compare nothing.
    assert run.counts(stock)["passed"] >= 100, text
    assert not problems, text
    assert not differences, text
