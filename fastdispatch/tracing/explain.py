"""Signatures for people: what each argument was, and what changed at a recompile.

``describe(signature)`` turns a CallSignature into a ``Description``: one
``ArgumentLeaf`` per dynamic leaf (its argument, its path in the tree as jax
key entries, its aval, weak type and placement), the static arguments and
jax's context.  ``explain_change(old, new)`` compares two descriptions and
says, by argument path, what changed: shapes, dtypes, weak types,
placements, tree structure, static values, jax settings.  Each line is a
``Change``, a string that also says its kind: a shape change, a new object
of the same kind where an equal one was expected (a lambda made anew, a bound
method of a rebuilt module: static arguments, flax graph attributes, equinox
static fields), an unchanged signature.
"""

from __future__ import annotations

import dataclasses
import re

import jax
from jax.tree_util import keystr

from fastdispatch import _jax
from fastdispatch.core import descriptions
from fastdispatch.core.pytree import first_difference
from fastdispatch.core.signature import argument_of

__all__ = ["ArgumentLeaf", "Change", "Description", "describe", "explain_change", "signature_text"]


@dataclasses.dataclass(frozen=True)
class ArgumentLeaf:
    """One dynamic leaf of a call."""

    path: tuple  # jax key entries from the root (args, kwargs)
    argument: str  # the parameter it belongs to: "params"
    label: str  # the parameter and the path below it: "params['w']"
    aval: str  # shape and dtype: "f32[2,3]", "key<fry>[]"
    weak_type: bool
    placement: str = ""  # the sharding of a committed array or key
    numpy: bool = False  # a numpy value (jax.jit converts it)
    python: str = ""  # the type of a Python scalar: "int", "float"
    sharding: object = dataclasses.field(default=None, compare=False)  # the sharding object itself

    @property
    def text(self) -> str:
        """``i32[1,64]``: the aval, weak type and numpy-ness; a sharding is
        shown only where it changed (placement_change)."""
        text = self.aval + ("{weak}" if self.weak_type else "")
        return text + (" (numpy)" if self.numpy else "")


@dataclasses.dataclass(frozen=True)
class Description:
    """A CallSignature as people read it."""

    args: tuple  # ArgumentLeaf per dynamic leaf, in flatten order
    static: tuple  # (label, repr(value)) per static argument
    context: tuple  # (name, repr(value)) per value of jax's trace context
    treedef: object = None  # the signature's TreeDef, to explain structure changes
    arg_names: tuple = ()  # dynamic positional parameter names
    static_made_at: tuple = ()  # (label, (file, line)) per static function value: where it was defined
    params: tuple = ()  # the function's positional parameter names, to name static positions


def _label(path: tuple, arg_names: tuple) -> str:
    argument, rest = argument_of(path, arg_names)
    return argument + keystr(rest)


def _x64(context: tuple) -> bool:
    return bool(dict(zip(_jax.trace_context_names(), context)).get("jax_enable_x64", False))


def _leaf_aval(key, x64: bool) -> tuple[str, bool, str, bool, str]:
    """(aval text, weak_type, placement, numpy, Python type) of one LeafKeyView."""
    short = dict(short_dtypes=True)
    if key.kind == "array":
        placement = str(key.sharding) if key.committed else ""
        return key.aval.str_short(**short), key.aval.weak_type, placement, False, ""
    if key.kind == "key":
        placement = str(key.sharding) if key.committed else ""
        return _jax.key_aval_text(key.impl, key.aval), False, placement, False, ""
    if key.kind == "scalar":
        with jax.enable_x64(x64):
            aval = jax.typeof(key.py_type())
        return aval.str_short(**short), aval.weak_type, "", False, key.py_type.__name__
    return jax.core.ShapedArray(tuple(key.shape), key.dtype).str_short(**short), False, "", True, ""


def describe(signature, arg_names=None) -> Description:
    """The Description of a CallSignature; ``arg_names``: the function's
    positional parameter names, where the signature has none (nnx.jit's)."""
    x64 = _x64(signature.context)
    names = signature.arg_names or tuple(arg_names or ())
    args = []
    for path, key in zip(signature.leaf_paths(), signature.leaf_keys()):
        aval, weak_type, placement, numpy, python = _leaf_aval(key, x64)
        argument, rest = argument_of(path, names)
        sharding = key.sharding if placement else None
        args.append(
            ArgumentLeaf(
                path, argument, argument + keystr(rest), aval, weak_type, placement, numpy, python, sharding
            )
        )
    # A front end labels its static leaves by path (filter_jit): named here.
    items = [
        (_label(label, names) if isinstance(label, tuple) else label, value)
        for label, value in signature.static_items()
    ]
    static = tuple((label, repr(value)) for label, value in items)
    made_at = tuple((label, _definition_site(value)) for label, value in items if _definition_site(value))
    context = tuple((name, repr(value)) for name, value in zip(_jax.trace_context_names(), signature.context))
    return Description(
        tuple(args), static, context, signature.treedef, names, made_at, tuple(arg_names or ())
    )


