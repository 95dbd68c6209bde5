"""flax NNX: scan over layers.  The blocks are created stacked with nnx.vmap and
applied with nnx.scan, as flax's transforms guide writes it."""

import argparse

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

NUM_LAYERS = 4


class Block(nnx.Module):
    def __init__(self, dim, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
        self.norm = nnx.LayerNorm(dim, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return x + self.dropout(nnx.gelu(self.linear(self.norm(x))))


class Model(nnx.Module):
    def __init__(self, din, dim, dout, *, rngs: nnx.Rngs):
        self.embed = nnx.Linear(din, dim, rngs=rngs)

        @nnx.split_rngs(splits=NUM_LAYERS)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create_block(rngs: nnx.Rngs):
            return Block(dim, rngs=rngs)

        self.blocks = create_block(rngs)
        self.head = nnx.Linear(dim, dout, rngs=rngs)

    def __call__(self, x):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def forward(x, block):
            return block(x)

        x = forward(self.embed(x), self.blocks)
        return self.head(x)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def eval_step(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    model = Model(8, 32, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    x_test = rng.normal(size=(128, 8)).astype(np.float32)
    y_test = np.cos(x_test).sum(axis=1, keepdims=True)

    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        x = rng.normal(size=(32, 8)).astype(np.float32)
        y = np.cos(x).sum(axis=1, keepdims=True)
        model.train()
        loss = train_step(model, optimizer, x, y)
        if step == 0 or (step + 1) % 100 == 0:
            model.eval()
            test_loss = eval_step(model, x_test, y_test)
            print(f"step {step + 1} loss {float(loss):.6f} test loss {float(test_loss):.6f}")

    print(f"loss {float(loss):.6f}")
    print(f"stacked kernel shape {tuple(model.blocks.linear.kernel.shape)}")
    print(f"stacked kernel sum {float(model.blocks.linear.kernel[...].sum()):.6f}")


if __name__ == "__main__":
    main()
