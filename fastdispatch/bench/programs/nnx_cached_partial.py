"""flax NNX: an MLP trained with nnx.Optimizer, its train step wrapped in
nnx.cached_partial as flax's performance guide writes it; numpy batches."""

import argparse

import numpy as np
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, din, dmid, dout, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dmid, rngs=rngs)
        self.linear3 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.linear1(x))
        x = nnx.relu(self.linear2(x))
        return self.linear3(x)


@nnx.jit
def train_step(model, optimizer, metrics, x, y):
    def loss_fn(model):
        y_pred = model(x)
        return ((y_pred - y) ** 2).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    metrics.update(loss=loss)
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    w_true = rng.normal(size=(16, 1)).astype(np.float32)

    model = MLP(16, 64, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))

    train_step_cached = nnx.cached_partial(train_step, model, optimizer, metrics)

    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        x = rng.normal(size=(32, 16)).astype(np.float32)
        y = np.tanh(x @ w_true)
        loss = train_step_cached(x, y)
        if step == 0 or (step + 1) % 100 == 0:
            print(f"step {step + 1} mean loss {float(metrics.compute()['loss']):.6f}")
            metrics.reset()

    print(f"loss {float(loss):.6f}")
    print(f"optimizer step {int(optimizer.step[...])}")
    print(f"kernel sum {float(model.linear3.kernel[...].sum()):.6f}")


if __name__ == "__main__":
    main()
