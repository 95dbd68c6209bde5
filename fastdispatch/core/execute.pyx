# cython: boundscheck=False, wraparound=False
"""The execute layer: an Executable runs one compiled jax executable on a call's
flat leaves, straight through PjRt, and returns its flat outputs; the entry's
Outputs rebuild the call's result from them.

    Inputs.prepare(leaves) -> execute_sharded(kept inputs)
        -> consume_with_handlers(out handlers)

It is built from the pieces ``_jax.executable_parts`` takes out of a
``jax.stages.Compiled``, and from the call's CallSignature, which says what
each leaf is: arrays go in as they are, typed keys as their physical array,
Python scalars are put on the device (once per value, for functions that do
not donate), numpy values are put on the device on every call where that
beats the caller's hand-off (jax.jit converts a small call's host data
faster).  Effects run as ``pxla.ExecuteReplicated``
runs them, with jax's runtime tokens.  Whatever it cannot run,
``make_executable`` raises MustHandOff for, and the library runs instead.
"""
import sys
from collections import deque, namedtuple

cimport numpy as cnp
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.list cimport PyList_GET_ITEM, PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.string cimport memcmp, memcpy

from fastdispatch.core.clock cimport now_ns
from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport (
    CallSignature, LeafKey, LeafKind, LEAF_ARRAY, LEAF_HOST, LEAF_KEY, LEAF_SCALAR, int_fits,
    plain_host_value)
import numpy as np

from fastdispatch import _jax, _reasons
from fastdispatch._reasons import MustHandOff
from fastdispatch.core import packing

cnp.import_array()

# Distinct values an executable keeps on device per Python scalar input.
MAX_REUSED_SCALARS = 64

# A numpy input of at most this many bytes whose bytes are the previous call's
# (a mask, an eval batch, a constant passed every step) reuses the device array
# that holds them: no transfer, where jax.jit makes one on every call (about
# 50 us each on a TPU v5e's host).  Comparing 64 KiB costs a few us.
HOST_REUSE_MAX_BYTES = 1 << 16
# A numpy input whose bytes keep changing (a new batch each step) is copied
# for the next call's comparison on its first HOST_COPIED_MISSES calls, then
# only every HOST_RECHECK_CALLS-th: what it costs is one failed comparison.
HOST_COPIED_MISSES = 8
HOST_RECHECK_CALLS = 64

cdef str _HOST_DATA = _reasons.HOST_DATA

# Converting host data ourselves (jaxlib batched_device_put, ~2.3 us: most of it
# building the Python jax Array) costs more than jax.jit's C++ conversion
# (~1 us a numpy array or Python scalar, no Python object built), and a dtype
# jax casts costs its cast once more (~1.5 us); our dispatch saves ~0.1 to 0.35
# us per array leaf, the most in trees of dicts.  A hand-off costs ~0.1 us (it
# is decided before flattening), so an entry converts host data itself only
# beside at least HOST_BREAK_EVEN_LEAVES array leaves per numpy leaf (twice that
# per leaf it casts) and NEW_SCALAR_BREAK_EVEN_LEAVES per new scalar value:
# measured on TrainState steps and param dicts (docs/performance.md).
HOST_BREAK_EVEN_LEAVES = 8
NEW_SCALAR_BREAK_EVEN_LEAVES = 16

cdef str _KEY_BUFFER = sys.intern(_jax.KEY_BUFFER_ATTR)
# jaxlib's own conversion, as _jax.put_host calls it (without its Python frame).
cdef object _batched_device_put = _jax.batched_device_put
cdef object _canonicalize_host = _jax.canonicalize_host
cdef object _consume = _jax.consume_with_handlers
cdef object _RuntimeError = _jax.RUNTIME_ERROR
cdef object _ARRAY = _jax.ARRAY_TYPE
cdef object _KEY_ARRAY = _jax.KEY_ARRAY_TYPE
cdef object _host_transfer_guard = _jax.host_transfer_guard
cdef object _runtime_tokens = _jax.runtime_tokens
cdef object _fresh_token_buffer = _jax.fresh_token_buffer
cdef object _Token = _jax.TOKEN_TYPE
cdef object _ALLOW = "allow"

# How to put one host value (a Python scalar, a numpy value) where the executable
# wants it: batched_device_put's aval, its replicated sharding, this process's
# devices of that sharding (one, or several: the value goes on each, as jax's
# own shard_args puts a replicated value), and whether a numpy value's dtype is
# one jax casts (float64 to float32, int64 to int32 with x64 off).
HostInput = namedtuple("HostInput", "aval sharding devices cast")


