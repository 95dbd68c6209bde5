"""Type stubs for the compiled module fastdispatch.core.pytree.flatten."""

from typing import Any

from fastdispatch.core.pytree.treedef import TreeDef

def flatten(tree: Any) -> tuple[list[Any], TreeDef]: ...
def unflatten(treedef: TreeDef, leaves: Any) -> Any: ...
