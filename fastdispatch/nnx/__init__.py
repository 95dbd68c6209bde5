"""``fastdispatch.nnx.jit``: flax NNX's ``jit``, graph mode at better than tree-mode speed.

    from fastdispatch import nnx as fnnx     # then @fnnx.jit where you had @nnx.jit

Everything flax does is flax's: ``jit`` builds flax's own nnx.jit object (its
checks, errors, modes and sharding prefixes), which runs every call the fast
path does not: the first call, a call whose graph changed, a call under a
transformation or inside ``nnx.cached_partial``, and every call in modes other
than graph mode with graph updates.  After such a call flax ran, ``miss``
makes a Record when the call's executable keeps the graph's structure and
returns no graph node: the roots, the guards that prove the graph unchanged,
each leaf's slot, and the executable flax's own jax.jit compiled.  The hot path
(``function.pyx``) then runs calls on that graph without flax's split and merge.

This module is imported only when ``fastdispatch.nnx`` is used, and it is the
only one that touches flax's private names, all listed here and tested in
tests/unit/test_nnx.py:

  flax.nnx.transforms.compilation.jit, JitWrapped, .jitted_fn, ._get_pure_args_kwargs
                                     flax's nnx.jit, its wrapper class (graph mode with
                                     updates), its jax.jit of the split function, its split
  flax.nnx.extract.NodeStates        a graph argument as the jax.jit sees it
  flax.nnx.graphlib.update_context, GRAPH_CONTEXT.tmp_static_cache, RefMap, flatten,
                    is_graph_node, get_node_impl, GraphNodeImpl, GraphDef.with_same_outer_index
                                     flax's graph traversal, for slots and guards
  flax.nnx.variablelib.Variable._raw_value, ._var_metadata, is_array_ref, _check_can_update
                                     a Variable's value and metadata slots
  flax.nnx.pytreelib.PytreeState._initializing, ._is_setup, Pytree._pytree__nodes,
                    ._pytree__is_pytree
                                     which attributes flax's split visits
  flax.nnx.statelib.State._mapping   a State's dict
  flax.nnx.graphlib.GraphDef.nodes, .attributes, NodeDef.num_attributes, NodeAttr, Static
                                     a GraphDef read (graph_attributes, for --trace) as
                                     flax's flatten wrote it: nodes in preorder, each
                                     NodeDef followed by its attributes
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
import warnings
from typing import NamedTuple

import flax
import jax
from flax.nnx import extract as _extract
from flax.nnx import graphlib as _graphlib
from flax.nnx import pytreelib as _pytreelib
from flax.nnx import statelib as _statelib
from flax.nnx import variablelib as _variablelib
from flax.nnx.transforms import compilation as _compilation
from flax.typing import MISSING

from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff
from fastdispatch.core import descriptions
from fastdispatch.core import pytree as _pytree
from fastdispatch.core.engine import library_function
from fastdispatch.nnx import function as _nnx
from fastdispatch.nnx.function import (
    ARRAY_SLOT,
    STATE_SLOT,
    DictGuard,
    FlagsGuard,
    Input,
    ListGuard,
    NnxJitFunction,
    NodeGuard,
    VariableGuard,
)

__all__ = ["NnxJitFunction", "jit"]

_flax_jit = _compilation.jit
_Variable = _variablelib.Variable
_NodeStates = _extract.NodeStates
_ARRAY_TYPES = (_jax.ARRAY_TYPE, _jax.KEY_ARRAY_TYPE)
_FLAGS = ("_initializing", "_is_setup")


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
    flax_function = _flax_jit(fun, **options)  # flax checks the options, with its messages
    # Under `python -m fastdispatch`, flax's jax.jit is a CompiledFunction: flax's
    # calls use jax's own, so that each call is recorded once, as this function's.
    flax_function.jitted_fn = library_function(flax_function.jitted_fn)
    fast = type(flax_function) is _compilation.JitWrapped and in_shardings is None and out_shardings is None
    function = NnxJitFunction(flax_function, flax_function.jitted_fn if fast else None, fast, miss)
    functools.update_wrapper(function, fun)
    # What a warm-start key adds (its options, warm/keys.py's call_key): flax's version
    # (its split, JitFn and merge) and the options, graph modes resolved.
    options.update(graph=True, graph_updates=True, flax=flax.__version__)
    function._warm_options = options
    return function


# -- a call flax runs ---------------------------------------------------------------


def miss(function, args, kwargs, holding, store=None):
    """A call the fast path has no executable for, as flax makes it: its split,
    its jax.jit (which traces and compiles a new structure), then its merge; or,
    when ``holding`` (a Record) proves the call's graph is the recorded one and
    the executable keeps the graph, a write-back into that record's slots, which
    leaves the graph's objects (and every record of them) as they are.  Returns
    ``(output, graph, reason, loaded)``: a Graph (plain data) from which the
    engine makes the entry and the Record for the next call on the graph left
    behind, or None and why no record can be made.

    With warm start on (``store``, a fastdispatch.warm.WarmStart), the split's
    key is looked up before anything is traced: an executable stored under it
    gives ``(None, graph, None, True)``, a Graph of the graph as the split
    found it, for the engine to run as a hit (a Record's write-back, as on
    every later call); else the compile is written under the key when its
    executable keeps every graph (the one pattern a Record serves), with what
    it warned, for a load to warn again."""
    flax_function = function.flax_function
    key = loaded = None
    with _graphlib.update_context(flax_function):
        before = flax_function._get_pure_args_kwargs(args, kwargs)
        if store is not None:
            key, loaded = _warm_lookup(function, args, before, store)
        if loaded is None:
            began = time.perf_counter()
            with contextlib.nullcontext() if key is None else store.recording_warnings():
                outputs = flax_function.jitted_fn(*before[0], **before[1])
            seconds = time.perf_counter() - began
            kept = holding is not None and _keeps_graph(outputs, before, holding)
            if kept:
                holding.write_slots(jax.tree_util.tree_leaves(outputs))
                out = outputs[2]
            else:
                out = flax_function._get_non_pure_out(*outputs)
    if loaded is not None:
        graph = _warm_graph(function, args, kwargs, before, loaded, store, holding)
        if graph is not None:
            return None, graph, None, True
        return miss(function, args, kwargs, holding, None)  # flax's call, not written again
    try:
        graph = _graph(function, args, kwargs, before, seconds, holding if kept else None)
    except MustHandOff as hand_off:
        if key is not None:
            _warm_save_unrecorded(function, key, before, hand_off.reason, store)
        return out, None, hand_off.reason, False
    if key is not None:
        own_outputs = jax.tree_util.tree_unflatten(
            graph.out_treedef.to_jax(), [0] * graph.out_treedef.num_leaves
        )
        _warm_save(function, key, graph.compiled, jax.tree_util.tree_structure(own_outputs), before, store)
    return out, graph, None, False


# -- warm start ----------------------------------------------------------------------


def _warm_parts(function, args, before):
    """(signature, static arguments, node types) of a split call, for its key."""
    statics = _static_positions(function, args)
    leaves, treedef = _dynamic_leaves(before, statics)
    signature = _nnx.signature_of(treedef, leaves)
    pure_args, pure_kwargs = before
    static_args = tuple(
        (position, pure_args[position] if type(position) is int else pure_kwargs[position])
        for position in sorted(statics, key=repr)
        if (type(position) is int and position < len(pure_args)) or position in pure_kwargs
    )
    node_types = []
    for states in _node_states(before):
        for node in states.graphdef.nodes:
            kind = getattr(node, "type", None)
            if isinstance(kind, type) and kind not in node_types:
                node_types.append(kind)
    return signature, static_args, tuple(node_types)


def _warm_lookup(function, args, before, store):
    """(key, loaded) of a split call: its key (None: not stored, the reason
    recorded), and what the store holds under it (None: nothing)."""
    fun = function.flax_function.fun
    try:
        parts = _warm_parts(function, args, before)
    except TypeError:  # a leaf the dispatcher does not key: flax's call runs it anyway
        store.refuse(fun, _reasons.WARM_UNDESCRIBED, "takes an argument leaf the dispatcher does not key")
        return None, None
    signature, static_args, node_types = parts
    key = store.key(
        fun,
        "nnx.jit",
        function._warm_options,
        signature,
        ((signature.treedef.to_jax(), "takes a graph holding"), (static_args, "takes as static argument")),
        node_types,
    )
    return key, None if key is None else store.load(key)


def _warm_graph(function, args, kwargs, before, loaded, store, holding):
    """The Graph of the graph as the split found it (``before``), running the
    executable ``loaded`` from the store; None when it does not fit the call
    (the reason recorded).  ``holding``: as ``miss`` takes it; the loaded
    executable keeps the graph, so a record of it runs this shape too."""
    began = time.perf_counter()
    try:
        compiled, described = loaded
        out_treedef, sources, _ = store.outputs(described, [])
        outputs = _kept_outputs(before, out_treedef, compiled.out_tree.num_leaves)
        if holding is not None and not _keeps_graph(outputs, before, holding):
            holding = None
        graph = _graph(
            function, args, kwargs, before, time.perf_counter() - began, holding, compiled, outputs, before
        )
        if sources != list(range(len(graph.slots), compiled.out_tree.num_leaves)):
            raise LookupError("outputs unlike the graph's")
    except (MustHandOff, LookupError, TypeError, ValueError) as error:
        why = getattr(error, "reason", None) or str(error)
        fun = function.flax_function.fun
        store.refuse(fun, _reasons.WARM_UNFIT, f"has a stored executable that does not fit its call ({why})")
        return None
    return graph


def _warm_save(function, key, compiled, out_treedef, before, store):
    """Write the executable flax's call compiled (``out_treedef``: the
    structure of the function's own output), when the outputs a load will
    derive (every graph as it came in, then the function's own) are its own."""
    derived = _kept_outputs(before, out_treedef, compiled.out_tree.num_leaves)
    if jax.tree_util.tree_structure(derived) != compiled.out_tree:
        store.refuse(
            function.flax_function.fun,
            _reasons.WARM_OUTPUTS,
            "has outputs whose structure a load could not derive from its graph",
        )
        return
    # The graphs' outputs are the call's own GraphDefs again, derived from the
    # arguments when loaded (_kept_outputs); the function's own output is
    # described, its leaves the executable's last outputs.
    n = out_treedef.num_leaves
    slots = compiled.out_tree.num_leaves - n
    store.save(
        key,
        compiled,
        function.flax_function.fun,
        lower=functools.partial(_lowered, function, before),
        outputs=(out_treedef, range(slots, slots + n), [None] * n),
    )


def _warm_save_unrecorded(function, key, before, reason, store):
    """A call no Record serves here, written when a load could serve it: one
    that changed its arguments' shapes (shardings ``P()`` in, the equivalent
    ``P(None, None)`` out: a first step over ``device_put`` parameters) runs
    loaded on the graph as it came in, as every loaded call does
    (``_warm_graph`` checks it fits); the next call, in the new shapes, is a
    call of its own."""
    if reason is not _reasons.CALL_CHANGED_SHAPES:
        store.refuse(
            function.flax_function.fun, _reasons.WARM_LIBRARY_CALL, f"is run by flax's own call: {reason}"
        )
        return
    compiled = _compiled(function, before)
    placeholders = jax.tree_util.tree_unflatten(compiled.out_tree, [0] * compiled.out_tree.num_leaves)
    _warm_save(function, key, compiled, jax.tree_util.tree_structure(placeholders[2]), before, store)


def _kept_outputs(before, out_treedef, num_outputs):
    """The outputs of an executable that keeps every graph it is given, as
    flax's JitFn returns them, with placeholder leaves: each graph argument's
    NodeStates again (its GraphDef with the same outer index), None for every
    other argument (flax clears them), then the function's own output."""

    def kept(x):
        if isinstance(x, _NodeStates):
            graphdef = x.graphdef.with_same_outer_index()
            return _NodeStates(_graphdef=graphdef, states=x.states, metadata=x.metadata)
        return None

    args_out, kwargs_out = jax.tree_util.tree_map(kept, before, is_leaf=lambda x: isinstance(x, _NodeStates))
    out = jax.tree_util.tree_unflatten(out_treedef, [0] * out_treedef.num_leaves)
    structure = jax.tree_util.tree_structure((args_out, kwargs_out, out))
    if structure.num_leaves != num_outputs:
        raise LookupError(f"{structure.num_leaves} outputs derived, the executable has {num_outputs}")
    return jax.tree_util.tree_unflatten(structure, [_Placeholder(i) for i in range(num_outputs)])


def _node_states(pure):
    return [
        leaf
        for leaf in jax.tree_util.tree_leaves(pure, is_leaf=lambda x: isinstance(x, _NodeStates))
        if isinstance(leaf, _NodeStates)
    ]


def _static_positions(function, args):
    resolved = _jax.resolved_arguments(function.jitted)
    statics = {i % len(args) if -len(args) <= i < len(args) else i for i in resolved.static_argnums}
    return statics | set(resolved.static_argnames)


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
    seconds: float  # flax's call: trace, lower, compile and run


def _keeps_graph(outputs, before, record):
    """The executable returned every root's graph as it came in, and no graph node."""
    args_out, kwargs_out, out = outputs
    roots = 0
    for item in record.inputs:
        if item.kind != _nnx.InputKind.INPUT_ROOT:
            continue
        position = item.position
        came = (before[0] if type(position) is int else before[1])[position]
        went = (args_out if type(position) is int else kwargs_out)[position]
        if not isinstance(went, _NodeStates) or went.graphdef != came.graphdef.with_same_outer_index():
            return False
        roots += len(went.states[0])
    return roots == record.num_slots and not _holds_node_states(out)


def _split(flax_function, args, kwargs):
    """flax's split of the call's arguments: (pure args, pure kwargs)."""
    with _graphlib.update_context(flax_function):
        return flax_function._get_pure_args_kwargs(args, kwargs)


def _lowered(function, before):
    """flax's jax.jit lowering of the split ``before``, from jax's caches:
    what it warns, the call itself just said."""
    with warnings.catch_warnings(), _graphlib.update_context(function.flax_function):
        warnings.simplefilter("ignore")
        return function.jitted.lower(*before[0], **before[1])


def _compiled(function, before):
    """The executable flax's jax.jit ran on the split ``before`` (from its caches)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _lowered(function, before).compile()


def _graph(function, args, kwargs, before, seconds, holding, compiled=None, outputs=None, after=None):
    """The Graph this call left, for the executable it ran; ``holding``: the
    record of the same graph, when the call kept it.  A warm-start load gives
    the executable (``compiled``), its outputs' structure and the split
    (``after``: the graph before the call, which the executable keeps).
    MustHandOff when the fast path cannot run calls on it."""
    statics = _static_positions(function, args)
    resolved = _jax.resolved_arguments(function.jitted)
    leaves_before, treedef = _dynamic_leaves(before, statics)

    if compiled is None:
        compiled = _compiled(function, before)
        outputs = jax.tree_util.tree_unflatten(
            compiled.out_tree, [_Placeholder(i) for i in range(compiled.out_tree.num_leaves)]
        )
    if _holds_node_states(outputs[2]):
        raise MustHandOff(_reasons.RETURNS_GRAPH_NODES)

    positions = [i for i in range(len(args)) if i not in statics]
    positions += sorted(name for name in kwargs if name not in statics)
    if holding is not None:
        guards, slots = holding.guards, holding.slots
        inputs = [
            item if item.kind == _nnx.InputKind.INPUT_ROOT else _plain_input(item.position, args, kwargs)
            for item in holding.inputs
        ]
        leaves = holding.gather_now(args, kwargs)
        if leaves is None:
            raise MustHandOff(_reasons.ARGUMENT_STRUCTURE_CHANGED)
    else:
        if after is None:
            after = _split(function.flax_function, args, kwargs)
        leaves, treedef_after = _dynamic_leaves(after, statics)
        if treedef_after != treedef:
            raise MustHandOff(_reasons.CALL_CHANGED_GRAPH)
        roots, inputs = [], []
        for position in positions:
            argument = args[position] if type(position) is int else kwargs[position]
            pure = (after[0] if type(position) is int else after[1])[position]
            if _graphlib.is_graph_node(argument):
                out = (outputs[0] if type(position) is int else outputs[1])[position]
                if not isinstance(pure, _NodeStates) or not isinstance(out, _NodeStates):
                    raise MustHandOff(_reasons.NOT_SPLIT_AS_NODE)
                if out.graphdef != pure.graphdef.with_same_outer_index():
                    raise MustHandOff(_reasons.EXECUTABLE_CHANGES_GRAPH)
                roots.append((position, argument, pure))
            elif _holds_node_states(pure):
                raise MustHandOff(_reasons.NODES_IN_CONTAINER)
            else:
                inputs.append(_plain_input(position, args, kwargs))
        root_slots, guards = _slots_and_guards(roots)
        inputs = _root_inputs(roots, root_slots) + inputs
        inputs.sort(key=lambda item: positions.index(item.position))
        slots = tuple(slot for _, each in root_slots for slot in each)

    if holding is not None:
        nargs, kwnames, static_values = holding.nargs, holding.kwnames, holding.statics
    else:
        nargs, kwnames = len(args), tuple(kwargs)
        present = sorted((s for s in statics if s in kwargs or (type(s) is int and s < len(args))), key=repr)
        static_values = tuple((s, args[s] if type(s) is int else kwargs[s]) for s in present)
    # The static arguments key the executable as the leaves do: flax's jax.jit
    # compiles one per value (a record on the same graph with another value
    # must not find this one's entry).
    static_args = tuple(x for position, value in static_values for x in (position, type(value), value))
    paths = _Paths.of(function, args, kwargs, treedef, statics)
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
        static_values,
        tuple(guards),
        slots,
        out_treedef,
        signature,
        compiled,
        leaves,
        donates,
        seconds,
    )


class _Paths:
    """Names nnx.jit's keyed leaves for --trace's reports (CallSignature.front):
    a graph argument's leaf by its parameter and the attribute path flax's
    graph gives it (``model.blocks[0].dropout.rngs.key``), not by flax's split
    (``self.states[0][5]``); another argument's by its own tree path."""

    def __init__(self, paths):
        self.paths = paths

    @classmethod
    def of(cls, function, args, kwargs, treedef, statics):
        """The paths of a call's dynamic leaves, in the split's order (None
        where the split is laid out unlike what is read here)."""
        try:
            return cls._of(function, args, kwargs, treedef, statics)
        except (AttributeError, IndexError, KeyError, TypeError):
            return None

    @classmethod
    def _of(cls, function, args, kwargs, treedef, statics):
        names = _parameter_names(function.flax_function.fun)
        positions = [i for i in range(len(args)) if i not in statics]
        ref_index = _graphlib.RefMap()
        flax_paths = {}  # (args or kwargs, index) -> a graph argument's leaf paths, in flax's order
        paths, counts = [], {}
        for path in _pytree.leaf_paths(treedef):
            where = (path[0].idx, getattr(path[1], "idx", getattr(path[1], "key", None)))
            if where[0] == 0:
                position = positions[where[1]]
                name = names[position] if position < len(names) else f"args[{position}]"
                argument = args[position]
            else:
                name, argument = where[1], kwargs.get(where[1])
            if not _graphlib.is_graph_node(argument):
                paths.append((name,) + tuple(path[2:]))
                continue
            if where not in flax_paths:
                _, flat = _graphlib.flatten(argument, with_paths=True, ref_index=ref_index, graph=True)
                flax_paths[where] = list(flat.paths)
            index = counts[where] = counts.get(where, -1) + 1
            if index >= len(flax_paths[where]):
                return None
            paths.append((name,) + tuple(_attribute_key(key) for key in flax_paths[where][index]))
        return cls(tuple(paths))

    def leaf_paths(self, signature):
        return self.paths

    def static_items(self, signature):
        return []


def _attribute_key(key):
    return jax.tree_util.SequenceKey(key) if type(key) is int else jax.tree_util.GetAttrKey(str(key))


def _parameter_names(fun):
    try:
        return tuple(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        return ()


def _plain_input(position, args, kwargs):
    argument = args[position] if type(position) is int else kwargs[position]
    return Input(_nnx.InputKind.INPUT_PLAIN, position, treedef=_pytree.flatten(argument)[1])


class _Placeholder:
    """A stand-in output leaf, to read the structure of an executable's outputs."""

    def __init__(self, index):
        self.index = index


def _dynamic_leaves(pure, statics):
    """Leaves and structure of the arguments jax.jit keys, static ones left out."""
    pure_args, pure_kwargs = pure
    dynamic = (
        tuple(a for i, a in enumerate(pure_args) if i not in statics),
        {k: v for k, v in pure_kwargs.items() if k not in statics},
    )
    return _pytree.flatten(dynamic)


def _holds_node_states(tree):
    return any(
        isinstance(leaf, _NodeStates)
        for leaf in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, _NodeStates))
    )


