# cython: boundscheck=False, wraparound=False
"""A Record: a graph state an nnx.jit call left behind, proved again by its
guards, and how calls on it reach their executable and write back.

  guard      the arguments are the recorded roots, and the guards say that
             every object flax's split would visit holds what it held
             (types, attributes, containers, Variable metadata): the GraphDef
             is the recorded one, without computing it
  gather     each Variable's raw value (and each array attribute), straight
             from its slot, in flax's leaf order; other arguments' leaves
  scatter    the outputs straight into the same Variable slots; the
             function's own output rebuilt from its recorded structure

nnx/guards.py and nnx/graph.py build them from flax's split; the front end
(function.pyx) runs calls on them.
"""
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem, PyDict_Size
from cpython.exc cimport PyErr_Occurred
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, Py_TYPE
from cpython.ref cimport Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.cache cimport CacheEntry
from fastdispatch.core.pytree.flatten cimport flatten_into
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport CallSignature

from fastdispatch import _jax

cdef extern from "Python.h":
    dict PyObject_GenericGetDict(object o, void* context)
    ctypedef PyObject* (*descrgetfunc)(PyObject*, PyObject*, PyObject*)
    ctypedef int (*descrsetfunc)(PyObject*, PyObject*, PyObject*) except -1
    ctypedef struct _TypeWithDescr "PyTypeObject":
        descrgetfunc tp_descr_get
        descrsetfunc tp_descr_set

cdef object _ARRAY = _jax.ARRAY_TYPE
cdef object _KEY_ARRAY = _jax.KEY_ARRAY_TYPE

# Where an array attribute or value lives: its type is checked, not its
# identity (the fast path itself writes new arrays there).
ARRAY_SLOT = object()
# Where a node keeps its PytreeState: flax's merge puts a new one there on
# every call it runs, so its type is checked here and its flags by the
# node's FlagsGuard, never its identity (else each function's flax call
# would void the records of every other function on the same graph).
STATE_SLOT = object()

# Set by fastdispatch.nnx (configure): what of flax a record reads.
cdef object _raw_value = None          # Variable._raw_value, a slot (member descriptor)
cdef descrgetfunc _get_raw = NULL
cdef descrsetfunc _set_raw = NULL
cdef object _metadata = None           # Variable._var_metadata, a slot
cdef descrgetfunc _get_metadata = NULL
cdef tuple _flags_fields = ()          # PytreeState's flag slots, read by FlagsGuard
cdef object _state_type = None         # PytreeState


def configure(raw_value, metadata, flags_fields, state_type):
    """Hand records what they read of flax (called once by fastdispatch.nnx)."""
    global _raw_value, _get_raw, _set_raw, _metadata, _get_metadata, _flags_fields, _state_type
    _raw_value = raw_value
    _get_raw = (<_TypeWithDescr*>Py_TYPE(raw_value)).tp_descr_get
    _set_raw = (<_TypeWithDescr*>Py_TYPE(raw_value)).tp_descr_set
    _metadata = metadata
    _get_metadata = (<_TypeWithDescr*>Py_TYPE(metadata)).tp_descr_get
    _flags_fields = tuple(flags_fields)
    _state_type = state_type


def raw_value(variable):
    """A Variable's raw value, read from its slot."""
    return _slot_read(_raw_value, _get_raw, variable)


def metadata(variable):
    """A Variable's metadata dict, read from its slot."""
    return _slot_read(_metadata, _get_metadata, variable)


cdef PyObject* _raised() except NULL:
    # The error the C call before it set, raised to Python.
    return NULL


cdef inline object _slot_read(object descriptor, descrgetfunc get, object owner):
    """``descriptor.__get__(owner)`` through the descriptor's C slot."""
    cdef PyObject* value = get(<PyObject*>descriptor, <PyObject*>owner, NULL)
    if value == NULL:
        if PyErr_Occurred() != NULL:
            _raised()   # the descriptor's own error (an object that is not a Variable)
        raise AttributeError("an empty Variable slot")
    result = <object>value
    Py_XDECREF(value)
    return result


cdef inline bint _is_array(object value):
    cdef object value_type = type(value)
    return value_type is _ARRAY or value_type is _KEY_ARRAY


cdef inline bint _same_entries(dict d, tuple keys, tuple values) except -1:
    cdef Py_ssize_t i
    cdef PyObject* found
    cdef object expected
    for i in range(PyTuple_GET_SIZE(keys)):
        found = PyDict_GetItem(d, <object>PyTuple_GET_ITEM(keys, i))
        if found == NULL:
            return False
        expected = <object>PyTuple_GET_ITEM(values, i)
        if expected is ARRAY_SLOT:
            if not _is_array(<object>found):
                return False
        elif expected is STATE_SLOT:
            if type(<object>found) is not _state_type:
                return False
        elif found != <PyObject*>expected:
            return False
    return True


