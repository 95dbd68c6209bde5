"""nnx/attributes.py: a GraphDef's attributes by their path, for warm start's keys."""

import jax
import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import nnx

from fastdispatch import nnx as fnnx


class WithActivation(nnx.Module):
    def __init__(self, rngs, act):
        self.linear = nnx.Linear(2, 2, rngs=rngs)
        self.act = act


def test_graph_attributes_read_a_graphdef_by_attribute_path():
    graphdef, _ = nnx.split(WithActivation(nnx.Rngs(0), jax.nn.relu))
    found = fnnx.graph_attributes(graphdef)
    assert found[()] is WithActivation and found[("linear",)] is nnx.Linear
    assert found[("act",)] is jax.nn.relu
    assert not any(str(key).startswith("_pytree__") for path in found for key in path)