def _root_inputs(roots, slots):
    inputs, start = [], 0
    for (position, argument, _), (_, root_slots) in zip(roots, slots):
        stop = start + len(root_slots)
        inputs.append(
            Input(_nnx.InputKind.INPUT_ROOT, position, root=argument, slot_start=start, slot_stop=stop)
        )
        start = stop
    return inputs


def _slots_and_guards(roots):
    """Each root's leaf slots in flax's order (a Variable, or (owner, attribute)
    for an array attribute), and the guards over everything flax's split visits."""
    ref_index = _graphlib.RefMap()
    slots = []
    for position, argument, pure in roots:
        _, flat = _graphlib.flatten(argument, with_paths=True, ref_index=ref_index, graph=True)
        root_slots = []
        for path, leaf, raw in zip(flat.paths, flat.leaves, pure.states[0]):
            if isinstance(leaf, _Variable):
                _check_variable(leaf)
                if _nnx.raw_value(leaf) is not raw:
                    raise MustHandOff(_reasons.VALUE_NOT_SPLIT)
                root_slots.append(leaf)
            else:
                owner = argument
                for key in path[:-1]:
                    owner = _graphlib.get_node_impl(owner).node_dict(owner)[key]
                if not isinstance(_graphlib.get_node_impl(owner), _graphlib.GraphNodeImpl):
                    raise MustHandOff(_reasons.ARRAY_IN_CONTAINER)
                if vars(owner).get(path[-1]) is not raw:
                    raise MustHandOff(_reasons.ATTRIBUTE_NOT_SPLIT)
                root_slots.append((owner, path[-1]))
        if len(root_slots) != len(pure.states[0]):
            raise MustHandOff(_reasons.OTHER_LEAVES)
        slots.append((position, tuple(root_slots)))
    return slots, _guards([argument for _, argument, _ in roots])


