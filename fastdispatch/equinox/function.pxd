# The filter_jit front end (equinox's filter_jit) of the engine.
from fastdispatch.core.cache cimport CacheEntry
from fastdispatch.core.engine cimport Call, Engine, Found
from fastdispatch.core.execute cimport Executable, Outputs
from fastdispatch.core.keys cimport Py_uhash_t
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport CallSignature
from fastdispatch.equinox.bind cimport BindPlan
from fastdispatch.equinox.same_call cimport SameCall


cdef class OutputRecipe(Outputs):
    cdef TreeDef treedef           # the structure of what the call returns
    cdef Py_ssize_t num_leaves
    cdef Py_ssize_t* source        # per output leaf: the executable output it is, or -1: static
    cdef tuple statics             # per output leaf: the static value the trace returned
    cdef Py_ssize_t single         # the output is one array: its executable output; else -1


cdef class FilterDispatcher(Engine):
    cdef readonly object jitted    # equinox's shared jax.jit of this function: compiles, runs hand-offs
    cdef object equinox_call       # equinox's own wrapper call: (wrapper, *args, **kwargs)
    cdef object equinox_lower      # equinox's own lowering: (wrapper, *args, **kwargs)
    cdef object is_array           # equinox.is_array, for leaves of unknown types
    cdef object warm_options       # what its warm-start keys add (its options: equinox/warm.py), or None
    cdef dict plans                # (id(signature), nargs, kwnames) -> BindPlan
    cdef BindPlan last_plan        # the plan of the previous call: one identity check
    # The identity guard: a call on the previous call's very objects.
    cdef SameCall same             # proves a call is the recorded one, or None
    cdef Py_uhash_t last_roots     # the previous call's arguments other than arrays, by address
    cdef bint arm                  # the call being served passes them again: record it
    cdef int strikes               # records refused, or dropped before serving a call
    cdef object __weakref__

    cdef BindPlan plan_for(self, object signature, tuple args, dict kwargs)
    # The (Executable, OutputRecipe) of the call equinox just ran (returning
    # `out`), written to the warm-start store; raises MustHandOff.
    cdef tuple _built(self, Call* call, Found* found, CacheEntry entry, object out)
    cdef Executable _executable(self, object compiled, CacheEntry entry, list leaves)
    cdef str _partition(self, TreeDef treedef, tuple bound, list leaves, tuple static, list dynamic,
                        Py_ssize_t* first_dynamic)
    cdef void _watch_roots(self, BindPlan plan, tuple args, dict kwargs)
    cdef void _drop_same(self, SameCall same)
