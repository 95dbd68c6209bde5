# cython: boundscheck=False, wraparound=False
"""``TreeDef``: the structure of a pytree, made by ``flatten``; equal (and
hashing equal) to another exactly when ``jax.tree_util`` would call the two
structures equal, with jax's repr.  ``unflatten`` rebuilds a tree from it,
pickling keeps it, ``to_jax`` gives jax's own; ``paths`` names its leaves.
"""
import jax.tree_util as jtu

cimport cython
from cpython.dict cimport PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject, PyObject_Call
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdlib cimport bsearch, qsort

from fastdispatch.core.pytree.fields cimport build_fields, has_layout_prefix
from fastdispatch.core.pytree.kinds cimport (
    NODE_CUSTOM, NODE_DATACLASS, NODE_DICT, NODE_FIELDS, NODE_LEAF, NODE_LIST, NODE_NAMEDTUPLE,
    NODE_NONE, NODE_TUPLE)
from fastdispatch.core.pytree.registry cimport (
    NodeTypes, aux_is_atom, build_dataclass, check_registry, custom_hash, is_atom, lookup_type,
    node_types)

cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)


cdef NodeTypes _TYPES = node_types()


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
                return build_dataclass(self.node_type, info.direct_fields, self.node_data, built)
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
                and has_layout_prefix(info.layout, self.node_data)):
            return build_fields(self.node_type, info.layout, built, self.node_data)
        return info.from_iter(self.node_data, built)

    def to_jax(self):
        """The same structure as a ``jax.tree_util.PyTreeDef``."""
        return _to_jax(self)


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


cdef object _to_jax(TreeDef node):
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


cdef TreeDef _make_singleton(int kind, object node_type, Py_ssize_t num_leaves):
    cdef TreeDef node = new_node(kind, node_type, None, (), None, 0, True)
    node.num_leaves = num_leaves
    return node


# The leaf and None nodes are shared by every tree.
cdef TreeDef _LEAF_DEF = _make_singleton(NODE_LEAF, None, 1)
cdef TreeDef _NONE_DEF = _make_singleton(NODE_NONE, type(None), 0)


cdef TreeDef leaf_def():
    return _LEAF_DEF


cdef TreeDef none_def():
    return _NONE_DEF


def _treedef_from_state(int kind, object node_type, object data, tuple children):
    """Rebuild a pickled TreeDef (see ``TreeDef.__reduce__``)."""
    cdef NodeType info = None
    cdef DictKeys keys
    if kind == NODE_LEAF:
        return _LEAF_DEF
    if kind == NODE_NONE:
        return _NONE_DEF
    if kind == NODE_TUPLE or kind == NODE_LIST:
        return new_node(kind, node_type, None, children, None, 0, True)
    if kind == NODE_DICT:
        data = tuple(data)
        keys = new_dict_keys(data, data)
        return new_node(kind, dict, keys, children, None, <Py_uhash_t>keys.keys_hash, keys.atoms)
    check_registry(_TYPES)
    info = lookup_type(_TYPES, node_type)
    if info.kind == NODE_NAMEDTUPLE:
        return new_node(NODE_NAMEDTUPLE, node_type, None, children, info, <Py_uhash_t>hash(node_type),
                        True)
    if info.kind == NODE_LEAF:
        raise TypeError(f"TreeDef: cannot unpickle a node of type {node_type!r}: "
                        "it is not registered as a pytree node in this process")
    atom = aux_is_atom(info, data)
    return new_node(NODE_CUSTOM, node_type, data, children, info,
                    custom_hash(node_type, data, atom), atom)


@cython.final
cdef class DictKeys:
    def __dealloc__(self):
        PyMem_Free(self.order)


cdef DictKeys new_dict_keys(tuple insertion, tuple sorted_keys):
    cdef DictKeys keys = DictKeys.__new__(DictKeys)
    cdef Py_ssize_t n = PyTuple_GET_SIZE(insertion)
    keys.insertion = insertion
    keys.sorted_keys = sorted_keys
    keys.keys_hash = hash(sorted_keys)
    keys.atoms = is_atom(insertion, 0)
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
