# The structure of a pytree, for the layers above (signature, the front ends).
# Leaf order, structure and equality are jax.tree_util's.
cimport cython
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.keys cimport Py_uhash_t, XXPRIME_5, hash_mix
from fastdispatch.core.pytree.registry cimport NodeType


@cython.final
cdef class DictKeys:
    """The keys of one dict shape, in the dict's order and in jax's (sorted) order."""
    cdef tuple insertion            # keys in the dict's own (insertion) order
    cdef tuple sorted_keys          # the same keys sorted as jax sorts them
    cdef Py_ssize_t* order          # order[j] = insertion index of sorted_keys[j]
    cdef Py_hash_t keys_hash        # hash(sorted_keys), computed once
    cdef bint atoms                 # every key is an atom (str, int, ...): safe to cache
    cdef TreeDef memo               # the last dict node built with these keys


@cython.final
cdef class TreeDef:
    cdef readonly Py_ssize_t num_leaves    # leaves below (and at) this node
    cdef readonly Py_ssize_t num_nodes     # nodes below (and at) this node, jax's count
    cdef Py_hash_t _hash                   # computed once, when the node is built
    cdef int kind                          # a NodeKind
    cdef object node_type                  # the container's type (None for a leaf)
    cdef object node_data                  # DICT: DictKeys; CUSTOM: aux data; else None
    cdef tuple children                    # the child TreeDefs, in jax's order
    cdef NodeType info                     # NAMEDTUPLE/CUSTOM: how to rebuild; else None
    # Holds only atoms (no user objects) down to its leaves: a memo may keep
    # it without keeping anything alive.
    cdef bint cacheable
    cdef object __weakref__                # lets tests check that TreeDefs are freed

    cdef bint same_as(self, TreeDef other) except -1   # fast equality: identity, hash, then structure
    cpdef object unflatten(self, object leaves)
    cdef object _build(self, list leaves, Py_ssize_t* index)


# The leaf node and the None node, shared by every tree.
cdef TreeDef leaf_def()
cdef TreeDef none_def()
# Key orders for a dict whose keys are `insertion`, `sorted_keys` being the
# same key objects in jax's order.
cdef DictKeys new_dict_keys(tuple insertion, tuple sorted_keys)


cdef inline TreeDef new_node(int kind, object node_type, object node_data, tuple children,
                             NodeType info, Py_uhash_t data_hash, bint own_cacheable):
    """A node over already-built children; its counts and hash are computed here, once."""
    cdef TreeDef node = TreeDef.__new__(TreeDef)
    cdef TreeDef child
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(children)
    cdef Py_ssize_t num_leaves = 0, num_nodes = 1
    cdef bint cacheable = own_cacheable
    cdef Py_uhash_t acc = hash_mix(hash_mix(hash_mix(XXPRIME_5, <Py_uhash_t>kind), <Py_uhash_t>n), data_hash)
    for i in range(n):
        child = <TreeDef>PyTuple_GET_ITEM(children, i)
        num_leaves += child.num_leaves
        num_nodes += child.num_nodes
        cacheable = cacheable and child.cacheable
        acc = hash_mix(acc, <Py_uhash_t>child._hash)
    node.kind = kind
    node.node_type = node_type
    node.node_data = node_data
    node.children = children
    node.info = info
    node.num_leaves = num_leaves
    node.num_nodes = num_nodes
    node.cacheable = cacheable
    if <Py_hash_t>acc == -1:
        acc = 1546275796
    node._hash = <Py_hash_t>acc
    return node
