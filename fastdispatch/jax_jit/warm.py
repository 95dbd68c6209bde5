"""What a jit call is to warm start (fastdispatch.warm): what its key covers
beyond what every front end's does, and the objects a stored output tree may
name."""

from __future__ import annotations

from fastdispatch.core.pytree import node_data_items

LABEL = "jit"


def key_parts(signature) -> tuple:
    """``(value, what it is to the call)`` of the call's argument tree and its
    static arguments (the signature keeps them as (name or position, hash,
    value) triples)."""
    static = signature.static_args
    return (
        (signature.treedef.to_jax(), "takes a tree holding"),
        (tuple((static[i], static[i + 2]) for i in range(0, len(static), 3)), "takes as static argument"),
    )


def call_objects(signature) -> list:
    """The node data of the call's argument tree, item by item, in pre-order:
    the objects at places its structure fixes (the key describes each by
    content), which a stored output tree names by place."""
    return node_data_items(signature.treedef.to_jax())
