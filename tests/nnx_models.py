"""The small flax NNX model the nnx unit tests call (imported after their
flax check: this module needs flax)."""

import jax.numpy as jnp
from flax import nnx


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(3, 3, rngs=rngs)
        self.norm = nnx.BatchNorm(3, rngs=rngs)
        self.scale = jnp.float32(2)  # an array attribute

    def __call__(self, x):
        return self.norm(self.linear(x)) * self.scale


def forward(model, x):
    return model(x)


X = jnp.linspace(0, 1, 12).reshape(4, 3)