cdef object _put_host(object spec, object value):
    """A jax Array of ``value`` where ``spec`` (a HostInput) says, or None when it
    does not convert (an int too large for int32, a transfer the guard disallows)."""
    if spec.cast:
        # Cast here, by jax's own canonicalize_value, with numpy's overflow
        # warning at the caller's line as jax.jit gives it.  Not left to
        # batched_device_put (nor to jax.jit's C++ path), which cast too but
        # crash the process where a filter makes that warning an error: here
        # it is raised to the caller, as jax.jit's first call raises it.
        value = _canonicalize_host(value)
    try:
        return _batched_device_put(spec.aval, spec.sharding, [value] * len(spec.devices),
                                   spec.devices, False)
    except Exception:
        return None


# How many launches of executables on several CPU devices may be left running
# behind the caller (see _pace).
MAX_CPU_LAUNCHES_AHEAD = 8

# The runtime tokens of the latest such launches, oldest first: one queue for
# every executable, as the devices' limit is shared.
cdef object _cpu_launches = deque()


cdef inline void _pace(object token):
    """Keep the caller at most MAX_CPU_LAUNCHES_AHEAD launches ahead of the CPU
    devices: wait for the oldest launch once there are more.

    XLA's CPU client launches a program on several devices from its own thread
    pool, one task per device, and a device takes at most 32 computations in
    flight (max_inflight_computations_per_device): a launch task past that
    blocks its pool thread until one finishes.  The pool has as many threads
    as devices, and a program with collectives holds one thread per device in
    its rendezvous until all have arrived; with one thread blocked in a launch,
    the rendezvous never completes and XLA aborts the process ("Termination
    timeout for all reduce ... only 7 of them arrived").  jax.jit does not
    guard against it (a device-bound jax.jit loop aborts the same way); a
    caller whose dispatch is fast gets 32 launches ahead easily."""
    _cpu_launches.append(token)
    if len(_cpu_launches) > MAX_CPU_LAUNCHES_AHEAD:
        oldest = _cpu_launches.popleft()
        try:
            oldest.block_until_ready()
        except Exception:
            pass   # the launch's own outputs carry its error to whoever reads them


cdef class HandOff:
    """Executable.run's answer when the library must take the call after all."""

    def __init__(self, str reason):
        self.reason = reason

    def __repr__(self):
        return f"HandOff({self.reason!r})"


# A host value that does not convert (an int too large for int32, a transfer
# the guard disallows): jax.jit raises its own error.
cdef HandOff _NO_CONVERSION = HandOff(_reasons.SCALAR_CONVERSION)
# A Python scalar value not seen before, on an entry too small to gain from
# converting it here: jax.jit converts it faster.
cdef HandOff _NEW_SCALAR = HandOff(_reasons.NEW_SCALAR)
# Numpy values, likewise (an entry that converted them for its first calls).
cdef HandOff _HOST_HAND_OFF = HandOff(_HOST_DATA)


# An input array deleted (``.delete()``, or donated to an earlier call): the
# library raises its own error for it (jax.jit: "Array has been deleted ...";
# for a donated one, the error the launch gave), before anything runs.
cdef HandOff _DELETED_INPUT = HandOff(_reasons.DELETED_INPUT)


cdef bint _any_deleted(object leaves) except -1:
    for leaf in leaves:
        if (type(leaf) is _ARRAY or type(leaf) is _KEY_ARRAY) and leaf.is_deleted():
            return True
    return False


cdef HandOff _launch_failed(object error, object leaves, bint with_tokens):
    """A launch on ``leaves`` raised ``error``: _DELETED_INPUT where an input was
    deleted, else jax.jit's error for it, raised."""
    if _any_deleted(leaves):
        return _DELETED_INPUT
    # Executing directly, PjRt raises JaxRuntimeError.  jax.jit's C++ fast path
    # reports an execution error as ValueError, same message (a deleted or
    # donated input, a host callback that raised); its Python path, which runs
    # executables with effects, lets the JaxRuntimeError through.
    if with_tokens:
        raise error
    raise ValueError(str(error))


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


def _identity(arrays):
    # An ordered effect's token handler: its per-device arrays, as they come.
    return arrays