def _check_variable(variable):
    metadata = _nnx.metadata(variable)
    if metadata.get("hijax") or metadata.get("ref"):
        raise MustHandOff(_reasons.REF_VARIABLE)
    if type(_nnx.raw_value(variable)) not in _ARRAY_TYPES:
        raise MustHandOff(_reasons.VALUE_NOT_ARRAY)
    variable._check_can_update()


def _guards(roots):
    """The guard program: one Guard per object flax's split would visit."""
    guards, seen = [], set()

    def visit(x):
        if x is None or id(x) in seen:
            return  # None: no children (jax's empty node); its parent's guard holds it
        if isinstance(x, _Variable):
            seen.add(id(x))
            _check_variable(x)
            guards.append(VariableGuard(x, dict(_nnx.metadata(x))))
            return
        if _variablelib.is_array_ref(x):
            raise MustHandOff(_reasons.ARRAY_REF)
        kind = type(x)
        impl = _graphlib.get_node_impl(x)
        if isinstance(impl, _graphlib.GraphNodeImpl):
            seen.add(id(x))
            fields = vars(x)
            guards.append(NodeGuard(x, *_entries(fields)))
            nodes = x._pytree__nodes if getattr(x, "_pytree__is_pytree", False) else None
            for key, value in fields.items():
                if type(value) is _pytreelib.PytreeState:
                    # Checked through its owner: flax's merge replaces it.
                    flags = tuple(getattr(value, f) for f in _FLAGS)
                    guards.append(FlagsGuard(x, key, flags))
                elif nodes is None or nodes.get(key, False):
                    visit(value)
        elif kind is _statelib.State:
            seen.add(id(x))
            guards.append(NodeGuard(x, *_entries(vars(x))))
            visit(x._mapping)
        elif kind is dict:
            seen.add(id(x))
            guards.append(DictGuard(x, *_entries(x)))
            for value in x.values():
                visit(value)
        elif kind is list:
            seen.add(id(x))
            guards.append(ListGuard(x))
            for value in x:
                visit(value)
        elif kind is _pytreelib.PytreeState:
            raise MustHandOff(_reasons.STATE_OUTSIDE_NODE)
        elif issubclass(kind, tuple):  # immutable: its children only
            for value in x:
                visit(value)
        elif impl is not None:
            raise MustHandOff(_reasons.OTHER_CONTAINER, kind.__name__)
        # anything else is a leaf or a static value: its parent's guard holds it

    for root in roots:
        visit(root)
    return guards


