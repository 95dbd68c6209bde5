# Field layouts: registered types whose flatten reads the instance __dict__,
# read and rebuilt in C.
cimport cython


@cython.final
cdef class FieldLayout:
    """How a registered type's flatten function reads an instance (NODE_FIELDS)."""
    cdef readonly tuple children       # __dict__ keys of the children, in order
    cdef readonly tuple aux_prefix     # the aux data's first items: the same for every instance
    cdef readonly tuple aux_names      # __dict__ keys of the aux data's other items, in order
    cdef readonly Py_ssize_t dict_size  # valid only for instances whose __dict__ has this many entries
    cdef readonly bint direct_unflatten  # rebuild as object.__new__ and __dict__ writes
    cdef readonly object absent        # a value that means "not set": not written back
    # The last two __dict__ key orders seen (DictOrder): instances made by one
    # __init__, or rebuilt by unflatten, store their fields in one order each.
    cdef object recent_order
    cdef object older_order


# (children, aux) read from the instance __dict__, or None when the instance
# does not have the layout's exact set of entries.
cdef tuple read_fields(FieldLayout layout, object tree)
# ``aux`` was read through the layout: its length and its very prefix.
cdef bint has_layout_prefix(FieldLayout layout, object aux) noexcept
# The registered unflatten of a FieldLayout type, in C.
cdef object build_fields(object node_type, FieldLayout layout, tuple children, tuple aux)
