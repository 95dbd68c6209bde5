# cython: boundscheck=False, wraparound=False
"""The execute layer: an Executable runs one compiled jax executable on a call's
flat leaves, straight through PjRt, and rebuilds the output tree.

    execute_sharded(kept inputs).consume_with_handlers(out handlers) -> unflatten

It is built from the pieces ``_jax.executable_parts`` takes out of a
``jax.stages.Compiled``, and from the call's CallSignature, which says what
each leaf is: arrays go in as they are, typed keys as their physical array,
Python scalars are put on the devices (once per value, for functions that do
not donate).  Whatever it cannot run, ``make_executable`` says why, and jax.jit
runs instead.
"""
import sys
from collections import namedtuple

from cpython.list cimport PyList_GET_ITEM, PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from libc.string cimport memcpy

from fastdispatch._clock cimport now_ns
from fastdispatch._pytree cimport TreeDef, flatten_into
from fastdispatch._signature cimport (
    CallSignature, LeafKey, LeafKind, LEAF_ARRAY, LEAF_HOST, LEAF_KEY, LEAF_SCALAR)
from fastdispatch import _jax

# Executable.run's answer when jax.jit must take the call after all.
DELEGATE = object()

# Distinct Python scalar values an executable keeps on device for reuse.
MAX_REUSED_SCALARS = 64

cdef str _KEY_BUFFER = sys.intern(_jax.KEY_BUFFER_ATTR)
cdef object _put_scalar = _jax.put_scalar
cdef object _consume = _jax.consume_with_handlers
cdef object _RuntimeError = _jax.RUNTIME_ERROR

# How to put one Python scalar input where the executable wants it: its aval,
# its (replicated) sharding, and this process's devices of that sharding.
ScalarInput = namedtuple("ScalarInput", "aval sharding devices")


cdef object _as_jit_error(error):
    # jax.jit's C++ dispatch reports a deleted or donated input as ValueError;
    # executing directly gives PjRt's JaxRuntimeError.  Same message, jax's type
    # (other PjRt errors stay JaxRuntimeError in jax.jit too).
    message = str(error)
    if "Buffer has been deleted or donated" in message:
        return ValueError(message)
    return error


cdef object _scalar_bits(object value):
    # A new int holding the scalar's exact bits (0.0 and -0.0 differ), or None
    # when the value is not worth keeping (complex, an int beyond 64 bits).
    cdef double real
    cdef long long bits
    value_type = type(value)
    if value_type is float:
        real = value
        memcpy(&bits, &real, sizeof(bits))
        return bits
    if value_type is int or value_type is bool:
        try:
            bits = value
        except OverflowError:
            return None
        return bits
    return None


cdef class _Marker:
    # A stand-in leaf, to read the order in which a tree flattens.
    cdef Py_ssize_t index


cdef TreeDef _our_treedef(jax_treedef):
    """Our TreeDef for jax's, or None when the two would not agree exactly
    (a registered type whose constructor refuses stand-in leaves, say)."""
    cdef Py_ssize_t i, n = jax_treedef.num_leaves
    cdef list markers = []
    cdef _Marker marker
    for i in range(n):
        marker = _Marker.__new__(_Marker)
        marker.index = i
        markers.append(marker)
    try:
        tree = jax_treedef.unflatten(markers)
    except Exception:
        return None
    cdef list leaves = []
    cdef TreeDef treedef = flatten_into(tree, leaves)
    if len(leaves) != n:
        return None
    for i in range(n):
        if leaves[i] is not markers[i]:
            return None
    return treedef


