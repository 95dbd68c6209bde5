"""fastdispatch: jax.jit with less time between the Python call and the executable."""
