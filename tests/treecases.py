"""A shared corpus of pytrees for tests: one example of every node kind jax knows,
the registered classes they need, and a hypothesis strategy mixing them all.

Import this module once per process (it registers its classes with jax at import,
and jax refuses a second registration of the same type).
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from hypothesis import strategies as st

from fastdispatch.core.pytree import flatten, leaf_paths

# -- registered and native node types ------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])
Triple = collections.namedtuple("Triple", ["a", "b", "c"])


class PointSub(Point):
    """A subclass of a namedtuple is a namedtuple node of its own type."""


class PlainTupleSub(tuple):
    """A tuple subclass without `_fields`: a leaf for jax."""


class PlainDictSub(dict):
    """A dict subclass that nobody registered: a leaf for jax."""


@functools.partial(jtu.register_dataclass, data_fields=["x", "y"], meta_fields=["op"])
@dataclasses.dataclass
class Pair:
    """register_dataclass with explicit fields; `op` is static."""

    x: object
    y: object
    op: str = "add"


@jtu.register_dataclass
@dataclasses.dataclass
class Layer:
    """register_dataclass inferring its fields; `name` is static by metadata."""

    w: object
    b: object
    name: str = dataclasses.field(default="layer", metadata=dict(static=True))


@jtu.register_dataclass
@dataclasses.dataclass
class NoMeta:
    """A dataclass node with no static field."""

    value: object


class Box:
    """register_pytree_node with aux data; its children are a (tuple, dict) pair."""

    def __init__(self, items, named, tag="box"):
        self.items, self.named, self.tag = items, named, tag

    def __repr__(self):
        return f"Box({self.items!r}, {self.named!r}, tag={self.tag!r})"


jtu.register_pytree_node(
    Box,
    lambda box: ((box.items, box.named), box.tag),
    lambda tag, children: Box(children[0], children[1], tag),
)


class Keyed:
    """register_pytree_with_keys: its leaves have GetAttrKey/DictKey paths."""

    def __init__(self, first, second):
        self.first, self.second = first, second


jtu.register_pytree_with_keys(
    Keyed,
    lambda k: (((jtu.GetAttrKey("first"), k.first), (jtu.DictKey("second"), k.second)), None),
    lambda _, children: Keyed(*children),
)


class Unhashable:
    """A node whose aux data is a list: unhashable, compared by ==."""

    def __init__(self, value, meta):
        self.value, self.meta = value, meta


jtu.register_pytree_node(
    Unhashable,
    lambda u: ((u.value,), list(u.meta)),
    lambda meta, children: Unhashable(children[0], meta),
)


@jtu.register_static
class Mode:
    """register_static: no leaves, compared by ==."""

    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Mode) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"Mode({self.name!r})"


def scale(x, factor=1.0):
    return x * factor


# -- the corpus ---------------------------------------------------------------------


def treedef(tree):
    """fastdispatch's TreeDef of ``tree``."""
    return flatten(tree)[1]


def leaf_examples() -> list:
    """Objects every pytree library must treat as leaves."""
    return [
        1,
        2.5,
        True,
        3j,
        "text",
        b"bytes",
        np.float32(1.5),
        np.arange(3),
        jnp.ones((2,)),
        object(),
        PlainTupleSub((1, 2)),
        PlainDictSub(a=1),
        Ellipsis,
        frozenset({1}),
        range(3),
    ]