def signature_text(signature) -> str:
    """``x: f32[4], lr: f32[]{weak}; static mode='train'``."""
    described = describe(signature)
    text = ", ".join(f"{leaf.label}: {leaf.text}" for leaf in described.args)
    static = ", ".join(f"{label}={value}" for label, value in described.static)
    return text + ("; static " + static if static else "")


# -- what changed -----------------------------------------------------------------


class Change(str):
    """One line of a recompile's explanation, with its kind for findings:
    ``"shape"`` (``path``'s shape changed), ``"new_object"`` (``path`` holds a
    new object of the same kind; ``made_at``: where a new function was defined),
    ``"unchanged"`` (the signature did not change), ``""`` (anything else)."""

    kind = ""
    path = ""
    made_at = None

    @classmethod
    def of(cls, text, kind="", path="", made_at=None):
        change = cls(text)
        change.kind, change.path, change.made_at = kind, path, made_at
        return change


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def same_kind_new_object(was: str, now: str) -> bool:
    """Two reprs of distinct objects that differ only by their addresses:
    ``<function <lambda> at 0x1>`` and ``<function <lambda> at 0x2>``.  Such
    values compare by identity, so every new one is a new cache key."""
    return was != now and _ADDRESS.search(now) is not None and _ADDRESS.sub("", was) == _ADDRESS.sub("", now)


