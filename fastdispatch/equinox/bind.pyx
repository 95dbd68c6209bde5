# cython: boundscheck=False, wraparound=False
"""Binding a filter_jit call as equinox binds it (``signature.bind``), once per
call layout: a ``BindPlan`` says where each bound argument comes from, for
every call with the same positional count and keyword names.
"""
from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

# The bound kwargs of a call that binds as it is: never mutated.
cdef dict _NO_KWARGS = {}


cdef class _ArgumentStandIn:
    # A stand-in argument, to see where signature.bind puts each one.
    cdef object source


cdef class BindPlan:
    """Where ``signature.bind(*args, **kwargs)`` puts each argument, for every
    call with these positional count and keyword names.  Binding normalises a
    call as equinox does: f(x, 2) and f(x, y=2) bind alike; defaults are not
    filled in."""

    cdef bint fits(self, object signature, tuple args, dict kwargs):
        cdef Py_ssize_t pos = 0, i = 0
        cdef PyObject* key
        cdef PyObject* value
        if signature is not self.signature or PyTuple_GET_SIZE(args) != self.nargs:
            return False
        if PyDict_Size(kwargs) != PyTuple_GET_SIZE(self.kwnames):
            return False
        # Keyword names compared by address: a call site passes the same
        # interned names, in the same order, every time.
        while PyDict_Next(kwargs, &pos, &key, &value):
            if key != PyTuple_GET_ITEM(self.kwnames, i):
                return False
            i += 1
        return True

    cdef tuple bind(self, tuple args, dict kwargs):
        """(bound args, bound kwargs)."""
        cdef Py_ssize_t i
        if self.as_is:
            return (args, _NO_KWARGS)
        cdef tuple bound_args = PyTuple_New(PyTuple_GET_SIZE(self.arg_sources))
        for i in range(PyTuple_GET_SIZE(self.arg_sources)):
            value = bound_argument(<object>PyTuple_GET_ITEM(self.arg_sources, i), args, kwargs)
            Py_INCREF(value)
            PyTuple_SET_ITEM(bound_args, i, value)
        cdef dict bound_kwargs = _NO_KWARGS
        if PyTuple_GET_SIZE(self.kwarg_names):
            bound_kwargs = {}
            for i in range(PyTuple_GET_SIZE(self.kwarg_names)):
                bound_kwargs[<object>PyTuple_GET_ITEM(self.kwarg_names, i)] = bound_argument(
                    <object>PyTuple_GET_ITEM(self.kwarg_sources, i), args, kwargs)
        return (bound_args, bound_kwargs)


cdef BindPlan make_plan(object signature, tuple args, dict kwargs):
    cdef BindPlan plan = BindPlan.__new__(BindPlan)
    cdef _ArgumentStandIn marker
    plan.signature = signature
    plan.nargs = len(args)
    plan.kwnames = tuple(kwargs)
    positional = []
    for i in range(len(args)):
        marker = _ArgumentStandIn.__new__(_ArgumentStandIn)
        marker.source = i
        positional.append(marker)
    keywords = {}
    for name in kwargs:
        marker = _ArgumentStandIn.__new__(_ArgumentStandIn)
        marker.source = name
        keywords[name] = marker
    try:
        bound = signature.bind(*positional, **keywords)
    except TypeError:
        plan.refused = True
        return plan
    plan.arg_sources = tuple([(<_ArgumentStandIn>m).source for m in bound.args])
    plan.kwarg_names = tuple(bound.kwargs)
    plan.kwarg_sources = tuple([(<_ArgumentStandIn>m).source for m in bound.kwargs.values()])
    plan.sources = plan.arg_sources + plan.kwarg_sources
    plan.as_is = not kwargs and plan.arg_sources == tuple(range(len(args)))
    plan.arg_names = tuple(
        p.name for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return plan
