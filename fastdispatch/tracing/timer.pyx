"""An interval timer whose signal goes to one thread only (Linux's
``timer_create`` with ``SIGEV_THREAD_ID``): the line sampler's clock.

A process-wide timer (``setitimer``) signals whichever thread the kernel
picks, interrupting a system call of a runtime thread (XLA's, gRPC's) that
may not expect it; this one signals only the thread that asked, whose
Python handler then reads its own frames.  Elsewhere than Linux, ``start``
raises OSError(ENOSYS).
"""

cdef extern from *:
    """
    #include <errno.h>
    #include <signal.h>
    #include <string.h>
    #include <time.h>
    #if defined(__linux__) && defined(SIGEV_THREAD_ID)
    #ifndef sigev_notify_thread_id
    #define sigev_notify_thread_id _sigev_un._tid
    #endif
    static int fd_timer_start(int signo, long tid, long long interval_ns, void** out) {
        struct sigevent event;
        struct itimerspec spec;
        timer_t timer;
        memset(&event, 0, sizeof event);
        event.sigev_notify = SIGEV_THREAD_ID;
        event.sigev_signo = signo;
        event.sigev_notify_thread_id = (pid_t)tid;
        if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) return errno;
        spec.it_interval.tv_sec = (time_t)(interval_ns / 1000000000LL);
        spec.it_interval.tv_nsec = (long)(interval_ns % 1000000000LL);
        spec.it_value = spec.it_interval;
        if (timer_settime(timer, 0, &spec, NULL) != 0) {
            int error = errno;
            timer_delete(timer);
            return error;
        }
        *out = (void*)timer;
        return 0;
    }
    static int fd_timer_stop(void* timer) {
        return timer_delete((timer_t)timer) == 0 ? 0 : errno;
    }
    #else
    static int fd_timer_start(int signo, long tid, long long interval_ns, void** out) {
        return ENOSYS;
    }
    static int fd_timer_stop(void* timer) { return ENOSYS; }
    #endif
    """
    int fd_timer_start(int signo, long tid, long long interval_ns, void** out) nogil
    int fd_timer_stop(void* timer) nogil

import os


cdef class ThreadTimer:
    """Sends ``signo`` to the thread of native id ``thread_id`` every
    ``interval_ns`` nanoseconds, from ``start`` until ``stop``."""

    cdef void* timer
    cdef bint running

    def start(self, int signo, long thread_id, long long interval_ns):
        cdef void* timer = NULL
        cdef int error = fd_timer_start(signo, thread_id, interval_ns, &timer)
        if error:
            raise OSError(error, os.strerror(error))
        self.timer, self.running = timer, True
        return self

    def stop(self):
        """Delete the timer (a second call does nothing); any thread may."""
        if self.running:
            self.running = False
            fd_timer_stop(self.timer)

    def __dealloc__(self):
        if self.running:
            fd_timer_stop(self.timer)
