# cython: boundscheck=False, wraparound=False
"""CallSignature: what identifies one compiled executable of a function.

jax keys its executables on the structure of the dynamic arguments, each
leaf's abstract value (shape, dtype, weak type) and placement (sharding,
committed), the static arguments compared by type and value, and every config
value that changes tracing.  So do we.  What a leaf is (``classify_leaf``) is
decided here and nowhere else; each leaf's part of the key is a ``LeafKey``
struct of typed fields.  The hash is computed once; equality looks at object
identity before value, because jax shares aval and sharding objects between
arrays of one executable (docs/performance.md).
"""
import sys
from collections import namedtuple

import numpy as np
from jax.tree_util import DictKey, SequenceKey, keystr

cimport cython
cimport numpy as cnp
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsSsize_t
from cpython.sequence cimport PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.string cimport memset
from cpython.object cimport Py_EQ, PyObject, PyObject_RichCompareBool, Py_TYPE
from cpython.ref cimport Py_INCREF, Py_XDECREF

from fastdispatch.core.keys cimport Py_uhash_t, XXPRIME_5, hash_mix
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.pytree.paths import leaf_paths
from fastdispatch import _jax

cdef extern from "Python.h":
    ctypedef PyObject* (*descrgetfunc)(PyObject*, PyObject*, PyObject*)
    ctypedef PyObject* (*vectorcallfunc)(PyObject*, PyObject* const*, size_t, PyObject*)
    vectorcallfunc PyVectorcall_Function(object callable)
    ctypedef struct _TypeWithDescrGet "PyTypeObject":
        descrgetfunc tp_descr_get
    void Py_DECREF(PyObject*)
    void PyErr_Clear()
    Py_hash_t hash_or_minus_one "PyObject_Hash"(object) noexcept

cnp.import_array()

cdef object _ARRAY = _jax.ARRAY_TYPE
cdef object _NDARRAY = np.ndarray
cdef object _KEY_ARRAY = _jax.KEY_ARRAY_TYPE
cdef object _TRACER = _jax.TRACER_TYPE
cdef tuple _HOST_TYPES = (np.ndarray, np.generic)
cdef str _SHARDING = sys.intern(_jax.SHARDING_ATTR)
cdef str _COMMITTED = sys.intern(_jax.COMMITTED_ATTR)
cdef str _KEY_BUFFER = sys.intern(_jax.KEY_BUFFER_ATTR)
cdef str _KEY_IMPL = sys.intern(_jax.KEY_IMPL_ATTR)


# The root of every signature's tree: (dynamic positional args, dynamic kwargs).
cdef object _POSITIONAL = SequenceKey(0)
cdef object _KEYWORD = SequenceKey(1)


cdef LeafKind classify_leaf(object leaf):
    leaf_type = type(leaf)
    if leaf_type is _ARRAY:
        return LEAF_ARRAY
    if leaf_type is _KEY_ARRAY:
        return LEAF_KEY
    # Exact types: a subclass (np.float64 is a float) is converted as numpy is.
    if leaf_type is float or leaf_type is int or leaf_type is bool or leaf_type is complex:
        return LEAF_SCALAR
    if isinstance(leaf, _HOST_TYPES):
        return LEAF_HOST
    if isinstance(leaf, _TRACER):
        return LEAF_TRACER
    return LEAF_OTHER


cdef str _NUMERIC_KINDS = "biufc"   # bool, signed and unsigned int, float, complex


cdef bint plain_host_value(object leaf) except -1:
    # Not a subclass (a masked array), not a structured, string, object or
    # extended (bfloat16) dtype, not byte-swapped: those go to jax.
    if type(leaf) is not _NDARRAY and not isinstance(leaf, np.generic):
        return False
    dtype = leaf.dtype
    return dtype.kind in _NUMERIC_KINDS and dtype.isnative and dtype.fields is None


