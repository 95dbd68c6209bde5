"""nnx/_flax.py: each private flax name is the flax object it stands for."""

import numpy as np
import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import nnx
from flax.nnx import extract
from flax.nnx.transforms import compilation
from nnx_models import Block, X, forward

from fastdispatch.nnx import _flax
from fastdispatch.nnx import record as _record


def test_flax_names_used():
    """Each of fastdispatch.nnx._flax's names is the flax object it stands for."""
    assert _flax.flax_jit is compilation.jit and _flax.JitWrapped is compilation.JitWrapped
    assert _flax.NodeStates is extract.NodeStates and _flax.State is nnx.State
    block = Block(nnx.Rngs(0))
    wrapped = compilation.jit(forward)
    assert type(wrapped) is _flax.JitWrapped
    with _flax.update_context(wrapped):
        pure_args, pure_kwargs = _flax.split(wrapped, (block, X), {})
        outputs = wrapped.jitted_fn(*pure_args, **pure_kwargs)
        out = _flax.merge(wrapped, outputs)
    np.testing.assert_allclose(out, nnx.jit(forward)(Block(nnx.Rngs(0)), X), rtol=1e-6)
    assert isinstance(pure_args[0], _flax.NodeStates) and pure_kwargs == {}
    graphdef = pure_args[0].graphdef
    assert _flax.same_outer_index(graphdef) == graphdef.with_same_outer_index()
    kept = _flax.kept(pure_args[0])
    assert kept.graphdef == _flax.same_outer_index(graphdef) and kept.states is pure_args[0].states
    assert _flax.GRAPH_CONTEXT.tmp_static_cache is None
    _, flat = _flax.graph_flatten(block, _flax.RefMap())
    assert len(flat.leaves) == len(pure_args[0].states[0]) and len(flat.paths) == len(flat.leaves)
    assert _flax.is_graph_node(block) and not _flax.is_graph_node(X)
    assert isinstance(_flax.get_node_impl(block), _flax.GraphNodeImpl)
    assert _flax.node_dict(block)["linear"] is block.linear
    kernel = block.linear.kernel
    assert isinstance(kernel, _flax.Variable)
    assert _record.raw_value(kernel) is kernel.get_raw_value()
    assert _flax.RAW_VALUE.__get__(kernel) is kernel.get_raw_value()
    assert _record.metadata(kernel) is _flax.METADATA.__get__(kernel) and not _flax.is_array_ref(kernel)
    _flax.check_can_update(kernel)
    assert isinstance(block._pytree__state, _flax.PytreeState)
    assert all(hasattr(block._pytree__state, flag) for flag in _flax.FLAGS)
    assert _flax.pytree_nodes(block)["linear"] is True and _flax.pytree_nodes(block) is block._pytree__nodes
    state = nnx.State({"a": 1})
    assert _flax.state_mapping(state) is state.raw_mapping
    assert callable(wrapped.jitted_fn.lower)
    graphdef, _ = nnx.split(block)
    assert isinstance(graphdef, _flax.GraphDef) and isinstance(graphdef.nodes[0], _flax.NodeDef)
    assert any(isinstance(attribute, _flax.NodeAttr) for _, attribute in graphdef.attributes)
    assert any(isinstance(attribute, _flax.Static) for _, attribute in graphdef.attributes)
    assert any(str(key).startswith(_flax.BOOKKEEPING) for key, _ in graphdef.attributes)


# -- records and guards ---------------------------------------------------------------
