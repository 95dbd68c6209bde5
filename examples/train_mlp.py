"""Train a small MLP on synthetic data with plain jax.

    python examples/train_mlp.py                          # jax.jit
    python -m fastdispatch --trace examples/train_mlp.py  # fastdispatch.jit, with a report

Nothing here knows about fastdispatch: ``python -m fastdispatch`` routes
``jax.jit`` through ``fastdispatch.jit``.  The data set does not divide into
whole batches, so the last batch of every epoch is smaller and ``train_step``
compiles a second time: the trace report says why (``x: f32[64,8] -> f32[40,8]``).
"""

import sys

import jax
import jax.numpy as jnp

SAMPLES = 1000  # 15 batches of 64, then one of 40
BATCH = 64
EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
LEARNING_RATE = 0.05
SIZES = [8, 64, 64, 1]


def make_data(key):
    """y = a smooth function of x, plus a little noise."""
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (SAMPLES, SIZES[0]))
    y = jnp.sin(x[:, :1] * 2.0) + 0.5 * x[:, 1:2] * x[:, 2:3]
    return x, y + 0.05 * jax.random.normal(kn, y.shape)


def init_params(key):
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        key, sub = jax.random.split(key)
        params[f"layer{i}"] = {
            "w": jax.random.normal(sub, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in),
            "b": jnp.zeros((fan_out,)),
        }
    return params


def predict(params, x):
    for i in range(len(SIZES) - 1):
        layer = params[f"layer{i}"]
        x = x @ layer["w"] + layer["b"]
        if i < len(SIZES) - 2:
            x = jax.nn.relu(x)
    return x


def loss_fn(params, x, y):
    return jnp.mean((predict(params, x) - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return params, loss


@jax.jit
def evaluate(params, x, y):
    return loss_fn(params, x, y)


def main():
    x, y = make_data(jax.random.key(0))
    params = init_params(jax.random.key(1))
    print(f"epoch  0  loss {float(evaluate(params, x, y)):.4f}")
    for epoch in range(1, EPOCHS + 1):
        for start in range(0, SAMPLES, BATCH):
            params, _ = train_step(params, x[start : start + BATCH], y[start : start + BATCH])
        if epoch % 5 == 0 or epoch == EPOCHS:
            print(f"epoch {epoch:2d}  loss {float(evaluate(params, x, y)):.4f}")


if __name__ == "__main__":
    main()
