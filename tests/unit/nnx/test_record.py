"""nnx/record.pyx: the guards that prove a graph unchanged, and the Record that
reads a call's leaves from the graph's Variables and writes the new ones back."""

import jax.numpy as jnp
import numpy as np
import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import nnx
from nnx_models import X, forward

from fastdispatch import nnx as fnnx
from fastdispatch.nnx import record
from fastdispatch.nnx.record import ARRAY_SLOT, DictGuard, ListGuard, NodeGuard, VariableGuard


class Node:
    pass


def test_a_node_guard_holds_while_its_type_and_entries_are_the_recorded_ones():
    node, child, weight = Node(), Node(), jnp.ones(2)
    node.child, node.weight = child, weight
    guard = NodeGuard(node, ("child", "weight"), (child, ARRAY_SLOT))
    assert guard.holds_now()
    node.weight = jnp.zeros(3)  # another array: read from its slot, not proved by identity
    assert guard.holds_now()
    node.weight = np.zeros(3)  # not a jax array: the split would see another leaf
    assert not guard.holds_now()
    node.weight = weight
    node.child = Node()  # another object where the recorded one was
    assert not guard.holds_now()
    node.child = child
    node.extra = 1  # an entry the record does not know
    assert not guard.holds_now()
    del node.extra
    node.__class__ = type("Other", (Node,), {})
    assert not guard.holds_now()


def test_dict_and_list_guards_compare_their_items_by_identity():
    a, b = Node(), Node()
    d, items = {"a": a, "b": b}, [a, b]
    by_key, by_place = DictGuard(d, ("a", "b"), (a, b)), ListGuard(items)
    assert by_key.holds_now() and by_place.holds_now()
    d["b"], items[1] = Node(), Node()
    assert not by_key.holds_now() and not by_place.holds_now()
    d["b"], items[1] = b, b
    d["c"] = a
    items.append(a)
    assert not by_key.holds_now() and not by_place.holds_now()


def test_a_variable_guard_holds_while_it_holds_an_array_and_its_metadata():
    param = nnx.Param(jnp.ones(2))
    guard = VariableGuard(param, record.metadata(param))
    assert guard.holds_now()
    param.set_value(jnp.zeros(2))
    assert guard.holds_now()
    param.set_value(np.zeros(2))
    assert not guard.holds_now()
    param.set_value(jnp.ones(2))
    assert not VariableGuard(param, {**record.metadata(param), "sharding": ("data",)}).holds_now()


def variables_of(model):
    return [node for _, node in nnx.iter_graph(model) if isinstance(node, nnx.Variable)]


def test_a_record_reads_the_graph_s_leaves_and_writes_new_ones_back(block):
    jitted = fnnx.jit(forward)
    jitted(block, X)
    jitted(block, X)
    (recorded,) = jitted._records()
    assert recorded.shape_count() == 1
    leaves = recorded.gather_now((block, X), {})
    values = {id(record.raw_value(variable)) for variable in variables_of(block)}
    assert any(leaf is X for leaf in leaves)  # the plain argument, as it came
    assert values <= {id(leaf) for leaf in leaves}  # every Variable's value, read from its slot
    bumped = [leaf + 1 for leaf in leaves]
    recorded.write_slots(bumped)  # the roots' slots take the first outputs
    assert {id(record.raw_value(variable)) for variable in variables_of(block)} <= {
        id(leaf) for leaf in bumped
    }


def test_reading_a_slot_of_what_is_not_a_variable_raises_the_descriptor_s_error():
    with pytest.raises(TypeError):
        record.raw_value(Node())
