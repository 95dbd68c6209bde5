"""Filling the store where jax's persistent cache served a miss.

A miss whose compile jax's persistent cache (warm/jax_cache.py) served cannot
be written as it is: an executable jax loaded from its cache does not
serialize again whole (on CPU its code is missing from the copy).  Left so,
the store would never hold the call: every later run would miss it again and
pay tracing and lowering, as jax's cache alone does.  That happens whenever
the key changed while the computation did not, as after an edit anywhere in
the program's file (a user module is keyed by its source).

So the lowering is compiled once more, for the store, in a thread beside the
program: with XLA options set to their default values
(``xla_embed_ir_in_executable=False``, ...), which leave the executable as
it is but give jax's cache another key, so that XLA compiles it.  Where jax's
cache serves that key too (another signature of the same step, whose lowering
is the same, refilled just before; or a run that wrote jax's entry and died
before the store's), the next set of options is tried; after the last, the
call is not written, and says so.  One thread compiles the refills in turn;
it is not a daemon: Python waits for it at exit (before atexit hooks, the
--trace summary among them).
"""

from __future__ import annotations

import collections
import threading

# Compiles as jax would without them, each under another key of jax's cache:
# XLA debug options, every one at its default value.
FRESH_COMPILES = (
    {"xla_embed_ir_in_executable": False},
    {"xla_embed_ir_in_executable": False, "xla_dump_hlo_as_text": False},
    {"xla_embed_ir_in_executable": False, "xla_dump_hlo_as_text": False, "xla_dump_hlo_as_proto": False},
)

_local = threading.local()
_lock = threading.Lock()
_queue = collections.deque()
_worker = None


def active() -> bool:
    """Whether this thread is the refills': its compile events are not the program's."""
    return getattr(_local, "active", False)


def start(lowered, write, failed, hits) -> None:
    """Compile ``lowered`` for the store beside the program, then
    ``write(compiled)``; ``failed(why)`` on an error, or when jax's cache
    served every fresh compile (``hits()``: this thread's count of jax's
    cache hits)."""
    global _worker
    with _lock:
        _queue.append((lowered, write, failed, hits))
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


def _refill(lowered, write, failed, hits):
    try:
        for options in FRESH_COMPILES:
            before = hits()
            compiled = lowered.compile(compiler_options=options)
            if hits() == before:
                write(compiled)
                return
        failed("jax's persistent cache served every compile made for the store too")
    except Exception as error:  # never let the store break the program
        failed(f"its compile for the store failed ({type(error).__name__}: {error})")
