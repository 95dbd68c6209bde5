"""fastdispatch.warm.keys: one store key for every front end.  A key is the
same for the same call in any process, and differs where the executable (or
its result) could: by front end, by what the front end keys beyond the
signature, by the leaves, the options and the function."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import fastdispatch
from fastdispatch.core.cache import CompiledFunctionCache
from fastdispatch.jax_jit import warm as jit_warm
from fastdispatch.warm.identity import NotStored, function_digest
from fastdispatch.warm.keys import call_key


def signature_of(fun, *args, **kwargs):
    """The CallSignature fastdispatch.jit keyed this call by."""
    cache = CompiledFunctionCache()
    jitted = fastdispatch.jit(fun, cache=cache, **kwargs)
    jitted(*args)
    (entry,) = cache.entries()
    return entry.signature


def add(x, y):
    return x + y


def second(tree, y):
    return y


def key(signature, label="jit", options=None, parts=(), node_types=(), function="f"):
    return call_key(label, options or {}, signature, parts, node_types, function)


def test_a_key_is_the_same_for_the_same_call():
    first = signature_of(add, jnp.ones(3), jnp.ones(3))
    again = signature_of(add, jnp.ones(3), jnp.ones(3))
    assert key(first, parts=jit_warm.key_parts(first)) == key(again, parts=jit_warm.key_parts(again))


def test_a_key_differs_by_what_the_executable_could_differ_by():
    signature = signature_of(add, jnp.ones(3), jnp.ones(3))
    base = key(signature)
    assert key(signature_of(add, jnp.ones(4), jnp.ones(4))) != base  # the leaves
    assert key(signature, label="filter_jit") != base  # the front end
    assert key(signature, options={"donate_argnums": (0,)}) != base
    assert key(signature, function="g") != base
    assert key(signature, parts=((1, "takes as static argument"),)) != key(
        signature, parts=((2, "takes as static argument"),)
    )


def test_jits_parts_are_its_tree_and_static_arguments():
    def scaled(x, factor):
        return x * factor

    two = signature_of(scaled, jnp.ones(3), 2, static_argnums=1)
    three = signature_of(scaled, jnp.ones(3), 3, static_argnums=1)
    assert key(two, parts=jit_warm.key_parts(two)) != key(three, parts=jit_warm.key_parts(three))
    tree = signature_of(second, {"a": jnp.ones(3)}, jnp.ones(3))
    other = signature_of(second, {"b": jnp.ones(3)}, jnp.ones(3))
    assert key(tree, parts=jit_warm.key_parts(tree)) != key(other, parts=jit_warm.key_parts(other))


def test_a_part_that_cannot_be_described_is_named():
    signature = signature_of(add, jnp.ones(3), jnp.ones(3))

    class Opaque:
        pass

    with pytest.raises(NotStored, match="takes as static argument"):
        key(signature, parts=((Opaque(), "takes as static argument"),))


def test_the_methods_of_the_node_classes_are_keyed():
    signature = signature_of(add, jnp.ones(3), jnp.ones(3))

    class One:
        def __call__(self, x):
            return x

    class Two:
        def __call__(self, x):
            return x + 1

    assert key(signature, node_types=[One]) != key(signature, node_types=[Two])


def test_a_library_sentinel_is_keyed_by_its_name():
    signature = signature_of(add, jnp.ones(3), jnp.ones(3))
    sentinel, unnamed = object(), object()
    options = {"constants": {"lib.MISSING": sentinel}}
    assert key(signature, options=options, parts=((sentinel, "takes as static argument"),))
    with pytest.raises(NotStored):
        key(signature, options=options, parts=((unnamed, "takes as static argument"),))


def test_the_function_digest_is_the_identity_of_its_code():
    assert function_digest(add) == function_digest(add)
    assert function_digest(add) != function_digest(lambda x, y: x - y)
