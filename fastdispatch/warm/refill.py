"""Filling the store where jax's persistent cache served a miss.

A miss whose compile jax's persistent cache (warm/jax_cache.py) served cannot
be written as it is: an executable jax loaded from its cache does not
serialize again whole (on CPU its code is missing from the copy).  Left so,
the store would never hold the call: every later run would miss it again and
pay tracing and lowering, as jax's cache alone does.  That happens whenever
the key changed while the computation did not, as after an edit anywhere in
the program's file (a user module is keyed by its source).

So the lowering is compiled once more, for the store, in a thread beside the
program, under an XLA option that leaves the executable as it is but gives
jax's cache a key of its own: ``xla_debug_buffer_assignment_show_max``, how
many buffers XLA's debug text of a buffer assignment lists, set to a number
above a billion drawn from the store key.  (XLA's dump options would do as
well, but jax leaves them out of its cache key.)  jax's cache is not written
in that thread (a copy under a key no run asks for would only take room), so
the key of each store key's first try is never in it; should it be (a jax
that wrote it after all), the next tries follow.  One thread compiles the
refills in turn; it is not a daemon: Python waits for it at exit (before
atexit hooks, the --trace summary among them).
"""

from __future__ import annotations

import collections
import threading

from fastdispatch import _jax

# Tries per store key: each with a key of jax's cache of its own.
TRIES = 3
_BASE = 1 << 30


def fresh_options(seed: str, attempt: int) -> dict:
    """XLA options under which a compile is jax's own with a key of jax's
    cache that no other store key's refill shares (``seed``: the store key's
    hex digest)."""
    return {"xla_debug_buffer_assignment_show_max": _BASE + int(seed[:7], 16) * TRIES + attempt}


_local = threading.local()
_lock = threading.Lock()
_queue = collections.deque()
_worker = None


def active() -> bool:
    """Whether this thread is the refills': its compile events are not the program's."""
    return getattr(_local, "active", False)


def start(lowered, seed, write, failed, hits) -> None:
    """Compile ``lowered`` for the store beside the program (``seed``: the
    store key's hex digest), then ``write(compiled)``; ``failed(why)`` on an
    error, or when jax's cache served every fresh compile (``hits()``: this
    thread's count of jax's cache hits)."""
    global _worker
    with _lock:
        _queue.append((lowered, seed, write, failed, hits))
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_run, name="fastdispatch-warm-refill", daemon=False)
            _worker.start()


def join(timeout: float | None = None) -> bool:
    """Wait for the refills begun so far (True once they are done); for tests."""
    worker = _worker
    if worker is not None:
        worker.join(timeout)
        return not worker.is_alive()
    return True


def _run():
    _local.active = True
    while True:
        with _lock:
            if not _queue:
                return
            job = _queue.popleft()
        _refill(*job)


def _refill(lowered, seed, write, failed, hits):
    try:
        for attempt in range(TRIES):
            before = hits()
            with _jax.jax_cache_unwritten():
                compiled = lowered.compile(compiler_options=fresh_options(seed, attempt))
            if hits() == before:
                write(compiled)
                return
        failed("jax's persistent cache served every compile made for the store too")
    except Exception as error:  # never let the store break the program
        failed(f"its compile for the store failed ({type(error).__name__}: {error})")
