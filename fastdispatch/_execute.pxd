# The execute layer: one compiled executable, run straight through PjRt.
from fastdispatch._pytree cimport TreeDef
from fastdispatch._signature cimport CallSignature, LeafKind

cdef class Executable:
    cdef object execute                # LoadedExecutable.execute_sharded, bound
    cdef list out_handlers             # one jaxlib result handler per flat output
    cdef TreeDef out_treedef           # rebuilds the output tree; None: jax's does
    cdef object jax_out_treedef        # jax's PyTreeDef of the outputs
    cdef bint single_output            # the output is one array, not a tree
    cdef Py_ssize_t num_inputs         # kept inputs: what the executable takes
    cdef Py_ssize_t* input_leaf        # the flat leaf index of each kept input
    cdef LeafKind* input_kind          # how each kept input enters (ARRAY, KEY, SCALAR)
    cdef bint takes_leaves_as_is       # every leaf kept, every leaf an ARRAY
    cdef tuple scalar_inputs           # per kept input: a ScalarInput, or None
    cdef dict scalar_buffers           # (input, value bits) -> device array of a repeated scalar
    cdef bint reuse_scalar_buffers     # False when the function donates arguments

    # The output of one call on its flat leaves, or DELEGATE when jax.jit must
    # run it after all (a Python scalar that does not convert).  With tracing
    # on, launched[0] is stamped once the executable has returned.
    cdef object run(self, object leaves, long long* launched)
    # The same, returning the flat list of outputs (for front ends that
    # rebuild the result themselves).
    cdef object run_flat(self, object leaves, long long* launched)
    cdef object _scalar_buffer(self, Py_ssize_t input, object value)


# An Executable for `compiled`, compiled for `signature` on the call whose
# flat leaves are `leaves`; or a str saying why jax.jit must run it instead.
cdef object make_executable(object compiled, CallSignature signature, list leaves, bint donates)
