"""Type stubs for the compiled module fastdispatch._signature."""

from typing import Any, NamedTuple

from fastdispatch._pytree import TreeDef

LEAF_KIND_NAMES: tuple[str, ...]

class LeafKeyView(NamedTuple):
    kind: str
    aval: Any
    sharding: Any
    committed: bool
    impl: Any
    py_type: type | None
    dtype: Any
    shape: tuple[int, ...] | None

class CallSignature:
    @property
    def treedef(self) -> TreeDef: ...
    @property
    def num_leaves(self) -> int: ...
    @property
    def static_args(self) -> tuple[Any, ...]: ...
    @property
    def context(self) -> tuple[Any, ...]: ...
    @property
    def arg_names(self) -> tuple[str, ...]: ...
    def leaf_keys(self) -> list[LeafKeyView]: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

def leaf_key(leaf: Any) -> LeafKeyView | None: ...
