"""The raw limit: a compiled executable run through the bare PjRt call."""

from __future__ import annotations

import jax

from fastdispatch import _jax


def raw_runner(compiled: jax.stages.Compiled, *args, **kwargs):
    """A zero-argument callable that runs ``compiled`` on these arguments
    through the bare PjRt call: ``execute_sharded(leaves).consume_with_handlers``.

    The leaves are flattened, pruned to the kept ones, placed on their devices
    and unwrapped (typed keys) once, here, so that the callable measures the
    floor of dispatch: no Python work beyond the two jaxlib calls.  Its result
    is the flat list of outputs.  An executable with effects runs as jax runs
    it, with runtime tokens: one prepared token array per ordered effect in,
    the token outputs and the runtime token taken out and dropped.
    """
    parts = _jax.executable_parts(compiled)
    if isinstance(parts, str):
        raise ValueError(f"raw_runner: this executable cannot run directly ({parts})")
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    buffers = []
    for index, sharding, aval in zip(parts.kept, parts.in_shardings, parts.in_avals):
        leaf = leaves[index]
        if type(leaf) in (bool, int, float, complex):
            # As fastdispatch puts a Python scalar: jax.device_put would also
            # compare the value across the processes of a jax.distributed job.
            leaf = _jax.put_host(leaf, aval, sharding, _jax.scalar_devices(sharding), False)
        else:
            leaf = jax.device_put(leaf, sharding)
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        buffers.append(leaf)
    execute, handlers = parts.execute, parts.out_handlers
    if not parts.with_tokens:

        def run():
            return execute(buffers).consume_with_handlers(handlers)

        return run

    ordered = len(parts.ordered_effects)
    buffers = [_jax.fresh_token_buffer(parts.devices[0]) for _ in range(ordered)] + buffers
    token_handlers = [lambda arrays: arrays] * ordered

    def run_with_tokens():
        results = execute(buffers, with_tokens=True)
        if ordered:
            results.consume_with_handlers(token_handlers, strict=False)
        results.consume_token()
        return results.consume_with_handlers(handlers)

    return run_with_tokens
