"""What a call's argument contributes to the cache key: its dtype, shape and weak type.

The old ``jax_jit`` module's ``_ArgSignatureOfValue`` and ``_is_float0``, as
public functions.  The answer is read off the very key the dispatcher builds
for the value (``_signature.leaf_key``: ``classify_leaf`` and ``LeafKey``), so
that it cannot disagree with how calls are keyed:

    array   a jax Array: its aval's dtype, shape and weak type (x64 plays no part)
    key     a typed PRNG key: its key dtype (``key<fry>``) and shape, not weak
    scalar  a Python bool, int, float, complex: the dtype jax gives the type
            under ``jax_enable_x64``, shape (), weak
    host    a numpy array or scalar: its dtype (64-bit squashed to 32 without
            x64; float0 kept), its shape, not weak

Values the dispatcher does not key (enums, float subclasses, strings, tracers)
go to jax.jit, which keys them with jaxlib's own ``_ArgSignatureOfValue``: so
does this function, with its answer or its error.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from fastdispatch import _jax
from fastdispatch.core.signature import leaf_key

__all__ = ["ArgSignature", "arg_signature_of_value", "is_float0"]


class ArgSignature(NamedTuple):
    """One argument's part of the key: ``dtype`` (a numpy dtype, or a key
    dtype), ``shape`` (a tuple of ints) and ``weak_type`` (a bool)."""

    dtype: Any
    shape: tuple
    weak_type: bool


def arg_signature_of_value(value, jax_enable_x64: bool) -> ArgSignature:
    """The dtype, shape and weak type by which a call with ``value`` as an
    argument is keyed, under the given ``jax_enable_x64``.

    As jaxlib's ``_ArgSignatureOfValue`` for jax Arrays, numpy arrays and
    scalars, and Python scalars (a Python bool is weak there too, although
    ``jax.typeof(True)`` is not).  Where jaxlib raises, this function answers
    when the dispatcher keys the value itself: a typed PRNG key, a float0
    numpy array.  For a value jax cannot take as an array it raises what
    jaxlib raises: ``jax.errors.JaxRuntimeError`` (INVALID_ARGUMENT) for a
    string, ``TypeError`` for None.
    """
    x64 = bool(jax_enable_x64)
    key = leaf_key(value)
    if key is None:
        return _from_jaxlib(value, x64)
    if key.kind == "array":
        aval = key.aval
        return ArgSignature(aval.dtype, aval.shape, aval.weak_type)
    if key.kind == "key":
        physical = key.aval.shape
        shape = physical[: len(physical) - len(key.impl.key_shape)]
        return ArgSignature(_jax.key_dtype(key.impl), shape, False)
    if key.kind == "scalar":
        return ArgSignature(_jax.python_scalar_dtype(key.py_type, x64), (), True)
    dtype = _jax.canonical_dtype(key.dtype, x64)
    if dtype is None:  # a string or object array: jax says why not
        return _from_jaxlib(value, x64)
    return ArgSignature(dtype, key.shape, False)


def _from_jaxlib(value, x64):
    signature = _jax.jaxlib_arg_signature(value, x64)
    return ArgSignature(signature.dtype, signature.shape, signature.weak_type)


def is_float0(x) -> bool:
    """Whether ``x`` is a numpy array or scalar of dtype ``jax.dtypes.float0``:
    the tangent type of integer and boolean inputs (``jax.grad(f,
    allow_int=True)``).  jax Arrays are never float0."""
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype == jax.dtypes.float0
