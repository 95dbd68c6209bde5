"""Type stubs for the compiled module fastdispatch.jax_jit.function."""

from collections.abc import Callable
from typing import Any

from fastdispatch.core.cache import CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine import Engine

NOT_GIVEN: object

class CompiledFunction(Engine):
    fun: Callable[..., Any]
    __wrapped__: Callable[..., Any]
    def __init__(
        self,
        fun: Callable[..., Any],
        options: dict[str, Any] | None = None,
        cache: CompiledFunctionCache | None = None,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, instance: Any, owner: Any) -> Any: ...
    def lower(self, *args: Any, **kwargs: Any) -> Any: ...
    def trace(self, *args: Any, **kwargs: Any) -> Any: ...
    def eval_shape(self, *args: Any, **kwargs: Any) -> Any: ...
    def clear_cache(self) -> None: ...
    @property
    def cache(self) -> CompiledFunctionCache: ...
    def _cache_size(self) -> int: ...
    def _clear_cache(self) -> None: ...
    def _cache_entries(self) -> list[CacheEntry]: ...

def jit(
    fun: Callable[..., Any] = ...,
    /,
    *,
    in_shardings: Any = ...,
    out_shardings: Any = ...,
    static_argnums: int | tuple[int, ...] = ...,
    static_argnames: str | tuple[str, ...] = ...,
    donate_argnums: int | tuple[int, ...] = ...,
    donate_argnames: str | tuple[str, ...] = ...,
    keep_unused: bool = ...,
    device: Any = ...,
    backend: str | None = ...,
    inline: bool = ...,
    compiler_options: dict[str, Any] | None = ...,
    cache: CompiledFunctionCache | None = None,
) -> Any: ...
