"""A call the fast path has no executable for, as flax makes it."""

from __future__ import annotations

import contextlib
import time

import jax

from fastdispatch._reasons import MustHandOff
from fastdispatch.nnx import _flax
from fastdispatch.nnx import graph as _graph
from fastdispatch.nnx import warm as _warm


def miss(function, args, kwargs, holding, store=None):
    """flax's split, its jax.jit (which traces and compiles a new structure),
    then its merge; or, when ``holding`` (a Record) proves the call's graph is
    the recorded one and the executable keeps the graph, a write-back into that
    record's slots, which leaves the graph's objects (and every record of them)
    as they are.  Returns ``(output, graph, reason, loaded)``: a Graph (plain
    data) from which the engine makes the entry and the Record for the next
    call on the graph left behind, or None and why no record can be made.

    With warm start on (``store``, a fastdispatch.warm.WarmStart), the split's
    key is looked up before anything is traced: an executable stored under it
    gives ``(None, graph, None, True)``, a Graph of the graph as the split
    found it, for the engine to run as a hit (a Record's write-back, as on
    every later call); else the compile is written under the key when its
    executable keeps every graph (the one pattern a Record serves), with what
    it warned, for a load to warn again."""
    flax_function = function.flax_function
    key = loaded = None
    with _flax.update_context(flax_function):
        before = _flax.split(flax_function, args, kwargs)
        if store is not None:
            key, loaded = _warm.lookup(function, args, before, store)
        if loaded is None:
            began = time.perf_counter()
            with contextlib.nullcontext() if key is None else store.recording_warnings():
                outputs = flax_function.jitted_fn(*before[0], **before[1])
            seconds = time.perf_counter() - began
            kept = holding is not None and _graph.keeps_graph(outputs, before, holding)
            if kept:
                holding.write_slots(jax.tree_util.tree_leaves(outputs))
                out = outputs[2]
            else:
                out = _flax.merge(flax_function, outputs)
    if loaded is not None:
        graph = _warm.loaded_graph(function, args, kwargs, before, loaded, store, holding)
        if graph is not None:
            return None, graph, None, True
        return miss(function, args, kwargs, holding, None)  # flax's call, not written again
    try:
        graph = _graph.build(function, args, kwargs, before, seconds, holding if kept else None)
    except MustHandOff as hand_off:
        if key is not None:
            _warm.save_unrecorded(function, key, before, hand_off.reason, store)
        return out, None, hand_off.reason, False
    if key is not None:
        own_outputs = jax.tree_util.tree_unflatten(
            graph.out_treedef.to_jax(), [0] * graph.out_treedef.num_leaves
        )
        _warm.save(function, key, graph.compiled, jax.tree_util.tree_structure(own_outputs), before, store)
    return out, graph, None, False
