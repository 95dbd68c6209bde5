# Binding a filter_jit call as equinox binds it, once per call layout.
from cpython.dict cimport PyDict_GetItem
from cpython.tuple cimport PyTuple_GET_ITEM


cdef class BindPlan:
    cdef object signature          # the inspect.Signature it binds for (compared by identity)
    cdef Py_ssize_t nargs          # positional arguments of the calls it binds
    cdef tuple kwnames             # keyword names of those calls, in call order
    cdef bint refused              # signature.bind raised: equinox's own call reports it
    cdef bint as_is                # the bound arguments are the call's positional ones
    cdef tuple arg_sources         # per bound positional: an int (positional index) or a str (keyword)
    cdef tuple kwarg_names         # the bound keyword arguments' names, in bound order
    cdef tuple kwarg_sources       # per bound keyword argument: where it comes from, as above
    cdef tuple sources             # arg_sources, then kwarg_sources
    cdef tuple arg_names           # positional parameter names, for reports

    cdef bint fits(self, object signature, tuple args, dict kwargs)
    cdef tuple bind(self, tuple args, dict kwargs)


# The BindPlan of calls laid out as this one, to ``signature`` (an inspect.Signature).
cdef BindPlan make_plan(object signature, tuple args, dict kwargs)


cdef inline object bound_argument(object source, tuple args, dict kwargs):
    """The argument a BindPlan source names: a positional index or a keyword."""
    if type(source) is int:
        return <object>PyTuple_GET_ITEM(args, <Py_ssize_t>source)
    return <object>PyDict_GetItem(kwargs, source)
