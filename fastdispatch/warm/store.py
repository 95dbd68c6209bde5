"""The warm-start store: one file per compiled call, in one directory.

A file is named by its key (warm/keys.py) and holds a header (magic, the
payload's length and sha256) and the payload: jax's serialized executable
with its input and output trees (``jax.experimental.serialize_executable``),
the ids of the devices it runs on (loaded onto those, not onto every device),
the front ends' output recipe (plain data: warm/outputs.py), and the warnings
its compile issued, which a load issues again (warm/warned.py).
What disks and people do to it:

- writes are atomic (a temporary file in the directory, then ``os.replace``),
  so two processes filling one store at once each leave a whole file;
- a file that is short, garbage or fails its checksum is a miss, with one
  warning, and is written again after the compile;
- a store made by another version of jax, jaxlib or fastdispatch is never
  read: the versions are in the key;
- the store is bounded (``max_bytes``): after a write, the least recently
  used files go (a load touches its file's mtime);
- a read-only store loads and never writes.

Only a directory the user trusts may be a store: loading an executable runs
pickle on the file (checksummed against damage, not against an attacker).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
import tempfile
import threading
import time
import warnings

import jax
from jax.experimental import serialize_executable

from fastdispatch import _jax, _reasons
from fastdispatch.warm import warned as warned_module

MAGIC = b"fastdispatch-warm-1\n"
SUFFIX = ".jit"
_TEMP_PREFIX = ".tmp-"
# A temporary file older than this was left by a process that died mid-write.
_STALE_TEMP_SECONDS = 3600
_HEADER = struct.Struct("<Q32s")  # payload length, sha256 of the payload

DEFAULT_MAX_BYTES = 1 << 30
# The folder of the machines a store's executables were compiled for: one
# file each, named by its environment's digest (Store.note_machine).
_MACHINES = ".machines"


class WarmStartWarning(RuntimeWarning):
    """A store file could not be read (it is then compiled and written again)."""


class Store:
    """One warm-start directory, as one process sees it."""

    def __init__(self, directory, max_bytes=DEFAULT_MAX_BYTES):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"warm_start: max_bytes must be a non-negative int, got {max_bytes!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.max_bytes = max_bytes
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError:
            pass  # read-only and absent: every load misses, nothing is written
        self.writable = os.access(self.directory, os.W_OK | os.X_OK)
        self._lock = threading.Lock()
        self._warned = set()
        self.counts = dict.fromkeys(
            ("loaded", "preloaded", "missed", "written", "damaged", "not_written", "evicted"), 0
        )
        self.preloader = None  # warm/preload.py's, where warm start loads in the background
        self.not_stored = {}  # function name -> why its calls are not stored
        self.reasons = {}  # function name -> that reason, as data (fastdispatch._reasons)
        # How jax's own persistent cache stands under this store (warm/jax_cache.py).
        self.jax_cache = {"directory": None, "owner": None, "settings": {}}

    def sharing(self) -> Store:
        """Another view of this store (its directory, lock, settings and
        background loads) with counts and refusals of its own: jax's own
        compiles (warm/jax_own.py) are counted apart from the front ends'
        calls."""
        view = object.__new__(Store)
        view.__dict__.update(self.__dict__)
        view.counts = dict.fromkeys(self.counts, 0)
        view.not_stored = {}
        view.reasons = {}
        return view

    def note_machine(self, machine: dict) -> None:
        """Warn, once, when this store holds executables compiled only for
        other machines, versions or settings (``machine``: this process's,
        keys.machine()): none of them is served here, since every key
        digests its environment; then note this one beside them."""
        folder = os.path.join(self.directory, _MACHINES)
        mine = os.path.join(folder, machine["digest"] + ".json")
        if os.path.exists(mine):
            return
        others = []
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = []
        for name in names:
            try:
                with open(os.path.join(folder, name)) as f:
                    others.append(json.load(f))
            except (OSError, ValueError):
                continue
        if others:
            warnings.warn(_machine_message(self.directory, others, machine), WarmStartWarning, stacklevel=3)
        if self.writable:
            try:
                os.makedirs(folder, exist_ok=True)
                write_atomically(mine, json.dumps(machine, indent=1).encode())
            except OSError:
                pass  # the note only explains a later process's misses

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key + SUFFIX)

    def _count(self, name, n=1, tally=None):
        with self._lock:
            self.counts[name] += n
            if tally is not None:
                tally[name] = tally.get(name, 0) + n

    def refuse(self, fun, reason: str, detail: str):
        """Record why ``fun``'s calls are not stored (for warm_start_stats):
        ``reason``, one of fastdispatch._reasons' WARM_ constants, and
        "not stored: <name> <detail>"."""
        name = function_name(fun)
        with self._lock:
            self.not_stored[name] = f"not stored: {name} {detail}"
            self.reasons[name] = reason

    # -- reading ---------------------------------------------------------------

    def load(self, key: str, tally: dict | None = None, trees=None):
        """What was saved under ``key``: the jax.stages.Compiled, or
        (Compiled, recipe) where ``save`` had a recipe; or None.  A key names
        one front end's call, so each front end reads back what it wrote.  The
        outcome ("loaded", "missed" or "damaged") is also counted in ``tally``;
        a load the background preloader made is counted "preloaded" too.
        ``trees``: (input tree, output tree) for one saved without its own.
        The warnings the compile issued are issued again (warm/warned.py),
        raising what the program's filters make of them."""
        path = self.path(key)
        loaded = None
        if self.preloader is not None and trees is None:
            loaded = self.preloader.take(key)
        if loaded is not None:
            self._count("preloaded", tally=tally)
        else:
            outcome, loaded = self.read(key, trees)
            if outcome == "missed":
                self._count("missed", tally=tally)
                return None
            if outcome == "damaged":
                self._damaged(path, loaded, tally)  # loaded: why
                return None
        if self.preloader is not None:
            self.preloader.remember(key)
        try:
            os.utime(path)  # used now: the least recently used files go first
        except OSError:
            pass  # a read-only store
        self._count("loaded", tally=tally)
        loaded, warned = loaded
        warned_module.issue(warned)
        return loaded

    def read(self, key: str, trees=None):
        """``("loaded", (what load returns, the warnings to issue again))``,
        ``("missed", None)`` or ``("damaged", why)``: the file under ``key``,
        read and loaded onto its devices, counting and warning nothing (the
        preloader's threads call it, or its two halves: ``read_file`` needs
        no backend, ``deserialize`` puts the executable on the devices)."""
        outcome, stored = self.read_file(key)
        if outcome != "read":
            return outcome, stored
        return self.deserialize(stored, trees)

    def read_file(self, key: str):
        """``("read", what the file stores)``, ``("missed", None)`` or
        ``("damaged", why)``: the file under ``key``, read, checked and
        unpickled; nothing is put on a device."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return "missed", None
        except OSError as error:
            return "damaged", f"cannot be read ({error.strerror})"
        payload = _payload(data)
        if payload is None:
            return "damaged", "is damaged (truncated, or its checksum does not match)"
        try:
            return "read", pickle.loads(payload)
        except Exception as error:
            return "damaged", f"does not load ({type(error).__name__}: {error})"

    @staticmethod
    def deserialize(stored: dict, trees=None):
        """``("loaded", ...)`` as ``read`` returns it, or ``("damaged", why)``:
        a file's ``stored`` content, its executable loaded onto its devices
        (jaxlib releases the GIL meanwhile: loads run side by side)."""
        try:
            devices = {device.id: device for device in jax.devices()}
            in_tree, out_tree = (stored["in_tree"], stored["out_tree"]) if trees is None else trees
            compiled = serialize_executable.deserialize_and_load(
                stored["executable"],
                in_tree,
                out_tree,
                execution_devices=[devices[i] for i in stored["devices"]],
            )
            recipe = stored.get("recipe")
        except Exception as error:
            return "damaged", f"does not load ({type(error).__name__}: {error})"
        return "loaded", (compiled if recipe is None else (compiled, recipe), stored.get("warned", ()))

    def _damaged(self, path, what, tally=None):
        self._count("damaged", tally=tally)
        with self._lock:
            first = path not in self._warned
            self._warned.add(path)
        if first:
            warnings.warn(
                f"fastdispatch warm start: {path} {what}; compiling instead",
                WarmStartWarning,
                stacklevel=2,
            )

    # -- writing ---------------------------------------------------------------

    def save(
        self,
        key: str,
        compiled,
        fun,
        recipe=None,
        tally: dict | None = None,
        trees=True,
        flat_inputs=False,
        warned=(),
    ) -> None:
        """Write ``compiled`` (of ``fun``), and ``recipe`` when given, under
        ``key``: atomically, then bound the store; "written" (or "not_written")
        is also counted in ``tally``.  ``trees=False``: without its input and
        output trees, which the loading process supplies (checked mode: its
        trace's; their node data need not pickle).  ``flat_inputs``: the input
        tree is kept as a flat tuple of as many leaves (the front end feeds the
        executable its flat inputs itself).  ``warned``: the warnings its
        compile issued (warm/warned.py's ``recording``), which a load issues
        again.  Never raises: a store that cannot take it is left as it is."""
        if not self.writable:
            return
        try:
            serialized, in_tree, out_tree = serialize_executable.serialize(compiled)
            if recipe is not None or not trees:
                # The recipe rebuilds the result: jax's output tree (equinox's
                # holds whatever the trace returned, which need not pickle) is
                # kept as a flat list of as many leaves.
                out_tree = jax.tree_util.tree_structure([0] * out_tree.num_leaves)
            if not trees:
                in_tree = jax.tree_util.tree_structure([0] * in_tree.num_leaves)
            if flat_inputs:
                in_tree = jax.tree_util.tree_structure(((0,) * in_tree.num_leaves, {}))
            stored = {
                "executable": serialized,
                "in_tree": in_tree,
                "out_tree": out_tree,
                "devices": _jax.executable_device_ids(compiled),
            }
            if recipe is not None:
                stored["recipe"] = recipe
            if warned:
                stored["warned"] = tuple(warned)
            payload = pickle.dumps(stored, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:
            # Host callbacks (jax.debug.print, io_callback) hold Python
            # functions that do not pickle.
            self._count("not_written", tally=tally)
            self.refuse(
                fun,
                _reasons.WARM_NOT_SERIALIZABLE,
                f"has an executable that does not serialize ({type(error).__name__}: {error})",
            )
            return
        data = MAGIC + _HEADER.pack(len(payload), hashlib.sha256(payload).digest()) + payload
        try:
            write_atomically(self.path(key), data)
        except OSError:
            self._count("not_written", tally=tally)  # full or read-only after all: stay correct
            return
        self._count("written", tally=tally)
        if self.preloader is not None:
            self.preloader.remember(key)
        self.bound()

    def bound(self) -> None:
        """Remove the least recently used files until the store fits max_bytes."""
        files = []
        now = time.time()
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    try:
                        stat = entry.stat()
                    except OSError:
                        continue
                    if entry.name.startswith(_TEMP_PREFIX):
                        if now - stat.st_mtime > _STALE_TEMP_SECONDS:
                            with _quiet():
                                os.remove(entry.path)
                    elif entry.name.endswith(SUFFIX):
                        files.append((stat.st_mtime_ns, stat.st_size, entry.path))
        except OSError:
            return
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            with _quiet():
                os.remove(path)
                self._count("evicted")
            total -= size


def write_atomically(path: str, data: bytes) -> None:
    """``data`` as ``path``'s whole content: a temporary file beside it, then
    ``os.replace``, so that a reader never sees part of it (raises OSError;
    the temporary file is removed then)."""
    fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        with _quiet():
            os.remove(temp)
        raise


def _machine_message(directory: str, others: list, machine: dict) -> str:
    """Why nothing in ``directory`` is served to this process: what its
    executables were compiled for, against what this process is."""
    other = others[-1]  # the latest noted, by name: any one says enough
    differ = [part for part in ("versions", "devices", "processes") if other.get(part) != machine[part]]
    if differ:
        what = "; ".join(f"{part} {other.get(part)} (this process: {machine[part]})" for part in differ)
    else:
        what = "jax's settings or XLA's flags"
    more = f" and {len(others) - 1} more" if len(others) > 1 else ""
    return (
        f"fastdispatch warm start: {directory} holds executables compiled for another machine{more}, "
        f"which differs in {what}: none of them is served here; this process compiles its own and "
        "adds them to the store."
    )


def function_name(fun) -> str:
    """How warm_start_stats and the --trace summary name a function."""
    return getattr(fun, "__qualname__", None) or repr(fun)


def _payload(data: bytes):
    """The payload of a store file's bytes, or None when they are not a whole,
    unchanged file."""
    head = len(MAGIC) + _HEADER.size
    if len(data) < head or not data.startswith(MAGIC):
        return None
    length, digest = _HEADER.unpack_from(data, len(MAGIC))
    payload = data[head:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


class _quiet:
    """Ignore an OSError (a file another process removed first)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        return kind is not None and issubclass(kind, OSError)
