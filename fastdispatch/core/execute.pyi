"""Type stubs for the compiled module fastdispatch.core.execute."""

from typing import Any, NamedTuple

MAX_REUSED_SCALARS: int
MAX_CPU_LAUNCHES_AHEAD: int
HOST_BREAK_EVEN_LEAVES: int
NEW_SCALAR_BREAK_EVEN_LEAVES: int

class HostInput(NamedTuple):
    aval: Any
    sharding: Any
    devices: list[Any]
    cast: bool

class HandOff:
    reason: str
    def __init__(self, reason: str) -> None: ...

class Inputs:
    new_scalars_hand_off: bool
    host_hand_off: bool
    def kept_host_arrays(self) -> list[Any | None]: ...

class Executable:
    inputs: Inputs
    out_handlers: list[Any]
    out_treedef: Any
    def memory_bytes(self) -> int | None: ...

class Outputs: ...
class OutputTree(Outputs): ...
