# cython: boundscheck=False, wraparound=False
"""Outputs: how the flat outputs of an executable become the call's result.

Each front end has its own kind: ``jit`` rebuilds jax's output tree
(OutputTree, here); ``filter_jit`` mixes arrays with the static leaves its
trace returned (``_filter.OutputRecipe``); ``nnx.jit`` writes the graph's new
values back into its Variables first (``_nnx.Record``).
"""
from cpython.list cimport PyList_GET_ITEM

from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef


cdef class Outputs:
    """The result of a call from its executable's flat outputs."""

    cdef object rebuild(self, list outputs):
        raise NotImplementedError


cdef class OutputTree(Outputs):
    """jax's output tree, rebuilt by our TreeDef where the two agree."""

    cdef object rebuild(self, list outputs):
        if self.single:
            return <object>PyList_GET_ITEM(outputs, 0)
        if self.treedef is not None:
            return self.treedef.unflatten(outputs)
        return self.jax_treedef.unflatten(outputs)


cdef OutputTree output_tree(object jax_treedef):
    cdef OutputTree tree = OutputTree.__new__(OutputTree)
    tree.jax_treedef = jax_treedef
    tree.treedef = our_treedef(jax_treedef)
    tree.single = (tree.treedef is not None and tree.treedef.num_nodes == 1
                   and tree.treedef.num_leaves == 1)
    return tree


cdef class _Marker:
    # A stand-in leaf, to read the order in which a tree flattens.
    cdef Py_ssize_t index


cdef TreeDef our_treedef(jax_treedef):
    """Our TreeDef for jax's, or None when the two would not agree exactly
    (a registered type whose constructor refuses stand-in leaves, say)."""
    cdef Py_ssize_t i, n = jax_treedef.num_leaves
    cdef list markers = []
    cdef _Marker marker
    for i in range(n):
        marker = _Marker.__new__(_Marker)
        marker.index = i
        markers.append(marker)
    try:
        tree = jax_treedef.unflatten(markers)
    except Exception:
        return None
    cdef list leaves = []
    cdef TreeDef treedef = flatten_into(tree, leaves)
    if len(leaves) != n:
        return None
    for i in range(n):
        if leaves[i] is not markers[i]:
            return None
    return treedef
