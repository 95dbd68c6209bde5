"""The dispatch group: jax.jit against fastdispatch.jit (and equinox.filter_jit
on plain functions), on calls whose per-call overhead the benchmark times.

Array sizes are tiny on purpose: the point is dispatch, not compute.  A workload
with ``given`` functions (device_put) times those as they are, instead of
wrapping ``fun``.

The ``hand_off_*`` rows (and ``numpy_args``, ``step_counter``) time calls that
fastdispatch hands to jax.jit, one row per reason (docs/tracing.md, "Hand-offs"):
their ``hand_off`` names it, the report checks that fastdispatch.trace counts it,
and the summary holds each to at most 1 us above jax.jit instead of the ratio
targets.  The error rows' calls raise: each loop catches the error, and
fastdispatch must raise jax.jit's (type and message).  The ``trainstate_*`` rows
are flax's TrainState (linen) training step on numpy batches (skipped without
flax).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from .runner import FASTDISPATCH, RAW, Impl
from .workload import Workload, block_every_call, catching, same_args_then_barrier

JAX, EQUINOX = "jax.jit", "equinox"


def implementations() -> list[Impl]:
    """jax.jit (the reference), fastdispatch.jit, and equinox.filter_jit where
    equinox is installed (a plain function's filter_jit)."""
    impls = [Impl(JAX, lambda w: jax.jit(w.fun, **w.jit_options))]
    try:
        from fastdispatch import jit as fd_jit
    except Exception as e:  # the dispatcher may not be built yet
        impls.append(Impl(FASTDISPATCH, None, f"unavailable ({type(e).__name__}: {e})"))
    else:
        impls.append(Impl(FASTDISPATCH, lambda w: fd_jit(w.fun, **w.jit_options)))
    try:
        import equinox
    except ImportError:
        impls.append(Impl(EQUINOX, None, "not installed"))
    else:
        impls.append(Impl(EQUINOX, lambda w: equinox.filter_jit(w.fun)))
    return impls


def _vec(value, n=4):
    return jnp.full((n,), value, jnp.float32)


# --- two small arrays ---------------------------------------------------------


def add(x, y):
    return x + y


def _two_arrays():
    return (_vec(1.0), _vec(2.0)), {}


# --- one array through identity -----------------------------------------------


def identity(x):
    return x


# --- a Python float and an array ----------------------------------------------


def scale(x, s):
    return x * s


# --- 200 positional arrays ----------------------------------------------------


def total(*xs):
    return functools.reduce(operator.add, xs)


# --- param dicts: 50 layers of {w: (8, 8), b: (8,)} -----------------------------

LAYERS = 50


def make_params(value=0.5, layers=LAYERS):
    # Zero-padded names so that sorted key order is layer order.
    return {
        f"layer{i:02d}": {"w": jnp.full((8, 8), value, jnp.float32), "b": jnp.full((8,), value, jnp.float32)}
        for i in range(layers)
    }


def sgd(params, grads):
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)


def _sgd_args():
    return (make_params(0.5), make_params(0.1)), {}


def sgd_fed_back(fn, args, kwargs, n):
    params, grads = args
    for _ in range(n):
        params = fn(params, grads)
    return (params, grads), params


def mlp_loss(params, x, y):
    for layer in params.values():
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return jnp.mean((x - y) ** 2)


def adam_step(params, opt_state, batch, step, lr):
    """One Adam update; step is a Python int, lr a Python float."""
    b1, b2, eps = 0.9, 0.999, 1e-8
    grads = jax.grad(mlp_loss)(params, *batch)
    mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, opt_state["mu"], grads)
    nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, opt_state["nu"], grads)
    t = step + 1
    size = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
    params = jax.tree_util.tree_map(lambda p, m, v: p - size * m / (jnp.sqrt(v) + eps), params, mu, nu)
    return params, {"mu": mu, "nu": nu}


def _adam_args(layers=LAYERS):
    batch = (jnp.full((4, 8), 0.1, jnp.float32), jnp.zeros((4, 8), jnp.float32))
    opt_state = {"mu": make_params(0.0, layers), "nu": make_params(0.0, layers)}
    return (make_params(0.5, layers), opt_state, batch, 0, 1e-3), {}


