"""fastdispatch._jax: every private jax name it relies on, checked loudly.

When jax changes one of these, this file fails first and names it; widen the
jax range in pyproject.toml only once it passes.
"""

import dataclasses
import functools
import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.layout import Layout
from subprocess_util import run_in_subprocess

from fastdispatch import _jax
from fastdispatch._reasons import MustHandOff


def compiled_for(fun, *args, **kwargs):
    return jax.jit(fun).lower(*args, **kwargs).compile()


def test_supported_jax_version():
    major, minor = (int(part) for part in jax.__version__.split(".")[:2])
    low, high = _jax.SUPPORTED_JAX
    assert low <= (major, minor) < high, (
        f"fastdispatch supports jax{_jax.SUPPORTED_TEXT}, found {jax.__version__}"
    )
    # Every private name resolved: nothing handed off.
    assert _jax.MISSING == () and _jax.UNSUPPORTED is None


def test_supported_range_is_pyprojects():
    tomllib = pytest.importorskip("tomllib")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    assert f"jax{_jax.SUPPORTED_TEXT}" in dependencies and f"jaxlib{_jax.SUPPORTED_TEXT}" in dependencies
    (low_major, low_minor), (high_major, high_minor) = _jax.SUPPORTED_JAX
    assert _jax.SUPPORTED_TEXT == f">={low_major}.{low_minor},<{high_major}.{high_minor}"


def test_need_records_what_this_jax_lacks(monkeypatch):
    monkeypatch.setattr(_jax, "_absent", [])
    assert _jax._need("jax._src.core", "ShapedArray") is jax.core.ShapedArray
    assert _jax._need("jax._src.lib._jax", "batched_device_put") is _jax.batched_device_put  # jaxlib's
    assert _jax._need("jax._src.core", "no_such_name") is None
    assert _jax._need("jax._src.no_such_module") is None
    assert _jax._absent == ["jax._src.core.no_such_name", "jax._src.no_such_module"]
    assert _jax._has("jax._src.core", "ShapedArray") and not _jax._has("jax._src.core", "nope")


def test_array_types_and_attributes():
    x = jnp.ones(3)
    assert type(x) is _jax.ARRAY_TYPE
    assert getattr(x, _jax.SHARDING_ATTR) == x.sharding
    assert getattr(x, _jax.COMMITTED_ATTR) is False
    committed = jax.device_put(x, jax.devices()[0])
    assert getattr(committed, _jax.COMMITTED_ATTR) is True
    # The device layout, as jax's own .format reads it; equal layouts compare equal.
    grid = jax.device_put(jnp.ones((2, 3)), jax.devices()[0])
    assert Layout.from_pjrt_layout(getattr(grid, _jax.LAYOUT_ATTR)) == grid.format.layout
    assert getattr(grid, _jax.LAYOUT_ATTR) == getattr(jnp.zeros((2, 3)), _jax.LAYOUT_ATTR)
    key = jax.random.key(0)
    assert type(key) is _jax.KEY_ARRAY_TYPE
    buffer = getattr(key, _jax.KEY_BUFFER_ATTR)  # what the executable takes
    assert type(buffer) is _jax.ARRAY_TYPE and buffer.dtype == np.uint32


def test_jax_jit_is_jax_own_even_when_patched(monkeypatch):
    original = jax.jit
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("patched jit called"))
    assert _jax.jax_jit is original
    assert _jax.jax_jit(lambda x: x + 1)(1) == 2


def test_trace_context_and_state():
    names = _jax.trace_context_names()
    context = _jax.trace_context()
    assert len(names) == len(context) and "jax_enable_x64" in names
    assert "jax_disable_jit" in names and "jax_no_execution" in names
    with jax.disable_jit():
        assert _jax.trace_context() != context
        assert _jax.settings_hand_off() == "disable_jit"
    clean = lambda: getattr(_jax.TRACE_STATE, _jax.TRACE_STATE_ATTR) is _jax.CLEAN_TRACE_STATE
    assert clean()
    assert _jax.trace_state_is_clean() and _jax.settings_hand_off() is None
    seen = []

    def inside(x):
        seen.append((clean(), _jax.settings_hand_off()))
        return x

    jax.make_jaxpr(inside)(1.0)
    assert seen == [(False, "tracer")]
    with jax.no_tracing():
        assert _jax.settings_hand_off() == "no_tracing"
    with jax.no_execution():
        assert _jax.settings_hand_off() == "no_execution"


