"""core/pytree/fields.pyx: dataclass nodes read from their fields and rebuilt
as their constructor builds them, as jax.tree_util does."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import jax.tree_util as jtu
import pytest
import treecases
from treecases import treedef

from fastdispatch.core.pytree import flatten, leaf_paths


def jax_paths(tree) -> list:
    """Each leaf's path as jax.tree_util gives it: a tuple of key entries."""
    return [path for path, _ in jtu.tree_flatten_with_path(tree)[0]]


def test_dataclass_nodes_and_their_static_fields():
    pair = treecases.Pair(1, 2, "add")
    assert flatten(pair)[0] == [1, 2]
    assert treedef(pair) == treedef(treecases.Pair(3, 4, "add"))
    assert treedef(pair) != treedef(treecases.Pair(1, 2, "mul"))
    rebuilt = treedef(pair).unflatten([5, 6])
    assert rebuilt == treecases.Pair(5, 6, "add")
    layer = treecases.Layer(1, 2, "a")
    assert leaf_paths(treedef(layer)) == jax_paths(layer) == [(jtu.GetAttrKey("w"),), (jtu.GetAttrKey("b"),)]


def test_dataclass_whose_fields_are_not_plain_attributes_still_matches_jax():
    # A data field read through a property returns a new list each time: the
    # getattr fast path is checked against jax's flatten function and gives way.
    class Computed:
        def __init__(self, x, op):
            self._x, self.op = x, op

        @property
        def x(self):
            return [self._x]

    jtu.register_dataclass(Computed, data_fields=["x"], meta_fields=["op"])
    tree = (Computed(1, "a"), Computed(2, "b"))
    for _ in range(2):
        leaves, td = flatten(tree)
        assert leaves == jtu.tree_leaves(tree) == [1, 2]
        assert repr(td) == repr(jtu.tree_structure(tree))


@jtu.register_dataclass
@dataclasses.dataclass(frozen=True)
class FrozenState:
    step: int
    params: dict
    name: str = dataclasses.field(metadata=dict(static=True), default="s")


@dataclasses.dataclass
class Normalised:
    x: object
    scale: float = dataclasses.field(metadata=dict(static=True), default=1.0)

    def __post_init__(self):
        Normalised.constructed += 1


Normalised.constructed = 0
jtu.register_dataclass(Normalised)


def test_dataclass_nodes_are_built_as_their_constructor_builds_them():
    state = FrozenState(jnp.int32(3), {"w": jnp.ones(2)}, "adam")
    leaves, treedef = flatten(state)
    rebuilt = treedef.unflatten(leaves)
    jax_rebuilt = jtu.tree_unflatten(jtu.tree_structure(state), leaves)
    # Written straight into __dict__ (the generated __init__ does nothing more),
    # in field order, frozen as before.
    assert type(rebuilt) is FrozenState and rebuilt == jax_rebuilt
    assert list(vars(rebuilt)) == list(vars(jax_rebuilt)) == ["step", "params", "name"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rebuilt.step = 4
    # A class with a __post_init__ is constructed, as jax constructs it.
    leaves, treedef = flatten(Normalised(jnp.ones(2), 2.0))
    before = Normalised.constructed
    assert treedef.unflatten(leaves).scale == 2.0 and Normalised.constructed == before + 1