cdef class Guard:
    """One check of a Record's guard program: an object flax's split would
    visit still holds what it held when recorded (see nnx/guards.py)."""

    def holds_now(self):
        """Whether the object still holds what it held when recorded."""
        return self.holds()

    cdef bint holds(self) except -1:
        raise NotImplementedError


cdef class NodeGuard(Guard):
    """A graph node or a State: its type, and its __dict__'s recorded entries."""

    def __init__(self, target, tuple keys, tuple values):
        self.target, self.target_type = target, type(target)
        self.keys, self.values, self.size = keys, values, len(keys)

    cdef bint holds(self) except -1:
        if type(self.target) is not self.target_type:
            return False
        cdef dict d = PyObject_GenericGetDict(self.target, NULL)
        return PyDict_Size(d) == self.size and _same_entries(d, self.keys, self.values)


cdef class DictGuard(Guard):
    """A dict container of the graph: its recorded items."""

    def __init__(self, dict target, tuple keys, tuple values):
        self.target = target
        self.keys, self.values, self.size = keys, values, len(keys)

    cdef bint holds(self) except -1:
        cdef dict d = <dict>self.target
        return PyDict_Size(d) == self.size and _same_entries(d, self.keys, self.values)


cdef class ListGuard(Guard):
    """A list container of the graph: its recorded items, by identity."""

    def __init__(self, list target):
        self.target, self.values = target, tuple(target)

    cdef bint holds(self) except -1:
        cdef list items = <list>self.target
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self.values)
        if PyList_GET_SIZE(items) != n:
            return False
        for i in range(n):
            if PyList_GET_ITEM(items, i) != PyTuple_GET_ITEM(self.values, i):
                return False
        return True


cdef class VariableGuard(Guard):
    """A Variable: its type, a jax array as its value, its metadata."""

    def __init__(self, target, dict metadata):
        self.target, self.target_type, self.metadata = target, type(target), metadata

    cdef bint holds(self) except -1:
        cdef object target = self.target
        if type(target) is not self.target_type:
            return False
        if not _is_array(_slot_read(_raw_value, _get_raw, target)):
            return False
        metadata = _slot_read(_metadata, _get_metadata, target)
        return metadata is self.metadata or metadata == self.metadata


cdef class FlagsGuard(Guard):
    """A node's PytreeState (at ``key``, whichever object holds it now: flax's
    merge replaces it): its flags."""

    def __init__(self, target, str key, tuple flags):
        self.target, self.key, self.flags = target, key, flags

    cdef bint holds(self) except -1:
        cdef Py_ssize_t i
        state = PyObject_GenericGetDict(self.target, NULL).get(self.key)
        if type(state) is not _state_type:
            return False
        for i in range(PyTuple_GET_SIZE(_flags_fields)):
            if getattr(state, <str>PyTuple_GET_ITEM(_flags_fields, i)) is not \
                    <object>PyTuple_GET_ITEM(self.flags, i):
                return False
        return True


cdef class Input:
    """How one argument of a call reaches the executable."""

    def __init__(self, int kind, position, root=None, TreeDef treedef=None,
                 Py_ssize_t slot_start=0, Py_ssize_t slot_stop=0):
        self.kind, self.position = kind, position
        self.root, self.treedef = root, treedef
        self.slot_start, self.slot_stop = slot_start, slot_stop


cdef inline object _argument(object position, tuple args, dict kwargs):
    if type(position) is int:
        return <object>PyTuple_GET_ITEM(args, <Py_ssize_t>position)
    return <object>PyDict_GetItem(kwargs, position)


