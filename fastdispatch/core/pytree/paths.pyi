"""Type stubs for the compiled module fastdispatch.core.pytree.paths."""

from typing import Any

from fastdispatch.core.pytree.treedef import TreeDef

def first_difference(a: TreeDef, b: TreeDef) -> tuple[tuple[Any, ...], str] | None: ...
def leaf_paths(node: TreeDef) -> list[tuple[Any, ...]]: ...
