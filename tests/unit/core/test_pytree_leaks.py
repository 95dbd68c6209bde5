"""Nothing in fastdispatch.core.pytree keeps leaves, containers or TreeDefs alive
once the caller drops them, and its caches stay bounded."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import jax.tree_util as jtu
import treecases

from fastdispatch.core.pytree import first_difference, flatten, leaf_paths


class Leaf:
    """A leaf that can be weakly referenced."""


class Key:
    """A hashable, orderable dict key that can be weakly referenced."""

    def __init__(self, n):
        self.n = n

    def __hash__(self):
        return hash(self.n)

    def __eq__(self, other):
        return isinstance(other, Key) and other.n == self.n

    def __lt__(self, other):
        return self.n < other.n


def _tree_and_refs():
    """A tree of weakly referenceable leaves, nodes and keys, and weakrefs to them all."""
    leaves = [Leaf() for _ in range(8)]
    box = treecases.Box((leaves[0], leaves[1]), {"k": leaves[2]}, tag="t")
    pair = treecases.Pair(leaves[3], [leaves[4]], "add")
    mode = treecases.Mode("train")  # its aux data is the node itself
    partial = jtu.Partial(treecases.scale, leaves[5])
    keys = [Key(2), Key(1)]
    tree = {
        "box": box,
        "pair": pair,
        "mode": mode,
        "partial": partial,
        "keyed": {keys[0]: leaves[6], keys[1]: (leaves[7], None)},
    }
    watched = leaves + [box, pair, mode, partial] + keys
    return tree, [weakref.ref(obj) for obj in watched]


def _alive(refs):
    gc.collect()
    return [ref() for ref in refs if ref() is not None]


def test_flatten_and_unflatten_keep_nothing_alive():
    tree, refs = _tree_and_refs()
    leaves, td = flatten(tree)
    rebuilt = td.unflatten(leaves)
    assert type(rebuilt) is dict
    td_ref = weakref.ref(td)
    del tree, leaves, td, rebuilt
    assert _alive(refs) == []
    assert td_ref() is None


def test_paths_differences_and_to_jax_keep_nothing_alive():
    tree, refs = _tree_and_refs()
    leaves, td = flatten(tree)
    assert len(leaf_paths(td)) == len(leaves)
    assert first_difference(td, flatten([tree])[1]) == ((), "dict -> list")
    assert td.to_jax() == jtu.tree_structure(tree)
    del tree, leaves, td
    assert _alive(refs) == []


def test_errors_keep_nothing_alive():
    leaf = Leaf()
    ref = weakref.ref(leaf)
    loop = [leaf]
    loop.append(loop)
    try:
        flatten(loop)
    except RecursionError:
        pass
    loop.clear()
    del loop, leaf
    assert ref() is None


def test_caches_stay_bounded_over_many_shapes():
    # Many distinct dict shapes, tuple arities and aux values: the caches are
    # fixed-size, so once full, new batches of shapes only replace their entries.
    # Unbounded caches would grow by ~1.5 MB per batch here.
    def batch(offset):
        for i in range(offset, offset + 3000):
            flatten({f"key_{i}_{j}": (j,) * (i % 70) for j in range(3)})
            flatten(treecases.Pair(i, i, f"op_{i}"))

    tracemalloc.start()
    try:
        batch(10_000)
        gc.collect()
        full = tracemalloc.get_traced_memory()[0]
        batch(20_000)
        batch(30_000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - full
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, f"pytree caches grew by {grown} bytes over 6000 new shapes"
