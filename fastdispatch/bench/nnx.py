"""The flax NNX group: flax.nnx.jit (graph mode, the reference) against its tree
mode, nnx.cached_partial, fastdispatch.nnx.jit, and fastdispatch.nnx.jit through
nnx.cached_partial ("fd cached_partial": ``nnx.cached_partial(fastdispatch.nnx.jit(step),
model, optimizer)``, as a user of cached_partial would switch).

Training steps as NNX users write them: an MLP with an Adam optimizer, a model
with BatchNorm and Dropout, a 20-layer model, a model that keeps raw jax arrays
as attributes (a step count and a running mean, updated in ``__call__``).  Every
implementation trains its own fresh model and optimizer, updated in place call
after call; the outputs (the losses) are checked against flax's before timing.
The raw limit runs the very executable flax's jax.jit compiled, on split
arguments prepared once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .executables import nnx_executable
from .raw import raw_runner
from .runner import FASTDISPATCH, Impl
from .workload import Workload

NNX, TREE, CACHED = "nnx.jit", "nnx.jit(graph=False)", "nnx.cached_partial"
FD_CACHED = "fd cached_partial"


def implementations() -> list[Impl]:
    """flax.nnx.jit (the reference), its tree mode, cached_partial, fastdispatch.nnx.jit,
    and fastdispatch.nnx.jit through cached_partial."""
    try:
        from flax import nnx
    except ImportError:
        return [Impl(NNX, None, "not installed (pip install 'fastdispatch[flax]')")]
    from fastdispatch import nnx as fastdispatch_nnx

    return [
        Impl(NNX, lambda w: nnx.jit(w.fun)),
        Impl(TREE, lambda w: nnx.jit(w.fun, graph=False)),
        Impl(CACHED, lambda w: _CachedPartial(nnx.jit(w.fun))),
        Impl(FASTDISPATCH, lambda w: fastdispatch_nnx.jit(w.fun)),
        Impl(FD_CACHED, lambda w: _CachedPartial(fastdispatch_nnx.jit(w.fun))),
    ]


class _CachedPartial:
    """``nnx.cached_partial(jitted, model, optimizer)`` for each (model,
    optimizer) pair it is called with, then called on the rest."""

    def __init__(self, jitted):
        self.jitted = jitted
        self.partials = {}

    def __call__(self, model, optimizer, *rest):
        from flax import nnx

        key = (id(model), id(optimizer))
        cached = self.partials.get(key)
        if cached is None:
            cached = self.partials[key] = nnx.cached_partial(self.jitted, model, optimizer)
        return cached(*rest)


def _raw(w: Workload):
    """The executable flax's jax.jit compiled for w, through the bare PjRt call,
    each call on the graph's leaves the previous one left (as nnx.jit runs it)."""
    from flax import nnx

    args, kwargs = w.make_args()
    compiled, pure_args, pure_kwargs, state = nnx_executable(nnx.jit(w.fun), *args, **kwargs)
    return raw_runner(compiled, pure_args, pure_kwargs, feed_back=True), state


def train_step(model, optimizer, x, y):
    from flax import nnx

    def loss_fn(m):
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def _model_args(make_model, batch=64, features=8):
    import optax
    from flax import nnx

    model = make_model(nnx.Rngs(0, dropout=1))
    # One transformation for every optimizer: its functions are static in the
    # graph, and new ones would be a new graph, and a compile.
    tx = _classes.setdefault("adam", optax.adam(1e-3))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    x = jnp.linspace(-1, 1, batch * features, dtype=jnp.float32).reshape(batch, features)
    return (model, optimizer, x, jnp.zeros((batch, 1))), {}


def _mlp(rngs):
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(8, 32, rngs=rngs)
            self.l2 = nnx.Linear(32, 1, rngs=rngs)

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.l1(x)))

    return _once(MLP)(rngs)


