# Node types: what each Python type is to flatten, decided once per type from
# jax's registry (and the front ends' field readers).
cimport cython
from cpython.dict cimport PyDict_GetItem, PyDict_Size
from cpython.object cimport PyObject

from fastdispatch.core.keys cimport Py_uhash_t, same_items
from fastdispatch.core.pytree.fields cimport FieldLayout


@cython.final
cdef class NodeType:
    """What flatten needs to know about one Python type, looked up once per type."""
    cdef int kind                   # NODE_LEAF, NAMEDTUPLE, CUSTOM, DATACLASS or FIELDS
    cdef object node_type           # the type itself
    cdef object to_iter             # jax's flatten function (CUSTOM, DATACLASS, FIELDS)
    cdef object from_iter           # jax's unflatten function (CUSTOM, DATACLASS, FIELDS)
    cdef tuple data_fields          # DATACLASS: attribute names of the children
    cdef tuple meta_fields          # DATACLASS: attribute names of the aux data
    # DATACLASS: (name, from aux data, index) per field, in the class's order,
    # when its __init__ only stores them (built through __dict__); else None
    cdef tuple direct_fields
    cdef bint checked               # DATACLASS, FIELDS: checked against to_iter on a first instance
    cdef FieldLayout layout         # FIELDS: which __dict__ entries make the node
    cdef dict memos                 # aux data (atoms only) -> the last node built with it
    cdef list recent                # the last RECENT_MEMOS nodes of ``memos`` met, latest first


@cython.final
cdef class NodeTypes:
    """The types met so far (one instance, ``node_types()``): forgotten when
    jax's registry grows, as a type may have become a node."""
    cdef object registry            # jax's dict: type -> (to_iter, from_iter)
    cdef Py_ssize_t registry_size   # its size when ``by_type`` was filled
    cdef dict by_type               # type -> NodeType
    cdef object last_leaf_type      # the leaf type seen last: one pointer compare


cdef NodeTypes node_types()
cdef void forget_types(NodeTypes types)
cdef NodeType classify_type(type t)


cdef inline void check_registry(NodeTypes types):
    """Forget what we know of types when jax's registry has grown (it only grows)."""
    if PyDict_Size(types.registry) != types.registry_size:
        forget_types(types)


cdef inline NodeType lookup_type(NodeTypes types, type t):
    cdef PyObject* found = PyDict_GetItem(types.by_type, t)
    if found != NULL:
        return <NodeType>found
    return classify_type(t)


# True when reading the fields ourselves gives exactly what jax's to_iter gives.
cdef bint check_reader(NodeType info, object tree, tuple children, tuple aux) except -1
# A registered node's hash: its type's, and its aux data's where that is atoms.
cdef Py_uhash_t custom_hash(object node_type, object aux, bint atom) except? 0
# Aux data a memo may keep alive: nothing a user could be waiting to see collected.
cdef bint is_atom(object value, int depth) noexcept
# Aux data a memo may keep: atoms; a FieldLayout's own prefix is kept anyway.
cdef bint aux_is_atom(NodeType info, object aux) noexcept
# A register_dataclass node rebuilt through its __dict__ (NodeType.direct_fields).
cdef object build_dataclass(object node_type, tuple fields, tuple meta, tuple data)


cdef inline bint same_aux(object a, object b) noexcept:
    """Identical aux data, or tuples of identical items (register_dataclass makes a new
    meta tuple per call): reusing the old node then changes nothing observable."""
    if a is b:
        return True
    return type(a) is tuple and type(b) is tuple and same_items(<tuple>a, <tuple>b)
