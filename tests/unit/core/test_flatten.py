"""core/pytree/flatten.pyx against jax.tree_util: every node kind, every error.

Any difference from jax.tree_util in leaf order, structure, repr, paths or
equality is a bug: the dispatcher's cache keys and output trees rest on it.
"""

from __future__ import annotations

import threading

import jax.tree_util as jtu
import numpy as np
import pytest
import treecases
from treecases import treedef

from fastdispatch.core.pytree import flatten

CASES = treecases.cases()


# -- every node kind matches jax ----------------------------------------------------


@pytest.mark.parametrize("name, tree", CASES, ids=[name for name, _ in CASES])
def test_flatten_matches_jax(name, tree):
    leaves, td = flatten(tree)
    treecases.structures_match_jax(tree, leaves, td)


@pytest.mark.parametrize("leaf", treecases.leaf_examples(), ids=lambda x: type(x).__name__)
def test_everything_else_is_a_leaf(leaf):
    leaves, td = flatten(leaf)
    assert len(leaves) == 1 and leaves[0] is leaf
    assert repr(td) == "PyTreeDef(*)" == repr(jtu.tree_structure(leaf))
    assert td.num_leaves == 1 and td.num_nodes == 1
    assert td.unflatten([leaf]) is leaf


def test_none_is_a_node_without_children():
    leaves, td = flatten(None)
    assert leaves == []
    assert (td.num_leaves, td.num_nodes) == (0, 1)
    assert td.unflatten([]) is None
    assert treedef([None, None]) != treedef([None, 1])


def test_dict_children_come_in_sorted_key_order_and_unflatten_sorts_the_keys():
    leaves, td = flatten({"b": 2, "c": 3, "a": 1})
    assert leaves == [1, 2, 3]
    assert list(td.unflatten([10, 20, 30]).items()) == [("a", 10), ("b", 20), ("c", 30)]


def test_dicts_with_the_same_keys_in_any_order_are_equal():
    assert treedef({"a": 1, "b": 2}) == treedef({"b": 1, "a": 2})
    assert hash(treedef({"a": 1, "b": 2})) == hash(treedef({"b": 1, "a": 2}))
    assert treedef({"a": 1}) != treedef({"b": 1})
    assert treedef({"a": 1}) != treedef({"a": 1, "b": 2})


def test_dict_keys_made_anew_each_call_still_match():
    # f-strings give new key objects each time: equal strings must still be equal keys.
    make = lambda: {f"layer_{i}": {"w": i} for i in range(12)}  # noqa: E731
    first, second = make(), make()
    assert next(iter(first)) is not next(iter(second))
    assert treedef(first) == treedef(second)
    assert flatten(first)[0] == flatten(second)[0] == jtu.tree_leaves(first)
    # Large ints are new objects each time too.
    ints = lambda: {10**6 + i: i for i in range(10, 0, -1)}  # noqa: E731
    assert next(iter(ints())) is not next(iter(ints()))
    assert flatten(ints()) == flatten(ints())
    assert flatten(ints())[0] == list(range(1, 11)) == jtu.tree_leaves(ints())


def test_equal_but_distinct_dict_keys_keep_their_own_objects():
    # 1, 1.0 and True are one dict key, but unflatten must return the caller's key.
    for key in (1, 1.0, True):
        leaves, td = flatten({key: "v", 0.5: "w"})
        rebuilt = td.unflatten(leaves)
        assert [type(k) for k in rebuilt] == [float, type(key)]
    assert jtu.tree_structure({1: 0}) == jtu.tree_structure({1.0: 0})
    assert treedef({1: 0}) == treedef({1.0: 0})


def test_dict_key_cache_survives_many_shapes():
    # More dict shapes than the key-order cache has slots: results stay right.
    trees = [{f"k{i}_{j}": j for j in range(3, 0, -1)} for i in range(1500)]
    for _ in range(2):
        for tree in trees:
            assert flatten(tree)[0] == [3, 2, 1][::-1] == jtu.tree_leaves(tree)


def test_unorderable_dict_keys_raise_jax_error():
    tree = {1: "a", "b": "c"}
    with pytest.raises(ValueError) as jax_error:
        jtu.tree_flatten(tree)
    with pytest.raises(ValueError) as ours:
        flatten(tree)
    assert str(ours.value) == str(jax_error.value)
    assert str(ours.value) == "Comparator raised exception while sorting pytree dictionary keys."
    assert isinstance(ours.value.__cause__, TypeError)


# -- bad input never crashes --------------------------------------------------------


