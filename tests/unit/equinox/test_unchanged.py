"""equinox/unchanged.pyx: proof that a tree is, object for object, the one a
previous call flattened; every change flatten would see (in place or not)
sends the call the whole way again, with equinox's result."""

import gc
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import treecases
from equinox_calls import check, forward, mlp, served, state


def test_a_model_changed_in_place_goes_the_whole_way():
    model = mlp()
    f = served(forward, model, jnp.ones(3))
    layer = model.layers[0]
    # Frozen Modules can still be written through object.__setattr__.
    object.__setattr__(layer, "weight", layer.weight * 3)
    check(f, eqx.filter_jit(forward), model, jnp.ones(3))
    object.__setattr__(layer, "extra", 1)  # a new entry: another flatten
    check(f, eqx.filter_jit(forward), model, jnp.ones(3))


def test_a_model_written_back_as_it_was_is_served_and_a_later_change_seen():
    # A write gives the layer's __dict__ a new version: its entries are
    # compared again, and, the same objects, the record still serves; the
    # version it keeps is then the new one, so the next write is seen too.
    model = mlp()
    f = served(forward, model, jnp.ones(3))
    layer = model.layers[0]
    weight = layer.weight
    object.__setattr__(layer, "weight", weight * 3)
    object.__setattr__(layer, "weight", weight)
    served_before = state(f)[0]
    check(f, eqx.filter_jit(forward), model, jnp.ones(3))
    assert state(f)[0] == served_before + 1
    object.__setattr__(layer, "weight", weight * 3)
    check(f, eqx.filter_jit(forward), model, jnp.ones(3))
    assert state(f)[0] is None  # the record dropped: that call went the whole way


class Holder(eqx.Module):
    items: list
    table: dict

    def __call__(self, x):
        return sum(w @ x for w in self.items) + self.table["b"]


@pytest.mark.parametrize(
    "change",
    [
        lambda h: h.items.__setitem__(0, h.items[0] * 2),
        lambda h: h.items.append(jnp.ones((2, 3))),
        lambda h: h.table.__setitem__("b", h.table["b"] + 1),
        lambda h: h.table.__setitem__("c", 1),
    ],
    ids=["list item", "list append", "dict item", "dict key"],
)
def test_lists_and_dicts_changed_in_place_go_the_whole_way(change):
    holder = Holder([jnp.ones((2, 3)), jnp.full((2, 3), 2.0)], {"b": jnp.zeros(2)})
    f = served(forward, holder, jnp.ones(3))
    assert state(f)[0] == 2
    change(holder)
    check(f, eqx.filter_jit(forward), holder, jnp.ones(3))


class WithNumpy(eqx.Module):
    table: np.ndarray

    def __call__(self, x):
        return x * self.table


class Scaled:
    # A leaf with its own == (compared by value, mutable): identity proves nothing.
    def __init__(self, factor):
        self.factor = factor

    def __eq__(self, other):
        return type(other) is Scaled and other.factor == self.factor

    def __hash__(self):
        return hash(self.factor)


class WithScaled(eqx.Module):
    scaled: Scaled

    def __call__(self, x):
        return x * self.scaled.factor


@pytest.mark.parametrize(
    "argument",
    [
        lambda: WithNumpy(np.ones(3, np.float32)),
        lambda: WithScaled(Scaled(2.0)),
        lambda: treecases.Box((jnp.ones(3),), {}),
        lambda: treecases.NoMeta(jnp.ones(3)),
        lambda: (mlp(),),  # a tuple: no weak reference to it
    ],
    ids=["numpy leaf", "leaf with its own ==", "Python flatten", "register_dataclass", "tuple argument"],
)
def test_what_identity_cannot_prove_is_not_recorded(argument):
    value = argument()

    def fun(a, x):
        return x.sum() + sum(leaf.sum() for leaf in jax.tree_util.tree_leaves(a) if eqx.is_array(leaf))

    f = served(fun, value, jnp.ones(3))
    hits, strikes = state(f)
    assert hits is None and strikes >= 1
    check(f, eqx.filter_jit(fun), value, jnp.ones(3))


def test_a_leaf_compared_by_identity_is_recorded():
    model = eqx.nn.MLP(3, 2, 4, 2, activation=jax.nn.relu, key=jax.random.key(0))
    f = served(forward, model, jnp.ones(3))
    assert state(f)[0] == 2


def test_the_record_keeps_nothing_alive():
    model, x = mlp(), jnp.ones(3)
    f = served(forward, model, x)
    assert state(f)[0] == 2
    weights = weakref.ref(model.layers[0].weight)
    gc.disable()  # freed by reference counts alone: no cycle holds them
    try:
        del model
        assert weights() is None
    finally:
        gc.enable()
    assert state(f)[0] == 2  # emptied, replaced on the next call
    f(mlp(1), x)
    assert state(f)[0] is None
