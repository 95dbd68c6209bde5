"""Fixtures shared by the whole suite.

``jit`` runs a test against both implementations of the contract: every test
that takes it runs once with ``jax.jit`` (what jax does today) and once with
``fastdispatch.jit`` (which must do the same); a test that only compares the
two runs once, on fastdispatch (``contract.against_jax``).  Helper modules
beside this file (contract, treecases, subprocess_util) are importable by name:
pytest's ``pythonpath`` setting puts tests/ on the path.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import pytest
from hypothesis import settings

# Property tests explore at random on a developer's machine and replay a fixed
# set of examples in CI (.ci/run sets CI=true), so that a fresh clone never
# fails at random; HYPOTHESIS_PROFILE=ci replays them locally.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(params=["jax", "fastdispatch"])
def jit(request):
    """``jax.jit`` or ``fastdispatch.jit``: the two implementations of the contract."""
    if request.param == "jax":
        return jax.jit
    # Imported here, not at module level: a missing or broken fastdispatch fails
    # the fastdispatch half of the suite and leaves the jax half running.
    import fastdispatch

    return fastdispatch.jit


class RecordedCall(NamedTuple):
    fn: object  # the jitted function (a CompiledFunction, a filter_jit wrapper, ...)
    hit: bool  # it ran on the fast path
    hand_off: str | None  # why it did not, or None (a hit, a compile)
    signature: object  # its CallSignature, or None


class RecordingSink:
    """The dispatcher's trace hook, keeping a RecordedCall per call."""

    def __init__(self):
        self.calls = []

    def record(self, fn, times, hit, compile_ns, hand_off, signature):
        assert len(times) == 6 and list(times) == sorted(times)
        self.calls.append(RecordedCall(fn, hit, hand_off, signature))

    def reasons(self):
        """Each call's hand-off reason (None: it ran here, or compiled)."""
        return [call.hand_off for call in self.calls]

    def outcomes(self):
        """Each call: "hit", its hand-off reason, or "compile"."""
        return ["hit" if call.hit else call.hand_off or "compile" for call in self.calls]


@pytest.fixture
def sink():
    """Every call of every front end, recorded while the test runs."""
    from fastdispatch.core import watch as _watch

    recording = RecordingSink()
    _watch.set_trace_sink(recording)
    yield recording
    _watch.set_trace_sink(None)
