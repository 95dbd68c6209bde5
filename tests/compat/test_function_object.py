"""The jitted object as a Python object: wraps attributes, descriptor protocol, repr, pickling."""

import functools
import inspect
import pickle
import weakref

import jax
import jax.numpy as jnp
import pytest
from contract import against_jax, arange, assert_same_array, expect_same
from subprocess_util import run_in_subprocess


def documented(x: jax.Array, y: float = 2.0) -> jax.Array:
    """Scales x by y."""
    return x * y


documented.custom_attribute = "kept"

WRAPS_ATTRIBUTES = ["__name__", "__qualname__", "__module__", "__doc__", "__annotations__"]


def test_functools_wraps_attributes(jit):
    f = jit(documented)
    assert f.__wrapped__ is documented
    for name in WRAPS_ATTRIBUTES:
        assert getattr(f, name) == getattr(documented, name), name
        assert f.__dict__[name] == getattr(documented, name), name
    assert f.custom_attribute == "kept"
    assert inspect.signature(f) == inspect.signature(documented)
    assert f.__signature__ == inspect.signature(documented)


def test_instance_dict_is_writable_and_separate(jit):
    f = jit(documented)
    f.note = 3
    assert f.note == 3 and f.__dict__["note"] == 3
    assert not hasattr(documented, "note")


def test_stage_methods_live_on_the_type(jit):
    # jax's own functools.wraps-style helpers copy __dict__: the stage methods
    # must not be instance entries.
    f = jit(documented)
    for name in ["lower", "trace", "eval_shape", "clear_cache"]:
        assert name not in f.__dict__, name
        assert callable(getattr(f, name))


def test_wraps_of_partial_and_callable_object(jit):
    p = functools.partial(documented, y=3.0)
    expect_same(jit, p, arange((2,)))
    assert jit(p).__wrapped__ is p

    class Scale:
        def __call__(self, x):
            return x * 4

    expect_same(jit, Scale(), arange((2,)))


def test_repr(jit):
    # jax's own api_test asserts these words: a drop-in prints as jax.jit's wrapper.
    assert repr(jit(documented)) == f"<PjitFunction of {documented!r}>"


def test_repr_when_function_repr_raises(jit):
    class BadRepr:
        def __call__(self, x):
            return x + 1

        def __repr__(self):
            raise RuntimeError("no repr")

    f = jit(BadRepr())
    assert repr(f) == "<PjitFunction>"
    assert_same_array(f(jnp.float32(1)), jnp.asarray(2, jnp.float32))


def test_getstate_function_name(jit):
    # jax's api_test reads the name jax.jit reports through functools.partial.
    named = functools.partial(documented)
    named.__name__ = "named"
    assert jit(documented).__getstate__()["function_name"] == "documented"
    nested = functools.partial(functools.partial(documented))
    assert jit(nested).__getstate__()["function_name"] == "documented"
    assert jit(named).__getstate__()["function_name"] == "named"
    assert jit(lambda x: x).__getstate__()["function_name"] == "<lambda>"


def test_clear_caches_forgets_executables(jit):
    # jax.clear_caches() clears every compiled-function cache: the next call traces again.
    traces = []

    @jit
    def double(x):
        traces.append(None)
        return x * 2

    x = jnp.arange(4)
    double(x)
    double(x)
    assert len(traces) == 1
    jax.clear_caches()
    assert_same_array(double(x), x * 2)
    assert len(traces) == 2
    double(x)
    assert len(traces) == 2


class NoWeakref:
    __slots__ = ()

    def __call__(self, x):
        return x + 3


def non_weakrefable_errors():
    """Each jit of a callable without weak references raises at its first call."""
    import fastdispatch

    errors = []
    for jit in (jax.jit, fastdispatch.jit):
        f = jit(NoWeakref())
        with pytest.raises(TypeError, match="^cannot create weak reference to 'NoWeakref' object") as raised:
            f(jnp.float32(1))
        errors.append(str(raised.value))
    assert errors[0] == errors[1], errors


def test_non_weakrefable_callable():
    # jax keys its caches weakly by the function: a callable that refuses weak
    # references fails at the first call, with the same TypeError from both.
    # In a fresh process: jaxlib 0.10.2 crashes the process making its third
    # or so jax.jit of such a callable (stock jax.jit alone, in a loop).
    run_in_subprocess(non_weakrefable_errors, n_devices=1)


def test_weakref_and_hash(jit):
    f = jit(documented)
    assert weakref.ref(f)() is f
    assert {f: 1}[f] == 1


class Model:
    def __init__(self, k):
        self.k = k

    def __hash__(self):
        return hash(self.k)

    def __eq__(self, other):
        return isinstance(other, Model) and other.k == self.k

    def scale(self, x):
        return x * self.k


def test_method_descriptor(jit):
    class Holder:
        double = jit(lambda self, x: x * 2)

    assert Holder.double is Holder.__dict__["double"]
    bound = Holder().double
    assert inspect.ismethod(bound) and bound.__func__ is Holder.__dict__["double"]
    # self is a dynamic argument here: a non-array self is jax's error.
    with pytest.raises(
        TypeError,
        match="The problematic value is of type .*Holder.* and was passed to the function at path self",
    ):
        bound(1.0)


def test_method_with_static_self(jit):
    class Static(Model):
        scale = jit(Model.scale, static_argnums=0)

    assert_same_array(Static(3).scale(jnp.float32(2)), jnp.asarray(6, jnp.float32))
    assert_same_array(Static(3).scale(jnp.float32(1)), jnp.asarray(3, jnp.float32))
    assert_same_array(Static(5).scale(jnp.float32(1)), jnp.asarray(5, jnp.float32))


@against_jax
def test_method_with_pytree_self(jit):
    @functools.partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=[])
    class Params:
        def __init__(self, w):
            self.w = w

        apply = jit(lambda self, x: self.w @ x)

    p = Params(arange((2, 2)))
    assert_same_array(p.apply(jnp.ones(2)), jax.jit(lambda w, x: w @ x)(arange((2, 2)), jnp.ones(2)))


# Pickling. jax.jit objects cannot be pickled in jax 0.10.2 (their cache_miss is
# a local function); fastdispatch's can, so these tests are fastdispatch's alone.


def module_level(x, n):
    return x * n


def test_jax_jit_does_not_pickle():
    with pytest.raises((AttributeError, pickle.PicklingError)):
        pickle.dumps(jax.jit(module_level))


def test_pickle_roundtrip():
    import fastdispatch

    f = fastdispatch.jit(module_level, static_argnums=1)
    f(arange((2,)), 3)
    g = pickle.loads(pickle.dumps(f))
    assert type(g) is type(f) and g.__wrapped__ is module_level
    assert g.__name__ == "module_level"
    assert_same_array(g(arange((2,)), 3), jax.jit(module_level, static_argnums=1)(arange((2,)), 3))
    # The options travel: n is still static (a Python string would fail as a dynamic arg).
    assert_same_array(g(arange((2,)), 2), arange((2,)) * 2)


def test_pickle_shares_cache_within_one_pickle():
    import fastdispatch

    cache = fastdispatch.CompiledFunctionCache(capacity=7)
    f = fastdispatch.jit(module_level, static_argnums=1, cache=cache)
    g = fastdispatch.jit(documented, cache=cache)
    f2, g2, cache2 = pickle.loads(pickle.dumps((f, g, cache)))
    assert cache2.capacity() == 7 and cache2.size() == 0
    f2(arange((2,)), 3)
    g2(arange((2,)))
    assert cache2.size() == 2