SMALL_LAYERS = 2


def _small_adam_args():
    return _adam_args(SMALL_LAYERS)


def adam_fed_back(fn, args, kwargs, n):
    params, opt_state, batch, step, lr = args
    for _ in range(n):
        params, opt_state = out = fn(params, opt_state, batch, step, lr)
        step += 1
    return (params, opt_state, batch, step, lr), out


# --- a step counter: a Python int that changes every call -------------------------


def decay(x, step):
    return x * 0.99**step


def step_counter(fn, args, kwargs, n):
    """fn(x, step) with step += 1 every call (x: an array or a tree)."""
    x, step = args
    for _ in range(n):
        out = fn(x, step)
        step += 1
    return (x, step), out


# --- numpy arguments: new bytes every call, or the same ---------------------------


@functools.cache
def _numpy_pairs():
    return tuple((np.full(4, k, np.float32), np.full(4, 2.0 + k, np.float32)) for k in range(NUMPY_VARIANTS))


def new_numpy_pairs(fn, args, kwargs, n):
    """fn(x, y) on numpy arrays of other bytes than the last call's."""
    for x, y in itertools.islice(itertools.cycle(_numpy_pairs()), n):
        out = fn(x, y)
    return (x, y), out


# --- SGD on a new batch each step: numpy, or already on the device ---------------

BATCH_LAYERS = 10
NUMPY_BATCHES = 4


def sgd_batch_step(params, x, y):
    grads = jax.grad(mlp_loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)


@functools.cache
def _numpy_batches():
    rng = np.random.default_rng(0)
    return tuple(
        (rng.standard_normal((4, 8), np.float32), rng.standard_normal((4, 8), np.float32))
        for _ in range(NUMPY_BATCHES)
    )


# The same step on batches already on the device (a loader that prefetches to
# the device): each array put there apart, with objects of its own (aval,
# sharding) every step.
DEVICE_BATCHES = 16


@functools.cache
def _device_batches():
    return tuple(
        tuple(jax.device_put(a) for a in batch)
        for batch in itertools.islice(itertools.cycle(_numpy_batches()), DEVICE_BATCHES)
    )


def _batch_step(batches):
    """(make_args, loop) of sgd_batch_step over ``batches()`` in turn, params fed back."""

    def make_args():
        x, y = batches()[0]
        return (make_params(0.5, BATCH_LAYERS), x, y), {}

    def loop(fn, args, kwargs, n):
        params, x, y = args
        for x, y in itertools.islice(itertools.cycle(batches()), n):
            params = fn(params, x, y)
        return (params, x, y), params

    return make_args, loop


_numpy_batch_args, numpy_batches = _batch_step(_numpy_batches)
_device_batch_args, device_batches = _batch_step(_device_batches)


# --- effects: jax.debug.print, an ordered io_callback ----------------------------


def printed_step(x):
    jax.debug.print("x = {}", x)
    return x + 1


def _host_increment(x):
    return np.asarray(x + 1, np.float32)


def ordered_callback_step(x):
    y = io_callback(_host_increment, jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True)
    return y * 2


# --- keyword arguments with a static_argnames string ---------------------------


def combine(x, *, y, mode):
    return x + y if mode == "add" else x * y


def _kwargs_args():
    return (_vec(1.0),), {"y": _vec(2.0), "mode": "add"}


def combine_n(x, n, *, y, mode):
    return (x + y if mode == "add" else x * y) * n


def _kwargs_static_both_args():
    return (_vec(1.0), 3), {"y": _vec(2.0), "mode": "add"}


# --- device_put of a dict of 8 numpy arrays (not a jitted function) ---------------

PUT_ARRAYS = 8


def _device_put_args():
    return ({f"x{i}": np.full(64, i, np.float32) for i in range(PUT_ARRAYS)},), {}


