"""Pytrees at C speed: ``flatten``, ``TreeDef`` and ``unflatten``, with leaf
order, structure, equality and repr those of ``jax.tree_util``.

One module per operation:

* ``treedef``: ``TreeDef``, a tree's structure, and rebuilding a tree from it;
* ``flatten``: a tree's leaves and ``TreeDef``, with the caches that make
  flattening the same shapes again cheap;
* ``registry``: what each Python type is to flatten, from jax's registry;
* ``fields``: ``FieldLayout``, registered types read from (and rebuilt into)
  their instance ``__dict__`` in C;
* ``paths``: a tree's leaves' key paths, and where two structures differ;
* ``tree_nodes`` (here): the nodes of a jax tree structure.

The layers above cimport ``TreeDef`` from ``treedef`` and ``flatten_into``
from ``flatten``; Python code uses the names below.
"""

from fastdispatch.core.pytree.fields import FieldLayout
from fastdispatch.core.pytree.flatten import flatten, unflatten
from fastdispatch.core.pytree.paths import first_difference, leaf_paths
from fastdispatch.core.pytree.registry import add_field_reader, add_lazy_field_reader
from fastdispatch.core.pytree.treedef import TreeDef

__all__ = [
    "FieldLayout",
    "TreeDef",
    "add_field_reader",
    "add_lazy_field_reader",
    "first_difference",
    "flatten",
    "leaf_paths",
    "node_data_items",
    "tree_nodes",
    "unflatten",
]


def tree_nodes(treedef):
    """(node type, node data) of every node of a jax tree structure, in
    pre-order; leaves are left out."""
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return
    yield treedef.node_data()
    for child in treedef.children():
        yield from tree_nodes(child)


def node_data_items(treedef) -> list:
    """The node data of a jax tree structure, item by item (a tuple's items,
    else the datum itself), in pre-order: the objects at places the structure
    fixes."""
    items = []
    for _, data in tree_nodes(treedef):
        items.extend(data if type(data) is tuple else (data,))
    return items
