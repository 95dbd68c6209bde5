"""Type stubs for the compiled module fastdispatch._execute."""

from typing import Any, NamedTuple

DELEGATE: object
MAX_REUSED_SCALARS: int

class ScalarInput(NamedTuple):
    aval: Any
    sharding: Any
    devices: tuple[Any, ...]

class Executable: ...
