"""What proves a graph unchanged, and where its leaves live: one Guard per
object flax's split would visit (its type, attributes, containers, Variable
metadata), and each leaf's slot (a Variable, or a node's array attribute),
in flax's leaf order.  A Record (record.pyx) runs calls on these."""

from __future__ import annotations

from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff
from fastdispatch.nnx import _flax
from fastdispatch.nnx import record as _record
from fastdispatch.nnx.record import (
    ARRAY_SLOT,
    STATE_SLOT,
    DictGuard,
    FlagsGuard,
    ListGuard,
    NodeGuard,
    VariableGuard,
)

_ARRAY_TYPES = (_jax.ARRAY_TYPE, _jax.KEY_ARRAY_TYPE)


def slots_and_guards(roots):
    """Each root's leaf slots in flax's order (a Variable, or (owner, attribute)
    for an array attribute), and the guards over everything flax's split
    visits; ``roots``: (position, argument, its split) per graph argument."""
    ref_index = _flax.RefMap()
    slots = []
    for position, argument, pure in roots:
        _, flat = _flax.graph_flatten(argument, ref_index)
        root_slots = []
        for path, leaf, raw in zip(flat.paths, flat.leaves, pure.states[0]):
            if isinstance(leaf, _flax.Variable):
                _check_variable(leaf)
                if _record.raw_value(leaf) is not raw:
                    raise MustHandOff(_reasons.VALUE_NOT_SPLIT)
                root_slots.append(leaf)
            else:
                owner = argument
                for key in path[:-1]:
                    owner = _flax.node_dict(owner)[key]
                if not isinstance(_flax.get_node_impl(owner), _flax.GraphNodeImpl):
                    raise MustHandOff(_reasons.ARRAY_IN_CONTAINER)
                if vars(owner).get(path[-1]) is not raw:
                    raise MustHandOff(_reasons.ATTRIBUTE_NOT_SPLIT)
                root_slots.append((owner, path[-1]))
        if len(root_slots) != len(pure.states[0]):
            raise MustHandOff(_reasons.OTHER_LEAVES)
        slots.append((position, tuple(root_slots)))
    return slots, guards([argument for _, argument, _ in roots])


def _check_variable(variable):
    metadata = _record.metadata(variable)
    if metadata.get("hijax") or metadata.get("ref"):
        raise MustHandOff(_reasons.REF_VARIABLE)
    if type(_record.raw_value(variable)) not in _ARRAY_TYPES:
        raise MustHandOff(_reasons.VALUE_NOT_ARRAY)
    _flax.check_can_update(variable)


def guards(roots):
    """The guard program: one Guard per object flax's split would visit."""
    found, seen = [], set()

    def visit(x):
        if x is None or id(x) in seen:
            return  # None: no children (jax's empty node); its parent's guard holds it
        if isinstance(x, _flax.Variable):
            seen.add(id(x))
            _check_variable(x)
            found.append(VariableGuard(x, dict(_record.metadata(x))))
            return
        if _flax.is_array_ref(x):
            raise MustHandOff(_reasons.ARRAY_REF)
        kind = type(x)
        impl = _flax.get_node_impl(x)
        if isinstance(impl, _flax.GraphNodeImpl):
            seen.add(id(x))
            fields = vars(x)
            found.append(NodeGuard(x, *_entries(fields)))
            nodes = _flax.pytree_nodes(x)
            for key, value in fields.items():
                if type(value) is _flax.PytreeState:
                    # Checked through its owner: flax's merge replaces it.
                    flags = tuple(getattr(value, f) for f in _flax.FLAGS)
                    found.append(FlagsGuard(x, key, flags))
                elif nodes is None or nodes.get(key, False):
                    visit(value)
        elif kind is _flax.State:
            seen.add(id(x))
            found.append(NodeGuard(x, *_entries(vars(x))))
            visit(_flax.state_mapping(x))
        elif kind is dict:
            seen.add(id(x))
            found.append(DictGuard(x, *_entries(x)))
            for value in x.values():
                visit(value)
        elif kind is list:
            seen.add(id(x))
            found.append(ListGuard(x))
            for value in x:
                visit(value)
        elif kind is _flax.PytreeState:
            raise MustHandOff(_reasons.STATE_OUTSIDE_NODE)
        elif issubclass(kind, tuple):  # immutable: its children only
            for value in x:
                visit(value)
        elif impl is not None:
            raise MustHandOff(_reasons.OTHER_CONTAINER, kind.__name__)
        # anything else is a leaf or a static value: its parent's guard holds it

    for root in roots:
        visit(root)
    return found


def _slot_marker(value):
    """What a node guard expects of one field: a marker where the value is
    replaced on every call (arrays by the fast path, PytreeState by flax's merge)."""
    if type(value) in _ARRAY_TYPES:
        return ARRAY_SLOT
    if type(value) is _flax.PytreeState:
        return STATE_SLOT
    return value


def _entries(fields):
    """(keys, values) a node or dict guard expects, in order."""
    return tuple(fields), tuple(_slot_marker(value) for value in fields.values())
