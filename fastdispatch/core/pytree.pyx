# cython: boundscheck=False, wraparound=False
"""Pytrees at C speed: ``flatten``, ``TreeDef`` and ``unflatten``.

Leaf order, structure, equality and repr are ``jax.tree_util``'s.  Built-in
containers (tuple, list, dict, None) are walked with exact type checks and
C-API access; every other node type is looked up once in jax's own registry
(through ``fastdispatch._jax.pytree_registry``), so a type registered with
jax is a node here too, even if registered after import.

Three caches keep repeated calls cheap (a dispatcher flattens the same shapes
again and again):

* dict key order: a dict whose keys are the same objects, in the same order,
  as a dict seen before reuses that dict's sorted order instead of sorting
  (jax sorts on every call: ~40 us for two 100-leaf dicts);
* node memos: a container whose children came out identical to the last node
  built for the same shape reuses that node, so flattening the same structure
  twice returns the *same* ``TreeDef`` object and comparing them is a pointer
  compare;
* node types: what a Python type is (leaf, namedtuple, registered node) is
  decided once per type and looked up again when jax's registry grows.

No cache keeps a leaf or a container alive: memos hold TreeDefs, whose only
foreign references are dict keys and the aux data of registered nodes, and a
registered node's TreeDef is only memoised when its aux data is made of
atoms (None, str, int, float, bool, bytes and tuples of them).
"""
import dataclasses
import importlib

cimport cython
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem, PyDict_Size
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport Py_EQ, PyObject, PyObject_Call, PyObject_RichCompareBool
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_Compare
from libc.stdlib cimport bsearch, qsort

from fastdispatch.core.keys cimport Py_uhash_t, XXPRIME_5, hash_mix as _mix, same_items
from fastdispatch._jax import (
    dataclass_fields as _dataclass_fields, flatten_one_level_with_keys as _flatten_one_level_with_keys,
    pytree_registry)

cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)
    dict PyObject_GenericGetDict(object o, void* context)


cdef enum:
    # Deeper than this and flatten stops: jax's own flatten fails near Python's
    # recursion limit (1000) too, so no tree that jax can flatten is refused.
    MAX_DEPTH = 1000
    # Direct-mapped caches: dict key orders (two-way: slot s and s ^ 1) and the
    # last tuple/list node of each arity (mod SEQ_SLOTS).
    DICT_SLOTS = 512
    SEQ_SLOTS = 64
    # Types seen; cleared past this many so classes made in a loop cannot pile up.
    MAX_NODE_TYPES = 4096
    # Memoised nodes per registered type (one per distinct aux value).
    MAX_MEMOS_PER_TYPE = 256
    # Of those, the last met, checked first by address (a model's layers of a
    # few shapes, flattened in turn).
    RECENT_MEMOS = 4

# ----------------------------------------------------------------------------
# TreeDef
# ----------------------------------------------------------------------------


