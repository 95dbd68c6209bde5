"""Type stubs for the compiled module fastdispatch.core.pytree.registry."""

from collections.abc import Callable
from typing import Any

from fastdispatch.core.pytree.fields import FieldLayout

def add_field_reader(reader: Callable[[type, Any], FieldLayout | None]) -> None: ...
def add_lazy_field_reader(package: str, module: str) -> None: ...