cdef class Executable:
    """One compiled executable, ready to run on the flat leaves of calls that
    match the signature it was made for."""

    def __init__(self, *args, **kwargs):
        raise TypeError("Executable is made by the dispatcher, not directly")

    def __dealloc__(self):
        PyMem_Free(self.input_leaf)
        PyMem_Free(self.input_kind)

    cdef object run(self, object leaves, long long* launched):
        outputs = self.run_flat(leaves, launched)
        if outputs is DELEGATE:
            return DELEGATE
        if self.single_output:
            return <object>PyList_GET_ITEM(outputs, 0)
        if self.out_treedef is not None:
            return self.out_treedef.unflatten(outputs)
        return self.jax_out_treedef.unflatten(outputs)

    cdef object run_flat(self, object leaves, long long* launched):
        # leaves: a list or a tuple (PySequence_Fast_ITEMS reads either).
        cdef object buffers   # the leaves themselves (list or tuple), or a new list
        cdef PyObject** items
        cdef object leaf
        cdef Py_ssize_t j
        cdef LeafKind kind
        if self.takes_leaves_as_is:
            buffers = leaves
        else:
            items = PySequence_Fast_ITEMS(leaves)
            buffers = PyList_New(self.num_inputs)
            for j in range(self.num_inputs):
                leaf = <object>items[self.input_leaf[j]]
                kind = self.input_kind[j]
                if kind == LEAF_KEY:
                    leaf = getattr(leaf, _KEY_BUFFER)
                elif kind == LEAF_SCALAR:
                    leaf = self._scalar_buffer(j, leaf)
                    if leaf is None:
                        return DELEGATE
                Py_INCREF(leaf)
                PyList_SET_ITEM(buffers, j, leaf)
        try:
            outputs = _consume(self.execute(buffers), self.out_handlers)
        except _RuntimeError as error:
            raise _as_jit_error(error)
        if launched != NULL:
            launched[0] = now_ns()
        return outputs

    cdef object _scalar_buffer(self, Py_ssize_t input, object value):
        """A device array for a Python scalar input, or None if it won't convert.

        Constants (a learning rate passed every step) are converted once and
        reused: arrays are immutable, unless donated, so functions that donate
        convert every time.  Reuse is keyed by the value's bits, never by the
        caller's object, so that no argument outlives its call."""
        key = _scalar_bits(value) if self.reuse_scalar_buffers else None
        if key is not None:
            key = (input, key)
            found = self.scalar_buffers.get(key)
            if found is not None:
                return found
        spec = self.scalar_inputs[input]
        try:
            buffer = _put_scalar(value, spec.aval, spec.sharding, spec.devices)
        except (OverflowError, TypeError, ValueError):
            return None
        if key is not None and len(self.scalar_buffers) < MAX_REUSED_SCALARS:
            self.scalar_buffers[key] = buffer
        return buffer


cdef object make_executable(object compiled, CallSignature signature, list leaves, bint donates):
    if compiled.in_tree.num_leaves != signature.num_leaves:
        # Never expected: our flattening of the arguments must be jax's.
        return "arguments flatten differently from jax"
    parts = _jax.executable_parts(compiled)
    if isinstance(parts, str):
        return parts
    cdef Py_ssize_t j, index, n = len(parts.kept)
    cdef LeafKey* key
    scalar_inputs = []
    for j in range(n):
        index = parts.kept[j]
        key = &signature.keys[index]
        expected = parts.in_shardings[j]
        if key.kind == LEAF_HOST:
            return "numpy arguments"
        if key.kind == LEAF_SCALAR:
            # One device or several, this process's or a global mesh's:
            # the value goes on each of this process's devices, as jax puts it.
            devices = _jax.scalar_devices(expected)
            if isinstance(devices, str):
                return devices
            scalar_inputs.append(ScalarInput(parts.in_avals[j], expected, devices))
            continue
        scalar_inputs.append(None)
        leaf = leaves[index]
        actual = leaf.sharding
        if actual is not expected and not (
                actual == expected or actual.is_equivalent_to(expected, leaf.ndim)):
            return "argument must be resharded"

    cdef Executable executable = Executable.__new__(Executable)
    executable.num_inputs = n
    executable.input_leaf = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    executable.input_kind = <LeafKind*>PyMem_Malloc((n + 1) * sizeof(LeafKind))
    if executable.input_leaf == NULL or executable.input_kind == NULL:
        raise MemoryError()
    executable.takes_leaves_as_is = n == signature.num_leaves
    for j in range(n):
        index = parts.kept[j]
        executable.input_leaf[j] = index
        executable.input_kind[j] = signature.keys[index].kind
        executable.takes_leaves_as_is &= executable.input_kind[j] == LEAF_ARRAY
    executable.scalar_inputs = tuple(scalar_inputs)
    executable.scalar_buffers = {}
    executable.reuse_scalar_buffers = not donates
    executable.execute = parts.execute
    executable.out_handlers = parts.out_handlers
    executable.jax_out_treedef = parts.out_treedef
    executable.out_treedef = _our_treedef(parts.out_treedef)
    executable.single_output = (executable.out_treedef is not None
                                and executable.out_treedef.num_nodes == 1
                                and executable.out_treedef.num_leaves == 1)
    return executable
