"""Effects inside the function: jax.debug.print and jax.debug.callback run on every call, in order."""

import jax
import jax.numpy as jnp
import numpy as np
from contract import arange, assert_same_tree


def test_debug_print(jit, capfd):
    def f(x):
        jax.debug.print("x={x}", x=x)
        return x * 2

    ours, theirs = jit(f), jax.jit(f)
    for v in [1.0, 2.0, 3.0]:
        assert_same_tree(ours(v), theirs(v))
    jax.effects_barrier()
    out = capfd.readouterr().out.splitlines()
    assert out == ["x=1.0", "x=1.0", "x=2.0", "x=2.0", "x=3.0", "x=3.0"]


def test_debug_callback_counts_and_values(jit):
    seen_ours, seen_theirs = [], []

    def make(seen):
        def f(x, y):
            jax.debug.callback(lambda a: seen.append(np.asarray(a).tolist()), x + y)
            return x - y

        return f

    f, g = jit(make(seen_ours)), jax.jit(make(seen_theirs))
    for i in range(3):
        x = arange((2,)) + i
        assert_same_tree(f(x, 1.0), g(x, 1.0))
    jax.effects_barrier()
    assert seen_ours == seen_theirs == [[1.0, 2.0], [2.0, 3.0], [3.0, 4.0]]


def test_ordered_callback(jit):
    order = []

    def f(x, tag):
        jax.debug.callback(lambda a: order.append((tag, float(a))), x, ordered=True)
        return x + 1

    g = jit(f, static_argnums=1)
    x = jnp.float32(0)
    for i in range(4):
        x = g(x, "a" if i % 2 else "b")
    jax.effects_barrier()
    assert order == [("b", 0.0), ("a", 1.0), ("b", 2.0), ("a", 3.0)]
    assert float(x) == 4.0


def test_pure_callback_result(jit):
    def f(x):
        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.pure_callback(lambda a: np.sin(a).astype(a.dtype), shape, x) + 1

    for _ in range(2):
        assert_same_tree(jit(f)(arange((3,))), jax.jit(f)(arange((3,))))
