"""Under transformations and jax's config contexts the function behaves as jax.jit's."""

import jax
import jax.numpy as jnp
import numpy as np
from contract import TraceCounter, against_jax, arange, assert_same_tree


def loss(w, x):
    return jnp.sum(jnp.tanh(w * x) ** 2)


def step(c, x):
    return c * 0.5 + x, c + x


def twice(jit, fun, *args, **jit_kwargs):
    """jit(fun) and jax.jit(fun) (with counted copies), for side-by-side use."""
    ours, theirs = TraceCounter(), TraceCounter()
    return jit(ours(fun), **jit_kwargs), jax.jit(theirs(fun), **jit_kwargs), ours, theirs


@against_jax
def test_grad(jit):
    f, g, ours, theirs = twice(jit, loss)
    w, x = arange((3,)), jnp.ones(3)
    for _ in range(2):
        assert_same_tree(jax.grad(f)(w, x), jax.grad(g)(w, x))
        assert_same_tree(
            jax.value_and_grad(f, argnums=(0, 1))(w, x), jax.value_and_grad(g, argnums=(0, 1))(w, x)
        )
    assert ours.n == theirs.n


@against_jax
def test_vmap(jit):
    f, g, ours, theirs = twice(jit, loss)
    w, xs = arange((3,)), arange((4, 3))
    for _ in range(2):
        assert_same_tree(jax.vmap(f, in_axes=(None, 0))(w, xs), jax.vmap(g, in_axes=(None, 0))(w, xs))
    assert ours.n == theirs.n


@against_jax
def test_inside_jax_jit(jit):
    f, g, ours, theirs = twice(jit, loss)
    outer_f = jax.jit(lambda w, x: f(w, x) * 2)
    outer_g = jax.jit(lambda w, x: g(w, x) * 2)
    w, x = arange((3,)), jnp.ones(3)
    assert_same_tree(outer_f(w, x), outer_g(w, x))
    assert str(jax.make_jaxpr(lambda w, x: f(w, x) * 2)(w, x)) == str(
        jax.make_jaxpr(lambda w, x: g(w, x) * 2)(w, x)
    )
    assert ours.n == theirs.n


@against_jax
def test_jit_of_jit_with_static(jit):
    f = jit(lambda x, n: x * n, static_argnums=1)
    g = jax.jit(lambda x, n: x * n, static_argnums=1)
    x = arange((2,))
    assert_same_tree(jax.jit(lambda x: f(x, 3))(x), jax.jit(lambda x: g(x, 3))(x))


@against_jax
def test_scan(jit):
    f, g, ours, theirs = twice(jit, step)
    xs = arange((5,))
    assert_same_tree(jax.lax.scan(f, 0.0, xs), jax.lax.scan(g, 0.0, xs))
    assert ours.n == theirs.n


@against_jax
def test_called_eagerly_after_traced(jit):
    # The same function object used inside a trace and then directly: the
    # direct call must still produce concrete arrays on the fast path.
    f = jit(loss)
    w, x = arange((3,)), jnp.ones(3)
    jax.grad(f)(w, x)
    assert_same_tree(f(w, x), jax.jit(loss)(w, x))


def test_disable_jit(jit):
    f, g, ours, theirs = twice(jit, lambda x, y: x * y)
    with jax.disable_jit():
        for _ in range(2):
            # No jit at all: the Python function runs each time on the inputs as given.
            assert_same_tree(f(np.ones(2), 3.0), g(np.ones(2), 3.0))
            out = f(2.0, 3.0)
            assert type(out) is float
            assert_same_tree(out, g(2.0, 3.0))
    assert ours.n == theirs.n == 4
    assert_same_tree(f(2.0, 3.0), g(2.0, 3.0))  # and jit is back afterwards
    assert ours.n == theirs.n == 5


@against_jax
def test_disable_jit_reads_no_argument(jit):
    # jax.jit with jit disabled calls the function on the arguments as given:
    # a node's flatten never runs, on a function's first call or a later one.
    flattened = []

    @jax.tree_util.register_pytree_node_class
    class Box:
        def __init__(self, x):
            self.x = x

        def tree_flatten(self):
            flattened.append(self)
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    f = jit(lambda box: box.x + 1)
    with jax.disable_jit():
        for _ in range(3):
            assert type(f(Box(np.ones(2)))) is np.ndarray
    assert flattened == []
    f(Box(np.ones(2)))
    flattened.clear()
    with jax.disable_jit():
        f(Box(np.ones(2)))
    assert flattened == []


def test_disable_jit_after_cached(jit):
    f = jit(lambda x: x + 1)
    x = np.ones(2, np.float32)
    assert isinstance(f(x), jax.Array)
    with jax.disable_jit():
        out = f(x)
    assert type(out) is np.ndarray


@against_jax
def test_checkpoint_and_custom_vjp(jit):
    @jax.custom_vjp
    def clip_grad(x):
        return x

    clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1, 1),))

    def fun(x):
        return jnp.sum(jax.checkpoint(lambda y: clip_grad(y) * 10)(x))

    f, g, _, _ = twice(jit, fun)
    x = arange((3,))
    assert_same_tree(jax.grad(f)(x), jax.grad(g)(x))
    assert_same_tree(f(x), g(x))
