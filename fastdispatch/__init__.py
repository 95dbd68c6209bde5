"""fastdispatch: jax.jit with less time between the Python call and the executable.

from fastdispatch import jit     # instead of: from jax import jit
"""

from fastdispatch._cache import CompiledFunctionCache, default_cache
from fastdispatch._dispatch import CompiledFunction, jit, set_post_hook
from fastdispatch.tracing import assert_max_compiles, stats, trace


def __getattr__(name):
    # Front ends import their library only when first used.
    if name == "filter_jit":
        from fastdispatch.equinox import filter_jit

        return filter_jit
    raise AttributeError(f"module 'fastdispatch' has no attribute {name!r}")


__all__ = [
    "CompiledFunction",
    "CompiledFunctionCache",
    "assert_max_compiles",
    "default_cache",
    "filter_jit",
    "jit",
    "set_post_hook",
    "stats",
    "trace",
]
