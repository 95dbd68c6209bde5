# Inline helpers for cache keys, shared by the pytree, signature and dispatch
# modules: the hash-combining round and the identity test of tuples.
# Declarations and inline functions only: no module backs this header.
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

cdef extern from *:
    """
    /* xxHash's primes, as CPython's tuple hash uses them. */
    #define FD_XXPRIME_1 11400714785074694791ULL
    #define FD_XXPRIME_2 14029467366897019727ULL
    #define FD_XXPRIME_5 2870177450012600261ULL
    """
    ctypedef size_t Py_uhash_t
    const Py_uhash_t XXPRIME_1 "FD_XXPRIME_1"
    const Py_uhash_t XXPRIME_2 "FD_XXPRIME_2"
    const Py_uhash_t XXPRIME_5 "FD_XXPRIME_5"


cdef inline Py_uhash_t hash_mix(Py_uhash_t acc, Py_uhash_t lane) noexcept:
    # The combining round of CPython's tuple hash (xxHash's).
    acc += lane * XXPRIME_2
    acc = (acc << 31) | (acc >> 33)
    return acc * XXPRIME_1


cdef inline bint same_items(tuple a, tuple b) noexcept:
    """Both tuples hold the very same objects, in order: no __eq__ is called.
    Keys are mostly rebuilt from the same objects each call (jax's trace
    context, dataclass aux data, keyword names), so this settles most checks."""
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(a)
    if a is b:
        return True
    if n != PyTuple_GET_SIZE(b):
        return False
    for i in range(n):
        if PyTuple_GET_ITEM(a, i) != PyTuple_GET_ITEM(b, i):
            return False
    return True
