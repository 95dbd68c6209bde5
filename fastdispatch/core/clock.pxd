# The dispatcher's clock: the one of time.perf_counter_ns() on Linux, read
# without a Python call (~20 ns), for trace timestamps.
# Declarations and inline functions only: no module backs this header.

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clock_id, timespec* tp)
    int CLOCK_MONOTONIC


cdef inline long long now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec
