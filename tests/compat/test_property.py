"""Generated argument trees: both implementations agree on every output (bounded examples)."""

import jax
import jax.numpy as jnp
import numpy as np
from contract import TraceCounter, assert_same_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DTYPES = [np.float32, np.int32, np.bool_, np.float16, np.uint8]

scalars = st.one_of(
    st.integers(-100, 100),
    st.floats(-10, 10, allow_nan=False, width=32),
    st.booleans(),
    st.complex_numbers(max_magnitude=5, allow_nan=False, allow_infinity=False, width=64),
)


@st.composite
def arrays(draw):
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    dtype = draw(st.sampled_from(DTYPES))
    value = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)
    kind = draw(st.sampled_from(["numpy", "jax", "numpy_scalar"]))
    if kind == "jax":
        return jnp.asarray(value)
    if kind == "numpy_scalar":
        return dtype(1)
    return value


leaves = st.one_of(scalars, arrays())
trees = st.recursive(
    st.one_of(leaves, st.none()),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from("abcd"), children, max_size=3),
    ),
    max_leaves=6,
)


def double(tree):
    return jax.tree_util.tree_map(lambda x: x + x, tree)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees)
def test_generated_trees(jit, tree):
    count = TraceCounter()
    f = jit(count(double))
    first = f(tree)
    assert_same_tree(first, jax.jit(double)(tree))
    assert_same_tree(f(tree), first)  # the cached call gives the same
    assert count.n == 1
