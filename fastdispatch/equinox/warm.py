"""What a filter_jit call is to warm start (fastdispatch.warm): what its key
covers beyond what every front end's does, and the objects a stored output
recipe may name.

equinox's function is a tree of its own (a Module, a partial), so it is keyed
by its static part, not by its identity: the function's static leaves and
tree, the arguments' tree with every Module's static fields, each argument
leaf that is not an array by content, the donation, and the methods of the
classes the trees are made of."""

from __future__ import annotations

from fastdispatch.core.pytree import node_data_items, tree_nodes

LABEL = "filter_jit"


def static_parts(signature) -> dict:
    """A filter_jit CallSignature's static parts by label: "fun" (the
    function's static leaves and jax tree structure), "donate" (donate first,
    donate rest), "leaves" (each argument leaf's static value, None where an
    array is)."""
    static = signature.static_args
    return {static[i]: static[i + 2] for i in range(0, len(static), 3)}


def key_parts(signature) -> tuple:
    """``(value, what it is to the call)`` of what the key covers of the call."""
    parts = static_parts(signature)
    fun_leaves, fun_treedef = parts["fun"]
    return (
        (fun_leaves, "is, or holds,"),
        (fun_treedef, "is a tree holding"),
        (signature.treedef.to_jax(), "takes a tree holding"),
        (parts["leaves"], "takes as static argument"),
        (tuple(parts["donate"]), "donates"),
    )


def node_types(signature) -> list:
    """The classes the function's and the arguments' trees are made of."""
    fun_treedef = static_parts(signature)["fun"][1]
    return [kind for treedef in (signature.treedef.to_jax(), fun_treedef) for kind, _ in tree_nodes(treedef)]


def call_objects(signature) -> list:
    """Every static object of the call, at a place its structure fixes (the
    same in every process making a call of this key): the arguments' static
    leaves, the function's, then the items of every node's data (a Module's
    static fields).  A non-array output that is one of them is stored as its
    place (warm/outputs.py)."""
    parts = static_parts(signature)
    fun_leaves, fun_treedef = parts["fun"]
    objects = list(parts["leaves"]) + list(fun_leaves)
    for treedef in (signature.treedef.to_jax(), fun_treedef):
        objects.extend(node_data_items(treedef))
    return objects
