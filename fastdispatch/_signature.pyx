# cython: boundscheck=False, wraparound=False
"""CallSignature: what identifies one compiled executable of a function.

jax keys its executables on the structure of the dynamic arguments, each
leaf's abstract value (shape, dtype, weak type) and placement (sharding,
committed), the static arguments compared by type and value, and every config
value that changes tracing.  So do we.  The hash is computed once; equality
looks at object identity before value, because jax shares aval and sharding
objects between arrays of one executable (docs/performance.md).
"""
import re
import sys

import numpy as np

cimport cython
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, Py_TYPE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch._keys cimport Py_uhash_t, XXPRIME_5, hash_mix, same_items
from fastdispatch._pytree cimport TreeDef
from fastdispatch import _compile

cdef extern from "Python.h":
    ctypedef PyObject* (*descrgetfunc)(PyObject*, PyObject*, PyObject*)
    ctypedef struct _TypeWithDescrGet "PyTypeObject":
        descrgetfunc tp_descr_get
    void Py_DECREF(PyObject*)
    void PyErr_Clear()

cdef object _ARRAY = _compile.ARRAY_TYPE
cdef object _KEY_ARRAY = _compile.KEY_ARRAY_TYPE
cdef object _TRACER = _compile.TRACER_TYPE
cdef str _SHARDING = sys.intern(_compile.SHARDING_ATTR)
cdef str _COMMITTED = sys.intern(_compile.COMMITTED_ATTR)
cdef str _KEY_BUFFER = sys.intern(_compile.KEY_BUFFER_ATTR)
cdef str _KEY_IMPL = sys.intern(_compile.KEY_IMPL_ATTR)
cdef tuple _HOST_ARRAY_TYPES = (np.ndarray, np.generic)


@cython.final
cdef class _ArrayField:
    """One attribute of jax's Array type, read through its descriptor's C slot:
    ~10 ns a read against ~16 ns for getattr, which looks the name up in the
    type first (docs/performance.md).  Valid because the attributes are data
    descriptors (properties): nothing on an instance can shadow them."""
    cdef object descriptor
    cdef descrgetfunc get

    def __cinit__(self, descriptor):
        self.descriptor = descriptor
        self.get = (<_TypeWithDescrGet*>Py_TYPE(descriptor)).tp_descr_get

    cdef inline bint holds(self, object leaf, object expected):
        """``getattr(leaf, name) is expected``, without keeping a reference."""
        cdef PyObject* value = self.get(<PyObject*>self.descriptor, <PyObject*>leaf, NULL)
        if value == NULL:
            PyErr_Clear()
            return False
        cdef bint same = value == <PyObject*>expected
        Py_DECREF(value)
        return same


cdef _ArrayField _AVAL_FIELD = _ArrayField(_compile.array_descriptor("aval"))
cdef _ArrayField _SHARDING_FIELD = _ArrayField(_compile.array_descriptor(_compile.SHARDING_ATTR))
cdef _ArrayField _COMMITTED_FIELD = _ArrayField(_compile.array_descriptor(_compile.COMMITTED_ATTR))


@cython.final
cdef class KeyTag:
    """The third key slot of a typed PRNG key: its implementation and whether
    it is committed.  Interned, so that the guard compares by identity."""
    cdef readonly object impl
    cdef readonly bint committed

    def __repr__(self):
        return f"KeyTag({self.impl.name}, committed={self.committed})"


cdef dict _key_tags = {}


cdef KeyTag _key_tag(object impl, object committed):
    key = (impl.name, committed is True)
    cdef KeyTag tag = _key_tags.get(key)
    if tag is None:
        tag = KeyTag.__new__(KeyTag)
        tag.impl = impl
        tag.committed = committed is True
        _key_tags[key] = tag
    return tag


cdef inline bint _is_python_scalar(object leaf_type):
    return leaf_type is float or leaf_type is int or leaf_type is bool or leaf_type is complex


