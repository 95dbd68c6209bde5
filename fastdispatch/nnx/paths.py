"""How --trace's reports name nnx.jit's keyed leaves (CallSignature.front)."""

from __future__ import annotations

import inspect

import jax

from fastdispatch.core import pytree as _pytree
from fastdispatch.nnx import _flax


class Paths:
    """A graph argument's leaf by its parameter and the attribute path flax's
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
        ref_index = _flax.RefMap()
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
            if not _flax.is_graph_node(argument):
                paths.append((name,) + tuple(path[2:]))
                continue
            if where not in flax_paths:
                _, flat = _flax.graph_flatten(argument, ref_index)
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
