"""flax NNX with flax.training's TrainState, as flax's NNX toy examples write
it: the model split into a GraphDef, its parameters and a counter Variable,
kept in a TrainState held by a module-level global named ``state`` (beside a
global ``params``), trained by a @jax.jit step that merges the model inside
and evaluated by a @jax.jit step on the whole numpy dataset."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from flax.training import train_state

rng = np.random.default_rng(0)
X = np.linspace(-1.0, 1.0, 128, dtype=np.float32)[:, None]
Y = (np.sin(3.0 * X) + 0.05 * rng.normal(size=X.shape)).astype(np.float32)


class Calls(nnx.Variable):
    pass


class Dense(nnx.Module):
    def __init__(self, din: int, dout: int, *, rngs: nnx.Rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (din, dout)) / np.sqrt(din))
        self.bias = nnx.Param(jnp.zeros((dout,)))

    def __call__(self, x):
        return x @ self.kernel[...] + self.bias[...]


class Regressor(nnx.Module):
    def __init__(self, din, hidden, dout, *, rngs: nnx.Rngs):
        self.calls = Calls(jnp.array(0))
        self.hidden = Dense(din, hidden, rngs=rngs)
        self.out = Dense(hidden, dout, rngs=rngs)

    def __call__(self, x):
        self.calls[...] += 1
        return self.out(jax.nn.tanh(self.hidden(x)))


class TrainState(train_state.TrainState):
    graphdef: nnx.GraphDef
    calls: nnx.State


model = Regressor(1, 32, 1, rngs=nnx.Rngs(0))
graphdef, params, calls = nnx.split(model, nnx.Param, Calls)
state = TrainState.create(apply_fn=None, graphdef=graphdef, params=params, calls=calls, tx=optax.adam(1e-2))


@jax.jit
def train_step(state: TrainState, batch):
    x, y = batch

    def loss_fn(params):
        model = nnx.merge(state.graphdef, params, state.calls, copy=True)
        loss = jnp.mean((model(x) - y) ** 2)
        return loss, nnx.state(model, Calls)

    (loss, calls), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads, calls=calls)
    return state, loss


@jax.jit
def test_step(state: TrainState, batch):
    x, y = batch
    model = nnx.merge(state.graphdef, state.params, state.calls)
    return {"loss": jnp.mean((model(x) - y) ** 2)}


def batches(size):
    while True:
        index = rng.integers(0, len(X), size=size)
        yield X[index], Y[index]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    print(f"training {args.steps} steps")  # the benchmark times the first step from here
    for step, batch in zip(range(args.steps), batches(32)):
        state, loss = train_step(state, batch)
        if step == 0 or (step + 1) % 100 == 0:
            logs = test_step(state, (X, Y))
            print(f"step {step + 1} loss {float(loss):.6f} test loss {float(logs['loss']):.6f}")

    model = nnx.merge(state.graphdef, state.params, state.calls)
    print(f"calls {int(model.calls[...])}")
    print(f"step {int(state.step)}")
    print(f"kernel sum {float(model.hidden.kernel[...].sum()):.6f}")
