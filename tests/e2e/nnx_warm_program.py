"""The program tests/e2e/test_nnx_warm_start.py runs in fresh processes over
one warm-start store: flax NNX training code written with ``nnx.jit``, run
stock (``python prog.py``: flax's own jit, the reference) or under
``python -m fastdispatch --warm-start DIR`` (flax's nnx.jit is fastdispatch's);
with ``"direct"`` set, through ``fastdispatch.nnx.jit`` and
``fastdispatch.warm_start``.  Its first argument is a JSON dict of what this
run changes (see DEFAULTS); its second, the store.  It prints, on its last
line, JSON: each function's results (losses, outputs, final parameters, as
lists), and ``fastdispatch.warm_start_stats()`` when warm start is on.  Each
function prints ``TRACED name`` when jax traces it.

Each change in DEFAULTS changes exactly one function: ``add`` its source (the
test writes it), ``closure`` a closure cell, ``power`` and ``flag`` a static
attribute (an int, a Python flag) of a Module argument.  The Module classes
live in the test's modules.py: a class's module source is part of the key of
every call on it, so editing this file must not touch them."""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from modules import MLP, CountingMLP, Net, Scaled  # written by the test, beside this program

cfg = json.loads(sys.argv[1])
DEFAULTS = dict(add=2.0, closure=3.0, power=2, flag=True, direct=False)
for name, value in DEFAULTS.items():
    cfg.setdefault(name, value)
if cfg["direct"]:
    import fastdispatch
    from fastdispatch import nnx as fnnx

    fastdispatch.warm_start(sys.argv[2])
    jit = fnnx.jit
else:
    jit = nnx.jit  # fastdispatch's under python -m fastdispatch


def loss_and_update(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@jit
def train_step(model, optimizer, x, y):
    print("TRACED train_step")
    return loss_and_update(model, optimizer, x, y)


@jit
def cached_step(model, optimizer, x, y):
    print("TRACED cached_step")
    return loss_and_update(model, optimizer, x, y)


@jit
def forward(net, x):
    print("TRACED forward")
    return net(x)


@jit
def body(module, x):
    print("TRACED body")
    return module(x) + ADD  # noqa: F821  (written by the test: ADD = ...)


def make_closed(c):
    @jit
    def closed(module, x):
        print("TRACED closed")
        return module(x) * c

    return closed


closed = make_closed(cfg["closure"])


@jit
def scaled(module, x):
    print("TRACED scaled")
    return module(x)


class Settings:
    """An object of an arbitrary class: no other process can key it."""

    shift = 1.0


SETTINGS = Settings()


@jit
def shifted(module, x):
    print("TRACED shifted")
    return module(x) + SETTINGS.shift


@jit
def grows(module, x):
    print("TRACED grows")
    module.extra = nnx.Variable(x.sum())  # a new Variable: the graph changes
    return module(x)


def params(module):
    return [np.asarray(leaf).tolist() for leaf in jax.tree_util.tree_leaves(nnx.state(module, nnx.Param))]


x = jnp.ones((8, 4)) * jnp.arange(4.0)
y = jnp.ones((8, 2))
results = {}

model = CountingMLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
results["train_step"] = [float(train_step(model, optimizer, x, y)) for _ in range(4)]
results["train_step_params"] = params(model)
results["train_step_calls"] = int(model.calls)
results["train_step_opt_step"] = int(optimizer.step[...])

model2 = MLP(nnx.Rngs(1))
optimizer2 = nnx.Optimizer(model2, optax.adam(1e-2), wrt=nnx.Param)
step2 = nnx.cached_partial(cached_step, model2, optimizer2)
results["cached_step"] = [float(step2(x, y)) for _ in range(4)]
results["cached_step_params"] = params(model2)

net = Net(nnx.Rngs(2))
outs = []
for mode in ("train", "train", "eval", "eval", "train"):
    net.train() if mode == "train" else net.eval()
    outs.append(np.asarray(forward(net, x)).tolist())
results["forward"] = outs
results["forward_stats"] = np.asarray(net.bn.mean[...]).tolist()

small = nnx.Linear(4, 3, rngs=nnx.Rngs(3))
v = jnp.arange(3.0)
results["body"] = np.asarray(body(small, x)).tolist()
results["closed"] = np.asarray(closed(small, x)).tolist()
results["scaled"] = np.asarray(scaled(Scaled(cfg["power"], cfg["flag"]), v)).tolist()
results["shifted"] = np.asarray(shifted(small, x)).tolist()
grower = nnx.Linear(4, 3, rngs=nnx.Rngs(4))
results["grows"] = [np.asarray(grows(grower, x)).tolist() for _ in range(2)]
report = {"results": results}
try:
    import fastdispatch
    from fastdispatch.warm import refill

    refill.join(120)  # the store's compiles beside the program, counted
    report["stats"] = fastdispatch.warm_start_stats()
except ImportError:
    pass
print(json.dumps(report))
