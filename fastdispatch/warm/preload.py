"""Loading a program's stored executables in the background, from its start.

Each program has a manifest in the store, ``.programs/<digest>``: the keys
each of its runs loaded or wrote, one per line, in the order the run first
asked for them, each run's after a line of its own.  A program is named twice
(``program_names``): by its script's path, and by the script's file name and
content, so that a program run from another folder, or a store copied to
another machine, still finds the keys its last run used.

When warm start begins, a few daemon threads take the last run's keys in
that order, then earlier runs' (``latest_keys``), each thread one key at a
time: it reads the file at once (disk, checksum, unpickling: no backend is
needed), and then, once the program has started jax's backends, loads the
executable onto its devices (``Store.deserialize``; jaxlib releases the GIL,
so several load side by side).  The loads thus overlap the program's imports
and model initialisation, the first-needed first, and keep ahead of its
calls; a miss finds its executable loaded (``take``), waits for the one being
loaded (never longer than a load of its own would take), or loads it itself
when no thread has begun it.  Before its first key, the first thread reads
what a first key would read from disk (identity.read_install_folders).

jax's own compiles (warm/jax_own.py) are in the manifest beside the front
ends' calls.  Where two threads or more load, they load in the background
too, after every front end's load has ended: on a TPU host an eager
operation's load took 4-16 ms on its miss, but loaded side by side with a
front end's executable they slowed its load four times (docs/warm-start.md).
With one thread (a machine of two or three cores) they load on their misses,
which leaves the thread to the front ends' executables.

The threads wait for the program to start jax's backends itself, so that its
own settings (platform, device count, x64) are in place first.  A file a
thread cannot load is left to the miss, which reads it again, counts and warns.
At exit the threads take no more loads and Python waits for the ones begun:
a daemon thread still loading when Python began to finalize took the GIL
back then, and Python's thread exit, unwinding jaxlib's C++ frames, aborted
the process.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import sys
import threading
import time
import weakref

from fastdispatch import _jax
from fastdispatch.warm import identity
from fastdispatch.warm.jax_own import FILE_PREFIX as OWN_PREFIX
from fastdispatch.warm.store import write_atomically

# Keys loaded per program, at most (flax's MiniGPT tutorial uses 61: 4 of
# its functions' and 57 of jax's own compiles).
MAX_KEYS = 128
# Threads loading at once: on a TPU host a large executable takes seconds to
# load, and eight loads side by side took a fifth of the time of one after
# another (docs/warm-start.md); on a machine of few cores, one, to leave the
# program's own thread its core.
MAX_THREADS = 8
_MANIFESTS = ".programs"
# The manifest's line before each run's keys.
_RUN = "-"
# Seconds between looks at jax's backends, while the program has not made them.
_WAIT_STEP = 0.005
_WAIT_STEP_MAX = 0.05


def thread_count(keys: int) -> int:
    """How many threads load ``keys`` keys: half this machine's cores, at
    least one and at most MAX_THREADS, no more than there are keys."""
    return max(1, min(MAX_THREADS, (os.cpu_count() or 2) // 2, keys))


def loads_own_compiles() -> bool:
    """Whether jax's own compiles load in the background here: where two
    threads or more load, else on their misses."""
    return thread_count(MAX_KEYS) > 1


class Preloader:
    """One program's background loads, and its manifests, in one store."""

    def __init__(self, store, program: str):
        self.store = store
        folder = os.path.join(store.directory, _MANIFESTS)
        self.manifests = [os.path.join(folder, name) for name in program_names(program)]
        self._remembered = set()
        self._lock = threading.Lock()
        self._pending = {}  # key -> _Load, until its miss takes it
        self._queue = []  # the loads no thread has taken yet, the first-needed last
        self._fronts_left = 0  # front ends' loads not ended: jax's own wait for them
        self._fronts_ended = threading.Event()
        self._threads = []
        self._stopping = threading.Event()

    @property
    def manifest(self) -> str:
        """The manifest of the program by its path (the one read first)."""
        return self.manifests[0]

    def start(self) -> list[threading.Thread]:
        """Begin loading the manifest's keys in daemon threads (none: no keys)."""
        keys = self.latest_keys()
        fronts = [_Load(key) for key in keys if not key.startswith(OWN_PREFIX)]
        owns = [_Load(key, own=True) for key in keys if key.startswith(OWN_PREFIX)]
        with self._lock:
            for load in fronts + owns:
                self._pending[load.key] = load
            self._queue = (fronts + owns)[::-1]
            self._fronts_left = len(fronts)
            if not fronts:
                self._fronts_ended.set()
        self._threads = [
            threading.Thread(
                target=self._run, args=(i == 0,), name=f"fastdispatch-warm-preload-{i}", daemon=True
            )
            for i in range(thread_count(len(keys)) if keys else 0)
        ]
        for thread in self._threads:
            thread.start()
        if self._threads:
            _started.add(self)
        return self._threads

    def stop(self) -> None:
        """Begin no more loads, and wait for the ones begun (at exit)."""
        self._stopping.set()
        self._fronts_ended.set()
        with self._lock:
            self._queue.clear()  # their misses read them, as for any key not begun
        self.join()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the background loads; True once they are done (or none ran)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def take(self, key: str):
        """What ``Store.read`` loaded for ``key`` in the background (waiting
        for it when it is being loaded onto the devices now), or None: the
        caller reads it (a load no thread has begun is not waited for)."""
        with self._lock:
            load = self._pending.pop(key, None)
            if load is None:
                return None
            if not load.loading:
                load.cancelled = True
                self._ended(load)
                return None
        load.done.wait()
        return load.value

    def remember(self, key: str) -> None:
        """Append ``key`` to the manifests, once per process (never raises)."""
        if key in self._remembered or not self.store.writable:
            return
        line = key + "\n" if self._remembered else f"{_RUN}\n{key}\n"  # the run's first key
        self._remembered.add(key)
        for manifest in self.manifests:
            try:
                os.makedirs(os.path.dirname(manifest), exist_ok=True)
                # One short write: processes appending at once keep whole lines.
                fd = os.open(manifest, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
        exist, MAX_KEYS at most.  From the manifest of the program's path,
        else of its name and content (a program moved, or a store copied).
        A manifest that grew is compacted to them."""
        for manifest in self.manifests:
            try:
                with open(manifest) as f:
                    lines = f.read().split("\n")
            except OSError:
                continue
            keys = self._keys(lines)
            if len(lines) > 4 * MAX_KEYS:
                _rewrite(manifest, keys)
            return keys
        return []

    def _keys(self, lines):
        runs = [[]]
        for line in lines:
            if line == _RUN:
                runs.append([])
            elif line:
                runs[-1].append(line)
        keys, seen = [], set()
        own = loads_own_compiles()
        for run in reversed(runs):
            for key in run:
                if not own and key.startswith(OWN_PREFIX):
                    continue
                if key not in seen and len(keys) < MAX_KEYS:
                    seen.add(key)
                    if os.path.exists(self.store.path(key)):
                        keys.append(key)
        return keys

    def _run(self, first: bool):
        if first:  # what the first key would read, read while the program imports
            try:
                identity.read_install_folders()
            except Exception:
                pass  # a folder that cannot be read is the key's to meet, and report
        while True:
            with self._lock:
                load = None
                while self._queue and load is None:
                    load = self._queue.pop()
                    if load.cancelled:
                        load = None
                if load is None:
                    return
            if load.own:
                self._fronts_ended.wait()
            outcome, stored = self.store.read_file(load.key)
            if outcome == "read":
                self._wait_for_backends()
                with self._lock:
                    load.loading = not (load.cancelled or self._stopping.is_set())
                    if not load.loading:
                        self._ended(load)
                        continue
                try:
                    outcome, stored = self.store.deserialize(stored)
                except BaseException:  # a load that fails is the miss's to report
                    outcome = "damaged"
            load.value = stored if outcome == "loaded" else None
            load.done.set()
            with self._lock:
                self._ended(load)

    def _ended(self, load):
        """Count a front end's load that ended (loaded, failed or cancelled)
        once; the last lets jax's own compiles load.  The lock is held."""
        if load.own or load.ended:
            return
        load.ended = True
        self._fronts_left -= 1
        if self._fronts_left == 0:
            self._fronts_ended.set()

    def _wait_for_backends(self):
        """Until the program has started jax's backends, or stop was called."""
        wait = _WAIT_STEP
        while not _jax.backends_started() and not self._stopping.wait(wait):
            wait = min(wait * 2, _WAIT_STEP_MAX)


# The preloaders whose threads may still load, stopped at exit (weakly: one
# that warm start replaced goes, with what it loaded, once its threads end).
_started = weakref.WeakSet()


@atexit.register
def _stop_all():
    for preloader in list(_started):
        preloader.stop()


def _rewrite(manifest, keys):
    """The manifest as one run of ``keys``, which keeps their order."""
    try:
        write_atomically(manifest, "".join(f"{line}\n" for line in [_RUN, *keys]).encode())
    except OSError:
        pass  # the manifest only speeds up the next start


class _Load:
    """One key's background load: taken by a thread (``loading`` once it puts
    the executable on the devices), or cancelled by a miss that came first;
    ``value`` once ``done``; ``own``: one of jax's own compiles."""

    __slots__ = ("cancelled", "done", "ended", "key", "loading", "own", "value")

    def __init__(self, key, own=False):
        self.key = key
        self.own = own
        self.loading = self.cancelled = self.ended = False
        self.value = None
        self.done = threading.Event()


def program_names(program: str) -> list[str]:
    """The manifest names of ``program`` (a script's path, or a module's name):
    by the path, then, for a script that can be read, by its file name and
    content (the same program elsewhere: another folder, another machine)."""
    names = [_digest(program)]
    try:
        with open(program, "rb") as f:
            content = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return names
    names.append(_digest(os.path.basename(program) + "\0" + content))
    return names


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def program_of_main() -> str | None:
    """The running program, as the manifest names it: its script's absolute
    path (None in an interactive session)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None
