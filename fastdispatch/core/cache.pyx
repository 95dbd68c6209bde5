# cython: boundscheck=False, wraparound=False
"""CacheEntry and CompiledFunctionCache: compiled executables, kept in one LRU
that many functions share.

Entries are grouped per function, keyed weakly by the Python function (and the
jit options that change compilation), so that two ``jit(f)`` objects of one
``f`` share executables and the entries go when ``f`` dies.  The LRU order is a
clock stamped on each hit: a hit costs two integer writes, and the rare
eviction scans for the oldest stamp (compiling dwarfs that scan).  Every
counter is written here, by the methods of FunctionCache.
"""
import threading
import weakref
from functools import partial

from fastdispatch import _jax

from fastdispatch.core.execute cimport Executable
from fastdispatch.core.signature cimport CallSignature

# Bump when the pickled form of CompiledFunctionCache changes.
PICKLE_FORMAT = 1

# Every live cache, for CompiledFunctionCache.clear_all().
_live_caches = weakref.WeakSet()


cdef class CacheEntry:
    """One compiled executable of one function, for one CallSignature.

    Created empty on a miss by the thread that will compile it; ``done`` is set
    when compiling ends, well or not.  Other threads wait on it.
    """

    def __cinit__(self):
        self.done = threading.Event()

    def __init__(self, *args, **kwargs):
        raise TypeError("CacheEntry is made by the cache, not directly")

    cdef int wait(self, object function) except -1:
        if not self.finished:
            if self.compiling_thread == threading.get_ident():
                raise RecursionError(
                    f"{getattr(function, '__name__', function)!r}: called again with the same "
                    "argument types while compiling for them (recursive call from the compiling "
                    "thread)")
            self.done.wait()
        if self.compile_error is not None:
            raise self.compile_error
        return 0

    @property
    def is_fast(self):
        """True when the dispatcher runs this entry itself, without jax."""
        return self.executable is not None

    # The names docs/api.md gave these before hand_off_reason and hand_off_detail.
    @property
    def slow_reason(self):
        """``hand_off_reason``."""
        return self.hand_off_reason

    @property
    def slow_detail(self):
        """``hand_off_detail``."""
        return self.hand_off_detail

    def __repr__(self):
        state = ("compiling" if not self.finished else
                 f"failed: {self.compile_error!r}" if self.compile_error is not None else
                 f"handed off: {self.hand_off_reason}"
                 + (f" ({self.hand_off_detail})" if self.hand_off_detail is not None else "")
                 if self.hand_off_reason is not None else
                 "fast path")
        return f"<CacheEntry {self.signature!r} ({state})>"


cdef class FunctionCache:
    """One function's entries inside a shared CompiledFunctionCache."""

    cdef CacheEntry insert(self, CallSignature signature):
        cdef CompiledFunctionCache shared = self.shared
        cdef CacheEntry entry = CacheEntry.__new__(CacheEntry)
        entry.signature = signature
        entry.compiling_thread = threading.get_ident()
        shared.clock += 1
        shared._misses += 1
        entry.last_used = shared.clock
        self.entries[signature] = entry
        shared._size += 1
        while shared._size > shared._capacity:
            shared.evict_least_recent()
        return entry

    cdef void complete(self, CacheEntry entry, Executable executable, object finish, str reason,
                       double seconds):
        """Compiling ended well: the entry runs ``executable`` and rebuilds its
        outputs by ``finish`` (an Outputs), or the library runs it, for ``reason``."""
        if reason is None:
            entry.executable = executable
            entry.finish = finish
        else:
            entry.hand_off_reason = reason
        entry.compile_seconds = seconds
        self.shared._compile_seconds += seconds
        entry.finished = True
        entry.done.set()

    cdef void fail(self, CacheEntry entry, object error):
        """Compiling raised: no broken entry stays behind, waiters see ``error``."""
        entry.compile_error = error
        self.remove(entry)
        entry.finished = True
        entry.done.set()

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
    for key in [key for key in cache._functions
                if key[0] is dead_ref
                or (type(key[0]) is ByIdentity and (<ByIdentity>key[0]).ref is dead_ref)]:
        cache._functions.pop(key).clear()


cdef class ByIdentity:
    """A function's key where it cannot be hashed (an object with ``__eq__``
    and no ``__hash__``, an equinox Module holding arrays): jax.jit takes any
    callable, and only its trace cache, at a call, hashes it; so the function
    is keyed by its identity here, weakly where it can be."""

    def __init__(self, fun, callback):
        self.address = id(fun)
        try:
            self.ref = weakref.ref(fun, callback)
        except TypeError:
            self.ref = None
            self.strong = fun   # not weakly referenceable: held for the cache's life

    cdef object target(self):
        return self.strong if self.ref is None else self.ref()

    def __hash__(self):
        return self.address

    def __eq__(self, other):
        if type(other) is not ByIdentity:
            return NotImplemented
        target = self.target()
        return self is other or (target is not None
                                 and target is (<ByIdentity>other).target())


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
        forget = partial(_forget_function, weakref.ref(self))
        try:
            hash(fun)
        except Exception:   # TypeError as a rule; jax's call raises what __hash__ raises
            key = (ByIdentity(fun, forget), options_key)
        else:
            try:
                key = (weakref.ref(fun, forget), options_key)
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
        """Clear every live CompiledFunctionCache (``jax.clear_caches()`` does too)."""
        for cache in list(_live_caches):
            cache.clear()

    def stats(self):
        """Counters since creation: hits, misses (compiles), evictions, compile_seconds."""
        return {"hits": self.hits, "misses": self._misses,
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


# jax.clear_caches() forgets every executable, ours as well as jax.jit's.
_cleared_with_jax = _jax.ClearedWithJax(CompiledFunctionCache.clear_all, "fastdispatch executables")
