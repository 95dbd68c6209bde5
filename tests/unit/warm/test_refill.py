"""warm/refill.py: a miss jax's cache served is compiled once more for the
store, beside the program, under a key of jax's cache of its own."""

import threading

import jax
import jax.numpy as jnp

from fastdispatch.warm import refill


def test_each_store_key_and_try_has_its_own_option_value():
    seeds = ("0" * 64, "1" + "0" * 63, "f" * 64)
    values = {
        refill.fresh_options(seed, attempt)["xla_debug_buffer_assignment_show_max"]
        for seed in seeds
        for attempt in range(refill.TRIES)
    }
    assert len(values) == len(seeds) * refill.TRIES
    assert min(values) >= 1 << 30  # above any count of buffers a debug dump would list


def test_a_refill_compiles_beside_the_program_and_writes_once():
    lowered = jax.jit(lambda x: jnp.cos(x) * 2).lower(jnp.ones(4))
    written, failed, threads = [], [], []
    refill.start(
        lowered,
        "a" * 64,
        lambda compiled: (written.append(compiled), threads.append(refill.active())),
        failed.append,
        lambda: 0,
    )
    assert refill.join(60)
    assert failed == [] and len(written) == 1 and threads == [True]
    assert not refill.active()  # this thread is the program's
    assert float(written[0](jnp.ones(4))[0]) == float(jnp.cos(1.0) * 2)


def test_a_cache_that_serves_every_try_is_reported_not_written():
    lowered = jax.jit(lambda x: x + 1).lower(jnp.ones(2))
    written, failed = [], []
    hits = iter(range(100))
    refill.start(lowered, "b" * 64, written.append, failed.append, lambda: next(hits))
    assert refill.join(60)
    assert written == [] and failed == ["jax's persistent cache served every compile made for the store too"]


def test_a_failed_compile_is_reported_not_raised():
    class Broken:
        def compile(self, compiler_options):
            raise ValueError("no backend")

    failed = []
    refill.start(Broken(), "c" * 64, failed.append, failed.append, lambda: 0)
    assert refill.join(60)
    assert failed == ["its compile for the store failed (ValueError: no backend)"]
    assert threading.current_thread() is threading.main_thread()
