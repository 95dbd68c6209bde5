"""flax NNX: the miniGPT of jax-ai-stack's "Train a miniGPT language model with
JAX" tutorial, as it runs on one TPU v5e (its Colab branch: a (1, 1) mesh):
Variables partitioned with nnx.with_partitioning, an @nnx.jit train step over
the model, an nnx.Optimizer and an nnx.MultiMetric, batches as grain's
DataLoader gives them (a list of maxlen numpy arrays of batch_size tokens,
stacked by jnp.array), targets made by an eager jax.vmap, and text sampled
token by token through @nnx.jit methods before and after training.

At the tutorial's size on a TPU (8 blocks, vocabulary 50257, batch 192);
smaller elsewhere (--size small), where the same code runs in seconds.  Its
one-dimensional Variables are partitioned P("model"): the tutorial's
P(None, "model") on them is an error in today's flax.  The
tokenizer is a word-level stand-in for tiktoken's GPT-2 (no network here), over
stories made from a fixed vocabulary: its Python work per story is the
tutorial's kind of host work."""

import argparse
from dataclasses import dataclass

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

SIZES = {
    # vocab, blocks, maxlen, embed, heads, feed-forward, batch
    "tutorial": (50257, 8, 256, 256, 8, 256, 192),
    "small": (512, 2, 32, 32, 2, 32, 8),
}
ENDOFTEXT = "<|endoftext|>"


class Tokenizer:
    """Words to ids and back, over a vocabulary of ``n_vocab`` ids whose last is
    ``<|endoftext|>`` (as GPT-2's is)."""

    def __init__(self, n_vocab, words):
        self.n_vocab = n_vocab
        self.words = [*words[: n_vocab - 1], ENDOFTEXT]
        self.words += [f"<{i}>" for i in range(len(self.words), n_vocab)]
        self.ids = {word: i for i, word in enumerate(self.words)}

    def encode(self, text):
        return [self.ids.get(word, 0) for word in text.replace(ENDOFTEXT, f" {ENDOFTEXT} ").split()]

    def decode(self, tokens):
        return " ".join(self.words[t] for t in tokens)


def make_stories(count, words, seed=0):
    """``count`` short stories of a few sentences each from ``words``."""
    rng = np.random.default_rng(seed)
    starts = ["Once upon a time", "One day", "There was a"]
    stories = []
    for _ in range(count):
        sentences = []
        for _ in range(int(rng.integers(3, 8))):
            middle = " ".join(words[i] for i in rng.integers(0, len(words), size=int(rng.integers(4, 12))))
            sentences.append(f"{starts[int(rng.integers(0, 3))]} {middle} .")
        stories.append(" ".join(sentences) + ENDOFTEXT)
    return stories


def causal_attention_mask(seq_len):
    return jnp.tril(jnp.ones((seq_len, seq_len)))


def partitioned(init, mesh, *spec):
    return nnx.with_partitioning(init, NamedSharding(mesh, P(*spec)))


class TransformerBlock(nnx.Module):
    def __init__(self, mesh, embed_dim, num_heads, ff_dim, *, rngs: nnx.Rngs, rate: float = 0.1):
        xavier = nnx.initializers.xavier_uniform()
        zeros, ones = nnx.initializers.zeros_init(), nnx.initializers.ones_init()
        self.mha = nnx.MultiHeadAttention(
            num_heads=num_heads,
            in_features=embed_dim,
            kernel_init=partitioned(xavier, mesh, None, "model"),
            bias_init=partitioned(zeros, mesh, "model"),
            rngs=rngs,
        )
        self.dropout1 = nnx.Dropout(rate=rate)
        self.layer_norm1 = nnx.LayerNorm(
            epsilon=1e-6,
            num_features=embed_dim,
            scale_init=partitioned(ones, mesh, "model"),
            bias_init=partitioned(zeros, mesh, "model"),
            rngs=rngs,
        )
        self.linear1 = nnx.Linear(
            in_features=embed_dim,
            out_features=ff_dim,
            kernel_init=partitioned(xavier, mesh, None, "model"),
            bias_init=partitioned(zeros, mesh, "model"),
            rngs=rngs,
        )
        self.linear2 = nnx.Linear(
            in_features=ff_dim,
            out_features=embed_dim,
            kernel_init=partitioned(xavier, mesh, None, "model"),
            bias_init=partitioned(zeros, mesh, "model"),
            rngs=rngs,
        )
        self.dropout2 = nnx.Dropout(rate=rate)
        self.layer_norm2 = nnx.LayerNorm(
            epsilon=1e-6,
            num_features=embed_dim,
            scale_init=partitioned(ones, mesh, "model"),
            bias_init=partitioned(zeros, mesh, "model"),
            rngs=rngs,
        )

    def __call__(self, inputs, training: bool = False):
        _, seq_len, _ = inputs.shape
        mask = causal_attention_mask(seq_len)
        attention_output = self.mha(inputs_q=inputs, mask=mask, decode=False)
        attention_output = self.dropout1(attention_output, deterministic=not training)
        out1 = self.layer_norm1(inputs + attention_output)
        ffn_output = nnx.relu(self.linear1(out1))
        ffn_output = self.linear2(ffn_output)
        ffn_output = self.dropout2(ffn_output, deterministic=not training)
        return self.layer_norm2(out1 + ffn_output)


