"""Warm start keeps jax's own compiles (warm/jax_own.py): eager operations, a
library's jit, a stock jax.jit, each keyed by its traced program, written on a
miss, loaded on the next (here: the next after ``jax.clear_caches()``), and
counted apart from the front ends' calls."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch
from fastdispatch.warm import jax_cache, jax_own, refill


@pytest.fixture
def store(tmp_path):
    """A warm-start store, on for the test; jax's cache settings put back after."""
    names = ("jax_compilation_cache_dir", *(name for name, _, _ in jax_cache._THRESHOLDS))
    before = {name: getattr(jax.config, name) for name in names}
    fastdispatch.warm_start(tmp_path, preload=False)
    jax.clear_caches()  # what earlier tests compiled misses again
    yield tmp_path
    refill.join()
    fastdispatch.warm_start(None)
    for name, value in before.items():
        jax.config.update(name, value)


def own_files(directory):
    return sorted(directory.glob(jax_own.FILE_PREFIX + "*.jit"))


def own_counts():
    stats = fastdispatch.warm_start_stats()
    return stats["jax_own"]


def test_eager_operations_are_written_then_loaded(store):
    x = jax.device_put(np.arange(4.0, dtype=np.float32))  # a transfer: nothing compiled
    first = jnp.sin(x) * 2  # two eager operations: sin, multiply
    assert (own_counts()["written"], own_counts()["loaded"]) == (2, 0)
    assert len(own_files(store)) == 2
    jax.clear_caches()  # jax.jit's own caches: the next ops miss again
    second = jnp.sin(x) * 2
    assert (own_counts()["written"], own_counts()["loaded"], own_counts()["missed"]) == (2, 2, 2)
    np.testing.assert_array_equal(second, first)
    assert (second.dtype, second.weak_type, second.sharding) == (first.dtype, first.weak_type, first.sharding)
    stats = fastdispatch.warm_start_stats()
    assert (stats["written"], stats["loaded"]) == (0, 0)  # the front ends' counts: none of them
    tally = stats["functions"][jax_own.NAME]
    assert (tally["loaded"], tally["written"]) == (2, 2) and tally["load_seconds"] > 0
    assert f"{jax_own.NAME}: 2 loaded in " in fastdispatch.warm.summary()
    third = jnp.sin(x) * 2  # jax.jit's C++ cache kept the loaded executables
    np.testing.assert_array_equal(third, first)
    assert own_counts()["loaded"] == 2


def test_what_the_program_depends_on_is_in_the_key(store):
    x = jax.device_put(np.arange(3.0, dtype=np.float32))
    constant = np.array([1.0, 2.0, 3.0], np.float32)
    jax.jit(lambda v: v + constant)(x)  # a stock jax.jit: jax's own compile too
    written = own_counts()["written"]
    other = np.array([1.0, 2.0, 4.0], np.float32)  # the same program text, another constant
    jax.clear_caches()
    np.testing.assert_array_equal(jax.jit(lambda v: v + other)(x), [1.0, 3.0, 6.0])
    assert own_counts()["written"] == written + 1 and own_counts()["loaded"] == 0
    committed = jax.device_put(x, jax.devices()[0])  # committed: lowered for its device
    jax.clear_caches()
    np.testing.assert_array_equal(jax.jit(lambda v: v + other)(committed), [1.0, 3.0, 6.0])
    assert own_counts()["written"] == written + 2 and own_counts()["loaded"] == 0
    jax.clear_caches()
    np.testing.assert_array_equal(jax.jit(lambda v: v + other)(committed), [1.0, 3.0, 6.0])
    assert own_counts()["loaded"] == 1


