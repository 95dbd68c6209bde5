# cython: boundscheck=False, wraparound=False
"""CacheEntry and CompiledFunctionCache: compiled executables, kept in one LRU
that many functions share.

Entries are grouped per function, keyed weakly by the Python function (and the
jit options that change compilation), so that two ``jit(f)`` objects of one
``f`` share executables and the entries go when ``f`` dies.  The LRU order is a
clock stamped on each hit: a hit costs two integer writes, and the rare
eviction scans for the oldest stamp (compiling dwarfs that scan).
"""
import sys
import threading
import weakref
from functools import partial

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.string cimport memcpy

from fastdispatch._pytree cimport TreeDef, flatten_into
from fastdispatch import _compile

# Bump when the pickled form of CompiledFunctionCache changes.
PICKLE_FORMAT = 1

cdef object _ARRAY = _compile.ARRAY_TYPE
cdef object _KEY_ARRAY = _compile.KEY_ARRAY_TYPE
cdef str _KEY_BUFFER = sys.intern(_compile.KEY_BUFFER_ATTR)
cdef object _put_scalar = _compile.put_scalar
cdef object _consume = _compile.consume_with_handlers

# CacheEntry.run's answer when jax.jit must take the call after all.
DELEGATE = object()

# Distinct Python scalar values an entry keeps on device for reuse.
MAX_REUSED_SCALARS = 64

cdef object _RuntimeError = _compile.RUNTIME_ERROR


cdef object _as_jit_error(error):
    # jax.jit's C++ dispatch reports a deleted or donated input as ValueError;
    # executing directly gives PjRt's JaxRuntimeError.  Same message, jax's type
    # (other PjRt errors stay JaxRuntimeError in jax.jit too).
    message = str(error)
    if "Buffer has been deleted or donated" in message:
        return ValueError(message)
    return error


# Every live cache, for CompiledFunctionCache.clear_all().
_live_caches = weakref.WeakSet()


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


cdef class CacheEntry:
    """One compiled executable of one function, for one CallSignature.

    Created empty on a miss by the thread that will compile it; ``done`` is set
    when compiling ends, well or not.  Other threads wait on it.
    """

    def __cinit__(self):
        self.done = threading.Event()
        self.slow_reason = None
        self.compile_error = None

    def fill(self, compiled, list leaves, double seconds, bint donates=False):
        """Take what the fast path needs from a jax.stages.Compiled."""
        self.compile_seconds = seconds
        self.reuse_scalar_buffers = not donates
        if compiled.in_tree.num_leaves != len(leaves):
            # Never expected: our flattening of the arguments must be jax's.
            self.slow_reason = "arguments flatten differently from jax"
            return
        parts = _compile.fast_path(compiled, leaves)
        if isinstance(parts, str):
            self.slow_reason = parts
            return
        self.execute = parts.execute
        self.out_handlers = parts.out_handlers
        self.jax_out_treedef = parts.out_treedef
        self.out_treedef = _our_treedef(parts.out_treedef)
        self.single_output = (self.out_treedef is not None and self.out_treedef.num_nodes == 1
                              and self.out_treedef.num_leaves == 1)
        self.kept = parts.kept
        self.scalar_inputs = parts.scalar_inputs
        self.scalar_buffers = {}
        self.takes_leaves_as_is = (
            len(self.kept) == len(leaves)
            and all(type(leaf) is _ARRAY for leaf in leaves))

    cdef object run(self, object leaves):
        """Execute on the call's flat leaves and rebuild the output tree.

        Returns DELEGATE when a Python scalar does not convert (an int too
        large for int32, say): jax.jit then raises its own error."""
        cdef object buffers   # the leaves themselves (list or tuple), or a new list
        cdef Py_ssize_t i
        if self.takes_leaves_as_is:
            buffers = leaves
        else:
            buffers = []
            for i in self.kept:
                leaf = leaves[i]
                leaf_type = type(leaf)
                if leaf_type is _ARRAY:
                    buffers.append(leaf)
                elif leaf_type is _KEY_ARRAY:
                    buffers.append(getattr(leaf, _KEY_BUFFER))
                else:
                    leaf = self.scalar_buffer(i, leaf)
                    if leaf is None:
                        return DELEGATE
                    buffers.append(leaf)
        try:
            outputs = _consume(self.execute(buffers), self.out_handlers)
        except _RuntimeError as error:
            raise _as_jit_error(error)
        if self.single_output:
            return <object>PyList_GET_ITEM(outputs, 0)
        if self.out_treedef is not None:
            return self.out_treedef.unflatten(outputs)
        return self.jax_out_treedef.unflatten(outputs)

    cdef object scalar_buffer(self, Py_ssize_t index, object value):
        """A device array for a Python scalar argument, or None if it won't convert.

        Constants (a learning rate passed every step) are converted once and
        reused: arrays are immutable, unless donated, so functions that donate
        convert every time.  Reuse is keyed by the value's bits, never by the
        caller's object, so that no argument outlives its call."""
        key = _scalar_bits(value) if self.reuse_scalar_buffers else None
        if key is not None:
            key = (index, key)
            found = self.scalar_buffers.get(key)
            if found is not None:
                return found
        try:
            buffer = _put_scalar(value, self.scalar_inputs[index])
        except (OverflowError, TypeError, ValueError):
            return None
        if key is not None and len(self.scalar_buffers) < MAX_REUSED_SCALARS:
            self.scalar_buffers[key] = buffer
        return buffer

    @property
    def is_fast(self):
        """True when the dispatcher runs this entry itself, without jax."""
        return self.done.is_set() and self.compile_error is None and self.slow_reason is None

    def __repr__(self):
        state = ("compiling" if not self.done.is_set() else
                 f"failed: {self.compile_error!r}" if self.compile_error is not None else
                 f"slow path: {self.slow_reason}" if self.slow_reason is not None else
                 "fast path")
        return f"<CacheEntry {self.signature!r} ({state})>"


