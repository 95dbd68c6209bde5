"""fastdispatch.jit against jax.jit on generated programs: a function, its
options, and a sequence of calls on argument trees drawn from a small pool (so
that calls repeat, hit and miss).  The leaves: jax arrays committed to a device
or not, numpy arrays, numpy and Python scalars (weak types), None, and now and
then a leaf jax refuses.  Every call's output (values, dtypes, weak types,
shardings, committedness) or error, and the trace counts, must be jax.jit's.
Each implementation gets its own arguments, built from the same description
(a donated array is deleted by the call that takes it)."""

import jax
import jax.numpy as jnp
import numpy as np
from compat.contract import TraceCounter, assert_same_tree
from fuzzing import assert_same_outcome, fuzz_settings, outcome
from hypothesis import given
from hypothesis import strategies as st

DTYPES = ("float32", "int32", "bool", "float16", "uint8", "bfloat16")
SHAPES = ((), (3,), (2, 2), (0,))

jax_arrays = st.tuples(st.just("jax"), st.sampled_from(DTYPES), st.sampled_from(SHAPES), st.booleans())
numpy_arrays = st.tuples(st.just("numpy"), st.sampled_from(DTYPES[:5]), st.sampled_from(SHAPES))
python_scalars = st.tuples(st.just("python"), st.sampled_from([0, 3, -2.5, True, 1 + 2j]))
numpy_scalars = st.tuples(st.just("numpy_scalar"), st.sampled_from(DTYPES[:5]))
leaf_descriptions = st.one_of(
    jax_arrays,
    jax_arrays,
    numpy_arrays,
    python_scalars,
    numpy_scalars,
    st.just(("none",)),
    st.just(("text",)),
)
tree_descriptions = st.recursive(
    leaf_descriptions,
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda items: ("list", items)),
        st.lists(children, min_size=1, max_size=3).map(lambda items: ("tuple", items)),
        st.dictionaries(st.sampled_from("abc"), children, min_size=1, max_size=3).map(lambda d: ("dict", d)),
    ),
    max_leaves=5,
)


def build(description):
    """A fresh argument tree from its description."""
    kind, *rest = description
    if kind in ("list", "tuple"):
        items = [build(item) for item in rest[0]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {key: build(item) for key, item in rest[0].items()}
    if kind == "jax":
        dtype, shape, committed = rest
        value = jnp.arange(int(np.prod(shape)), dtype=jnp.float32).reshape(shape).astype(dtype)
        return jax.device_put(value, jax.devices()[0]) if committed else value
    if kind == "numpy":
        dtype, shape = rest
        return np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    if kind == "python":
        return rest[0]
    if kind == "numpy_scalar":
        return np.dtype(rest[0]).type(1)
    if kind == "none":
        return None
    return "text"  # no jax type: jax.jit's TypeError, named by its path


def scale(tree, factor=2):
    return jax.tree.map(lambda x: x * factor + 1, tree)


def total(tree, factor=2):
    return sum((jnp.sum(x) for x in jax.tree.leaves(tree)), jnp.zeros((), jnp.int8)) * factor


def halve_and_count(tree, factor=2):
    return jax.tree.map(lambda x: x // 2 if jnp.issubdtype(x.dtype, jnp.integer) else x / 2, tree), factor


BODIES = {"scale": scale, "total": total, "halve_and_count": halve_and_count}
OPTIONS = (
    {},
    {"static_argnums": 1},
    {"static_argnames": "factor"},
    {"donate_argnums": 0},
)


@fuzz_settings
@given(
    body=st.sampled_from(sorted(BODIES)),
    options=st.sampled_from(range(len(OPTIONS))),
    pool=st.lists(tree_descriptions, min_size=1, max_size=3),
    calls=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([2, 3])), min_size=1, max_size=6),
)
def test_call_sequences_match_jax_jit(body, options, pool, calls):
    import fastdispatch

    options = OPTIONS[options]
    ours_count, theirs_count = TraceCounter(), TraceCounter()
    ours = fastdispatch.jit(ours_count(BODIES[body]), **options)
    theirs = jax.jit(theirs_count(BODIES[body]), **options)
    for index, factor in calls:
        description = pool[index % len(pool)]
        if "static_argnames" in options:
            got = outcome(lambda: ours(build(description), factor=factor))
            expected = outcome(lambda: theirs(build(description), factor=factor))
        else:
            got = outcome(lambda: ours(build(description), factor))
            expected = outcome(lambda: theirs(build(description), factor))
        assert_same_outcome(got, expected, assert_same_tree)
        assert ours_count.n == theirs_count.n, (ours_count.n, theirs_count.n)
