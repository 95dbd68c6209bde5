"""tracing.sampler: where "the rest" of the wall time goes, by the program's line."""

import signal
import threading
import time

import numpy as np

from fastdispatch.tracing.sampler import Sampler


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:  # SPIN: the program's own Python
        pass


def sort_a_lot(seconds):
    end = time.perf_counter() + seconds
    data = np.random.default_rng(0).standard_normal(50_000)
    while time.perf_counter() < end:
        np.sort(data, kind="stable")  # SORT: numpy's Python wrapper, then C


def sample_while(work):
    sampler = Sampler(interval=0.002).start()
    assert sampler is not None, "no per-thread timer on this machine"
    try:
        work()
    finally:
        sampler.stop()
    return sampler


def test_the_programs_own_line_gets_its_time():
    sampler = sample_while(lambda: spin(0.3))
    rows = sampler.by_line(".")
    assert rows, "no sample"
    top = rows[0]
    assert top["file"].endswith("test_sampler.py") and top["in_library"] == ""
    assert top["seconds"] > 0.1
    assert sum(row["seconds"] for row in rows) <= sampler.sampled_ns / 1e9 + 1e-9


def test_a_library_call_is_named_at_the_line_that_made_it():
    sampler = sample_while(lambda: sort_a_lot(0.3))
    named = [row for row in sampler.by_line(".") if row["in_library"]]
    assert any(row["in_library"].startswith("numpy.") and row["in_library"].endswith("sort") for row in named)


def test_the_time_of_a_line_includes_its_jax_calls():
    import jax.numpy as jnp

    def eager():
        end = time.perf_counter() + 0.3
        x = jnp.ones(4)
        while time.perf_counter() < end:
            x = jnp.sin(x)

    sampler = sample_while(eager)
    # jax's C++ dispatch runs no Python frame: the loop's lines get the time.
    placed = sum(ns for (file, _, _), ns in sampler.lines.items() if file == __file__)
    assert placed >= 0.8 * sampler.sampled_ns
    assert sampler.sampled_ns == sampler.unplaced_ns + sum(sampler.lines.values())


def test_only_the_main_thread_is_signalled_and_its_calls_are_not_broken():
    # Other threads' sleeps and waits run their length: the signal never
    # reaches them; the main thread's own sleep and waits restart.
    done = []

    def other():
        t = time.perf_counter()
        threading.Event().wait(0.2)
        time.sleep(0.1)
        done.append(time.perf_counter() - t)

    def work():
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.2)  # SLEEP
        thread.join()

    sampler = sample_while(work)
    assert done and done[0] >= 0.3
    sleeping = [row for row in sampler.by_line(".") if row["file"].endswith("test_sampler.py")]
    assert sum(row["seconds"] for row in sleeping) >= 0.15


def test_a_signal_the_program_set_is_never_taken(monkeypatch):
    from fastdispatch.tracing import sampler as module

    signo = signal.SIGRTMIN + module.SIGNAL_OFFSET
    previous = signal.signal(signo, lambda *a: None)
    try:
        assert Sampler().start() is None
    finally:
        signal.signal(signo, previous)
    # Off the main thread, nothing is sampled either.
    got = []
    thread = threading.Thread(target=lambda: got.append(Sampler().start()))
    thread.start()
    thread.join()
    assert got == [None]


def test_fastdispatch_s_own_frames_never_name_a_line_s_library_call():
    import jax.numpy as jnp

    import fastdispatch

    step = fastdispatch.jit(lambda x: x * 2)
    x = jnp.ones(4)

    def calls():
        end = time.perf_counter() + 0.3
        with fastdispatch.trace():  # the recorder's Python runs in every call
            while time.perf_counter() < end:
                step(x)

    sampler = sample_while(calls)
    names = {row["in_library"] for row in sampler.by_line(".")}
    assert not any(name.startswith("fastdispatch.") for name in names), names
