# What identifies one compiled executable of a function: the call's structure,
# each dynamic leaf's kind, type and placement, the static arguments and jax's context.
from cpython.object cimport PyObject
from fastdispatch.core.keys cimport same_items
from fastdispatch.core.pytree.treedef cimport TreeDef

# What a leaf is, as far as dispatch cares; decided by classify_leaf alone.
# The kinds up to LEAF_HOST can be keyed; the others send the call to jax.
cdef enum LeafKind:
    LEAF_ARRAY = 0      # a jax Array: the executable takes it as it is
    LEAF_KEY = 1        # a typed PRNG key: the executable takes its physical uint32 array
    LEAF_SCALAR = 2     # a Python bool, int, float or complex: put on the device per value
    LEAF_HOST = 3       # a numpy array or numpy scalar: put on the device per call, or jax.jit converts it
    LEAF_TRACER = 4     # a transformation's tracer: jax must stage the call
    LEAF_OTHER = 5      # anything else: jax.jit says why it is not a valid argument
    UNHASHABLE_STATIC = 6  # not a leaf: what make_signature does not key: an unhashable static argument

cdef LeafKind classify_leaf(object leaf)

# A LEAF_HOST value jaxlib's batched_device_put converts as jax does: an exact
# numpy array or a numpy scalar, of a native numeric dtype.
cdef bint plain_host_value(object leaf) except -1

# A Python int within the signed int of `bits` bits jax gives it (32, or 64
# with x64): beyond it, jax raises OverflowError before converting anything.
cdef inline bint int_fits(object value, int bits) except -1:
    cdef object bound = (<object>1) << (bits - 1)
    return -bound <= value < bound

# One dynamic leaf's part of the key.  Which fields are set depends on kind;
# the others are NULL (owned references, released with the signature).
cdef struct LeafKey:
    LeafKind kind
    PyObject* aval          # ARRAY: its aval; KEY: its physical array's aval
    PyObject* sharding      # ARRAY, KEY: the sharding object
    # KEY: a second physical sharding object, equivalent to `sharding`, that
    # the identity guard accepts too (jax's executables give a key's physical
    # array P() and P(None,) on alternate calls; NULL until one is seen)
    PyObject* other_sharding
    bint committed          # ARRAY, KEY: placed on its devices explicitly
    # ARRAY, committed, two or more dimensions (a layout other than the
    # default needs a concrete sharding, so commits the array): the guard
    # compares its device layout, `layout`, NULL while not known (an array
    # keyed after it was donated: the next live one fills it in)
    bint has_layout
    PyObject* layout
    PyObject* impl          # KEY: the PRNG implementation
    PyObject* py_type       # SCALAR, HOST: type(leaf) (a scalar's aval follows from it and x64)
    PyObject* dtype         # HOST: the numpy dtype
    PyObject* shape         # HOST: the shape tuple


cdef class CallSignature:
    cdef readonly TreeDef treedef      # structure of (dynamic args, dynamic kwargs)
    cdef LeafKey* keys                 # one per dynamic leaf, in flatten order
    cdef readonly Py_ssize_t num_leaves
    cdef readonly tuple static_args    # (label, type, value) triples, positions then sorted names
    cdef readonly tuple context        # jax's trace_context() at the call
    cdef readonly tuple arg_names      # dynamic positional parameter names, for reports
    # The front end that made it, when its keyed leaves are not simply the
    # treedef's leaves (filter_jit): it describes them for reports through
    # leaf_paths(signature) and static_items(signature).  None for jit.
    cdef readonly object front
    cdef Py_hash_t _hash               # computed once, at construction

    # The steady-state guard: same structure, same statics, same context, and
    # every leaf of the same kind carrying the very same aval, sharding and
    # committed objects (no __eq__ called on them).  A leaf that fails
    # identity (a fresh batch, values another executable made) is keyed anew
    # and, equal to its key, its objects are taken in place of the key's
    # (adopted), so that the next call holding them passes by identity: the
    # call is the one the cache would find this signature's entry for.
    cdef bint adopts_call(self, TreeDef treedef, list leaves, tuple static_args,
                          tuple context) except -1
    # The same guard on the leaves alone, taken straight from a call's
    # argument array (see jit's CallLayout) or a graph's slots (nnx):
    # the structure is the same by construction; jax's context is compared
    # by same_context.  False as soon as one leaf's key differs (the keys
    # before it may hold the equal objects taken).
    cdef bint adopt_leaves(self, PyObject** leaves, Py_ssize_t n) except -1
    # The same guard on the one leaf keyed at index i.
    cdef bint adopt_leaf(self, object leaf, Py_ssize_t i) except -1
    # The executable of `other` runs calls of this signature as jax would:
    # equal, but for arrays whose avals differ only by an empty abstract mesh
    # on one side (made outside jit, under jax.set_mesh), placed alike
    cpdef bint runs_as(self, CallSignature other) except -1


# The signature of a call, or None when some leaf cannot be keyed: then
# unkeyed[0] says which kind (LEAF_TRACER or LEAF_OTHER), or
# UNHASHABLE_STATIC when a static argument's hash raised (no exception left
# set: jax.jit, handed the call, raises its own error).
cdef CallSignature make_signature(TreeDef treedef, list leaves, tuple static_args,
                                  tuple context, tuple arg_names, LeafKind* unkeyed,
                                  object front=*)


# Two of jax's trace contexts are one: a fresh tuple on every call, almost
# always of the very same objects, so pointers are compared before __eq__.
cdef inline bint same_context(tuple a, tuple b) except -1:
    return same_items(a, b) or a == b
