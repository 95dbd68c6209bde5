# cython: boundscheck=False, wraparound=False
"""Field layouts: a registered type whose flatten function reads named entries
of the instance ``__dict__`` (an equinox Module's fields, say) is read and
rebuilt here in C, as a front end's ``FieldLayout`` describes it
(``registry.add_field_reader`` teaches flatten the layouts).
"""
cimport cython
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem, PyDict_Size
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

cdef extern from "Python.h":
    dict PyObject_GenericGetDict(object o, void* context)


# What a FieldLayout's `absent` defaults to: no value is absent.
cdef object _NOTHING_ABSENT = object()
cdef object _object_new = object.__new__


@cython.final
cdef class FieldLayout:
    """A registered type's flatten, as data: the children are the instance
    __dict__'s values for ``children``; the aux data is ``aux_prefix`` followed
    by its values for ``aux_names``.  It holds for instances whose __dict__ has
    exactly ``dict_size`` entries, all of these among them; others are
    flattened by the registered function.  With ``direct_unflatten``, a node is
    rebuilt as ``object.__new__(type)`` and __dict__ writes (children, then aux
    names), skipping values that are ``absent``; that is for types whose
    unflatten does just that (no ``__init__``) and whose field names are not
    data descriptors on the type."""

    def __init__(self, children, aux_prefix, aux_names, Py_ssize_t dict_size, *,
                 bint direct_unflatten=False, absent=_NOTHING_ABSENT):
        self.children = tuple(children)
        self.aux_prefix = tuple(aux_prefix)
        self.aux_names = tuple(aux_names)
        self.dict_size = dict_size
        self.direct_unflatten = direct_unflatten
        self.absent = absent


@cython.final
cdef class DictOrder:
    """One order of a FieldLayout instance's __dict__: its keys, each read into
    a child (slot >= 0) or an aux item (slot -1 - index), so that the fields
    are read in one pass of the dict, keys compared by address (a class's
    field names are the same string objects in every instance)."""
    cdef tuple keys
    cdef Py_ssize_t* slots

    def __dealloc__(self):
        PyMem_Free(self.slots)


cdef DictOrder _learn_order(FieldLayout layout, dict d):
    cdef DictOrder order = DictOrder.__new__(DictOrder)
    cdef tuple keys = tuple(d)
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(keys)
    order.slots = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    if order.slots == NULL:
        raise MemoryError()
    for i in range(n):
        key = <object>PyTuple_GET_ITEM(keys, i)
        if key in layout.children:
            order.slots[i] = layout.children.index(key)
        else:
            order.slots[i] = -1 - layout.aux_names.index(key)
    order.keys = keys
    return order


cdef bint _read_in_order(DictOrder order, dict d, tuple children, tuple aux,
                         Py_ssize_t n_prefix) noexcept:
    """Fill ``children`` and ``aux`` from ``d`` in one pass, when its keys are
    ``order``'s, in its order, by address; else False (and the tuples are
    partly filled: the caller drops them)."""
    cdef Py_ssize_t pos = 0, i = 0, slot
    cdef PyObject* key
    cdef PyObject* value
    while PyDict_Next(d, &pos, &key, &value):
        if key != PyTuple_GET_ITEM(order.keys, i):
            return False
        slot = order.slots[i]
        Py_INCREF(<object>value)
        if slot >= 0:
            PyTuple_SET_ITEM(children, slot, <object>value)
        else:
            PyTuple_SET_ITEM(aux, n_prefix - 1 - slot, <object>value)
        i += 1
    return True


cdef tuple _new_aux(FieldLayout layout):
    """An aux tuple with the layout's prefix filled in, the rest to fill."""
    cdef Py_ssize_t i, n_prefix = PyTuple_GET_SIZE(layout.aux_prefix)
    cdef tuple aux = PyTuple_New(n_prefix + PyTuple_GET_SIZE(layout.aux_names))
    for i in range(n_prefix):
        Py_INCREF(<object>PyTuple_GET_ITEM(layout.aux_prefix, i))
        PyTuple_SET_ITEM(aux, i, <object>PyTuple_GET_ITEM(layout.aux_prefix, i))
    return aux


