# cython: boundscheck=False, wraparound=False
"""fastdispatch.device_put: ``jax.device_put(x)`` and ``jax.device_put(x, device)``
for pytrees of numpy arrays, Python and numpy scalars and jax arrays.

The ``device_put`` of jax's old C++ dispatcher (``jax_jit.cc``), over a
pytree: each host leaf goes to jaxlib's C++ conversion (``batched_device_put``,
as jax.jit converts its arguments) with the aval jax gives it, cached by type,
dtype, shape and x64; jax's own ``device_put`` (~110 us for 8 small arrays) spends most of its time in
Python around that same call.  Results are jax.device_put's: dtype (64-bit
squashed when x64 is off), weak type, sharding, committed exactly when a
device is given, and numpy memory aliased, not copied, as jax does on CPU.
Whatever is not plain host data or an array left where it is (a typed key, a
committed move, an unusual dtype, a value that does not convert) goes to
jax.device_put, leaf by leaf, so it also raises jax's errors.
"""
import jax

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.float cimport FLT_MAX
from libc.math cimport fabs, isinf

from fastdispatch.core.engine cimport trace_state_clean
from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport (
    LeafKind, LEAF_ARRAY, LEAF_HOST, LEAF_SCALAR, classify_leaf, int_fits, plain_host_value)
from fastdispatch import _jax

# Read once per leaf: bound here.  The rest is read through _jax once per call.
cdef object _batched_device_put = _jax.batched_device_put
cdef object _canonicalize_host = _jax.canonicalize_host
cdef object _jax_device_put = jax.device_put


# device -> its SingleDeviceSharding, or None for a device of another process.
cdef dict _shardings = {}
# (type, dtype, shape, x64) or (Python scalar type, x64) -> the aval jax gives such a
# value (False: jax puts it).  Avals are interned by jax: the cache only saves the making.
cdef dict _avals = {}
# Bounds _avals: shapes vary without end in some programs.
MAX_AVALS = 4096


cdef object _sharding_of(object device):
    found = _shardings.get(device, _shardings)
    if found is not _shardings:
        return found
    sharding = None
    if device.process_index == jax.process_index():
        sharding = jax.sharding.SingleDeviceSharding(device)
    _shardings[device] = sharding
    return sharding


cdef object _scalar_aval(object leaf, bint x64):
    """The aval jax.device_put gives a Python scalar, or None when jax must put
    it: a float beyond float32's range with x64 off, which jax casts with
    numpy's overflow warning."""
    cdef double real, imag
    leaf_type = type(leaf)
    if not x64 and (leaf_type is float or leaf_type is complex):
        real = leaf.real
        imag = leaf.imag
        if _beyond_float32(real) or _beyond_float32(imag):
            return None
    key = (leaf_type, x64)
    aval = _avals.get(key)
    if aval is None:
        # Every value of a Python scalar type has one aval (an int's range
        # is checked by the conversion itself).
        aval = _jax.python_scalar_aval(leaf_type(0) if leaf_type is not bool else False)
        _avals[key] = aval
    return aval


cdef inline bint _beyond_float32(double value):
    return value == value and not isinf(value) and fabs(value) > FLT_MAX


cdef object _array_aval(object leaf, bint x64):
    """The aval jax.device_put gives a numpy array or scalar, or None when jax
    must put it (a subclass, an unusual dtype).  Decided once per type, dtype
    and shape."""
    key = (type(leaf), leaf.dtype, leaf.shape, x64)
    aval = _avals.get(key)
    if aval is None:
        aval = _jax.host_array_aval(leaf.dtype, leaf.shape) if plain_host_value(leaf) else False
        if len(_avals) >= MAX_AVALS:
            _avals.clear()
        _avals[key] = aval
    return aval if aval is not False else None


cdef bint _jax_puts_first(list leaves, bint x64) except -1:
    """Whether jax.device_put must take the whole tree: it gives every leaf its
    aval before it transfers any, so a leaf it refuses (a Python int beyond
    the int range, a value of no jax type) raises its error before another
    leaf's transfer could warn or fail; leaf by leaf, ours would not."""
    cdef LeafKind kind
    for leaf in leaves:
        kind = classify_leaf(leaf)
        if kind > LEAF_HOST:
            return True
        if kind == LEAF_SCALAR and type(leaf) is int and not int_fits(leaf, 64 if x64 else 32):
            return True
    return False


cdef list put_leaves(list leaves, object device, object target, object sharding, bint committed):
    # Each host leaf: jaxlib's batched_device_put, as _jax.put_host calls it.
    cdef Py_ssize_t i, n = PyList_GET_SIZE(leaves)
    cdef list out = PyList_New(n)
    cdef LeafKind kind
    cdef bint x64 = _jax.x64_enabled()
    cdef object leaf, put, aval
    cdef list devices = [target]
    for i in range(n):
        leaf = <object>PyList_GET_ITEM(leaves, i)
        kind = classify_leaf(leaf)
        put = None
        if kind == LEAF_ARRAY and not committed:
            # jax.device_put(x) returns an array it is given as it is, wherever it lies.
            put = leaf
        elif kind == LEAF_HOST or kind == LEAF_SCALAR:
            aval = _array_aval(leaf, x64) if kind == LEAF_HOST else _scalar_aval(leaf, x64)
            if aval is not None:
                try:
                    if kind == LEAF_HOST and leaf.dtype is not aval.dtype and leaf.dtype != aval.dtype:
                        leaf = _canonicalize_host(leaf)   # x64 off: 64 bits to 32, as jax casts
                    put = _batched_device_put(aval, sharding, [leaf], devices, committed)
                except Exception:
                    put = None   # jax.device_put raises its own error, or converts
                    leaf = <object>PyList_GET_ITEM(leaves, i)
        if put is None:
            put = _jax_device_put(leaf) if device is None else _jax_device_put(leaf, device)
        Py_INCREF(put)
        PyList_SET_ITEM(out, i, put)
    return out


def device_put(x, device=None):
    """``jax.device_put(x, device)``, faster on host data.

    ``x`` is a pytree of numpy arrays, Python and numpy scalars and jax arrays;
    ``device`` a ``jax.Device`` or None (jax's default device, uncommitted).
    Results are exactly jax.device_put's.  A sharding, or any other ``device``,
    goes to jax.device_put whole."""
    if device is not None and not isinstance(device, jax.Device):
        return _jax_device_put(x, device)
    if not trace_state_clean():
        return _jax_device_put(x, device)   # under a transformation jax stages it
    cdef bint committed = device is not None
    target = device if committed else _jax.default_device()
    sharding = _sharding_of(target)
    if sharding is None:
        return _jax_device_put(x, device)
    cdef list leaves = []
    cdef TreeDef treedef = flatten_into(x, leaves)
    if _jax_puts_first(leaves, _jax.x64_enabled()):
        return _jax_device_put(x, device)
    guard = _jax.host_transfer_guard()
    if guard is None or guard == "allow":
        out = put_leaves(leaves, device, target, sharding, committed)
    else:
        # A transfer guard is set: the puts are explicit ones, as jax.device_put's.
        with _jax.explicit_put_scope():
            out = put_leaves(leaves, device, target, sharding, committed)
    return treedef.unflatten(out)
