# cython: boundscheck=False, wraparound=False
"""Proof that a tree is, object for object, the one a previous call flattened.

A call on an unchanged model (inference, evaluation) passes the very objects
it passed before.  Flattening them again gives the same leaves and structure,
provided nothing below them changed in place.  ``record_unchanged`` walks the
objects once and records the contents of each one that can change in place:
a list's items, a dict's items, an equinox Module's ``__dict__``.
``Unchanged.holds`` then reads those contents again and compares them by
identity: a few instructions an entry, where a flatten walks, allocates and
keys every node; a dict whose version (CPython's stamp, new at each write)
is the one it had when its entries last matched is not read at all.

A tree is recorded only when identity settles everything flatten would see:
  * tuples and namedtuples (immutable: their items are walked, not checked);
  * lists, dicts with str keys, and nodes that flatten reads from their
    ``__dict__`` alone (fastdispatch.core.pytree.flatten.node_kind: NODE_FIELDS);
  * jax arrays (their aval and sharding never change; a deleted one raises
    when it runs, as on every path);
  * None, int, float, bool, complex, str and bytes (immutable);
  * other leaves whose == and hash are object's (functions, say): the same
    object is equal to itself whatever it holds.
Anything else (a numpy array, a node whose flatten is Python code, a leaf
with its own __eq__) refuses the record: the call keeps the full path.

The roots are held weakly; the contents below them strongly (lists and
dicts have no weak references; holding them keeps their addresses from going
to other objects).  The caller drops the record when a root dies, so that
nothing outlives what the caller keeps; a root given here must take weak
references (a list or dict root is refused).
"""
import weakref

from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.pytree.flatten cimport node_kind
from fastdispatch.core.pytree.kinds cimport NODE_FIELDS, NODE_LEAF, NODE_NAMEDTUPLE
from fastdispatch.core.signature cimport LEAF_ARRAY, LEAF_KEY, LeafKind, classify_leaf

cdef extern from "Python.h":
    dict PyObject_GenericGetDict(object o, void* context)
    PyObject* PyWeakref_GET_OBJECT(object ref)

cdef extern from *:
    """
    /* A dict's version: CPython gives every dict a new one when it is made
       and at each change (PEP 509), from one counter, so an equal version is
       the same contents.  0 (every check compares the entries) where there
       is no field to read, and from 3.13 on, where an instance's dict shares
       its inline values: that every write there stamps the dict is not
       verified. */
    static inline unsigned long long fd_dict_version(PyObject *d) {
    #if PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)
    #if defined(__GNUC__)
    #pragma GCC diagnostic push
    #pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    #endif
        return (unsigned long long)((PyDictObject *)d)->ma_version_tag;
    #if defined(__GNUC__)
    #pragma GCC diagnostic pop
    #endif
    #else
        return 0;
    #endif
    }
    """
    unsigned long long dict_version "fd_dict_version"(object d)

cdef enum:
    # Deeper than this is refused (jax's flatten fails near 1000 too).
    MAX_DEPTH = 200

cdef enum ContentsKind:
    ATTRIBUTES     # a node's instance __dict__ (and its type)
    DICT_ITEMS     # a dict's items
    LIST_ITEMS     # a list's items

cdef PyTypeObject* _OBJECT = <PyTypeObject*>object


