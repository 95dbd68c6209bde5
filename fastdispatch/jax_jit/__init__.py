"""The jit front end: ``fastdispatch.jit`` (CompiledFunction) and ``device_put``.

With the seed jax_jit module's state and argument-signature API (state.py,
arg_signature.py).
"""