cdef class Inputs:
    """How the flat leaves of a call become an executable's kept inputs:
    arrays as they are, typed keys as their physical array, Python scalars and
    numpy values put on the device (scalars once per value, where allowed)."""

    def __init__(self, *args, **kwargs):
        raise TypeError("Inputs are made with their Executable, not directly")

    def __dealloc__(self):
        PyMem_Free(self.input_leaf)
        PyMem_Free(self.input_kind)

    cdef object prepare(self, object leaves):
        # leaves: a list or a tuple (PySequence_Fast_ITEMS reads either).
        cdef PyObject** items = PySequence_Fast_ITEMS(leaves)
        cdef object leaf
        cdef Py_ssize_t j
        cdef LeafKind kind
        cdef bint reuse = False
        if self.host_hand_off and not self.host_repeats(items):
            return _HOST_HAND_OFF
        if self.has_scalars or self.reuse_host_buffers:
            # A device array made earlier is reused only where no transfer
            # guard is set: under one, each call's transfer must meet it.
            guard = _host_transfer_guard()
            reuse = guard is None or guard == _ALLOW
        cdef list buffers = PyList_New(self.num_inputs)
        for j in range(self.num_inputs):
            leaf = <object>items[self.input_leaf[j]]
            kind = self.input_kind[j]
            if kind == LEAF_KEY:
                leaf = getattr(leaf, _KEY_BUFFER)
            elif kind == LEAF_SCALAR:
                leaf = self._scalar_buffer(j, leaf, reuse and self.reuse_scalar_buffers)
                if type(leaf) is HandOff:
                    return leaf
            elif kind == LEAF_HOST:
                leaf = self._host_buffer(j, leaf, reuse)
                if leaf is None:
                    return _NO_CONVERSION
            Py_INCREF(leaf)
            PyList_SET_ITEM(buffers, j, leaf)
        if self.calls_before_hand_off > 0:
            self.calls_before_hand_off -= 1
            if self.calls_before_hand_off == 0:   # this call was the last converted here
                self.new_scalars_hand_off = self.later_scalars_hand_off
                self.host_hand_off = self.later_host_hand_off
        return buffers

    cdef bint new_scalar_in(self, PyObject** leaves):
        cdef Py_ssize_t j
        for j in range(self.num_inputs):
            if self.input_kind[j] == LEAF_SCALAR and self._is_new(
                    j, _scalar_bits(<object>leaves[self.input_leaf[j]])):
                return True
        return False

    cdef bint _is_new(self, Py_ssize_t input, object bits):
        """A value of this scalar input neither kept on device nor the one the
        previous call brought; it is the one now.  A value that comes twice in
        a row is a constant (a learning rate): converted and kept from its
        second call.  A step counter never comes back."""
        if bits is None:
            return True
        if bits in <dict>PyTuple_GET_ITEM(self.scalar_buffers, input):
            return False
        if <object>PyList_GET_ITEM(self.last_scalars, input) == bits:
            return False
        Py_INCREF(bits)
        Py_DECREF(<object>PyList_GET_ITEM(self.last_scalars, input))
        PyList_SET_ITEM(self.last_scalars, input, bits)
        return True

    cdef object _scalar_buffer(self, Py_ssize_t input, object value, bint reuse):
        """A device array for a Python scalar input, or a HandOff.

        Constants (a learning rate passed every step) are converted once and
        reused: arrays are immutable, unless donated, so functions that donate
        convert every time.  Reuse is keyed by the value's bits, never by the
        caller's object, so that no argument outlives its call."""
        cdef dict kept = <dict>PyTuple_GET_ITEM(self.scalar_buffers, input)
        bits = _scalar_bits(value)
        if reuse and bits is not None:
            found = kept.get(bits)
            if found is not None:
                return found
        if self.new_scalars_hand_off and (not reuse or self._is_new(input, bits)):
            return _NEW_SCALAR
        spec = <object>PyTuple_GET_ITEM(self.host_inputs, input)
        if type(value) is int and not int_fits(value, 8 * spec.aval.dtype.itemsize):
            return _NO_CONVERSION   # jax raises its OverflowError; no transfer tried
        buffer = _put_host(spec, value)
        if buffer is None:
            return _NO_CONVERSION
        if reuse and bits is not None and len(kept) < MAX_REUSED_SCALARS:
            kept[bits] = buffer
        return buffer

    cdef bint host_repeats(self, PyObject** leaves) except -1:
        """Whether every numpy leaf holds the bytes last seen on its input (a
        device array of them kept, or made once now): then the call runs here
        with no transfer, where jax.jit would make one per leaf.  A leaf whose
        bytes changed is copied to compare the next call's with (see
        _host_buffer's policy for bytes that keep changing).  Never under a
        transfer guard: each call's transfers must meet it."""
        cdef Py_ssize_t j
        cdef HostKept kept
        cdef object value
        cdef int same
        cdef bint repeats = True
        if not self.reuse_host_buffers:
            return False
        for j in range(self.num_inputs):
            if self.input_kind[j] != LEAF_HOST:
                continue
            kept = <HostKept>PyTuple_GET_ITEM(self.host_kept, j)
            if kept is None:
                return False
            value = <object>leaves[self.input_leaf[j]]
            same = _same_bytes(kept, value)
            if same == 0:
                _missed(kept, value)   # each leaf's bytes, for the next call
            repeats &= same == 1
        if not repeats:
            return False
        guard = _host_transfer_guard()   # asked last: a hand-off never pays for it
        return guard is None or guard == _ALLOW

    def kept_host_arrays(self):
        """The device array kept for each numpy input (None: none kept now, or
        the input is not compared), in input order: what a call whose bytes
        repeat reuses."""
        return [None if kept is None else (<HostKept>kept).buffer
                for j, kept in enumerate(self.host_kept) if self.input_kind[j] == LEAF_HOST]

    cdef object _host_buffer(self, Py_ssize_t input, object value, bint reuse):
        """A device array of a numpy input's bytes, or None when it does not
        convert.  numpy memory is mutable: the bytes are compared, never the
        caller's object kept, and the array kept is made from a private copy
        (on the CPU a device array may alias the host memory it came from)."""
        spec = <object>PyTuple_GET_ITEM(self.host_inputs, input)
        cdef HostKept kept = <HostKept>PyTuple_GET_ITEM(self.host_kept, input)
        if kept is None or not reuse:
            return _put_host(spec, value)
        cdef int same = _same_bytes(kept, value)
        if same == 1:
            buffer = kept.buffer   # read with the comparison, the GIL held: the pair is one
            if buffer is not None and not buffer.is_deleted():
                return buffer
        elif same == 0:
            if not _missed(kept, value):
                return _put_host(spec, value)
        else:
            return _put_host(spec, value)   # not contiguous: never compared
        copy = kept.copy
        buffer = _put_host(spec, copy)   # the transfer lets other threads run
        if buffer is not None and kept.copy is copy:
            kept.buffer = buffer   # still the bytes it holds: kept for the next call
        return buffer