@cython.final
cdef class _ArrayField:
    """One attribute of jax's Array type, read without getattr's lookup of the
    name in the type: a property's getter called at once (its vectorcall),
    else the descriptor's C slot, which calls the property, which calls the
    getter (a 200-leaf guard: 22% more instructions; docs/performance.md).
    Valid because the attributes are data descriptors: nothing on an
    instance can shadow them."""
    cdef object descriptor
    cdef descrgetfunc get
    cdef object getter          # the property's fget, called at once where it has a vectorcall
    cdef vectorcallfunc call

    def __cinit__(self, descriptor):
        self.descriptor = descriptor
        self.get = (<_TypeWithDescrGet*>Py_TYPE(descriptor)).tp_descr_get
        self.call = NULL
        if type(descriptor) is property and descriptor.fget is not None:
            self.getter = descriptor.fget
            self.call = PyVectorcall_Function(self.getter)

    cdef inline PyObject* _value(self, object array):
        """A new reference to ``getattr(array, name)``, or NULL with an error set."""
        cdef PyObject* argument = <PyObject*>array
        if self.call != NULL:
            return self.call(<PyObject*>self.getter, &argument, 1, NULL)
        return self.get(<PyObject*>self.descriptor, argument, NULL)

    cdef inline bint holds(self, object array, PyObject* expected):
        """``getattr(array, name) is expected``, without keeping a reference."""
        cdef PyObject* value = self._value(array)
        if value == NULL:
            PyErr_Clear()
            return False
        cdef bint same = value == expected
        Py_DECREF(value)
        return same

    cdef inline object read(self, object array):
        """``getattr(array, name)``, or None where reading it raises."""
        cdef PyObject* value = self._value(array)
        if value == NULL:
            PyErr_Clear()
            return None
        result = <object>value
        Py_DECREF(value)
        return result

    cdef inline bint holds_either(self, object array, PyObject* expected, PyObject* other):
        """``getattr(array, name)`` is ``expected`` or ``other`` (which may be NULL)."""
        cdef PyObject* value = self._value(array)
        if value == NULL:
            PyErr_Clear()
            return False
        cdef bint same = value == expected or (other != NULL and value == other)
        Py_DECREF(value)
        return same


cdef _ArrayField _AVAL_FIELD = _ArrayField(_jax.array_descriptor("aval"))
cdef _ArrayField _SHARDING_FIELD = _ArrayField(_jax.array_descriptor(_jax.SHARDING_ATTR))
cdef _ArrayField _COMMITTED_FIELD = _ArrayField(_jax.array_descriptor(_jax.COMMITTED_ATTR))
cdef _ArrayField _LAYOUT_FIELD = _ArrayField(_jax.array_descriptor(_jax.LAYOUT_ATTR))
cdef object _DELETED = _jax.ARRAY_TYPE.is_deleted


cdef inline PyObject* _owned(object value):
    Py_INCREF(value)
    return <PyObject*>value


cdef int _fill_key(LeafKey* key, object leaf, LeafKind kind) except -1:
    """The key fields of a leaf of this (keyable) kind."""
    key.kind = kind
    if kind == LEAF_ARRAY:
        key.aval = _owned(leaf.aval)
        key.sharding = _owned(getattr(leaf, _SHARDING))
        key.committed = getattr(leaf, _COMMITTED) is True
        key.has_layout = key.committed and leaf.ndim >= 2
        if key.has_layout and not _DELETED(leaf):
            key.layout = _owned(_LAYOUT_FIELD.read(leaf))
    elif kind == LEAF_KEY:
        # A key's own aval and sharding are computed on each read (~9 us and
        # ~6 us): key on its physical array and its implementation.
        base = getattr(leaf, _KEY_BUFFER)
        key.aval = _owned(base.aval)
        key.sharding = _owned(getattr(base, _SHARDING))
        key.committed = getattr(base, _COMMITTED) is True
        key.impl = _owned(getattr(leaf, _KEY_IMPL))
    elif kind == LEAF_SCALAR:
        # The type and jax's context (x64) fix a Python scalar's aval.
        key.py_type = _owned(type(leaf))
    else:
        key.py_type = _owned(type(leaf))
        key.dtype = _owned(leaf.dtype)
        key.shape = _owned(leaf.shape)
    return 0


cdef object _TRUE = True
cdef object _FALSE = False


