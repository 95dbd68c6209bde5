"""Shardings over 8 CPU devices, run in one subprocess per implementation.

jax fixes the CPU device count at backend start-up, so the checks run in a
fresh interpreter (subprocess_util); they are batched into one body to pay
jax's start-up once per implementation.
"""
import jax

from subprocess_util import run_in_subprocess


def check_multidevice(impl):
    """All multi-device contract checks, against ``impl`` ("jax" or "fastdispatch")."""
    import re

    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

    from contract import TraceCounter, assert_same_tree

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

    devices = jax.devices()
    explicit = jax.make_mesh((4, 2), ("a", "b"))
    auto = Mesh(np.array(devices).reshape(4, 2), ("a", "b"))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)

    for mesh in (explicit, auto):
        rows, cols = NamedSharding(mesh, P("a", None)), NamedSharding(mesh, P(None, "b"))
        # in_shardings / out_shardings with NamedShardings
        out = both(lambda v: v * 2, x, in_shardings=rows, out_shardings=cols)
        assert out.sharding == cols and out._committed
        out = both(lambda v, w: (v + w, v.sum()), x, jnp.ones((8, 4)), in_shardings=(rows, None))
        assert out[0].sharding.is_equivalent_to(rows, 2)
        # sharded inputs, no annotations: the output follows the input
        sharded = jax.device_put(x, NamedSharding(mesh, P("b", "a")))
        out = both(lambda v: jnp.sin(v) + 1, sharded)
        assert out.sharding.is_equivalent_to(sharded.sharding, 2) and out._committed
        # a pytree of sharded arrays and scalars, out_shardings as a tree
        params = {"w": jax.device_put(x, rows), "b": jax.device_put(x[0], NamedSharding(mesh, P("b")))}
        both(lambda p, s: jax.tree_util.tree_map(lambda a: a * s, p), params, 0.5,
             out_shardings={"w": cols, "b": NamedSharding(mesh, P())})
        # a committed input whose sharding contradicts in_shardings: jax's error
        f = jit(lambda v: v * 2, in_shardings=rows)
        f(x)
        for call in (f, jax.jit(lambda v: v * 2, in_shardings=rows)):
            try:
                call(sharded)
            except ValueError as e:
                assert "Sharding passed to jit does not match the sharding on the respective arg" in str(e), e
            else:
                raise AssertionError("expected the sharding mismatch error")
        # donation of a sharded input
        donated = jax.device_put(x, rows)
        jit(lambda v: v + 1, donate_argnums=0)(donated)
        assert donated.is_deleted()

    # PartitionSpecs need a mesh in context; the context is part of the cache key
    with jax.set_mesh(explicit):
        f = jit(lambda v: v + 1, in_shardings=P("a"), out_shardings=P())
        out = f(np.ones(8, np.float32))
        assert out.sharding == NamedSharding(explicit, P())
        f(np.ones(8, np.float32))
    try:
        f(np.ones(8, np.float32))
    except RuntimeError as e:
        assert "jit requires a non-empty mesh in context if you are passing `PartitionSpec`s" in str(e), e
    else:
        raise AssertionError("expected the missing-mesh error outside the mesh context")

    # committed single-device arrays: outputs stay on their device
    on3 = jax.device_put(jnp.ones(4), devices[3])
    out = both(lambda v: v * 3, on3)
    assert out.sharding == SingleDeviceSharding(devices[3]) and out._committed
    out = both(lambda v, w: v + w, on3, jnp.ones(4))  # uncommitted joins committed
    assert out.sharding == SingleDeviceSharding(devices[3])
    # committed arrays on different devices: jax's error
    on1 = jax.device_put(jnp.ones(4), devices[1])
    def add(v, w):
        return v + w

    f = jit(add)
    f(on3, on3)
    message = (
        "Received incompatible devices for jitted computation. Got argument v of "
        "check_multidevice.<locals>.add with shape float32[4] and with device ids [1] on platform "
        "CPU and argument w of check_multidevice.<locals>.add with shape float32[4] and with "
        "device ids [3] on platform CPU"
    )
    for _ in range(2):
        try:
            f(on1, on3)
        except ValueError as e:
            assert re.match(re.escape(message), str(e)), e
        else:
            raise AssertionError("expected the incompatible-devices error")
    # same function, the same shapes, alternating devices: each call on its own device
    for d in (1, 3, 1):
        v = jax.device_put(jnp.ones(4), devices[d])
        assert f(v, v).sharding == SingleDeviceSharding(devices[d])


def test_multidevice(jit):
    run_in_subprocess(check_multidevice, "jax" if jit is jax.jit else "fastdispatch", n_devices=8)
