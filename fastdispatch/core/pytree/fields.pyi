"""Type stubs for the compiled module fastdispatch.core.pytree.fields."""

from typing import Any

class FieldLayout:
    children: tuple[str, ...]
    aux_prefix: tuple[Any, ...]
    aux_names: tuple[str, ...]
    dict_size: int
    direct_unflatten: bool
    absent: Any
    def __init__(
        self,
        children: Any,
        aux_prefix: Any,
        aux_names: Any,
        dict_size: int,
        *,
        direct_unflatten: bool = False,
        absent: Any = ...,
    ) -> None: ...
