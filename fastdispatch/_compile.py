"""The one module that touches jax's private API.

Everything fastdispatch needs from jax beyond its public API goes through the
functions here, so that a jax upgrade breaks in one place, loudly, under
tests/unit/test_compile.py.  Supported: jax 0.10.x (pinned in pyproject.toml).

Private names used, all read in this module only:
  jax._src.tree_util._registry            Python-side pytree registry (type -> to_iter, from_iter)
  jax.stages.Compiled._executable         the pxla.MeshExecutable behind a Compiled
  MeshExecutable.xla_executable           jaxlib LoadedExecutable (execute_sharded)
  MeshExecutable.unsafe_call              pxla.ExecuteReplicated: out_handler.handlers,
                                          kept_var_idx, ordered_effects,
                                          has_unordered_effects, has_host_callbacks, mut
  MeshExecutable._in_shardings, in_avals  what the executable expects of each kept input
  PRNGKeyArray._base_array                the physical array behind a typed PRNG key
"""
from __future__ import annotations

import jax
import numpy as np
from jax._src import tree_util as _tree_util


def pytree_registry() -> dict:
    """jax's Python-side pytree registry: ``type -> (to_iter, from_iter)``.

    Every node type registered through jax's public functions
    (``register_pytree_node``, ``register_pytree_with_keys``,
    ``register_dataclass``, ``register_static``) appears here; the dict only
    grows, so its length tells a cache when to look again.
    """
    return _tree_util._registry


def raw_runner(compiled: jax.stages.Compiled, *args, **kwargs):
    """A zero-argument callable that runs ``compiled`` on these arguments
    through the bare PjRt call: ``execute_sharded(leaves).consume_with_handlers``.

    The leaves are flattened, pruned to the kept ones, placed on their devices
    and unwrapped (typed keys) once, here, so that the callable measures the
    floor of dispatch: no Python work beyond the two jaxlib calls. Its result
    is the flat list of outputs.
    """
    mesh_executable = compiled._executable
    call = mesh_executable.unsafe_call
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    kept = sorted(call.kept_var_idx)
    buffers = []
    # _in_shardings lists the kept inputs only, in order.
    for i, sharding in zip(kept, mesh_executable._in_shardings):
        leaf = jax.device_put(leaves[i], sharding)
        buffers.append(getattr(leaf, "_base_array", leaf))
    executable = mesh_executable.xla_executable
    handlers = call.out_handler.handlers

    def run():
        return executable.execute_sharded(buffers).consume_with_handlers(handlers)

    return run
