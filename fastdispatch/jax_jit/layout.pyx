# cython: boundscheck=False, wraparound=False
"""How a jit call passed its arguments, read from its argument array
(vectorcall) without flattening: ``CallLayout``, where the leaves and static
arguments of a call laid out as the previous one sit, so that jit's guard
reads them in place; ``CallShape``, a call's arguments' count, keyword names
and types, which the engine's hand-off memo keeps for calls jax.jit takes.
"""
cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

from fastdispatch.core.engine cimport Call
from fastdispatch.core.keys cimport same_items
from fastdispatch.core.signature cimport CallSignature, LEAF_HOST, classify_leaf

cdef extern from "Python.h":
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)


cdef inline bint _all_keyable(tuple values):
    for value in values:
        if classify_leaf(value) > LEAF_HOST:
            return False
    return True


cdef inline object _container_of(object value):
    """The exact list or tuple type of a value whose items are all leaves jax
    keys (``f(x, w=[w1, w2])``), else None."""
    cdef type kind = type(value)
    if (kind is list or kind is tuple) and _all_keyable(tuple(value)):
        return kind
    return None


cdef inline bint _same_keywords(PyObject* kwnames, object expected):
    """A call's keyword names (NULL: none) are ``expected`` (a tuple, or None).
    Names compared by address: identifiers are interned, and a call site
    passes the very same names (often the very same tuple) every time."""
    if kwnames == NULL or expected is None:
        return kwnames == NULL and expected is None
    return same_items(<tuple>kwnames, <tuple>expected)


@cython.final
cdef class CallLayout:
    """Where the leaves of a call sit in its argument array, for calls whose
    every dynamic argument is a leaf or a list or tuple of leaves, e.g.
    ``f(x, y)``, ``f(x, lr=0.1, mode="eval")``, ``f(x, 3, y=y)`` with the 3
    static, or ``f(x, w=[w1, w2], b=[b1, b2])``.

    A call with the same keyword names, in the same order, as many positional
    arguments, and lists and tuples of the same lengths where the previous
    call had them, has the previous call's structure: its leaves can be read
    from the array, in jax's order (positional, then keywords by sorted name;
    a list's items in order), without flattening, and its static values
    compared in place."""

    cdef tuple guard(self, Call* call, CallSignature signature):
        """The call's leaves, in flatten order, where the call is laid out as
        this one and they and its static arguments pass the signature's
        guard; else None."""
        cdef Py_ssize_t nargs = PyVectorcall_NARGS(call.nargsf)
        cdef tuple leaves
        if nargs != self.nargs or not _same_keywords(call.kwnames, self.kwnames):
            return None
        if not self._statics_match(call.argv, signature.static_args):
            return None
        if self.leaf_index is None:
            if signature.matches_leaves(call.argv, nargs):
                return tuple_from_array(call.argv, nargs)
            return None
        leaves = self._gather(call.argv)
        if leaves is not None and signature.matches_leaves(PySequence_Fast_ITEMS(leaves),
                                                           PyTuple_GET_SIZE(leaves)):
            return leaves
        return None

    cdef tuple _gather(self, PyObject** argv):
        """The call's leaves, or None where a list or tuple is not the previous
        call's type and length (only the guard asks that of a new call)."""
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self.leaf_index)
        cdef tuple leaves
        cdef object item
        if self.containers is None:
            leaves = PyTuple_New(n)
            for i in range(n):
                item = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.leaf_index, i)]
                Py_INCREF(item)
                PyTuple_SET_ITEM(leaves, i, item)
            return leaves
        cdef list gathered = []
        for i in range(n):
            item = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.leaf_index, i)]
            kind = <object>PyTuple_GET_ITEM(self.containers, i)
            if kind is None:
                gathered.append(item)
            elif (type(item) is kind and len(item)
                    == <Py_ssize_t><object>PyTuple_GET_ITEM(self.lengths, i)):
                gathered.extend(item)
            else:
                return None
        return tuple(gathered)

    cdef bint _statics_match(self, PyObject** argv, tuple static_args):
        # static_args holds (name, type, value) triples in static_index's order.
        cdef Py_ssize_t i
        for i in range(PyTuple_GET_SIZE(self.static_index)):
            value = <object>argv[<Py_ssize_t><object>PyTuple_GET_ITEM(self.static_index, i)]
            expected = <object>PyTuple_GET_ITEM(static_args, 3 * i + 2)
            if type(value) is not <object>PyTuple_GET_ITEM(static_args, 3 * i + 1):
                return False
            if value is not expected:
                try:
                    if not value == expected:
                        return False
                except Exception:
                    return False    # the general path reports it as jax does
        return True


cdef CallLayout layout_of(tuple args, dict kwargs, object kwnames,
                          frozenset static_names, CallSignature signature):
    """The CallLayout of a call, or None when some dynamic argument is neither
    a leaf nor a list or tuple of leaves."""
    cdef tuple static_args = signature.static_args
    cdef Py_ssize_t nargs = PyTuple_GET_SIZE(args)
    # Static positions come first in static_args, in increasing order.
    cdef tuple static_positions = tuple([label for label in static_args[::3] if type(label) is int])
    cdef tuple dynamic_positions = tuple([i for i in range(nargs) if i not in static_positions])
    dynamic_names = sorted(name for name in kwnames or () if name not in static_names)
    cdef list values = [args[i] for i in dynamic_positions] + [kwargs[name] for name in dynamic_names]
    # None for a leaf, else the list or tuple type of leaves it is.
    cdef list kinds = []
    for value in values:
        kind = None
        if classify_leaf(value) > LEAF_HOST:
            kind = _container_of(value)
            if kind is None:
                return None
        kinds.append(kind)
    containers = tuple(kinds)
    cdef CallLayout layout = CallLayout.__new__(CallLayout)  # leaf_index, containers, lengths: None
    layout.kwnames = kwnames
    layout.nargs = nargs
    layout.static_index = static_positions
    cdef bint nested = any(kind is not None for kind in containers)
    if kwnames is not None or static_positions or nested:
        layout.leaf_index = dynamic_positions + tuple(
            nargs + kwnames.index(name) for name in dynamic_names)
        layout.static_index += tuple(
            nargs + kwnames.index(name)
            for name in sorted(name for name in kwnames or () if name in static_names))
    if nested:
        layout.containers = containers
        layout.lengths = tuple([0 if kind is None else len(value)
                                for value, kind in zip(values, containers)])
    num_leaves = sum([1 if kind is None else len(value) for value, kind in zip(values, containers)])
    return layout if num_leaves == signature.treedef.num_leaves else None


@cython.final
cdef class CallShape:
    """How a call passed its arguments: how many positionally, under which
    keyword names, of which types.  The engine's hand-off memo holds the shape
    of the last call jax.jit took for what its arguments are (see parse)."""

    cdef bint matches(self, Call* call):
        """The call's argument array holds as many arguments of the same
        types, under the same keyword names."""
        cdef Py_ssize_t i, n = PyVectorcall_NARGS(call.nargsf)
        if n != self.nargs or not _same_keywords(call.kwnames, self.kwnames):
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
