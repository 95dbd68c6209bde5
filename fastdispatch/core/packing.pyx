# cython: boundscheck=False, wraparound=False
"""Host leaves in one transfer: a packed variant of an entry's executable.

On an accelerator every host-to-device transfer costs tens of microseconds
however small its data (about 45 on a TPU v5e's host), and jax.jit makes one
per numpy leaf and per new Python scalar on every call.  An entry whose calls
bring two or more such leaves, on one device, gets a second executable after
PACK_AFTER_CALLS calls: compiled in a thread beside the program from the
call's own jaxpr (jax.jit's trace of it, cached), it takes those leaves'
bytes as one uint8 array and slices and bitcasts them back on the device.
Its calls then make one transfer where jax.jit makes one per leaf.

    plan (make_executable) -> start (the PACK_AFTER_CALLS-th call)
        -> compile in the background -> Packed.run on later calls

The variant serves only where its results are the entry's: equal output
avals (weak types included), shardings and committedness, checked once it is
compiled; else it is dropped.  Never for a function that donates or has
effects, a leaf jax casts (jax.jit's C++ casts it faster), more than
PACK_MAX_BYTES a call, nor on the CPU, where a transfer costs a few
microseconds and jax.jit's C++ converts a leaf faster than packing would
(PACKED_PLATFORMS).

The compiling thread is not a daemon: Python waits for it at exit.  A daemon
one, still compiling when the program ended, took the GIL back after Python
had begun to finalize, and Python's thread exit, unwinding jaxlib's C++
frames, aborted the process (SIGABRT after the program's output, on a TPU).
"""
import threading
from collections import namedtuple

cimport numpy as cnp
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.string cimport memcpy

from fastdispatch.core.signature cimport int_fits

import jax
import numpy as np

from fastdispatch import _jax

cnp.import_array()

# Where a transfer costs enough for one per call to pay for a second compile.
PACKED_PLATFORMS = frozenset({"tpu", "gpu", "cuda", "rocm"})
# Calls of an entry before its variant is compiled: a loop, not a one-off call.
PACK_AFTER_CALLS = 16
# The most bytes a call's packed leaves take: a transfer's fixed cost is what
# packing saves, and larger data costs its copy into the pack besides.
PACK_MAX_BYTES = 1 << 20
# dtype kinds whose bytes bitcast back on the device: bool, ints, floats
# (ml_dtypes' bfloat16 is numpy kind "V": named).
_PACKED_KINDS = frozenset("biuf")
_PACKED_NAMES = frozenset({"bfloat16"})

cdef object _batched_device_put = _jax.batched_device_put
cdef object _consume = _jax.consume_with_handlers
cdef object _host_transfer_guard = _jax.host_transfer_guard
cdef str _KEY_BUFFER = _jax.KEY_BUFFER_ATTR
cdef object _UINT8 = np.dtype(np.uint8)

# One packed leaf: its flat index, where its bytes go, its dtype (numpy's, the
# device's: never one jax casts, see plan), its shape and weak type, and
# whether it is a Python scalar.
Slot = namedtuple("Slot", "leaf offset nbytes dtype shape weak_type scalar")

# What make_executable knows of an entry that may pack: its slots and their
# bytes, the other leaves (index, the sharding its executable expects or None
# where it does not keep it, whether a typed key), the indexes of the host
# leaves it does not keep, the device and its sharding, and the entry's output
# description (_jax.output_description).
PackPlan = namedtuple("PackPlan", "slots num_bytes others unkept_host device sharding num_leaves description")

# Compiles running now, for wait_for_packing.
cdef set _running = set()
cdef object _running_lock = threading.Lock()
# .compiling: this thread compiles a variant (--trace leaves it out: not the program's).
cdef object _local = threading.local()


def packable_dtype(dtype) -> bool:
    """Whether a host leaf of this (device) dtype packs: its bytes bitcast back."""
    dtype = np.dtype(dtype)
    return dtype.kind in _PACKED_KINDS or dtype.name in _PACKED_NAMES


def plan(host, others, unkept_host, device, sharding, num_leaves, description):
    """A PackPlan from make_executable's reading of an entry, or None where
    packing does not pay or cannot keep jax.jit's results: ``host`` lists the
    kept host leaves as (leaf index, aval, is a Python scalar, cast)."""
    if len(host) < 2 or device.platform not in PACKED_PLATFORMS:
        return None
    slots = []
    cdef Py_ssize_t offset = 0
    for leaf, aval, scalar, cast in host:
        if cast or not packable_dtype(aval.dtype):
            # A cast leaf (float64 with x64 off): jax.jit's C++ casts it faster
            # than jax's Python cast here (measured on a TPU host: 1.05x).
            return None
        dtype = np.dtype(aval.dtype)
        nbytes = dtype.itemsize * int(np.prod(aval.shape, dtype=np.int64))
        slots.append(Slot(leaf, offset, nbytes, dtype, tuple(aval.shape), aval.weak_type, scalar))
        offset += nbytes
    if offset > PACK_MAX_BYTES:
        return None
    return PackPlan(tuple(slots), offset, tuple(others), tuple(unkept_host), device, sharding, num_leaves,
                    description)


def unpacking_function(closed_jaxpr, pack_plan):
    """The variant's Python function: (packed bytes, the other leaves) -> the
    flat outputs of ``closed_jaxpr`` (the call's jaxpr, its inputs the flat leaves)."""
    def packed_call(packed, *others):
        values = [None] * pack_plan.num_leaves
        for (leaf, _, _), value in zip(pack_plan.others, others):
            values[leaf] = value
        for slot in pack_plan.slots:
            values[slot.leaf] = _unpack(packed, slot)
        for leaf in pack_plan.unkept_host:
            aval = closed_jaxpr.in_avals[leaf]
            values[leaf] = jax.numpy.zeros(aval.shape, aval.dtype)   # unread: the jaxpr drops it
        return jax.core.eval_jaxpr(closed_jaxpr.jaxpr, closed_jaxpr.consts, *values)
    return packed_call