def test_pytree_registry_grows_with_registrations():
    registry = _jax.pytree_registry()
    assert tuple in registry and dict in registry

    class Point:
        pass

    jax.tree_util.register_pytree_node(Point, lambda p: ((), None), lambda _, c: Point())
    assert Point in _jax.pytree_registry()
    to_iter, from_iter = registry[Point]
    assert to_iter(Point()) == ((), None)


def test_resolved_arguments_match_argnames():
    def f(a, b, *, c):
        return a

    jitted = jax.jit(f, static_argnums=1, donate_argnames="a")
    resolved = _jax.resolved_arguments(jitted)
    assert resolved.static_argnums == (1,) and resolved.static_argnames == ("b",)
    assert resolved.donate_argnums == (0,) and resolved.donate_argnames == ("a",)


def test_executable_parts_run_the_executable():
    x, y = jnp.arange(3.0), jnp.ones(3)
    compiled = compiled_for(lambda a, b, c: {"sum": a + b * c}, x, y, 2.0)
    parts = _jax.executable_parts(compiled)
    assert isinstance(parts, _jax.ExecutableParts)
    assert parts.kept == (0, 1, 2) and len(parts.in_shardings) == len(parts.in_avals) == 3
    scalar_aval = parts.in_avals[2]
    assert scalar_aval.weak_type and scalar_aval.dtype == np.float32
    devices = _jax.scalar_devices(parts.in_shardings[2])
    assert devices == tuple(parts.in_shardings[2].device_set)
    two = _jax.put_host(2.0, scalar_aval, parts.in_shardings[2], devices, False)
    assert two.aval == scalar_aval and not two.committed
    outputs = _jax.consume_with_handlers(parts.execute([x, y, two]), parts.out_handlers)
    result = parts.out_treedef.unflatten(outputs)
    np.testing.assert_array_equal(result["sum"], np.array([2.0, 3.0, 4.0]))


def test_executable_parts_make_a_typed_key_output_as_jax_jit_s_fast_path():
    # The executable's output avals and shardings, and whether its outputs are
    # committed, are read for a key output (its handler is remade).
    key = jax.random.key(0)
    compiled = compiled_for(lambda k: jax.random.split(k, 4), key)
    executable = compiled._executable
    call = executable.unsafe_call
    assert len(call.out_handler.out_avals) == len(call.out_handler.out_shardings) == 1
    assert isinstance(executable._unloaded_executable.committed, bool)
    parts = _jax.executable_parts(compiled)
    (keys,) = _jax.consume_with_handlers(parts.execute([jax.random.key_data(key)]), parts.out_handlers)
    expected = jax.jit(lambda k: jax.random.split(k, 4))(key)
    assert keys.dtype == expected.dtype and keys.sharding == expected.sharding
    np.testing.assert_array_equal(jax.random.key_data(keys), jax.random.key_data(expected))


def test_compiled_memory_bytes_counts_arguments_and_outputs():
    small = _jax.executable_parts(compiled_for(lambda a: a * 2, jnp.ones(4)))
    large = _jax.executable_parts(compiled_for(lambda a: a * 2, jnp.ones(4096)))
    assert 0 < _jax.compiled_memory_bytes(small.execute) < _jax.compiled_memory_bytes(large.execute)
    assert _jax.compiled_memory_bytes(len) is None


def test_executable_parts_prune_unused_arguments():
    x = jnp.ones(2)
    compiled = compiled_for(lambda a, b: a * 2, x, x)
    assert _jax.executable_parts(compiled).kept == (0,)


def test_executable_parts_describe_effects():
    x = jnp.ones(2)
    plain = _jax.executable_parts(compiled_for(lambda x: x + 1, x))
    assert plain.ordered_effects == () and not plain.with_tokens
    assert plain.devices == (jax.devices()[0],)
    printed = _jax.executable_parts(compiled_for(lambda x: jax.debug.print("{}", x) or x, x))
    assert printed.ordered_effects == () and printed.with_tokens
    ordered = _jax.executable_parts(compiled_for(lambda x: jax.debug.print("{}", x, ordered=True) or x, x))
    assert len(ordered.ordered_effects) == 1 and ordered.with_tokens
    # A host callback without effects runs without tokens, as on jax's C++ fast path.
    pure = _jax.executable_parts(
        compiled_for(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((2,), np.float32), x), x)
    )
    assert pure.ordered_effects == () and not pure.with_tokens
    assert compiled_for(lambda x: x + 1, x)._params.const_args == []


