"""flax NNX: a small GPT as flax's miniGPT tutorial writes one, on a
('batch', 'model') mesh of 2 CPU devices set with jax.set_mesh (explicit axes):
Variables sharded through kernel_metadata, Dropout with its rng streams, a
donated @nnx.jit train step over the model, an nnx.Optimizer and an
nnx.MultiMetric, and, every few steps, text sampled token by token through an
@nnx.jit method (a fresh prompt each token, one longer each time, and a
Python int index; int() of each result), decoded to text by a global
tokenizer, a plain object, as the tutorial's tiktoken one."""

import jax

jax.config.update("jax_num_cpu_devices", 2)

import argparse  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MAXLEN, VOCAB, EMBED, HEADS, FF, BLOCKS = 16, 32, 32, 2, 64, 2


class Tokenizer:
    """Characters to token ids and back (the tutorial's is tiktoken's GPT-2)."""

    alphabet = "abcdefghijklmnopqrstuvwxyz .,!?'"

    def encode(self, text):
        return [self.alphabet.index(c) for c in text]

    def decode(self, tokens):
        return "".join(self.alphabet[t] for t in tokens)


tokenizer = Tokenizer()


def causal_attention_mask(seq_len):
    return jnp.tril(jnp.ones((seq_len, seq_len)))


class TransformerBlock(nnx.Module):
    def __init__(self, embed_dim, num_heads, ff_dim, *, rngs: nnx.Rngs, rate: float = 0.1):
        self.layer_norm1 = nnx.LayerNorm(embed_dim, rngs=rngs)
        self.mha = nnx.MultiHeadAttention(num_heads=num_heads, in_features=embed_dim, decode=False, rngs=rngs)
        self.dropout1 = nnx.Dropout(rate=rate, rngs=rngs)
        self.layer_norm2 = nnx.LayerNorm(embed_dim, rngs=rngs)
        self.linear1 = nnx.Linear(
            embed_dim, ff_dim, kernel_metadata={"out_sharding": P(None, "model")}, rngs=rngs
        )
        self.linear2 = nnx.Linear(
            ff_dim, embed_dim, kernel_metadata={"out_sharding": P("model", None)}, rngs=rngs
        )
        self.dropout2 = nnx.Dropout(rate=rate, rngs=rngs)

    def __call__(self, inputs):
        _, seq_len, _ = inputs.shape
        mask = causal_attention_mask(seq_len)
        attention = self.mha(inputs_q=self.layer_norm1(inputs), mask=mask)
        x = inputs + self.dropout1(attention)
        hidden = nnx.relu(self.linear1(self.layer_norm2(x)))
        ffn = self.linear2(hidden, out_sharding=jax.typeof(x).sharding)
        out = x + self.dropout2(ffn)
        return jax.sharding.reshard(out, jax.typeof(inputs).sharding)


class TokenAndPositionEmbedding(nnx.Module):
    def __init__(self, maxlen, vocab_size, embed_dim, *, rngs: nnx.Rngs):
        self.token_emb = nnx.Embed(vocab_size, embed_dim, rngs=rngs)
        self.pos_emb = nnx.Embed(maxlen, embed_dim, rngs=rngs)

    def __call__(self, x):
        positions = jnp.arange(0, x.shape[1])[None, :]
        sharding = P(*jax.typeof(x).sharding.spec, None)
        return self.token_emb(x, out_sharding=sharding) + self.pos_emb(positions)


class MiniGPT(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.embedding_layer = TokenAndPositionEmbedding(MAXLEN, VOCAB, EMBED, rngs=rngs)
        self.transformer_blocks = nnx.List(
            [TransformerBlock(EMBED, HEADS, FF, rngs=rngs) for _ in range(BLOCKS)]
        )
        self.output_layer = nnx.Linear(
            EMBED, VOCAB, kernel_metadata={"out_sharding": P(None, "model")}, rngs=rngs
        )

    def __call__(self, inputs):
        x = self.embedding_layer(inputs)
        for block in self.transformer_blocks:
            x = block(x)
        return self.output_layer(x, out_sharding=jax.typeof(x).sharding)

    @nnx.jit(donate_argnums=(1,))
    def generate_step(self, padded_tokens, sample_index):
        logits = self(padded_tokens)
        return jnp.argmax(logits[0, sample_index])

    def generate_text(self, max_tokens, start_tokens):
        # The prompt grows by one token per step (a new shape each, up to
        # MAXLEN): each length compiles once, in the first text sampled.
        generated = []
        for _ in range(max_tokens):
            tokens = (start_tokens + generated)[-MAXLEN:]
            sample_index = len(tokens) - 1
            next_token = int(self.generate_step(jnp.array(tokens)[None, :], sample_index))
            generated.append(next_token)
        return tokenizer.decode(start_tokens + generated)


def loss_fn(model, batch):
    logits = model(batch[0])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch[1]).mean()
    return loss, logits


@nnx.jit(donate_argnums=(0, 1, 3))
def train_step(model, optimizer, metrics, batch):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch[1])
    optimizer.update(model, grads)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    _ = jax.set_mesh(jax.make_mesh((2, 1), ("batch", "model")))
    model = MiniGPT(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))

    # A text of repeating patterns: each token follows from the one before.
    rng = np.random.default_rng(0)
    text = np.cumsum(rng.integers(1, 3, size=4096)) % VOCAB
    sample_every = 25
    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        starts = rng.integers(0, len(text) - MAXLEN - 1, size=8)
        windows = np.stack([text[s : s + MAXLEN + 1] for s in starts]).astype(np.int32)
        batch = jax.device_put((windows[:, :-1], windows[:, 1:]), P("batch", None))
        train_step(model, optimizer, metrics, batch)
        if step == 0:  # the first step's result, as flax's examples print at step 0
            print(f"step 1 loss {float(metrics.compute()['loss']):.4f}")
        if (step + 1) % sample_every == 0:
            print(f"step {step + 1} loss {float(metrics.compute()['loss']):.4f}")
            metrics.reset()
            print("sample", model.generate_text(5, [int(t) for t in text[:3]]))

    print("kernel sharding", model.output_layer.kernel[...].sharding.spec)
    print(f"kernel sum {float(model.output_layer.kernel[...].sum()):.4f}")


if __name__ == "__main__":
    main()