cdef bint _missed(HostKept kept, object value) except -1:
    """``value``'s bytes differ from those kept: copy them, to compare the next
    call's with, while they have changed at most HOST_COPIED_MISSES times, and
    then every HOST_RECHECK_CALLS-th time (else forget them); whether copied."""
    kept.misses += 1
    kept.buffer = None
    if kept.misses > HOST_COPIED_MISSES and kept.misses % HOST_RECHECK_CALLS:
        kept.copy = None
        return False
    kept.copy = np.array(value, order="C", copy=True)
    return True


cdef int _same_bytes(HostKept kept, object value) except -2:
    """1: ``value`` holds the bytes of ``kept.copy`` (its dtype and shape are the
    signature's: equal bytes are equal values); 0: it does not, or nothing is
    kept yet; -1: its memory is not C-contiguous, so it is never compared (a
    byte compare of a transposed array could match a copy of other values)."""
    cdef Py_buffer mine, theirs
    if not kept.comparable:
        return -1
    if kept.copy is None:
        return 0
    if type(value) is np.ndarray:
        if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>value):
            kept.comparable = False
            return -1
        PyObject_GetBuffer(kept.copy, &mine, PyBUF_C_CONTIGUOUS)
        try:
            return (cnp.PyArray_NBYTES(<cnp.ndarray>value) == mine.len
                    and memcmp(cnp.PyArray_DATA(<cnp.ndarray>value), mine.buf, mine.len) == 0)
        finally:
            PyBuffer_Release(&mine)
    try:
        PyObject_GetBuffer(value, &theirs, PyBUF_C_CONTIGUOUS)   # a numpy scalar
    except BufferError:
        kept.comparable = False
        return -1
    try:
        PyObject_GetBuffer(kept.copy, &mine, PyBUF_C_CONTIGUOUS)
        try:
            return theirs.len == mine.len and memcmp(theirs.buf, mine.buf, mine.len) == 0
        finally:
            PyBuffer_Release(&mine)
    finally:
        PyBuffer_Release(&theirs)