cdef inline bint _placed_as(object array, LeafKey* key):
    """An ArrayImpl holds the key's very aval, sharding and committed flag,
    and an equal layout where the key has one (~0.2 us: only committed
    arrays of two or more dimensions pay it, as only they can differ; a key
    whose layout is not known yet fails, and the leaf's own is adopted).  A
    deleted array passes: running it raises jax's error."""
    return (_AVAL_FIELD.holds(array, key.aval)
            and _SHARDING_FIELD.holds_either(array, key.sharding, key.other_sharding)
            and _COMMITTED_FIELD.holds(array, <PyObject*>_TRUE if key.committed
                                       else <PyObject*>_FALSE)
            and (not key.has_layout or _DELETED(array)
                 or (key.layout != NULL and PyObject_RichCompareBool(
                     _LAYOUT_FIELD.read(array), <object>key.layout, Py_EQ))))


cdef inline bint _leaf_matches(object leaf, LeafKey* key):
    """``leaf`` has the key's kind and holds the very objects of its fields."""
    cdef object base, impl, dtype
    leaf_type = type(leaf)
    if key.kind == LEAF_ARRAY:
        return leaf_type is _ARRAY and _placed_as(leaf, key)
    if key.kind == LEAF_KEY:
        if leaf_type is not _KEY_ARRAY:
            return False
        base = getattr(leaf, _KEY_BUFFER)
        impl = getattr(leaf, _KEY_IMPL)
        return type(base) is _ARRAY and _placed_as(base, key) and <PyObject*>impl == key.impl
    if <PyObject*>leaf_type != key.py_type:
        return False
    if key.kind == LEAF_SCALAR:
        return True
    if leaf_type is _NDARRAY:
        return _same_array_layout(<cnp.ndarray>leaf, key)
    # A numpy scalar: the dtype object is shared, the shape a new tuple on every read.
    dtype = leaf.dtype
    return <PyObject*>dtype == key.dtype and leaf.shape == <object>key.shape


cdef inline bint _same_array_layout(cnp.ndarray leaf, LeafKey* key):
    """A numpy array has the key's very dtype object and its shape, read from the
    array's C struct: ~5 ns, against ~60 ns for ``.dtype`` and a new ``.shape``
    tuple compared (docs/performance.md)."""
    cdef tuple shape = <tuple>key.shape
    cdef int i, ndim = cnp.PyArray_NDIM(leaf)
    cdef cnp.npy_intp* dims
    if <PyObject*>cnp.PyArray_DESCR(leaf) != key.dtype or ndim != PyTuple_GET_SIZE(shape):
        return False
    dims = cnp.PyArray_DIMS(leaf)
    for i in range(ndim):
        if dims[i] != PyLong_AsSsize_t(<object>PyTuple_GET_ITEM(shape, i)):
            return False
    return True


cdef inline bint _same_field(PyObject* a, PyObject* b) except -1:
    if a == b:
        return True
    if a == NULL or b == NULL:
        return False
    return PyObject_RichCompareBool(<object>a, <object>b, Py_EQ)


cdef bint _same_key(LeafKey* a, LeafKey* b) except -1:
    return (a.kind == b.kind and a.committed == b.committed
            and _same_field(a.aval, b.aval) and _same_placement(a, b)
            and _same_layout(a, b)
            and _same_field(a.impl, b.impl) and _same_field(a.py_type, b.py_type)
            and _same_field(a.dtype, b.dtype) and _same_field(a.shape, b.shape))


cdef inline bint _same_layout(LeafKey* a, LeafKey* b) except -1:
    """Equal device layouts, or one not known (keyed from a donated array)."""
    return a.layout == NULL or b.layout == NULL or _same_field(a.layout, b.layout)


cdef bint _same_but_abstract_mesh(object a, object b) except -1:
    """Two avals alike but for their shardings' abstract meshes, one of them empty."""
    try:
        return (a.shape == b.shape and a.dtype == b.dtype and a.weak_type == b.weak_type
                and a.memory_space == b.memory_space and a.sharding.spec == b.sharding.spec
                and (a.sharding.mesh.empty or b.sharding.mesh.empty))
    except AttributeError:
        return False