def _short_repr(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _new_object_change(label: str, was: str, now: str, made_at=None) -> Change:
    kind = _ADDRESS.sub("", now)
    return Change.of(
        f"{label}: a new object of the same kind ({_short_repr(kind)}), compared by identity",
        "new_object",
        label,
        made_at,
    )


def _definition_site(value):
    """``(filename, line)`` where a function value (or a bound method's, a
    partial's function) was defined: where the new object is made."""
    for _ in range(3):
        code = getattr(value, "__code__", None)
        if code is not None:
            return code.co_filename, code.co_firstlineno
        value = getattr(value, "__func__", None) or getattr(value, "func", None)
    return None


def explain_change(old: Description, new: Description) -> list[str]:
    """Lines saying how ``new`` differs from ``old``, by argument path."""
    changes = _structure_changes(old, new)
    before = {leaf.path: leaf for leaf in old.args}
    for leaf in new.args:
        earlier = before.get(leaf.path)
        if earlier is None:
            continue
        placed = placement_change(earlier, leaf)
        if earlier.text == leaf.text:
            if placed:
                changes.append(f"{leaf.label}: {leaf.text}, {placed}")
            elif earlier.python != leaf.python:
                was, now = (_source(earlier), _source(leaf))
                changes.append(f"{leaf.label}: {was} -> {now} ({leaf.text})")
            continue
        also = f", {placed}" if placed else ""
        same_place = dataclasses.replace(earlier, placement=leaf.placement)
        if dataclasses.replace(same_place, weak_type=leaf.weak_type, python=leaf.python) == leaf:
            changes.append(f"{leaf.label}: weak_type changed ({earlier.text} -> {leaf.text}){also}")
        elif dataclasses.replace(same_place, aval=leaf.aval) == leaf and _dtype(earlier.aval) == _dtype(
            leaf.aval
        ):
            kind = "" if placed else "shape"
            changes.append(Change.of(f"{leaf.label}: {earlier.text} -> {leaf.text}{also}", kind, leaf.label))
        else:
            changes.append(f"{leaf.label}: {earlier.text} -> {leaf.text}{also}")
    for label, was, now in _changed_values(dict(old.static), dict(new.static)):
        if was is not None and now is not None and same_kind_new_object(was, now):
            name = new.params[int(label)] if label.isdigit() and int(label) < len(new.params) else label
            changes.append(_new_object_change(name, was, now, dict(new.static_made_at).get(label)))
        else:
            changes.append(_change_line("static ", label, was, now))
    for name, was, now in _changed_values(dict(old.context), dict(new.context)):
        if name == "jax_enable_x64":
            changes.append(f"x64 mode changed ({was} -> {now})")
        else:
            changes.append(_change_line("", name, was, now))
    if not changes:
        changes.append(
            Change.of(
                "signature unchanged: compiled again (a new jit wrapper of the same "
                "function, or its entry was evicted from the cache)",
                "unchanged",
            )
        )
    return changes


def placement_change(was: ArgumentLeaf, now: ArgumentLeaf) -> str:
    """What differs between two leaves' placements, and only that: ``spec P()
    -> P(None,)``, ``mesh ('batch': 2) -> ('batch': 1, 'model': 2)``, a
    memory kind, a commitment; empty when they are placed alike."""
    if was.placement == now.placement or _same_key_placement(was, now):
        return ""
    if not was.placement:
        return f"committed ({_sharding_text(now.sharding)})"
    if not now.placement:
        return "uncommitted"
    a, b = was.sharding, now.sharding
    parts = []
    if isinstance(a, jax.sharding.NamedSharding) and isinstance(b, jax.sharding.NamedSharding):
        if a.mesh != b.mesh:
            parts.append(f"mesh {_mesh_text(a.mesh, b.mesh)} -> {_mesh_text(b.mesh, a.mesh)}")
        if a.spec != b.spec:
            parts.append(f"spec {a.spec} -> {b.spec}")
        if a.memory_kind != b.memory_kind:
            parts.append(f"memory {a.memory_kind} -> {b.memory_kind}")
    if not parts:
        parts.append(f"sharding {_sharding_text(a)} -> {_sharding_text(b)}")
    return ", ".join(parts)


def _same_key_placement(was: ArgumentLeaf, now: ArgumentLeaf) -> bool:
    """Two keys whose physical arrays are placed alike: jax's executables
    give a key's physical array P() and P(None,) on alternate calls, one
    logical sharding (the dispatcher keys them as one)."""
    a, b = was.sharding, now.sharding
    if not (was.aval.startswith("key<") and now.aval == was.aval):
        return False
    if not (isinstance(a, jax.sharding.NamedSharding) and isinstance(b, jax.sharding.NamedSharding)):
        return False

    def trimmed(spec):
        parts = list(spec)
        while parts and parts[-1] is None:
            parts.pop()
        return parts

    return a.mesh == b.mesh and a.memory_kind == b.memory_kind and trimmed(a.spec) == trimmed(b.spec)


def _mesh_text(mesh, other) -> str:
    """A mesh's axes (``('batch': 2, 'model': 1)``), with its axis types or
    devices where only those tell it from ``other``."""
    axes = ", ".join(f"{name!r}: {size}" for name, size in mesh.shape.items())
    if dict(mesh.shape) == dict(getattr(other, "shape", {})):
        types = getattr(mesh, "axis_types", None)
        if types != getattr(other, "axis_types", None):
            return f"({axes}; {', '.join(getattr(t, 'name', str(t)) for t in types or ())})"
        devices = getattr(mesh, "device_ids", None)
        if devices is not None:
            return f"({axes}; devices {_short_repr(str(devices.flatten().tolist()), 40)})"
    return f"({axes})"


def _sharding_text(sharding) -> str:
    """A sharding in a few words: a NamedSharding's spec and mesh axes, else
    its type and short repr."""
    if isinstance(sharding, jax.sharding.NamedSharding):
        axes = ", ".join(f"{name!r}: {size}" for name, size in sharding.mesh.shape.items())
        return f"{sharding.spec} on ({axes})"
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        return f"on {next(iter(sharding.device_set))}"
    return _short_repr(str(sharding), 60)


def _dtype(aval_text: str) -> str:
    return aval_text.partition("[")[0]


def _source(leaf: ArgumentLeaf) -> str:
    return f"a Python {leaf.python}" if leaf.python else "an array"


def closest_change(earlier, current: Description) -> list[str]:
    """What changed against the earlier description that differs least."""
    best = None
    for previous in reversed(earlier):
        changes = explain_change(previous, current)
        if best is None or len(changes) < len(best):
            best = changes
    return best


def _structure_changes(old: Description, new: Description) -> list[str]:
    old_paths = {leaf.path for leaf in old.args}
    new_paths = {leaf.path for leaf in new.args}
    added = [leaf for leaf in new.args if leaf.path not in old_paths]
    removed = [leaf for leaf in old.args if leaf.path not in new_paths]
    trees_differ = old.treedef is not None and new.treedef is not None and old.treedef != new.treedef
    if not added and not removed and not trees_differ:
        return []
    difference = first_difference(old.treedef, new.treedef) if trees_differ else None
    arguments = list(dict.fromkeys(leaf.argument for leaf in removed + added))
    if not arguments:
        if difference is None:
            return ["arguments: tree structure changed (node types)"]
        path, what = difference
        inside = _static_data_changes(old.treedef, new.treedef, path, new.arg_names)
        if inside:
            return inside
        at = f" at {_label(path, new.arg_names)}" if path else ""
        return [f"arguments: tree structure changed ({_short_repr(what, 120)}{at})"]
    lines = []
    for argument in arguments:
        if difference is not None and len(arguments) == 1:
            path, what = difference
            label = _label(path, new.arg_names)
            detail = what if label == argument else f"{what} at {label}"
        else:
            parts = [f"{leaf.label} added" for leaf in added if leaf.argument == argument]
            parts += [f"{leaf.label} removed" for leaf in removed if leaf.argument == argument]
            detail = ", ".join(parts)
        lines.append(f"{argument}: tree structure changed ({detail})")
    return lines


def _static_data_changes(old_treedef, new_treedef, path, arg_names) -> list:
    """What differs inside the first node whose static data changed, by
    attribute path below the argument (``model.act``), never the whole
    node's repr: flax's GraphDef, a tuple of static values (an equinox
    Module's static fields); empty for static data of another kind."""
    try:
        found = _first_static_difference(old_treedef.to_jax(), new_treedef.to_jax())
    except Exception:  # a static value whose __eq__ raised
        return []
    if found is None:
        return []
    node_type, was, now = found
    if path and getattr(path[-1], "name", None) == "_graphdef":  # flax's NodeStates
        path = path[:-1]
    base = _label(path, arg_names)
    lines = []
    for attribute, was_text, now_text, made_at in _differences_inside(node_type, was, now):
        label = base + attribute
        if was_text is None:
            lines.append(Change(f"{label}: added ({_short_repr(now_text)})"))
        elif now_text is None:
            lines.append(Change(f"{label}: removed (was {_short_repr(was_text)})"))
        elif same_kind_new_object(was_text, now_text):
            lines.append(_new_object_change(label, was_text, now_text, made_at))
        else:
            lines.append(Change(f"{label}: {_short_repr(was_text)} -> {_short_repr(now_text)}"))
    return lines


def _first_static_difference(a, b):
    """``(node type, old data, new data)`` of the first pair of nodes (jax
    PyTreeDefs walked together) whose static data differ, or None."""
    a_data, b_data = a.node_data(), b.node_data()
    if a_data is None or b_data is None or a_data[0] is not b_data[0]:
        return None
    if a_data[1] != b_data[1]:
        return a_data[0], a_data[1], b_data[1]
    a_children, b_children = a.children(), b.children()
    if len(a_children) != len(b_children):
        return None
    for x, y in zip(a_children, b_children):
        found = _first_static_difference(x, y)
        if found is not None:
            return found
    return None


def _differences_inside(node_type, was, now) -> list:
    """``(attribute path, old repr or None, new repr or None, where a new
    function was defined)`` per value that differs between two static data
    of a ``node_type`` node."""
    attributes = descriptions.attributes_reader(now)
    if attributes is not None:
        return _attribute_changes(attributes(was), attributes(now))
    if isinstance(was, tuple) and isinstance(now, tuple) and len(was) == len(now):
        names = descriptions.aux_names(node_type)
        if names is None or len(names) != len(now):
            names = None
        return [
            (f".{names[i]}" if names else f"[{i}]", repr(a), repr(b), _definition_site(b))
            for i, (a, b) in enumerate(zip(was, now))
            if a is not b and not _equal(a, b)
        ]
    return []


_ABSENT = object()


def _attribute_changes(before: dict, after: dict) -> list:
    """The changes between two ``{attribute path: value}`` maps, as
    _static_value_changes gives them: ``(".act", old repr, new repr, site)``."""
    changes = []
    for path in dict.fromkeys(list(before) + list(after)):
        was, now = before.get(path, _ABSENT), after.get(path, _ABSENT)
        if was is now or (was is not _ABSENT and now is not _ABSENT and _equal(was, now)):
            continue
        text = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path)
        changes.append((text, _value_text(was), _value_text(now), _definition_site(now)))
    return changes


def _value_text(value):
    if value is _ABSENT:
        return None
    return value.__qualname__ if isinstance(value, type) else repr(value)


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _changed_values(old: dict, new: dict):
    """(label, old value or None, new value or None) for each label that differs
    (the values are reprs: None means absent)."""
    for label in dict.fromkeys(list(old) + list(new)):
        if old.get(label) != new.get(label):
            yield label, old.get(label), new.get(label)


def _change_line(prefix: str, label: str, was, now) -> str:
    if was is None:
        return f"{prefix}{label}: added ({now})"
    if now is None:
        return f"{prefix}{label}: removed (was {was})"
    return f"{prefix}{label}: {was} -> {now}"


def _labelled_changes(prefix: str, old: dict, new: dict) -> list[str]:
    return [_change_line(prefix, label, was, now) for label, was, now in _changed_values(old, new)]
