# What a pytree node is: a TreeDef's kind, and a NodeType's (how flatten reads
# a Python type).  Declarations only: no module backs this header.

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
