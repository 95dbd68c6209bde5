# The nnx.jit front end (flax NNX's jit, graph mode) of the engine.
cimport cython
from fastdispatch.core.cache cimport CacheEntry
from fastdispatch.core.engine cimport Call, Engine, Found
from fastdispatch.core.execute cimport Executable, Outputs
from fastdispatch.core.signature cimport CallSignature

cdef class Merged(Outputs):
    cdef readonly object compiled       # the jax.stages.Compiled flax's jax.jit ran
    cdef object flax_function


@cython.final
cdef class NnxJitFunction(Engine):
    cdef readonly object flax_function  # flax's own nnx.jit of the function: misses and hand-offs
    cdef readonly object jitted         # its jax.jit (jax's own): the source of executables
    cdef readonly bint fast             # graph mode with graph updates, no sharding prefixes
    # fastdispatch.nnx.flax_call.FlaxCall: a call no record serves, split as
    # flax splits it, open across the engine's steps (found.scope)
    cdef object flax_call
    cdef tuple records                  # Record, most recently used first
    cdef dict __dict__
    cdef object __weakref__

    cdef Executable _executable(self, object graph, CacheEntry entry)
    # The Record of `graph` (a new one, or a shape more of the record the
    # split found holding it), which runs this call's write-back and the next.
    cdef int _record(self, Found* found, object split, object graph, CacheEntry entry) except -1
