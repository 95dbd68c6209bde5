"""core.execute: an executable's inputs on the fast path: host data (numpy
arrays whose bytes repeat keep their device array; others convert here or
go to jax.jit, whichever is faster), Python scalars converted exactly, and
the values that do not convert (jax.jit raises its own error)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch
from fastdispatch.core import execute as _execute


def test_numpy_arguments_are_run_by_jax_and_still_cached(sink):
    f = fastdispatch.jit(lambda x: x * 2)
    for i in range(3):
        out = f(np.arange(3, dtype=np.float32) + i)
    np.testing.assert_array_equal(out, np.array([4.0, 6.0, 8.0]))
    # The first call compiles (jax.jit runs it); new bytes after it go to jax.jit.
    assert sink.reasons() == [None, "numpy arguments", "numpy arguments"] and f._cache_size() == 1


def test_numpy_data_that_repeats_reuses_its_device_array(sink):
    # A small call jax.jit converts faster, but whose numpy bytes are the
    # previous call's: from the third call on it runs here, with no transfer
    # (the first compiles, the second's bytes are not known yet).
    f = fastdispatch.jit(lambda x, m: x * m)
    x, mask = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    for _ in range(4):
        np.testing.assert_array_equal(f(x, mask), x)
    assert sink.reasons() == [None, "numpy arguments", None, None]
    (entry,) = f._cache_entries()
    kept = entry.executable.inputs.kept_host_arrays()
    np.testing.assert_array_equal(f(x.copy(), mask.copy()), x)  # equal bytes, other objects
    assert sink.reasons()[-1] is None
    assert [a is b for a, b in zip(entry.executable.inputs.kept_host_arrays(), kept)] == [True, True]
    # Bytes changed in place: never the kept array; such a call goes to jax.jit.
    mask[0, 0] = 5.0
    np.testing.assert_array_equal(f(x, mask), x * mask)
    assert sink.reasons()[-1] == "numpy arguments"
    np.testing.assert_array_equal(f(x, mask), x * mask)  # the new bytes repeat: here again
    now = entry.executable.inputs.kept_host_arrays()
    assert sink.reasons()[-1] is None and now[0] is kept[0] and now[1] is not kept[1]
    # -0.0 and 0.0 are other bytes, as NaNs of other payloads are.
    z = np.zeros((2, 3), np.float32)
    for value in (z, z, -z, -z):
        got = f(x, value)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(x * value))


def test_repeated_numpy_data_is_compared_only_where_that_is_sound(sink):
    f = fastdispatch.jit(lambda x, y: x + y)
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((3, 2), np.float32)
    # A transposed view is not C-contiguous: never compared, whatever its bytes.
    fortran = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(3, 2))
    for x in (c.T.copy(), c.T.copy(), c.T.copy(), fortran, fortran):
        np.testing.assert_array_equal(f(x, y), np.asarray(x) + 1)
    # Under a transfer guard, every call transfers as jax.jit's does (and raises as it does).
    with jax.transfer_guard("disallow"):
        with pytest.raises(Exception, match="[Dd]isallowed"):
            f(c.T.copy(), y)
    # A function that donates, or data larger than the bound, is never kept.
    big = np.ones(_execute.HOST_REUSE_MAX_BYTES // 4 + 1, np.float32)
    g = fastdispatch.jit(lambda v: v * 2)
    for _ in range(4):
        np.testing.assert_array_equal(g(big), big * 2)
    (entry,) = g._cache_entries()
    assert not entry.is_fast  # jax.jit converts it: nothing to compare
    # A kept array deleted by its caller (returned as the output, then deleted) is put again.
    same = fastdispatch.jit(lambda v: v)
    v = np.arange(3, dtype=np.float32)
    for _ in range(4):
        out = same(v)
    out.delete()
    np.testing.assert_array_equal(same(v), v)


def test_numpy_data_repeating_in_trees_is_found_by_a_call_that_goes_the_whole_way(sink):
    # Calls of trees are handed to jax.jit before they are flattened, but
    # every 64th: that one compares the bytes, and the next that repeats runs here.
    f = fastdispatch.jit(lambda p, x: {k: v + x.sum() for k, v in p.items()})
    params, x = {"w": jnp.ones(2), "b": jnp.zeros(2)}, np.ones(3, np.float32)
    for _ in range(200):
        out = f(params, x)
    np.testing.assert_array_equal(out["w"], np.full(2, 4.0))
    served = [hand_off is None for hand_off in sink.reasons()]
    assert served[0] and not any(served[1:64]) and all(served[130:])


def wide(params, value):
    return sum(params) * 2, value


def test_numpy_arguments_beside_many_arrays_are_converted_here(sink):
    params = [jnp.ones(3) * i for i in range(2 * _execute.HOST_BREAK_EVEN_LEAVES)]
    f = fastdispatch.jit(wide)
    for i in range(3):
        out = f(params, np.full(3, i, np.float32))
        np.testing.assert_array_equal(out[1], np.full(3, i))
    assert sink.reasons() == [None] * 3 and [e.is_fast for e in f._cache_entries()] == [True]
    # Fewer arrays per numpy argument (twice as many for a dtype jax casts),
    # or a function that donates: jax.jit converts them.
    sink.calls.clear()
    few = fastdispatch.jit(wide)
    few(params[: _execute.HOST_BREAK_EVEN_LEAVES - 1], np.ones(3, np.float32))
    cast = fastdispatch.jit(wide)
    cast(params[: _execute.HOST_BREAK_EVEN_LEAVES + 1], np.ones(3, np.float64))
    donating = fastdispatch.jit(lambda ps, v: [p + v for p in ps], donate_argnums=0)
    donating([jnp.ones(3) for _ in params], np.ones(3, np.float32))
    # Each first call compiles; the next with new bytes goes to jax.jit (the
    # entries keep their bytes, in case they repeat); a function that donates
    # leaves every call to jax.jit.
    few(params[: _execute.HOST_BREAK_EVEN_LEAVES - 1], np.zeros(3, np.float32))
    cast(params[: _execute.HOST_BREAK_EVEN_LEAVES + 1], np.zeros(3, np.float64))
    assert sink.reasons() == [None, None, "numpy arguments", "numpy arguments", "numpy arguments"]
    assert [e.is_fast for e in donating._cache_entries()] == [False]


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64, np.complex128, np.uint8, np.bool_])
def test_numpy_dtypes_jax_casts_are_converted_here_as_jax_casts_them(sink, dtype):
    params = [jnp.ones(3) * i for i in range(2 * _execute.HOST_BREAK_EVEN_LEAVES)]
    f = fastdispatch.jit(wide)
    reference = jax.jit(wide)
    # Beyond 32 bits: jax's cast wraps ints and overflows floats to inf.
    for value in [np.arange(3).astype(dtype), np.array([2**40, -(2**40), 7]).astype(dtype)]:
        for _ in range(2):
            ours, theirs = f(params, value)[1], reference(params, value)[1]
            assert (ours.dtype, ours.weak_type) == (theirs.dtype, theirs.weak_type)
            np.testing.assert_array_equal(ours, theirs)
    assert all(reason is None for reason in sink.reasons())


def test_cast_overflow_warning_as_error_is_raised_as_jax_raises_it(sink):
    params = [jnp.ones(3) for _ in range(2 * _execute.HOST_BREAK_EVEN_LEAVES)]
    f = fastdispatch.jit(wide)
    f(params, np.ones(3))
    # jax.jit's first call raises numpy's warning as the filter asks (its C++
    # path, on later calls, crashes the process: not run here); ours raises
    # it on any call.
    with pytest.raises(RuntimeWarning, match="overflow"):
        f(params, np.array([1e300, 1.0, 2.0]))
    np.testing.assert_array_equal(f(params, np.full(3, 2.0))[1], np.full(3, 2.0))


def test_new_scalar_values_go_to_jax_on_small_calls(sink):
    f = fastdispatch.jit(lambda x, step: x * step)
    x = jnp.ones(2)
    for step in range(4):
        np.testing.assert_array_equal(f(x, step), np.full(2, step))
    # The compile, then three values never seen: jax.jit converts them faster.
    assert sink.reasons() == [None] + ["new scalar value"] * 3
    sink.calls.clear()
    for _ in range(3):
        f(x, 7)  # a constant: jax's the first time, kept on device from the second
    assert sink.reasons() == ["new scalar value", None, None]
    sink.calls.clear()
    g = fastdispatch.jit(wide)
    params = [x] * (_execute.NEW_SCALAR_BREAK_EVEN_LEAVES + 1)
    for step in range(4):
        np.testing.assert_array_equal(g(params, step)[1], step)
    assert sink.reasons() == [None] * 4


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -1.5, math.inf, 7, True, 2j])
def test_python_scalars_convert_exactly(value):
    f = fastdispatch.jit(lambda x, s: x * 0 + s)
    g = jax.jit(lambda x, s: x * 0 + s)
    x = jnp.zeros(())
    for scalar in (value, value, -value if not isinstance(value, bool) else value):
        got, want = f(x, scalar), g(x, scalar)
        assert got.dtype == want.dtype and got.weak_type == want.weak_type
        assert np.array_equal(got, want) and math.copysign(1, got.real) == math.copysign(1, want.real)


def test_zero_and_negative_zero_are_not_confused():
    f = fastdispatch.jit(lambda s: 1.0 / s)
    assert f(0.0) == math.inf and f(-0.0) == -math.inf and f(0.0) == math.inf


def test_int_too_large_for_int32_gets_jax_error(sink):
    f = fastdispatch.jit(lambda s: s + 1)
    f(1)
    with pytest.raises(OverflowError) as ours:
        f(2**40)
    with pytest.raises(OverflowError) as theirs:
        jax.jit(lambda s: s + 1)(2**40)
    assert str(ours.value) == str(theirs.value)


def test_donating_function_converts_scalars_every_call():
    f = fastdispatch.jit(lambda x, s: (x + s, s * 2), donate_argnums=(0, 1))
    for _ in range(3):
        x = jnp.ones(2)
        out, doubled = f(x, 3.0)
        assert float(doubled) == 6.0 and float(out[0]) == 4.0
