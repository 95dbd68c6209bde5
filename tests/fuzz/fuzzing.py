"""What the differential fuzzers share: how many examples, and the outcome of a call.

Each fuzzer runs a generated program through fastdispatch and through the
library's own jit and requires the same outcomes.  In CI the examples are a
fixed set (tests/conftest.py's ``ci`` profile derandomizes hypothesis), a few
dozen a fuzzer; ``FASTDISPATCH_FUZZ_EXAMPLES=N`` runs N a test, at random
outside CI, to explore.
"""

import os
import re

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("FASTDISPATCH_FUZZ_EXAMPLES", "25"))

fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def outcome(call):
    """``("returned", value)`` or ``("raised", (type, message))`` of ``call()``;
    the message without objects' addresses (each side has its own function)."""
    try:
        return "returned", call()
    except Exception as error:  # the error is part of the contract: compared, never hidden
        return "raised", (type(error), re.sub(r" at 0x[0-9a-f]+", "", str(error)))


def assert_same_outcome(ours, theirs, same_value):
    """Both returned (values compared by ``same_value``), or both raised the
    same error type with the same message."""
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "raised":
        assert ours[1] == theirs[1], (ours[1], theirs[1])
    else:
        same_value(ours[1], theirs[1])
