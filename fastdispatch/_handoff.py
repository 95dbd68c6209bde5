"""fastdispatch's public names on a jax it cannot serve (``_jax.UNSUPPORTED``).

Decided once, at import: ``fastdispatch/__init__.py`` takes its names from here
instead of the Cython core, which is never imported, so the hot path of a
supported jax asks nothing.  The front ends are the libraries' own functions;
``device_put`` and ``eval_shape`` are jax's (their results are by contract the same);
warm start is off (``warm_start`` stores nothing, ``warm_start_stats()`` is
None, as when it was never started).  Everything else measures or configures
fastdispatch's own dispatcher, which is not running: it raises
UnsupportedJaxError, saying why, when called (not when imported, so that a
program that only imports it runs).
"""

from __future__ import annotations

import sys
import types

import jax

from fastdispatch._jax import UNSUPPORTED, UnsupportedJaxError

jit = jax.jit
device_put = jax.device_put
eval_shape = jax.eval_shape


def warm_start(directory, **options):
    """Off on this jax: nothing is stored or loaded (the import's warning said why)."""


def warm_start_stats():
    return None


def _unavailable(name: str):
    def unavailable(*args, **kwargs):
        raise UnsupportedJaxError(f"fastdispatch.{name} is not available: {UNSUPPORTED}")

    unavailable.__name__ = unavailable.__qualname__ = name
    return unavailable


# Public names that need no stand-in: filter_jit is found by the package's
# __getattr__, through the equinox stand-in below; the two classes are _jax's.
_NOT_STOOD_IN = ("filter_jit", "UnsupportedJaxError", "UnsupportedJaxWarning")


def names(public, front_ends) -> dict:
    """A stand-in for each of ``public``, fastdispatch's public names, and for
    the packages of its ``front_ends`` (fastdispatch.FRONT_ENDS): the
    libraries' own functions where they have one, else a function that
    raises UnsupportedJaxError."""
    found = {name: _unavailable(name) for name in public if name not in _NOT_STOOD_IN}
    found.update(jit=jit, device_put=device_put, eval_shape=eval_shape)
    found.update(warm_start=warm_start, warm_start_stats=warm_start_stats)
    found.update(_front_ends(front_ends))
    return found


class _FrontEnd(types.ModuleType):
    """``fastdispatch.equinox`` or ``fastdispatch.nnx`` standing in for the real
    module: its names are the library's own, imported on first use."""

    def __init__(self, name: str, library: str, exported: dict):
        super().__init__(name, f"{library}'s own functions: {UNSUPPORTED}")
        self._library = library
        self._exported = exported  # our name -> the library's

    def __getattr__(self, name):
        if name not in self._exported:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} ({UNSUPPORTED})")
        import importlib

        return getattr(importlib.import_module(self._library), self._exported[name])


def _front_ends(front_ends) -> dict:
    """Each front end's package (``fastdispatch.equinox``, ``fastdispatch.nnx``),
    which ``import fastdispatch.nnx`` then finds instead of the module built
    on the dispatcher: its jit is the library's own."""
    modules = {}
    for front_end in front_ends:
        name = front_end.package.rpartition(".")[2]
        exported = {front_end.jit_name: front_end.jit_name}
        stand_in = _FrontEnd(front_end.package, front_end.routed, exported)
        modules[name] = sys.modules.setdefault(front_end.package, stand_in)
    return modules
