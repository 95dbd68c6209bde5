# The execute layer: one compiled executable, run straight through PjRt.
cimport cython
from cpython.object cimport PyObject
from fastdispatch.core.packing cimport Packed
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport CallSignature, LeafKind

# Why Executable.run handed a call back to jax.jit: the reason --trace shows.
cdef class HandOff:
    cdef readonly str reason

# How a call's flat leaves become an executable's kept inputs.
cdef class Inputs:
    cdef Py_ssize_t num_inputs         # kept inputs: what the executable takes
    cdef Py_ssize_t* input_leaf        # the flat leaf index of each kept input
    cdef LeafKind* input_kind          # how each kept input enters (ARRAY, KEY, SCALAR, HOST)
    cdef bint as_is                    # every leaf kept, every leaf an ARRAY: the leaves are the inputs
    cdef tuple host_inputs             # per kept input: a HostInput (SCALAR, HOST), or None
    cdef bint has_scalars              # some kept input is a Python scalar
    cdef tuple scalar_buffers          # per kept input: {value bits: device array} (SCALAR), or None
    cdef bint reuse_scalar_buffers     # False when the function donates arguments
    cdef readonly bint new_scalars_hand_off  # a scalar value not seen before: jax.jit converts it faster
    cdef readonly bint host_hand_off     # numpy values: jax.jit converts them faster (see make_executable)
    cdef Py_ssize_t calls_before_hand_off   # calls left before the two above are set; -1: never
    cdef bint later_scalars_hand_off     # new_scalars_hand_off, once calls_before_hand_off runs out
    cdef bint later_host_hand_off        # host_hand_off, likewise
    cdef list last_scalars             # per kept input: the last value's bits met (SCALAR), or None
    cdef tuple host_kept               # per kept input: a HostKept (a small HOST), or None
    cdef bint reuse_host_buffers       # host_kept is kept: the function donates nothing

    # The executable's input buffers (a new list) for a call's flat leaves
    # (a list or a tuple), or a HandOff when the library must run the call
    # (a host value that does not convert, host data or a new scalar value
    # jax converts faster).
    cdef object prepare(self, object leaves)
    # For new_scalars_hand_off: some scalar leaf holds a value neither kept on
    # device nor the previous call's: jax.jit should take the call.
    cdef bint new_scalar_in(self, PyObject** leaves)
    cdef bint _is_new(self, Py_ssize_t input, object bits)
    cdef object _scalar_buffer(self, Py_ssize_t input, object value, bint reuse)
    # Every host leaf's bytes are the ones a device array already holds, or
    # were the previous call's (kept then: it repeats): the call can run here
    # with a transfer for none of them (host_hand_off notwithstanding).
    cdef bint host_repeats(self, PyObject** leaves) except -1
    cdef object _host_buffer(self, Py_ssize_t input, object value, bint reuse)


# A small numpy input's last bytes and the device array holding them: a call
# whose leaf has the same bytes reuses the array instead of a transfer.
@cython.final
cdef class HostKept:
    # Written as a pair, under the GIL: buffer is copy's device array, or None.
    cdef object copy                   # a private copy of the bytes last seen (np.ndarray), or None
    cdef object buffer                 # the device array of those bytes, or None (not put yet)
    cdef Py_ssize_t misses             # calls whose bytes differed (copies are rarer then)
    cdef bint comparable               # the leaf's memory is contiguous: its bytes can be compared


cdef class Executable:
    cdef readonly Inputs inputs        # how a call's leaves become its inputs
    cdef object execute                # LoadedExecutable.execute_sharded, bound
    cdef readonly list out_handlers    # one jaxlib result handler per flat output
    cdef readonly object out_treedef   # jax's PyTreeDef of the outputs
    # Effects (see _execute_with_tokens): as pxla.ExecuteReplicated runs them.
    cdef bint with_tokens              # run with runtime tokens (the executable has effects)
    cdef tuple ordered_effects         # one token input and output each, ahead of the others
    cdef tuple devices                 # the executable's devices, in its order
    cdef list token_handlers           # identity per ordered effect: its token's arrays
    cdef object token_buffer           # bool[0] on devices[0], made on first need
    cdef object keepalive              # what the host callbacks need kept alive
    cdef bint calls_host               # it runs Python on the host (callbacks, effects)
    cdef bint paced                    # a launch on several CPU devices: see _pace
    # Host leaves in one transfer (core/packing.pyx): the engine counts calls
    # down, then has the variant compiled; it serves once installed.
    cdef readonly object pack_plan     # a packing.PackPlan, or None: its calls never pack
    cdef public Py_ssize_t pack_countdown   # calls left before the variant is compiled; -1: none
    cdef readonly Packed packed        # the variant, once it serves; else None

    # The flat outputs (a list) of one call on its flat leaves, or a HandOff
    # when the library must run it after all (see Inputs.prepare).  With
    # tracing on, launched[0] is stamped once the executable has returned.
    cdef object run(self, object leaves, long long* launched)
    cdef object _execute_with_tokens(self, object buffers)


# When an entry leaves host data and new scalar values to jax.jit's C++ path,
# which converts them faster than this layer (make_executable's calls_before_hand_off).
cdef enum:
    # Never: a front end whose hand-off is its library's Python call
    # (equinox's, flax's) converts them here.
    NEVER_HAND_OFF = -1
    # From the first call: jax.jit compiled the call; small entries leave them to it.
    HAND_OFF_NOW = 0
    # A positive count: this layer converts them for that many calls first (a
    # warm-start load: jax.jit has not compiled the call in this process, and
    # only a long loop repays the compile its first hand-off costs).

# An Executable for `compiled`, compiled for `signature` on the call whose
# flat leaves are `leaves`; raises MustHandOff (fastdispatch._reasons) with why
# the library must run it instead.
cdef Executable make_executable(object compiled, CallSignature signature, list leaves,
                                bint donates, Py_ssize_t calls_before_hand_off)


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