cdef class FunctionCache:
    """One function's entries inside a shared CompiledFunctionCache."""

    cdef CacheEntry insert(self, CallSignature signature):
        cdef CompiledFunctionCache shared = self.shared
        cdef CacheEntry entry = CacheEntry.__new__(CacheEntry)
        entry.signature = signature
        entry.compiling_thread = threading.get_ident()
        shared._clock += 1
        shared._misses += 1
        entry.last_used = shared._clock
        self.entries[signature] = entry
        shared._size += 1
        while shared._size > shared._capacity:
            shared.evict_least_recent()
        return entry

    cdef void remove(self, CacheEntry entry):
        if self.entries.get(entry.signature) is entry:
            del self.entries[entry.signature]
            self.shared._size -= 1
        entry.evicted = True

    def __len__(self):
        return len(self.entries)

    def clear(self):
        for entry in self.entries.values():
            (<CacheEntry>entry).evicted = True
        self.shared._size -= len(self.entries)
        self.entries.clear()

    def values(self):
        return list(self.entries.values())


def _forget_function(cache_ref, dead_ref):
    # Weakref callback: the function died, so its entries go.
    cdef CompiledFunctionCache cache = cache_ref()
    if cache is None:
        return
    for key in [key for key in cache._functions if key[0] is dead_ref]:
        cache._functions.pop(key).clear()


def _rebuild_cache(int format_version, Py_ssize_t capacity):
    if format_version != PICKLE_FORMAT:
        raise ValueError(
            f"CompiledFunctionCache was pickled in format {format_version}, but this "
            f"fastdispatch reads format {PICKLE_FORMAT}: create a new cache instead.")
    return CompiledFunctionCache(capacity)


cdef class CompiledFunctionCache:
    """An LRU cache of compiled executables, shared by the functions given it.

    ``jit(f, cache=c)`` puts ``f``'s executables in ``c``; without ``cache=``
    functions share ``fastdispatch.default_cache()``.  ``capacity`` bounds the
    number of entries over all functions; the least recently used goes first.
    A function's entries are dropped when the function is garbage collected.
    Pickles as an empty cache of the same capacity.
    """

    def __init__(self, capacity=4096):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(
                f"CompiledFunctionCache: capacity must be a positive int, got {capacity!r}")
        self._capacity = capacity
        self._functions = {}
        _live_caches.add(self)

    cdef FunctionCache function_cache(self, object fun, object options_key):
        """The entries of ``fun`` compiled with these options (created empty)."""
        try:
            ref = weakref.ref(fun, partial(_forget_function, weakref.ref(self)))
            key = (ref, options_key)
        except TypeError:
            # Not weakly referenceable (a builtin, say): held for the cache's life.
            key = (fun, options_key)
        cdef FunctionCache found = self._functions.get(key)
        if found is None:
            found = FunctionCache.__new__(FunctionCache)
            found.entries = {}
            found.shared = self
            self._functions[key] = found
        return found

    cdef void evict_least_recent(self):
        cdef FunctionCache oldest_owner = None
        cdef CacheEntry entry, oldest = None
        for function_cache in self._functions.values():
            for entry in (<FunctionCache>function_cache).entries.values():
                if oldest is None or entry.last_used < oldest.last_used:
                    oldest = entry
                    oldest_owner = function_cache
        if oldest is not None:
            oldest_owner.remove(oldest)
            self._evictions += 1

    def size(self):
        """Entries held now, over all functions."""
        return self._size

    def capacity(self):
        """The most entries this cache holds."""
        return self._capacity

    def clear(self):
        """Drop every entry; functions compile again on their next call."""
        # The functions stay registered: their CompiledFunction objects hold
        # their FunctionCache and fill it again.
        for function_cache in self._functions.values():
            function_cache.clear()

    @classmethod
    def clear_all(cls):
        """Clear every live CompiledFunctionCache."""
        for cache in list(_live_caches):
            cache.clear()

    def stats(self):
        """Counters since creation: hits, misses (compiles), evictions, compile_seconds."""
        return {"hits": self._hits, "misses": self._misses,
                "evictions": self._evictions, "compile_seconds": self._compile_seconds,
                "size": self._size, "capacity": self._capacity}

    def entries(self):
        """The CacheEntry objects held now, most recently used last."""
        found = [entry for function_cache in self._functions.values()
                 for entry in (<FunctionCache>function_cache).entries.values()]
        return sorted(found, key=lambda entry: (<CacheEntry>entry).last_used)

    def __reduce__(self):
        return _rebuild_cache, (PICKLE_FORMAT, self._capacity)

    def __repr__(self):
        return f"CompiledFunctionCache(capacity={self._capacity}, size={self._size})"


_DEFAULT_CACHE = CompiledFunctionCache()


def default_cache():
    """The cache functions use when ``jit`` is not given ``cache=``."""
    return _DEFAULT_CACHE
