"""equinox: a small causal transformer written as equinox's documentation
writes models, trained with optax under @eqx.filter_jit, then sampled token by
token through a filter_jit step (a fresh prompt each token, one longer each
time, a Python int index and a new PRNG key; int() of each result)."""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

MAXLEN, VOCAB, EMBED, HEADS = 12, 32, 32, 2


class Block(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    norm2: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.norm1 = eqx.nn.LayerNorm(EMBED)
        self.attention = eqx.nn.MultiheadAttention(HEADS, EMBED, key=k1)
        self.norm2 = eqx.nn.LayerNorm(EMBED)
        self.mlp = eqx.nn.MLP(EMBED, EMBED, 2 * EMBED, depth=1, key=k2)

    def __call__(self, x):
        n = x.shape[0]
        mask = jnp.tril(jnp.ones((n, n), dtype=bool))
        y = jax.vmap(self.norm1)(x)
        x = x + self.attention(y, y, y, mask=mask)
        return x + jax.vmap(self.mlp)(jax.vmap(self.norm2)(x))


class TinyGPT(eqx.Module):
    token_embedding: eqx.nn.Embedding
    position_embedding: eqx.nn.Embedding
    blocks: list
    head: eqx.nn.Linear

    def __init__(self, key):
        keys = jax.random.split(key, 5)
        self.token_embedding = eqx.nn.Embedding(VOCAB, EMBED, key=keys[0])
        self.position_embedding = eqx.nn.Embedding(MAXLEN, EMBED, key=keys[1])
        self.blocks = [Block(k) for k in keys[2:4]]
        self.head = eqx.nn.Linear(EMBED, VOCAB, key=keys[4])

    def __call__(self, tokens):
        x = jax.vmap(self.token_embedding)(tokens)
        x = x + jax.vmap(self.position_embedding)(jnp.arange(tokens.shape[0]))
        for block in self.blocks:
            x = block(x)
        return jax.vmap(self.head)(x)


def loss(model, inputs, targets):
    logits = jax.vmap(model)(inputs)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


@eqx.filter_jit
def generate_step(model, tokens, index, key):
    logits = model(tokens)[index]
    return jax.random.categorical(key, logits / 0.5)


def generate(model, start, count, key):
    tokens = list(start)
    for _ in range(count):
        key, subkey = jax.random.split(key)
        prompt = tokens[-MAXLEN:]
        tokens.append(int(generate_step(model, jnp.array(prompt), len(prompt) - 1, subkey)))
    return tokens[len(start) :]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    model = TinyGPT(jax.random.PRNGKey(0))
    optim = optax.adam(1e-2)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def make_step(model, opt_state, inputs, targets):
        value, grads = eqx.filter_value_and_grad(loss)(model, inputs, targets)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, value

    rng = np.random.default_rng(0)
    text = np.cumsum(rng.integers(1, 3, size=4096)) % VOCAB
    key = jax.random.PRNGKey(1)
    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        starts = rng.integers(0, len(text) - MAXLEN - 1, size=8)
        windows = jnp.asarray(np.stack([text[s : s + MAXLEN + 1] for s in starts]).astype(np.int32))
        model, opt_state, value = make_step(model, opt_state, windows[:, :-1], windows[:, 1:])
        if (step + 1) % 50 == 0:
            key, subkey = jax.random.split(key)
            print(f"step {step + 1} loss {float(value):.4f}")
            print("sample", generate(model, [int(t) for t in text[:3]], 6, subkey))


if __name__ == "__main__":
    main()