cdef LeafStatus read_leaf_keys(list leaves, list keys) except *:
    """Append three key slots per leaf to ``keys``: aval, sharding, committed
    for jax Arrays and typed keys; the type and two Nones for Python scalars
    (the type and jax's context fix the aval); type, shape and dtype for numpy
    values."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(leaves)
    cdef object leaf, leaf_type
    for i in range(n):
        leaf = <object>PyList_GET_ITEM(leaves, i)
        leaf_type = type(leaf)
        if leaf_type is _ARRAY:
            keys.append(leaf.aval)
            keys.append(getattr(leaf, _SHARDING))
            keys.append(getattr(leaf, _COMMITTED))
        elif leaf_type is _KEY_ARRAY:
            # A key's own aval and sharding are computed on each read (~9 us and
            # ~6 us): key on its physical array and an interned (impl, committed) tag.
            base = getattr(leaf, _KEY_BUFFER)
            keys.append(base.aval)
            keys.append(getattr(base, _SHARDING))
            keys.append(_key_tag(getattr(leaf, _KEY_IMPL), getattr(base, _COMMITTED)))
        elif _is_python_scalar(leaf_type):
            keys.append(leaf_type)
            keys.append(None)
            keys.append(None)
        elif isinstance(leaf, _HOST_ARRAY_TYPES):
            keys.append(leaf_type)
            keys.append(leaf.shape)
            keys.append(leaf.dtype)
        elif isinstance(leaf, _TRACER):
            return LEAVES_TRACER
        else:
            return LEAVES_UNSUPPORTED
    return LEAVES_OK


cdef bint all_leaves(tuple args):
    for arg in args:
        arg_type = type(arg)
        if not (arg_type is _ARRAY or arg_type is _KEY_ARRAY or _is_python_scalar(arg_type)
                or isinstance(arg, _HOST_ARRAY_TYPES)):
            return False
    return True


cdef class CallSignature:
    """The key of one cache entry.  Built by the dispatcher; read by the tracer."""

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if not isinstance(other, CallSignature):
            return NotImplemented
        cdef CallSignature o = <CallSignature>other
        if self is o:
            return True
        return (self._hash == o._hash
                and self.treedef.same_as(o.treedef)
                and _same_tuple(self.context, o.context)
                and self.leaf_keys == o.leaf_keys
                and self.static_args == o.static_args)

    cdef bint matches_call(self, TreeDef treedef, list leaves, tuple static_args,
                           tuple context):
        if treedef is not self.treedef and not treedef.same_as(self.treedef):
            return False
        if not _same_tuple(context, self.context):
            return False
        if static_args is not self.static_args:
            try:
                if static_args != self.static_args:
                    return False
            except Exception:
                return False   # a static argument's __eq__ raised: the lookup reports it
        cdef Py_ssize_t i
        for i in range(PyList_GET_SIZE(leaves)):
            if not _leaf_matches(<object>PyList_GET_ITEM(leaves, i), self.leaf_keys, i):
                return False
        return True

    cdef bint matches_leaves(self, PyObject** leaves, Py_ssize_t n, tuple context):
        if 3 * n != PyList_GET_SIZE(self.leaf_keys):
            return False
        if not _same_tuple(context, self.context):
            return False
        cdef Py_ssize_t i
        for i in range(n):
            if not _leaf_matches(<object>leaves[i], self.leaf_keys, i):
                return False
        return True

    @property
    def context(self):
        return self.context

    def describe(self):
        """The signature as text, for people: argument paths with their types,
        static arguments and jax's context.  Used by the trace report."""
        paths = self.treedef.leaf_paths()
        args = []
        for i, path in enumerate(paths):
            first = self.leaf_keys[3 * i]
            second = self.leaf_keys[3 * i + 1]
            third = self.leaf_keys[3 * i + 2]
            if isinstance(third, KeyTag):
                text = _compile.key_aval_text((<KeyTag>third).impl, first)
                if (<KeyTag>third).committed:
                    text = f"{text}@{second}"
            elif isinstance(first, type) and second is None:
                text = _aval_text(_compile.python_scalar_aval(first, self.context))
            elif isinstance(first, type):
                text = f"{_aval_text(_compile.shaped_aval(second, third))} (numpy)"
            else:
                text = _aval_text(first)
                if third:
                    text = f"{text}@{second}"
            args.append((_argument_label(path, self.arg_names), text))
        static = [(str(label), repr(value))
                  for label, _, value in _triples(self.static_args)]
        context = [(name, repr(value)) for name, value in
                   zip(_compile.trace_context_names(), self.context)]
        return {"args": args, "static": static, "context": context}

    def __repr__(self):
        described = self.describe()
        args = ", ".join(f"{path}: {text}" for path, text in described["args"])
        static = ", ".join(f"{label}={value}" for label, value in described["static"])
        return f"CallSignature({args}{'; static ' + static if static else ''})"


