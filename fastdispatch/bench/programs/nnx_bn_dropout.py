"""flax NNX: a model with BatchNorm and Dropout, switching between a train step
(model.train()) and an eval step (model.eval()) as flax's MNIST tutorial does."""

import argparse

import numpy as np
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, din, dmid, dout, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.bn = nnx.BatchNorm(dmid, rngs=rngs)
        self.dropout = nnx.Dropout(0.2, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.dropout(self.bn(self.linear1(x))))
        return self.linear2(x)


def loss_fn(model, x, y):
    logits = model(x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=y).mean()
    return loss, logits


@nnx.jit
def train_step(model, optimizer, metrics, x, y):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, x, y)
    metrics.update(loss=loss, logits=logits, labels=y)
    optimizer.update(model, grads)


@nnx.jit
def eval_step(model, metrics, x, y):
    loss, logits = loss_fn(model, x, y)
    metrics.update(loss=loss, logits=logits, labels=y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    eval_every = 50
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(10, 32)).astype(np.float32)

    def batch(n):
        y = rng.integers(0, 10, size=n)
        x = centers[y] + rng.normal(size=(n, 32)).astype(np.float32)
        return x, y.astype(np.int32)

    x_test, y_test = batch(256)

    model = MLP(32, 64, 10, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3, 0.9), wrt=nnx.Param)
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))

    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step in range(args.steps):
        x, y = batch(64)
        model.train()
        train_step(model, optimizer, metrics, x, y)
        if (step + 1) % eval_every == 0:
            train = {name: float(value) for name, value in metrics.compute().items()}
            metrics.reset()
            model.eval()
            for i in range(0, len(x_test), 64):
                eval_step(model, metrics, x_test[i : i + 64], y_test[i : i + 64])
            test = {name: float(value) for name, value in metrics.compute().items()}
            metrics.reset()
            print(
                f"step {step + 1} train loss {train['loss']:.6f} accuracy {train['accuracy']:.4f}"
                f" | test loss {test['loss']:.6f} accuracy {test['accuracy']:.4f}"
            )

    print(f"batch stats mean sum {float(model.bn.mean[...].sum()):.6f}")
    print(f"kernel sum {float(model.linear2.kernel[...].sum()):.6f}")


if __name__ == "__main__":
    main()
