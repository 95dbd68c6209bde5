"""The program tests/e2e/test_warm_start.py runs twice (or more) over one
warm-start store.  Its first argument is a JSON dict of what this run changes
(see DEFAULTS); its second, the store.  It prints, on its last line, JSON:
each function's result and the result numpy computes (``expected``), and
``fastdispatch.warm_start_stats()``.  Each function prints ``TRACED name``
when jax traces it (its body runs only then): a print reaches nothing the
store's key reads, where a counter in a global dict would be part of the key.

Every change named in DEFAULTS changes exactly one function's identity or
call, or (x64, devices, jax_version) the whole environment.  ``checked``
turns on checked mode; ``opaque`` adds a tenth function, ``opaque``, closing
over an object the identity digest refuses.  ``events`` in the report counts
jax's traces, lowerings and compiles per function name."""

import functools
import json
import os
import sys

import jax

cfg = json.loads(sys.argv[1])
store = sys.argv[2]
DEFAULTS = dict(add=2.0, helper=1.0, w=[1.0, 2.0, 3.0], closure=3.0, n=2, scale=2.0)
for name, value in DEFAULTS.items():
    cfg.setdefault(name, value)
jax.config.update("jax_num_cpu_devices", cfg.get("devices", 1))
if cfg.get("x64"):
    jax.config.update("jax_enable_x64", True)
if cfg.get("readonly") and os.geteuid() == 0:
    # root writes through any mode bits: make the store read-only as a
    # read-only file system is, for this process.
    import errno
    import tempfile

    real_access = os.access

    def denied(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system")

    os.access = lambda path, mode, **kw: False if mode & os.W_OK else real_access(path, mode, **kw)
    tempfile.mkstemp = denied
    os.utime = denied

import helpers  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from configs import Config  # noqa: E402

import fastdispatch  # noqa: E402

if cfg.get("jax_version"):
    # What the store's key reads; set after the import, whose check of the
    # supported range would otherwise hand every call to jax.jit.
    jax.__version__ = cfg["jax_version"]

if not os.environ.get("FASTDISPATCH_WARM_START"):
    fastdispatch.warm_start(store, checked=cfg.get("checked", False))
if cfg.get("await_preload"):
    jax.devices()  # the program starts jax's backends: the preloader begins
    assert fastdispatch.warm.wait_for_preload(120)

EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "traces",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowerings",
    "/jax/core/compile/backend_compile_duration": "compiles",
}
events = {}  # function name -> {"traces": n, "lowerings": n, "compiles": n}


def count_event(event, duration, fun_name="", **kwargs):
    if event in EVENTS:
        name = fun_name.removeprefix("jit(").removesuffix(")")  # lowering's module name: jit(name)
        counts = events.setdefault(name, dict.fromkeys(EVENTS.values(), 0))
        counts[EVENTS[event]] += 1


jax.monitoring.register_event_duration_secs_listener(count_event)

GLOBAL_W = jnp.array(cfg["w"])
CONFIG = Config(scale=cfg["scale"], depth=3)


@fastdispatch.jit
def control(x):
    print("TRACED control")
    return {"y": x * x - 1, "z": (x.sum(),)}


@fastdispatch.jit
def body(x):
    print("TRACED body")
    return x + ADD  # noqa: F821  (written by the test: ADD = ...)


@fastdispatch.jit
def helper(x):
    print("TRACED helper")
    return helpers.h(x)


@fastdispatch.jit
def global_array(x):
    print("TRACED global_array")
    return x * GLOBAL_W


def make_closed(c):
    @fastdispatch.jit
    def closed(x):
        print("TRACED closed")
        return x * c

    return closed


closed = make_closed(cfg["closure"])


@functools.partial(fastdispatch.jit, static_argnums=1)
def static(x, n):
    print("TRACED static")
    return x**n


@fastdispatch.jit
def config(x):
    print("TRACED config")
    return x * CONFIG.scale + CONFIG.depth


@functools.partial(fastdispatch.jit, donate_argnums=0)
def donated(d, x):
    print("TRACED donated")
    return d + x


@fastdispatch.jit
def printing(x):
    print("TRACED printing")
    jax.debug.print("printing {s}", s=x.sum())
    return x * 2


class Scale:
    """An object the identity digest cannot describe: a user class with an
    __eq__ of its own."""

    def __init__(self, factor):
        self.factor = factor

    def __eq__(self, other):
        return isinstance(other, Scale) and self.factor == other.factor

    __hash__ = None


def make_opaque(scale):
    @fastdispatch.jit
    def opaque(x):
        print("TRACED opaque")
        return x * scale.factor

    return opaque


x = jnp.arange(3.0)
xn = np.arange(3.0)
d = jnp.ones(3)
results = {
    "control": jax.tree.map(lambda a: np.asarray(a).tolist(), control(x)),
    "body": body(x).tolist(),
    "helper": helper(x).tolist(),
    "global_array": global_array(x).tolist(),
    "closed": closed(x).tolist(),
    "static": static(x, cfg["n"]).tolist(),
    "config": config(x).tolist(),
    "donated": donated(d, x).tolist(),
    "printing": printing(x).tolist(),
}
if cfg.get("opaque"):
    results["opaque"] = make_opaque(Scale(cfg["closure"]))(x).tolist()
jax.effects_barrier()
# A second call of each: an ordinary cache entry now, loaded or compiled.
results["again"] = [body(x + 1).tolist(), static(x + 1, cfg["n"]).tolist()]
expected = {
    "control": {"y": (xn * xn - 1).tolist(), "z": [float(xn.sum())]},
    "body": (xn + cfg["add"]).tolist(),
    "helper": (xn * 2 + cfg["helper"]).tolist(),
    "global_array": (xn * np.array(cfg["w"])).tolist(),
    "closed": (xn * cfg["closure"]).tolist(),
    "static": (xn ** cfg["n"]).tolist(),
    "config": (xn * cfg["scale"] + 3).tolist(),
    "donated": (1 + xn).tolist(),
    "printing": (xn * 2).tolist(),
    "again": [(xn + 1 + cfg["add"]).tolist(), ((xn + 1) ** cfg["n"]).tolist()],
}
if cfg.get("opaque"):
    expected["opaque"] = (xn * cfg["closure"]).tolist()
from fastdispatch.warm import refill  # noqa: E402

refill.join(120)  # the store's compiles beside the program, counted
print(
    json.dumps(
        {
            "results": results,
            "expected": expected,
            "donated_deleted": d.is_deleted(),
            "stats": fastdispatch.warm_start_stats(),
            "events": events,
        }
    )
)
