"""nnx/flax_call.py: a call no record serves, made as flax makes it across the
engine's steps: flax's update context is entered and always left, and calls
no record can serve go to flax unsplit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import nnx
from nnx_models import Block, X, forward

from fastdispatch import _reasons
from fastdispatch import nnx as fnnx
from fastdispatch.nnx import _flax
from fastdispatch.nnx import graph as nnx_graph
from fastdispatch.nnx.flax_call import FlaxCall


def test_flax_s_update_context_is_left_after_every_call():
    """A split call keeps flax's update context open across the engine's
    steps; it is left after a compile, a hit, a hand-off and an error."""
    stacks = _flax.GRAPH_CONTEXT.update_context_stacks

    def fails(model, x):
        raise ValueError("in the function")

    with pytest.raises(ValueError, match="in the function"):
        fnnx.jit(fails)(Block(nnx.Rngs(0)), X)
    assert not stacks
    jitted = fnnx.jit(forward)
    for block in (Block(nnx.Rngs(0)), Block(nnx.Rngs(1))):
        jitted(block, X)
        assert not stacks
    with jax.disable_jit():
        jitted(Block(nnx.Rngs(2)), X)
    assert not stacks


class History(nnx.Module):
    """Arrays inside a list of the graph: no record can serve its calls."""

    def __init__(self, rngs):
        self.linear = nnx.Linear(3, 3, rngs=rngs)
        self.history = nnx.data([jnp.zeros(3), jnp.ones(3)])

    def __call__(self, x):
        return self.linear(x) + self.history[0]


def test_a_graph_no_record_serves_goes_to_flax_without_splitting_each_call(sink, monkeypatch):
    built, splits = [], []
    build, open_split = nnx_graph.build, FlaxCall.__init__

    def counted_build(*args, **kwargs):
        built.append(1)
        return build(*args, **kwargs)

    def counted_split(*args, **kwargs):
        splits.append(1)
        open_split(*args, **kwargs)

    monkeypatch.setattr(nnx_graph, "build", counted_build)
    monkeypatch.setattr(FlaxCall, "__init__", counted_split)
    model, reference = History(nnx.Rngs(0)), History(nnx.Rngs(0))
    jitted, flax_jitted = fnnx.jit(forward), nnx.jit(forward)
    for _ in range(130):
        np.testing.assert_array_equal(jitted(model, X), flax_jitted(reference, X))
    # The compile's entry says why no record serves its graph: the next call
    # is split to find it, then calls on the same arguments go to flax
    # unsplit, but every 64th.
    assert len(built) == 1 and len(splits) == 4
    assert set(sink.outcomes()) == {_reasons.ARRAY_IN_CONTAINER}
