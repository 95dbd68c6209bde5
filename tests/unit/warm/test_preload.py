"""fastdispatch.warm.preload: a program's manifests, and its loads in the
background (read at once, put on the devices once jax's backends are up,
several side by side, the first-needed first).  Across processes:
tests/e2e/test_warm_start.py."""

from __future__ import annotations

import shutil
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch
from fastdispatch.warm import preload, refill
from fastdispatch.warm.jax_own import FILE_PREFIX
from fastdispatch.warm.store import Store


def test_the_manifest_names_a_program_s_latest_keys(tmp_path):
    store = Store(tmp_path)
    preloader = preload.Preloader(store, "/somewhere/prog.py")

    def run(*keys):  # one process's keys, in the order it asked for them
        preloader._remembered.clear()
        for key in keys:
            preloader.remember(key)
            preloader.remember(key)  # once per process

    run("a", "b")
    run("a", "gone")
    run("c", "d", "b")
    for key in ("a", "b", "c", "d"):
        (tmp_path / (key + ".jit")).write_bytes(b"")
    # The last run's keys in the order it used them (its first call's first),
    # then the earlier runs', the latest first; each once, only those whose
    # files exist.
    assert preloader.latest_keys() == ["c", "d", "b", "a"]
    # Another program has its own manifest; a manifest that grew is compacted,
    # its order kept.
    assert preload.Preloader(store, "/elsewhere/prog.py").latest_keys() == []
    for _ in range(2 * preload.MAX_KEYS):
        run("c")
    assert preloader.latest_keys() == ["c", "d", "b", "a"]
    with open(preloader.manifest) as f:
        assert f.read() == "-\nc\nd\nb\na\n"
    assert preloader.latest_keys() == ["c", "d", "b", "a"]
    # Without a thread started (no keys to load, or none taken), take says so.
    assert preloader.take("c") is None and preloader.join(0)


def test_a_moved_program_finds_its_manifest_by_name_and_content(tmp_path):
    store = Store(tmp_path / "store")
    here, there, edited = tmp_path / "here", tmp_path / "there", tmp_path / "edited"
    for folder in (here, there, edited):
        folder.mkdir()
    (here / "train.py").write_text("print('train')\n")
    (there / "train.py").write_text("print('train')\n")  # the same program, elsewhere
    (edited / "train.py").write_text("print('train, edited')\n")
    (tmp_path / "store" / "k.jit").write_bytes(b"")
    preloader = preload.Preloader(store, str(here / "train.py"))
    preloader.remember("k")
    assert preload.Preloader(store, str(there / "train.py")).latest_keys() == ["k"]
    assert preload.Preloader(store, str(edited / "train.py")).latest_keys() == []
    # A program by its path first: edited in place, it keeps its manifest.
    (here / "train.py").write_text("print('train, edited in place')\n")
    assert preload.Preloader(store, str(here / "train.py")).latest_keys() == ["k"]
    # A module run with -m has a name, not a file: its path's manifest only.
    assert len(preload.program_names("some.module")) == 1


def test_threads_half_the_cores_at_most_eight_no_more_than_the_keys(monkeypatch):
    for cores, keys, threads in [(2, 10, 1), (1, 10, 1), (13, 10, 6), (64, 10, 8), (64, 3, 3), (None, 5, 1)]:
        monkeypatch.setattr(preload.os, "cpu_count", lambda cores=cores: cores)
        assert preload.thread_count(keys) == threads


@pytest.fixture
def stored(tmp_path):
    """A store holding four executables, and their keys in the order a run used them."""
    fastdispatch.warm_start(tmp_path, preload=False)
    try:
        for n in range(4):
            f = fastdispatch.jit(lambda x, n=n: x * n)
            f(jnp.ones(n + 1))
    finally:
        fastdispatch.warm_start(None)
    keys = sorted(path.stem for path in tmp_path.glob("*.jit") if not path.name.startswith("jax-"))
    assert len(keys) == 4
    return Store(tmp_path), keys


