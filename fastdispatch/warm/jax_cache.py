"""jax's own persistent compilation cache, on underneath warm start.

Warm start skips tracing, lowering and compiling for the calls its key can
describe; jax's persistent cache skips XLA's compile for every computation jax
compiles, ours or not (eager operations, a function the key refuses, a stock
``jax.jit`` inside a library).  So that a program under warm start never costs
more than it would with jax's cache alone, warm start turns jax's cache on in a
subdirectory of its store (``DIR/.programs/jax-cache``, beside the programs'
manifests: what the store keeps for the programs that use it, apart from its
own executables), unless the program has set a
cache of its own (``jax_compilation_cache_dir``, by ``jax.config.update`` or
``JAX_COMPILATION_CACHE_DIR``) or turned jax's cache off
(``jax_enable_compilation_cache=False``): then jax's settings stay as they are.

Thresholds.  jax writes a compile only when it took at least
``jax_persistent_cache_min_compile_time_secs`` (default 1 s) and its entry has
at least ``jax_persistent_cache_min_entry_size_bytes``.  On CPU most compiles,
eager operations' above all, take well under a second each, yet together they
are most of a restarted program's start (flax's scan-over-layers example:
5.7 s without a cache, 2.4 s with every compile cached).  So warm start sets
both thresholds to "every compile" (0 s, and -1: no size minimum), as the
benchmark's "stock with jax's cache" does, unless the program set a threshold
itself (its value is not jax's default, or its environment variable is set).
A cached entry costs one small file; the saved compile costs tens of
milliseconds or more.

jax bounds its cache (``jax_compilation_cache_max_size``) only where the
``filelock`` package is installed; then warm start bounds it by the store's
``max_bytes`` too, else it is unbounded (clear it with the store).

These are jax's public settings (``jax.config``); a later ``warm_start`` (or
``warm_start(None)``) puts back what this one changed, and
``compilation_cache.reset_cache()`` makes jax read the new directory at its
next compile.
"""

from __future__ import annotations

import importlib.util
import os

import jax
from jax.experimental.compilation_cache import compilation_cache

SUBDIRECTORY = os.path.join(".programs", "jax-cache")

# Threshold settings, the value warm start gives each, and jax's default.
_THRESHOLDS = (
    ("jax_persistent_cache_min_compile_time_secs", 0.0, 1.0),
    ("jax_persistent_cache_min_entry_size_bytes", -1, 0),
)
_DIRECTORY = "jax_compilation_cache_dir"
_MAX_SIZE = "jax_compilation_cache_max_size"

# What this module changed: setting name -> the value it had before.
_changed: dict = {}


def _set_by_user(name: str, default) -> bool:
    return name.upper() in os.environ or getattr(jax.config, name) != default


def enable(directory: str, max_bytes: int, writable: bool = True) -> dict:
    """Turn jax's persistent cache on in ``directory``/.programs/jax-cache unless the
    program set its own (or turned it off); returns how it stands, for
    ``warm_start_stats()["jax_cache"]``: ``directory`` (None: off),
    ``owner`` ("warm start", "the program" or None) and ``settings``."""
    restore()
    if not jax.config.jax_enable_compilation_cache:
        return {"directory": None, "owner": None, "settings": {}, "off": "the program turned it off"}
    own = jax.config.jax_compilation_cache_dir
    if own:
        return {"directory": own, "owner": "the program", "settings": _settings()}
    if not writable:
        # jax would warn at every compile it cannot write.
        return {"directory": None, "owner": None, "settings": {}, "off": "the store is read-only"}
    path = os.path.join(directory, SUBDIRECTORY)
    _update(_DIRECTORY, path)
    for name, value, default in _THRESHOLDS:
        if not _set_by_user(name, default):
            _update(name, value)
    if importlib.util.find_spec("filelock") is not None and not _set_by_user(_MAX_SIZE, -1):
        _update(_MAX_SIZE, max_bytes)
    compilation_cache.reset_cache()  # read the new directory at the next compile
    return {"directory": path, "owner": "warm start", "settings": _settings()}


def restore() -> None:
    """Put back the settings ``enable`` changed (warm start turned off or moved)."""
    if not _changed:
        return
    for name, value in _changed.items():
        jax.config.update(name, value)
    _changed.clear()
    compilation_cache.reset_cache()


def _update(name, value):
    _changed.setdefault(name, getattr(jax.config, name))
    jax.config.update(name, value)


def _settings() -> dict:
    return {name: getattr(jax.config, name) for name, _, _ in _THRESHOLDS}


def describe(state: dict) -> str:
    """One line for the --trace summary."""
    if state["directory"] is None:
        return f"jax's persistent compilation cache: off ({state.get('off', 'not set up')})"
    thresholds = state["settings"]
    seconds = thresholds["jax_persistent_cache_min_compile_time_secs"]
    size = thresholds["jax_persistent_cache_min_entry_size_bytes"]
    which = "every compile" if seconds <= 0 and size <= 0 else f"compiles of {seconds:g} s or more"
    if state["owner"] == "warm start":
        return f"jax's persistent compilation cache underneath: {state['directory']} ({which})"
    return f"jax's persistent compilation cache: the program's own, {state['directory']} ({which})"
