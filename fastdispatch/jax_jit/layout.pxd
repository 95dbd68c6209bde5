# How a jit call passed its arguments: its static part, and its shape for the hand-off memo.
cimport cython
from fastdispatch.core.engine cimport Call


# (dynamic args, dynamic kwargs, static (label, type, value) triples in key order).
cdef tuple split_static(tuple args, dict kwargs, tuple static_argnums, frozenset static_argnames)


@cython.final
cdef class CallShape:
    cdef Py_ssize_t nargs                  # positional arguments
    cdef object kwnames                    # keyword names (a tuple), or None
    cdef tuple arg_types                   # the type of each argument in the array
    cdef bint matches(self, Call* call)


# The CallShape of a call.
cdef CallShape shape_of(Call* call)
