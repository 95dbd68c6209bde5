# cython: boundscheck=False, wraparound=False
"""How a jit call passed its arguments: its static arguments split off as jax
keys them (``split_static``), and ``CallShape``, a call's arguments' count,
keyword names and types, which the engine's hand-off memo keeps for calls
jax.jit takes.  (Where a call's leaves sit, for the guard, is CallLayout, in
function.pyx beside the parse that reads it.)
"""
cimport cython
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.engine cimport Call, PyVectorcall_NARGS, same_kwnames


def _first(triple):
    return triple[0]


cdef tuple split_static(tuple args, dict kwargs, tuple static_argnums, frozenset static_argnames):
    """(dynamic args, dynamic kwargs, static (label, type, value) triples).

    Static positions in increasing order, then static names in sorted
    order, so that the key does not depend on how the call spelled them."""
    cdef Py_ssize_t n = PyTuple_GET_SIZE(args), i, index
    cdef list static = []
    cdef list positions = None
    cdef tuple dynamic_args = args
    cdef dict dynamic_kwargs = kwargs
    for i in static_argnums:
        index = i + n if i < 0 else i
        if 0 <= index < n:
            if positions is None:
                positions = []
            positions.append(index)
    if positions is not None:
        if len(positions) > 1:
            positions.sort()
        for index in positions:
            value = <object>PyTuple_GET_ITEM(args, index)
            static += (index, type(value), value)
        dynamic_args = tuple([a for index, a in enumerate(args) if index not in positions])
    if kwargs and static_argnames:
        named = [(name, type(value), value) for name, value in kwargs.items()
                 if name in static_argnames]
        if named:
            if len(named) > 1:
                named.sort(key=_first)
            for triple in named:
                static += triple
            dynamic_kwargs = {name: value for name, value in kwargs.items()
                              if name not in static_argnames}
    return dynamic_args, dynamic_kwargs, tuple(static)


@cython.final
cdef class CallShape:
    """How a call passed its arguments: how many positionally, under which
    keyword names, of which types.  The engine's hand-off memo holds the shape
    of the last call jax.jit took for what its arguments are (see parse)."""

    cdef bint matches(self, Call* call):
        """The call's argument array holds as many arguments of the same
        types, under the same keyword names."""
        cdef Py_ssize_t i, n = PyVectorcall_NARGS(call.nargsf)
        if n != self.nargs or not same_kwnames(call, self.kwnames):
            return False
        if call.kwnames != NULL:
            n += PyTuple_GET_SIZE(<tuple>call.kwnames)
        for i in range(n):
            if type(<object>call.argv[i]) is not <object>PyTuple_GET_ITEM(self.arg_types, i):
                return False
        return True


cdef CallShape shape_of(Call* call):
    cdef CallShape shape = CallShape.__new__(CallShape)
    shape.nargs = PyVectorcall_NARGS(call.nargsf)
    shape.kwnames = None if call.kwnames == NULL else <object>call.kwnames
    cdef Py_ssize_t n = shape.nargs
    if call.kwnames != NULL:
        n += PyTuple_GET_SIZE(<tuple>call.kwnames)
    shape.arg_types = tuple([type(<object>call.argv[i]) for i in range(n)])
    return shape
