# Outputs: how an executable's flat outputs become the call's result.
cimport cython
from fastdispatch.core.pytree.treedef cimport TreeDef


cdef class Outputs:
    # The call's result from the executable's flat outputs (a list).
    cdef object rebuild(self, list outputs)


@cython.final
cdef class OutputTree(Outputs):
    cdef TreeDef treedef           # ours, agreeing with jax's exactly; None: jax's rebuilds
    cdef object jax_treedef        # jax's PyTreeDef of the outputs
    cdef bint single               # the output is one array, not a tree


# The Outputs of a jax executable whose output tree is `jax_treedef`.
cdef OutputTree output_tree(object jax_treedef)

# Our TreeDef for jax's PyTreeDef ``jax_treedef``, or None when the two would
# not agree exactly.
cdef TreeDef our_treedef(object jax_treedef)
