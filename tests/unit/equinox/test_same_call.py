"""filter_jit's identity guard (equinox/same_call.pyx, SameCall): a call on an
earlier call's very objects skips flattening; what identity cannot prove, and
changes made in place, are test_unchanged.py's."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from equinox_calls import check, forward, mlp, served, state

import fastdispatch


def test_a_call_on_the_same_objects_is_served_by_identity(sink):
    model, x = mlp(), jnp.ones(3)
    f = served(forward, model, x, calls=5)
    # First call compiles, the second records, the next three are proved by identity.
    assert state(f) == (3, 0)
    assert [call.hit for call in sink.calls] == [False, True, True, True, True]
    check(f, eqx.filter_jit(forward), model, x)


def test_new_arrays_with_the_same_key_are_served_too():
    # Outputs of one executable share their aval objects: the key matches by identity.
    make = jax.jit(lambda scale: jnp.ones(3) * scale)
    model = mlp()
    f = served(forward, model, make(1.0))
    hits, _ = state(f)
    check(f, eqx.filter_jit(forward), model, make(2.0))
    assert state(f) == (hits + 1, 0)


def test_a_fresh_batch_with_objects_of_its_own_is_served_too():
    # A batch put on the device each step holds its own sharding object: the
    # record takes it in place (CallSignature.adopt_leaf) and serves the call.
    model = mlp()

    def fresh(value):
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        return jax.device_put(np.full(3, value, np.float32), sharding)

    f = served(forward, model, fresh(0.0))
    hits, _ = state(f)
    for value in (1.0, 2.0):
        check(f, eqx.filter_jit(forward), model, fresh(value))
    assert state(f) == (hits + 2, 0)


def test_an_array_of_another_shape_goes_the_whole_way():
    model = mlp()
    f = served(lambda m, x: m.layers[0].weight @ x, model, jnp.ones(3))
    got = f(model, jnp.ones((3, 2)))
    np.testing.assert_array_equal(got, model.layers[0].weight @ jnp.ones((3, 2)))
    assert state(f)[0] is None


def test_static_values_are_compared_as_equinox_compares_them():
    model = mlp()
    fun = lambda m, x, scale, mode: m(x) * scale if mode == "train" else m(x)  # noqa: E731
    ours, theirs = fastdispatch.filter_jit(fun), eqx.filter_jit(fun)
    for _ in range(4):
        ours(model, jnp.ones(3), 2, "train")
    assert state(ours)[0] == 2
    check(ours, theirs, model, jnp.ones(3), 3, "train")
    check(ours, theirs, model, jnp.ones(3), 3.0, "train")
    check(ours, theirs, model, jnp.ones(3), 3.0, "eval")


def test_a_donating_wrapper_is_not_recorded():
    fun = lambda m, x: m(x)  # noqa: E731
    f = fastdispatch.filter_jit(fun, donate="all-except-first")
    theirs = eqx.filter_jit(fun, donate="all-except-first")
    model = mlp()
    for _ in range(4):
        f(model, jnp.ones(3))
    assert state(f)[0] is None
    check(f, theirs, model, jnp.ones(3))


def test_a_deleted_array_raises_as_equinox_raises():
    model = mlp()
    f = served(forward, model, jnp.ones(3))
    model.layers[0].bias.delete()
    with pytest.raises(Exception) as ours:
        f(model, jnp.ones(3))
    with pytest.raises(Exception) as theirs:
        eqx.filter_jit(forward)(model, jnp.ones(3))
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


def test_another_context_or_a_cleared_cache_goes_the_whole_way(sink):
    model = mlp()
    f = served(forward, model, jnp.ones(3))
    with jax.default_matmul_precision("highest"):
        f(model, jnp.ones(3))
    assert sink.calls[-1].hit is False  # compiled for that context
    eqx.clear_caches()
    f(model, jnp.ones(3))
    assert sink.calls[-1].hit is False and f._cached._cache_size() == 1


def test_a_training_loop_records_nothing():
    model, x = mlp(), jnp.ones(3)
    f = fastdispatch.filter_jit(lambda m, x: jax.tree.map(lambda w: w * 0.5 if eqx.is_array(w) else w, m))
    for _ in range(6):
        model = f(model, x)
    assert state(f) == (None, 0)


def test_threads_share_the_record():
    from concurrent.futures import ThreadPoolExecutor

    model, other = mlp(), mlp(1)
    f = served(forward, model, jnp.ones(3))
    want = {id(m): eqx.filter_jit(forward)(m, jnp.ones(3)) for m in (model, other)}

    def calls(m):
        return all(bool((f(m, jnp.ones(3)) == want[id(m)]).all()) for _ in range(50))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(calls, [model, other, model, other]))
