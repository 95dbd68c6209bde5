"""warm/outputs.py: a call's output recipe as plain data, rebuilt in another process."""

import pickle

import jax
import jax.numpy as jnp
import pytest

from fastdispatch.warm import outputs
from fastdispatch.warm.identity import NotStored


def _round_trip(tree, sources, statics, call_objects, loading_objects=None):
    treedef = jax.tree_util.tree_structure(tree)
    described = outputs.describe(treedef, sources, statics, call_objects)
    # Plain data: it pickles without the objects it names.
    described = pickle.loads(pickle.dumps(described))
    return treedef, outputs.rebuild(described, call_objects if loading_objects is None else loading_objects)


def test_plain_values_names_and_inputs_come_back():
    config = {"depth": 3}  # an object of the call's own static parts
    tree = {"loss": 0, "aux": (1, 2), "activation": 3, "config": 4, "count": 5}
    sources = [-1, 0, 1, -1, -1, 2]
    statics = [jax.nn.relu, None, None, config, 7, None]
    treedef, (rebuilt, got_sources, got_statics) = _round_trip(tree, sources, statics, [config])
    assert rebuilt == treedef
    assert got_sources == sources
    assert got_statics[0] is jax.nn.relu
    assert got_statics[3] is config and got_statics[4] == 7
    assert [got_statics[i] for i in (1, 2, 5)] == [None, None, None]


def test_an_input_is_the_loading_call_s_own_object():
    first, second = {"depth": 3}, {"depth": 3}
    _, (_, _, statics) = _round_trip((0,), [-1], [first], [first], loading_objects=[second])
    assert statics[0] is second


def test_an_object_the_trace_made_is_not_stored():
    made = object()
    with pytest.raises(NotStored, match="non-array output of type object"):
        outputs.describe(jax.tree_util.tree_structure((0,)), [-1], [made], [])


def test_a_local_function_is_not_stored():
    def local(x):
        return x

    with pytest.raises(NotStored, match="cannot be rebuilt"):
        outputs.describe(jax.tree_util.tree_structure((0,)), [-1], [local], [])


def test_a_node_type_defined_in_a_function_is_not_stored():
    @jax.tree_util.register_pytree_node_class
    class Local:
        def __init__(self, x):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    with pytest.raises(NotStored, match="a class defined in a function"):
        outputs.describe(jax.tree_util.tree_structure(Local(jnp.zeros(2))), [0], [None], [])
