"""tracing.sampler: where "the rest" of the wall time goes, by the program's line."""

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
    sampler = Sampler(threading.get_ident(), interval=0.002).start()
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
