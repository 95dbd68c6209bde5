"""Pytree arguments and outputs, keyword and mixed positional/keyword calls."""

import collections
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from contract import TraceCounter, against_jax, arange, assert_same_tree, expect_same

Point = collections.namedtuple("Point", ["x", "y"])


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w", "b"], meta_fields=["name"])
@dataclasses.dataclass
class Layer:
    w: jax.Array
    b: jax.Array
    name: str


class Pair:
    """A node registered by hand, with auxiliary data."""

    def __init__(self, a, b, tag):
        self.a, self.b, self.tag = a, b, tag


jax.tree_util.register_pytree_node(
    Pair, lambda p: ((p.a, p.b), p.tag), lambda tag, ch: Pair(ch[0], ch[1], tag)
)


def scale(tree, s):
    return jax.tree_util.tree_map(lambda leaf: leaf * s, tree)


TREES = {
    "nested_dict": {"b": {"w": arange((2, 2)), "b": arange((2,))}, "a": [arange((1,)), (1.0, 2)]},
    "list_tuple": [arange((3,)), (np.ones(2, np.float32), [jnp.int32(1)])],
    "namedtuple": Point(arange((2,)), Point(1.0, np.float32(2))),
    "none_leaves": {"x": None, "y": (None, arange((2,)))},
    "ordered_dict": collections.OrderedDict([("z", arange((2,))), ("a", 3.0)]),
    "defaultdict": collections.defaultdict(list, {"k": arange((2,))}),
    "dataclass": [Layer(arange((2, 2)), arange((2,)), "l0"), Layer(arange((1, 1)), arange((1,)), "l1")],
    "custom_node": Pair(arange((2,)), {"c": 2.0}, tag="t"),
    "partial": jax.tree_util.Partial(jnp.add, arange((2,))),
    "empty": ((), [], {}),
}


@against_jax
@pytest.mark.parametrize("name", sorted(TREES))
def test_pytree_roundtrip(jit, name):
    tree = TREES[name]
    if name == "partial":
        # A Partial is a pytree whose callable is static: call it inside.
        expect_same(jit, lambda p, s: p(s), tree, 2.0)
        return
    expect_same(jit, lambda t: t, tree)
    expect_same(jit, scale, tree, 2)


def test_output_tree_types_preserved(jit):
    out = jit(lambda t: t)(TREES["dataclass"] + [TREES["custom_node"], TREES["namedtuple"]])
    assert isinstance(out[0], Layer) and out[0].name == "l0"
    assert isinstance(out[2], Pair) and out[2].tag == "t"
    assert type(out[3]) is Point


def test_dict_key_order(jit):
    count = TraceCounter()
    f = jit(count(lambda d: d["a"] - d["b"]))
    x, y = arange((2,)), jnp.ones(2)
    r1 = f({"a": x, "b": y})
    r2 = f({"b": y, "a": x})  # insertion order does not matter: same signature
    assert_same_tree(r1, r2)
    assert count.n == 1
    out = jit(lambda d: d)({"b": 1.0, "a": 2.0})
    assert list(out) == ["a", "b"]  # jax sorts dict keys in outputs


def test_unsortable_dict_keys(jit):
    with pytest.raises(
        ValueError, match="Comparator raised exception while sorting pytree dictionary keys."
    ) as ours:
        jit(lambda d: d)({1: 1.0, "a": 2.0})
    with pytest.raises(ValueError) as theirs:
        jax.jit(lambda d: d)({1: 1.0, "a": 2.0})
    assert str(ours.value) == str(theirs.value)


def f_mixed(a, b, c=1.0, *, d, e=None):
    out = a + b * c + d
    return out if e is None else (out, e)


@against_jax
@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((1.0, 2.0), dict(d=3.0)),
        ((1.0,), dict(b=2.0, d=3.0)),
        ((), dict(a=1.0, b=2.0, d=3.0, c=4.0)),
        ((1.0, 2.0, 4.0), dict(d=3.0, e={"x": np.float32(1)})),
        ((np.ones(2, np.float32), arange((2,))), dict(d=jnp.int32(1))),
    ],
)
def test_positional_and_keyword(jit, args, kwargs):
    expect_same(jit, f_mixed, *args, **kwargs)


def test_kwargs_order_irrelevant(jit):
    count = TraceCounter()
    f = jit(count(f_mixed))
    r1 = f(1.0, b=2.0, d=3.0)
    r2 = f(1.0, d=3.0, b=2.0)
    assert_same_tree(r1, r2)
    assert count.n == 1


@against_jax
def test_var_kwargs(jit):
    def f(x, **kw):
        return x + sum(kw.values())

    expect_same(jit, f, 1.0, p=2.0, q=np.float32(3))


@against_jax
def test_missing_and_unexpected_arguments(jit):
    for args, kwargs in [
        ((1.0,), {}),
        ((1.0, 2.0), dict(d=1.0, zz=2.0)),
        ((1.0, 2.0, 3.0, 4.0), dict(d=1.0)),
    ]:
        with pytest.raises(TypeError) as ours:
            jit(f_mixed)(*args, **kwargs)
        with pytest.raises(TypeError) as theirs:
            jax.jit(f_mixed)(*args, **kwargs)
        assert str(ours.value) == str(theirs.value)
