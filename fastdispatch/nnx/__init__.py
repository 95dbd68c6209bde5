"""``fastdispatch.nnx.jit``: flax NNX's ``jit``, graph mode at better than tree-mode speed.

    from fastdispatch import nnx as fnnx     # then @fnnx.jit where you had @nnx.jit

Everything flax does is flax's: ``jit`` builds flax's own nnx.jit object (its
checks, errors, modes and sharding prefixes), which runs every call the fast
path does not: the first call, a call whose graph changed, a call under a
transformation or inside ``nnx.cached_partial``, and every call in modes other
than graph mode with graph updates.  After such a call flax ran, a Record is
made when the call's executable keeps the graph's structure and returns no
graph node; the hot path then runs calls on that graph without flax's split
and merge.  The package, by job:

  function.pyx   the front end: records (roots, guards, slots), gather, write back
  flax_call.py   a call no record serves, split as flax splits it, across the engine's steps
  graph.py       the Graph: what a Record is made of, as plain data
  guards.py      the guards over what flax's split visits, and each leaf's slot
  paths.py       the keyed leaves' names, for --trace's reports
  warm.py        warm start: keyed from flax's split, loaded, saved
  attributes.py  a GraphDef read by attribute path, for --trace
  _flax.py       every private flax name, and nothing else

This package is imported only when ``fastdispatch.nnx`` is used.
"""

from __future__ import annotations

import functools

import flax
from flax.typing import MISSING

from fastdispatch.core import descriptions
from fastdispatch.core.engine import library_function
from fastdispatch.nnx import _flax
from fastdispatch.nnx import function as _nnx
from fastdispatch.nnx import record as _record
from fastdispatch.nnx.attributes import graph_attributes
from fastdispatch.nnx.flax_call import FlaxCall
from fastdispatch.nnx.function import NnxJitFunction

__all__ = ["NnxJitFunction", "jit"]


def jit(
    fun=MISSING,
    *,
    in_shardings=None,
    out_shardings=None,
    static_argnums=None,
    static_argnames=None,
    donate_argnums=None,
    donate_argnames=None,
    keep_unused=False,
    device=None,
    backend=None,
    inline=False,
    graph=None,
    graph_updates=None,
):
    """``flax.nnx.jit`` with less dispatch time; same arguments, same behaviour.

    Modules, Variables, Rngs and Optimizers anywhere in the arguments; in-place
    updates and graph updates propagate to the caller's objects as flax
    propagates them.  Usable as ``@jit`` and ``@jit(...)``.  Returns an
    NnxJitFunction: call it as the function; ``.lower``, ``.trace`` and
    ``.eval_shape`` are flax's.
    """
    options = dict(
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
        keep_unused=keep_unused,
        device=device,
        backend=backend,
        inline=inline,
        graph=graph,
        graph_updates=graph_updates,
    )
    if fun is MISSING:
        return functools.partial(jit, **options)
    flax_function = _flax.flax_jit(fun, **options)  # flax checks the options, with its messages
    # Under `python -m fastdispatch`, flax's jax.jit is a CompiledFunction: flax's
    # calls use jax's own, so that each call is recorded once, as this function's.
    flax_function.jitted_fn = library_function(flax_function.jitted_fn)
    fast = type(flax_function) is _flax.JitWrapped and in_shardings is None and out_shardings is None
    function = NnxJitFunction(flax_function, flax_function.jitted_fn if fast else None, fast, FlaxCall)
    functools.update_wrapper(function, fun)
    # What a warm-start key adds (its options, warm/keys.py's call_key): flax's version
    # (its split, JitFn and merge) and the options, graph modes resolved.
    options.update(graph=True, graph_updates=True, flax=flax.__version__)
    function._warm_options = options
    return function


_record.configure(_flax.RAW_VALUE, _flax.METADATA, _flax.FLAGS, _flax.PytreeState)
_nnx.configure(_flax.GRAPH_CONTEXT, _flax.STATIC_CACHE, _flax.merge)
descriptions.add_attributes(_flax.GraphDef, graph_attributes)