cdef inline bint _same_placement(LeafKey* a, LeafKey* b) except -1:
    """Equal shardings; for keys, equivalent physical shardings: jax keys a
    typed key on its logical sharding, which P() and P(None,) on its physical
    array both give (its executables hand back either, on alternate calls)."""
    if _same_field(a.sharding, b.sharding):
        return True
    if a.kind != LEAF_KEY or a.sharding == NULL or b.sharding == NULL:
        return False
    try:
        return (<object>a.sharding).is_equivalent_to(<object>b.sharding, len((<object>a.aval).shape))
    except Exception:
        return False


cdef inline Py_uhash_t _key_hash(Py_uhash_t h, LeafKey* key) except? 0:
    # Shardings and impls are left to equality: hashing them costs ~100 ns
    # each and they rarely tell two keys apart.
    h = hash_mix(h, <Py_uhash_t>key.kind + 2 * <Py_uhash_t>key.committed)
    if key.aval != NULL:
        h = hash_mix(h, <Py_uhash_t>hash(<object>key.aval))
    if key.py_type != NULL:
        h = hash_mix(h, <Py_uhash_t>hash(<object>key.py_type))
    if key.dtype != NULL:
        h = hash_mix(h, <Py_uhash_t>hash(<object>key.dtype))
        h = hash_mix(h, <Py_uhash_t>hash(<object>key.shape))
    return h


# What CallSignature.leaf_keys() shows of each LeafKey, for reports and tests.
LeafKeyView = namedtuple("LeafKeyView", "kind aval sharding committed impl py_type dtype shape")
LEAF_KIND_NAMES = ("array", "key", "scalar", "host")


cdef inline object _view_field(PyObject* field):
    return None if field == NULL else <object>field


cdef object _view(LeafKey* key):
    return LeafKeyView(
        LEAF_KIND_NAMES[key.kind], _view_field(key.aval), _view_field(key.sharding),
        key.committed, _view_field(key.impl), _view_field(key.py_type),
        _view_field(key.dtype), _view_field(key.shape))


cdef void _adopt(LeafKey* key, LeafKey* fresh) noexcept:
    """Swap the objects of ``fresh``, a key equal to ``key``, into ``key``; its
    old ones are left in ``fresh``, for the caller to release (no object is
    released here, so no other thread sees a key half swapped).  A key's old
    physical sharding stays acceptable (jax's executables give a key's
    physical array either of two equivalent shardings)."""
    cdef LeafKey old = key[0]
    key.aval, key.sharding, key.impl = fresh.aval, fresh.sharding, fresh.impl
    key.py_type, key.dtype, key.shape = fresh.py_type, fresh.dtype, fresh.shape
    fresh.aval, fresh.sharding, fresh.impl = old.aval, old.sharding, old.impl
    fresh.py_type, fresh.dtype, fresh.shape = old.py_type, old.dtype, old.shape
    if fresh.layout != NULL:   # else a deleted leaf's: the known layout stays
        key.layout, fresh.layout = fresh.layout, old.layout
    if key.kind == LEAF_KEY and old.sharding != NULL and old.sharding != key.sharding:
        Py_INCREF(<object>old.sharding)
        fresh.other_sharding = old.other_sharding
        key.other_sharding = old.sharding


cdef bint _adopt_equal(LeafKey* key, object leaf) except -1:
    """The slow half of the guard: ``leaf`` failed identity; keyed anew and
    equal to ``key``, its objects are taken into ``key`` (``_adopt``)."""
    cdef LeafKey fresh
    cdef LeafKind kind = classify_leaf(leaf)
    if kind != key.kind:
        return False
    memset(&fresh, 0, sizeof(LeafKey))
    try:
        _fill_key(&fresh, leaf, kind)
        if not _same_key(&fresh, key):
            return False
        _adopt(key, &fresh)
        return True
    finally:
        _release_key(&fresh)


cdef inline bint _takes(LeafKey* key, object leaf) except -1:
    """The guard on one leaf: by identity, else by equality, its objects adopted."""
    return _leaf_matches(leaf, key) or _adopt_equal(key, leaf)


cdef void _release_key(LeafKey* key):
    Py_XDECREF(key.aval)
    Py_XDECREF(key.sharding)
    Py_XDECREF(key.other_sharding)
    Py_XDECREF(key.layout)
    Py_XDECREF(key.impl)
    Py_XDECREF(key.py_type)
    Py_XDECREF(key.dtype)
    Py_XDECREF(key.shape)