def cases() -> list[tuple[str, object]]:
    """(name, tree): one or more trees of every node kind, and their edges."""
    a = np.ones((2, 2))
    return [
        ("leaf", 1.0),
        ("none", None),
        ("empty tuple", ()),
        ("empty list", []),
        ("empty dict", {}),
        ("tuple", (1, 2, 3)),
        ("tuple of one", (1,)),
        ("list", [1, "a", None, a]),
        ("nested tuple list", (1, [2, (3, [4, None])], ())),
        ("dict sorted", {"a": 1, "b": 2}),
        ("dict reversed insertion", {"c": 3, "b": 2, "a": 1}),
        ("dict int keys", {3: "c", 1: "a", 2: "b"}),
        ("dict int and float keys", {2.5: 1, 1: 2, -3: 3}),
        ("dict tuple keys", {(2, "a"): 1, (1, "b"): 2}),
        ("dict of None", {"x": None, "y": [None]}),
        ("nested dict", {"layer_1": {"w": a, "b": a}, "layer_0": {"w": a, "b": a}}),
        ("namedtuple", Point(1, (2, 3))),
        ("namedtuple subclass", PointSub(1, 2)),
        ("namedtuple in dict", {"p": Triple(None, [1], {"k": 2})}),
        ("OrderedDict", collections.OrderedDict([("b", 1), ("a", 2)])),
        ("defaultdict", collections.defaultdict(list, {"b": 1, "a": [2]})),
        ("dataclass explicit", Pair(1, [2, 3], "mul")),
        ("dataclass inferred", Layer(a, a, "dense")),
        ("dataclass no meta", NoMeta((1, 2))),
        ("custom node", Box((1, 2), {"k": 3}, tag="t")),
        ("custom with keys", Keyed(1, [2, 3])),
        ("custom unhashable aux", Unhashable(1, [1, 2])),
        ("static node", Mode("train")),
        ("static in tuple", (Mode("eval"), 1)),
        ("Partial", jtu.Partial(scale, 2.0, factor=3.0)),
        ("jax array leaves", [jnp.zeros((3,)), jnp.ones(())]),
        (
            "everything",
            {
                "t": (1, None, [Point(2, 3)]),
                "d": collections.OrderedDict(z=Pair(4, 5)),
                "c": Box([6], {"q": Keyed(7, 8)}),
                "s": Mode("m"),
                "p": jtu.Partial(scale, 9),
            },
        ),
    ]


def structures_match_jax(tree, ours_leaves, ours_treedef) -> None:
    """Assert that (leaves, treedef) from fastdispatch agree with jax.tree_util on `tree`."""
    jax_leaves, jax_treedef = jtu.tree_flatten(tree)
    assert len(ours_leaves) == len(jax_leaves)
    assert all(a is b for a, b in zip(ours_leaves, jax_leaves))
    assert repr(ours_treedef) == repr(jax_treedef)
    assert ours_treedef.num_leaves == jax_treedef.num_leaves
    assert ours_treedef.num_nodes == jax_treedef.num_nodes
    assert ours_treedef.to_jax() == jax_treedef
    assert leaf_paths(ours_treedef) == [path for path, _ in jtu.tree_flatten_with_path(tree)[0]]


# -- hypothesis: trees mixing every node kind ----------------------------------------

_ARRAYS = [np.zeros((2,)), np.ones((1, 3), np.float32)]
_JAX_ARRAYS = None


def _jax_arrays():
    # Made lazily: creating jax arrays at import would initialise the backend.
    global _JAX_ARRAYS
    if _JAX_ARRAYS is None:
        _JAX_ARRAYS = [jnp.zeros((2,)), jnp.ones((), jnp.int32)]
    return _JAX_ARRAYS


leaves = st.one_of(
    st.integers(-5, 5),
    st.floats(allow_nan=False, width=32),
    st.text("ab", max_size=2),
    st.sampled_from(range(len(_ARRAYS))).map(lambda i: _ARRAYS[i]),
    st.sampled_from([0, 1]).map(lambda i: _jax_arrays()[i]),
)

_str_keys = st.text("abcdefgh", min_size=1, max_size=3)
_int_keys = st.integers(-3, 20)


def _containers(children):
    small = st.lists(children, max_size=4)
    str_dicts = st.dictionaries(_str_keys, children, max_size=4)
    int_dicts = st.dictionaries(_int_keys, children, max_size=3)
    return st.one_of(
        st.just(None),
        small.map(tuple),
        small,
        str_dicts,
        int_dicts,
        st.builds(Point, children, children),
        st.builds(Triple, children, children, children),
        str_dicts.map(lambda d: collections.OrderedDict(sorted(d.items(), reverse=True))),
        str_dicts.map(lambda d: collections.defaultdict(list, d)),
        st.builds(Pair, children, children, st.sampled_from(["add", "mul"])),
        st.builds(Layer, children, children, st.sampled_from(["a", "b"])),
        st.builds(NoMeta, children),
        st.builds(Box, small.map(tuple), str_dicts, st.sampled_from(["t", "u"])),
        st.builds(Keyed, children, children),
        st.builds(Unhashable, children, st.lists(st.integers(0, 2), max_size=2)),
        st.sampled_from(["train", "eval"]).map(Mode),
        st.builds(lambda args: jtu.Partial(scale, *args), st.lists(children, max_size=2)),
    )


trees = st.recursive(leaves, _containers, max_leaves=12)


def same_shape_with_new_leaves(tree):
    """A tree equal in structure to `tree` (rebuilt by jax) with fresh leaf objects."""
    jax_leaves, treedef = jtu.tree_flatten(tree)
    return jtu.tree_unflatten(treedef, [np.float64(i) for i in range(len(jax_leaves))])