cdef class Executable:
    """One compiled executable, ready to run on the flat leaves of calls that
    match the signature it was made for."""

    def __init__(self, *args, **kwargs):
        raise TypeError("Executable is made by the dispatcher, not directly")

    cdef object run(self, object leaves, long long* launched):
        cdef object buffers = leaves   # every leaf an array the executable keeps
        if self.packed is not None and not (
                self.inputs.reuse_host_buffers and self.inputs.host_repeats(PySequence_Fast_ITEMS(leaves))):
            # Host leaves that changed: one transfer (bytes that repeat need none).
            try:
                outputs = self.packed.run(leaves)
            except _RuntimeError as error:
                return _launch_failed(error, leaves, False)
            if outputs is not None:
                if launched != NULL:
                    launched[0] = now_ns()
                return outputs
        if not self.inputs.as_is:
            buffers = self.inputs.prepare(leaves)
            if type(buffers) is HandOff:
                return buffers
        try:
            if self.with_tokens:
                outputs = self._execute_with_tokens(buffers)
            elif self.paced:
                results = self.execute(buffers, with_tokens=True)
                _pace(results.consume_token())
                outputs = _consume(results, self.out_handlers)
            else:
                outputs = _consume(self.execute(buffers), self.out_handlers)
        except _RuntimeError as error:
            return _launch_failed(error, leaves, self.with_tokens)
        if launched != NULL:
            launched[0] = now_ns()
        return outputs

    def install_packed(self, Packed packed):
        """Serve calls through ``packed`` from now on (packing.start's thread
        calls it): their host leaves go in one transfer, never to jax.jit."""
        self.packed = packed
        cdef Inputs inputs = self.inputs
        inputs.host_hand_off = inputs.later_host_hand_off = False
        inputs.new_scalars_hand_off = inputs.later_scalars_hand_off = False
        inputs.calls_before_hand_off = NEVER_HAND_OFF

    def memory_bytes(self):
        """The device memory this executable holds, by XLA's memory analysis
        (None where the backend does not say): for --trace's report."""
        return _jax.compiled_memory_bytes(self.execute)

    cdef object _execute_with_tokens(self, object buffers):
        """The flat outputs of one run of an executable with effects, with jax's
        runtime tokens threaded through it exactly as ``ExecuteReplicated``
        threads them: ordered effects take the thread's current token and give
        the next one; every run leaves its runtime token per device, which
        ``jax.effects_barrier()`` waits for.  The token state is jax's own
        (per thread), read on every call, so calls through jax.jit and through
        us interleave in one order."""
        cdef Py_ssize_t i
        tokens = _runtime_tokens()
        if self.ordered_effects:
            inputs = []
            guard = _host_transfer_guard()
            current = tokens.current_tokens
            for effect in self.ordered_effects:
                token = current.get(effect)
                if type(token) is not _Token or not (guard is None or guard == _ALLOW):
                    # The first ordered call on this thread, or a transfer guard
                    # to meet: jax's own way (a device_put of the token).
                    inputs.append(tokens.get_token_input(effect, list(self.devices))._buf)
                    continue
                # What that device_put does: wait for the previous call's token,
                # then pass an empty bool array the executable never reads.
                token.block_until_ready()
                if self.token_buffer is None:
                    self.token_buffer = _fresh_token_buffer(self.devices[0])
                inputs.append(self.token_buffer)
            inputs.extend(buffers)
            buffers = inputs
        results = self.execute(buffers, with_tokens=True)
        if self.ordered_effects:
            token_arrays = _consume(results, self.token_handlers, strict=False)
        runtime_token = results.consume_token()
        if self.paced:
            _pace(runtime_token)
        output_tokens = tokens.output_runtime_tokens
        for i in range(len(self.devices)):
            output_tokens[self.devices[i]] = runtime_token.get_token(i)
        if self.ordered_effects:
            current = tokens.current_tokens
            for i in range(len(self.ordered_effects)):
                current[self.ordered_effects[i]] = _Token(token_arrays[i][0])
        return _consume(results, self.out_handlers)


