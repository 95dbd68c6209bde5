"""core/pytree/treedef.pyx: TreeDef as an object (equality, repr, pickling,
shared nodes) and unflatten, with its errors, as jax.tree_util has them."""

from __future__ import annotations

import pickle

import jax.tree_util as jtu
import pytest
import treecases
from treecases import treedef

from fastdispatch.core.pytree import TreeDef, flatten, unflatten

CASES = treecases.cases()


@pytest.mark.parametrize("name, tree", CASES, ids=[name for name, _ in CASES])
def test_unflatten_rebuilds_what_jax_rebuilds(name, tree):
    leaves, td = flatten(tree)
    jax_leaves, jax_td = jtu.tree_flatten(tree)
    ours = td.unflatten(leaves)
    theirs = jtu.tree_unflatten(jax_td, jax_leaves)
    assert type(ours) is type(theirs)
    ours_leaves, ours_td = jtu.tree_flatten(ours)
    assert ours_td == jax_td
    assert all(a is b for a, b in zip(ours_leaves, jtu.tree_leaves(theirs)))
    assert unflatten(td, leaves).__class__ is type(theirs)


@pytest.mark.parametrize("name, tree", CASES, ids=[name for name, _ in CASES])
def test_flattening_twice_gives_equal_treedefs_with_equal_hashes(name, tree):
    first, second = treedef(tree), treedef(tree)
    assert first == second
    assert not (first != second)
    assert hash(first) == hash(second)


# -- TreeDef as an object -----------------------------------------------------------


def test_treedef_cannot_be_built_directly():
    with pytest.raises(TypeError, match="flatten"):
        TreeDef()


def test_treedef_equality_with_other_types_is_false():
    td = treedef((1, 2))
    assert td != (1, 2)
    assert not (td == jtu.tree_structure((1, 2)))


def test_repr_is_jaxs():
    assert repr(treedef((1, {"a": 2}))) == "PyTreeDef((*, {'a': *}))"
    assert repr(treedef([None, (1,)])) == "PyTreeDef([None, (*,)])"


@pytest.mark.parametrize("name, tree", CASES, ids=[name for name, _ in CASES])
def test_treedefs_pickle(name, tree):
    td = treedef(tree)
    restored = pickle.loads(pickle.dumps(td))
    assert restored == td and hash(restored) == hash(td)
    assert repr(restored) == repr(td)


def test_memoised_nodes_are_shared_between_calls():
    # The same structure flattened twice is the same TreeDef object: a pointer compare.
    tree = {"layer_0": {"w": 1, "b": 2}, "layer_1": {"w": 3, "b": 4}}
    assert treedef(tree) is treedef(tree)
    assert treedef((1, [2, 3])) is treedef((4, [5, 6]))


# -- unflatten errors ---------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 3, 10])
def test_unflatten_with_wrong_number_of_leaves(count):
    td = treedef({"a": 1, "b": (2,)})
    with pytest.raises(ValueError) as error:
        td.unflatten(list(range(count)))
    word = "few" if count < 2 else "many"
    assert str(error.value) == (f"Too {word} leaves for PyTreeDef; expected 2, got {count}.")


def test_unflatten_accepts_any_iterable():
    td = treedef([1, (2, 3)])
    assert td.unflatten(iter("abc")) == ["a", ("b", "c")]
    assert td.unflatten(("a", "b", "c")) == ["a", ("b", "c")]


def test_unflatten_of_a_non_treedef_is_a_type_error():
    with pytest.raises(TypeError):
        unflatten(jtu.tree_structure((1, 2)), [1, 2])


def test_from_iter_errors_propagate_from_unflatten():
    class Picky:
        pass

    def rebuild(_, children):
        raise ValueError("picky")

    jtu.register_pytree_node(Picky, lambda p: ((1,), None), rebuild)
    td = treedef(Picky())
    with pytest.raises(ValueError, match="picky"):
        td.unflatten([1])
