"""fastdispatch.jax_jit.arg_signature: each value's dtype, shape and weak type, against jax.

jax's own answer is jaxlib's ``_ArgSignatureOfValue`` (what jax.jit's C++ keys a
call with; reached through ``_jax.jaxlib_arg_signature``) and the aval jax
traces the value as.
"""

import enum

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from fastdispatch import _jax, arg_signature_of_value, is_float0, jit
from fastdispatch.core import signature as _signature
from fastdispatch.jax_jit.arg_signature import ArgSignature


class Color(enum.IntEnum):
    RED = 1


class MyFloat(float):
    pass


VALUES = {
    "True": True,
    "int": 1,
    "int beyond int32": 2**40,
    "float": 1.5,
    "complex": 1j,
    "IntEnum": Color.RED,
    "float subclass": MyFloat(2.0),
    "np.bool_": np.bool_(True),
    "np.int8": np.int8(1),
    "np.int64": np.int64(1),
    "np.uint64": np.uint64(1),
    "np.float16": np.float16(1),
    "np.float64": np.float64(1),
    "np.complex128": np.complex128(1),
    "bfloat16 scalar": ml_dtypes.bfloat16(1),
    "np f64[2,3]": np.ones((2, 3)),
    "np i64[3]": np.ones(3, np.int64),
    "np u8[]": np.zeros((), np.uint8),
    "np c128[2]": np.ones(2, np.complex128),
    "np bool[0]": np.zeros(0, bool),
    "jax f32[2]": jnp.ones(2),
    "jax weak i32[]": jnp.array(1),
    "jax f32[] (not weak)": jnp.float32(1),
    "jax bf16[2]": jnp.ones(2, jnp.bfloat16),
    "jax weak f32[] from a jit": jax.jit(lambda: 1.0)(),
}


@pytest.mark.parametrize("x64", [False, True], ids=["x64 off", "x64 on"])
@pytest.mark.parametrize("name", list(VALUES))
def test_matches_jaxlib(name, x64):
    value = VALUES[name]
    expected = _jax.jaxlib_arg_signature(value, x64)
    ours = arg_signature_of_value(value, x64)
    assert isinstance(ours, ArgSignature)
    assert type(ours.dtype) is type(expected.dtype) and ours.dtype == expected.dtype
    assert ours.shape == expected.shape and type(ours.shape) is tuple
    assert ours.weak_type is expected.weak_type


@pytest.mark.parametrize("name", [n for n in VALUES if n != "int beyond int32"])
def test_matches_the_aval_jax_traces(name):
    # jax.jit traces a value as an aval of the same dtype and shape; the weak
    # type too, but for a Python bool (weak in the key, not in the aval).
    value = VALUES[name]
    seen = []
    jax.jit(lambda x: seen.append(x.aval) or x)(value)
    (aval,) = seen
    ours = arg_signature_of_value(value, jax.config.jax_enable_x64)
    assert (ours.dtype, ours.shape) == (aval.dtype, aval.shape)
    if type(value) is not bool:
        assert ours.weak_type == aval.weak_type


def test_agrees_with_the_dispatcher_key():
    # Values the dispatcher keys alike have one signature; the signature is
    # read off that key.
    f = jit(lambda x: x)
    for a, b in [(1.0, 2.5), (jnp.ones(2), jnp.zeros(2)), (np.ones(3), np.zeros(3))]:
        f(a)
        f(b)
        assert f._cache_size() == 1
        (entry,) = f._cache_entries()
        (key,) = entry.signature.leaf_keys()
        assert _signature.leaf_key(a) == _signature.leaf_key(b) == key
        assert arg_signature_of_value(a, False) == arg_signature_of_value(b, False)
        f.clear_cache()


def test_typed_keys_and_float0_keyed_where_jaxlib_refuses():
    key = jax.random.key(0)
    keys = jax.random.split(key, 3)
    with pytest.raises(jax.errors.JaxRuntimeError):
        _jax.jaxlib_arg_signature(key, False)
    for value in (key, keys):
        assert arg_signature_of_value(value, False) == ArgSignature(value.dtype, value.shape, False)
        assert jax.typeof(value).dtype == value.dtype
    tangent = np.zeros((2, 3), jax.dtypes.float0)
    with pytest.raises(jax.errors.JaxRuntimeError):
        _jax.jaxlib_arg_signature(tangent, False)
    for x64 in (False, True):
        assert arg_signature_of_value(tangent, x64) == ArgSignature(jax.dtypes.float0, (2, 3), False)


@pytest.mark.parametrize("value", ["text", np.str_("a"), np.array(["a"]), None, object()])
def test_refused_values_raise_what_jaxlib_raises(value):
    with pytest.raises(Exception) as jax_error:
        _jax.jaxlib_arg_signature(value, False)
    with pytest.raises(type(jax_error.value)) as ours:
        arg_signature_of_value(value, False)
    assert str(ours.value) == str(jax_error.value)


def test_tracers_raise_as_jaxlib():
    def inside(x):
        with pytest.raises(jax.errors.JaxRuntimeError):
            arg_signature_of_value(x, False)
        return x

    jax.jit(inside)(1.0)


def test_is_float0():
    float0 = jax.dtypes.float0
    tangent = jax.grad(lambda x, n: x * n, argnums=(0, 1), allow_int=True)(1.0, 3)[1]
    assert is_float0(tangent)
    array = np.zeros((2, 3), float0)
    assert is_float0(array) and is_float0(array[1:]) and is_float0(array.copy()) and is_float0(array[0, 0])
    assert is_float0(np.zeros(2, np.dtype([("float0", np.void, 0)])))  # equal, not identical
    for value in (np.zeros(2), np.zeros(2, bool), jnp.zeros(2), jnp.zeros(2, bool), 0.0, None, [array]):
        assert not is_float0(value)
