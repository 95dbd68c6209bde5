"""fastdispatch.core.pytree against jax.tree_util: every node kind, every error.

Any difference from jax.tree_util in leaf order, structure, repr, paths or
equality is a bug: the dispatcher's cache keys and output trees rest on it.
"""

from __future__ import annotations

import collections
import dataclasses
import pickle
import threading

import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest
import treecases

from fastdispatch.core.pytree import TreeDef, first_difference, flatten, leaf_paths, unflatten

CASES = treecases.cases()


def treedef(tree) -> TreeDef:
    return flatten(tree)[1]


def jax_paths(tree) -> list:
    """Each leaf's path as jax.tree_util gives it: a tuple of key entries."""
    return [path for path, _ in jtu.tree_flatten_with_path(tree)[0]]


# -- every node kind matches jax ----------------------------------------------------


@pytest.mark.parametrize("name, tree", CASES, ids=[name for name, _ in CASES])
def test_flatten_matches_jax(name, tree):
    leaves, td = flatten(tree)
    treecases.structures_match_jax(tree, leaves, td)


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


def test_namedtuple_is_its_own_node_type():
    point = treecases.Point(1, 2)
    assert treedef(point) != treedef((1, 2))
    assert treedef(point) != treedef(treecases.PointSub(1, 2))
    rebuilt = treedef(point).unflatten(["x", "y"])
    assert type(rebuilt) is treecases.Point and rebuilt == ("x", "y")
    assert leaf_paths(treedef(point)) == jax_paths(point)
    assert jtu.keystr(leaf_paths(treedef(point))[1]) == ".y"


def test_tuple_and_dict_subclasses_are_leaves_unless_registered():
    for tree in (treecases.PlainTupleSub((1, 2)), treecases.PlainDictSub(a=1)):
        assert flatten(tree)[0][0] is tree


def test_ordered_dict_keeps_insertion_order():
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    assert flatten(od)[0] == [1, 2]
    assert treedef(od) != treedef(collections.OrderedDict([("a", 2), ("b", 1)]))
    assert treedef(od) != treedef({"b": 1, "a": 2})
    assert list(treedef(od).unflatten([5, 6]).items()) == [("b", 5), ("a", 6)]


def test_defaultdict_keeps_its_factory():
    dd = collections.defaultdict(list, {"b": 1, "a": 2})
    rebuilt = treedef(dd).unflatten([3, 4])
    assert type(rebuilt) is collections.defaultdict and rebuilt.default_factory is list
    assert dict(rebuilt) == {"a": 3, "b": 4}
    assert treedef(dd) != treedef(collections.defaultdict(dict, {"b": 1, "a": 2}))


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


def test_custom_node_with_aux_data():
    box = treecases.Box((1, 2), {"k": 3}, tag="t")
    assert flatten(box)[0] == [1, 2, 3]
    assert treedef(box) != treedef(treecases.Box((1, 2), {"k": 3}, tag="u"))
    rebuilt = treedef(box).unflatten(["a", "b", "c"])
    assert (rebuilt.items, rebuilt.named, rebuilt.tag) == (("a", "b"), {"k": "c"}, "t")
    assert leaf_paths(treedef(box)) == jax_paths(box)
    assert [jtu.keystr(path) for path in leaf_paths(treedef(box))] == [
        "[<flat index 0>][0]",
        "[<flat index 0>][1]",
        "[<flat index 1>]['k']",
    ]


def test_custom_node_with_unhashable_aux_is_hashable_and_compared_by_equality():
    first = treedef(treecases.Unhashable(1, [1, 2]))
    assert first == treedef(treecases.Unhashable(5, [1, 2]))
    assert hash(first) == hash(treedef(treecases.Unhashable(5, [1, 2])))
    assert first != treedef(treecases.Unhashable(1, [2]))


def test_custom_node_registered_with_keys_has_jax_paths():
    keyed = treecases.Keyed(1, [2, 3])
    assert leaf_paths(treedef(keyed)) == jax_paths(keyed)
    assert [jtu.keystr(path) for path in leaf_paths(treedef(keyed))] == [
        ".first",
        "['second'][0]",
        "['second'][1]",
    ]


def test_static_node_has_no_leaves_and_compares_by_equality():
    td = treedef(treecases.Mode("train"))
    assert td.num_leaves == 0
    assert td == treedef(treecases.Mode("train"))
    assert td != treedef(treecases.Mode("eval"))
    assert td.unflatten([]) == treecases.Mode("train")


def test_aux_data_other_than_atoms_is_compared_never_hashed():
    # As jaxlib's PyTreeDef: a flax GraphDef, the aux data of nnx's static
    # node, takes 12 us a hash, and a TrainState holds one in every step's
    # arguments.  Its equality alone tells two structures apart.
    hashes = []

    class Costly(treecases.Mode):
        def __hash__(self):
            hashes.append(self)
            return super().__hash__()

    jtu.register_static(Costly)
    first, second = treedef(Costly("train")), treedef(Costly("train"))
    assert first == second and hash(first) == hash(second) and hashes == []
    assert first != treedef(Costly("eval"))
    # Atoms (a tag, field names) are hashed, as before.
    assert hash(treedef(treecases.Box((1,), {}, tag="t"))) != hash(treedef(treecases.Box((1,), {}, tag="u")))


def test_partial_arguments_are_leaves_and_the_function_is_static():
    part = jtu.Partial(treecases.scale, 2.0, factor=3.0)
    leaves, td = flatten(part)
    assert leaves == [2.0, 3.0]
    rebuilt = td.unflatten([4.0, 5.0])
    assert rebuilt() == 20.0
    assert td != treedef(jtu.Partial(abs, 2.0, factor=3.0))


def test_type_registered_after_first_flatten_is_honoured():
    class Late:
        def __init__(self, a, b):
            self.a, self.b = a, b

    late = Late(1, 2)
    assert flatten(late)[0] == [late]  # a leaf, for now
    jtu.register_pytree_node(Late, lambda x: ((x.a, x.b), None), lambda _, c: Late(*c))
    leaves, td = flatten([late])
    assert leaves == [1, 2]
    treecases.structures_match_jax([late], leaves, td)


def test_jax_and_numpy_arrays_are_leaves_in_place():
    arrays = [jnp.ones((2,)), np.zeros(3)]
    leaves, _ = flatten({"a": arrays})
    assert all(a is b for a, b in zip(leaves, arrays))


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


def test_from_iter_errors_propagate_from_unflatten():
    class Picky:
        pass

    def rebuild(_, children):
        raise ValueError("picky")

    jtu.register_pytree_node(Picky, lambda p: ((1,), None), rebuild)
    td = treedef(Picky())
    with pytest.raises(ValueError, match="picky"):
        td.unflatten([1])


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