cdef HostKept _host_kept(object leaf):
    """What an entry keeps of a numpy input small enough to compare (None:
    larger, converted every call).  Nothing is kept of the compiling call:
    jax.jit converted its leaf."""
    if leaf.nbytes > HOST_REUSE_MAX_BYTES:
        return None
    cdef HostKept kept = HostKept.__new__(HostKept)
    kept.comparable = True
    return kept


cdef inline bint _convertible_host_value(object leaf, object aval) except -1:
    """A numpy array or scalar batched_device_put puts as jax.jit would: of the
    input's shape, and of its dtype once jax has canonicalised it."""
    if not plain_host_value(leaf) or tuple(leaf.shape) != tuple(aval.shape):
        return False
    return leaf.dtype == aval.dtype or _jax.canonical_dtype(leaf.dtype, _jax.x64_enabled()) == aval.dtype


cdef Executable make_executable(object compiled, CallSignature signature, list leaves,
                                bint donates, Py_ssize_t calls_before_hand_off):
    if compiled.in_tree.num_leaves != signature.num_leaves:
        # Never expected: our flattening of the arguments must be jax's.
        raise MustHandOff(_reasons.ARGUMENTS_FLATTEN_DIFFERENTLY)
    parts = _jax.executable_parts(compiled)
    cdef Py_ssize_t j, index, n = len(parts.kept)
    cdef Py_ssize_t num_scalars = 0, num_host = 0, num_cast = 0
    cdef LeafKey* key
    host_inputs = []
    for j in range(n):
        index = parts.kept[j]
        key = &signature.keys[index]
        expected = parts.in_shardings[j]
        if key.kind == LEAF_HOST or key.kind == LEAF_SCALAR:
            if key.kind == LEAF_HOST:
                num_host += 1
                if donates:
                    # A numpy argument's memory is aliased, never to be donated.
                    raise MustHandOff(_HOST_DATA)
                if not _convertible_host_value(leaves[index], parts.in_avals[j]):
                    raise MustHandOff(_HOST_DATA)
            else:
                num_scalars += 1
            # One device or several, this process's or a global mesh's: the
            # value goes on each of this process's devices, as jax puts it.
            devices = _jax.scalar_devices(expected)
            cast = key.kind == LEAF_HOST and leaves[index].dtype != parts.in_avals[j].dtype
            num_cast += cast
            host_inputs.append(HostInput(parts.in_avals[j], expected, list(devices), cast))
            continue
        host_inputs.append(None)
        leaf = leaves[index]
        actual = leaf.sharding
        if actual is not expected and not (
                actual == expected or actual.is_equivalent_to(expected, leaf.ndim)):
            raise MustHandOff(_reasons.RESHARD)
    cdef Py_ssize_t num_other = n - num_host - num_scalars
    cdef bint host_hand_off = num_host and num_other < HOST_BREAK_EVEN_LEAVES * (num_host + num_cast)
    cdef bint scalars_hand_off = num_scalars and num_other < NEW_SCALAR_BREAK_EVEN_LEAVES * num_scalars
    host_kept = tuple([
        _host_kept(leaves[parts.kept[j]]) if signature.keys[parts.kept[j]].kind == LEAF_HOST and not donates
        else None for j in range(n)])
    cdef bint keeps_host = num_host and sum(kept is not None for kept in host_kept) == num_host
    if calls_before_hand_off == HAND_OFF_NOW and host_hand_off and not keeps_host:
        raise MustHandOff(_HOST_DATA)   # jax.jit converts them faster, and they never repeat here

    cdef Inputs inputs = Inputs.__new__(Inputs)
    inputs.num_inputs = n
    inputs.input_leaf = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    inputs.input_kind = <LeafKind*>PyMem_Malloc((n + 1) * sizeof(LeafKind))
    if inputs.input_leaf == NULL or inputs.input_kind == NULL:
        raise MemoryError()
    inputs.as_is = n == signature.num_leaves
    for j in range(n):
        index = parts.kept[j]
        inputs.input_leaf[j] = index
        inputs.input_kind[j] = signature.keys[index].kind
        inputs.as_is &= inputs.input_kind[j] == LEAF_ARRAY
    inputs.host_inputs = tuple(host_inputs)
    inputs.has_scalars = num_scalars > 0
    # The compiling call's values are the last ones seen: jax.jit converted them.
    inputs.scalar_buffers = tuple([
        {} if inputs.input_kind[j] == LEAF_SCALAR else None for j in range(n)])
    inputs.last_scalars = [
        _scalar_bits(leaves[inputs.input_leaf[j]])
        if inputs.input_kind[j] == LEAF_SCALAR else None for j in range(n)]
    inputs.reuse_scalar_buffers = not donates
    inputs.host_kept = host_kept
    inputs.reuse_host_buffers = any(kept is not None for kept in host_kept)
    inputs.new_scalars_hand_off = calls_before_hand_off == HAND_OFF_NOW and scalars_hand_off
    # Leaving its numpy values to jax.jit from the first call, but for calls
    # whose bytes repeat (host_repeats).
    inputs.host_hand_off = calls_before_hand_off == HAND_OFF_NOW and host_hand_off
    inputs.later_scalars_hand_off, inputs.later_host_hand_off = scalars_hand_off, host_hand_off
    inputs.calls_before_hand_off = (calls_before_hand_off if host_hand_off or scalars_hand_off
                                    else NEVER_HAND_OFF)

    cdef Executable executable = Executable.__new__(Executable)
    executable.inputs = inputs
    executable.execute = parts.execute
    executable.out_handlers = parts.out_handlers
    executable.out_treedef = parts.out_treedef
    executable.with_tokens = parts.with_tokens
    executable.ordered_effects = parts.ordered_effects
    executable.devices = parts.devices
    executable.token_handlers = [_identity] * len(parts.ordered_effects)
    executable.token_buffer = None
    executable.keepalive = parts.keepalive
    executable.calls_host = parts.calls_host
    executable.paced = len(parts.devices) > 1 and parts.devices[0].platform == "cpu"
    executable.pack_plan = None
    executable.pack_countdown = -1
    if num_host + num_scalars >= 2 and not donates and not parts.with_tokens and len(parts.devices) == 1:
        executable.pack_plan = _plan_packing(compiled, parts, signature, host_inputs)
        if executable.pack_plan is not None:
            executable.pack_countdown = max(1, packing.PACK_AFTER_CALLS)
    return executable