def test_a_program_with_effects_is_refused_and_named(store, capfd):
    x = jax.device_put(np.arange(2.0, dtype=np.float32))

    def show(v):
        jax.debug.print("x is {}", v)  # a callback, with its effect
        return v

    jax.jit(show)(x)
    jax.effects_barrier()
    assert "x is [0. 1.]" in capfd.readouterr().out
    refusals = own_counts()["not_stored"]
    assert any("has effects" in text and "jax's own jit of" in text for text in refusals.values()), refusals
    assert fastdispatch.warm_start_stats()["reasons"] == {}  # the front ends' refusals: none
    assert any("has effects" in line for line in fastdispatch.warm.summary().splitlines())


def test_a_program_with_a_primitive_of_its_own_is_refused(store):
    from jax.extend.core import Primitive
    from jax.interpreters import mlir

    # A program's own primitive: its lowering rule may change while its jaxpr does not.
    halve_p = Primitive("halve")
    halve_p.def_abstract_eval(lambda v: v)
    halve_p.def_impl(lambda v: v / 2)
    mlir.register_lowering(halve_p, mlir.lower_fun(lambda v: v / 2, multiple_results=False))
    x = jax.device_put(np.arange(4.0, dtype=np.float32))
    np.testing.assert_array_equal(jax.jit(lambda v: halve_p.bind(v) + 1)(x), [1.0, 1.5, 2.0, 2.5])
    refusals = own_counts()["not_stored"]
    assert any("not jax's own (halve)" in text for text in refusals.values()), refusals
    assert own_counts()["written"] == 0


def test_a_miss_jax_s_cache_served_is_compiled_again_for_the_store(store):
    x = jax.device_put(np.arange(5.0, dtype=np.float32))
    expected = np.asarray(jnp.cos(x))
    assert len(own_files(store)) == 1
    for path in own_files(store):
        path.unlink()  # the store lost it; jax's cache underneath still has it
    jax.clear_caches()
    np.testing.assert_array_equal(jnp.cos(x), expected)
    assert refill.join(60)
    assert len(own_files(store)) == 1
    tally = fastdispatch.warm_start_stats()["functions"][jax_own.NAME]
    assert tally["refilled"] == 1 and tally["written"] == 2
    jax.clear_caches()
    np.testing.assert_array_equal(jnp.cos(x), expected)
    assert own_counts()["loaded"] == 1


def test_nothing_is_kept_while_pgle_profiles(store):
    x = jax.device_put(np.arange(3.0, dtype=np.float32))
    jax.config.update("jax_enable_pgle", True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "PGLE collected an empty trace", RuntimeWarning)  # no GPU
            np.testing.assert_allclose(jnp.tan(x), np.tan(np.arange(3.0, dtype=np.float32)), rtol=1e-6)
    finally:
        jax.config.update("jax_enable_pgle", False)
    assert (own_counts()["written"], own_counts()["missed"]) == (0, 0)


def test_off_with_warm_start(tmp_path):
    fastdispatch.warm_start(tmp_path, preload=False)
    fastdispatch.warm_start(None)
    jax.clear_caches()
    jnp.exp(jax.device_put(np.ones(2, np.float32)))
    assert own_files(tmp_path) == []


def test_the_key_reads_nested_jaxprs_constants_and_primitives():
    from jax.extend.core import Primitive

    from fastdispatch.warm.identity import NotStored
    from fastdispatch.warm.keys import jax_own_key

    x = np.arange(3.0, dtype=np.float32)

    def key(shift, branch=lambda v, s: v + s):
        def f(v):  # a scan over a cond: the constant lives in nested jaxprs
            step = lambda c, _: (jax.lax.cond(c[0] > 9, lambda u: branch(u, shift), lambda u: u * 2, c), None)
            return jax.lax.scan(step, v, None, length=2)[0]

        return jax_own_key(jax.make_jaxpr(f)(x), {}, [x])

    one, other = np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 2.0, 4.0], np.float32)
    assert key(one) == key(one.copy())
    assert key(one) != key(other)
    halve_p = Primitive("halve_nested")
    halve_p.def_abstract_eval(lambda v: v)
    with pytest.raises(NotStored, match=r"not jax's own \(halve_nested\)"):
        key(one, branch=lambda v, s: halve_p.bind(v + s))
