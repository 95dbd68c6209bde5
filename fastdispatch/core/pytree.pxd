# The pytree layer's interface for the layers above it (signature, dispatch).
# Leaf order, structure and equality are jax.tree_util's.
cimport cython

cdef enum NodeKind:
    NODE_LEAF = 0          # not a container: an array, a scalar, anything unregistered
    NODE_NONE = 1          # None: a node with no children
    NODE_TUPLE = 2
    NODE_LIST = 3
    NODE_DICT = 4          # children in sorted-key order, as jax orders them
    NODE_NAMEDTUPLE = 5    # tuple subclass with `_fields`; jax handles it natively
    NODE_CUSTOM = 6        # a type in jax's registry (TreeDef.info says how to walk it)
    # NodeType only: a register_dataclass type whose fields are known, walked
    # by getattr with no Python call (its TreeDefs are CUSTOM)
    NODE_DATACLASS = 7
    # NodeType only: a registered type whose flatten reads named entries of the
    # instance __dict__, as a front end's FieldLayout says; walked in C (its
    # TreeDefs are CUSTOM)
    NODE_FIELDS = 8


@cython.final
cdef class FieldLayout:
    """How a registered type's flatten function reads an instance (NODE_FIELDS)."""
    cdef readonly tuple children       # __dict__ keys of the children, in order
    cdef readonly tuple aux_prefix     # the aux data's first items: the same for every instance
    cdef readonly tuple aux_names      # __dict__ keys of the aux data's other items, in order
    cdef readonly Py_ssize_t dict_size  # valid only for instances whose __dict__ has this many entries
    cdef readonly bint direct_unflatten  # rebuild as object.__new__ and __dict__ writes
    cdef readonly object absent        # a value that means "not set": not written back
    # The last two __dict__ key orders seen (DictOrder): instances made by one
    # __init__, or rebuilt by unflatten, store their fields in one order each.
    cdef object recent_order
    cdef object older_order


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
cdef class NodeType:
    """What flatten needs to know about one Python type, looked up once per type."""
    cdef int kind                   # NODE_LEAF, NAMEDTUPLE, CUSTOM, DATACLASS or FIELDS
    cdef object node_type           # the type itself
    cdef object to_iter             # jax's flatten function (CUSTOM, DATACLASS, FIELDS)
    cdef object from_iter           # jax's unflatten function (CUSTOM, DATACLASS, FIELDS)
    cdef tuple data_fields          # DATACLASS: attribute names of the children
    cdef tuple meta_fields          # DATACLASS: attribute names of the aux data
    # DATACLASS: (name, from aux data, index) per field, in the class's order,
    # when its __init__ only stores them (built through __dict__); else None
    cdef tuple direct_fields
    cdef bint checked               # DATACLASS, FIELDS: checked against to_iter on a first instance
    cdef FieldLayout layout         # FIELDS: which __dict__ entries make the node
    cdef dict memos                 # aux data (atoms only) -> the last node built with it
    cdef list recent                # the last RECENT_MEMOS nodes of ``memos`` met, latest first


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


# Append the leaves of `tree` to `leaves` in jax's order and return its TreeDef.
cdef TreeDef flatten_into(object tree, list leaves)


# What flatten makes of `node` now, by jax's registry (a NodeKind): NODE_FIELDS
# only where it reads the node from its instance __dict__ alone (a front end's
# FieldLayout, checked against jax's flatten, and the __dict__ has exactly
# its entries), so that its children and aux data are those entries' values.
cdef int node_kind(object node) except -1
