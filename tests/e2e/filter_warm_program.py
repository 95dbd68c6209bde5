"""The program tests/e2e/test_filter_warm_start.py runs twice (or more) over
one warm-start store: fastdispatch.filter_jit functions, as equinox users
write them.  Its first argument is a JSON dict of what this run changes (see
DEFAULTS); its second, the store.  It prints, on its last line, JSON: each
function's result, the result numpy computes (``expected``) where numpy can,
and ``fastdispatch.warm_start_stats()``.  Each function prints ``TRACED name``
when jax traces it.

Every change named in DEFAULTS changes exactly one function's identity or
call: ``add`` its source (the test writes it), ``closure`` a closure cell,
``power`` a static field of a Module argument (a class of the test's
modules.py: a class's module source is part of its key, so editing this file
must not touch it)."""

import json
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from modules import Scaled  # written by the test, beside this program

import fastdispatch
from fastdispatch.warm import refill

cfg = json.loads(sys.argv[1])
DEFAULTS = dict(add=2.0, closure=3.0, power=2)
for name, value in DEFAULTS.items():
    cfg.setdefault(name, value)
fastdispatch.warm_start(sys.argv[2])

model = eqx.nn.MLP(4, 2, 16, 2, key=jax.random.PRNGKey(0))
optimizer = optax.adam(1e-2)


@fastdispatch.filter_jit(donate="all")
def train_step(model, opt_state, x, y):
    print("TRACED train_step")

    def loss_fn(model):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


@fastdispatch.filter_jit
def forward(model, x):
    print("TRACED forward")
    return jax.vmap(model)(x), model.depth, "depth"


@fastdispatch.filter_jit
def scaled(module, x):
    print("TRACED scaled")
    return module(x)


@fastdispatch.filter_jit
def body(x):
    print("TRACED body")
    return x + ADD  # noqa: F821  (written by the test: ADD = ...)


def make_closed(c):
    @fastdispatch.filter_jit
    def closed(x):
        print("TRACED closed")
        return x * c

    return closed


closed = make_closed(cfg["closure"])


class Tag:
    """An object the trace makes: no other process can rebuild it."""


@fastdispatch.filter_jit
def tagged(x):
    print("TRACED tagged")
    return x * 2, Tag()


x = jnp.ones((8, 4)) * jnp.arange(4.0)
y = jnp.zeros((8, 2))
xn = np.ones(3) * np.arange(3.0)
v = jnp.asarray(xn)
opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
first_weight = model.layers[0].weight
forward_out, depth, label = forward(model, x)
losses = []
for _ in range(3):
    model, opt_state, loss = train_step(model, opt_state, x, y)
    losses.append(float(loss))
doubled, tag = tagged(v)
_, tag_again = tagged(v)
results = {
    "forward": np.asarray(forward_out).tolist(),
    "forward_static": [depth, label],
    "losses": losses,
    "weight": np.asarray(model.layers[0].weight).tolist(),
    "scaled": scaled(Scaled(v, cfg["power"]), v).tolist(),
    "body": body(v).tolist(),
    "closed": closed(v).tolist(),
    "tagged": doubled.tolist(),
}
expected = {
    "scaled": (xn * xn ** cfg["power"]).tolist(),
    "body": (xn + cfg["add"]).tolist(),
    "closed": (xn * cfg["closure"]).tolist(),
    "tagged": (xn * 2).tolist(),
}
refill.join(120)  # the store's compiles beside the program, counted
print(
    json.dumps(
        {
            "results": results,
            "expected": expected,
            "donated_deleted": first_weight.is_deleted(),
            "train_step_entries": train_step._cached._cache_size(),
            "tag_is_the_traced_one": isinstance(tag, Tag) and tag is tag_again,
            "stats": fastdispatch.warm_start_stats(),
        }
    )
)
