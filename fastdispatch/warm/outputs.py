"""A filter_jit call's output recipe in the store, as plain data.

equinox returns, with the executable's arrays, whatever else the trace
returned: an int, a function, a Module's static fields and the structure
around them.  A later process must return the same without tracing, so each
such object is stored as one of:

  a value      None, bool, int, float, complex, str, bytes, and tuples, lists
               and dicts of them
  an input     an object of the call's own static parts (a returned Module's
               activation is the argument Module's), by its place among them
               (equinox/warm.py call_objects): the key says the object there has
               the same content in the process that loads it
  a name       a class, function or other object its module and qualified
               name resolve to (``jax.nn.relu``, a user's top-level function)
  a constant   a library's sentinel (equinox's MISSING), by its registered name

Anything else (an object the trace made, a local function) raises NotStored:
the call is compiled as always, and its reason recorded.
"""

from __future__ import annotations

import importlib
import sys

import jax

from fastdispatch.warm import identity
from fastdispatch.warm.identity import NotStored

_BUILTIN_NODES = {tuple: "tuple", list: "list", dict: "dict", type(None): "None"}
_BUILTIN_BY_NAME = {name: kind for kind, name in _BUILTIN_NODES.items()}
_LITERALS = (bool, int, float, complex, str, bytes)
_LEAF = jax.tree_util.tree_structure(0)


class _Describer:
    def __init__(self, call_objects):
        # The first place of each input object (by identity).
        self.places = {}
        for place, value in enumerate(call_objects):
            self.places.setdefault(id(value), place)
        self.call_objects = call_objects  # keeps the ids valid

    def value(self, value):
        kind = type(value)
        if value is None or kind in _LITERALS:
            return ("value", value)
        place = self.places.get(id(value))
        if place is not None:
            return ("input", place)
        if kind in (tuple, list):
            return (kind.__name__, tuple(self.value(item) for item in value))
        if kind is dict:
            return ("dict", tuple((self.value(k), self.value(v)) for k, v in value.items()))
        name = identity.constant_name(value)
        if name is not None:
            return ("constant", name)
        named = _name_of(value)
        if named is not None:
            return ("named",) + named
        raise NotStored(
            f"returns a non-array output of type {_type_name(kind)} that cannot be rebuilt "
            "in another process (not an input, a plain value or a named object)"
        )

    def node_type(self, kind):
        if kind in _BUILTIN_NODES:
            return ("builtin", _BUILTIN_NODES[kind])
        named = _name_of(kind)
        if named is None:
            raise NotStored(f"returns a tree node of type {_type_name(kind)}, a class defined in a function")
        return ("named",) + named

    def tree(self, treedef):
        if treedef.num_nodes == 1 and treedef.num_leaves == 1:
            return ("*",)
        kind, data = treedef.node_data()
        return (self.node_type(kind), self.value(data), tuple(self.tree(c) for c in treedef.children()))


def _type_name(kind) -> str:
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _name_of(value):
    """(module, qualified name) that resolve to ``value`` itself, or None."""
    module_name = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return (module_name, qualname) if identity._resolve(module_name, qualname) is value else None


def describe(out_treedef, sources, statics, call_objects) -> tuple:
    """The recipe of a call's result as plain data: its jax tree structure,
    and per leaf its executable output (``sources[i] >= 0``) or its static
    value (``statics[i]``).  Raises NotStored."""
    describer = _Describer(call_objects)
    return (
        describer.tree(out_treedef),
        tuple(sources),
        tuple(None if source >= 0 else describer.value(static) for source, static in zip(sources, statics)),
    )


def rebuild(described, call_objects) -> tuple:
    """(jax tree structure, sources, statics) from ``describe``'s data, for a
    call of the same key; raises LookupError when a name no longer resolves."""
    tree, sources, statics = described
    return (
        _tree(tree, call_objects),
        list(sources),
        [None if item is None else _value(item, call_objects) for item in statics],
    )


def _tree(described, call_objects):
    if described == ("*",):
        return _LEAF
    kind, data, children = described
    node = (_node_type(kind), _value(data, call_objects))
    return _LEAF.from_node_data_and_children(
        jax.tree_util.default_registry, node, [_tree(child, call_objects) for child in children]
    )


def _node_type(described):
    if described[0] == "builtin":
        return _BUILTIN_BY_NAME[described[1]]
    return _named(described[1], described[2])


def _value(described, call_objects):
    how = described[0]
    if how == "value":
        return described[1]
    if how == "input":
        return call_objects[described[1]]
    if how in ("tuple", "list"):
        items = [_value(item, call_objects) for item in described[1]]
        return tuple(items) if how == "tuple" else items
    if how == "dict":
        return {_value(k, call_objects): _value(v, call_objects) for k, v in described[1]}
    if how == "constant":
        value = identity.constant(described[1])
        if value is None:
            raise LookupError(f"no constant {described[1]}")
        return value
    if how == "named":
        return _named(described[1], described[2])
    raise LookupError(f"unknown output part {how!r}")


def _named(module_name, qualname):
    if module_name not in sys.modules:
        importlib.import_module(module_name)
    value = identity._resolve(module_name, qualname)
    if value is None:
        raise LookupError(f"{module_name}.{qualname} is gone")
    return value
