"""Pytrees at C speed: ``flatten``, ``TreeDef`` and ``unflatten``, with leaf
order, structure, equality and repr those of ``jax.tree_util``.

One module per operation:

* ``treedef``: ``TreeDef``, a tree's structure, and rebuilding a tree from it;
* ``flatten``: a tree's leaves and ``TreeDef``, with the caches that make
  flattening the same shapes again cheap;
* ``registry``: what each Python type is to flatten, from jax's registry;
* ``fields``: ``FieldLayout``, registered types read from (and rebuilt into)
  their instance ``__dict__`` in C;
* ``paths``: a tree's leaves' key paths, and where two structures differ.

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
    "unflatten",
]
