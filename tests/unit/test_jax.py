"""fastdispatch._jax: every private jax name it relies on, checked loudly.

When jax changes one of these, this file fails first and names it; widen the
jax range in pyproject.toml only once it passes.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fastdispatch import _jax


def compiled_for(fun, *args, **kwargs):
    return jax.jit(fun).lower(*args, **kwargs).compile()


def test_supported_jax_version():
    major, minor = (int(part) for part in jax.__version__.split(".")[:2])
    assert (major, minor) == (0, 10), f"fastdispatch supports jax 0.10.x, found {jax.__version__}"


def test_array_types_and_attributes():
    x = jnp.ones(3)
    assert type(x) is _jax.ARRAY_TYPE
    assert getattr(x, _jax.SHARDING_ATTR) == x.sharding
    assert getattr(x, _jax.COMMITTED_ATTR) is False
    committed = jax.device_put(x, jax.devices()[0])
    assert getattr(committed, _jax.COMMITTED_ATTR) is True
    key = jax.random.key(0)
    assert type(key) is _jax.KEY_ARRAY_TYPE
    buffer = _jax.key_array_buffer(key)
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
        assert _jax.slow_path_reason() == "disable_jit"
    assert _jax.TRACE_STATE.value is _jax.CLEAN_TRACE_STATE
    assert _jax.trace_state_is_clean() and _jax.slow_path_reason() is None
    seen = []

    def inside(x):
        seen.append((_jax.TRACE_STATE.value is _jax.CLEAN_TRACE_STATE, _jax.slow_path_reason()))
        return x

    jax.make_jaxpr(inside)(1.0)
    assert seen == [(False, "tracer")]
    with jax.no_tracing():
        assert _jax.slow_path_reason() == "no_tracing"
    with jax.no_execution():
        assert _jax.slow_path_reason() == "no_execution"


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
    (device,) = parts.in_shardings[2].device_set
    two = _jax.put_host(2.0, scalar_aval, parts.in_shardings[2], device, False)
    assert two.aval == scalar_aval and not two.committed
    outputs = _jax.consume_with_handlers(parts.execute([x, y, two]), parts.out_handlers)
    result = parts.out_treedef.unflatten(outputs)
    np.testing.assert_array_equal(result["sum"], np.array([2.0, 3.0, 4.0]))


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
    put = _jax.put_host(x, _jax.host_array_aval(x.dtype, x.shape), sharding, device, False)
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
        _jax.put_host(2**40, _jax.python_scalar_aval(1), sharding, device, False)
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
            _jax.put_host(1.0, aval, sharding, device, False)
        with _jax.explicit_put_scope():
            assert float(_jax.put_host(1.0, aval, sharding, device, True)) == 1.0
    with jax.transfer_guard_host_to_device("log"):
        assert _jax.host_transfer_guard() == "log"


def test_executable_parts_refuse_debug_nans():
    compiled = compiled_for(lambda x: x * 2, jnp.ones(2))
    with jax.debug_nans(True):
        assert _jax.executable_parts(compiled) == "debug_nans or debug_infs"


def test_key_aval_text_names_impl_and_shape():
    keys = jax.random.split(jax.random.key(0), 3)
    base = _jax.key_array_buffer(keys)
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
