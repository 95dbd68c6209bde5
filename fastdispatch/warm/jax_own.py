"""Warm start of jax's own compiles: the ones no front end keys.

An eager operation (``x + 1`` outside any jit), a library's own jit (the
threefry behind ``jax.random.split``, optax's), a call fastdispatch hands to
jax.jit: jax compiles each on a miss of jax.jit's C++ cache, in one function
(``_jax.serve_jit_misses``).  jax's persistent cache underneath spares those
compiles XLA, but not jax's lowering nor its cache key (about 10 ms an eager
operation on a rerun, on the 2-core CPU: most of what a small program's start
spends in them).  Warm start keys each such miss by its traced program
(``keys.jax_own_key``: the jaxpr with its constants, the lowering parameters,
the arguments' avals, shardings, committedness and layouts, jax's trace
context, the environment), as checked mode keys a call, and loads its
executable from the store: the miss then costs its trace, its key and the
load, and jax.jit's cache keeps the loaded executable as its own.

Not kept: a program with effects, high-level types, an object printed by
its address, or a primitive that is not jax's own (a library's or the
program's, lowered by a rule its jaxpr does not show); constants passed as
arguments; an executable that does not serialize (host callbacks); any miss
while PGLE profiles (its compiles take each run's profile).  A miss jax's
persistent cache served is compiled once more for the store, beside the
program (warm/refill.py), as a front end's is.
"""

from __future__ import annotations

import functools
import time

import jax

from fastdispatch import _jax, _reasons
from fastdispatch.warm import refill
from fastdispatch.warm.keys import jax_own_key

# How warm_start_stats() and the --trace summary name these compiles' tally.
NAME = "jax's own compiles"
# Their files' names begin so (the front ends' are their keys' bare digests).
FILE_PREFIX = "jax-"

_warm = None  # the WarmStart serving jax's misses, or None


class _Computation:
    """A computation jax compiled for itself, named as the store names a
    function: by its qualified name (its refusals read "not stored: jax's
    own jit of add has effects (...)")."""

    def __init__(self, name):
        self.__qualname__ = f"jax's own jit of {name}"


def serve(warm) -> None:
    """Key, load and write jax's own compiles in ``warm``'s store (a
    WarmStart), from now on; None: jax compiles them as always again."""
    global _warm
    _warm = warm
    _jax.serve_jit_misses(None if warm is None else _serve)


def _serve(args, jaxpr, params, run):
    warm = _warm
    if warm is None or refill.active() or jax.config.jax_enable_pgle:
        return run()
    computation = _Computation(params.get("name"))
    try:
        warm.note_machine()
        key = FILE_PREFIX + jax_own_key(jaxpr, params, args)
    except Exception as error:  # NotStored, or a key that failed: jax compiles it
        warm.not_keyed(computation, error, store=warm.own_store)
        return run()
    tally = warm.tally_of(NAME)
    began = time.perf_counter()
    compiled = warm.own_store.load(key, tally)
    if compiled is not None:
        with warm.own_store._lock:
            tally["load_seconds"] += time.perf_counter() - began
        return _jax.run_jit_miss(_jax.loaded_executable(compiled), args)
    hits = warm.jax_cache_hits()
    result = run()
    try:
        _write(warm, key, computation, args, jaxpr, params, result, warm.jax_cache_hits() > hits)
    except Exception as error:  # never let the store break the program's call
        warm.own_store.refuse(
            computation, _reasons.WARM_NOT_SERIALIZABLE, f"was not written ({type(error).__name__}: {error})"
        )
    return result


def _write(warm, key, computation, args, jaxpr, params, result, hit: bool) -> None:
    """Write the executable of jax's compile-and-run ``result`` (of
    ``computation``) under ``key``; ``hit``: jax's persistent cache answered
    the compile."""
    _, executable, _, constant_args = result
    if constant_args:
        warm.own_store.refuse(
            computation,
            _reasons.WARM_UNDESCRIBED,
            "passes its constants as arguments (jax_use_simplified_jaxpr_constants)",
        )
        return
    num_outputs = len(jaxpr.out_avals)

    def write(fresh):
        compiled = _jax.as_compiled(fresh, len(args), num_outputs)
        warm.own_store.save(key, compiled, computation, None, warm.tally_of(NAME))

    compiled = _jax.as_compiled(executable, len(args), num_outputs)
    if not warm.served_by_jax_cache(compiled, hit):
        write(executable)
    elif warm.own_store.writable:
        lower = functools.partial(_jax.lower_jit_miss, args, jaxpr, params)
        seed = key.removeprefix(FILE_PREFIX)  # the digest: refill draws XLA options from it
        warm.refill(computation, lower, seed, write, name=NAME, store=warm.own_store)
