"""fastdispatch: jax.jit with less time between the Python call and the executable.

from fastdispatch import jit     # instead of: from jax import jit
"""

import importlib
import os
from typing import NamedTuple

from fastdispatch._jax import UNSUPPORTED, UnsupportedJaxError, UnsupportedJaxWarning

__all__ = [
    "ArgSignature",
    "CompiledFunction",
    "CompiledFunctionCache",
    "JitState",
    "arg_signature_of_value",
    "assert_max_compiles",
    "default_cache",
    "device_put",
    "eval_shape",
    "filter_jit",
    "get_enable_x64",
    "global_state",
    "is_float0",
    "jit",
    "jit_is_disabled",
    "set_post_hook",
    "set_thread_local_state_initialization_callback",
    "stats",
    "thread_local_state",
    "trace",
    "UnsupportedJaxError",
    "UnsupportedJaxWarning",
    "warm_start",
    "warm_start_stats",
]


class FrontEnd(NamedTuple):
    """A front end for a library other than jax: all that is said of it
    outside its own package."""

    library: str  # the library's distribution (its tree nodes' top package)
    package: str  # the front end's package
    public_name: str  # what it gives as fastdispatch.<name>: a function, or the package
    reads_nodes: bool  # plain jit reads the library's tree nodes through it, in C
    routed: str  # the library's module whose jit python -m fastdispatch routes here
    jit_name: str  # that jit's name, in the library's module and in the package


# The front ends, one line each.  A front end is imported on first use of its
# name, when --trace first describes one of its library's tree nodes, where it
# reads them when plain jit first flattens one, and under python -m
# fastdispatch when the program imports its library (docs/architecture.md).
FRONT_ENDS = (
    FrontEnd("equinox", "fastdispatch.equinox", "filter_jit", True, "equinox", "filter_jit"),
    FrontEnd("flax", "fastdispatch.nnx", "nnx", False, "flax.nnx", "jit"),
)

if UNSUPPORTED is None:
    from fastdispatch.core import descriptions as _descriptions
    from fastdispatch.core import pytree as _pytree
    from fastdispatch.core.cache import CompiledFunctionCache, default_cache
    from fastdispatch.jax_jit.arg_signature import ArgSignature, arg_signature_of_value, is_float0
    from fastdispatch.jax_jit.function import CompiledFunction, jit
    from fastdispatch.jax_jit.post_hook import set_post_hook
    from fastdispatch.jax_jit.shapes import eval_shape
    from fastdispatch.jax_jit.state import (
        JitState,
        get_enable_x64,
        global_state,
        jit_is_disabled,
        set_thread_local_state_initialization_callback,
        thread_local_state,
    )
    from fastdispatch.jax_jit.transfer import device_put
    from fastdispatch.tracing import assert_max_compiles, stats, trace

    # --trace's recompile explanations read a library's nodes as its front end
    # says (core/descriptions.py); plain jit reads equinox Modules (eqx.partition's
    # halves, say) in C with that front end's field reader.
    for _front_end in FRONT_ENDS:
        _descriptions.speaks_for(_front_end.library, _front_end.package)
        if _front_end.reads_nodes:
            _pytree.add_lazy_field_reader(_front_end.library, _front_end.package)
    del _front_end

    # FASTDISPATCH_WARM_START=DIR turns warm start on for the whole program
    # (docs/warm-start.md); FASTDISPATCH_WARM_START_MAX_BYTES bounds the store,
    # FASTDISPATCH_WARM_START_CHECKED=1 keys calls on their traced programs.
    # The warm package (and hashlib, inspect) is imported only then, or on first
    # use of warm_start: a program that never asks for it does not pay its import.
    if os.environ.get("FASTDISPATCH_WARM_START"):
        from fastdispatch.warm import warm_start
        from fastdispatch.warm.store import DEFAULT_MAX_BYTES as _MAX_BYTES

        warm_start(
            os.environ["FASTDISPATCH_WARM_START"],
            max_bytes=int(os.environ.get("FASTDISPATCH_WARM_START_MAX_BYTES", _MAX_BYTES)),
            checked=os.environ.get("FASTDISPATCH_WARM_START_CHECKED", "") not in ("", "0"),
        )
else:
    # A jax fastdispatch does not know (_jax.py warned once, naming what it lacks):
    # the libraries' own functions, decided here once (fastdispatch/_handoff.py).
    from fastdispatch import _handoff

    globals().update(_handoff.names(__all__, FRONT_ENDS))


def __getattr__(name):
    # Front ends import their library, and warm start its package, only when first used.
    if name in ("warm_start", "warm_start_stats"):
        import fastdispatch.warm

        return getattr(fastdispatch.warm, name)
    for front_end in FRONT_ENDS:
        if name == front_end.public_name:
            module = importlib.import_module(front_end.package)
            return module if front_end.package.endswith("." + name) else getattr(module, name)
    raise AttributeError(f"module 'fastdispatch' has no attribute {name!r}")
