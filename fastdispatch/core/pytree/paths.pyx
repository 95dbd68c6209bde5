# cython: boundscheck=False, wraparound=False
"""Paths in a tree (not on the hot path): its leaves' key paths as
jax.tree_util gives them, and where two structures first differ (to explain
a recompile).
"""
import jax.tree_util as jtu

from cpython.tuple cimport PyTuple_GET_SIZE

from fastdispatch.core.pytree.kinds cimport (
    NODE_CUSTOM, NODE_DATACLASS, NODE_DICT, NODE_LEAF, NODE_LIST, NODE_NAMEDTUPLE, NODE_NONE,
    NODE_TUPLE)
from fastdispatch.core.pytree.treedef cimport DictKeys, TreeDef
from fastdispatch._jax import flatten_one_level_with_keys as _flatten_one_level_with_keys


def first_difference(TreeDef a, TreeDef b):
    """Where and how structure `b` first differs from `a`, in leaf order:
    ``(path, what)``, with the path a tuple of jax.tree_util key entries and
    what, e.g., ``"key 'b' added"``, ``"list of 3 -> list of 4"`` or
    ``"tuple -> list"``; used to explain recompiles.  None when they are equal."""
    return _difference(a, b, ())


cdef list _child_keys(TreeDef node):
    """Each child's key, as jax.tree_util names it: SequenceKey, DictKey,
    GetAttrKey, or what a node registered with keys gives."""
    cdef Py_ssize_t n = PyTuple_GET_SIZE(node.children)
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


def leaf_paths(TreeDef node):
    """One path per leaf, in leaf order: a tuple of jax.tree_util key entries
    (``(SequenceKey(0), DictKey('w'))``), as ``tree_flatten_with_path`` gives;
    the root leaf's path is ``()``."""
    cdef list paths = []
    _collect_paths(node, (), paths)
    return paths


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
