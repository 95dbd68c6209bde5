# What identifies one compiled executable of a function: the call's structure,
# each dynamic leaf's type and placement, the static arguments and jax's context.
from cpython.object cimport PyObject
from fastdispatch._pytree cimport TreeDef

# read_leaf_keys results: why a call's leaves can or cannot take the fast path.
cdef enum LeafStatus:
    LEAVES_OK = 0              # every leaf is a jax Array or a typed key
    LEAVES_TRACER = 1          # a transformation's tracer: jax must stage the call
    LEAVES_UNSUPPORTED = 2     # numpy, Python scalars, anything else: jax converts them

cdef class CallSignature:
    cdef readonly TreeDef treedef      # structure of (dynamic args, dynamic kwargs)
    cdef list leaf_keys                # 3 slots per dynamic leaf: aval, sharding, committed
    cdef readonly tuple static_args    # (label, type, value) triples, positional then sorted names
    cdef tuple context                 # jax's trace_context() at the call
    cdef object arg_names              # dynamic positional parameter names, for describe()
    cdef Py_hash_t _hash               # computed once, at construction

    # The steady-state guard: same structure, same statics, same context, and
    # every leaf carrying the very same aval, sharding and committed objects.
    cdef bint matches_call(self, TreeDef treedef, list leaves, tuple static_args,
                           tuple context)
    # The same guard on leaves taken straight from a call's argument array
    # (see _dispatch.CallLayout): no flattening, same structure by construction.
    cdef bint matches_leaves(self, PyObject** leaves, Py_ssize_t n, tuple context)

cdef LeafStatus read_leaf_keys(list leaves, list keys) except *

# True when every item is a leaf the fast path keys (an array, a key, a Python
# scalar, a numpy value): f(*args) is then flat, its arguments its leaves.
cdef bint all_leaves(tuple args)

cdef CallSignature make_signature(TreeDef treedef, list leaf_keys, tuple static_args,
                                  tuple context, object arg_names)