def leaf_key(leaf):
    """The LeafKeyView a call's signature holds for ``leaf`` as one of its
    dynamic arguments; None for a leaf the dispatcher does not key (a tracer,
    anything else: the call goes to jax.jit)."""
    cdef LeafKind kind = classify_leaf(leaf)
    if kind > LEAF_HOST:
        return None
    cdef LeafKey key
    memset(&key, 0, sizeof(LeafKey))
    try:
        _fill_key(&key, leaf, kind)
        return _view(&key)
    finally:
        _release_key(&key)


cdef class CallSignature:
    """The key of one cache entry.  Built by the dispatcher; read by the tracer."""

    def __init__(self, *args, **kwargs):
        raise TypeError("CallSignature is made by the dispatcher, not directly")

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.keys == NULL:
            return
        for i in range(self.num_leaves):
            _release_key(&self.keys[i])
        PyMem_Free(self.keys)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if not isinstance(other, CallSignature):
            return NotImplemented
        cdef CallSignature o = <CallSignature>other
        cdef Py_ssize_t i
        if self is o:
            return True
        if (self._hash != o._hash or self.num_leaves != o.num_leaves
                or not self.treedef.same_as(o.treedef) or not same_context(self.context, o.context)):
            return False
        for i in range(self.num_leaves):
            if not _same_key(&self.keys[i], &o.keys[i]):
                return False
        return self.static_args == o.static_args

    cdef bint adopts_call(self, TreeDef treedef, list leaves, tuple static_args,
                          tuple context) except -1:
        if treedef is not self.treedef and not treedef.same_as(self.treedef):
            return False
        if not same_context(context, self.context):
            return False
        if static_args is not self.static_args:
            try:
                if static_args != self.static_args:
                    return False
            except Exception:
                return False   # a static argument's __eq__ raised: the lookup reports it
        return self.adopt_leaves(PySequence_Fast_ITEMS(leaves), PyList_GET_SIZE(leaves))

    cdef bint adopt_leaves(self, PyObject** leaves, Py_ssize_t n) except -1:
        cdef Py_ssize_t i
        if n != self.num_leaves:
            return False
        for i in range(n):
            if not _takes(&self.keys[i], <object>leaves[i]):
                return False
        return True

    def adopt_leaves_now(self, list leaves):
        """``adopt_leaves`` on a list of leaves (for tests)."""
        return self.adopt_leaves(PySequence_Fast_ITEMS(leaves), PyList_GET_SIZE(leaves))

    cdef bint adopt_leaf(self, object leaf, Py_ssize_t i) except -1:
        return 0 <= i < self.num_leaves and _takes(&self.keys[i], leaf)

    cpdef bint runs_as(self, CallSignature other) except -1:
        """Whether ``other``'s executable runs calls of this signature as jax
        runs them: jax keys an array on its shape, dtype, weak type and
        sharding, not on its aval's abstract mesh, which is empty for an
        array made outside jit under jax.set_mesh and the mesh's for one an
        executable returned."""
        cdef Py_ssize_t i
        cdef LeafKey* a
        cdef LeafKey* b
        if self is other:
            return True
        if (self.num_leaves != other.num_leaves or not self.treedef.same_as(other.treedef)
                or not same_context(self.context, other.context) or self.static_args != other.static_args):
            return False
        for i in range(self.num_leaves):
            a, b = &self.keys[i], &other.keys[i]
            if _same_key(a, b):
                continue
            if not (a.kind == b.kind == LEAF_ARRAY and a.committed == b.committed
                    and _same_placement(a, b) and _same_layout(a, b)
                    and _same_but_abstract_mesh(<object>a.aval, <object>b.aval)):
                return False
        return True

    def leaf_paths(self):
        """Each keyed leaf's path (a tuple of jax key entries), in key order."""
        if self.front is not None:
            return self.front.leaf_paths(self)
        return leaf_paths(self.treedef)

    def static_items(self):
        """``(label, value)`` of each static argument, in key order; a label
        is a position, a name, or (a front end's) a leaf's path."""
        if self.front is not None:
            return self.front.static_items(self)
        items = self.static_args
        return [(str(items[i]), items[i + 2]) for i in range(0, len(items), 3)]

    def leaf_keys(self):
        """Each leaf's key as a LeafKeyView, in flatten order (kind as a name)."""
        cdef Py_ssize_t i
        return [_view(&self.keys[i]) for i in range(self.num_leaves)]

    def debug_string(self):
        """The signature as text, for people (as jaxlib's CallSignature has
        one): each dynamic leaf by argument path, with its aval (an array's,
        weak type and committed sharding included), its Python type (a scalar)
        or its dtype and shape (a numpy value); then the static arguments."""
        text = ", ".join([
            _path_text(path, self.arg_names) + ": " + _key_text(key)
            for path, key in zip(self.leaf_paths(), self.leaf_keys())])
        static = ", ".join([
            f"{_path_text(label, self.arg_names) if type(label) is tuple else label}={value!r}"
            for label, value in self.static_items()])
        return text + ("; static " + static if static else "")

    def __repr__(self):
        return f"CallSignature({self.debug_string()})"


