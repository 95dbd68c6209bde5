# cython: boundscheck=False, wraparound=False
"""Node types: what each Python type is to flatten (a leaf, a namedtuple, a
node in jax's registry), decided once per type.

A type registered with jax is a node here too, even if registered after
import: the types met are forgotten whenever jax's registry grows.  Two kinds
of registered node are walked in C rather than through their Python flatten
function: ``register_dataclass`` types (their fields by getattr) and types a
front end describes with a ``FieldLayout`` (``add_field_reader``).  The first
instance of each is checked against the registered function.
"""
import dataclasses
import importlib

from cpython.dict cimport PyDict_SetItem
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.keys cimport hash_mix as _mix
from fastdispatch.core.pytree.fields cimport has_layout_prefix
from fastdispatch.core.pytree.kinds cimport (
    NODE_CUSTOM, NODE_DATACLASS, NODE_FIELDS, NODE_LEAF, NODE_NAMEDTUPLE)
from fastdispatch._jax import dataclass_fields as _dataclass_fields, pytree_registry

cdef extern from "Python.h":
    dict PyObject_GenericGetDict(object o, void* context)


cdef enum:
    # Types seen; cleared past this many so classes made in a loop cannot pile up.
    MAX_NODE_TYPES = 4096


cdef object _object_new = object.__new__
cdef list _field_readers = []
# package -> the module whose import adds the field reader of that package's
# types (add_lazy_field_reader): loaded when the first such type is met, so
# that plain jit reads such a type in C without its front end in use.
cdef dict _lazy_readers = {}
cdef NodeType _LEAF_INFO = NodeType.__new__(NodeType)
_LEAF_INFO.kind = NODE_LEAF
cdef NodeTypes _TYPES = NodeTypes.__new__(NodeTypes)
_TYPES.registry = pytree_registry()
_TYPES.registry_size = -1
_TYPES.by_type = {}


cdef NodeTypes node_types():
    return _TYPES


cdef void forget_types(NodeTypes types):
    types.by_type.clear()
    types.last_leaf_type = None
    types.registry_size = PyDict_Size(types.registry)


cdef NodeType classify_type(type t):
    cdef NodeType info
    cdef object entry = _TYPES.registry.get(t)
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
                return classify_type(t)
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
    if len(_TYPES.by_type) >= MAX_NODE_TYPES:
        _TYPES.by_type.clear()
    _TYPES.by_type[t] = info
    return info


cdef bint check_reader(NodeType info, object tree, tuple children, tuple aux) except -1:
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


cdef Py_uhash_t custom_hash(object node_type, object aux, bint atom) except? 0:
    """hash(type), and hash(aux) where aux data is atoms; other aux data (a
    flax GraphDef: 12 us a hash, on every call) hashes as its type alone, as
    jaxlib's PyTreeDef hashes no node data at all (equality compares it)."""
    cdef Py_uhash_t h = <Py_uhash_t>hash(node_type)
    if aux is None or not atom:
        return h
    return _mix(h, <Py_uhash_t>hash(aux))


cdef bint is_atom(object value, int depth) noexcept:
    """Aux data a memo may keep alive: nothing a user could be waiting to see collected."""
    cdef type t = type(value)
    cdef Py_ssize_t i
    if value is None or t is str or t is int or t is float or t is bool or t is bytes:
        return True
    if t is tuple and depth < 3:
        for i in range(PyTuple_GET_SIZE(value)):
            if not is_atom(<object>PyTuple_GET_ITEM(value, i), depth + 1):
                return False
        return True
    return False


cdef bint aux_is_atom(NodeType info, object aux) noexcept:
    """Aux data a memo may keep: atoms; a FieldLayout's own prefix is kept anyway."""
    cdef Py_ssize_t i, n_prefix
    if info.kind != NODE_FIELDS or not has_layout_prefix(info.layout, aux):
        return is_atom(aux, 0)
    n_prefix = PyTuple_GET_SIZE(info.layout.aux_prefix)
    for i in range(n_prefix, PyTuple_GET_SIZE(aux)):
        if not is_atom(<object>PyTuple_GET_ITEM(aux, i), 1):
            return False
    return True


def add_field_reader(reader):
    """Teach flatten a family of registered types: ``reader(type, to_iter)``
    returns a FieldLayout when ``to_iter`` (the registered flatten function of
    ``type``) reads the instance __dict__ as the layout says, else None.  The
    first instance of each type is checked against ``to_iter``, and any
    difference leaves the type to ``to_iter``.  (Front ends call this; the
    equinox front end registers equinox Modules.)"""
    if reader not in _field_readers:
        _field_readers.append(reader)
        _TYPES.registry_size = -1      # classify every type again


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
            or any("__slots__" in vars(base) for base in cls.__mro__ if base is not object)):
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


cdef object build_dataclass(object node_type, tuple fields, tuple meta, tuple data):
    cdef object node = _object_new(node_type)
    cdef dict attributes = PyObject_GenericGetDict(node, NULL)
    cdef tuple field
    for item in fields:
        field = <tuple>item
        PyDict_SetItem(attributes, <object>PyTuple_GET_ITEM(field, 0), <object>PyTuple_GET_ITEM(
            meta if <object>PyTuple_GET_ITEM(field, 1) is True else data,
            <Py_ssize_t><object>PyTuple_GET_ITEM(field, 2)))
    return node
