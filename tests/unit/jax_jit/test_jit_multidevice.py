"""With 8 CPU devices, sharded calls stay on fastdispatch's fast path."""

from subprocess_util import run_in_subprocess


def check_sharded_calls_are_fast():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import fastdispatch
    from fastdispatch.core import watch as _watch

    class Sink:
        def __init__(self):
            self.hand_offs = []

        def record(self, fn, times, hit, compile_ns, hand_off, signature):
            self.hand_offs.append(hand_off)

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
    _watch.set_trace_sink(sink)
    try:
        for _ in range(3):
            doubled = by_input(x)
            product = by_option(x, x)
            moved = on_device(y)
            halved = scaled(x, 0.5)
    finally:
        _watch.set_trace_sink(None)
    assert sink.hand_offs == [None] * 12, sink.hand_offs
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


def check_effects_and_host_data_on_several_devices():
    import threading

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import fastdispatch
    from fastdispatch import _jax

    # Unordered effects on a computation over 4 devices: one runtime token per device.
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    rows = NamedSharding(mesh, P("x"))
    x = jax.device_put(jnp.arange(8.0), rows)
    seen = []
    lock = threading.Lock()

    def record(v):
        with lock:
            seen.append(float(np.asarray(v).sum()))

    fun = lambda a: (jax.debug.callback(record, a.sum()), a * 2)[1]  # noqa: E731
    ours, theirs = fastdispatch.jit(fun), jax.jit(fun)
    for _ in range(3):
        got, want = ours(x), theirs(x)
        assert got.sharding == want.sharding
        np.testing.assert_array_equal(got, want)
    assert [entry.is_fast for entry in ours._cache_entries()] == [True]
    assert set(_jax.runtime_tokens().output_runtime_tokens) >= set(jax.devices()[:4])
    jax.effects_barrier()
    assert seen == [28.0] * 6, seen

    # A Python scalar and numpy arguments beside arrays committed to another device.
    params = [jax.device_put(jnp.ones(3) * i, jax.devices()[3]) for i in range(16)]
    wide = lambda ps, v: (sum(ps) * v, v)  # noqa: E731
    for value in [2.0, 3.0, np.ones(3, np.float32), np.arange(3.0, dtype=np.float32)]:
        got, want = fastdispatch.jit(wide)(params, value), jax.jit(wide)(params, value)
        for g, w in zip(got, want):
            assert g.sharding == w.sharding and g.committed == w.committed and g.aval == w.aval
            np.testing.assert_array_equal(g, w)

    # device_put to a given device and to another default device.
    tree = {"a": np.ones(3), "b": 1.5, "c": jnp.ones(2)}
    for device in [jax.devices()[2], None]:
        with jax.default_device(jax.devices()[6]):
            got = fastdispatch.device_put(tree, device)
            want = jax.device_put(tree, device)
        for key in tree:
            assert got[key].sharding == want[key].sharding and got[key].committed == want[key].committed
            assert got[key].aval == want[key].aval
            np.testing.assert_array_equal(got[key], want[key])


def test_effects_and_host_data_on_several_devices():
    run_in_subprocess(check_effects_and_host_data_on_several_devices, n_devices=8)


def check_a_typed_key_output_is_placed_as_jax_jit_places_it():
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import fastdispatch

    # As jax's pjit_test.py::test_partial_sharded_prng_key_inp: from its second
    # call, jax.jit gives the key's physical array the key's own sharding.
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("x", "y", "z"))
    seeds = jax.device_put(
        np.arange(32, dtype=np.uint32).reshape(8, 2, 2), NamedSharding(mesh, P("x", "y", None))
    )

    def make_keys(seeds):
        key = jax.vmap(jax.vmap(jax.vmap(lambda s: jax.random.key(s, impl="threefry2x32"))))
        return key(seeds).T

    results = {}
    for name, jit in (("jax", jax.jit), ("fd", fastdispatch.jit)):
        f = jit(lambda seeds: make_keys(seeds))  # a function of its own: jax's caches apart
        results[name] = [f(seeds) for _ in range(3)]
    for theirs, ours in zip(results["jax"], results["fd"]):
        assert ours.sharding == theirs.sharding == NamedSharding(mesh, P(None, "y", "x"))
        data = jax.random.key_data(ours)
        assert data.sharding == jax.random.key_data(theirs).sharding, (data.sharding, theirs)
        np.testing.assert_array_equal(data, jax.random.key_data(theirs))
    assert jax.random.key_data(results["fd"][-1]).sharding == NamedSharding(mesh, P(None, "y", "x"))


def test_a_typed_key_output_is_placed_as_jax_jit_places_it():
    run_in_subprocess(check_a_typed_key_output_is_placed_as_jax_jit_places_it, n_devices=8)


def check_a_custom_layout_is_keyed_as_jax_jit_keys_it():
    import jax
    import numpy as np
    from jax.experimental.layout import Format, Layout
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import fastdispatch

    # layout_test's test_cpp_layout_cache_miss: the same values, placed alike,
    # one of them laid out column-major on the devices.  Their avals and
    # shardings are the very same objects, so only the layout tells them apart.
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    grid = NamedSharding(mesh, P("x", "y"))
    values = np.arange(256.0, dtype=np.float32).reshape(16, 16)
    default = jax.device_put(values, grid)
    column_major = default.format.layout.major_to_minor[::-1]
    custom = jax.device_put(values, Format(Layout(major_to_minor=column_major), grid))
    assert custom.format != default.format

    gram = fastdispatch.jit(lambda x: x @ x.T)
    for _ in range(3):
        np.testing.assert_array_equal(gram(default), values @ values.T)
        np.testing.assert_array_equal(gram(custom), values @ values.T)
    assert len(gram._cache_entries()) == 2


def test_a_custom_layout_is_keyed_as_jax_jit_keys_it():
    run_in_subprocess(check_a_custom_layout_is_keyed_as_jax_jit_keys_it, n_devices=8)