cdef class _Contents:
    """One object's contents when recorded: keys and values in its dict's
    order (ATTRIBUTES, DICT_ITEMS) or its items (LIST_ITEMS).  A root's
    target is a weak reference: the caller's, not ours, to keep alive."""
    cdef object target
    cdef bint weak
    cdef object target_type
    cdef ContentsKind kind
    cdef tuple keys
    cdef tuple values
    cdef unsigned long long version   # the dict's, when its entries last matched (0: none)

    cdef bint holds(self) except -1:
        cdef Py_ssize_t pos = 0, i = 0, n = PyTuple_GET_SIZE(self.values)
        cdef PyObject* key
        cdef PyObject* value
        cdef dict d
        cdef object target = self.target
        if self.weak:
            target = <object>PyWeakref_GET_OBJECT(target)
        if self.kind == LIST_ITEMS:
            if PyList_GET_SIZE(<list>target) != n:
                return False
            for i in range(n):
                if PyList_GET_ITEM(<list>target, i) != PyTuple_GET_ITEM(self.values, i):
                    return False
            return True
        if self.kind == ATTRIBUTES:
            if type(target) is not self.target_type:
                return False   # another class, or a root that died (None)
            d = PyObject_GenericGetDict(target, NULL)
        else:
            d = <dict>target
        cdef unsigned long long version = dict_version(d)
        if version != 0 and version == self.version:
            return True   # not written since its entries matched
        if PyDict_Size(d) != n:
            return False
        # In the dict's own order: the same entries, written in the same order.
        while PyDict_Next(d, &pos, &key, &value):
            if key != PyTuple_GET_ITEM(self.keys, i) or value != PyTuple_GET_ITEM(self.values, i):
                return False
            i += 1
        self.version = version
        return True


cdef _Contents _contents(object target, ContentsKind kind, bint root):
    cdef _Contents contents = _Contents.__new__(_Contents)
    contents.target, contents.target_type, contents.kind = target, type(target), kind
    if root:
        contents.target, contents.weak = weakref.ref(target), True
    if kind == LIST_ITEMS:
        contents.values = tuple(<list>target)
    else:
        d = PyObject_GenericGetDict(target, NULL) if kind == ATTRIBUTES else target
        contents.keys, contents.values = tuple(d), tuple(d.values())
        contents.version = dict_version(d)
    return contents


cdef class Unchanged:
    """The recorded contents of every mutable container below some roots."""

    cdef bint holds(self) except -1:
        cdef tuple checks = self.checks
        cdef Py_ssize_t i
        for i in range(PyTuple_GET_SIZE(checks)):
            if not (<_Contents>PyTuple_GET_ITEM(checks, i)).holds():
                return False
        return True


cdef Unchanged record_unchanged(tuple roots):
    cdef list checks = []
    cdef set seen = set()
    for root in roots:
        if not _walk(root, checks, seen, 0):
            return None
    cdef Unchanged unchanged = Unchanged.__new__(Unchanged)
    unchanged.checks = tuple(checks)
    return unchanged


cdef bint _walk(object x, list checks, set seen, int depth) except -1:
    """Record what can change in place below ``x``; False where identity
    would not settle it."""
    cdef type t = type(x)
    if x is None or t is int or t is float or t is bool or t is str or t is complex or t is bytes:
        return True
    if depth > MAX_DEPTH:
        return False
    if id(x) in seen:
        return True   # met before (a shared subtree): recorded once
    cdef LeafKind kind_of_leaf = classify_leaf(x)
    if kind_of_leaf == LEAF_ARRAY or kind_of_leaf == LEAF_KEY:
        return True
    if depth == 0 and (t is list or t is dict):
        return False   # a root is held weakly, and these take no weak references
    seen.add(id(x))
    cdef int kind = node_kind(x)
    if t is tuple or kind == NODE_NAMEDTUPLE:
        items = x
    elif t is list:
        checks.append(_contents(x, LIST_ITEMS, False))
        items = x
    elif t is dict:
        for key in <dict>x:
            if type(key) is not str:
                return False   # a key's own == and hash decide jax's order
        checks.append(_contents(x, DICT_ITEMS, False))
        items = (<dict>x).values()
    elif kind == NODE_FIELDS:
        checks.append(_contents(x, ATTRIBUTES, depth == 0))
        items = PyObject_GenericGetDict(x, NULL).values()
    else:
        return (kind == NODE_LEAF and (<PyTypeObject*>t).tp_richcompare == _OBJECT.tp_richcompare
                and (<PyTypeObject*>t).tp_hash == _OBJECT.tp_hash)
    for item in items:
        if not _walk(item, checks, seen, depth + 1):
            return False
    return True
