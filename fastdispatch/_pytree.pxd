# The pytree layer's interface for the layers above it (signature, dispatch).
# Leaf order, structure and equality are jax.tree_util's.

cdef class TreeDef:
    cdef readonly Py_ssize_t num_leaves    # leaves below (and at) this node
    cdef readonly Py_ssize_t num_nodes     # nodes below (and at) this node, jax's count
    cdef Py_hash_t _hash                   # computed once, when the node is built
    # (the implementation adds its own fields: node kind, type, node data, children)

    cdef bint same_as(self, TreeDef other)     # fast equality: identity, hash, then structure
    cpdef object unflatten(self, object leaves)

# Append the leaves of `tree` to `leaves` in jax's order and return its TreeDef.
cdef TreeDef flatten_into(object tree, list leaves)
