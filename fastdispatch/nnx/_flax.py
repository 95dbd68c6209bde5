"""Every private flax name fastdispatch.nnx relies on, here and nowhere else,
each checked in tests/unit/nnx/test_function.py.  flax's public names (``flax.nnx.*``)
are used where they are needed.

  compilation.jit, JitWrapped, ._get_pure_args_kwargs, ._get_non_pure_out, .jitted_fn
      flax's nnx.jit, its wrapper class (graph mode with updates), its split
      and merge around its jax.jit of the split function
  extract.NodeStates, its field _graphdef
      a graph argument as that jax.jit sees it
  graphlib.update_context, GRAPH_CONTEXT.tmp_static_cache, RefMap, flatten, is_graph_node,
           get_node_impl, GraphNodeImpl, GraphDef.with_same_outer_index
      flax's graph traversal, for slots and guards
  variablelib.Variable._raw_value, ._var_metadata, is_array_ref, ._check_can_update
      a Variable's value and metadata slots
  pytreelib.PytreeState._initializing, ._is_setup, Pytree._pytree__nodes, ._pytree__is_pytree
      which attributes flax's split visits
  statelib.State._mapping
      a State's dict
  graphlib.GraphDef.nodes, .attributes, NodeDef.num_attributes, NodeAttr, Static
      a GraphDef read as flax's flatten wrote it: nodes in preorder, each
      NodeDef followed by its attributes
"""

from __future__ import annotations

from flax.nnx import extract as _extract
from flax.nnx import graphlib as _graphlib
from flax.nnx import pytreelib as _pytreelib
from flax.nnx import statelib as _statelib
from flax.nnx import variablelib as _variablelib
from flax.nnx.transforms import compilation as _compilation

# flax's nnx.jit, and the class it returns in graph mode with graph updates.
flax_jit = _compilation.jit
JitWrapped = _compilation.JitWrapped

# The graph traversal.
update_context = _graphlib.update_context
GRAPH_CONTEXT = _graphlib.GRAPH_CONTEXT
STATIC_CACHE = "tmp_static_cache"  # GRAPH_CONTEXT's: nnx.cached_partial's traversal cache
NodeStates = _extract.NodeStates
RefMap = _graphlib.RefMap
is_graph_node = _graphlib.is_graph_node
get_node_impl = _graphlib.get_node_impl
GraphNodeImpl = _graphlib.GraphNodeImpl

# Variables, nodes' flags, States.
Variable = _variablelib.Variable
RAW_VALUE = _variablelib.Variable._raw_value  # slot descriptors
METADATA = _variablelib.Variable._var_metadata
is_array_ref = _variablelib.is_array_ref
PytreeState = _pytreelib.PytreeState
FLAGS = ("_initializing", "_is_setup")  # PytreeState's flag slots
State = _statelib.State

# A GraphDef, read by attribute.
GraphDef = _graphlib.GraphDef
NodeDef = _graphlib.NodeDef
NodeAttr = _graphlib.NodeAttr
Static = _graphlib.Static
BOOKKEEPING = "_pytree__"  # the prefix of flax's own attributes of a node


def split(flax_function, args, kwargs):
    """flax's split of a call's arguments, ``(pure args, pure kwargs)``; inside
    ``update_context(flax_function)``."""
    return flax_function._get_pure_args_kwargs(args, kwargs)


def merge(flax_function, outputs):
    """flax's merge of its jax.jit's outputs into the caller's objects: the
    function's own output; inside the split's ``update_context``."""
    return flax_function._get_non_pure_out(*outputs)


def graph_flatten(node, ref_index):
    """flax's flatten of a graph node: ``(GraphDef, FlatState with paths)``."""
    return _graphlib.flatten(node, with_paths=True, ref_index=ref_index, graph=True)


def node_dict(node):
    """A graph node's children by key."""
    return _graphlib.get_node_impl(node).node_dict(node)


def same_outer_index(graphdef):
    """A GraphDef as a call that keeps its graph returns it."""
    return graphdef.with_same_outer_index()


def kept(node_states):
    """The NodeStates a call that keeps its graph returns for ``node_states``."""
    graphdef = same_outer_index(node_states.graphdef)
    return NodeStates(_graphdef=graphdef, states=node_states.states, metadata=node_states.metadata)


def check_can_update(variable):
    """flax's own check that a Variable may be written (raises otherwise)."""
    variable._check_can_update()


def pytree_nodes(node):
    """Which attributes of a Pytree node flax's split visits (``{key: is a
    node}``), or None: all of them."""
    return node._pytree__nodes if getattr(node, "_pytree__is_pytree", False) else None


def state_mapping(state):
    """A State's own dict."""
    return state._mapping
