"""flax NNX: the small GPT of nnx_minigpt.py on the same 2-device explicit
mesh, its donated train step and its token-by-token sampling each wrapped in
nnx.cached_partial as flax's performance guide writes it; the prompt is padded
to a fixed length and the sampled position is a Python int."""

import jax

jax.config.update("jax_num_cpu_devices", 2)

import argparse  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from nnx_minigpt import MAXLEN, VOCAB, MiniGPT, train_step  # noqa: E402


def generate_text(generate_step, max_tokens, start_tokens):
    generated = []
    for _ in range(max_tokens):
        tokens = (start_tokens + generated)[-MAXLEN:]
        padded_tokens = jnp.array(tokens + [0] * (MAXLEN - len(tokens)))[None, :]
        generated.append(int(generate_step(padded_tokens, len(tokens) - 1)))
    return generated


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    _ = jax.set_mesh(jax.make_mesh((2, 1), ("batch", "model")))
    model = MiniGPT(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))
    cached_train_step = nnx.cached_partial(train_step, model, optimizer, metrics)
    cached_generate_step = nnx.cached_partial(MiniGPT.generate_step, model)

    rng = np.random.default_rng(0)
    text = np.cumsum(rng.integers(1, 3, size=4096)) % VOCAB
    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        starts = rng.integers(0, len(text) - MAXLEN - 1, size=8)
        windows = np.stack([text[s : s + MAXLEN + 1] for s in starts]).astype(np.int32)
        cached_train_step(jax.device_put((windows[:, :-1], windows[:, 1:]), P("batch", None)))
        if (step + 1) % 25 == 0:
            print(f"step {step + 1} loss {float(metrics.compute()['loss']):.4f}")
            metrics.reset()
            print("sample", generate_text(cached_generate_step, 8, [int(t) for t in text[:3]]))

    print(f"kernel sum {float(model.output_layer.kernel[...].sum()):.4f}")


if __name__ == "__main__":
    main()
