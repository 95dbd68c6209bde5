"""The jit front end: ``fastdispatch.jit`` (CompiledFunction) and ``device_put``.

With the state and argument-signature API of jaxlib's old ``jax_jit`` module
(state.py, arg_signature.py).
"""