def argument_of(tuple path, tuple arg_names):
    """``(parameter, rest of the path)`` for a path from the root (args, kwargs):
    ``(SequenceKey(0), SequenceKey(1), DictKey('w'))`` -> ``("params", (DictKey('w'),))``."""
    if len(path) >= 2 and path[0] == _POSITIONAL and isinstance(path[1], SequenceKey):
        index = path[1].idx
        name = arg_names[index] if index < len(arg_names) else f"args[{index}]"
        return name, path[2:]
    if len(path) >= 2 and path[0] == _KEYWORD and isinstance(path[1], DictKey):
        return str(path[1].key), path[2:]
    if path and isinstance(path[0], str):   # a front end's own root, e.g. "fun"
        return path[0], path[1:]
    return keystr(path), ()


cdef str _path_text(tuple path, tuple arg_names):
    argument, rest = argument_of(path, arg_names)
    return argument + keystr(rest)


cdef str _key_text(key):
    """One LeafKeyView as text: ``f32[2,3]{weak}``, ``float``, ``f32[4] (numpy)``."""
    if key.kind == "scalar":
        return key.py_type.__name__
    if key.kind == "host":
        return f"{np.dtype(key.dtype).name}{list(key.shape)} (numpy)"
    if key.kind == "key":
        text = _jax.key_aval_text(key.impl, key.aval)
    else:
        text = key.aval.str_short(short_dtypes=True) + ("{weak}" if key.aval.weak_type else "")
    return text + (f"@{key.sharding}" if key.committed else "")


cdef CallSignature make_signature(TreeDef treedef, list leaves, tuple static_args,
                                  tuple context, tuple arg_names, LeafKind* unkeyed,
                                  object front=None):
    cdef Py_ssize_t i, n = PyList_GET_SIZE(leaves)
    cdef LeafKind kind
    cdef CallSignature sig = CallSignature.__new__(CallSignature)
    sig.keys = <LeafKey*>PyMem_Calloc(n if n > 0 else 1, sizeof(LeafKey))
    if sig.keys == NULL:
        raise MemoryError()
    sig.num_leaves = n   # the keys are zeroed: a partly filled signature frees cleanly
    cdef Py_uhash_t h = hash_mix(XXPRIME_5, <Py_uhash_t>hash(treedef))
    for i in range(n):
        leaf = <object>PyList_GET_ITEM(leaves, i)
        kind = classify_leaf(leaf)
        if kind > LEAF_HOST:
            unkeyed[0] = kind
            return None
        _fill_key(&sig.keys[i], leaf, kind)
        h = _key_hash(h, &sig.keys[i])
    # Not hash(): a TypeError raised here and caught by the engine on every
    # such call (each raises: jax.jit's error) would add its cost to jax's.
    cdef Py_hash_t static_hash = hash_or_minus_one(static_args)
    if static_hash == -1:
        PyErr_Clear()
        unkeyed[0] = UNHASHABLE_STATIC
        return None
    h = hash_mix(h, <Py_uhash_t>static_hash)
    sig.treedef = treedef
    sig.static_args = static_args
    sig.context = context
    sig.arg_names = arg_names
    sig.front = front
    sig._hash = <Py_hash_t>h if <Py_hash_t>h != -1 else -2
    return sig
