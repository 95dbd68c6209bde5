"""What the recorder and every report name alike: a call's phases, a
function's label, the report's title (one module below them all, so that none
of them imports another for a name)."""

from __future__ import annotations

# The phases of a fast-path call, between the engine's stamps (CallTimes).
PHASES = ("flatten", "signature", "lookup", "launch", "unflatten")


def label(stats):
    """A function as the reports name it: its name and where it was defined."""
    return f"{stats.name} ({stats.location})"


def trace_title(process=None):
    """The report's title: with "process 1 of 2" in a program of several processes."""
    if process is None:
        return "fastdispatch trace"
    index, count = process
    return f"fastdispatch trace, process {index} of {count}"
