"""fastdispatch._compile: every private jax name it relies on, checked loudly.

When jax changes one of these, this file fails first and names it; widen the
jax range in pyproject.toml only once it passes.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fastdispatch import _compile


def compiled_for(fun, *args, **kwargs):
    return jax.jit(fun).lower(*args, **kwargs).compile()


def test_supported_jax_version():
    major, minor = (int(part) for part in jax.__version__.split(".")[:2])
    assert (major, minor) == (0, 10), f"fastdispatch supports jax 0.10.x, found {jax.__version__}"


def test_array_types_and_attributes():
    x = jnp.ones(3)
    assert type(x) is _compile.ARRAY_TYPE
    assert getattr(x, _compile.SHARDING_ATTR) == x.sharding
    assert getattr(x, _compile.COMMITTED_ATTR) is False
    committed = jax.device_put(x, jax.devices()[0])
    assert getattr(committed, _compile.COMMITTED_ATTR) is True
    key = jax.random.key(0)
    assert type(key) is _compile.KEY_ARRAY_TYPE
    buffer = _compile.key_array_buffer(key)
    assert type(buffer) is _compile.ARRAY_TYPE and buffer.dtype == np.uint32


def test_jax_jit_is_jax_own_even_when_patched(monkeypatch):
    original = jax.jit
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("patched jit called"))
    assert _compile.jax_jit is original
    assert _compile.jax_jit(lambda x: x + 1)(1) == 2


def test_trace_context_and_state():
    names = _compile.trace_context_names()
    context = _compile.trace_context()
    assert len(names) == len(context) and "jax_enable_x64" in names
    assert "jax_disable_jit" in names and "jax_no_execution" in names
    with jax.disable_jit():
        assert _compile.trace_context() != context
        assert _compile.slow_path_reason() == "disable_jit"
    assert _compile.TRACE_STATE.value is _compile.CLEAN_TRACE_STATE
    assert _compile.trace_state_is_clean() and _compile.slow_path_reason() is None
    seen = []

    def inside(x):
        seen.append((_compile.TRACE_STATE.value is _compile.CLEAN_TRACE_STATE,
                     _compile.slow_path_reason()))
        return x

    jax.make_jaxpr(inside)(1.0)
    assert seen == [(False, "tracer")]
    with jax.no_tracing():
        assert _compile.slow_path_reason() == "no_tracing"
    with jax.no_execution():
        assert _compile.slow_path_reason() == "no_execution"


def test_pytree_registry_grows_with_registrations():
    registry = _compile.pytree_registry()
    assert tuple in registry and dict in registry

    class Point:
        pass

    jax.tree_util.register_pytree_node(Point, lambda p: ((), None), lambda _, c: Point())
    assert Point in _compile.pytree_registry()
    to_iter, from_iter = registry[Point]
    assert to_iter(Point()) == ((), None)


def test_resolved_arguments_match_argnames():
    def f(a, b, *, c):
        return a

    jitted = jax.jit(f, static_argnums=1, donate_argnames="a")
    resolved = _compile.resolved_arguments(jitted)
    assert resolved.static_argnums == (1,) and resolved.static_argnames == ("b",)
    assert resolved.donate_argnums == (0,) and resolved.donate_argnames == ("a",)


def test_fast_path_parts_run_the_executable():
    x, y = jnp.arange(3.0), jnp.ones(3)
    compiled = compiled_for(lambda a, b, c: {"sum": a + b * c}, x, y, 2.0)
    parts = _compile.fast_path(compiled, [x, y, 2.0])
    assert isinstance(parts, _compile.FastPath)
    assert parts.kept == (0, 1, 2)
    scalar = parts.scalar_inputs[2]
    assert scalar.aval.weak_type and scalar.dtype == np.float32
    buffers = [x, y, _compile.put_scalar(2.0, scalar)]
    outputs = parts.execute(buffers).consume_with_handlers(parts.out_handlers)
    result = parts.out_treedef.unflatten(outputs)
    np.testing.assert_array_equal(result["sum"], np.array([2.0, 3.0, 4.0]))


def test_fast_path_prunes_unused_arguments():
    x = jnp.ones(2)
    compiled = compiled_for(lambda a, b: a * 2, x, x)
    assert _compile.fast_path(compiled, [x, x]).kept == (0,)


@pytest.mark.parametrize("make_call, reason", [
    (lambda: (lambda x: jax.debug.print("{}", x) or x, (jnp.ones(2),)), "effects"),
    (lambda: (lambda x: x * 2, (np.ones(2, np.float32),)), "numpy arguments"),
])
def test_fast_path_refusals_name_a_reason(make_call, reason):
    fun, args = make_call()
    compiled = compiled_for(fun, *args)
    assert _compile.fast_path(compiled, list(args)) == reason


def test_raw_runner_matches_jit():
    x = jnp.arange(4.0)
    compiled = compiled_for(lambda a, b: a * b, x, 3.0)
    (out,) = _compile.raw_runner(compiled, x, 3.0)()
    np.testing.assert_array_equal(out, jax.jit(lambda a, b: a * b)(x, 3.0))


def test_python_scalar_aval_follows_x64():
    context = _compile.trace_context()
    assert _compile.python_scalar_aval(float, context).str_short() == "float32[]"
    with jax.enable_x64(True):
        wide = _compile.trace_context()
    assert _compile.python_scalar_aval(int, wide).dtype == np.int64
    assert _compile.python_scalar_aval(int, context).weak_type


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
    registry = _compile.pytree_registry()
    assert _compile.dataclass_fields(registry[Pair].to_iter) == (("x", "y"), ("op",))
    assert _compile.dataclass_fields(registry[Box].to_iter) is None
