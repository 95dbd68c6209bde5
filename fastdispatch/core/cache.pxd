# Cache entries and the LRU that holds them, shared between functions.
from fastdispatch.core.execute cimport Executable
from fastdispatch.core.signature cimport CallSignature

cdef class CacheEntry:
    cdef readonly CallSignature signature  # the key this entry was compiled for
    cdef readonly Executable executable    # runs it; None while compiling, or when jax must
    cdef readonly str hand_off_reason      # why the library runs this entry (_reasons); None: fast
    cdef readonly str hand_off_detail      # what else went with hand_off_reason (an error's repr), or None
    cdef readonly object finish            # its Outputs: how the flat outputs become the result
    cdef readonly object compile_error     # the exception compiling raised, for waiters
    cdef readonly double compile_seconds   # trace + lower + compile time
    cdef bint finished                     # compiling ended (done is set): no wait needed
    cdef object done                       # threading.Event: set once compiling ended
    cdef long compiling_thread             # thread id of the compiler, to catch recursion
    cdef unsigned long long last_used      # LRU clock reading of the last hit
    cdef bint evicted                      # dropped from the cache: guards must not use it
    cdef object warm_key                   # warm start: the store key its compile is written under, or None

    # Return once the entry is compiled; raise its compile error, or
    # RecursionError when the compiling thread itself calls `function` again.
    cdef int wait(self, object function) except -1


cdef class FunctionCache:
    cdef dict entries                      # CallSignature -> CacheEntry
    cdef CompiledFunctionCache shared      # the LRU this belongs to

    # The entry compiled for `signature`, or None.  Raises what a static
    # argument's __eq__ raises.
    cdef inline CacheEntry find(self, CallSignature signature):
        return self.entries.get(signature)
    cdef CacheEntry insert(self, CallSignature signature)   # a miss: a new entry, compiling
    cdef void complete(self, CacheEntry entry, Executable executable, object finish, str reason,
                       double seconds)
    cdef void fail(self, CacheEntry entry, object error)
    cdef void remove(self, CacheEntry entry)


cdef class ByIdentity:
    cdef Py_ssize_t address                # id() of the function: the key's hash
    cdef object ref                        # weakref to the function, or None where it has none
    cdef object strong                     # the function itself, where it cannot be weakly referenced
    cdef object target(self)               # the function, or None once it died


cdef class CompiledFunctionCache:
    cdef Py_ssize_t _capacity              # most entries, over all functions
    cdef Py_ssize_t _size                  # entries now, over all functions
    cdef dict _functions                   # (function ref, options) -> FunctionCache
    # The engine counts a hit here (Engine.call, for an entry found, not one
    # loaded for the call): the clock ticks, the entry's last_used takes its reading.
    cdef unsigned long long clock          # LRU clock: ticks once per hit or insert
    cdef unsigned long long hits           # calls served by an entry compiled earlier
    cdef unsigned long long _misses        # entries inserted (compiles)
    cdef unsigned long long _evictions     # entries dropped for capacity
    cdef double _compile_seconds           # summed over completed compiles
    cdef object __weakref__

    cdef FunctionCache function_cache(self, object fun, object options_key)
    cdef void evict_least_recent(self)
