"""fastdispatch: jax.jit with less time between the Python call and the executable.

from fastdispatch import jit     # instead of: from jax import jit
"""

from fastdispatch._cache import CompiledFunctionCache, default_cache
from fastdispatch._device_put import device_put
from fastdispatch._dispatch import CompiledFunction, jit, set_post_hook
from fastdispatch.tracing import assert_max_compiles, stats, trace

__all__ = [
    "CompiledFunction",
    "CompiledFunctionCache",
    "assert_max_compiles",
    "default_cache",
    "device_put",
    "jit",
    "set_post_hook",
    "stats",
    "trace",
]
