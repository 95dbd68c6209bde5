"""Loading a program's stored executables in the background, from its start.

Each program (its script's path, or ``-m`` module) has a manifest in the store,
``.programs/<digest>``: the keys each of its runs loaded or wrote, one per
line, in the order the run first asked for them, each run's after a line of
its own.  When warm start begins, a daemon thread loads the files of the last
run's keys in that order, then of earlier runs' (warm/store.py's
``Store.read``), so that loading overlaps the program's imports and model
initialisation and keeps ahead of its calls; a miss then finds its executable
loaded (``take``), or waits for the one being loaded.

Deserializing an executable puts it on jax's devices, which initialises jax's
backends: the thread waits until the program has done so itself, so that its
own settings (platform, device count, x64) are in place first.  A file the
thread cannot load is left to the miss, which reads it again, counts and warns.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time

from fastdispatch import _jax
from fastdispatch.warm.store import write_atomically

# Keys loaded per program, at most.
MAX_KEYS = 64
_MANIFESTS = ".programs"
# The manifest's line before each run's keys.
_RUN = "-"
# Seconds between looks at jax's backends, while the program has not made them.
_WAIT_STEP = 0.005
_WAIT_STEP_MAX = 0.05


class Preloader:
    """One program's background loads, and its manifest, in one store."""

    def __init__(self, store, program: str):
        self.store = store
        digest = hashlib.sha256(program.encode()).hexdigest()[:32]
        self.manifest = os.path.join(store.directory, _MANIFESTS, digest)
        self._remembered = set()
        self._lock = threading.Lock()
        self._pending = {}  # key -> _Load, until its miss takes it
        self._thread = None

    def start(self) -> threading.Thread | None:
        """Begin loading the manifest's keys in a daemon thread (None: no keys)."""
        keys = self.latest_keys()
        if not keys:
            return None
        loads = [_Load(key) for key in keys]
        with self._lock:
            for load in loads:
                self._pending[load.key] = load
        self._thread = threading.Thread(
            target=self._run, args=(loads,), name="fastdispatch-warm-preload", daemon=True
        )
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the background loads; True once they are done (or none ran)."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def take(self, key: str):
        """What ``Store.read`` loaded for ``key`` in the background (waiting
        for it when it is being loaded now), or None: the caller reads it (a
        load the thread has not begun is not waited for)."""
        with self._lock:
            load = self._pending.pop(key, None)
            if load is None:
                return None
            if not load.begun:
                load.cancelled = True
                return None
        load.done.wait()
        return load.value

    def remember(self, key: str) -> None:
        """Append ``key`` to the manifest, once per process (never raises)."""
        if key in self._remembered or not self.store.writable:
            return
        line = key + "\n" if self._remembered else f"{_RUN}\n{key}\n"  # the run's first key
        self._remembered.add(key)
        try:
            os.makedirs(os.path.dirname(self.manifest), exist_ok=True)
            # One short write: processes appending at once keep whole lines.
            fd = os.open(self.manifest, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # the manifest only speeds up the next start

    def latest_keys(self) -> list[str]:
        """The keys to load, in the order the program will likely ask for
        them: the last run's, in the order it first asked for them, then each
        earlier run's, the latest first; each once, only those whose files
        exist, MAX_KEYS at most.  A manifest that grew is compacted to them."""
        try:
            with open(self.manifest) as f:
                lines = f.read().split("\n")
        except OSError:
            return []
        runs = [[]]
        for line in lines:
            if line == _RUN:
                runs.append([])
            elif line:
                runs[-1].append(line)
        keys, seen = [], set()
        for run in reversed(runs):
            for key in run:
                if key not in seen and len(keys) < MAX_KEYS:
                    seen.add(key)
                    if os.path.exists(self.store.path(key)):
                        keys.append(key)
        if len(lines) > 4 * MAX_KEYS:
            self._rewrite(keys)
        return keys

    def _rewrite(self, keys):
        """The manifest as one run of ``keys``, which keeps their order."""
        try:
            write_atomically(self.manifest, "".join(f"{line}\n" for line in [_RUN, *keys]).encode())
        except OSError:
            pass  # the manifest only speeds up the next start

    def _run(self, loads):
        wait = _WAIT_STEP
        while not _jax.backends_started():
            time.sleep(wait)
            wait = min(wait * 2, _WAIT_STEP_MAX)
        for load in loads:
            with self._lock:
                if load.cancelled:
                    continue
                load.begun = True
            try:
                outcome, value = self.store.read(load.key)
            except BaseException:  # a load that fails is the miss's to report
                outcome, value = "damaged", None
            load.value = value if outcome == "loaded" else None
            load.done.set()


class _Load:
    """One key's background load: begun by the thread, or cancelled by a miss
    that came first; ``value`` once ``done``."""

    __slots__ = ("begun", "cancelled", "done", "key", "value")

    def __init__(self, key):
        self.key = key
        self.begun = self.cancelled = False
        self.value = None
        self.done = threading.Event()


def program_of_main() -> str | None:
    """The running program, as the manifest names it: its script's absolute
    path (None in an interactive session)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None
