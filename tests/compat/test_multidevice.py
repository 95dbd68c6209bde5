"""Shardings over 8 CPU devices, run in one subprocess per implementation.

jax fixes the CPU device count at backend start-up, so the checks run in a
fresh interpreter (subprocess_util); they are batched into one body to pay
jax's start-up once per implementation. Every check runs even when an earlier
one fails, and the failure lists them all.
"""

import jax
from subprocess_util import run_in_subprocess


def check_multidevice(impl):
    """All multi-device contract checks, against ``impl`` ("jax" or "fastdispatch")."""
    import re
    import traceback

    import jax.numpy as jnp
    import numpy as np
    from contract import TraceCounter, assert_same_tree
    from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
    from jax.sharding import PartitionSpec as P

    if impl == "jax":
        jit = jax.jit
    else:
        import fastdispatch

        jit = fastdispatch.jit

    def both(fun, *args, calls=2, **options):
        """jit(fun) and jax.jit(fun) with the same options, each called ``calls`` times
        on ``args``; outputs must be identical, and so must the trace counts."""
        ours, theirs = TraceCounter(), TraceCounter()
        f, g = jit(ours(fun), **options), jax.jit(theirs(fun), **options)
        for _ in range(calls):
            out = f(*args)
            assert_same_tree(out, g(*args))
        assert ours.n == theirs.n == 1, (ours.n, theirs.n)
        return out

    def raises(exc_type, pattern, call):
        try:
            call()
        except exc_type as e:
            assert re.search(pattern, str(e)), f"message differs: {e}"
        else:
            raise AssertionError(f"expected {exc_type.__name__} matching {pattern!r}")

    devices = jax.devices()
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    meshes = {
        # (make_mesh's default from jax 0.9; jax 0.8's default is Auto, with a warning)
        "explicit": jax.make_mesh((4, 2), ("a", "b"), axis_types=(jax.sharding.AxisType.Explicit,) * 2),
        "auto": Mesh(np.array(devices).reshape(4, 2), ("a", "b")),
    }
    checks = {}

    def check(name):
        def register(fn):
            checks[name] = fn
            return fn

        return register

    for mesh_name, mesh in meshes.items():
        rows, cols = NamedSharding(mesh, P("a", None)), NamedSharding(mesh, P(None, "b"))
        sharded = jax.device_put(x, NamedSharding(mesh, P("b", "a")))

        @check(f"{mesh_name}: in_shardings/out_shardings")
        def _(rows=rows, cols=cols):
            out = both(lambda v: v * 2, x, in_shardings=rows, out_shardings=cols)
            assert out.sharding == cols and out.committed
            out = both(lambda v, w: (v + w, v.sum()), x, jnp.ones((8, 4)), in_shardings=(rows, None))
            assert out[0].sharding.is_equivalent_to(rows, 2)

        @check(f"{mesh_name}: sharded input, no annotations")
        def _(sharded=sharded):
            out = both(lambda v: jnp.sin(v) + 1, sharded)
            assert out.sharding.is_equivalent_to(sharded.sharding, 2) and out.committed

        @check(f"{mesh_name}: pytree of sharded arrays, out_shardings tree")
        def _(mesh=mesh, rows=rows, cols=cols):
            params = {"w": jax.device_put(x, rows), "b": jax.device_put(x[0], NamedSharding(mesh, P("b")))}
            both(
                lambda p, s: jax.tree_util.tree_map(lambda a: a * s, p),
                params,
                0.5,
                out_shardings={"w": cols, "b": NamedSharding(mesh, P())},
            )

        @check(f"{mesh_name}: committed input contradicting in_shardings")
        def _(rows=rows, sharded=sharded):
            f = jit(lambda v: v * 2, in_shardings=rows)
            f(x)
            for call in (f, jax.jit(lambda v: v * 2, in_shardings=rows)):
                raises(
                    ValueError,
                    "Sharding passed to jit does not match the sharding on the respective arg",
                    lambda: call(sharded),
                )

        @check(f"{mesh_name}: donated sharded input")
        def _(rows=rows):
            f = jit(lambda v: v + 1, donate_argnums=0)
            for _ in range(2):
                donated = jax.device_put(x, rows)
                f(donated)
                assert donated.is_deleted()

    @check("PartitionSpecs under set_mesh; the mesh context keys the cache")
    def _():
        mesh = meshes["explicit"]
        with jax.set_mesh(mesh):
            f = jit(lambda v: v + 1, in_shardings=P("a"), out_shardings=P())
            out = f(np.ones(8, np.float32))
            assert out.sharding == NamedSharding(mesh, P())
            f(np.ones(8, np.float32))
        raises(
            RuntimeError,
            "jit requires a non-empty mesh in context if you are passing `PartitionSpec`s",
            lambda: f(np.ones(8, np.float32)),
        )

    @check("committed single-device inputs keep their device")
    def _():
        on3 = jax.device_put(jnp.ones(4), devices[3])
        out = both(lambda v: v * 3, on3)
        assert out.sharding == SingleDeviceSharding(devices[3]) and out.committed
        out = both(lambda v, w: v + w, on3, jnp.ones(4))  # uncommitted joins committed
        assert out.sharding == SingleDeviceSharding(devices[3])

    @check("committed inputs on different devices: jax's error")
    def _():
        def add(v, w):
            return v + w

        on1, on3 = (jax.device_put(jnp.ones(4), devices[d]) for d in (1, 3))
        f = jit(add)
        f(on3, on3)
        # The installed jax's own wording (it changed between jax minors).
        try:
            jax.jit(add)(on1, on3)
        except ValueError as error:
            message = str(error)
        assert message.startswith("Received incompatible devices for jitted computation."), message
        assert add.__qualname__ in message and "[1]" in message and "[3]" in message
        for _ in range(2):
            raises(ValueError, "^" + re.escape(message), lambda: f(on1, on3))

    @check("default_device context keys the cache")
    def _():
        ours, theirs = jit(lambda v: v + 1), jax.jit(lambda v: v + 1)
        uncommitted = jnp.ones(4)
        for d in (None, 2, 5, None, 2):
            if d is None:
                outs = (
                    ours(uncommitted),
                    theirs(uncommitted),
                    ours(np.ones(4, np.float32)),
                    theirs(np.ones(4, np.float32)),
                )
            else:
                with jax.default_device(devices[d]):
                    outs = (
                        ours(uncommitted),
                        theirs(uncommitted),
                        ours(np.ones(4, np.float32)),
                        theirs(np.ones(4, np.float32)),
                    )
            assert_same_tree(outs[0], outs[1])
            assert_same_tree(outs[2], outs[3])
            assert outs[0].sharding == SingleDeviceSharding(devices[d or 0]), (d, outs[0].sharding)

    @check("one function, alternating devices")
    def _():
        f = jit(lambda v, w: v + w)
        for d in (1, 3, 1, 3):
            v = jax.device_put(jnp.ones(4), devices[d])
            out = f(v, v)
            assert out.sharding == SingleDeviceSharding(devices[d]), (d, out.sharding)

    failures = []
    for name, fn in checks.items():
        try:
            fn()
        except Exception:  # noqa: BLE001 - collected and reported below
            failures.append(f"--- {name}\n{traceback.format_exc()}")
    assert not failures, f"{len(failures)} of {len(checks)} checks failed:\n" + "\n".join(failures)


def test_multidevice(jit):
    run_in_subprocess(check_multidevice, "jax" if jit is jax.jit else "fastdispatch", n_devices=8)
