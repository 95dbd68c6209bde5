"""Property tests: on generated trees mixing every node kind (registered classes
included), fastdispatch.core.pytree agrees with jax.tree_util on leaves, structure,
unflatten, equality, and equal trees hash equal."""

from __future__ import annotations

import jax.tree_util as jtu
import treecases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastdispatch.core.pytree import flatten

# Bounded: ~400 examples over the file, no deadline (jax array leaves are slow to make).
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(treecases.trees)
def test_flatten_and_unflatten_match_jax(tree):
    leaves, td = flatten(tree)
    treecases.structures_match_jax(tree, leaves, td)
    # Unflatten with new leaves: jax must see the same structure and these leaves.
    fresh = [object() for _ in leaves]
    rebuilt = td.unflatten(fresh)
    rebuilt_leaves, rebuilt_td = jtu.tree_flatten(rebuilt)
    assert rebuilt_td == jtu.tree_structure(tree)
    assert all(a is b for a, b in zip(rebuilt_leaves, fresh))


@SETTINGS
@given(treecases.trees)
def test_equal_structures_are_equal_and_hash_equal(tree):
    copy = treecases.same_shape_with_new_leaves(tree)
    _, first = flatten(tree)
    _, second = flatten(copy)
    assert first == second
    assert hash(first) == hash(second)


def _perturbed(tree, where, how):
    """`tree` with one leaf (chosen by `where`) wrapped in a container or made None."""
    leaves, td = jtu.tree_flatten(tree)
    if not leaves:
        return [tree]
    leaves = list(leaves)
    k = where % len(leaves)
    leaves[k] = [(leaves[k],), {"z": leaves[k]}, None][how]
    return jtu.tree_unflatten(td, leaves)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(treecases.trees, st.data())
def test_equality_agrees_with_jax(a, data):
    # b: an unrelated tree, the same shape, or the same shape with one leaf changed.
    b = data.draw(
        st.one_of(
            treecases.trees,
            st.just(treecases.same_shape_with_new_leaves(a)),
            st.builds(lambda where, how: _perturbed(a, where, how), st.integers(0, 50), st.integers(0, 2)),
        )
    )
    _, ours_a = flatten(a)
    _, ours_b = flatten(b)
    jax_equal = jtu.tree_structure(a) == jtu.tree_structure(b)
    assert (ours_a == ours_b) == jax_equal
    assert (ours_a != ours_b) == (not jax_equal)
    if jax_equal:
        assert hash(ours_a) == hash(ours_b)