def _slot_marker(value):
    """What a node guard expects of one field: a marker where the value is
    replaced on every call (arrays by the fast path, PytreeState by flax's merge)."""
    if type(value) in _ARRAY_TYPES:
        return ARRAY_SLOT
    if type(value) is _pytreelib.PytreeState:
        return STATE_SLOT
    return value


def _entries(fields):
    """(keys, values) a node or dict guard expects, in order."""
    return tuple(fields), tuple(_slot_marker(value) for value in fields.values())


_nnx.configure(
    _Variable._raw_value,
    _Variable._var_metadata,
    _graphlib.GRAPH_CONTEXT,
    _FLAGS,
    _pytreelib.PytreeState,
)


# -- for --trace's reports -----------------------------------------------------------


def graph_attributes(graphdef):
    """``{attribute path: value}`` of a flax GraphDef, by path from the root (a
    tuple of attribute names): a static attribute's value, a child node's type.
    flax's own bookkeeping attributes (``_pytree__*``) are left out; a GraphDef
    of another layout gives what was read before it.  For --trace's recompile
    explanations."""
    nodes, attributes = iter(graphdef.nodes), iter(graphdef.attributes)
    found = {}

    def visit(path, reported=True):
        node = next(nodes)
        if reported:
            found[path] = getattr(node, "type", type(node))
        for _ in range(getattr(node, "num_attributes", 0) if isinstance(node, _graphlib.NodeDef) else 0):
            key, attribute = next(attributes)
            # flax's bookkeeping: its nodes are consumed in order, not reported.
            own = not (isinstance(key, str) and key.startswith("_pytree__"))
            if isinstance(attribute, _graphlib.NodeAttr):
                visit(path + (key,), reported and own)
            elif own and reported and isinstance(attribute, _graphlib.Static):
                found[path + (key,)] = attribute.value

    try:
        visit(())
    except StopIteration:  # a GraphDef of another layout: nothing to say
        pass
    return found


descriptions.add_attributes(_graphlib.GraphDef, graph_attributes)
