"""Host leaves in one transfer (fastdispatch/core/packing.pyx): an entry's
packed variant gives what jax.jit gives.  On the CPU packing is off
(PACKED_PLATFORMS); these tests turn it on there."""

import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fastdispatch
from fastdispatch.core import packing


@pytest.fixture
def packs(monkeypatch):
    monkeypatch.setattr(packing, "PACKED_PLATFORMS", frozenset({"cpu"}))
    monkeypatch.setattr(packing, "PACK_AFTER_CALLS", 2)


def assert_same(got, want):
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a.dtype, a.shape, a.weak_type) == (b.dtype, b.shape, b.weak_type)
        assert a.sharding == b.sharding and a.committed == b.committed
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def packed_of(f):
    (entry,) = f._cache_entries()
    return entry.executable.packed


def act(params, obs, key, eps, flags):
    explore = jax.random.uniform(key) < eps
    q = jnp.tanh(obs @ params["w"]) + params["b"]
    return jnp.where(explore, 0, jnp.argmax(q)), q * eps, flags.sum(), eps * 2


def test_host_leaves_that_change_every_call_run_here_in_one_transfer(packs, sink):
    f, stock = fastdispatch.jit(act), jax.jit(act)
    params = {"w": jnp.ones((4, 2)) * 0.5, "b": jnp.zeros(2)}
    key = jax.random.key(1)
    rng = np.random.default_rng(0)

    def call(fn, i):
        obs = rng.normal(size=(3, 4)).astype(np.float32)
        flags = rng.random(5) < 0.5
        return fn(params, obs, key, 1.0 - i / 64, flags), (params, obs, key, 1.0 - i / 64, flags)

    for i in range(4):
        call(f, i)
    packing.wait_for_packing()
    assert packed_of(f) is not None
    sink.calls.clear()
    for i in range(4, 40):
        got, args = call(f, i)
        assert_same(got, stock(*args))
    # The memo sends calls to jax.jit until one goes the whole way: then all run here.
    assert sink.reasons()[-8:] == [None] * 8


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint16, np.int32, np.bool_])
def test_every_packed_dtype_comes_back_exact(packs, dtype):
    f = fastdispatch.jit(lambda x, y, s: (x, y * 1, s))
    rng = np.random.default_rng(1)

    def values():
        raw = rng.integers(0, 255, size=24, dtype=np.uint8).view(np.uint8)
        x = np.frombuffer(raw.tobytes(), np.uint8).reshape(2, 12)
        y = (rng.normal(size=(2, 3)) * 100).astype(dtype)
        return x, y, int(rng.integers(-5, 5))

    for _ in range(3):
        f(*values())
    packing.wait_for_packing()
    assert packed_of(f) is not None
    for _ in range(70):
        args = values()
        assert_same(f(*args), jax.jit(lambda x, y, s: (x, y * 1, s))(*args))


def test_numpy_scalars_unused_leaves_and_committed_arrays_are_jax_jits(packs):
    device = jax.devices()[0]
    weights = jax.device_put(jnp.arange(3.0), device)  # committed: so are the outputs

    def g(w, unused, x, n, scale):
        return w * x + n, scale

    f, stock = fastdispatch.jit(g), jax.jit(g)
    for i in range(3):
        f(weights, np.ones(2), np.float32(i), np.int32(i), 2.0)
    packing.wait_for_packing()
    assert packed_of(f) is not None
    for i in range(70):
        args = (weights, np.full(2, i), np.float32(i / 3), np.int32(-i), 0.5 * i)
        assert_same(f(*args), stock(*args))


def test_a_value_that_does_not_convert_gets_jax_jits_error(packs):
    f = fastdispatch.jit(lambda x, n: x + n)
    for i in range(3):
        f(np.ones(2, np.int32), i)
    packing.wait_for_packing()
    assert packed_of(f) is not None
    with pytest.raises(OverflowError):
        f(np.ones(2, np.int32), 2**40)
    with jax.transfer_guard_host_to_device("disallow"):
        with pytest.raises(Exception, match="[Dd]isallowed"):
            f(np.ones(2, np.int32), 3)
    np.testing.assert_array_equal(f(np.ones(2, np.int32), 3), [4, 4])


def test_no_packing_where_it_would_not_pay_or_not_be_sound(packs, monkeypatch):
    donating = fastdispatch.jit(lambda a, x, y: (a + x, y), donate_argnums=0)
    single = fastdispatch.jit(lambda a, x: a + x)
    for _ in range(4):
        donating(jnp.ones(2), 1.5, 2.5)  # numpy leaves are never converted for one that donates
        single(jnp.ones(2), np.ones(2, np.float32))
    packing.wait_for_packing()
    assert [f._cache_entries()[0].executable.pack_plan for f in (donating, single)] == [None, None]
    cast = fastdispatch.jit(lambda x, y: x + y)  # float64 leaves: jax.jit casts them faster
    for _ in range(4):
        cast(np.ones(2), np.ones(2))
    assert cast._cache_entries()[0].executable.pack_plan is None
    monkeypatch.setattr(packing, "PACKED_PLATFORMS", frozenset({"tpu"}))
    two = fastdispatch.jit(lambda x, y: x + y)
    for _ in range(4):
        two(np.ones(2, np.float32), np.ones(2, np.float32))
    assert two._cache_entries()[0].executable.pack_plan is None  # the CPU's own default


def test_packable_dtypes():
    assert all(packing.packable_dtype(d) for d in (np.float32, np.bool_, np.uint64, ml_dtypes.bfloat16))
    assert not any(packing.packable_dtype(d) for d in (np.complex64, np.dtype("V4")))


def test_large_host_data_is_not_packed(packs, monkeypatch):
    monkeypatch.setattr(packing, "PACK_MAX_BYTES", 16)
    f = fastdispatch.jit(lambda x, y: x + y)
    for _ in range(4):
        f(np.ones(4, np.float32), np.ones(4, np.float32))  # 32 bytes
    assert f._cache_entries()[0].executable.pack_plan is None


def test_a_variant_compiles_beside_the_program_where_trace_does_not_count_it(monkeypatch):
    from fastdispatch.tracing import hooks

    seen = []

    def compile_variant(traced, plan):
        thread = threading.current_thread()
        # Not a daemon: Python waits for it at exit (a daemon thread still
        # compiling then aborted the process as Python finalized).
        seen.append((hooks._beside_the_program(), thread.name, thread.daemon))

    monkeypatch.setattr(packing, "compile_variant", compile_variant)
    packing.start(None, None, seen.append)  # the variant is None: nothing installed
    packing.wait_for_packing()
    assert seen == [(True, "fastdispatch-pack", False)] and not hooks._beside_the_program()
