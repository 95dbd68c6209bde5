"""With 8 CPU devices, sharded calls stay on fastdispatch's fast path."""

from subprocess_util import run_in_subprocess


def check_sharded_calls_are_fast():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import fastdispatch
    from fastdispatch import _dispatch

    class Sink:
        def __init__(self):
            self.fallbacks = []

        def record(self, fn, times, hit, compile_ns, fallback, signature):
            self.fallbacks.append(fallback)

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    rows = NamedSharding(mesh, P("data"))
    grid = NamedSharding(mesh, P("data", "model"))
    x = jax.device_put(jnp.arange(32.0).reshape(8, 4), rows)

    by_input = fastdispatch.jit(lambda a: a * 2)
    by_option = fastdispatch.jit(lambda a, b: a @ b.T, in_shardings=(rows, rows), out_shardings=grid)
    on_device = fastdispatch.jit(lambda a: a + 1)
    # A Python scalar goes on every device of its replicated sharding.
    scaled = fastdispatch.jit(lambda a, s: a * s)
    y = jax.device_put(jnp.ones(3), jax.devices()[5])

    sink = Sink()
    _dispatch.set_trace_sink(sink)
    try:
        for _ in range(3):
            doubled = by_input(x)
            product = by_option(x, x)
            moved = on_device(y)
            halved = scaled(x, 0.5)
    finally:
        _dispatch.set_trace_sink(None)
    assert sink.fallbacks == [None] * 12, sink.fallbacks
    assert doubled.sharding.is_equivalent_to(jax.jit(lambda a: a * 2)(x).sharding, 2)
    assert product.sharding == grid
    assert moved.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[5])
    assert moved.committed
    np.testing.assert_array_equal(product, np.asarray(x) @ np.asarray(x).T)
    assert [entry.is_fast for entry in by_option._cache_entries()] == [True]
    assert [entry.is_fast for entry in scaled._cache_entries()] == [True]
    expected = jax.jit(lambda a, s: a * s)(x, 0.5)
    assert halved.sharding == expected.sharding and halved.aval == expected.aval
    np.testing.assert_array_equal(halved, expected)


def test_sharded_calls_stay_on_the_fast_path():
    run_in_subprocess(check_sharded_calls_are_fast, n_devices=8)
