# cython: boundscheck=False, wraparound=False
"""``flatten``: a pytree's leaves in jax.tree_util's order and its ``TreeDef``,
at C speed.

Built-in containers (tuple, list, dict, None) are walked with exact type
checks and C-API access; every other node type is looked up once in jax's own
registry (``registry``).

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
  decided once per type (``registry``).

No cache keeps a leaf or a container alive: memos hold TreeDefs, whose only
foreign references are dict keys and the aux data of registered nodes, and a
registered node's TreeDef is only memoised when its aux data is made of
atoms (None, str, int, float, bool, bytes and tuples of them).
"""
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_Size
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport Py_EQ, PyObject, PyObject_RichCompareBool
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_Compare

from fastdispatch.core.keys cimport Py_uhash_t, XXPRIME_5
from fastdispatch.core.pytree.fields cimport read_fields
from fastdispatch.core.pytree.kinds cimport (
    NODE_CUSTOM, NODE_DATACLASS, NODE_DICT, NODE_FIELDS, NODE_LEAF, NODE_LIST, NODE_NAMEDTUPLE,
    NODE_NONE, NODE_TUPLE, NodeKind)
from fastdispatch.core.pytree.registry cimport (
    NodeType, NodeTypes, aux_is_atom, check_reader, check_registry, custom_hash, lookup_type,
    node_types, same_aux)
from fastdispatch.core.pytree.treedef cimport (
    DictKeys, TreeDef, leaf_def, new_dict_keys, new_node, none_def)


cdef enum:
    # Deeper than this and flatten stops: jax's own flatten fails near Python's
    # recursion limit (1000) too, so no tree that jax can flatten is refused.
    MAX_DEPTH = 1000
    # Direct-mapped caches: dict key orders (two-way: slot s and s ^ 1) and the
    # last tuple/list node of each arity (mod SEQ_SLOTS).
    DICT_SLOTS = 512
    SEQ_SLOTS = 64
    # Memoised nodes per registered type (one per distinct aux value).
    MAX_MEMOS_PER_TYPE = 256
    # Of those, the last met, checked first by address (a model's layers of a
    # few shapes, flattened in turn).
    RECENT_MEMOS = 4


cdef NodeTypes _TYPES = node_types()
cdef TreeDef _LEAF_DEF = leaf_def()
cdef TreeDef _NONE_DEF = none_def()


# ----------------------------------------------------------------------------
# Dict key order
# ----------------------------------------------------------------------------

cdef list _dict_slots = [None] * DICT_SLOTS
cdef TreeDef _EMPTY_DICT_DEF = new_node(NODE_DICT, dict, new_dict_keys((), ()), (), None,
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
    cdef DictKeys keys = new_dict_keys(insertion, tuple(sorted_list))
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
    check_registry(_TYPES)
    cdef NodeType info = lookup_type(_TYPES, t)
    if info.kind == NODE_FIELDS:
        if info.checked and read_fields(info.layout, node) is not None:
            return NODE_FIELDS
        return NODE_CUSTOM
    if info.kind == NODE_DATACLASS:
        return NODE_CUSTOM
    return info.kind


cdef TreeDef flatten_into(object tree, list leaves):
    """Append the leaves of `tree` to `leaves` in jax's order and return its TreeDef."""
    cdef PyObject* path[MAX_DEPTH + 1]
    check_registry(_TYPES)
    return _flatten(tree, leaves, 0, path)


cdef TreeDef _flatten(object tree, list leaves, int depth, PyObject** path):
    cdef type t = type(tree)
    if t is _TYPES.last_leaf_type:
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
    cdef NodeType info = lookup_type(_TYPES, t)
    if info.kind == NODE_LEAF:
        _remember_leaf_type(t)
        leaves.append(tree)
        return _LEAF_DEF
    return _flatten_node(tree, info, leaves, depth, path)


cdef inline void _remember_leaf_type(type t):
    _TYPES.last_leaf_type = t


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
    memo = new_node(kind, node_type, None, children, None, 0, True)
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
    memo = new_node(NODE_DICT, dict, keys, children, None, <Py_uhash_t>keys.keys_hash, keys.atoms)
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
            if not check_reader(info, tree, <tuple>seq, <tuple>aux):
                info.kind = NODE_CUSTOM
                return _flatten_node(tree, info, leaves, depth, path)
            info.checked = True
        seq = tree
        fields = info.data_fields
    else:
        result = read_fields(info.layout, tree) if info.kind == NODE_FIELDS else None
        if result is not None and not info.checked:
            if not check_reader(info, tree, <tuple>result[0], <tuple>result[1]):
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
        atom = aux_is_atom(info, aux)
        if atom and info.memos is not None:
            found = PyDict_GetItem(info.memos, aux)
            if found != NULL:
                memo = <TreeDef>found
                if PyTuple_GET_SIZE(memo.children) != n or not same_aux(memo.node_data, aux):
                    memo = None
                else:
                    _remember_recent(info, memo)
    children = _flatten_children(seq, n, NULL, fields, leaves, depth + 1, path, memo)
    if children is None:
        return memo
    if info.kind == NODE_NAMEDTUPLE:
        memo = new_node(NODE_NAMEDTUPLE, info.node_type, None, children, info,
                        <Py_uhash_t>hash(info.node_type), True)
    else:
        atom = aux_is_atom(info, aux)
        memo = new_node(NODE_CUSTOM, info.node_type, aux, children, info,
                        custom_hash(info.node_type, aux, atom), atom)
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
        if PyTuple_GET_SIZE(memo.children) == n and same_aux(memo.node_data, aux):
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