def reads_of(store, monkeypatch) -> list:
    """The keys whose files the store reads from now on, in order."""
    read = []
    read_file = store.read_file
    monkeypatch.setattr(store, "read_file", lambda key: (read.append(key), read_file(key))[1])
    return read


def preloader_of(store, keys):
    preloader = preload.Preloader(store, "/somewhere/prog.py")
    for key in keys:
        preloader.remember(key)
    preloader._remembered.clear()
    return preloader


def test_loads_begin_in_the_order_of_need_several_at_once(stored, monkeypatch):
    store, keys = stored
    monkeypatch.setattr(preload, "thread_count", lambda n: 2)
    # The first two loads wait for each other: they pass only side by side.
    both = threading.Barrier(2, timeout=10)
    threads = []
    deserialize = store.deserialize

    def side_by_side(content, trees=None):
        threads.append(threading.current_thread().name)
        if len(threads) <= 2:
            both.wait()
        return deserialize(content, trees)

    read = reads_of(store, monkeypatch)
    monkeypatch.setattr(store, "deserialize", side_by_side)
    preloader = preloader_of(store, keys)
    assert len(preloader.start()) == 2
    assert preloader.join(30)
    assert read == keys  # taken in the order the last run asked for them
    assert len(set(threads[:2])) == 2 and not both.broken
    for key in keys:
        compiled, warned = preloader.take(key)
        assert compiled is not None and warned == ()


def test_files_are_read_before_the_backends_start_and_loaded_after(stored, monkeypatch):
    store, keys = stored
    monkeypatch.setattr(preload, "thread_count", lambda n: 2)
    started = threading.Event()
    monkeypatch.setattr(preload._jax, "backends_started", started.is_set)
    loaded = []
    deserialize = store.deserialize
    monkeypatch.setattr(
        store, "deserialize", lambda content, trees=None: (loaded.append(1), deserialize(content, trees))[1]
    )
    read = reads_of(store, monkeypatch)
    preloader = preloader_of(store, keys)
    preloader.start()
    assert not preloader.join(0.3)
    # Each thread has read its first file, and waits for the program's backends.
    assert read == keys[:2] and loaded == []
    # A miss on a key whose load has not begun reads it itself, at once.
    assert preloader.take(keys[1]) is None
    started.set()
    assert preloader.join(30)
    assert len(loaded) == 3  # the cancelled one was left to its miss
    assert all(preloader.take(key) is not None for key in (keys[0], keys[2], keys[3]))
    assert preloader.take(keys[0]) is None  # taken once


def test_the_first_thread_reads_the_install_folders_before_its_loads(stored, monkeypatch):
    store, keys = stored
    monkeypatch.setattr(preload, "thread_count", lambda n: 1)
    order = []
    monkeypatch.setattr(preload.identity, "read_install_folders", lambda: order.append("folders"))
    read_file = store.read_file
    monkeypatch.setattr(store, "read_file", lambda key: (order.append(key), read_file(key))[1])
    preloader = preloader_of(store, keys)
    preloader.start()
    assert preloader.join(30)
    assert order == ["folders", *keys]


def test_install_folders_that_cannot_be_read_leave_the_loads_as_they_were(stored, monkeypatch):
    store, keys = stored
    monkeypatch.setattr(preload, "thread_count", lambda n: 1)

    def unreadable():
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a damaged dist-info")

    monkeypatch.setattr(preload.identity, "read_install_folders", unreadable)
    preloader = preloader_of(store, keys)
    preloader.start()
    assert preloader.join(30)
    assert all(preloader.take(key) is not None for key in keys)


def test_stopped_at_exit_no_more_loads_begin_and_the_begun_ones_end(stored, monkeypatch):
    store, keys = stored
    monkeypatch.setattr(preload, "thread_count", lambda n: 2)
    # The program never starts jax's backends: the threads wait, then stop.
    monkeypatch.setattr(preload._jax, "backends_started", lambda: False)
    preloader = preloader_of(store, keys)
    preloader.start()
    assert preloader in preload._started  # Python stops it at exit (_stop_all)
    assert not preloader.join(0.2)
    preload._stop_all()
    assert preloader.join(0)
    assert all(preloader.take(key) is None for key in keys)  # each key's miss reads it