def _unpack(packed, slot):
    """One leaf's value from its bytes, as the jaxpr's input (dtype, shape, weak type)."""
    raw = jax.lax.slice(packed, (slot.offset,), (slot.offset + slot.nbytes,))
    if slot.dtype.kind == "b":
        value = raw != 0
    elif slot.dtype.itemsize == 1:
        value = jax.lax.bitcast_convert_type(raw, slot.dtype)
    else:
        rows = raw.reshape(slot.nbytes // slot.dtype.itemsize, slot.dtype.itemsize)
        value = jax.lax.bitcast_convert_type(rows, slot.dtype)
    value = value.reshape(slot.shape)
    return _jax.weakly_typed(value) if slot.weak_type else value


def compile_variant(traced, pack_plan):
    """The variant's Packed for ``traced`` (jax.jit's trace of the entry's
    call), or None where its results would not be the entry's."""
    closed = traced.jaxpr
    committed = pack_plan.description[0]
    if len(closed.in_avals) != pack_plan.num_leaves:
        return None
    specs = [jax.ShapeDtypeStruct((pack_plan.num_bytes,), np.uint8)]
    for leaf, expected, _ in pack_plan.others:
        aval = closed.in_avals[leaf]
        sharding = expected if committed and expected is not None else None
        specs.append(
            jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type, sharding=sharding))
    compiled = jax.jit(unpacking_function(closed, pack_plan)).lower(*specs).compile()
    try:
        parts = _jax.executable_parts(compiled)
    except Exception:
        return None
    if parts.with_tokens or parts.kept[:1] != (0,):
        return None
    if _jax.output_description(compiled) != pack_plan.description:
        return None   # its results would not be the entry's
    for k, expected in zip(parts.kept[1:], parts.in_shardings[1:]):
        wanted = pack_plan.others[k - 1][1]
        if wanted is None or not (expected == wanted):
            return None
    cdef Packed packed = Packed.__new__(Packed)
    packed.execute = parts.execute
    packed.out_handlers = parts.out_handlers
    packed.slots = pack_plan.slots
    packed.other_leaf = tuple([pack_plan.others[k - 1][0] for k in parts.kept[1:]])
    packed.other_is_key = tuple([pack_plan.others[k - 1][2] for k in parts.kept[1:]])
    packed.num_bytes = pack_plan.num_bytes
    packed.aval = _jax.host_array_aval(_UINT8, (pack_plan.num_bytes,))
    packed.sharding = pack_plan.sharding
    packed.devices = [pack_plan.device]
    return packed


def start(traced, pack_plan, install):
    """Compile the variant in a thread beside the program; ``install(packed)``
    once it serves (never called when it would not)."""
    def compile_and_install():
        _local.compiling = True
        try:
            packed = compile_variant(traced, pack_plan)
            if packed is not None:
                install(packed)
        except Exception:
            pass   # the entry stays as it was: its calls run its own way
        finally:
            with _running_lock:
                _running.discard(thread)
    thread = threading.Thread(target=compile_and_install, name="fastdispatch-pack", daemon=False)
    with _running_lock:
        _running.add(thread)
    thread.start()


def compiling_here() -> bool:
    """Whether this thread is compiling a packed variant, beside the program."""
    return getattr(_local, "compiling", False)


def wait_for_packing(timeout=None):
    """Wait for the variants being compiled now (tests, benches)."""
    with _running_lock:
        threads = list(_running)
    for thread in threads:
        thread.join(timeout)


cdef class Packed:
    """The packed variant of one executable (see the module's docstring)."""

    def __init__(self, *args, **kwargs):
        raise TypeError("Packed is made by compile_variant, not directly")

    cdef object run(self, object leaves):
        guard = _host_transfer_guard()
        if not (guard is None or guard == "allow"):
            return None   # each leaf's transfer must meet the guard: the entry's way
        cdef PyObject** items = PySequence_Fast_ITEMS(leaves)
        cdef cnp.ndarray packed = np.empty(self.num_bytes, _UINT8)
        cdef char* base = <char*>cnp.PyArray_DATA(packed)
        cdef cnp.ndarray array
        cdef Py_ssize_t i
        for slot in self.slots:
            value = <object>items[<Py_ssize_t>slot.leaf]
            if slot.scalar:
                if type(value) is int and not int_fits(value, 8 * slot.dtype.itemsize):
                    return None   # jax raises its OverflowError
                array = np.asarray(value, slot.dtype)
            else:
                array = np.ascontiguousarray(value)
            if cnp.PyArray_NBYTES(array) != slot.nbytes:
                return None
            memcpy(base + <Py_ssize_t>slot.offset, cnp.PyArray_DATA(array), <size_t>slot.nbytes)
        try:
            device_packed = _batched_device_put(self.aval, self.sharding, [packed], self.devices, False)
        except Exception:
            return None
        cdef Py_ssize_t n = len(self.other_leaf)
        cdef list inputs = PyList_New(n + 1)
        Py_INCREF(device_packed)
        PyList_SET_ITEM(inputs, 0, device_packed)
        for i in range(n):
            leaf = <object>items[<Py_ssize_t>(<object>PyTuple_GET_ITEM(self.other_leaf, i))]
            if <object>PyTuple_GET_ITEM(self.other_is_key, i):
                leaf = getattr(leaf, _KEY_BUFFER)
            Py_INCREF(leaf)
            PyList_SET_ITEM(inputs, i + 1, leaf)
        return _consume(self.execute(inputs), self.out_handlers)
