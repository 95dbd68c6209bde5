"""The raw limit: a compiled executable run through the bare PjRt call."""

from __future__ import annotations

import jax
import numpy as np

from fastdispatch import _jax

_PYTHON_SCALARS = (bool, int, float, complex)


def raw_runner(
    compiled: jax.stages.Compiled,
    args: tuple,
    kwargs: dict | None = None,
    new_scalars: tuple = (),
    feed_back: bool = False,
    first_fed: int = 0,
):
    """A zero-argument callable that runs ``compiled`` on ``args`` and
    ``kwargs`` through the bare PjRt call:
    ``execute_sharded(leaves).consume_with_handlers``.

    The leaves are flattened, pruned to the kept ones, placed on their devices
    and unwrapped (typed keys) once, here, so that the callable measures the
    floor of dispatch.  Host data is the exception: a numpy leaf is put on the
    device on every call (its memory may change between calls, so no caller
    can keep it there), one jaxlib ``batched_device_put`` each, and so is a
    Python scalar of a type in ``new_scalars`` (a step counter's int: a new
    value every call); another Python scalar is put once, as fastdispatch
    keeps a repeated value on the device.  Its result is the flat list of
    outputs; its ``host_transfers`` says how many leaves each call puts.  An
    executable with effects runs as jax runs it, with runtime tokens: one
    prepared token array per ordered effect in, the token outputs and the
    runtime token taken out and dropped.

    ``feed_back``: each call runs on the previous call's outputs, as a
    training loop does: output ``j`` replaces input leaf ``j`` for the
    outputs that lead the output list with the inputs' avals (the new params
    and optimizer state; flax's graph leaves); ``first_fed``: the output that
    feeds leaf 0, the ones before it the executable's own (equinox's
    marker).  On an accelerator that is the floor such a loop can reach: PjRt
    charges each input still being computed by the previous launch (about 5
    us a buffer on a TPU v5e's host, nothing on the CPU, which runs a launch
    before returning).
    """
    parts = _jax.executable_parts(compiled)
    if isinstance(parts, str):
        raise ValueError(f"raw_runner: this executable cannot run directly ({parts})")
    leaves = jax.tree_util.tree_leaves((args, kwargs or {}))
    buffers, transfers = [], []
    for position, (index, sharding, aval) in enumerate(zip(parts.kept, parts.in_shardings, parts.in_avals)):
        leaf = leaves[index]
        if isinstance(leaf, (np.ndarray, np.generic)) or type(leaf) in new_scalars:
            transfers.append((position, leaf, aval, sharding, _jax.scalar_devices(sharding)))
            leaf = None  # put by each call
        elif type(leaf) in _PYTHON_SCALARS:
            # As fastdispatch puts a Python scalar: jax.device_put would also
            # compare the value across the processes of a jax.distributed job.
            leaf = _jax.put_host(leaf, aval, sharding, _jax.scalar_devices(sharding), False)
        else:
            leaf = jax.device_put(leaf, sharding)
        buffers.append(None if leaf is None else _physical(leaf))
    execute, handlers, put, cast = parts.execute, parts.out_handlers, _jax.put_host, _jax.canonicalize_host
    ordered = len(parts.ordered_effects)
    if parts.with_tokens:
        buffers = [_jax.fresh_token_buffer(parts.devices[0]) for _ in range(ordered)] + buffers
        transfers = [(position + ordered, *rest) for position, *rest in transfers]

    def inputs():
        if not transfers:
            return buffers
        sent = list(buffers)
        for position, leaf, aval, sharding, devices in transfers:
            if isinstance(leaf, (np.ndarray, np.generic)) and leaf.dtype != aval.dtype:
                leaf = cast(leaf)  # float64 to float32 with x64 off: jax.jit casts too
            sent[position] = put(leaf, aval, sharding, devices, False)
        return sent

    if not parts.with_tokens:
        feeds = _feeds(compiled, parts, leaves, first_fed) if feed_back else ()

        def run():
            outputs = execute(inputs()).consume_with_handlers(handlers)
            for position, output in feeds:
                buffers[position] = _physical(outputs[output])
            return outputs

        run.host_transfers = len(transfers)
        return run

    token_handlers = [lambda arrays: arrays] * ordered

    def run_with_tokens():
        results = execute(inputs(), with_tokens=True)
        if ordered:
            results.consume_with_handlers(token_handlers, strict=False)
        results.consume_token()
        return results.consume_with_handlers(handlers)

    run_with_tokens.host_transfers = len(transfers)
    return run_with_tokens


def _physical(array):
    """A typed key array's physical array (as fastdispatch passes it), else the array."""
    if jax.dtypes.issubdtype(array.dtype, jax.dtypes.prng_key):
        return getattr(array, _jax.KEY_BUFFER_ATTR)
    return array


def _feeds(compiled, parts, leaves, first_fed=0) -> tuple:
    """``(input position, output index)`` for each output fed back: the
    outputs from ``first_fed`` on whose avals are those of the input leaves
    in the same order, each to that leaf's kept position (pruned leaves are
    fed nothing)."""
    avals = jax.tree_util.tree_leaves(compiled.out_info)[first_fed:]
    position = {index: p for p, index in enumerate(parts.kept)}
    feeds = []
    for j, out in enumerate(avals):
        leaf = leaves[j] if j < len(leaves) else None
        if getattr(leaf, "shape", None) != out.shape or getattr(leaf, "dtype", None) != out.dtype:
            break
        if j in position:
            feeds.append((position[j], j + first_fed))
    return tuple(feeds)
