"""core/pytree/paths.pyx: leaf paths and first differences, as jax.tree_util
names them; conversion to jax's own structure."""

from __future__ import annotations

import jax.tree_util as jtu
import pytest
import treecases
from treecases import treedef

from fastdispatch.core.pytree import first_difference, flatten, leaf_paths

# -- paths, differences, conversion -------------------------------------------------


def test_leaf_paths_as_keystr():
    tree = [{"w": 1, "b": (2, treecases.Point(3, 4))}, treecases.Layer(5, 6)]
    assert [jtu.keystr(path) for path in leaf_paths(treedef(tree))] == [
        "[0]['b'][0]",
        "[0]['b'][1].x",
        "[0]['b'][1].y",
        "[0]['w']",
        "[1].w",
        "[1].b",
    ]
    assert leaf_paths(treedef(7)) == [()]


@pytest.mark.parametrize(
    "before, after, expected",
    [
        ({"a": 1}, {"a": 1, "b": 2}, ("", "key 'b' added")),
        ({"a": 1, "b": 2}, {"a": 1}, ("", "key 'b' removed")),
        ({"a": 1}, {"b": 1, "c": 2}, ("", "keys 'b', 'c' added; key 'a' removed")),
        ([1, 2, 3], [1, 2, 3, 4], ("", "list of 3 -> list of 4")),
        ((1, 2), [1, 2], ("", "tuple -> list")),
        ({"x": [(1, 2)]}, {"x": [(1, 2, 3)]}, ("['x'][0]", "tuple of 2 -> tuple of 3")),
        ({"x": 1}, {"x": None}, ("['x']", "leaf -> None")),
        (
            treecases.Pair(1, 2, "add"),
            treecases.Pair(1, 2, "mul"),
            ("", "Pair static data ('add',) -> ('mul',)"),
        ),
        ([treecases.Point(1, 2)], [(1, 2)], ("[0]", "Point -> tuple")),
    ],
)
def test_first_difference(before, after, expected):
    path, what = first_difference(treedef(before), treedef(after))
    assert (jtu.keystr(path), what) == expected


def test_first_difference_of_equal_structures_is_none():
    assert first_difference(treedef({"a": [1, 2]}), treedef({"a": [3, 4]})) is None
    assert first_difference(treedef((1, 2)), treedef((3, 4))) is None


def test_to_jax_round_trips_through_jax_unflatten():
    tree = {"a": (1, treecases.Box((2,), {}, "t")), "b": None}
    leaves, td = flatten(tree)
    rebuilt = jtu.tree_unflatten(td.to_jax(), leaves)
    assert jtu.tree_structure(rebuilt) == jtu.tree_structure(tree)