cdef inline bint _leaf_matches(object leaf, list keys, Py_ssize_t i):
    """Leaf ``i`` holds the very objects in its key slots (no __eq__ called)."""
    leaf_type = type(leaf)
    if leaf_type is _ARRAY:
        return (_AVAL_FIELD.holds(leaf, <object>PyList_GET_ITEM(keys, 3 * i))
                and _SHARDING_FIELD.holds(leaf, <object>PyList_GET_ITEM(keys, 3 * i + 1))
                and _COMMITTED_FIELD.holds(leaf, <object>PyList_GET_ITEM(keys, 3 * i + 2)))
    if leaf_type is _KEY_ARRAY:
        tag = <object>PyList_GET_ITEM(keys, 3 * i + 2)
        if type(tag) is not KeyTag:
            return False
        base = getattr(leaf, _KEY_BUFFER)
        return (base.aval is <object>PyList_GET_ITEM(keys, 3 * i)
                and getattr(base, _SHARDING) is <object>PyList_GET_ITEM(keys, 3 * i + 1)
                and getattr(leaf, _KEY_IMPL) is (<KeyTag>tag).impl
                and (getattr(base, _COMMITTED) is True) == (<KeyTag>tag).committed)
    if leaf_type is not <object>PyList_GET_ITEM(keys, 3 * i):
        return False
    if _is_python_scalar(leaf_type):
        return True
    # numpy: the dtype object is shared, the shape a new tuple on every read.
    return (isinstance(leaf, _HOST_ARRAY_TYPES)
            and leaf.dtype is <object>PyList_GET_ITEM(keys, 3 * i + 2)
            and leaf.shape == <object>PyList_GET_ITEM(keys, 3 * i + 1))


cdef inline bint _same_tuple(tuple a, tuple b) except -1:
    # jax's trace context is a fresh tuple on every call, almost always of the
    # very same objects: compare pointers before paying for __eq__.
    return same_items(a, b) or a == b


cdef CallSignature make_signature(TreeDef treedef, list leaf_keys, tuple static_args,
                                  tuple context, object arg_names):
    """A signature with its hash.  The hash covers the structure, the avals and
    the static arguments; shardings and the context are left to equality
    (hashing them costs ~100 ns each and they rarely tell two keys apart)."""
    cdef CallSignature sig = CallSignature.__new__(CallSignature)
    sig.treedef = treedef
    sig.leaf_keys = leaf_keys
    sig.static_args = static_args
    sig.context = context
    sig.arg_names = arg_names
    cdef Py_uhash_t h = hash_mix(XXPRIME_5, <Py_uhash_t>hash(treedef))
    cdef Py_ssize_t i, n = PyList_GET_SIZE(leaf_keys)
    for i in range(0, n, 3):
        h = hash_mix(h, <Py_uhash_t>hash(<object>PyList_GET_ITEM(leaf_keys, i)))
        h = hash_mix(h, <Py_uhash_t>hash(<object>PyList_GET_ITEM(leaf_keys, i + 2)))
    # hash() raises for an unhashable static argument.
    h = hash_mix(h, <Py_uhash_t>hash(static_args))
    sig._hash = <Py_hash_t>h if <Py_hash_t>h != -1 else -2
    return sig


def _triples(tuple items):
    for i in range(0, len(items), 3):
        yield items[i], items[i + 1], items[i + 2]


def _aval_text(aval):
    text = aval.str_short(short_dtypes=True)
    if getattr(aval, "weak_type", False) and "weak" not in text:
        text += "{weak}"
    return text


_POSITIONAL = re.compile(r"^\[0\]\[(\d+)\](.*)$")
_KEYWORD = re.compile(r"^\[1\]\[(.+?)\](.*)$")


def _argument_label(path, arg_names):
    """``[0][1]['w']`` -> ``params['w']``: the leaf's path from its parameter."""
    match = _POSITIONAL.match(path)
    if match:
        index = int(match.group(1))
        names = arg_names or ()
        name = names[index] if index < len(names) else f"args[{index}]"
        return name + match.group(2)
    match = _KEYWORD.match(path)
    if match:
        key = match.group(1)
        if len(key) >= 2 and key[0] in "'\"" and key.endswith(key[0]):
            key = key[1:len(key) - 1]
        return key + match.group(2)
    return path
