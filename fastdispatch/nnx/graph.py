"""The Graph a flax call left: what a Record is made of, as plain data.

After a call flax ran, ``build`` reads the executable flax's jax.jit ran and
the graph the call left, and says how calls on that graph are laid out,
proved (guards), read and written (slots); or, with MustHandOff, why the
fast path cannot run them (the executable changes the graph, returns a graph
node, or the graph holds what a slot cannot reach)."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax

from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff
from fastdispatch.core import pytree as _pytree
from fastdispatch.nnx import _flax
from fastdispatch.nnx import function as _nnx
from fastdispatch.nnx.guards import slots_and_guards
from fastdispatch.nnx.record import Input, InputKind


class Graph(NamedTuple):
    """What a Record is made of, as a flax call left it: how calls on the graph
    are laid out, proved (guards), read and written (slots), and the
    executable flax's jax.jit compiled for it, with what makes its entry."""

    nargs: int
    kwnames: tuple
    inputs: tuple  # Input per argument the executable takes
    statics: tuple  # (position, value) per static argument
    guards: tuple
    slots: tuple
    out_treedef: object  # the function's own output structure (our TreeDef)
    signature: object  # the CallSignature of the graph's leaves
    compiled: object  # the jax.stages.Compiled flax's jax.jit ran
    leaves: list  # the executable's inputs on this call
    donates: bool


def build(function, args, kwargs, before, holding, paths, compiled=None, outputs=None, after=None):
    """The Graph this call left, for the executable it ran on flax's split
    ``before``; ``holding``: the record of the same graph, when the call kept
    it; ``paths``: the split's leaf names (Paths.of).  An executable known to
    keep the graph (``kept``) comes with its outputs' structure and the split
    (``after``: the graph before the call).  MustHandOff when the fast path
    cannot run calls on it."""
    statics = static_positions(function, args)
    resolved = _jax.resolved_arguments(function.jitted)
    leaves_before, treedef = dynamic_leaves(before, statics)

    if compiled is None:
        compiled = compiled_of(function, before)
        outputs = jax.tree_util.tree_unflatten(
            compiled.out_tree, [Placeholder(i) for i in range(compiled.out_tree.num_leaves)]
        )
    if holds_node_states(outputs[2]):
        raise MustHandOff(_reasons.RETURNS_GRAPH_NODES)

    positions = [i for i in range(len(args)) if i not in statics]
    positions += sorted(name for name in kwargs if name not in statics)
    if holding is not None:
        guards, slots = holding.guards, holding.slots
        inputs = [
            item if item.kind == InputKind.INPUT_ROOT else _plain_input(item.position, args, kwargs)
            for item in holding.inputs
        ]
        leaves = holding.gather_now(args, kwargs)
        if leaves is None:
            raise MustHandOff(_reasons.ARGUMENT_STRUCTURE_CHANGED)
    else:
        if after is None:
            after = split(function.flax_function, args, kwargs)
        leaves, treedef_after = dynamic_leaves(after, statics)
        if treedef_after != treedef:
            raise MustHandOff(_reasons.CALL_CHANGED_GRAPH)
        roots, inputs = [], []
        for position in positions:
            argument = args[position] if type(position) is int else kwargs[position]
            pure = (after[0] if type(position) is int else after[1])[position]
            if _flax.is_graph_node(argument):
                out = (outputs[0] if type(position) is int else outputs[1])[position]
                if not isinstance(pure, _flax.NodeStates) or not isinstance(out, _flax.NodeStates):
                    raise MustHandOff(_reasons.NOT_SPLIT_AS_NODE)
                if out.graphdef != _flax.same_outer_index(pure.graphdef):
                    raise MustHandOff(_reasons.EXECUTABLE_CHANGES_GRAPH)
                roots.append((position, argument, pure))
            elif holds_node_states(pure):
                raise MustHandOff(_reasons.NODES_IN_CONTAINER)
            else:
                inputs.append(_plain_input(position, args, kwargs))
        root_slots, guards = slots_and_guards(roots)
        inputs = _root_inputs(roots, root_slots) + inputs
        inputs.sort(key=lambda item: positions.index(item.position))
        slots = tuple(slot for _, each in root_slots for slot in each)

    if holding is not None:
        nargs, kwnames, values = holding.nargs, holding.kwnames, holding.statics
    else:
        nargs, kwnames, values = len(args), tuple(kwargs), static_values(statics, args, kwargs)
    static_args = static_key(values)
    signature = _nnx.signature_of(treedef, leaves, static_args, paths)
    if not _nnx.signature_of(treedef, leaves_before, static_args).runs_as(signature):
        raise MustHandOff(_reasons.CALL_CHANGED_SHAPES)
    out_leaves, out_treedef = _pytree.flatten(outputs[2])
    if len(slots) + len(out_leaves) != compiled.out_tree.num_leaves:
        raise MustHandOff(_reasons.OUTPUTS_NOT_GRAPH_LEAVES)
    donates = bool(resolved.donate_argnums or resolved.donate_argnames)
    return Graph(
        nargs,
        kwnames,
        tuple(inputs),
        values,
        tuple(guards),
        slots,
        out_treedef,
        signature,
        compiled,
        leaves,
        donates,
    )