def _device_put_functions():
    """jax.device_put and fastdispatch.device_put; raw: jaxlib's batched_device_put on each
    leaf, with its aval and sharding made once (the floor of any put that returns jax Arrays)."""
    from fastdispatch import _jax

    functions = {JAX: jax.device_put}
    try:
        from fastdispatch import device_put
    except ImportError:
        pass
    else:
        functions[FASTDISPATCH] = device_put
    (tree,), _ = _device_put_args()
    leaves = jax.tree_util.tree_leaves(tree)
    device = jax.devices()[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    aval = jax.typeof(leaves[0])
    functions[RAW] = lambda: [_jax.put_host(leaf, aval, sharding, (device,), False) for leaf in leaves]
    return functions


# --- hand-offs to jax.jit, one row per reason ---------------------------------------
# Few leaves beside each numpy or new scalar leaf: jax.jit converts them faster.

FEW_LAYERS = 2  # 4 arrays: under 12 per numpy leaf, under 16 per scalar


def forward(params, x):
    for layer in params.values():
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x


NUMPY_VARIANTS = 4  # the numpy rows' distinct values, in turn: new bytes every call


@functools.cache
def _numpy_xs():
    return tuple(np.full((4, 8), 0.1 * (k + 1), np.float32) for k in range(NUMPY_VARIANTS))


def _numpy_tree_args():
    return (make_params(0.5, FEW_LAYERS), _numpy_xs()[0]), {}


def new_numpy_x(fn, args, kwargs, n):
    """fn(params, x) with x a numpy array of other bytes than the last call's."""
    params, x = args
    for x in itertools.islice(itertools.cycle(_numpy_xs()), n):
        out = fn(params, x)
    return (params, x), out


def decay_params(params, step):
    return jax.tree_util.tree_map(lambda p: p * 0.99**step, params)


def _batched_args():
    return (jnp.ones((4, 4), jnp.float32), jnp.full((4, 4), 2.0, jnp.float32)), {}


def under_vmap(fn, args, kwargs, n):
    """Each call inside jax.vmap of a new lambda: the jitted function sees tracers."""
    for _ in range(n):
        out = jax.vmap(lambda x, y: fn(x, y))(*args)
    return args, out


def jit_disabled(fn, args, kwargs, n):
    """The n calls inside one `with jax.disable_jit():`."""
    with jax.disable_jit():
        for _ in range(n):
            out = fn(*args, **kwargs)
    return args, out


def tagged(x, tag):
    return x


def sized(x, sizes):
    return x * len(sizes)


# Enough arrays per scalar that fastdispatch converts a new value itself (16 or more):
# 2**40 does not fit the entry's int32, and jax.jit raises its OverflowError.
CONVERSION_LAYERS = 10
TOO_LARGE = 2**40


def _conversion_args():
    return (make_params(0.5, CONVERSION_LAYERS), 0), {}


def too_large_step(fn, args, kwargs, n):
    """Compiled (and checked) on step 0, then called with a step too large for int32."""
    params, _ = args
    return args, catching(fn, (params, TOO_LARGE), kwargs, n)[1]


_NO_EQX_ERROR = "filter_jit makes non-array arguments static: no error"
_HAND_OFF_NOTE = "fastdispatch hands every call to jax.jit"


def _hand_off_row(
    name: str, title: str, fun: Callable, make_args: Callable, reason: str, note: str, **options
):
    return Workload(
        name, title, fun, make_args, hand_off=reason, note=f"{reason!r}: {note}; {_HAND_OFF_NOTE}", **options
    )


HAND_OFFS = [
    _hand_off_row(
        "hand_off_numpy_tree",
        "numpy batch beside a 4-array param dict",
        forward,
        _numpy_tree_args,
        "numpy arguments",
        f"forward(params, x): 4 arrays and a numpy f32[4,8], {NUMPY_VARIANTS} values in turn; "
        "raw limit puts x on the device each call",
        loop=new_numpy_x,
    ),
    _hand_off_row(
        "hand_off_new_scalar_tree",
        "4-array param dict and a Python int step counter",
        decay_params,
        lambda: ((make_params(1.0, FEW_LAYERS), 0), {}),
        "new scalar value",
        "decay_params(params, step) with step += 1 every call; raw limit puts step on the device each call",
        loop=step_counter,
        new_scalars=(int,),
        skip={EQUINOX: "filter_jit makes step: int static: a compile every call"},
    ),
    _hand_off_row(
        "hand_off_tracer",
        "called inside jax.vmap",
        add,
        _batched_args,
        "tracer",
        "jax.vmap(lambda x, y: f(x, y))(xs, ys) on f32[4,4] each call: both pay vmap's trace; "
        "raw limit runs f on the batched arrays",
        loop=under_vmap,
    ),
    _hand_off_row(
        "hand_off_disable_jit",
        "two arrays under jax.disable_jit()",
        add,
        _two_arrays,
        "disable_jit",
        "the loop's n calls inside one `with jax.disable_jit():`, so jax runs f op by op",
        loop=jit_disabled,
    ),
    _hand_off_row(
        "hand_off_unsupported_leaf",
        "a str argument (raises)",
        tagged,
        lambda: ((_vec(1.0), "tag"), {}),
        "unsupported_leaf",
        "tagged(x, 'tag'): jax.jit's TypeError, caught every call",
        loop=catching,
        raises=True,
        skip={EQUINOX: _NO_EQX_ERROR},
    ),
    _hand_off_row(
        "hand_off_static_error",
        "an unhashable static argument (raises)",
        sized,
        lambda: ((_vec(1.0), [1, 2]), {}),
        "static_argument_error",
        "sized(x, [1, 2]) with static_argnums=1: jax.jit's ValueError, caught every call",
        loop=catching,
        raises=True,
        jit_options={"static_argnums": 1},
        skip={EQUINOX: _NO_EQX_ERROR},
    ),
    _hand_off_row(
        "hand_off_scalar_conversion",
        "a Python int too large for int32 (raises)",
        decay_params,
        _conversion_args,
        "scalar_conversion",
        f"decay_params(params, step) on {2 * CONVERSION_LAYERS} arrays, compiled for step 0, "
        f"then called with step 2**40: jax.jit's OverflowError, caught every call",
        loop=too_large_step,
        raises=True,
        skip={EQUINOX: "filter_jit makes step: int static: a compile every call, no error"},
    ),
]


# --- flax's TrainState (linen) on numpy batches -----------------------------------

CLASSES = 32
TRAINSTATE_BATCHES = 4


@functools.cache
def _trainstate_parts():
    """The linen MLP, its initial params and the optax transformation, made once:
    a new module or transformation is a new static field of the state, and a compile."""
    import flax.linen as nn
    import optax

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x.reshape(x.shape[0], -1).astype(jnp.float32)
            return nn.Dense(CLASSES)(jax.nn.relu(nn.Dense(32)(x)))

    model = MLP()
    params = model.init(jax.random.key(0), jnp.zeros((16, 32), jnp.float32))["params"]
    return model, params, optax.adam(1e-3)


def trainstate_step(state, x, y):
    import optax

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


@functools.cache
def _trainstate_batches(kind: str):
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(TRAINSTATE_BATCHES):
        if kind == "u8":
            x = rng.integers(0, 256, (16, 4, 8), dtype=np.uint8)
        else:
            x = rng.standard_normal((16, 32)).astype(np.float32 if kind == "f32" else np.float64)
        y = rng.integers(0, CLASSES, 16).astype(np.int32 if kind == "f32" else np.int64)
        batches.append((x, y))
    return tuple(batches)


def _trainstate_args(kind: str):
    from flax.training import train_state

    model, params, tx = _trainstate_parts()
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
    x, y = _trainstate_batches(kind)[0]
    return (state, x, y), {}


def trainstate_batches(kind: str):
    def loop(fn, args, kwargs, n):
        state, x, y = args
        for x, y in itertools.islice(itertools.cycle(_trainstate_batches(kind)), n):
            state, loss = out = fn(state, x, y)
        return (state, x, y), out

    loop.__name__ = f"trainstate_batches_{kind}"
    return loop


def _trainstate(kind: str, batch: str) -> Workload:
    return Workload(
        f"trainstate_np_{kind}",
        f"flax TrainState step, numpy {batch}",
        trainstate_step,
        functools.partial(_trainstate_args, kind),
        loop=trainstate_batches(kind),
        feeds_back=True,
        needs=("flax", "optax"),
        # ~14 arrays in the state beside 2 numpy leaves: jax.jit converts them faster.
        hand_off="numpy arguments",
        skip={EQUINOX: "filter_jit makes TrainState.create's step=0 static: its step stays an int"},
        note=f"train_step(state, x, y): linen Dense 32, relu, Dense {CLASSES}, TrainState.create(..., "
        f"tx=optax.adam(1e-3)), cross-entropy on integer labels, state fed back; x, y: numpy {batch}, "
        f"{TRAINSTATE_BATCHES} batches in turn; raw limit runs each call on the state the last one "
        "left, the batch put on the device each call",
    )


# --- flax NNX state in a TrainState, as flax's nnx toy example 03 holds it ---------


@functools.cache
def _nnx_trainstate_classes():
    """A TrainState whose fields hold an NNX module's split: its GraphDef (a
    static node: aux data compared on every call) and a State of the module's
    call counter; the counter's Variable type; the module."""
    from flax import nnx, struct
    from flax.training import train_state

    class NnxTrainState(train_state.TrainState):
        graphdef: object = struct.field(pytree_node=False)
        counts: nnx.State = None

    class Count(nnx.Variable):
        pass

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.calls = Count(jnp.array(0))
            self.hidden = nnx.Linear(1, 32, rngs=rngs)
            self.out = nnx.Linear(32, 1, rngs=rngs)

        def __call__(self, x):
            self.calls[...] += 1
            return self.out(jax.nn.relu(self.hidden(x)))

    return NnxTrainState, Count, MLP


def nnx_trainstate_step(state, x, y):
    from flax import nnx

    _, count, _ = _nnx_trainstate_classes()

    def loss_fn(params):
        model = nnx.merge(state.graphdef, params, state.counts, copy=True)
        loss = jnp.mean((model(x) - y) ** 2)
        return loss, nnx.state(model, count)

    grads, counts = jax.grad(loss_fn, has_aux=True)(state.params)
    return state.apply_gradients(grads=grads, counts=counts)


@functools.cache
def _nnx_trainstate_parts():
    """The model's split and the optax transformation, made once: a new
    GraphDef or transformation is a new static field of the state, and a compile."""
    import optax
    from flax import nnx

    _, count, mlp = _nnx_trainstate_classes()
    return (*nnx.split(mlp(nnx.Rngs(0)), nnx.Param, count), optax.sgd(0.1))


def _nnx_trainstate_args():
    train_state = _nnx_trainstate_classes()[0]
    graphdef, params, counts, tx = _nnx_trainstate_parts()
    state = train_state.create(apply_fn=None, graphdef=graphdef, params=params, counts=counts, tx=tx)
    x = jnp.linspace(0.0, 1.0, 32, dtype=jnp.float32)[:, None]
    return (state, x, 0.8 * x**2 + 0.1), {}


def state_fed_back(fn, args, kwargs, n):
    state, x, y = args
    for _ in range(n):
        state = out = fn(state, x, y)
    return (state, x, y), out


TRAINSTATE = [
    _trainstate("f32", "f32[16,32] + int32[16]"),
    _trainstate("f64", "f64[16,32] + int64[16]"),
    _trainstate("u8", "uint8[16,4,8] (cast inside) + int64[16]"),
    Workload(
        "trainstate_nnx",
        "TrainState holding an NNX split (GraphDef, params, counters)",
        nnx_trainstate_step,
        _nnx_trainstate_args,
        loop=state_fed_back,
        feeds_back=True,
        needs=("flax", "optax"),
        skip={EQUINOX: "filter_jit makes TrainState.create's step=0 static: its step stays an int"},
        note="flax's nnx toy example 03: nnx.split(model, nnx.Param, Count) in a TrainState "
        "(graphdef a static field), merged in the step, state fed back; x, y on the device",
    ),
]


# --- keyword arguments: two dense layers' weights and biases as lists ------------


def dense_layers(x, n, w, b, mode):
    for weight, bias in zip(w, b):
        x = jnp.tanh(x @ weight + bias)
    return x * n if mode == "train" else x


def _kwargs_dense_args():
    w = [jnp.full((8, 8), 0.1, jnp.float32), jnp.full((8, 8), 0.2, jnp.float32)]
    b = [jnp.zeros((8,), jnp.float32), jnp.full((8,), 0.5, jnp.float32)]
    return (jnp.ones((4, 8), jnp.float32), 2), {"w": w, "b": b, "mode": "train"}


def _effect_step(name: str, title: str, fun: Callable, note: str, **options) -> Workload:
    """A step with effects on one small array; each loop waits for them (jax.effects_barrier)."""
    return Workload(
        name,
        title,
        fun,
        lambda: ((_vec(1.0),), {}),
        loop=same_args_then_barrier,
        note=f"{note}; each loop ends with jax.effects_barrier()",
        **options,
    )


# --- a registered dataclass pytree ---------------------------------------------


@functools.partial(jax.tree_util.register_dataclass, data_fields=["position", "velocity"], meta_fields=["dt"])
@dataclasses.dataclass
class Particles:
    position: jax.Array
    velocity: jax.Array
    dt: float


def integrate(p):
    return Particles(p.position + p.dt * p.velocity, p.velocity, p.dt)


def _particles_args():
    return (Particles(_vec(0.0), _vec(1.0), 0.1),), {}


# --- a typed PRNG key fed back -------------------------------------------------


def sample(key):
    key, sub = jax.random.split(key)
    return key, jax.random.normal(sub, (4,))


def key_fed_back(fn, args, kwargs, n):
    (key,) = args
    for _ in range(n):
        key, x = out = fn(key)
    return (key,), out


# --- an array sharded over 8 CPU devices ----------------------------------------

SHARDED_DEVICES = 8


def _sharded_args():
    mesh = jax.make_mesh((SHARDED_DEVICES,), ("x",), devices=jax.devices()[:SHARDED_DEVICES])
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    x = jax.device_put(np.arange(8 * SHARDED_DEVICES, dtype=np.float32), sharding)
    return (x, x), {}


WORKLOADS = [
    Workload("two_arrays", "two arrays", add, _two_arrays),
    Workload("two_arrays_blocking", "two arrays, block every call", add, _two_arrays, loop=block_every_call),
    Workload("identity", "one array through identity", identity, lambda: ((_vec(1.0),), {})),
    Workload("float_and_array", "Python float and an array", scale, lambda: ((_vec(1.0), 2.5), {})),
    Workload(
        "numpy_args",
        "two numpy arrays",
        add,
        lambda: (_numpy_pairs()[0], {}),
        loop=new_numpy_pairs,
        hand_off="numpy arguments",
        note=f"'numpy arguments': on the CPU {_HAND_OFF_NOTE}; on an accelerator both go in one transfer "
        f"once the entry's packed variant is compiled (core/packing.pyx); {NUMPY_VARIANTS} pairs in turn; "
        "raw limit puts both on the device each call",
    ),
    Workload(
        "numpy_repeated",
        "two numpy arrays, the same bytes every call",
        add,
        lambda: (_numpy_pairs()[0], {}),
        note="fastdispatch reuses the device arrays of bytes that repeat: no transfer; jax.jit "
        "and the raw limit put both on the device each call",
    ),
    Workload(
        "positional_200", "200 positional arrays", total, lambda: (tuple(_vec(i) for i in range(200)), {})
    ),
    Workload("sgd_params", "SGD, 50-layer param dict", sgd, _sgd_args),
    Workload(
        "sgd_donated",
        "SGD, params donated and fed back",
        sgd,
        _sgd_args,
        loop=sgd_fed_back,
        feeds_back=True,
        jit_options={"donate_argnums": 0},
        skip={EQUINOX: "filter_jit can't donate only the first argument"},
        note="raw limit of the non-donated twin: donated buffers can't be reused",
    ),
    Workload(
        "adam_step",
        "Adam step, outputs fed back",
        adam_step,
        _adam_args,
        loop=adam_fed_back,
        feeds_back=True,
        skip={EQUINOX: "filter_jit makes step: int static: a compile every call"},
        new_scalars=(int,),
        note="adam_step(params, opt_state, batch, step: int, lr: float); "
        "raw limit runs each call on the last one's outputs, step put on the device each call",
    ),
    Workload(
        "adam_small",
        "Adam step, 2 layers, Python int step",
        adam_step,
        _small_adam_args,
        loop=adam_fed_back,
        feeds_back=True,
        skip={EQUINOX: "filter_jit makes step: int static: a compile every call"},
        new_scalars=(int,),
        note="the Adam step on a 2-layer param dict; raw limit runs each call on the last one's "
        "outputs, step put on the device each call",
    ),
    Workload(
        "step_counter",
        "array and a Python int step counter",
        decay,
        lambda: ((_vec(1.0), 0), {}),
        loop=step_counter,
        skip={EQUINOX: "filter_jit makes step: int static: a compile every call"},
        hand_off="new scalar value",
        new_scalars=(int,),
        note=f"'new scalar value': {_HAND_OFF_NOTE}; decay(x, step) with step += 1 every call; "
        "raw limit puts step on the device each call",
    ),
    Workload(
        "numpy_batch",
        "SGD step on a new numpy batch",
        sgd_batch_step,
        _numpy_batch_args,
        loop=numpy_batches,
        feeds_back=True,
        note=f"params: {BATCH_LAYERS}-layer dict fed back; x, y: numpy f32[4,8], "
        f"{NUMPY_BATCHES} batches in turn; raw limit puts the first batch on the device each call, "
        "params fed back",
    ),
    Workload(
        "device_batch",
        "SGD step on a new device batch",
        sgd_batch_step,
        _device_batch_args,
        loop=device_batches,
        feeds_back=True,
        note=f"params: {BATCH_LAYERS}-layer dict fed back; x, y: f32[4,8] put on the device "
        f"apart, {DEVICE_BATCHES} batches in turn; raw limit runs the first batch every call, "
        "params fed back",
    ),
    _effect_step("debug_print", "jax.debug.print step", printed_step, "stdout to os.devnull", quiet=True),
    _effect_step(
        "ordered_callback",
        "ordered io_callback step",
        ordered_callback_step,
        "io_callback(..., ordered=True)",
    ),
    Workload(
        "kwargs_static",
        "keyword args, static_argnames='mode'",
        combine,
        _kwargs_args,
        jit_options={"static_argnames": "mode"},
    ),
    Workload(
        "kwargs_static_both",
        "keyword args, static_argnums and static_argnames",
        combine_n,
        _kwargs_static_both_args,
        jit_options={"static_argnums": 1, "static_argnames": "mode"},
    ),
    Workload("dataclass", "registered dataclass pytree", integrate, _particles_args),
    Workload(
        "prng_key",
        "typed PRNG key fed back",
        sample,
        lambda: ((jax.random.key(0),), {}),
        loop=key_fed_back,
        feeds_back=True,
        note="raw limit runs each call on the last one's key",
    ),
    Workload(
        "sharded_8",
        f"array sharded over {SHARDED_DEVICES} CPU devices",
        add,
        _sharded_args,
        devices=SHARDED_DEVICES,
    ),
    Workload(
        "device_put_8",
        "device_put of 8 numpy arrays",
        jax.device_put,
        _device_put_args,
        given=_device_put_functions,
        skip={EQUINOX: "not a jitted function"},
        note="a dict of 8 numpy f32[64]; jax.jit column: jax.device_put; "
        "fastdispatch: fastdispatch.device_put; raw: batched_device_put per leaf",
    ),
    Workload(
        "two_arrays_traced",
        "two arrays, tracing on",
        add,
        _two_arrays,
        traced=True,
        skip={EQUINOX: "not traced"},
        note="fastdispatch runs under `with fastdispatch.trace():`; not in the summary",
    ),
    *HAND_OFFS,
    *TRAINSTATE,
    Workload(
        "kwargs_dense",
        "two dense layers' lists as keyword args",
        dense_layers,
        _kwargs_dense_args,
        jit_options={"static_argnums": (1,), "static_argnames": ("mode",)},
        note="f(x, 2, w=[w1, w2], b=[b1, b2], mode='train'), static_argnums=(1,), static_argnames=('mode',)",
    ),
]
