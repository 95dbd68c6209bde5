"""Type stubs for the compiled module fastdispatch.nnx.function."""

from collections.abc import Callable
from typing import Any

from fastdispatch.core.engine import Engine
from fastdispatch.core.execute import Outputs
from fastdispatch.nnx.record import Record

class Merged(Outputs):
    compiled: Any
    def __init__(self, flax_function: Any, compiled: Any) -> None: ...

class NnxJitFunction(Engine):
    flax_function: Any
    jitted: Any
    fast: bool
    def __init__(
        self, flax_function: Any, jitted: Any, fast: bool, flax_call: Callable[..., Any]
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, instance: Any, owner: Any) -> Any: ...
    lower: Callable[..., Any]  # flax's
    trace: Callable[..., Any]  # flax's
    eval_shape: Callable[..., Any]  # flax's
    def clear_cache(self) -> None: ...
    def _cache_size(self) -> int: ...
    def _records(self) -> list[Record]: ...

def configure(graph_context: Any, static_cache: str, merge: Callable[[Any, Any], Any]) -> None: ...
def signature_of(treedef: Any, leaves: list[Any], static_args: tuple = (), front: Any = None) -> Any: ...
