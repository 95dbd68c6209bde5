# Flattening, for the layers above (signature, the front ends).
from fastdispatch.core.pytree.treedef cimport TreeDef


# Append the leaves of `tree` to `leaves` in jax's order and return its TreeDef.
cdef TreeDef flatten_into(object tree, list leaves)


# What flatten makes of `node` now, by jax's registry (a NodeKind): NODE_FIELDS
# only where it reads the node from its instance __dict__ alone (a front end's
# FieldLayout, checked against jax's flatten, and the __dict__ has exactly
# its entries), so that its children and aux data are those entries' values.
cdef int node_kind(object node) except -1
