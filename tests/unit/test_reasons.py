"""The hand-off reasons: one vocabulary, every reason documented."""

import pathlib
import re

import pytest

from fastdispatch import _reasons
from fastdispatch._reasons import MustHandOff

TRACING_DOC = pathlib.Path(__file__).parents[2] / "docs" / "tracing.md"


def documented_reasons():
    # The first cell of every table row: `reason`.
    return set(re.findall(r"^\| `([^`]+)` \|", TRACING_DOC.read_text(), re.MULTILINE))


def test_every_reason_is_in_the_tracing_doc():
    missing = [reason for reason in _reasons.ALL if reason not in documented_reasons()]
    assert not missing, f"docs/tracing.md's hand_off tables do not list {missing}"


def test_reasons_are_interned_and_distinct():
    assert len(set(_reasons.ALL)) == len(_reasons.ALL) > 40
    for reason in _reasons.ALL:
        assert reason is _reasons.sys.intern(str(reason + " ")[:-1])


def test_not_fast_carries_a_known_reason():
    refusal = MustHandOff(_reasons.EFFECTS, "a callback")
    assert refusal.reason is _reasons.EFFECTS and refusal.detail == "a callback"
    assert str(refusal) == "effects: a callback"
    with pytest.raises(AssertionError):
        MustHandOff("some reason nobody documented")


def test_an_error_building_an_executable_is_a_hand_off():
    # A miss's output stands whatever building its executable raised: the
    # entry's calls are handed off, for the reason said, or as not reusable.
    own = MustHandOff(_reasons.EFFECTS, "io_callback")
    assert MustHandOff.from_error(own) is own
    other = MustHandOff.from_error(AttributeError("no out_tree"))
    assert other.reason is _reasons.EXECUTABLE_NOT_REUSABLE
    assert other.detail == "AttributeError('no out_tree')"
