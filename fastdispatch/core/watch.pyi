"""Type stubs for the compiled module fastdispatch.core.watch."""

from typing import Any

DEVICE_SAMPLING: dict[str, int]

def set_trace_sink(sink: Any) -> None: ...
def output_owner(array: Any) -> int | None: ...
