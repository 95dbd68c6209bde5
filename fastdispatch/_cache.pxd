# Compiled executables and the LRU cache that holds them, shared between functions.
from fastdispatch._pytree cimport TreeDef
from fastdispatch._signature cimport CallSignature

cdef class CacheEntry:
    cdef readonly CallSignature signature  # the key this entry was compiled for
    cdef object execute                    # LoadedExecutable.execute_sharded, bound
    cdef list out_handlers                 # one jaxlib result handler per flat output
    cdef TreeDef out_treedef               # rebuilds the output tree; None: use jax's
    cdef object jax_out_treedef            # jax's PyTreeDef of the outputs
    cdef tuple kept                        # flat input indices the executable takes
    cdef bint takes_leaves_as_is           # every input kept, every leaf a plain Array
    cdef bint single_output                # the output is one array, not a tree
    cdef dict scalar_inputs                # flat index -> _compile.ScalarInput
    cdef dict scalar_buffers               # (index, value) -> device array of a repeated scalar
    cdef bint reuse_scalar_buffers         # False when the function donates arguments
    cdef readonly object slow_reason       # why jax itself must run this entry; None: fast
    cdef readonly object compile_error     # the exception compiling raised, for waiters
    cdef object done                       # threading.Event: set once compiling ended
    cdef long compiling_thread             # thread id of the compiler, to catch recursion
    cdef readonly double compile_seconds   # trace + lower + compile time
    cdef unsigned long long last_used      # LRU clock reading of the last hit
    cdef bint evicted                      # dropped from the cache: guards must not use it

    cdef object run(self, object leaves)
    cdef object scalar_buffer(self, Py_ssize_t index, object value)


cdef class FunctionCache:
    cdef dict entries                      # CallSignature -> CacheEntry
    cdef CompiledFunctionCache shared      # the LRU this belongs to

    cdef CacheEntry insert(self, CallSignature signature)
    cdef void remove(self, CacheEntry entry)
    cdef inline void touch(self, CacheEntry entry):
        self.shared._clock += 1
        self.shared._hits += 1
        entry.last_used = self.shared._clock


cdef class CompiledFunctionCache:
    cdef Py_ssize_t _capacity              # most entries, over all functions
    cdef Py_ssize_t _size                  # entries now, over all functions
    cdef dict _functions                   # function key -> FunctionCache
    cdef unsigned long long _clock         # LRU clock: ticks once per hit or insert
    cdef unsigned long long _hits
    cdef unsigned long long _misses
    cdef unsigned long long _evictions
    cdef double _compile_seconds
    cdef object __weakref__

    cdef FunctionCache function_cache(self, object fun, object options_key)
    cdef void evict_least_recent(self)
