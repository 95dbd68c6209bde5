"""jax_jit/layout.pyx: static arguments split off as jax keys them, whichever
way the call spelled them."""

import jax.numpy as jnp

import fastdispatch
from fastdispatch.tracing.explain import describe


def test_static_arguments_in_signature(sink):
    f = fastdispatch.jit(lambda x, mode: x, static_argnames="mode")
    f(jnp.ones(1), mode="train")
    f(jnp.ones(1), mode="eval")
    assert [describe(call[3]).static for call in sink.calls] == [
        (("mode", "'train'"),),
        (("mode", "'eval'"),),
    ]
    assert f._cache_size() == 2


def test_negative_static_argnums_count_from_the_end():
    f = fastdispatch.jit(lambda x, n: x * n, static_argnums=-1)
    assert float(f(jnp.float32(2), 3)) == 6.0
    assert float(f(jnp.float32(2), 4)) == 8.0
    assert f._cache_size() == 2


def test_static_names_key_alike_in_any_order_and_positions_apart(sink):
    f = fastdispatch.jit(lambda x, mode, scale: x * scale, static_argnames=("mode", "scale"))
    f(jnp.ones(2), mode="train", scale=2)
    f(jnp.ones(2), scale=2, mode="train")
    assert f._cache_size() == 1
    assert describe(sink.calls[0][3]).static == (("mode", "'train'"), ("scale", "2"))
    f(jnp.ones(2), "train", scale=2)  # by position: a key of its own, as jax.jit's
    assert f._cache_size() == 2
    assert [hand_off for _, _, hand_off, _ in sink.calls] == [None] * 3
