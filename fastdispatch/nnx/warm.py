"""nnx.jit's warm start: a call keyed from flax's split, before anything is
traced; an executable loaded for the graph as the split found it; a compile
written when a load could serve it (its executable keeps every graph)."""

from __future__ import annotations

import functools

import jax

from fastdispatch import _reasons
from fastdispatch.nnx import function as _nnx
from fastdispatch.nnx import graph as _graph


def key(function, args, before, store):
    """The key of a split call (``before``: flax's split of ``args``), or
    None: not stored (the reason recorded)."""
    fun = function.flax_function.fun
    try:
        parts = _key_parts(function, args, before)
    except TypeError:  # a leaf the dispatcher does not key: flax's call runs it anyway
        store.refuse(fun, _reasons.WARM_UNDESCRIBED, "takes an argument leaf the dispatcher does not key")
        return None
    signature, static_args, node_types = parts
    return store.key(
        fun,
        "nnx.jit",
        function._warm_options,
        signature,
        ((signature.treedef.to_jax(), "takes a graph holding"), (static_args, "takes as static argument")),
        node_types,
    )


def _key_parts(function, args, before):
    """(signature, static arguments, node types) of a split call, for its key."""
    statics = _graph.static_positions(function, args)
    leaves, treedef = _graph.dynamic_leaves(before, statics)
    signature = _nnx.signature_of(treedef, leaves)
    pure_args, pure_kwargs = before
    static_args = tuple(
        (position, pure_args[position] if type(position) is int else pure_kwargs[position])
        for position in sorted(statics, key=repr)
        if (type(position) is int and position < len(pure_args)) or position in pure_kwargs
    )
    node_types = []
    for states in _graph.node_states(before):
        for node in states.graphdef.nodes:
            kind = getattr(node, "type", None)
            if isinstance(kind, type) and kind not in node_types:
                node_types.append(kind)
    return signature, static_args, tuple(node_types)


def loaded_graph(function, args, kwargs, before, paths, loaded, store, holding):
    """The Graph of the graph as the split found it (``before``; ``paths``:
    its leaf names), running the executable ``loaded`` from the store (it keeps every graph it is given);
    raises where it does not fit the call.  ``holding``: a record of the
    call's graph, in other shapes, which then runs this one too."""
    compiled, described = loaded
    out_treedef, sources, _ = store.outputs(described, [])
    graph = _graph.kept(function, args, kwargs, before, holding, paths, compiled, out_treedef)
    if sources != list(range(len(graph.slots), compiled.out_tree.num_leaves)):
        raise LookupError("outputs unlike the graph's")
    return graph


def save(function, key, compiled, out_treedef, before, store):
    """Write the executable flax's call compiled (``out_treedef``: the
    structure of the function's own output), when the outputs a load will
    derive (every graph as it came in, then the function's own) are its own."""
    derived = _graph.kept_outputs(before, out_treedef, compiled.out_tree.num_leaves)
    if jax.tree_util.tree_structure(derived) != compiled.out_tree:
        store.refuse(
            function.flax_function.fun,
            _reasons.WARM_OUTPUTS,
            "has outputs whose structure a load could not derive from its graph",
        )
        return
    # The graphs' outputs are the call's own GraphDefs again, derived from the
    # arguments when loaded (graph.kept_outputs); the function's own output is
    # described, its leaves the executable's last outputs.
    n = out_treedef.num_leaves
    slots = compiled.out_tree.num_leaves - n
    store.save(
        key,
        compiled,
        function.flax_function.fun,
        lower=functools.partial(_graph.lowered, function, before),
        outputs=(out_treedef, range(slots, slots + n), [None] * n),
    )


def save_unrecorded(function, key, before, reason, store):
    """A call no Record serves here, written when a load could serve it: one
    that changed its arguments' shapes (shardings ``P()`` in, the equivalent
    ``P(None, None)`` out: a first step over ``device_put`` parameters) runs
    loaded on the graph as it came in, as every loaded call does
    (``loaded_graph`` checks it fits); the next call, in the new shapes, is a
    call of its own."""
    if reason is not _reasons.CALL_CHANGED_SHAPES:
        store.refuse(
            function.flax_function.fun, _reasons.WARM_LIBRARY_CALL, f"is run by flax's own call: {reason}"
        )
        return
    compiled = _graph.compiled_of(function, before)
    save(function, key, compiled, _graph.own_output_structure(compiled), before, store)