def test_a_file_that_does_not_load_is_left_to_the_miss(stored):
    store, keys = stored
    with open(store.path(keys[0]), "r+b") as f:
        f.seek(40)
        f.write(b"garbage")
    preloader = preloader_of(store, keys)
    preloader.start()
    assert preloader.join(30)
    assert preloader.take(keys[0]) is None  # damaged: the miss reads, counts and warns
    assert preloader.take(keys[1]) is not None


def test_jax_own_compiles_load_after_every_front_end_s_load_has_ended(stored, monkeypatch):
    store, keys = stored
    # Two of jax's own compiles (their files named so), asked for first and
    # between the front ends' calls.
    own = [FILE_PREFIX + "a", FILE_PREFIX + "b"]
    for key in own:
        shutil.copy(store.path(keys[0]), store.path(key))
    monkeypatch.setattr(preload, "thread_count", lambda n: 2)
    started = threading.Event()
    monkeypatch.setattr(preload._jax, "backends_started", started.is_set)
    events = []
    deserialize = store.deserialize

    def logged(content, trees=None):
        name = threading.current_thread().name
        events.append(("begin", name))
        try:
            return deserialize(content, trees)
        finally:
            events.append(("end", name))

    read = reads_of(store, monkeypatch)
    monkeypatch.setattr(store, "deserialize", logged)
    preloader = preloader_of(store, [own[0], keys[0], keys[1], own[1], keys[2]])
    preloader.start()
    assert not preloader.join(0.3)
    assert read == keys[:2]  # the front ends' first, in their order
    # A miss that cancels a front end's load not begun counts it as ended
    # (taken from another thread: a miss never waits for the lock it holds).
    taken = []
    miss = threading.Thread(target=lambda: taken.append(preloader.take(keys[2])))
    miss.start()
    miss.join(10)
    assert taken == [None]
    started.set()
    assert preloader.join(30)
    assert read[:2] == keys[:2] and sorted(read[2:]) == own
    # jax's own loads began once both front ends' had ended.
    assert [kind for kind, _ in events[:4]].count("end") == 2
    assert all(preloader.take(key) is not None for key in [*own, *keys[:2]])


def test_jax_own_compiles_load_in_the_background_where_two_threads_load(
    tmp_path, cache_settings, monkeypatch
):
    program = str(tmp_path / "prog.py")
    x = jax.device_put(np.arange(6.0, dtype=np.float32).reshape(2, 3))

    def run():  # one process: warm start from its start, two eager operations
        fastdispatch.warm_start(tmp_path / "store", program=program)
        jax.clear_caches()  # what earlier runs compiled misses again
        try:
            assert fastdispatch.warm.wait_for_preload(30)  # before the misses, which would not wait
            result = jnp.cos(x) - 3
            return result, fastdispatch.warm_start_stats()["jax_own"]
        finally:
            refill.join()
            fastdispatch.warm_start(None)

    first, counts = run()
    assert (counts["written"], counts["preloaded"]) == (2, 0)
    # The manifest names them; on a machine where one thread loads, their
    # misses load them.
    monkeypatch.setattr(preload, "thread_count", lambda n: 1)
    second, counts = run()
    assert (counts["loaded"], counts["preloaded"]) == (2, 0)
    monkeypatch.setattr(preload, "thread_count", lambda n: 2)
    third, counts = run()
    assert (counts["loaded"], counts["preloaded"], counts["written"]) == (2, 2, 0)
    for result in (second, third):
        np.testing.assert_array_equal(result, first)
        assert (result.dtype, result.weak_type) == (first.dtype, first.weak_type)
        assert result.sharding == first.sharding
