# fastdispatch.jit: the jax.jit front end of the engine.
cimport cython
from cpython.object cimport PyObject
from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.engine cimport Call, CallTimes, Engine, PreviousCall
from fastdispatch.core.signature cimport CallSignature
from fastdispatch.jax_jit.layout cimport CallLayout

cdef extern from "Python.h":
    ctypedef PyObject* (*vectorcallfunc)(PyObject* callable, PyObject* const* args,
                                         size_t nargsf, PyObject* kwnames)


@cython.final
cdef class PreviousJitCall(PreviousCall):
    cdef CallLayout layout                 # its layout, when all its arguments were leaves
    cdef bint hand_off_guarded             # jax.jit runs its entry for the leaves' sake (numpy)


@cython.final
cdef class CompiledFunction(Engine):
    cdef vectorcallfunc _vectorcall_slot   # PEP 590 entry point, found via tp_vectorcall_offset
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

    cdef tuple _split_static(self, tuple args, dict kwargs)
    cdef tuple _from_compiled(self, CacheEntry entry, list leaves, object compiled,
                              Py_ssize_t calls_before_hand_off)
    cdef object _warm_save(self, CacheEntry entry, object compiled, object traced, str reason)