@cython.final
@cython.freelist(64)
cdef class TreeDef:
    """The structure of a pytree: its containers and where the leaves go.

    Made by :func:`flatten`; equal (and hashing equal) to another TreeDef
    exactly when ``jax.tree_util`` would call the two structures equal.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("TreeDef cannot be created directly; use fastdispatch.core.pytree.flatten(tree)")

    cdef bint same_as(self, TreeDef other) except -1:
        cdef Py_ssize_t i, n
        if self is other:
            return True
        if (self._hash != other._hash or self.kind != other.kind
                or self.num_leaves != other.num_leaves or self.num_nodes != other.num_nodes
                or self.node_type is not other.node_type):
            return False
        n = PyTuple_GET_SIZE(self.children)
        if n != PyTuple_GET_SIZE(other.children):
            return False
        if self.kind == NODE_DICT:
            if self.node_data is not other.node_data and (
                    (<DictKeys>self.node_data).sorted_keys != (<DictKeys>other.node_data).sorted_keys):
                return False
        elif self.kind == NODE_CUSTOM:
            if self.node_data is not other.node_data and not (self.node_data == other.node_data):
                return False
        for i in range(n):
            if not (<TreeDef>PyTuple_GET_ITEM(self.children, i)).same_as(
                    <TreeDef>PyTuple_GET_ITEM(other.children, i)):
                return False
        return True

    def __eq__(self, other):
        if not isinstance(other, TreeDef):
            return NotImplemented
        return self.same_as(<TreeDef>other)

    def __ne__(self, other):
        if not isinstance(other, TreeDef):
            return NotImplemented
        return not self.same_as(<TreeDef>other)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"PyTreeDef({_node_repr(self)})"

    def __reduce__(self):
        cdef object data = None
        if self.kind == NODE_DICT:
            data = (<DictKeys>self.node_data).sorted_keys
        elif self.kind == NODE_CUSTOM:
            data = self.node_data
        return _treedef_from_state, (self.kind, self.node_type, data, self.children)

    cpdef object unflatten(self, object leaves):
        """Build the tree of this structure with these leaves (jax's leaf order)."""
        cdef Py_ssize_t index = 0
        cdef list leaf_list
        if type(leaves) is list:
            leaf_list = <list>leaves
        else:
            leaf_list = list(leaves)
        cdef Py_ssize_t got = PyList_GET_SIZE(leaf_list)
        if got < self.num_leaves:
            raise ValueError(
                f"Too few leaves for PyTreeDef; expected {self.num_leaves}, got {got}.")
        if got > self.num_leaves:
            raise ValueError(
                f"Too many leaves for PyTreeDef; expected {self.num_leaves}, got {got}.")
        return self._build(leaf_list, &index)

    cdef object _build(self, list leaves, Py_ssize_t* index):
        cdef Py_ssize_t i, n = PyTuple_GET_SIZE(self.children)
        cdef object value, built
        cdef DictKeys keys
        cdef dict kwargs
        cdef NodeType info
        if self.kind == NODE_LEAF:
            i = index[0]
            if i >= PyList_GET_SIZE(leaves):  # only if a from_iter emptied the list
                raise ValueError("TreeDef.unflatten: the leaves list changed while unflattening")
            index[0] = i + 1
            return <object>PyList_GET_ITEM(leaves, i)
        if self.kind == NODE_NONE:
            return None
        if self.kind == NODE_LIST:
            built = PyList_New(n)
            for i in range(n):
                value = (<TreeDef>PyTuple_GET_ITEM(self.children, i))._build(leaves, index)
                Py_INCREF(value)
                PyList_SET_ITEM(built, i, value)
            return built
        if self.kind == NODE_DICT:
            keys = <DictKeys>self.node_data
            built = _PyDict_NewPresized(n)
            for i in range(n):
                value = (<TreeDef>PyTuple_GET_ITEM(self.children, i))._build(leaves, index)
                PyDict_SetItem(built, <object>PyTuple_GET_ITEM(keys.sorted_keys, i), value)
            return built
        # tuple and every other node: first the children as a tuple
        built = PyTuple_New(n)
        for i in range(n):
            value = (<TreeDef>PyTuple_GET_ITEM(self.children, i))._build(leaves, index)
            Py_INCREF(value)
            PyTuple_SET_ITEM(built, i, value)
        if self.kind == NODE_TUPLE:
            return built
        if self.kind == NODE_NAMEDTUPLE:
            return self.node_type(*built)
        info = self.info
        if info.kind == NODE_DATACLASS:
            if info.direct_fields is not None:
                return _build_dataclass(self.node_type, info.direct_fields, self.node_data, built)
            # register_dataclass's own unflatten: nodetype(**meta, **data), built in C.
            kwargs = {}
            for i in range(PyTuple_GET_SIZE(info.meta_fields)):
                PyDict_SetItem(kwargs, <object>PyTuple_GET_ITEM(info.meta_fields, i),
                               <object>PyTuple_GET_ITEM(self.node_data, i))
            for i in range(n):
                PyDict_SetItem(kwargs, <object>PyTuple_GET_ITEM(info.data_fields, i),
                               <object>PyTuple_GET_ITEM(built, i))
            return PyObject_Call(self.node_type, (), kwargs)
        if (info.kind == NODE_FIELDS and info.layout.direct_unflatten
                and _has_layout_prefix(info.layout, self.node_data)):
            return _build_fields(self.node_type, info.layout, built, self.node_data)
        return info.from_iter(self.node_data, built)

    def leaf_paths(self):
        """One path per leaf, in leaf order: a tuple of jax.tree_util key entries
        (``(SequenceKey(0), DictKey('w'))``), as ``tree_flatten_with_path`` gives;
        the root leaf's path is ``()``."""
        cdef list paths = []
        _collect_paths(self, (), paths)
        return paths

    def to_jax(self):
        """The same structure as a ``jax.tree_util.PyTreeDef``."""
        return _to_jax(self)


cdef inline TreeDef _new_node(int kind, object node_type, object node_data, tuple children,
                              NodeType info, Py_uhash_t data_hash, bint own_cacheable):
    """A node over already-built children; its counts and hash are computed here, once."""
    cdef TreeDef node = TreeDef.__new__(TreeDef)
    cdef TreeDef child
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(children)
    cdef Py_ssize_t num_leaves = 0, num_nodes = 1
    cdef bint cacheable = own_cacheable
    cdef Py_uhash_t acc = _mix(_mix(_mix(XXPRIME_5, <Py_uhash_t>kind), <Py_uhash_t>n), data_hash)
    for i in range(n):
        child = <TreeDef>PyTuple_GET_ITEM(children, i)
        num_leaves += child.num_leaves
        num_nodes += child.num_nodes
        cacheable = cacheable and child.cacheable
        acc = _mix(acc, <Py_uhash_t>child._hash)
    node.kind = kind
    node.node_type = node_type
    node.node_data = node_data
    node.children = children
    node.info = info
    node.num_leaves = num_leaves
    node.num_nodes = num_nodes
    node.cacheable = cacheable
    if <Py_hash_t>acc == -1:
        acc = 1546275796
    node._hash = <Py_hash_t>acc
    return node


cdef TreeDef _make_singleton(int kind, object node_type, Py_ssize_t num_leaves):
    cdef TreeDef node = _new_node(kind, node_type, None, (), None, 0, True)
    node.num_leaves = num_leaves
    return node


# The leaf and None nodes are shared by every tree.
cdef TreeDef _LEAF_DEF = _make_singleton(NODE_LEAF, None, 1)
cdef TreeDef _NONE_DEF = _make_singleton(NODE_NONE, type(None), 0)


def _treedef_from_state(int kind, object node_type, object data, tuple children):
    """Rebuild a pickled TreeDef (see ``TreeDef.__reduce__``)."""
    cdef NodeType info = None
    cdef DictKeys keys
    if kind == NODE_LEAF:
        return _LEAF_DEF
    if kind == NODE_NONE:
        return _NONE_DEF
    if kind == NODE_TUPLE or kind == NODE_LIST:
        return _new_node(kind, node_type, None, children, None, 0, True)
    if kind == NODE_DICT:
        data = tuple(data)
        keys = _new_dict_keys(data, data)
        return _new_node(kind, dict, keys, children, None, <Py_uhash_t>keys.keys_hash, keys.atoms)
    _check_registry()
    info = _lookup_type(node_type)
    if info.kind == NODE_NAMEDTUPLE:
        return _new_node(NODE_NAMEDTUPLE, node_type, None, children, info, <Py_uhash_t>hash(node_type),
                         True)
    if info.kind == NODE_LEAF:
        raise TypeError(f"TreeDef: cannot unpickle a node of type {node_type!r}: "
                        "it is not registered as a pytree node in this process")
    atom = _aux_is_atom(info, data)
    return _new_node(NODE_CUSTOM, node_type, data, children, info,
                     _custom_hash(node_type, data, atom), atom)


# ----------------------------------------------------------------------------
# Node types: what each Python type is, decided once per type
# ----------------------------------------------------------------------------

@cython.final
cdef class NodeType:
    pass


cdef object _registry = pytree_registry()      # jax's dict: type -> (to_iter, from_iter)
cdef Py_ssize_t _registry_size = -1            # its size when _node_types was filled
cdef dict _node_types = {}                     # type -> NodeType
cdef object _last_leaf_type = None             # the leaf type seen last: one pointer compare
cdef NodeType _LEAF_INFO = NodeType.__new__(NodeType)
_LEAF_INFO.kind = NODE_LEAF


cdef inline void _check_registry():
    """Forget what we know of types when jax's registry has grown (it only grows)."""
    global _registry_size, _last_leaf_type
    if PyDict_Size(_registry) != _registry_size:
        _node_types.clear()
        _last_leaf_type = None
        _registry_size = PyDict_Size(_registry)


cdef inline NodeType _lookup_type(type t):
    cdef PyObject* found = PyDict_GetItem(_node_types, t)
    if found != NULL:
        return <NodeType>found
    return _classify_type(t)


cdef NodeType _classify_type(type t):
    cdef NodeType info
    cdef object entry = _registry.get(t)
    if entry is not None:
        info = NodeType.__new__(NodeType)
        info.node_type = t
        info.to_iter, info.from_iter = entry
        info.kind = NODE_CUSTOM
        fields = _dataclass_fields(info.to_iter)
        if fields is not None:
            info.kind = NODE_DATACLASS
            info.data_fields, info.meta_fields = fields
            info.direct_fields = _direct_fields(t, info.data_fields, info.meta_fields)
        else:
            if _lazy_readers and _load_lazy_reader(t):
                return _classify_type(t)
            for reader in _field_readers:
                layout = reader(t, info.to_iter)
                if layout is not None:
                    info.kind = NODE_FIELDS
                    info.layout = <FieldLayout?>layout
                    break
    elif issubclass(t, tuple) and hasattr(t, "_fields"):
        # jax flattens namedtuples natively; they are not in its Python registry.
        info = NodeType.__new__(NodeType)
        info.node_type = t
        info.kind = NODE_NAMEDTUPLE
    else:
        info = _LEAF_INFO
    if len(_node_types) >= MAX_NODE_TYPES:
        _node_types.clear()
    _node_types[t] = info
    return info


cdef bint _check_reader(NodeType info, object tree, tuple children, tuple aux) except -1:
    """True when reading the fields ourselves gives exactly what jax's to_iter gives."""
    expected = info.to_iter(tree)
    if type(expected) is not tuple or len(expected) != 2:
        return False
    exp_children, exp_aux = expected
    if type(exp_children) is not tuple or type(exp_aux) is not tuple:
        return False
    if len(exp_children) != len(children) or len(exp_aux) != len(aux):
        return False
    return (all(a is b for a, b in zip(exp_children, children))
            and all(a is b for a, b in zip(exp_aux, aux)))


cdef Py_uhash_t _custom_hash(object node_type, object aux, bint atom) except? 0:
    """hash(type), and hash(aux) where aux data is atoms; other aux data (a
    flax GraphDef: 12 us a hash, on every call) hashes as its type alone, as
    jaxlib's PyTreeDef hashes no node data at all (equality compares it)."""
    cdef Py_uhash_t h = <Py_uhash_t>hash(node_type)
    if aux is None or not atom:
        return h
    return _mix(h, <Py_uhash_t>hash(aux))


cdef bint _is_atom(object value, int depth) noexcept:
    """Aux data a memo may keep alive: nothing a user could be waiting to see collected."""
    cdef type t = type(value)
    cdef Py_ssize_t i
    if value is None or t is str or t is int or t is float or t is bool or t is bytes:
        return True
    if t is tuple and depth < 3:
        for i in range(PyTuple_GET_SIZE(value)):
            if not _is_atom(<object>PyTuple_GET_ITEM(value, i), depth + 1):
                return False
        return True
    return False


cdef inline bint _same_aux(object a, object b) noexcept:
    """Identical aux data, or tuples of identical items (register_dataclass makes a new
    meta tuple per call): reusing the old node then changes nothing observable."""
    if a is b:
        return True
    return type(a) is tuple and type(b) is tuple and same_items(<tuple>a, <tuple>b)


def _direct_fields(type cls, tuple data_fields, tuple meta_fields):
    """For a register_dataclass type whose constructor does nothing but store
    its fields (the one dataclasses generates: no __post_init__, no slots, no
    custom __new__ or metaclass, every field an init field and a registered
    one), ``(name, from_meta, index)`` per field in the class's order: such an
    instance is built by writing its __dict__, as that constructor would,
    skipping its Python frame (and a frozen class's object.__setattr__ per
    field).  None for any other class: its constructor is called."""
    if type(cls) is not type or not dataclasses.is_dataclass(cls):
        return None
    init = cls.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    if code is None or code.co_filename != "<string>" or init.__qualname__ != cls.__qualname__ + ".__init__":
        return None
    if (hasattr(cls, "__post_init__") or cls.__new__ is not object.__new__
            or any("__slots__" in vars(base) for base in cls.__mro__[:-1])):
        return None
    fields = dataclasses.fields(cls)
    if not all(f.init for f in fields) or any(
            f.type is dataclasses.InitVar or isinstance(f.type, dataclasses.InitVar) for f in fields):
        return None
    names = [f.name for f in fields]
    if sorted(names) != sorted(data_fields + meta_fields):
        return None
    return tuple((name, name in meta_fields,
                  meta_fields.index(name) if name in meta_fields else data_fields.index(name))
                 for name in names)


cdef object _build_dataclass(object node_type, tuple fields, tuple meta, tuple data):
    cdef object node = _object_new(node_type)
    cdef dict attributes = PyObject_GenericGetDict(node, NULL)
    cdef tuple field
    for item in fields:
        field = <tuple>item
        PyDict_SetItem(attributes, <object>PyTuple_GET_ITEM(field, 0), <object>PyTuple_GET_ITEM(
            meta if <object>PyTuple_GET_ITEM(field, 1) is True else data,
            <Py_ssize_t><object>PyTuple_GET_ITEM(field, 2)))
    return node


# ----------------------------------------------------------------------------
# Field layouts: registered types whose flatten reads the instance __dict__
# ----------------------------------------------------------------------------

# What a FieldLayout's `absent` defaults to: no value is absent.
cdef object _NOTHING_ABSENT = object()
cdef object _object_new = object.__new__
cdef list _field_readers = []


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


def add_field_reader(reader):
    """Teach flatten a family of registered types: ``reader(type, to_iter)``
    returns a FieldLayout when ``to_iter`` (the registered flatten function of
    ``type``) reads the instance __dict__ as the layout says, else None.  The
    first instance of each type is checked against ``to_iter``, and any
    difference leaves the type to ``to_iter``.  (Front ends call this; the
    equinox front end registers equinox Modules.)"""
    global _registry_size
    if reader not in _field_readers:
        _field_readers.append(reader)
        _registry_size = -1      # classify every type again


# package -> the module whose import adds the field reader of that package's
# types (fastdispatch.equinox for equinox): loaded when the first such type is
# met, so that plain jit reads an equinox Module in C without a front end in use.
cdef dict _lazy_readers = {}


def add_lazy_field_reader(str package, str module):
    """Import ``module`` (which calls add_field_reader) when flatten first meets
    a registered type from ``package``, or derived from one of its types."""
    _lazy_readers[package] = module


cdef bint _load_lazy_reader(type t) except -1:
    cdef str package
    for base in t.__mro__:
        package = (getattr(base, "__module__", None) or "").partition(".")[0]
        module = _lazy_readers.pop(package, None)
        if module is not None:
            importlib.import_module(module)
            return True
    return False


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


cdef tuple _read_fields(FieldLayout layout, object tree):
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


cdef bint _has_layout_prefix(FieldLayout layout, object aux) noexcept:
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


cdef object _build_fields(object node_type, FieldLayout layout, tuple children, tuple aux):
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


cdef bint _aux_is_atom(NodeType info, object aux) noexcept:
    """Aux data a memo may keep: atoms; a FieldLayout's own prefix is kept anyway."""
    cdef Py_ssize_t i, n_prefix
    if info.kind != NODE_FIELDS or not _has_layout_prefix(info.layout, aux):
        return _is_atom(aux, 0)
    n_prefix = PyTuple_GET_SIZE(info.layout.aux_prefix)
    for i in range(n_prefix, PyTuple_GET_SIZE(aux)):
        if not _is_atom(<object>PyTuple_GET_ITEM(aux, i), 1):
            return False
    return True


# ----------------------------------------------------------------------------
# Dict key order
# ----------------------------------------------------------------------------

@cython.final
cdef class DictKeys:
    def __dealloc__(self):
        PyMem_Free(self.order)


cdef DictKeys _new_dict_keys(tuple insertion, tuple sorted_keys):
    """Key orders for a dict whose keys are `insertion`, `sorted_keys` being the same
    key objects in jax's order."""
    cdef DictKeys keys = DictKeys.__new__(DictKeys)
    cdef Py_ssize_t n = PyTuple_GET_SIZE(insertion)
    keys.insertion = insertion
    keys.sorted_keys = sorted_keys
    keys.keys_hash = hash(sorted_keys)
    keys.atoms = _is_atom(insertion, 0)
    keys.order = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    if keys.order == NULL:
        raise MemoryError()
    _fill_order(insertion, sorted_keys, keys.order)
    return keys


cdef struct KeyIndex:
    PyObject* key
    Py_ssize_t index


cdef int _by_address(const void* a, const void* b) noexcept nogil:
    cdef size_t x = <size_t>(<KeyIndex*>a).key, y = <size_t>(<KeyIndex*>b).key
    return (x > y) - (x < y)


cdef int _fill_order(tuple insertion, tuple sorted_keys, Py_ssize_t* order) except -1:
    """order[j] = the insertion index of sorted_keys[j], matching key objects by
    address (no user __eq__ or __hash__ runs): a C sort of (address, index) pairs
    and a binary search per key."""
    cdef Py_ssize_t j, n = PyTuple_GET_SIZE(insertion)
    cdef KeyIndex probe
    cdef KeyIndex* found
    cdef KeyIndex* pairs = <KeyIndex*>PyMem_Malloc((n + 1) * sizeof(KeyIndex))
    if pairs == NULL:
        raise MemoryError()
    for j in range(n):
        pairs[j].key = PyTuple_GET_ITEM(insertion, j)
        pairs[j].index = j
    qsort(pairs, n, sizeof(KeyIndex), _by_address)
    for j in range(n):
        probe.key = PyTuple_GET_ITEM(sorted_keys, j)
        found = <KeyIndex*>bsearch(&probe, pairs, n, sizeof(KeyIndex), _by_address)
        order[j] = found.index  # always found: the same key objects
    PyMem_Free(pairs)
    return 0


cdef list _dict_slots = [None] * DICT_SLOTS
cdef TreeDef _EMPTY_DICT_DEF = _new_node(NODE_DICT, dict, _new_dict_keys((), ()), (), None,
                                         <Py_uhash_t>hash(()), True)


cdef inline Py_ssize_t _dict_slot(PyObject* first_key, Py_ssize_t n):
    cdef Py_uhash_t h
    if type(<object>first_key) is str or type(<object>first_key) is int:
        h = <Py_uhash_t>hash(<object>first_key)  # cached in a str; cheap for an int
    else:
        h = (<Py_uhash_t>first_key) >> 4
    return <Py_ssize_t>((h ^ (<Py_uhash_t>n * XXPRIME_5)) & (DICT_SLOTS - 1))


cdef inline bint _same_key(PyObject* cached, PyObject* key):
    """The same key object, or an equal str or int (keys rebuilt each call, e.g.
    f-strings): indistinguishable but for their address. Other equal keys (1 and
    1.0, or user objects) do not match: unflatten gives back keys of the same
    type and value as the caller's, and no user __eq__ runs here."""
    if cached == key:
        return True
    if type(<object>cached) is str and type(<object>key) is str:
        return PyUnicode_Compare(<object>cached, <object>key) == 0
    if type(<object>cached) is int and type(<object>key) is int:
        return PyObject_RichCompareBool(<object>cached, <object>key, Py_EQ) == 1
    return False


cdef inline bint _keys_match(object entry, PyObject* first_key, Py_ssize_t n):
    if entry is None:
        return False
    cdef DictKeys keys = <DictKeys>entry
    return (PyTuple_GET_SIZE(keys.insertion) == n
            and _same_key(PyTuple_GET_ITEM(keys.insertion, 0), first_key))


cdef inline DictKeys _candidate_keys(PyObject* first_key, Py_ssize_t n, Py_ssize_t slot):
    """The cached key order in `slot` or its pair whose length and first key match."""
    cdef object entry = <object>PyList_GET_ITEM(_dict_slots, slot)
    if _keys_match(entry, first_key, n):
        return <DictKeys>entry
    entry = <object>PyList_GET_ITEM(_dict_slots, slot ^ 1)
    if _keys_match(entry, first_key, n):
        return <DictKeys>entry
    return None


cdef DictKeys _sort_dict_keys(dict d, Py_ssize_t slot):
    """Sort a dict's keys as jax does (list.sort on the keys) and remember the order."""
    cdef tuple insertion = tuple(d)
    cdef list sorted_list = list(insertion)
    try:
        sorted_list.sort()
    except Exception as error:
        # jax's wording (pytree.cc), with the comparison error as the cause.
        raise ValueError(
            "Comparator raised exception while sorting pytree dictionary keys.") from error
    cdef DictKeys keys = _new_dict_keys(insertion, tuple(sorted_list))
    # Two-way slot: the newcomer takes the slot, the old occupant moves to its pair.
    # Keys that are user objects are not cached: the cache must not keep them alive.
    if keys.atoms:
        _dict_slots[slot ^ 1] = _dict_slots[slot]
        _dict_slots[slot] = keys
    return keys


# ----------------------------------------------------------------------------
# Flatten
# ----------------------------------------------------------------------------

# The last tuple and list node of each arity (mod SEQ_SLOTS); the last dict node
# per key order lives in its DictKeys, the last node per type in its NodeType.
cdef list _tuple_memo = [None] * SEQ_SLOTS
cdef list _list_memo = [None] * SEQ_SLOTS


cdef int node_kind(object node) except -1:
    cdef type t = type(node)
    if t is tuple:
        return NODE_TUPLE
    if t is list:
        return NODE_LIST
    if t is dict:
        return NODE_DICT
    if node is None:
        return NODE_NONE
    _check_registry()
    cdef NodeType info = _lookup_type(t)
    if info.kind == NODE_FIELDS:
        if info.checked and _read_fields(info.layout, node) is not None:
            return NODE_FIELDS
        return NODE_CUSTOM
    if info.kind == NODE_DATACLASS:
        return NODE_CUSTOM
    return info.kind


cdef TreeDef flatten_into(object tree, list leaves):
    """Append the leaves of `tree` to `leaves` in jax's order and return its TreeDef."""
    cdef PyObject* path[MAX_DEPTH + 1]
    _check_registry()
    return _flatten(tree, leaves, 0, path)


cdef TreeDef _flatten(object tree, list leaves, int depth, PyObject** path):
    cdef type t = type(tree)
    if t is _last_leaf_type:
        leaves.append(tree)
        return _LEAF_DEF
    if t is tuple:
        return _flatten_sequence(tree, PyTuple_GET_SIZE(tree), NODE_TUPLE, tuple, _tuple_memo,
                                 leaves, depth, path)
    if t is list:
        return _flatten_sequence(tree, PyList_GET_SIZE(tree), NODE_LIST, list, _list_memo,
                                 leaves, depth, path)
    if t is dict:
        return _flatten_dict(<dict>tree, leaves, depth, path)
    if tree is None:
        return _NONE_DEF
    cdef NodeType info = _lookup_type(t)
    if info.kind == NODE_LEAF:
        _remember_leaf_type(t)
        leaves.append(tree)
        return _LEAF_DEF
    return _flatten_node(tree, info, leaves, depth, path)


cdef inline void _remember_leaf_type(type t):
    global _last_leaf_type
    _last_leaf_type = t


cdef inline int _enter(object tree, int depth, PyObject** path) except -1:
    """Record `tree` on the path; past MAX_DEPTH, explain why we stop."""
    cdef int i
    if depth >= MAX_DEPTH:
        for i in range(depth):
            if path[i] == <PyObject*>tree:
                raise RecursionError(
                    f"flatten: the tree has a cycle: a {type(tree).__name__} contains itself "
                    f"(found {depth} containers deep). A pytree must not contain itself.")
        raise RecursionError(
            f"flatten: the tree is nested more than {MAX_DEPTH} containers deep "
            f"(at a {type(tree).__name__}); this usually means a cycle, e.g. a "
            "registered node whose flatten function returns a new node every time.")
    path[depth] = <PyObject*>tree
    return 0


cdef tuple _copy_prefix(tuple memo_children, Py_ssize_t count, Py_ssize_t n):
    """A new children tuple of size n starting with the memo's first `count` children."""
    cdef tuple children = PyTuple_New(n)
    cdef Py_ssize_t i
    cdef object child
    for i in range(count):
        child = <object>PyTuple_GET_ITEM(memo_children, i)
        Py_INCREF(child)
        PyTuple_SET_ITEM(children, i, child)
    return children


cdef tuple _flatten_children(object seq, Py_ssize_t n, Py_ssize_t* order, tuple fields,
                             list leaves, int depth, PyObject** path, TreeDef memo):
    """Flatten the n items of `seq` (a tuple or list; through `order` if given),
    or with `fields`, the attributes of that name of `seq` (a dataclass node).

    Returns None when every child came out identical to `memo`'s children (the
    caller then reuses `memo`), else the new children tuple.
    """
    cdef tuple children = None
    cdef bint is_list = type(seq) is list
    cdef Py_ssize_t i, src
    cdef object item
    cdef TreeDef child
    if memo is None:
        children = PyTuple_New(n)
    for i in range(n):
        src = i if order == NULL else order[i]
        if fields is not None:
            item = getattr(seq, <str>PyTuple_GET_ITEM(fields, i))
        elif is_list:
            if src >= PyList_GET_SIZE(seq):
                raise RuntimeError("flatten: a list changed size while it was being flattened")
            item = <object>PyList_GET_ITEM(seq, src)
        else:
            item = <object>PyTuple_GET_ITEM(seq, src)
        child = _flatten(item, leaves, depth, path)
        if children is None:
            if <PyObject*>child == PyTuple_GET_ITEM(memo.children, i):
                continue
            children = _copy_prefix(memo.children, i, n)
        Py_INCREF(child)
        PyTuple_SET_ITEM(children, i, child)
    return children


cdef TreeDef _flatten_sequence(object tree, Py_ssize_t n, NodeKind kind, object node_type,
                               list memos, list leaves, int depth, PyObject** path):
    """A tuple or a list: children in order, the node memoised per length."""
    cdef Py_ssize_t slot = n % SEQ_SLOTS
    cdef object memo_obj = <object>PyList_GET_ITEM(memos, slot)
    cdef TreeDef memo = None
    if memo_obj is not None and PyTuple_GET_SIZE((<TreeDef>memo_obj).children) == n:
        memo = <TreeDef>memo_obj
    _enter(tree, depth, path)
    cdef tuple children = _flatten_children(tree, n, NULL, None, leaves, depth + 1, path, memo)
    if children is None:
        return memo
    memo = _new_node(kind, node_type, None, children, None, 0, True)
    if memo.cacheable:
        memos[slot] = memo
    return memo


cdef TreeDef _flatten_dict(dict tree, list leaves, int depth, PyObject** path):
    cdef Py_ssize_t n = PyDict_Size(tree)
    if n == 0:
        return _EMPTY_DICT_DEF
    cdef Py_ssize_t pos = 0, i = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef tuple values = PyTuple_New(n)   # in the dict's own order
    cdef object held
    PyDict_Next(tree, &pos, &key, &value)
    cdef Py_ssize_t slot = _dict_slot(key, n)
    cdef DictKeys keys = _candidate_keys(key, n, slot)
    pos = 0
    while PyDict_Next(tree, &pos, &key, &value):
        if keys is not None and not _same_key(PyTuple_GET_ITEM(keys.insertion, i), key):
            keys = None
        held = <object>value
        Py_INCREF(held)
        PyTuple_SET_ITEM(values, i, held)
        i += 1
    if keys is None:
        keys = _sort_dict_keys(tree, slot)
    _enter(tree, depth, path)
    cdef TreeDef memo = keys.memo
    cdef tuple children = _flatten_children(values, n, keys.order, None, leaves, depth + 1, path, memo)
    if children is None:
        return memo
    memo = _new_node(NODE_DICT, dict, keys, children, None, <Py_uhash_t>keys.keys_hash, keys.atoms)
    if memo.cacheable:
        keys.memo = memo
    return memo


cdef TreeDef _flatten_node(object tree, NodeType info, list leaves, int depth, PyObject** path):
    """A namedtuple or a node in jax's registry."""
    cdef object result, seq, aux = None
    cdef tuple fields = None
    cdef TreeDef memo = None
    cdef PyObject* found
    cdef bint atom
    cdef tuple children
    cdef Py_ssize_t i, n
    _enter(tree, depth, path)
    if info.kind == NODE_NAMEDTUPLE:
        seq = tree
    elif info.kind == NODE_DATACLASS:
        # jax's C++ dataclass node, in C: getattr on the meta fields here and on
        # the data fields as the children are flattened (no Python call).
        aux = PyTuple_New(PyTuple_GET_SIZE(info.meta_fields))
        for i in range(PyTuple_GET_SIZE(info.meta_fields)):
            result = getattr(tree, <str>PyTuple_GET_ITEM(info.meta_fields, i))
            Py_INCREF(result)
            PyTuple_SET_ITEM(aux, i, result)
        if not info.checked:
            seq = tuple([getattr(tree, name) for name in info.data_fields])
            if not _check_reader(info, tree, <tuple>seq, <tuple>aux):
                info.kind = NODE_CUSTOM
                return _flatten_node(tree, info, leaves, depth, path)
            info.checked = True
        seq = tree
        fields = info.data_fields
    else:
        result = _read_fields(info.layout, tree) if info.kind == NODE_FIELDS else None
        if result is not None and not info.checked:
            if not _check_reader(info, tree, <tuple>result[0], <tuple>result[1]):
                info.kind = NODE_CUSTOM
                return _flatten_node(tree, info, leaves, depth, path)
            info.checked = True
        if result is None:
            result = info.to_iter(tree)
            if type(result) is not tuple or PyTuple_GET_SIZE(result) != 2:
                raise TypeError(
                    f"flatten: the flatten function registered for {info.node_type.__name__} "
                    f"returned {type(result).__name__}; expected a (children, aux_data) pair")
        seq = <object>PyTuple_GET_ITEM(result, 0)
        aux = <object>PyTuple_GET_ITEM(result, 1)
        if type(seq) is not tuple and type(seq) is not list:
            seq = tuple(seq)
    if fields is not None:
        n = PyTuple_GET_SIZE(fields)
    elif type(seq) is list:
        n = PyList_GET_SIZE(seq)
    else:  # a tuple, or a namedtuple: its C size, whatever its class says __len__ is
        n = PyTuple_GET_SIZE(seq)
    # Memoised per aux value (a dataclass's static fields, say), atoms only:
    # the last few nodes first, by the aux items' addresses, then by hash.
    memo = _recent_memo(info, aux, n)
    atom = True
    if memo is None:
        atom = _aux_is_atom(info, aux)
        if atom and info.memos is not None:
            found = PyDict_GetItem(info.memos, aux)
            if found != NULL:
                memo = <TreeDef>found
                if PyTuple_GET_SIZE(memo.children) != n or not _same_aux(memo.node_data, aux):
                    memo = None
                else:
                    _remember_recent(info, memo)
    children = _flatten_children(seq, n, NULL, fields, leaves, depth + 1, path, memo)
    if children is None:
        return memo
    if info.kind == NODE_NAMEDTUPLE:
        memo = _new_node(NODE_NAMEDTUPLE, info.node_type, None, children, info,
                         <Py_uhash_t>hash(info.node_type), True)
    else:
        atom = _aux_is_atom(info, aux)
        memo = _new_node(NODE_CUSTOM, info.node_type, aux, children, info,
                         _custom_hash(info.node_type, aux, atom), atom)
    if memo.cacheable:
        if info.memos is None or len(info.memos) >= MAX_MEMOS_PER_TYPE:
            info.memos = {}
        info.memos[aux] = memo
        _remember_recent(info, memo)
    return memo


cdef inline TreeDef _recent_memo(NodeType info, object aux, Py_ssize_t n):
    """One of the type's last RECENT_MEMOS nodes with n children and identical
    aux data (item by item), or None."""
    cdef Py_ssize_t i
    cdef TreeDef memo
    if info.recent is None:
        return None
    for i in range(PyList_GET_SIZE(info.recent)):
        memo = <TreeDef>PyList_GET_ITEM(info.recent, i)
        if PyTuple_GET_SIZE(memo.children) == n and _same_aux(memo.node_data, aux):
            return memo
    return None


cdef inline void _remember_recent(NodeType info, TreeDef memo):
    if info.recent is None:
        info.recent = []
    elif PyList_GET_SIZE(info.recent) >= RECENT_MEMOS:
        del info.recent[RECENT_MEMOS - 1]
    info.recent.insert(0, memo)


# ----------------------------------------------------------------------------
# Python API
# ----------------------------------------------------------------------------

def flatten(tree):
    """``(leaves, treedef)``: the leaves of `tree` in ``jax.tree_util``'s order and
    its structure. None is a node with no children, as in jax."""
    cdef list leaves = []
    cdef TreeDef treedef = flatten_into(tree, leaves)
    return leaves, treedef


def unflatten(TreeDef treedef, leaves):
    """The tree of structure `treedef` with these leaves (``treedef.unflatten``)."""
    return treedef.unflatten(leaves)


def first_difference(TreeDef a, TreeDef b):
    """Where and how structure `b` first differs from `a`, in leaf order:
    ``(path, what)``, with the path a tuple of jax.tree_util key entries and
    what, e.g., ``"key 'b' added"``, ``"list of 3 -> list of 4"`` or
    ``"tuple -> list"``; used to explain recompiles.  None when they are equal."""
    return _difference(a, b, ())


# ----------------------------------------------------------------------------
# repr, paths, differences, conversion to jax (not on the hot path)
# ----------------------------------------------------------------------------

cdef str _node_repr(TreeDef node):
    cdef list parts = [_node_repr(<TreeDef>child) for child in node.children]
    if node.kind == NODE_LEAF:
        return "*"
    if node.kind == NODE_NONE:
        return "None"
    if node.kind == NODE_TUPLE:
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if node.kind == NODE_LIST:
        return "[" + ", ".join(parts) + "]"
    if node.kind == NODE_DICT:
        keys = (<DictKeys>node.node_data).sorted_keys
        return "{" + ", ".join([f"{key!r}: {part}" for key, part in zip(keys, parts)]) + "}"
    if node.kind == NODE_NAMEDTUPLE:
        return f"CustomNode(namedtuple[{node.node_type.__name__}], [{', '.join(parts)}])"
    return f"CustomNode({node.node_type.__name__}[{node.node_data}], [{', '.join(parts)}])"


cdef list _child_keys(TreeDef node):
    """Each child's key, as jax.tree_util names it: SequenceKey, DictKey,
    GetAttrKey, or what a node registered with keys gives."""
    cdef Py_ssize_t n = PyTuple_GET_SIZE(node.children)
    import jax.tree_util as jtu
    if node.kind == NODE_TUPLE or node.kind == NODE_LIST:
        return [jtu.SequenceKey(i) for i in range(n)]
    if node.kind == NODE_DICT:
        return [jtu.DictKey(key) for key in (<DictKeys>node.node_data).sorted_keys]
    if node.kind == NODE_NAMEDTUPLE:
        return [jtu.GetAttrKey(name) for name in node.node_type._fields]
    if node.info.kind == NODE_DATACLASS:
        return [jtu.GetAttrKey(name) for name in node.info.data_fields]
    # The keys of a node registered with keys are only known to jax: rebuild this
    # one node over placeholder leaves and ask jax's public flatten-with-keys.
    try:
        subtrees = tuple([(<TreeDef>child).unflatten([object() for _ in range((<TreeDef>child).num_leaves)])
                          for child in node.children])
        rebuilt = node.info.from_iter(node.node_data, subtrees)
        keys = [key for key, _ in _flatten_one_level_with_keys(rebuilt)]
        if len(keys) == n:
            return keys
    except Exception:  # a from_iter that rejects placeholders: jax's flat indices
        pass
    return [jtu.FlattenedIndexKey(i) for i in range(n)]


cdef void _collect_paths(TreeDef node, tuple prefix, list paths) except *:
    if node.kind == NODE_LEAF:
        paths.append(prefix)
        return
    for key, child in zip(_child_keys(node), node.children):
        _collect_paths(<TreeDef>child, prefix + (key,), paths)


cdef str _kind_name(TreeDef node):
    if node.kind == NODE_LEAF:
        return "leaf"
    if node.kind == NODE_NONE:
        return "None"
    return node.node_type.__name__


cdef str _short_repr(object value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


cdef object _difference(TreeDef a, TreeDef b, tuple path):
    """The first difference between a and b in leaf order, as (path, what), or None."""
    if a.same_as(b):
        return None
    if a.kind != b.kind or a.node_type is not b.node_type:
        return path, f"{_kind_name(a)} -> {_kind_name(b)}"
    cdef Py_ssize_t na = PyTuple_GET_SIZE(a.children), nb = PyTuple_GET_SIZE(b.children)
    if a.kind == NODE_DICT:
        keys_a = (<DictKeys>a.node_data).sorted_keys
        keys_b = (<DictKeys>b.node_data).sorted_keys
        if keys_a != keys_b:
            added = [key for key in keys_b if key not in keys_a]
            removed = [key for key in keys_a if key not in keys_b]
            parts = []
            for keys, verb in ((added, "added"), (removed, "removed")):
                if keys:
                    noun = "key" if len(keys) == 1 else "keys"
                    parts.append(f"{noun} {', '.join(map(_short_repr, keys))} {verb}")
            return path, "; ".join(parts)
    elif a.kind == NODE_CUSTOM:
        if not (a.node_data is b.node_data or a.node_data == b.node_data):
            return path, (f"{_kind_name(a)} static data {_short_repr(a.node_data)} -> "
                          f"{_short_repr(b.node_data)}")
    if na != nb:
        return path, f"{_kind_name(a)} of {na} -> {_kind_name(b)} of {nb}"
    for key, child_a, child_b in zip(_child_keys(a), a.children, b.children):
        found = _difference(<TreeDef>child_a, <TreeDef>child_b, path + (key,))
        if found is not None:
            return found
    return None


cdef object _to_jax(TreeDef node):
    import jax.tree_util as jtu
    if node.kind == NODE_LEAF:
        return jtu.tree_structure(0)
    if node.kind == NODE_DICT:
        node_data = (dict, list((<DictKeys>node.node_data).sorted_keys))
    elif node.kind == NODE_CUSTOM:
        node_data = (node.node_type, node.node_data)
    else:
        node_data = (node.node_type, None)
    children = [_to_jax(<TreeDef>child) for child in node.children]
    return jtu.PyTreeDef.from_node_data_and_children(jtu.default_registry, node_data, children)
