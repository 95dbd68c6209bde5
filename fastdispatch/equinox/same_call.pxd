# filter_jit's identity guard: a call on the very objects of an earlier one.
from fastdispatch.core.cache cimport CacheEntry
from fastdispatch.core.engine cimport Call, PreviousCall
from fastdispatch.core.signature cimport CallSignature
from fastdispatch.equinox.bind cimport BindPlan
from fastdispatch.equinox.unchanged cimport Unchanged


cdef class _Strong:
    cdef Unchanged contents        # what the same objects held
    cdef list inputs               # the executable's inputs; None where an array argument goes
    cdef tuple fun_parts           # the wrapper's (_dynamic_fun, _static_fun)
    cdef void drop(self)


cdef class SameCall:
    cdef object wrapper            # the wrapper called (a weak reference)
    cdef BindPlan plan             # its binding of the call
    cdef tuple sources             # per bound argument: where the call passes it (BindPlan.sources)
    cdef tuple held                # per bound argument: a weak reference (the same object), a value, or None
    cdef Py_ssize_t* input_at      # per bound argument: its input (an array), SAME_OBJECT or SAME_VALUE
    cdef _Strong strong            # what it holds strongly: emptied when a weakly held object dies
    cdef CacheEntry entry          # the entry that ran them
    cdef CallSignature signature   # the call's own signature: the arrays' keys, jax's context
    cdef Py_ssize_t hits           # calls it served

    cdef list inputs_for(self, object wrapper, dict fields, BindPlan plan, tuple args,
                         dict kwargs)


# A SameCall for this call (bound by ``plan``), which ``previous``'s entry
# serves with these inputs; None when identity cannot prove its successors alike.
cdef SameCall record_same(Call* call, PreviousCall previous, list leaves, BindPlan plan)
