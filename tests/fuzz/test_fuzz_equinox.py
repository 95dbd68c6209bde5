"""fastdispatch.filter_jit against equinox's filter_jit on generated programs:
calls on trees that mix jax and numpy arrays, Python scalars, strings,
functions and equinox Modules (array fields beside static ones), drawn from a
small pool so that calls repeat.  filter_jit traces the arrays and keeps
everything else static; every call's output (arrays compared as jax.jit's
are, everything else by type and value) or error, and the trace counts, must
be equinox's.  Each implementation gets its own arguments, built from the
same description."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compat.contract import TraceCounter, assert_same_tree
from frontends import EQUINOX_REASON
from fuzzing import assert_same_outcome, fuzz_settings, outcome
from hypothesis import given
from hypothesis import strategies as st

eqx = pytest.importorskip("equinox", reason=EQUINOX_REASON)


class Scaled(eqx.Module):
    weight: jax.Array
    bias: np.ndarray
    activation: str = eqx.field(static=True)

    def __call__(self, x):
        y = x * self.weight + self.bias
        return jnp.tanh(y) if self.activation == "tanh" else y


leaf_descriptions = st.one_of(
    st.tuples(st.just("jax"), st.sampled_from(["float32", "int32"]), st.sampled_from([(), (2,)])),
    st.tuples(st.just("numpy"), st.sampled_from(["float32", "int32"]), st.sampled_from([(), (2,)])),
    st.tuples(st.just("python"), st.sampled_from([1, 2.5, True, None])),
    st.tuples(st.just("text"), st.sampled_from(["tanh", "id"])),
    st.tuples(st.just("function"), st.sampled_from(["sin", "relu"])),
    st.tuples(st.just("module"), st.sampled_from(["tanh", "id"]), st.sampled_from([(), (2,)])),
)
tree_descriptions = st.recursive(
    leaf_descriptions,
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda items: ("list", items)),
        st.dictionaries(st.sampled_from("ab"), children, min_size=1, max_size=2).map(lambda d: ("dict", d)),
    ),
    max_leaves=4,
)
FUNCTIONS = {"sin": jnp.sin, "relu": jax.nn.relu}


def build(description):
    kind, *rest = description
    if kind == "list":
        return [build(item) for item in rest[0]]
    if kind == "dict":
        return {key: build(item) for key, item in rest[0].items()}
    if kind in ("jax", "numpy"):
        dtype, shape = rest
        value = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype) + 1
        return jnp.asarray(value) if kind == "jax" else value
    if kind in ("python", "text"):
        return rest[0]
    if kind == "function":
        return FUNCTIONS[rest[0]]
    activation, shape = rest
    return Scaled(jnp.full(shape, 0.5), np.ones(shape, np.float32), activation)


def apply(tree, x):
    """Arrays and Modules act on x; everything else comes back as it is (static)."""

    def visit(leaf):
        if isinstance(leaf, Scaled):
            return leaf(x)
        if callable(leaf):
            return leaf(x)
        if eqx.is_array(leaf):
            return leaf * x
        return leaf

    return jax.tree.map(visit, tree, is_leaf=lambda leaf: isinstance(leaf, Scaled))


def same_output(ours, theirs):
    ours_arrays, ours_static = eqx.partition(ours, eqx.is_array)
    theirs_arrays, theirs_static = eqx.partition(theirs, eqx.is_array)
    assert_same_tree(ours_arrays, theirs_arrays)
    assert jax.tree.structure(ours_static) == jax.tree.structure(theirs_static)
    assert jax.tree.leaves(ours_static) == jax.tree.leaves(theirs_static)


@fuzz_settings
@given(
    pool=st.lists(tree_descriptions, min_size=1, max_size=3),
    calls=st.lists(st.integers(0, 2), min_size=1, max_size=6),
    donate=st.sampled_from(["none", "all"]),
)
def test_call_sequences_match_equinox(pool, calls, donate):
    import fastdispatch

    ours_count, theirs_count = TraceCounter(), TraceCounter()
    ours = fastdispatch.filter_jit(ours_count(apply), donate=donate)
    theirs = eqx.filter_jit(theirs_count(apply), donate=donate)
    for index in calls:
        description = pool[index % len(pool)]
        got = outcome(lambda: ours(build(description), jnp.float32(2.0)))
        expected = outcome(lambda: theirs(build(description), jnp.float32(2.0)))
        assert_same_outcome(got, expected, same_output)
        assert ours_count.n == theirs_count.n, (ours_count.n, theirs_count.n)
