"""The train steps ``bench --cold-start`` starts in fresh processes:

    python cold_start_models.py --model {nnx-split,nnx-jit,eqx} [--calls N] [--layers L]

nnx-split  a small flax NNX transformer (6 layers, d_model 64, 4 heads, an
           MLP block, layer norms; a batch of token ids, next-token loss),
           optax Adam, under plain ``jax.jit`` over ``nnx.split``/``nnx.merge``
           (the graphdef a static argument, the state a pytree)
nnx-jit    the same model and step under ``nnx.jit``: model and
           ``nnx.Optimizer`` as arguments, updated in place
eqx        an ``eqx.nn.MLP`` step with optax Adam under ``equinox.filter_jit``

Written as the libraries' documentation writes them, never importing
fastdispatch: ``python -m fastdispatch`` routes the jits.  Prints one JSON
line: the seconds from just before the first call to its result being ready
(model, data and imports already done), the mean microseconds of the next
``--calls`` calls, the last loss, and warm start's counts when the program
runs under ``python -m fastdispatch --warm-start`` (else null).
"""

import argparse
import functools
import json
import sys
import time

import jax
import jax.numpy as jnp
import optax

D_MODEL = 64
HEADS = 4
VOCAB = 256
SEQ = 32
BATCH = 8
MLP_SIZES = dict(in_size=32, out_size=8, width_size=128, depth=3)
MLP_BATCH = 64


def transformer(layers):
    """(model, optimizer, batch): the NNX transformer, its Adam, token ids."""
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.norm1 = nnx.LayerNorm(D_MODEL, rngs=rngs)
            self.attention = nnx.MultiHeadAttention(
                num_heads=HEADS, in_features=D_MODEL, decode=False, rngs=rngs
            )
            self.norm2 = nnx.LayerNorm(D_MODEL, rngs=rngs)
            self.up = nnx.Linear(D_MODEL, 4 * D_MODEL, rngs=rngs)
            self.down = nnx.Linear(4 * D_MODEL, D_MODEL, rngs=rngs)

        def __call__(self, x, mask):
            x = x + self.attention(self.norm1(x), mask=mask)
            return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))

    class Transformer(nnx.Module):
        def __init__(self, rngs):
            self.tokens = nnx.Embed(VOCAB, D_MODEL, rngs=rngs)
            self.positions = nnx.Embed(SEQ, D_MODEL, rngs=rngs)
            self.blocks = nnx.List([Block(rngs) for _ in range(layers)])
            self.norm = nnx.LayerNorm(D_MODEL, rngs=rngs)
            self.head = nnx.Linear(D_MODEL, VOCAB, rngs=rngs)

        def __call__(self, ids):
            x = self.tokens(ids) + self.positions(jnp.arange(ids.shape[1]))
            mask = nnx.make_causal_mask(ids)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.norm(x))

    model = Transformer(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    ids = jax.random.randint(jax.random.key(1), (BATCH, SEQ + 1), 0, VOCAB)
    return model, optimizer, (ids[:, :-1], ids[:, 1:])


def next_token_loss(model, inputs, targets):
    logits = model(inputs)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def nnx_split_step(layers):
    """A step function and its first arguments: plain jax.jit over split/merge."""
    from flax import nnx

    model, optimizer, batch = transformer(layers)
    graphdef, state = nnx.split((model, optimizer))

    @functools.partial(jax.jit, static_argnums=0)
    def train_step(graphdef, state, inputs, targets):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(next_token_loss)(model, inputs, targets)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    def step(args):
        state, loss = train_step(*args)
        return (args[0], state, *args[2:]), loss

    return step, (graphdef, state, *batch)


def nnx_jit_step(layers):
    """The same step under nnx.jit, the model and optimizer updated in place."""
    from flax import nnx

    model, optimizer, batch = transformer(layers)

    @nnx.jit
    def train_step(model, optimizer, inputs, targets):
        loss, grads = nnx.value_and_grad(next_token_loss)(model, inputs, targets)
        optimizer.update(model, grads)
        return loss

    def step(args):
        return args, train_step(*args)

    return step, (model, optimizer, *batch)


def eqx_step(_layers):
    """An eqx.nn.MLP step with optax Adam under equinox.filter_jit."""
    import equinox as eqx

    keys = jax.random.split(jax.random.key(0), 3)
    model = eqx.nn.MLP(**MLP_SIZES, key=keys[0])
    optim = optax.adam(1e-3)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))
    x = jax.random.normal(keys[1], (MLP_BATCH, MLP_SIZES["in_size"]))
    y = jax.random.normal(keys[2], (MLP_BATCH, MLP_SIZES["out_size"]))

    def loss_fn(model, x, y):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    @eqx.filter_jit
    def train_step(model, opt_state, x, y):
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    def step(args):
        model, opt_state, loss = train_step(*args)
        return (model, opt_state, *args[2:]), loss

    return step, (model, opt_state, x, y)


MODELS = {"nnx-split": nnx_split_step, "nnx-jit": nnx_jit_step, "eqx": eqx_step}


def warm_start_counts():
    """warm_start_stats() of a run under python -m fastdispatch --warm-start,
    else None; never imports fastdispatch into a stock run."""
    fastdispatch = sys.modules.get("fastdispatch")
    stats = fastdispatch.warm_start_stats() if fastdispatch is not None else None
    if stats is None:
        return None
    return {name: stats[name] for name in ("loaded", "missed", "written")} | {
        "not_stored": list(stats["not_stored"].values())
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--calls", type=int, default=200, help="steady-state calls timed (200)")
    parser.add_argument("--layers", type=int, default=6, help="transformer layers (6)")
    options = parser.parse_args(argv)

    step, args = MODELS[options.model](options.layers)
    jax.block_until_ready(args)
    start = time.perf_counter()
    args, loss = step(args)
    jax.block_until_ready(loss)
    first = time.perf_counter() - start

    start = time.perf_counter()
    for _ in range(options.calls):
        args, loss = step(args)
    jax.block_until_ready(loss)
    steady = (time.perf_counter() - start) / max(options.calls, 1)
    result = {
        "first_s": first,
        "steady_us": steady * 1e6,
        "loss": float(loss),
        "warm_start": warm_start_counts(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