def kept(function, args, kwargs, before, holding, paths, compiled, out_treedef):
    """The Graph of the graph as the split ``before`` found it, for
    ``compiled``, an executable known to keep every graph it is given (one
    found by its signature, or loaded from the warm-start store);
    ``out_treedef``: the structure of the function's own output (jax's)."""
    outputs = kept_outputs(before, out_treedef, compiled.out_tree.num_leaves)
    if holding is not None and not keeps_graph(outputs, before, holding):
        holding = None
    return build(function, args, kwargs, before, holding, paths, compiled, outputs, before)


def kept_outputs(before, out_treedef, num_outputs):
    """The outputs of an executable that keeps every graph it is given, as
    flax's JitFn returns them, with placeholder leaves: each graph argument's
    NodeStates again (its GraphDef with the same outer index), None for every
    other argument (flax clears them), then the function's own output."""

    def kept_states(x):
        return _flax.kept(x) if isinstance(x, _flax.NodeStates) else None

    args_out, kwargs_out = jax.tree_util.tree_map(
        kept_states, before, is_leaf=lambda x: isinstance(x, _flax.NodeStates)
    )
    out = jax.tree_util.tree_unflatten(out_treedef, [0] * out_treedef.num_leaves)
    structure = jax.tree_util.tree_structure((args_out, kwargs_out, out))
    if structure.num_leaves != num_outputs:
        raise LookupError(f"{structure.num_leaves} outputs derived, the executable has {num_outputs}")
    return jax.tree_util.tree_unflatten(structure, [Placeholder(i) for i in range(num_outputs)])


def own_output_structure(compiled):
    """The structure of the function's own output (jax's), of the executable
    flax's jax.jit compiled (whose outputs are (args, kwargs, output))."""
    placeholders = jax.tree_util.tree_unflatten(compiled.out_tree, [0] * compiled.out_tree.num_leaves)
    return jax.tree_util.tree_structure(placeholders[2])


def keeps_graph(outputs, before, record):
    """The executable returned every root's graph as it came in, and no graph node."""
    args_out, kwargs_out, out = outputs
    roots = 0
    for item in record.inputs:
        if item.kind != InputKind.INPUT_ROOT:
            continue
        position = item.position
        came = (before[0] if type(position) is int else before[1])[position]
        went = (args_out if type(position) is int else kwargs_out)[position]
        if not isinstance(went, _flax.NodeStates) or went.graphdef != _flax.same_outer_index(came.graphdef):
            return False
        roots += len(went.states[0])
    return roots == record.num_slots and not holds_node_states(out)


def split(flax_function, args, kwargs):
    """flax's split of the call's arguments: (pure args, pure kwargs)."""
    with _flax.update_context(flax_function):
        return _flax.split(flax_function, args, kwargs)


def lowered(function, before):
    """flax's jax.jit lowering of the split ``before``, from jax's caches:
    what it warns, the call itself just said."""
    with warnings.catch_warnings(), _flax.update_context(function.flax_function):
        warnings.simplefilter("ignore")
        return function.jitted.lower(*before[0], **before[1])


def compiled_of(function, before):
    """The executable flax's jax.jit ran on the split ``before`` (from its caches)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lowered(function, before).compile()


def static_positions(function, args):
    """The positions (ints, names) of the call's static arguments."""
    resolved = _jax.resolved_arguments(function.jitted)
    statics = {i % len(args) if -len(args) <= i < len(args) else i for i in resolved.static_argnums}
    return statics | set(resolved.static_argnames)


def static_values(statics, args, kwargs):
    """(position, value) of each static argument the call passes, in key order."""
    present = sorted((s for s in statics if s in kwargs or (type(s) is int and s < len(args))), key=repr)
    return tuple((s, args[s] if type(s) is int else kwargs[s]) for s in present)


def static_key(values):
    """The (position, type, value) triples that key an executable with the
    leaves: flax's jax.jit compiles one per static value (a call on the same
    graph with another value must not find this one's entry)."""
    return tuple(x for position, value in values for x in (position, type(value), value))


def dynamic_leaves(pure, statics):
    """Leaves and structure of the arguments jax.jit keys, static ones left out."""
    pure_args, pure_kwargs = pure
    dynamic = (
        tuple(a for i, a in enumerate(pure_args) if i not in statics),
        {k: v for k, v in pure_kwargs.items() if k not in statics},
    )
    return _pytree.flatten(dynamic)


def node_states(pure):
    """The NodeStates (graph arguments, split) in a split's arguments."""
    return [
        leaf
        for leaf in jax.tree_util.tree_leaves(pure, is_leaf=lambda x: isinstance(x, _flax.NodeStates))
        if isinstance(leaf, _flax.NodeStates)
    ]


def holds_node_states(tree):
    return bool(node_states(tree))


class Placeholder:
    """A stand-in output leaf, to read the structure of an executable's outputs."""

    def __init__(self, index):
        self.index = index


def _plain_input(position, args, kwargs):
    argument = args[position] if type(position) is int else kwargs[position]
    return Input(InputKind.INPUT_PLAIN, position, treedef=_pytree.flatten(argument)[1])


def _root_inputs(roots, slots):
    inputs, start = [], 0
    for (position, argument, _), (_, root_slots) in zip(roots, slots):
        stop = start + len(root_slots)
        inputs.append(Input(InputKind.INPUT_ROOT, position, root=argument, slot_start=start, slot_stop=stop))
        start = stop
    return inputs
