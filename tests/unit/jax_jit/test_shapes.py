"""fastdispatch.eval_shape: jax.eval_shape, tracing a jit function as jax's own."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import test_util as jtu  # jax's own count of traces, as its test counts them

import fastdispatch


def traces_of(jit, eval_shape, width):
    """jax's pjit_test.test_eval_shape_jitted_fun_cache_hit: eval_shape, then
    trace; ``width`` new to this process, so that ``*`` is traced too."""

    @jit(inline=True)
    def g(x):
        return x * 2

    inp = jnp.zeros([1, width])
    with jtu.count_jit_tracing_cache_miss() as count:
        shape = eval_shape(g, inp)
        g.trace(inp)
    assert shape == jax.ShapeDtypeStruct((1, width), jnp.float32)
    return count()


def test_a_jit_function_is_traced_as_jax_jit_traces_its_own():
    stock = traces_of(jax.jit, jax.eval_shape, 101)
    assert stock == 2  # g and *
    assert traces_of(fastdispatch.jit, fastdispatch.eval_shape, 102) == stock
    # Through jax's own eval_shape, g is traced again inside a wrapper of its own.
    assert traces_of(fastdispatch.jit, jax.eval_shape, 103) == stock + 1


def test_anything_else_is_jax_eval_shape():
    def f(x, scale):
        return {"y": x.astype(jnp.int32) * scale}

    args = (np.ones((2, 3), np.float32), 2)
    assert fastdispatch.eval_shape(f, *args) == jax.eval_shape(f, *args)
    static = fastdispatch.jit(f, static_argnums=1)
    assert fastdispatch.eval_shape(static, *args) == jax.eval_shape(jax.jit(f, static_argnums=1), *args)


def test_errors_are_jax_eval_shape_errors():
    def f(x):
        return x @ x

    with pytest.raises(TypeError) as stock:
        jax.eval_shape(jax.jit(f), jnp.ones((2, 3)))
    with pytest.raises(TypeError) as ours:
        fastdispatch.eval_shape(fastdispatch.jit(f), jnp.ones((2, 3)))
    assert str(ours.value) == str(stock.value)
