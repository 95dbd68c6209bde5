# The combining round of CPython's tuple hash (xxHash's), shared by the pytree
# and signature hashes.  Declarations and an inline function only: no module
# backs this header.

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
    acc += lane * XXPRIME_2
    acc = (acc << 31) | (acc >> 33)
    return acc * XXPRIME_1