cdef inline tuple _read_by_order(FieldLayout layout, object order, dict d, Py_ssize_t n_prefix):
    """(children, aux) read from ``d`` by ``order`` (a DictOrder, or None),
    or None where ``d``'s keys are not in that order."""
    if order is None:
        return None
    cdef tuple children = PyTuple_New(PyTuple_GET_SIZE(layout.children))
    cdef tuple aux = _new_aux(layout)
    if _read_in_order(<DictOrder>order, d, children, aux, n_prefix):
        return children, aux
    return None


cdef tuple read_fields(FieldLayout layout, object tree):
    """(children, aux) read from the instance __dict__, or None when the
    instance does not have the layout's exact set of entries."""
    cdef dict d = PyObject_GenericGetDict(tree, NULL)
    cdef Py_ssize_t i, n_prefix = PyTuple_GET_SIZE(layout.aux_prefix)
    cdef Py_ssize_t n_children = PyTuple_GET_SIZE(layout.children)
    cdef PyObject* value
    if PyDict_Size(d) != layout.dict_size:
        return None
    cdef tuple read = _read_by_order(layout, layout.recent_order, d, n_prefix)
    if read is not None:
        return read
    cdef object order = layout.older_order
    read = _read_by_order(layout, order, d, n_prefix)
    if read is not None:
        layout.older_order = layout.recent_order
        layout.recent_order = order
        return read
    # Another order (or other keys): by name; the order is learnt when every
    # name is there.
    cdef tuple children = PyTuple_New(n_children)
    cdef tuple aux = _new_aux(layout)
    for i in range(n_children):
        value = PyDict_GetItem(d, <object>PyTuple_GET_ITEM(layout.children, i))
        if value == NULL:
            return None
        Py_INCREF(<object>value)
        PyTuple_SET_ITEM(children, i, <object>value)
    for i in range(PyTuple_GET_SIZE(layout.aux_names)):
        value = PyDict_GetItem(d, <object>PyTuple_GET_ITEM(layout.aux_names, i))
        if value == NULL:
            return None
        Py_INCREF(<object>value)
        PyTuple_SET_ITEM(aux, n_prefix + i, <object>value)
    layout.older_order = layout.recent_order
    layout.recent_order = _learn_order(layout, d)
    return children, aux


cdef bint has_layout_prefix(FieldLayout layout, object aux) noexcept:
    """``aux`` was read through the layout: its length and its very prefix."""
    cdef Py_ssize_t i, n_prefix = PyTuple_GET_SIZE(layout.aux_prefix)
    if type(aux) is not tuple:
        return False
    if PyTuple_GET_SIZE(aux) != n_prefix + PyTuple_GET_SIZE(layout.aux_names):
        return False
    for i in range(n_prefix):
        if PyTuple_GET_ITEM(aux, i) != PyTuple_GET_ITEM(layout.aux_prefix, i):
            return False
    return True


cdef object build_fields(object node_type, FieldLayout layout, tuple children, tuple aux):
    """The registered unflatten of a FieldLayout type, in C."""
    cdef object built = _object_new(node_type)
    cdef dict d = PyObject_GenericGetDict(built, NULL)
    cdef Py_ssize_t i, n_prefix = PyTuple_GET_SIZE(layout.aux_prefix)
    cdef object value
    for i in range(PyTuple_GET_SIZE(layout.children)):
        value = <object>PyTuple_GET_ITEM(children, i)
        if value is not layout.absent:
            PyDict_SetItem(d, <object>PyTuple_GET_ITEM(layout.children, i), value)
    for i in range(PyTuple_GET_SIZE(layout.aux_names)):
        value = <object>PyTuple_GET_ITEM(aux, n_prefix + i)
        if value is not layout.absent:
            PyDict_SetItem(d, <object>PyTuple_GET_ITEM(layout.aux_names, i), value)
    return built
