# Proof that objects still hold what they held: the identity guard of a call
# on a previous call's very objects (filter_jit on an unchanged model).

cdef class Unchanged:
    cdef tuple checks              # _Contents, one per mutable container met
    cdef bint holds(self) except -1


# The proof for `roots`, or None when something below them could change
# without a check seeing it (a numpy array, a node whose flatten is Python
# code, a leaf whose == is its own).
cdef Unchanged record_unchanged(tuple roots)
