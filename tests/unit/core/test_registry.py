"""core/pytree/registry.pyx: what each type is to flatten (namedtuples,
subclasses, custom and static nodes, types registered late), as jax.tree_util has it."""

from __future__ import annotations

import collections

import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import treecases
from treecases import treedef

from fastdispatch.core.pytree import flatten, leaf_paths


def jax_paths(tree) -> list:
    """Each leaf's path as jax.tree_util gives it: a tuple of key entries."""
    return [path for path, _ in jtu.tree_flatten_with_path(tree)[0]]


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