def test_list_that_contains_itself_is_a_cycle_error():
    loop = [1]
    loop.append(loop)
    with pytest.raises(RecursionError, match="cycle"):
        flatten(loop)


def test_dict_cycle_through_a_list_is_a_cycle_error():
    tree = {"a": 1}
    tree["b"] = [tree]
    with pytest.raises(RecursionError, match="cycle: a (dict|list) contains itself"):
        flatten(tree)


def test_registered_node_that_yields_itself_is_a_cycle_error():
    class Ouroboros:
        pass

    jtu.register_pytree_node(Ouroboros, lambda o: ((o,), None), lambda _, c: c[0])
    with pytest.raises(RecursionError, match="cycle"):
        flatten(Ouroboros())


def test_registered_node_that_nests_forever_is_a_recursion_error():
    class Matryoshka:
        pass

    jtu.register_pytree_node(Matryoshka, lambda o: ((Matryoshka(),), None), lambda _, c: c[0])
    with pytest.raises(RecursionError, match="nested more than"):
        flatten(Matryoshka())


def test_deep_but_finite_tree_flattens_like_jax():
    tree = 0
    for _ in range(900):
        tree = [tree]
    leaves, td = flatten(tree)
    assert leaves == [0] and td.num_nodes == 901
    assert td.to_jax() == jtu.tree_structure(tree)
    assert td.unflatten([1]) == jtu.tree_unflatten(jtu.tree_structure(tree), [1])


def test_flatten_function_returning_garbage_is_a_type_error():
    class Broken:
        pass

    jtu.register_pytree_node(Broken, lambda b: "not a pair", lambda _, c: Broken())
    with pytest.raises(TypeError, match="flatten function registered for Broken"):
        flatten([Broken()])


def test_flatten_function_errors_propagate():
    class Raising:
        pass

    def explode(_):
        raise KeyError("from to_iter")

    jtu.register_pytree_node(Raising, explode, lambda _, c: Raising())
    with pytest.raises(KeyError, match="from to_iter"):
        flatten({"a": Raising()})


def test_list_shrunk_by_a_flatten_function_does_not_crash():
    class Shrinker:
        def __init__(self, victim):
            self.victim = victim

    def shrink(s):
        s.victim.clear()
        return (), None

    jtu.register_pytree_node(Shrinker, shrink, lambda _, c: None)
    victim = []
    victim.extend([Shrinker(victim), 1, 2])
    with pytest.raises(RuntimeError, match="changed size"):
        flatten(victim)


def test_dict_changed_by_a_flatten_function_keeps_its_snapshot():
    class Mutator:
        def __init__(self, victim):
            self.victim = victim

    def mutate(m):
        m.victim.clear()
        return (), None

    jtu.register_pytree_node(Mutator, mutate, lambda _, c: None)
    victim = {}
    victim.update(a=Mutator(victim), b=np.ones(2), c=3)
    leaves, td = flatten(victim)
    assert leaves[1] == 3 and td.num_leaves == 2


# -- threads ------------------------------------------------------------------------


def test_concurrent_flattens_agree_with_jax():
    trees = [tree for _, tree in CASES] + [
        {f"k{i}": [j for j in range(i % 5)] for i in range(n)} for n in range(1, 30)
    ]
    expected = [(jtu.tree_leaves(tree), repr(jtu.tree_structure(tree))) for tree in trees]
    errors = []

    def work():
        try:
            for _ in range(30):
                for tree, (jax_leaves, jax_repr) in zip(trees, expected):
                    leaves, td = flatten(tree)
                    assert all(a is b for a, b in zip(leaves, jax_leaves))
                    assert repr(td) == jax_repr
                    assert td.unflatten(leaves).__class__ is tree.__class__
        except BaseException as error:  # reported below, in the main thread
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_namedtuple_lying_about_its_length_does_not_crash():
    class Liar(treecases.Point):
        def __len__(self):
            return 1000

    leaves, td = flatten(Liar(1, 2))
    assert leaves == [1, 2] == jtu.tree_leaves(Liar(1, 2))
    assert td.num_leaves == 2


def test_dict_mutated_while_its_keys_are_sorted_keeps_its_snapshot():
    class Meddler:
        def __init__(self, n, victim):
            self.n, self.victim = n, victim

        def __hash__(self):
            return self.n

        def __lt__(self, other):
            self.victim.clear()
            return self.n < other.n

    victim = {}
    victim.update({Meddler(2, victim): "b", Meddler(1, victim): "a"})
    leaves, td = flatten(victim)
    assert leaves == ["a", "b"] and td.num_leaves == 2