class TokenAndPositionEmbedding(nnx.Module):
    def __init__(self, maxlen, vocab_size, embed_dim, *, rngs: nnx.Rngs):
        self.token_emb = nnx.Embed(num_embeddings=vocab_size, features=embed_dim, rngs=rngs)
        self.pos_emb = nnx.Embed(num_embeddings=maxlen, features=embed_dim, rngs=rngs)

    def __call__(self, x):
        positions = jnp.arange(0, x.shape[1])[None, :]
        return self.token_emb(x) + self.pos_emb(positions)


class MiniGPT(nnx.Module):
    def __init__(self, mesh, maxlen, vocab_size, embed_dim, num_heads, ff_dim, blocks, *, rngs):
        self.embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim, rngs=rngs)
        self.transformer_blocks = nnx.List(
            [TransformerBlock(mesh, embed_dim, num_heads, ff_dim, rngs=rngs) for _ in range(blocks)]
        )
        self.output_layer = nnx.Linear(
            in_features=embed_dim,
            out_features=vocab_size,
            kernel_init=partitioned(nnx.initializers.xavier_uniform(), mesh, None, "model"),
            bias_init=partitioned(nnx.initializers.zeros_init(), mesh, "model"),
            rngs=rngs,
        )

    def __call__(self, inputs, training: bool = False):
        x = self.embedding_layer(inputs)
        for transformer_block in self.transformer_blocks:
            x = transformer_block(x, training=training)
        return self.output_layer(x)

    @nnx.jit
    def sample_from(self, logits):
        logits, indices = jax.lax.top_k(logits, k=top_k)
        logits = nnx.softmax(logits)
        return jax.random.choice(jax.random.PRNGKey(0), indices, p=logits)

    @nnx.jit
    def generate_step(self, padded_tokens, sample_index):
        logits = self(padded_tokens)
        return self.sample_from(logits[0][sample_index])

    def generate_text(self, max_tokens, start_tokens):
        generated = []
        end = tokenizer.encode(ENDOFTEXT)[0]
        for _ in range(max_tokens):
            sample_index = len(start_tokens) + len(generated) - 1
            if sample_index + 1 >= maxlen:
                break
            padding = [0] * (maxlen - len(start_tokens) - len(generated))
            padded_tokens = jnp.array(start_tokens + generated + padding)[None, :]
            next_token = int(self.generate_step(padded_tokens, sample_index))
            if next_token == end:
                break
            generated.append(next_token)
        return tokenizer.decode(start_tokens + generated)


@dataclass
class TextDataset:
    data: list
    maxlen: int
    tokenizer: Tokenizer

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx: int):
        encoding = self.tokenizer.encode(self.data[idx])[: self.maxlen]
        return encoding + [0] * (self.maxlen - len(encoding))


def batches(dataset, batch_size):
    """What grain's DataLoader with ``pygrain.Batch(batch_size, drop_remainder=True)``
    yields for list elements: a list of ``maxlen`` numpy arrays of ``batch_size``."""
    for start in range(0, len(dataset) - batch_size + 1, batch_size):
        items = [dataset[i] for i in range(start, start + batch_size)]
        yield [np.asarray(column) for column in zip(*items)]


def loss_fn(model, batch):
    logits = model(batch[0])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch[1]).mean()
    return loss, logits


@nnx.jit
def train_step(model, optimizer, metrics, batch):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch[1])
    optimizer.update(model, grads)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--size", choices=sorted(SIZES), default=None, help="tutorial on a TPU, else small")
    parser.add_argument("--generate", type=int, default=None, help="tokens sampled before and after training")
    args = parser.parse_args()
    # The tutorial's hyperparameters and tokenizer are its notebook's globals.
    global tokenizer, maxlen, top_k
    size = args.size or ("tutorial" if jax.default_backend() == "tpu" else "small")
    top_k = 10
    vocab_size, blocks, maxlen, embed_dim, num_heads, ff_dim, batch_size = SIZES[size]
    max_tokens = maxlen if args.generate is None else args.generate

    mesh = Mesh(mesh_utils.create_device_mesh((1, 1)), ("batch", "model"))
    words = [f"w{i}" for i in range(min(vocab_size - 1, 4000))]
    tokenizer = Tokenizer(vocab_size, [*"Once upon a time One day There was .".split(), *words])
    dataset = TextDataset(make_stories(args.steps * batch_size, words), maxlen, tokenizer)

    model = MiniGPT(mesh, maxlen, vocab_size, embed_dim, num_heads, ff_dim, blocks, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))

    start_tokens = tokenizer.encode("Once upon a time")[:maxlen]
    print("Initial generated text:", model.generate_text(max_tokens, start_tokens)[:200])

    prep_target_batch = jax.vmap(lambda tokens: jnp.concatenate((tokens[1:], jnp.array([0]))))
    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step, batch in enumerate(batches(dataset, batch_size)):
        input_batch = jnp.array(jnp.array(batch).T)
        target_batch = prep_target_batch(input_batch)
        sharding = NamedSharding(mesh, P("batch", None))
        train_step(model, optimizer, metrics, jax.device_put((input_batch, target_batch), sharding))
        if step == 0 or (step + 1) % 50 == 0:
            loss = float(metrics.compute()["loss"])
            print(f"step {step + 1} loss {loss:.4f}")
            metrics.reset()
    print("Final generated text:", model.generate_text(max_tokens, start_tokens)[:200])


if __name__ == "__main__":
    main()
