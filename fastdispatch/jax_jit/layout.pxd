# How a jit call passed its arguments, for its guard and its hand-off memo.
cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from fastdispatch.core.engine cimport Call
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
    # not compared here); else None.
    cdef tuple guard(self, Call* call, CallSignature signature)
    cdef tuple _gather(self, PyObject** argv)
    cdef bint _statics_match(self, PyObject** argv, tuple static_args)


@cython.final
cdef class CallShape:
    cdef Py_ssize_t nargs                  # positional arguments
    cdef object kwnames                    # keyword names (a tuple), or None
    cdef tuple arg_types                   # the type of each argument in the array
    cdef bint matches(self, Call* call)


# The CallLayout of a call, or None when some dynamic argument is neither a
# leaf nor a list or tuple of leaves.
cdef CallLayout layout_of(tuple args, dict kwargs, object kwnames, frozenset static_names,
                          CallSignature signature)
# The CallShape of a call.
cdef CallShape shape_of(Call* call)


cdef inline tuple tuple_from_array(PyObject** items, Py_ssize_t n):
    """The n arguments at ``items`` as a tuple."""
    cdef tuple result = PyTuple_New(n)
    cdef Py_ssize_t i
    for i in range(n):
        Py_INCREF(<object>items[i])
        PyTuple_SET_ITEM(result, i, <object>items[i])
    return result