cdef object _plan_packing(object compiled, object parts, CallSignature signature, list host_inputs):
    """packing.plan's reading of an entry: which leaves are host values (kept
    or not), and what its executable expects of the others."""
    kept = {index: j for j, index in enumerate(parts.kept)}
    host, others, unkept_host = [], [], []
    cdef Py_ssize_t index
    cdef LeafKind kind
    for index in range(signature.num_leaves):
        kind = signature.keys[index].kind
        j = kept.get(index)
        if kind == LEAF_HOST or kind == LEAF_SCALAR:
            if j is None:
                unkept_host.append(index)
            else:
                spec = host_inputs[j]
                if len(spec.devices) != 1:
                    return None
                host.append((index, parts.in_avals[j], kind == LEAF_SCALAR, spec.cast))
        else:
            others.append((index, None if j is None else parts.in_shardings[j], kind == LEAF_KEY))
    first = next(spec for spec in host_inputs if spec is not None)
    return packing.plan(host, others, unkept_host, parts.devices[0], first.sharding, signature.num_leaves,
                        _jax.output_description(compiled))


# -- Outputs: how the flat outputs become the call's result -----------------
# Each front end has its own kind: ``jit`` rebuilds jax's output tree
# (OutputTree, here); ``filter_jit`` mixes arrays with the static leaves its
# trace returned (equinox's OutputRecipe); ``nnx.jit`` writes the graph's new
# values back into its Variables first (nnx's Record).

cdef class Outputs:
    """The result of a call from its executable's flat outputs."""

    cdef object rebuild(self, list outputs):
        raise NotImplementedError


cdef class OutputTree(Outputs):
    """jax's output tree, rebuilt by our TreeDef where the two agree."""

    cdef object rebuild(self, list outputs):
        if self.single:
            return <object>PyList_GET_ITEM(outputs, 0)
        if self.treedef is not None:
            return self.treedef.unflatten(outputs)
        return self.jax_treedef.unflatten(outputs)


cdef OutputTree output_tree(object jax_treedef):
    cdef OutputTree tree = OutputTree.__new__(OutputTree)
    tree.jax_treedef = jax_treedef
    tree.treedef = our_treedef(jax_treedef)
    tree.single = (tree.treedef is not None and tree.treedef.num_nodes == 1
                   and tree.treedef.num_leaves == 1)
    return tree


cdef class _Marker:
    # A stand-in leaf, to read the order in which a tree flattens.
    cdef Py_ssize_t index


cdef TreeDef our_treedef(jax_treedef):
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