cdef class Record(Outputs):
    """A graph state a call left behind, proved again by its guards, and how
    calls on it reach their executable and write back: the Outputs of its
    calls (the graph's new values go to their slots, the function's own
    output is rebuilt)."""

    def __init__(self, Py_ssize_t nargs, tuple kwnames, tuple inputs, tuple statics, tuple guards,
                 tuple slots, CacheEntry entry, CallSignature signature, TreeDef out_treedef):
        # The graph: how calls on it are laid out, proved, read and written.
        self.nargs, self.kwnames, self.inputs, self.statics = nargs, kwnames, inputs, statics
        self.guards, self.slots, self.num_slots = guards, slots, len(slots)
        # The executable this record runs on it, and those of its other shapes.
        self.entry, self.signature, self.out_treedef = entry, signature, out_treedef
        self.shapes = {}

    cdef bint switch_to(self, CallSignature signature) except -1:
        """Make the executable of another shape (``signature``) of this graph
        the current one, when one is known and kept; whether it is."""
        found = self.shapes.pop(signature, None)
        if found is None:
            return False
        cdef CacheEntry entry = <CacheEntry>(<tuple>found)[0]
        if entry.evicted:
            return False
        self.add_shape(signature, entry, <TreeDef>(<tuple>found)[1])
        return True

    cdef int add_shape(self, CallSignature signature, CacheEntry entry, TreeDef out_treedef) except -1:
        """Make ``entry`` (the executable of ``signature`` on this graph) the
        current one, the current one one of the other shapes."""
        if not self.entry.evicted and not (self.signature == signature):
            self.shapes[self.signature] = (self.entry, self.out_treedef)
            if len(self.shapes) > MAX_SHAPES:
                del self.shapes[next(iter(self.shapes))]
        self.entry, self.signature, self.out_treedef = entry, signature, out_treedef
        return 0

    def shape_count(self):
        """How many shapes of this graph the record runs (the current one included)."""
        return 1 + len(self.shapes)

    cdef bint matches(self, tuple args, dict kwargs) except -1:
        """The call's layout, roots and static arguments are the recorded ones,
        and every guard holds."""
        cdef Py_ssize_t pos = 0, i = 0
        cdef PyObject* key
        cdef PyObject* value
        cdef Input input
        if PyTuple_GET_SIZE(args) != self.nargs or PyDict_Size(kwargs) != PyTuple_GET_SIZE(self.kwnames):
            return False
        while PyDict_Next(kwargs, &pos, &key, &value):
            if key != PyTuple_GET_ITEM(self.kwnames, i):
                return False
            i += 1
        for item in self.inputs:
            input = <Input>item
            if input.kind == INPUT_ROOT and _argument(input.position, args, kwargs) is not input.root:
                return False
        for position, expected in self.statics:
            given = _argument(position, args, kwargs)
            if given is not expected:
                try:
                    if type(given) is not type(expected) or not (given == expected):
                        return False
                except Exception:
                    return False   # flax's call reports it its way
        for guard in self.guards:
            if not (<Guard>guard).holds():
                return False
        return True

    cdef list gather(self, tuple args, dict kwargs):
        """The executable's inputs: each root's leaves from its slots, each other
        argument's leaves; None when an argument's structure changed."""
        cdef list leaves = []
        cdef Input input
        cdef Py_ssize_t j
        cdef TreeDef treedef
        for item in self.inputs:
            input = <Input>item
            if input.kind == INPUT_ROOT:
                for j in range(input.slot_start, input.slot_stop):
                    slot = <object>PyTuple_GET_ITEM(self.slots, j)
                    if type(slot) is tuple:
                        leaves.append(PyObject_GenericGetDict(slot[0], NULL)[slot[1]])
                    else:
                        leaves.append(_slot_read(_raw_value, _get_raw, slot))
            else:
                treedef = flatten_into(_argument(input.position, args, kwargs), leaves)
                if treedef is not input.treedef and not treedef.same_as(input.treedef):
                    return None
        return leaves

    def gather_now(self, tuple args, dict kwargs):
        """The leaves a call with these arguments would feed the executable (or None)."""
        return self.gather(args, kwargs)

    def write_slots(self, list outputs):
        """Write the roots' new values (the first outputs) into their slots."""
        self.write(outputs)

    cdef object rebuild(self, list outputs):
        """Write the roots' new values into their slots; return the function's output."""
        self.write(outputs)
        if self.out_treedef.num_nodes == 1 and self.out_treedef.num_leaves == 1:
            return <object>PyList_GET_ITEM(outputs, self.num_slots)
        return self.out_treedef.unflatten(outputs[self.num_slots:])

    cdef int write(self, list outputs) except -1:
        cdef Py_ssize_t j
        cdef object value
        for j in range(self.num_slots):
            slot = <object>PyTuple_GET_ITEM(self.slots, j)
            value = <object>PyList_GET_ITEM(outputs, j)
            if type(slot) is tuple:
                PyDict_SetItem(PyObject_GenericGetDict(slot[0], NULL), slot[1], value)
            else:
                _set_raw(<PyObject*>_raw_value, <PyObject*>slot, <PyObject*>value)
        return 0
