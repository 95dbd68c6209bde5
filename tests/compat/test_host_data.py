"""Host data as arguments: numpy arrays and scalars, Python scalars whose value
changes every call, x64 off and on, weak types, the transfer guard.

Each case runs in two shapes of call: alone (``small``: jax.jit converts host
data faster, so fastdispatch hands it over) and beside many jax arrays
(``wide``: fastdispatch converts it itself); both must give jax.jit's result.
Every test compares with jax.jit, so each runs once, on fastdispatch.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from contract import against_jax, arange, assert_same_tree

pytestmark = against_jax

WIDE_ARRAYS = 16  # array leaves beside the host value in a wide call


def small(value):
    return value * 2 + 1


def wide(params, value):
    return sum(params), small(value), value


def same_outcome(ours, theirs, *args):
    """``ours(*args)`` gives what ``theirs(*args)`` gives: the same tree, or the same error."""
    try:
        want = theirs(*args)
    except Exception as error:  # noqa: BLE001 - compared below
        with pytest.raises(type(error)) as info:
            ours(*args)
        assert str(info.value) == str(error)
    else:
        assert_same_tree(ours(*args), want)


def call_both(jit, fun, *args):
    same_outcome(jit(fun), jax.jit(fun), *args)


def run_case(jit, value):
    params = [arange((3,)) + i for i in range(WIDE_ARRAYS)]
    f_small, g_small = jit(small), jax.jit(small)
    f_wide, g_wide = jit(wide), jax.jit(wide)
    for _ in range(3):  # the compile, then hits
        same_outcome(f_small, g_small, value)
        same_outcome(f_wide, g_wide, params, value)


NUMPY_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    jnp.bfloat16,
]
SHAPES = [(), (0,), (3,), (2, 3), (1, 1, 3)]


def numpy_value(dtype, shape, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape) * 3
    return values.astype(dtype)


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_arrays(jit, dtype, x64):
    with jax.enable_x64(x64):
        for shape in SHAPES:
            run_case(jit, numpy_value(dtype, shape))


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
def test_numpy_scalars_and_zero_dim_arrays(jit, x64):
    with jax.enable_x64(x64):
        for value in [
            np.float32(1.5),
            np.float64(-2.25),
            np.int8(-3),
            np.int64(7),
            np.uint16(9),
            np.bool_(True),
        ]:
            run_case(jit, value)
            run_case(jit, np.asarray(value))  # 0-d array of the same dtype


def test_unusual_numpy_layouts(jit):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for value in [
        base[:, ::2],  # not contiguous
        base.T,  # Fortran order
        base.astype(">f4"),  # big-endian
        np.asfortranarray(base),
        base[1:3],  # an offset view
    ]:
        run_case(jit, value)


def test_new_numpy_values_each_call(jit):
    # The same dtype and shape every call, new values: each call converts its own.
    params = [arange((4,)) for _ in range(WIDE_ARRAYS)]
    f = jit(wide)
    for seed in range(5):
        x = numpy_value(np.float32, (4,), seed)
        assert_same_tree(f(params, x), jax.jit(wide)(params, x))


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize(
    "values",
    [
        list(range(-3, 40)),  # a step counter
        [0.1 * i for i in range(40)],
        [True, False] * 5,
        [1j * i for i in range(10)],
        [0.5] * 5 + [1.5] * 5 + [0.5] * 5,  # constants, changing now and then
    ],
    ids=["int", "float", "bool", "complex", "constants"],
)
def test_python_scalars_changing_every_call(jit, values, x64):
    with jax.enable_x64(x64):
        params = [arange((3,)) + i for i in range(WIDE_ARRAYS)]
        f_small, g_small = jit(small), jax.jit(small)
        f_wide, g_wide = jit(wide), jax.jit(wide)
        for value in values:
            assert_same_tree(f_small(value), g_small(value))
            assert_same_tree(f_wide(params, value), g_wide(params, value))


def test_python_scalar_weak_types_promote_as_jax(jit):
    params = [arange((3,), jnp.float16) for _ in range(WIDE_ARRAYS)]
    for value in [1, 2.5, True, 3j, np.float32(2), np.int8(3)]:
        call_both(jit, wide, params, value)
        call_both(jit, lambda x, s: x * s, arange((3,), jnp.bfloat16), value)


def test_int_too_large_gets_jax_error_on_every_path(jit):
    params = [arange((3,), jnp.int32) for _ in range(WIDE_ARRAYS)]
    f = jit(wide)
    f(params, 1)
    f(params, 2)
    with pytest.raises(OverflowError) as ours:
        f(params, 2**40)
    with pytest.raises(OverflowError) as theirs:
        jax.jit(wide)(params, 2**40)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("level", ["disallow", "log"])
def test_transfer_guard_applies_to_every_host_value(jit, level):
    # Host values a call has seen before (a constant kept on device) still meet
    # the guard: jax.jit transfers them on every call.
    params = [arange((3,)) for _ in range(WIDE_ARRAYS)]
    cases = [
        (small, (2.5,)),
        (wide, (params, 2.5)),
        (small, (np.ones(3, np.float32),)),
        (wide, (params, np.ones(3))),
    ]
    for fun, args in cases:
        f = jit(fun)
        for _ in range(3):
            f(*args)  # warm: compiled, constants kept
        with jax.transfer_guard_host_to_device(level):
            same_outcome(f, jax.jit(fun), *args)
        with jax.transfer_guard("allow"):
            assert_same_tree(f(*args), jax.jit(fun)(*args))