def test_runtime_tokens_are_jax_per_thread_state():
    f = jax.jit(lambda x: jax.debug.print("{}", x, ordered=True) or x)
    (effect,) = _jax.executable_parts(f.lower(jnp.ones(1)).compile()).ordered_effects
    jax.effects_barrier()
    tokens = _jax.runtime_tokens()
    assert tokens is jax._src.dispatch.runtime_tokens and tokens.current_tokens == {}
    f(jnp.ones(1))
    assert type(tokens.current_tokens[effect]) is _jax.TOKEN_TYPE
    assert jax.devices()[0] in tokens.output_runtime_tokens
    token = tokens.get_token_input(effect, jax.devices())
    assert token._buf.shape == (0,)
    buffer = _jax.fresh_token_buffer(jax.devices()[0])
    assert buffer.dtype == np.bool_ and buffer.shape == (0,)
    jax.effects_barrier()
    assert tokens.current_tokens == {} and tokens.output_runtime_tokens == {}


def test_put_host_converts_as_jax_does():
    device = jax.devices()[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    x = np.arange(3, dtype=np.float32)
    put = _jax.put_host(x, _jax.host_array_aval(x.dtype, x.shape), sharding, (device,), False)
    assert put.aval == jax.typeof(jnp.asarray(x)) and not put.committed
    np.testing.assert_array_equal(put, x)
    assert _jax.host_array_aval(np.dtype(np.float64), (2,)).dtype == np.float32
    with jax.enable_x64(True):
        assert _jax.host_array_aval(np.dtype(np.float64), (2,)).dtype == np.float64
        assert _jax.python_scalar_aval(1).dtype == np.int64
    assert _jax.python_scalar_aval(1).weak_type and not _jax.python_scalar_aval(True).weak_type
    with pytest.raises(OverflowError):
        _jax.python_scalar_aval(2**40)
    with pytest.raises(_jax.RUNTIME_ERROR, match="Unable to convert Python scalar"):
        _jax.put_host(2**40, _jax.python_scalar_aval(1), sharding, (device,), False)
    assert _jax.default_device() == device and _jax.x64_enabled() is False
    same = _jax.batched_device_put(put.aval, sharding, [x], [device], False)
    np.testing.assert_array_equal(same, x)
    assert _jax.canonicalize_host(np.ones(2)).dtype == np.float32
    with pytest.warns(RuntimeWarning, match="overflow encountered in cast"):
        _jax.canonicalize_host(np.full(2, 1e40))


def test_transfer_guard_reads_and_explicit_scope():
    device = jax.devices()[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    aval = _jax.python_scalar_aval(1.0)
    assert _jax.host_transfer_guard() is None
    with jax.transfer_guard("disallow"):
        assert _jax.host_transfer_guard() == "disallow"
        with pytest.raises(_jax.RUNTIME_ERROR, match="Disallowed host-to-device transfer"):
            _jax.put_host(1.0, aval, sharding, (device,), False)
        with _jax.explicit_put_scope():
            assert float(_jax.put_host(1.0, aval, sharding, (device,), True)) == 1.0
    with jax.transfer_guard_host_to_device("log"):
        assert _jax.host_transfer_guard() == "log"


def test_executable_parts_refuse_debug_nans():
    compiled = compiled_for(lambda x: x * 2, jnp.ones(2))
    with jax.debug_nans(True), pytest.raises(MustHandOff) as refused:
        _jax.executable_parts(compiled)
    assert refused.value.reason == "debug_nans or debug_infs"


def test_watch_special_checks_sees_global_and_thread_settings_after_jax_hooks():
    seen = []
    _jax.watch_special_checks(seen.append)
    assert seen[-1] is False  # told today's value at once
    try:
        jax.config.update("jax_debug_infs", True)
        assert seen[-1] is True and _jax.needs_special_checks()
        assert _jax.jit_post_hook() is not None  # jax's own hook ran too
        jax.config.update("jax_debug_infs", False)
        assert seen[-1] is False and not _jax.needs_special_checks()

        def in_a_thread():
            with jax.debug_nans(True):
                seen.append(("inside", _jax.needs_special_checks()))

        thread = threading.Thread(target=in_a_thread)
        thread.start()
        thread.join()
        assert ("inside", True) in seen
        # Another thread's value cannot be read here: maybe on, for good.
        assert seen[-1] is True and not _jax.needs_special_checks()
    finally:
        jax.config.update("jax_debug_infs", False)


def test_keep_thread_post_hook_replaces_what_a_debug_nans_block_sets():
    given = []

    def ours(jitted, args, kwargs, out):
        pass

    def watcher(jax_hook):
        given.append(jax_hook)
        return ours

    def run():
        _jax.keep_thread_post_hook(watcher)
        try:
            with jax.debug_nans(True):
                assert _jax.jit_post_hook() is None  # the global is untouched
                assert given[-1] is not None  # jax's NaN check, for this thread
            assert given[-1] is None  # leaving: jax would hide the global hook
            jitted = jax.jit(lambda x: x + 1)
            seen = []
            _jax.keep_thread_post_hook(lambda hook: lambda *call: seen.append(call[0]))
            with jax.debug_nans(False):
                jitted(jnp.ones(2))
                jitted(jnp.ones(2))  # the C++ fast path: the thread's hook runs
            assert jitted in seen
        finally:
            _jax.keep_thread_post_hook(None)

    failed = []

    def in_a_thread():  # its own post hook stays in it
        try:
            run()
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert failed == [] and len(given) == 2


def test_key_aval_text_names_impl_and_shape():
    keys = jax.random.split(jax.random.key(0), 3)
    base = getattr(keys, _jax.KEY_BUFFER_ATTR)
    assert _jax.key_aval_text(getattr(keys, _jax.KEY_IMPL_ATTR), base.aval) == "key<fry>[3]"


def test_dataclass_fields_read_from_register_dataclass():
    # _pytree walks register_dataclass types by getattr on these field names;
    # if jax changes its flatten function, this fails (and dataclasses would
    # silently take the ~1 us/node Python path instead).
    @dataclasses.dataclass
    class Pair:
        x: object
        y: object
        op: str

    @dataclasses.dataclass
    class Box:
        value: object

    jax.tree_util.register_dataclass(Pair, data_fields=["x", "y"], meta_fields=["op"])
    jax.tree_util.register_pytree_node(Box, lambda b: ((b.value,), None), lambda _, c: Box(*c))
    registry = _jax.pytree_registry()
    assert _jax.dataclass_fields(registry[Pair].to_iter) == (("x", "y"), ("op",))
    assert _jax.dataclass_fields(registry[Box].to_iter) is None


# -- jit settings, argument signatures, the profiler -------------------------------


def test_jit_settings_have_global_and_thread_local_values():
    settings = {
        "jax_disable_jit": (_jax.DISABLE_JIT, jax.disable_jit, True),
        "jax_enable_x64": (_jax.ENABLE_X64, jax.enable_x64, True),
        "jax_default_device": (_jax.DEFAULT_DEVICE, jax.default_device, jax.devices()[0]),
    }
    for name, (setting, context, value) in settings.items():
        assert setting.name == name
        assert setting.get_global() == getattr(jax.config, name)
        assert _jax.local_setting(setting) is None
        with context(value):
            assert _jax.local_setting(setting) == value
            assert setting.value == value and getattr(jax.config, name) == value
        assert _jax.local_setting(setting) is None
        _jax.set_local_setting(setting, value)
        try:
            assert getattr(jax.config, name) == value and _jax.local_setting(setting) == value
        finally:
            _jax.set_local_setting(setting, None)
        assert _jax.local_setting(setting) is None and setting.value == setting.get_global()


def test_dtype_canonicalization():
    assert _jax.canonical_dtype(np.float64, False) == np.float32
    assert _jax.canonical_dtype(np.float64, True) == np.float64
    assert _jax.canonical_dtype(np.uint64, False) == np.uint32
    assert _jax.canonical_dtype(np.int8, False) == np.int8
    assert _jax.canonical_dtype(jax.dtypes.float0, False) is jax.dtypes.float0
    assert _jax.canonical_dtype(np.dtype("U3"), False) is None
    assert _jax.canonical_dtype(object, True) is None
    for py_type, narrow, wide in [
        (bool, bool, bool),
        (int, np.int32, np.int64),
        (float, np.float32, np.float64),
    ]:
        assert _jax.python_scalar_dtype(py_type, False) == narrow
        assert _jax.python_scalar_dtype(py_type, True) == wide
    assert _jax.python_scalar_dtype(complex, False) == np.complex64
    key = jax.random.key(0)
    assert _jax.key_dtype(getattr(key, _jax.KEY_IMPL_ATTR)) == key.dtype


def test_jaxlib_arg_signature():
    signature = _jax.jaxlib_arg_signature(jnp.ones((2, 3)), False)
    assert (signature.dtype, signature.shape, signature.weak_type) == (np.float32, (2, 3), False)
    signature = _jax.jaxlib_arg_signature(1, True)
    assert (signature.dtype, signature.shape, signature.weak_type) == (np.int64, (), True)
    with pytest.raises(jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT"):
        _jax.jaxlib_arg_signature("text", False)


def test_trace_me_spans_reach_a_capture(tmp_path):
    assert _jax.TRACE_ME.is_enabled() is False
    with _jax.TRACE_ME("not recorded"):  # usable, and free of effects, while no capture runs
        pass
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with jax.profiler.trace(str(tmp_path), profiler_options=options):
        assert _jax.TRACE_ME.is_enabled() is True
        span = _jax.TRACE_ME("outer")
        _jax.TRACE_ME.__exit__(_jax.TRACE_ME("inner", reason="why"), None, None, None)
        _jax.TRACE_ME.__exit__(span, None, None, None)
    assert _jax.TRACE_ME.is_enabled() is False
    (path,) = tmp_path.glob("plugins/profile/*/*.xplane.pb")
    profile = jax.profiler.ProfileData.from_file(str(path))
    events = [
        (event.name, event.start_ns, event.end_ns, dict(event.stats))
        for line in profile.find_plane_with_name("/host:CPU").lines
        for event in line.events
    ]
    by_name = {name: (start, end, stats) for name, start, end, stats in events}
    assert "not recorded" not in by_name
    outer, inner = by_name["outer"], by_name["inner"]
    assert outer[0] <= inner[0] <= inner[1] <= outer[1]
    assert inner[2] == {"reason": "why"}


def test_fun_name_is_the_name_in_jax_spans():
    def step(x):
        return x

    assert _jax.fun_name(step) == "step"
    assert _jax.fun_name(functools.partial(step, 1)) == "step"
    assert _jax.fun_name(lambda x: x) == "<lambda>"
    assert _jax.fun_name(object()) == "<unnamed function>"


def check_scalar_devices_on_a_mesh():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from fastdispatch import _jax

    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P(("a", "b"))))
    compiled = compiled_for(lambda v, s: v * s, x, 3.0)
    parts = _jax.executable_parts(compiled)
    expected = parts.in_shardings[1]
    devices = _jax.scalar_devices(expected)
    # jax's own order: the sharding's device assignment, every device this
    # process's in a one-process program.
    assert devices == tuple(mesh.devices.flat), devices
    three = _jax.put_host(3.0, parts.in_avals[1], expected, devices, False)
    assert three.sharding == expected and three.aval == parts.in_avals[1]
    assert [shard.device for shard in three.addressable_shards] == list(devices)
    outputs = _jax.consume_with_handlers(parts.execute([x, three]), parts.out_handlers)
    np.testing.assert_array_equal(outputs[0], np.arange(8.0) * 3)
    assert outputs[0].sharding == jax.jit(lambda v, s: v * s)(x, 3.0).sharding
    try:
        _jax.scalar_devices(NamedSharding(mesh, P("a")))
    except MustHandOff as refused:
        assert refused.reason == "host argument with a partitioned sharding"
    else:
        raise AssertionError("a partitioned sharding was accepted")


def test_scalar_devices_and_put_host_on_a_mesh():
    run_in_subprocess(check_scalar_devices_on_a_mesh, n_devices=4, timeout=120)


def test_backends_started_never_starts_one():
    code = (
        "from fastdispatch import _jax; import jax; assert not _jax.backends_started(); "
        "assert not _jax.backends_started(); jax.devices(); assert _jax.backends_started(); print('OK')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "OK", out.stderr


def test_process_of_program_is_none_in_one_process():
    jax.devices()  # a backend is up: read from it
    assert _jax.process_of_program() is None


GLOO_ON_ADDRESS = """
import jax, jax.numpy as jnp
from jax._src import xla_bridge
from fastdispatch import _jax
from fastdispatch.distributed import free_port

def refused(match):
    try:
        _jax.gloo_on_address("127.0.0.1")
    except RuntimeError as e:
        assert match in str(e), e
    else:
        raise AssertionError("gloo_on_address did not refuse")

refused("call jax.distributed.initialize first")
address = f"127.0.0.1:{free_port()}"
jax.config.update("jax_num_cpu_devices", 2)
jax.distributed.initialize(address, 1, 0, coordinator_bind_address=address, initialization_timeout=20,
                           heartbeat_timeout_seconds=10, shutdown_timeout_seconds=5)
# jax.distributed's record answers before any backend starts (and starts none).
assert _jax.process_of_program() is None and not xla_bridge.backends_are_initialized()
_jax.gloo_on_address("127.0.0.1")
factory = xla_bridge._backend_factories["cpu"].factory
assert factory.__qualname__ == "gloo_on_address.<locals>.make_cpu_client", factory
# The backend it makes runs a cross-device collective.
total = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(jnp.ones(2))
assert total.tolist() == [2.0, 2.0]
refused("jax's backends have started already")
assert _jax.process_of_program() is None
jax.distributed.shutdown()
print("GLOO-OK")
"""


def test_gloo_on_address_installs_a_cpu_backend_with_gloo_on_loopback():
    # A one-process jax.distributed job, in a fresh interpreter: the backend
    # factory must be replaced before any backend starts.
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", GLOO_ON_ADDRESS], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0 and "GLOO-OK" in proc.stdout, proc.stdout + proc.stderr


def test_compile_phase_events_are_reported_by_jax_monitoring():
    durations = []

    def listener(event, seconds, **kwargs):
        if event in _jax.COMPILE_PHASE_EVENTS:
            durations.append(_jax.COMPILE_PHASE_EVENTS[event])

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.jit(lambda v: v * 3 + 1)(jnp.ones(5))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert set(durations) == {"tracing", "lowering", "XLA"}


def test_jax_cache_events_are_jax_s_own():
    # Asked on every compile, even with no cache directory; served and written
    # are counted in a process with a cache (tests/e2e/test_findings.py).
    seen = []

    def listener(event, **kwargs):
        seen.append(event)

    jax.monitoring.register_event_listener(listener)
    try:
        jax.jit(lambda v: v * 7 - 2)(jnp.ones(6))
    finally:
        jax.monitoring.unregister_event_listener(listener)
    asked = next(event for event, kind in _jax.JAX_CACHE_EVENTS.items() if kind == "asked")
    assert asked in seen
    assert set(_jax.JAX_CACHE_EVENTS.values()) == {"asked", "served", "written"}
    assert _jax.JAX_CACHE_EVENTS[_jax.JAX_CACHE_SERVED_EVENT] == "served"


def test_trace_event_marks_each_top_level_trace():
    # Warm start writes a compile only when jax traced it in this process.
    events = []

    def listener(event, seconds, fun_name=None, **kwargs):
        # Only f's own: before 0.10, jax.numpy's jitted operations inside f
        # fire the event too, as each is traced within f's trace.
        if event == _jax.JAXPR_TRACE_EVENT and fun_name == "<lambda>":
            events.append(event)

    f = jax.jit(lambda v: v * 5 - 1)
    x, y = jnp.ones(4), jnp.ones(3)  # made first: jnp.ones traces too
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        f(x)
        f(x)  # jax's caches: no trace
        assert len(events) == 1
        f(y)  # a new shape: traced again
        assert len(events) == 2
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def test_typed_ndarray_holds_a_numpy_value_and_its_weak_type():
    if issubclass(_jax.TYPED_NDARRAY_TYPE, np.ndarray):  # jax 0.9, 0.10: digested as numpy
        assert "TypedNdArray" in _jax.TYPED_NDARRAY_TYPE.__name__
    else:  # jax 0.8: a wrapper
        typed = _jax.TYPED_NDARRAY_TYPE(np.arange(3.0), True)
        assert type(typed.val) is np.ndarray and typed.weak_type is True


def test_axis_env_parts_of_the_trace_context():
    env = dict(zip(_jax.trace_context_names(), _jax.trace_context()))["axis_env_state"]
    if _jax.axis_env_parts(env) is None:
        # jax before 0.10 holds it as (name, size) pairs: plain data already.
        assert env == ()
    else:
        assert _jax.axis_env_parts(env) == ((), (), ())
    assert _jax.axis_env_parts(None) is None and _jax.axis_env_parts(()) is None


def test_trace_context_names_probed_as_jaxlib_names_them():
    probed = _jax._probe_trace_context_names()
    names = _jax.trace_context_names()
    assert len(probed) == len(names) == len(_jax.trace_context())
    assert all(p == n for p, n in zip(probed, names) if not p.startswith("trace_context["))
    for name in ("jax_enable_x64", "jax_disable_jit", "jax_no_execution", "jax_default_device"):
        assert name in probed
    assert _jax.trace_context() == _jax.trace_context()  # the probe put every value back


@pytest.mark.parametrize("flatten", [_jax.flatten_one_level_with_keys, _jax._one_level_with_path])
def test_flatten_one_level_with_keys(flatten):
    import collections

    jtu = jax.tree_util

    class Keyed:
        def __init__(self, a, b):
            self.a, self.b = a, b

    jtu.register_pytree_with_keys(
        Keyed,
        lambda k: (((jtu.GetAttrKey("a"), k.a), (jtu.GetAttrKey("b"), k.b)), None),
        lambda _, children: Keyed(*children),
    )
    ordered = collections.OrderedDict([("z", 1), ("a", [2, 3])])
    assert flatten(ordered) == [(jtu.DictKey("z"), 1), (jtu.DictKey("a"), [2, 3])]
    counts = collections.defaultdict(int, {"b": 1, "a": None})
    assert flatten(counts) == [(jtu.DictKey("a"), None), (jtu.DictKey("b"), 1)]
    inner = (1, 2)
    assert flatten(Keyed(inner, None)) == [(jtu.GetAttrKey("a"), inner), (jtu.GetAttrKey("b"), None)]
    assert flatten((1, {"x": 2})) == [(jtu.SequenceKey(0), 1), (jtu.SequenceKey(1), {"x": 2})]


def test_executable_device_ids_follow_its_device_assignment():
    device = jax.devices()[-1]
    compiled = jax.jit(lambda x: x + 1).lower(jax.device_put(jnp.ones(2), device)).compile()
    assert _jax.executable_device_ids(compiled) == (device.id,)


def test_traced_parts_are_its_lowering_inputs():
    traced = jax.jit(lambda x: x * 2, donate_argnums=0).trace(jnp.ones(2))
    constant_args, params = _jax.traced_parts(traced)
    assert list(constant_args) == []
    assert params["jaxpr"] is traced.jaxpr
    assert params["donated_invars"] == (True,) and len(params["in_shardings"]) == 1


# -- jax.jit's two ways to dispatch (--trace's eager ops) ---------------------------


def test_jit_post_hook_is_called_after_each_fast_path_call_only():
    seen = []
    f = jax.jit(lambda v: v * 2)
    x = jnp.ones(3)
    previous = _jax.jit_post_hook()
    _jax.set_jit_post_hook(lambda jitted, args, kwargs, out: seen.append((jitted, args, kwargs, out)))
    try:
        f(x)  # a miss: jax's Python path
        out = f(x)  # the C++ fast path
    finally:
        _jax.set_jit_post_hook(previous)
    ((jitted, args, kwargs, got),) = seen
    assert jitted is f and args == (x,) and args[0] is x and kwargs == {} and got is out
    f(x)
    assert len(seen) == 1


def test_observe_jit_python_path_sees_every_call_the_fast_path_hands_back():
    seen = []

    def observer(fun, run):
        seen.append(fun)
        return run()

    def double(v):
        return v * 2

    f = jax.jit(double)
    _jax.observe_jit_python_path(observer)
    try:
        first = f(jnp.ones(3))  # traced and compiled: the Python path
        f(jnp.ones(3))  # the fast path
    finally:
        _jax.observe_jit_python_path(None)
    assert seen.count(double) == 1
    np.testing.assert_array_equal(first, 2 * np.ones(3))
    f(jnp.ones(4))  # jax's own path again
    assert seen.count(double) == 1


def test_serve_jit_misses_takes_each_compile_jax_makes_on_a_miss():
    seen = []
    loaded = {}

    def server(args, jaxpr, params, run):
        seen.append((params["name"], len(args), len(jaxpr.out_avals)))
        if params["name"] in loaded:  # run the executable served before, in place of jax's compile
            return _jax.run_jit_miss(loaded[params["name"]], args)
        result = run()
        outputs, executable, _, constant_args = result
        assert constant_args in ([], ()) and len(outputs) == 1
        # What a store keeps: the executable as a Compiled, and its lowering compiled again.
        compiled = _jax.as_compiled(executable, len(args), len(jaxpr.out_avals))
        assert _jax.loaded_executable(compiled) is executable
        again = _jax.lower_jit_miss(args, jaxpr, params).compile()
        loaded[params["name"]] = again
        return result

    def triple(v):
        return v * 3

    _jax.serve_jit_misses(server)
    try:
        first = jax.jit(triple)(jnp.ones(3))  # the miss: jax compiles it
        jax.clear_caches()
        second = jax.jit(triple)(jnp.ones(3))  # the miss again: served by the second compile
        third = jax.jit(triple)(jnp.ones(3))  # jax's C++ cache kept the served executable
    finally:
        _jax.serve_jit_misses(None)
    assert [name for name, _, _ in seen].count("triple") == 2
    assert ("triple", 1, 1) in seen
    for result in (first, second, third):
        np.testing.assert_array_equal(result, 3 * np.ones(3))
    jax.clear_caches()
    jax.jit(triple)(jnp.ones(3))  # jax's own compile-and-run again
    assert [name for name, _, _ in seen].count("triple") == 2


def test_is_jax_primitive_knows_jax_s_own_from_a_program_s():
    from jax._src.lax import lax as lax_internal
    from jax.extend.core import Primitive

    assert _jax.is_jax_primitive(lax_internal.add_p)
    assert _jax.is_jax_primitive(lax_internal.sin_p)
    assert not _jax.is_jax_primitive(Primitive("a_program_s_own"))


def test_jitted_function_is_what_jit_wraps():
    def g(v):
        return v

    assert _jax.jitted_function(jax.jit(g)) is g
    assert _jax.jitted_function(jnp.sin).__module__.startswith("jax._src.numpy")
    assert _jax.jitted_function(lambda: None) is None


def check_jax_cache_unwritten(cache_dir):
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    x = np.arange(3.0, dtype=np.float32)  # no eager op: nothing compiled but f

    def compile_in_a_thread(f, unwritten):
        def compile_it():
            if unwritten:
                with _jax.jax_cache_unwritten():
                    jax.jit(f).lower(x).compile()
            else:
                jax.jit(f).lower(x).compile()

        thread = threading.Thread(target=compile_it)
        thread.start()
        thread.join()

    compile_in_a_thread(lambda v: v * 7.0, unwritten=True)
    assert not any("lambda" in name for name in os.listdir(cache_dir)), os.listdir(cache_dir)
    compile_in_a_thread(lambda v: v * 9.0, unwritten=False)  # the global setting again
    assert any("lambda" in name for name in os.listdir(cache_dir)), os.listdir(cache_dir)


def test_jax_cache_unwritten_keeps_this_threads_compiles_out_of_jaxs_cache(tmp_path):
    # jax's cache settings are the process's: a fresh one.
    run_in_subprocess(check_jax_cache_unwritten, str(tmp_path), n_devices=1, timeout=120)


def test_weakly_typed_makes_a_traced_value_weak_as_a_python_scalar_is():
    out = jax.jit(lambda x: _jax.weakly_typed(x))(jnp.float32(2.0))
    assert out.weak_type and out.dtype == jnp.float32
    assert (
        jax.jit(lambda x: _jax.weakly_typed(x) * jnp.int32(3)).eval_shape(jnp.float32(1))
    ).dtype == jnp.float32


def test_output_description_is_what_makes_two_executables_results_alike():
    compiled = jax.jit(lambda x, s: (x * s, s)).lower(jnp.ones(3), 2.0).compile()
    committed, avals, shardings = _jax.output_description(compiled)
    assert committed is False and [a.weak_type for a in avals] == [False, True]
    assert len(shardings) == 2 and all(s.is_fully_replicated for s in shardings)
