# Cache entries and the LRU that holds them, shared between functions.
from fastdispatch._execute cimport Executable
from fastdispatch._signature cimport CallSignature

cdef class CacheEntry:
    cdef readonly CallSignature signature  # the key this entry was compiled for
    cdef readonly Executable executable    # runs it; None while compiling, or when jax must
    cdef readonly object slow_reason       # why jax itself runs this entry; None: fast
    # A front end's own data for the entry (how filter_jit rebuilds its
    # outputs, say); None for jit.
    cdef readonly object finish
    cdef readonly object compile_error     # the exception compiling raised, for waiters
    cdef readonly double compile_seconds   # trace + lower + compile time
    cdef bint finished                     # compiling ended (done is set): no wait needed
    cdef object done                       # threading.Event: set once compiling ended
    cdef long compiling_thread             # thread id of the compiler, to catch recursion
    cdef unsigned long long last_used      # LRU clock reading of the last hit
    cdef bint evicted                      # dropped from the cache: guards must not use it

    # Return once the entry is compiled; raise its compile error, or
    # RecursionError when the compiling thread itself calls `function` again.
    cdef int wait(self, object function) except -1


cdef class FunctionCache:
    cdef dict entries                      # CallSignature -> CacheEntry
    cdef CompiledFunctionCache shared      # the LRU this belongs to

    cdef CacheEntry insert(self, CallSignature signature)   # a miss: a new entry, compiling
    cdef void complete(self, CacheEntry entry, object built, double seconds, object finish=*)
    cdef void fail(self, CacheEntry entry, object error)
    cdef void remove(self, CacheEntry entry)
    cdef inline void touch(self, CacheEntry entry):   # a hit
        self.shared._clock += 1
        self.shared._hits += 1
        entry.last_used = self.shared._clock


cdef class CompiledFunctionCache:
    cdef Py_ssize_t _capacity              # most entries, over all functions
    cdef Py_ssize_t _size                  # entries now, over all functions
    cdef dict _functions                   # (function ref, options) -> FunctionCache
    cdef unsigned long long _clock         # LRU clock: ticks once per hit or insert
    cdef unsigned long long _hits          # calls served by an entry compiled earlier
    cdef unsigned long long _misses        # entries inserted (compiles)
    cdef unsigned long long _evictions     # entries dropped for capacity
    cdef double _compile_seconds           # summed over completed compiles
    cdef object __weakref__

    cdef FunctionCache function_cache(self, object fun, object options_key)
    cdef void evict_least_recent(self)
