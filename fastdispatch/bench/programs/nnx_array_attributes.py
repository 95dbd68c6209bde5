"""flax NNX: a Module holding raw jax arrays as attributes (no Variable), which
NNX treats as state; __call__ updates them (self.count += 1) under @nnx.jit."""

import argparse

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


class Model(nnx.Module):
    def __init__(self, din, dout, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(din, dout, rngs=rngs)
        # Raw arrays as attributes: NNX treats them as (non-Param) state.
        self.count = jnp.zeros((), jnp.int32)
        self.input_mean = jnp.zeros((din,))

    def __call__(self, x):
        self.count += 1
        self.input_mean = 0.99 * self.input_mean + 0.01 * x.mean(axis=0)
        return self.linear(x - self.input_mean)


@nnx.jit
def forward(model, x):
    return model(x)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return ((model.linear(x) - y) ** 2).mean()

    model(x)  # update the running statistics
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    w_true = rng.normal(size=(8, 2)).astype(np.float32)
    model = Model(8, 2, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(1e-2), wrt=nnx.Param)

    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        x = (rng.normal(size=(16, 8)) + 0.5).astype(np.float32)
        y = x @ w_true
        loss = train_step(model, optimizer, x, y)
        if step == 0 or (step + 1) % 100 == 0:
            out = forward(model, x)
            print(f"step {step + 1} loss {float(loss):.6f} out mean {float(out.mean()):.6f}")

    print(f"loss {float(loss):.6f}")
    print(f"count {int(model.count)}")
    print("input mean " + " ".join(f"{v:.4f}" for v in np.asarray(model.input_mean)))


if __name__ == "__main__":
    main()
