"""flax Linen with flax.training.train_state.TrainState: a classifier trained
by a @jax.jit step on numpy float64 batches and int64 labels from a generator."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.training import train_state


class Classifier(nn.Module):
    features: int = 64
    classes: int = 4

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.classes)(x)


def batches(rng, w, batch_size):
    """An endless stream of (float64 inputs, int64 labels), as numpy gives them."""
    while True:
        x = rng.normal(size=(batch_size, w.shape[0]))
        y = np.argmax(x @ w, axis=-1).astype(np.int64)
        yield x, y


@jax.jit
def train_step(state, x, y):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    state = state.apply_gradients(grads=grads)
    return state, loss


@jax.jit
def eval_step(state, x, y):
    logits = state.apply_fn({"params": state.params}, x)
    return jnp.mean(jnp.argmax(logits, -1) == y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 4))
    model = Classifier()
    params = model.init(jax.random.key(0), jnp.ones((1, 8)))["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))

    # A fixed evaluation set on a grid.
    grid = np.linspace(-2.0, 2.0, 8 * 32).reshape(32, 8)
    x_test = np.sin(3.0 * grid) + grid
    y_test = np.argmax(x_test @ w, axis=-1).astype(np.int64)

    data = batches(rng, w, 64)
    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        x, y = next(data)
        state, loss = train_step(state, x, y)
        if step == 0 or (step + 1) % 100 == 0:
            accuracy = eval_step(state, x_test, y_test)
            print(f"step {step + 1} loss {float(loss):.6f} test accuracy {float(accuracy):.4f}")

    print(f"loss {float(loss):.6f}")
    print(f"step {int(state.step)}")
    print(f"test accuracy {float(eval_step(state, x_test, y_test)):.4f}")


if __name__ == "__main__":
    main()
