"""The equinox group: equinox.filter_jit against fastdispatch.filter_jit.

Module workloads as equinox users write them: a forward pass, a training
step with ``filter_value_and_grad`` inside, a Module with non-array fields,
a 50-layer model, a donated training state.  The raw limit runs the very
executable equinox's jit compiled, on its dynamic arguments prepared once.
Note that equinox blocks every call until its result is ready; fastdispatch's
fast path dispatches asynchronously, as jax.jit does.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .executables import equinox_executable
from .raw import raw_runner
from .runner import FASTDISPATCH, Impl
from .workload import Workload

EQX = "eqx.filter_jit"


def implementations() -> list[Impl]:
    """equinox.filter_jit (the reference) and fastdispatch.filter_jit."""
    try:
        import equinox
    except ImportError:
        return [Impl(EQX, None, "not installed (pip install 'fastdispatch[equinox]')")]
    import fastdispatch

    return [
        Impl(EQX, lambda w: equinox.filter_jit(w.fun, **w.jit_options)),
        Impl(FASTDISPATCH, lambda w: fastdispatch.filter_jit(w.fun, **w.jit_options)),
    ]


def _raw(w: Workload):
    """The executable equinox compiled for w, through the bare PjRt call
    (donation dropped: the non-donated twin), each call on the model the
    last one returned where the loop feeds it back."""
    import equinox

    options = {k: v for k, v in w.jit_options.items() if k != "donate"}
    args, kwargs = w.make_args()
    compiled, dynamic = equinox_executable(equinox.filter_jit(w.fun, **options), *args, **kwargs)
    # Output 0 is equinox's marker; the model's leaves follow, then the loss.
    return raw_runner(compiled, dynamic, feed_back=w.feeds_back, first_fed=1), 1


def _mlp(seed=0, **kwargs):
    import equinox as eqx

    options = dict(in_size=8, out_size=1, width_size=32, depth=2)
    options.update(kwargs)
    return eqx.nn.MLP(**options, key=jax.random.key(seed))


# --- a tiny forward pass -----------------------------------------------------------


def forward(model, x):
    return model(x)


def _forward_args():
    return (_mlp(), jnp.ones(8)), {}


# --- a training step, outputs fed back ---------------------------------------------


def train_step(model, x, y):
    import equinox as eqx

    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    value, grads = eqx.filter_value_and_grad(loss)(model)
    return eqx.apply_updates(model, jax.tree.map(lambda g: -0.01 * g, grads)), value


def _train_args():
    return (_mlp(), jnp.ones((64, 8)), jnp.zeros((64, 1))), {}


def model_fed_back(fn, args, kwargs, n):
    model, *rest = args
    for _ in range(n):
        model, value = out = fn(model, *rest, **kwargs)
    return (model, *rest), out


# --- a Module with non-array fields ------------------------------------------------


@functools.cache
def _configured_class():
    # Made once: a new class per call would be a new treedef, and a compile.
    import equinox as eqx

    class Configured(eqx.Module):
        weight: jax.Array
        activation: object
        depth: int = eqx.field(static=True)
        name: str = eqx.field(static=True)

        def __call__(self, x):
            for _ in range(self.depth):
                x = self.activation(self.weight @ x)
            return x

    return Configured


def _configured_args():
    return (_configured_class()(jnp.eye(8) * 0.5, jax.nn.tanh, 3, "configured"), jnp.ones(8)), {}


# --- a 50-layer model -----------------------------------------------------------------

LAYERS = 50


def _deep_args():
    import equinox as eqx

    keys = jax.random.split(jax.random.key(1), LAYERS)
    layers = [eqx.nn.Linear(8, 8, key=key) for key in keys]
    return (eqx.nn.Sequential(layers), jnp.ones(8)), {}


WORKLOADS = [
    Workload("eqx_forward", "tiny MLP forward, one sample", forward, _forward_args, raw=_raw),
    Workload(
        "eqx_train_step",
        "MLP training step, model fed back",
        train_step,
        _train_args,
        loop=model_fed_back,
        feeds_back=True,
        raw=_raw,
        note="8-32-32-1 MLP, batch 64, filter_value_and_grad inside; raw fed the model it returned",
    ),
    Workload(
        "eqx_static_fields",
        "Module with non-array fields",
        forward,
        _configured_args,
        raw=_raw,
        note="an activation function, an int and a string among its fields",
    ),
    Workload("eqx_deep", f"{LAYERS}-layer model forward", forward, _deep_args, raw=_raw),
    Workload(
        "eqx_donated",
        "training step, state donated and fed back",
        train_step,
        _train_args,
        loop=model_fed_back,
        feeds_back=True,
        jit_options={"donate": "all"},
        raw=_raw,
        note="donate='all'; raw limit of the non-donated twin",
    ),
]
