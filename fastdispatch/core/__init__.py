"""The core: trees, signatures, executables, outputs, the cache and the engine.

What every front end shares; nothing here imports a front end or a tool.
"""
