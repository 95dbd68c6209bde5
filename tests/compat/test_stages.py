"""The AOT stages: lower, trace, eval_shape, clear_cache, and what they do to the cache."""

import jax
import jax.numpy as jnp
import numpy as np
from contract import TraceCounter, against_jax, arange, assert_same_tree


def affine(x, w, *, b=0.0, act="relu"):
    y = x @ w + b
    return jax.nn.relu(y) if act == "relu" else y


OPTIONS = dict(static_argnames="act")


@against_jax
def test_lower_text_and_compile(jit):
    x, w = arange((2, 3)), arange((3, 4))
    ours, theirs = jit(affine, **OPTIONS), jax.jit(affine, **OPTIONS)
    lowered_ours = ours.lower(x, w, b=1.0, act="none")
    lowered_theirs = theirs.lower(x, w, b=1.0, act="none")
    assert lowered_ours.as_text() == lowered_theirs.as_text()
    assert lowered_ours.in_tree == lowered_theirs.in_tree
    compiled = lowered_ours.compile()
    assert_same_tree(compiled(x, w, b=1.0), lowered_theirs.compile()(x, w, b=1.0))
    assert_same_tree(compiled(x, w, b=1.0), theirs(x, w, b=1.0, act="none"))


@against_jax
def test_lower_with_shape_dtype_structs(jit):
    spec = (jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((3, 4), jnp.float32))
    assert jit(affine, **OPTIONS).lower(*spec).as_text() == jax.jit(affine, **OPTIONS).lower(*spec).as_text()


@against_jax
def test_trace(jit):
    x, w = arange((2, 3)), arange((3, 4))
    traced = jit(affine, **OPTIONS).trace(x, w)
    expected = jax.jit(affine, **OPTIONS).trace(x, w)
    assert str(traced.jaxpr) == str(expected.jaxpr)
    assert traced.out_info == expected.out_info
    assert traced.lower().as_text() == expected.lower().as_text()


def test_eval_shape(jit):
    x, w = arange((2, 3)), np.ones((3, 4), np.float32)
    f = jit(affine, **OPTIONS)
    assert f.eval_shape(x, w) == jax.jit(affine, **OPTIONS).eval_shape(x, w)
    assert f.eval_shape(x, w, b=1, act="none") == jax.ShapeDtypeStruct((2, 4), jnp.float32)
    assert jit(lambda a, b: a * b).eval_shape(1.0, 2.0) == jax.ShapeDtypeStruct(
        (), jnp.float32, weak_type=True
    )


@against_jax
def test_stages_do_not_change_call_results(jit):
    # lower/trace/eval_shape before and between calls change no result and add
    # no compile beyond what jax.jit does.
    ours, theirs = TraceCounter(), TraceCounter()
    f, g = jit(ours(affine), **OPTIONS), jax.jit(theirs(affine), **OPTIONS)
    x, w = arange((2, 3)), arange((3, 4))
    for h in (f, g):
        h.eval_shape(x, w)
        h.lower(x, w)
        h(x, w)
        h.trace(x, w)
        h(x, w)
    assert_same_tree(f(x, w), g(x, w))
    assert ours.n == theirs.n


def test_clear_cache(jit):
    count = TraceCounter()
    f = jit(count(lambda x: x + 1))
    x = arange((2,))
    f(x)
    f.clear_cache()
    assert f._cache_size() == 0
    assert_same_tree(f(x), jax.jit(lambda x: x + 1)(x))
    assert f._cache_size() == 1
