"""Signatures for people: what each argument was, and what changed at a recompile.

``describe(signature)`` turns a CallSignature into a ``Description``: one
``ArgumentLeaf`` per dynamic leaf (its argument, its path in the tree as jax
key entries, its aval, weak type and placement), the static arguments and
jax's context.  ``explain_change(old, new)`` compares two descriptions and
says, by argument path, what changed: shapes, dtypes, weak types,
placements, tree structure, static values, jax settings.
"""

from __future__ import annotations

import dataclasses

import jax
from jax.tree_util import DictKey, SequenceKey, keystr

from fastdispatch import _jax
from fastdispatch._pytree import first_difference

__all__ = ["ArgumentLeaf", "Description", "describe", "explain_change", "signature_text"]

# The root of every signature's tree: (dynamic positional args, dynamic kwargs).
_POSITIONAL, _KEYWORD = SequenceKey(0), SequenceKey(1)


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

    @property
    def text(self) -> str:
        text = self.aval + ("{weak}" if self.weak_type else "")
        if self.placement:
            text += f"@{self.placement}"
        return text + (" (numpy)" if self.numpy else "")


@dataclasses.dataclass(frozen=True)
class Description:
    """A CallSignature as people read it."""

    args: tuple  # ArgumentLeaf per dynamic leaf, in flatten order
    static: tuple  # (label, repr(value)) per static argument
    context: tuple  # (name, repr(value)) per value of jax's trace context
    treedef: object = None  # the signature's TreeDef, to explain structure changes
    arg_names: tuple = ()  # dynamic positional parameter names


def argument_of(path: tuple, arg_names: tuple) -> tuple[str, tuple]:
    """``(parameter, rest of the path)`` for a path from the root (args, kwargs):
    ``(SequenceKey(0), SequenceKey(1), DictKey('w'))`` -> ``("params", (DictKey('w'),))``."""
    if len(path) >= 2 and path[0] == _POSITIONAL and isinstance(path[1], SequenceKey):
        index = path[1].idx
        name = arg_names[index] if index < len(arg_names) else f"args[{index}]"
        return name, path[2:]
    if len(path) >= 2 and path[0] == _KEYWORD and isinstance(path[1], DictKey):
        return str(path[1].key), path[2:]
    if path and isinstance(path[0], str):  # a front end's own root, e.g. "fun"
        return path[0], path[1:]
    return keystr(path), ()


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


def describe(signature) -> Description:
    """The Description of a CallSignature."""
    x64 = _x64(signature.context)
    args = []
    for path, key in zip(signature.leaf_paths(), signature.leaf_keys()):
        aval, weak_type, placement, numpy, python = _leaf_aval(key, x64)
        argument, rest = argument_of(path, signature.arg_names)
        args.append(
            ArgumentLeaf(path, argument, argument + keystr(rest), aval, weak_type, placement, numpy, python)
        )
    static = tuple((label, repr(value)) for label, value in signature.static_items())
    context = tuple((name, repr(value)) for name, value in zip(_jax.trace_context_names(), signature.context))
    return Description(tuple(args), static, context, signature.treedef, signature.arg_names)


def signature_text(signature) -> str:
    """``x: f32[4], lr: f32[]{weak}; static mode='train'``."""
    described = describe(signature)
    text = ", ".join(f"{leaf.label}: {leaf.text}" for leaf in described.args)
    static = ", ".join(f"{label}={value}" for label, value in described.static)
    return text + ("; static " + static if static else "")


# -- what changed -----------------------------------------------------------------


def explain_change(old: Description, new: Description) -> list[str]:
    """Lines saying how ``new`` differs from ``old``, by argument path."""
    changes = _structure_changes(old, new)
    before = {leaf.path: leaf for leaf in old.args}
    for leaf in new.args:
        earlier = before.get(leaf.path)
        if earlier is None:
            continue
        if earlier.text == leaf.text:
            if earlier.python != leaf.python:
                was, now = (_source(earlier), _source(leaf))
                changes.append(f"{leaf.label}: {was} -> {now} ({leaf.text})")
            continue
        if dataclasses.replace(earlier, weak_type=leaf.weak_type, python=leaf.python) == leaf:
            changes.append(f"{leaf.label}: weak_type changed ({earlier.text} -> {leaf.text})")
        else:
            changes.append(f"{leaf.label}: {earlier.text} -> {leaf.text}")
    changes += _labelled_changes("static ", dict(old.static), dict(new.static))
    for name, was, now in _changed_values(dict(old.context), dict(new.context)):
        if name == "jax_enable_x64":
            changes.append(f"x64 mode changed ({was} -> {now})")
        else:
            changes.append(_change_line("", name, was, now))
    if not changes:
        changes.append(
            "signature unchanged: compiled again (a new jit wrapper of the same "
            "function, or its entry was evicted from the cache)"
        )
    return changes


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
        at = f" at {_label(path, new.arg_names)}" if path else ""
        return [f"arguments: tree structure changed ({what}{at})"]
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
