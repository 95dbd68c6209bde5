# The jitted function object and its hot path.
cimport cython
from cpython.object cimport PyObject
from fastdispatch._cache cimport CacheEntry, CompiledFunctionCache, FunctionCache
from fastdispatch._signature cimport CallSignature

cdef extern from "Python.h":
    ctypedef PyObject* (*vectorcallfunc)(PyObject* callable, PyObject* const* args,
                                         size_t nargsf, PyObject* kwnames)

@cython.final
cdef class CallLayout:
    cdef object kwnames                    # the call's keyword names (a tuple), or None
    cdef Py_ssize_t nargs                  # positional arguments
    cdef tuple leaf_index                  # argv index of each leaf, flatten order; None: 0..nargs-1
    cdef tuple static_index                # argv index of each static keyword, static_args order
    cdef bint same_keywords(self, PyObject* kwnames)
    cdef tuple gather(self, PyObject** argv)
    cdef bint statics_match(self, PyObject** argv, tuple static_args)


@cython.final
cdef class PreviousCall:
    cdef CacheEntry entry                  # the entry that served it
    cdef CallSignature signature           # its own signature: the objects it held
    cdef CallLayout layout                 # its layout, when all its arguments were leaves


@cython.final
cdef class CompiledFunction:
    cdef vectorcallfunc _vectorcall_slot   # PEP 590 entry point, found via tp_vectorcall_offset
    cdef readonly object fun               # the Python function being jitted
    cdef object _jitted                    # jax.jit(fun, same options): the slow path
    cdef dict _options                     # the jit options given, for pickling
    cdef CompiledFunctionCache _cache      # the shared LRU holding our entries
    cdef FunctionCache _entries            # our part of it
    cdef tuple _static_argnums             # as jax resolved them; may be negative
    cdef frozenset _static_argnames        # as jax resolved them
    cdef bint _has_static                  # any static argument at all
    cdef bint _donates                     # any donated argument at all
    cdef tuple _dynamic_arg_names          # positional parameter names minus static ones
    cdef PreviousCall _previous            # the guard's guess: the previous call
    cdef dict __dict__                     # as functools.wraps fills it
    cdef object __weakref__

    cdef object _call(self, tuple args, dict kwargs, tuple context, long long start,
                      object kwnames)
    cdef void _remember(self, CacheEntry entry, CallSignature signature, tuple args,
                        dict kwargs, object kwnames)
    cdef object _execute(self, CacheEntry entry, object leaves, long long start,
                         long long flattened, long long keyed, long long found)
    cdef object _slow_vectorcall(self, PyObject** argv, size_t nargsf, PyObject* kwnames,
                                 str reason, long long start, object signature)
    cdef tuple _split_static(self, tuple args, dict kwargs)
    cdef object _run(self, CacheEntry entry, object leaves, tuple args, dict kwargs,
                     long long start, long long flattened, long long keyed, long long found)
    cdef object _slow(self, tuple args, dict kwargs, str reason, long long start,
                      object signature)
    cdef object _compile_and_run(self, CacheEntry entry, tuple args, dict kwargs,
                                 list leaves, long long start, object kwnames)
