"""Type stubs for the compiled module fastdispatch.nnx.record."""

import enum
from typing import Any

from fastdispatch.core.execute import Outputs

ARRAY_SLOT: object
STATE_SLOT: object

class InputKind(enum.IntEnum):
    INPUT_ROOT = 0
    INPUT_PLAIN = 1

class Guard:
    target: Any
    def holds_now(self) -> bool: ...

class NodeGuard(Guard):
    def __init__(self, target: Any, keys: tuple[Any, ...], values: tuple[Any, ...]) -> None: ...

class DictGuard(Guard):
    def __init__(self, target: dict[Any, Any], keys: tuple[Any, ...], values: tuple[Any, ...]) -> None: ...

class ListGuard(Guard):
    def __init__(self, target: list[Any]) -> None: ...

class VariableGuard(Guard):
    def __init__(self, target: Any, metadata: dict[str, Any]) -> None: ...

class FlagsGuard(Guard):
    def __init__(self, target: Any, key: str, flags: tuple[Any, ...]) -> None: ...

class Input:
    kind: int
    position: int | str
    root: Any
    slot_start: int
    slot_stop: int
    def __init__(
        self,
        kind: int,
        position: int | str,
        root: Any = None,
        treedef: Any = None,
        slot_start: int = 0,
        slot_stop: int = 0,
    ) -> None: ...

class Record(Outputs):
    nargs: int
    kwnames: tuple[str, ...]
    statics: tuple[Any, ...]
    inputs: tuple[Input, ...]
    guards: tuple[Guard, ...]
    slots: tuple[Any, ...]
    num_slots: int
    def __init__(self, *args: Any) -> None: ...
    def gather_now(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None: ...
    def write_slots(self, outputs: list[Any]) -> None: ...

def configure(raw_value: Any, metadata: Any, flags_fields: Any, state_type: type) -> None: ...
def raw_value(variable: Any) -> Any: ...
def metadata(variable: Any) -> dict[str, Any]: ...