def _normalized(rngs):
    from flax import nnx

    class Normalized(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(8, 32, rngs=rngs)
            self.norm = nnx.BatchNorm(32, rngs=rngs)
            self.drop = nnx.Dropout(0.1, rngs=rngs)
            self.l2 = nnx.Linear(32, 1, rngs=rngs)

        def __call__(self, x):
            return self.l2(self.drop(jax.nn.relu(self.norm(self.l1(x)))))

    return _once(Normalized)(rngs)


DEPTH = 20


def _deep(rngs):
    from flax import nnx

    class Deep(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(8, 8, rngs=rngs) for _ in range(DEPTH)])
            self.out = nnx.Linear(8, 1, rngs=rngs)

        def __call__(self, x):
            for layer in self.layers:
                x = jax.nn.tanh(layer(x))
            return self.out(x)

    return _once(Deep)(rngs)


def _array_attributes(rngs):
    from flax import nnx

    class ArrayAttributes(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(8, 32, rngs=rngs)
            self.l2 = nnx.Linear(32, 1, rngs=rngs)
            self.count = jnp.zeros((), jnp.int32)  # raw jax arrays, no Variable
            self.mean = jnp.zeros((32,), jnp.float32)

        def __call__(self, x):
            h = jax.nn.relu(self.l1(x))
            self.count += 1
            self.mean = self.mean + (jnp.mean(h, axis=0) - self.mean) / self.count
            return self.l2(h - self.mean)

    return _once(ArrayAttributes)(rngs)


def generate_step(model, tokens, index):
    """One token of a decode loop, as flax's miniGPT tutorial samples: the
    logits at a Python int position of a prompt."""
    return jnp.argmax(model(tokens)[0, index])


def _generate_args():
    from flax import nnx

    model = _decoder(nnx.Rngs(0, dropout=1))
    return (model, jnp.arange(16, dtype=jnp.int32)[None, :] % 32, 7), {}


def _decoder(rngs):
    from flax import nnx

    class Decoder(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(32, 32, rngs=rngs)
            self.blocks = nnx.List([_once(DecoderBlock)(rngs) for _ in range(2)])
            self.out = nnx.Linear(32, 32, rngs=rngs)

        def __call__(self, tokens):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.out(x)

    class DecoderBlock(nnx.Module):
        def __init__(self, rngs):
            self.norm = nnx.LayerNorm(32, rngs=rngs)
            self.attention = nnx.MultiHeadAttention(2, 32, decode=False, rngs=rngs)
            self.dropout = nnx.Dropout(0.1, rngs=rngs)
            self.mlp = nnx.Linear(32, 32, rngs=rngs)

        def __call__(self, x):
            mask = nnx.make_causal_mask(x[..., 0])
            x = x + self.dropout(self.attention(self.norm(x), mask=mask))
            return x + self.mlp(x)

    return _once(Decoder)(rngs)


_classes = {}


def _once(cls):
    # One class per name across calls: a new class would be a new graph, and a compile.
    return _classes.setdefault(cls.__name__, cls)


WORKLOADS = [
    Workload(
        "nnx_mlp_adam",
        "MLP + Adam training step",
        train_step,
        lambda: _model_args(_mlp),
        raw=_raw,
        note="Linear 8-32, relu, Linear 32-1, batch 64, nnx.Optimizer(adam); "
        "raw runs each call on the state the last one left",
    ),
    Workload(
        "nnx_batchnorm_dropout",
        "BatchNorm + Dropout training step",
        train_step,
        lambda: _model_args(_normalized),
        raw=_raw,
        note="batch statistics and the dropout RNG counter updated every step",
    ),
    Workload(
        "nnx_deep",
        f"{DEPTH}-layer model training step",
        train_step,
        lambda: _model_args(_deep),
        raw=_raw,
    ),
    Workload(
        "array_attributes",
        "jax arrays as module attributes, training step",
        train_step,
        lambda: _model_args(_array_attributes),
        raw=_raw,
        note="the MLP with self.count (int32[]) and self.mean (f32[32]), raw jax arrays updated "
        "in __call__ (count += 1, running mean of the hidden layer, subtracted from it), "
        "so the loss depends on their updates",
    ),
    Workload(
        "nnx_generate_step",
        "decode step: a 2-block transformer, a prompt and a Python int",
        generate_step,
        _generate_args,
        raw=_raw,
        skip={CACHED: "takes no optimizer", FD_CACHED: "takes no optimizer"},
        note="Embed, 2 x (LayerNorm, MultiHeadAttention, Dropout with its rng stream, Linear), "
        "Linear; the prompt i32[1,16] and the position a Python int; the rng count written back",
    ),
]
