"""Typed PRNG keys as arguments and outputs."""

import jax
import jax.numpy as jnp
from contract import TraceCounter, against_jax, assert_same_tree, expect_same


def split_and_draw(key):
    k1, k2 = jax.random.split(key)
    return k1, jax.random.normal(k2, (3,))


def test_key_in_and_out(jit):
    key = jax.random.key(0)
    k1, draw = expect_same(jit, split_and_draw, key)
    assert jax.dtypes.issubdtype(k1.dtype, jax.dtypes.prng_key)
    assert type(k1) is type(key)


def test_key_fed_back(jit):
    count = TraceCounter()
    f = jit(count(split_and_draw))
    g = jax.jit(split_and_draw)
    key_ours = key_theirs = jax.random.key(1)
    for _ in range(3):
        (key_ours, a), (key_theirs, b) = f(key_ours), g(key_theirs)
        assert_same_tree((key_ours, a), (key_theirs, b))
    assert count.n == 1


def test_key_impls_retrace(jit):
    count = TraceCounter()
    f = jit(count(lambda k: jax.random.uniform(k, (2,))))
    f(jax.random.key(0, impl="threefry2x32"))
    f(jax.random.key(0, impl="rbg"))
    assert count.n == 2
    expect_same(jit, lambda k: jax.random.uniform(k, (2,)), jax.random.key(3, impl="rbg"))


@against_jax
def test_key_arrays_and_raw_keys(jit):
    keys = jax.random.split(jax.random.key(2), 4)
    expect_same(jit, lambda ks: jax.vmap(lambda k: jax.random.bits(k, (2,)))(ks), keys)
    expect_same(jit, lambda k: jax.random.normal(k, (2,)), jax.random.PRNGKey(0))
    expect_same(jit, lambda k: jax.random.wrap_key_data(k), jax.random.key_data(keys))
    expect_same(jit, lambda ks: {"k": ks[1:], "n": jnp.float32(1)}, keys)
