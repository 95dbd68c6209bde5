# fastdispatch.jit: the jax.jit front end of the engine.
cimport cython
from cpython.object cimport PyObject
from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine cimport Call, Engine, PreviousCall
from fastdispatch.core.signature cimport CallSignature


@cython.final
cdef class CallLayout:
    cdef object kwnames                    # the call's keyword names (a tuple), or None
    cdef Py_ssize_t nargs                  # positional arguments
    cdef tuple leaf_index                  # argv index of each leaf, flatten order; None: 0..nargs-1
    # Per leaf_index entry: None (a leaf), or the exact list or tuple type
    # whose items are its leaves; None for all: every entry is a leaf.
    cdef tuple containers
    cdef tuple lengths                     # per leaf_index entry: the container's length (0 for a leaf)
    cdef tuple static_index                # argv index of each static argument, static_args order
    # The leaves, in flatten order, of a call laid out like this one whose
    # leaves and static arguments pass the signature's guard (jax's context is
    # the engine's to compare); else None.
    cdef tuple guard(self, Call* call, CallSignature signature)
    cdef tuple _gather(self, PyObject** argv)


@cython.final
cdef class CompiledFunction(Engine):
    cdef readonly object fun               # the Python function being jitted
    cdef object _jitted                    # jax.jit(fun, same options): what a hand-off runs
    cdef readonly dict _options            # the jit options given: pickling, the warm-start key
    cdef CompiledFunctionCache _shared_cache  # the shared LRU holding our executables
    cdef tuple _static_argnums             # as jax resolved them; may be negative
    cdef frozenset _static_argnames        # as jax resolved them
    cdef bint _has_static                  # any static argument at all
    cdef bint _donates                     # any donated argument at all
    cdef tuple _dynamic_arg_names          # positional parameter names minus static ones
    cdef dict __dict__                     # as functools.wraps fills it
    cdef object __weakref__

    cdef object _warm_save(self, CacheEntry entry, object compiled, object traced, str reason)
