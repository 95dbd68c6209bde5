"""Type stubs for the compiled module fastdispatch.jax_jit.transfer."""

from typing import Any

MAX_AVALS: int

def device_put(x: Any, device: Any = None) -> Any: ...
