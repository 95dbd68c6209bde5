"""Warm start reads code as Python runs it and describes what it reads: the
globals a function reads are its LOAD_GLOBAL / LOAD_NAME names (attributes are
not globals); a jax array, a flax Variable, State or Module, a pytree of them,
is described by its structure and content; and every function warm start
does not take on says why (fastdispatch._reasons' WARM_ constants)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from frontends import import_flax

import fastdispatch
from fastdispatch import _reasons, warm
from fastdispatch.warm import identity
from fastdispatch.warm.identity import NotStored, function_digest

import_flax()  # this module's tests skip without flax, saying why
from flax import ids, linen, nnx  # noqa: E402  (flax.nnx: flax's __init__ does not import it)


class Opaque:
    pass


# Globals whose names the functions below use as attributes only.
state = Opaque()
params = Opaque()
update = Opaque()
SCALE = 2.0
WEIGHTS = jnp.arange(3.0)
PARAM = nnx.Param(jnp.ones(3))
STATE = nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
TREE = {"w": jnp.ones(2), "layers": [jnp.zeros(3), (jnp.ones(1), 2)]}
KEY = jax.random.key(0)
MODEL = nnx.Linear(2, 2, rngs=nnx.Rngs(1))


def attributes_only(s, opt):
    # state, params and update appear in co_names as attributes: not read as globals.
    grads = nnx.state(s.model)
    opt.update(grads)
    return s.params, s.state


def reads_state(x):
    return state


def test_an_attribute_is_not_a_global_of_the_same_name():
    assert "state" in attributes_only.__code__.co_names
    assert identity.globals_read(attributes_only.__code__) == frozenset({"nnx"})
    function_digest(attributes_only)  # the global `state` (an Opaque) is not read
    with pytest.raises(NotStored, match="reads the global state, an object of type .*Opaque"):
        function_digest(reads_state)


def nested_reads(x):
    def inner(y):
        return y * SCALE

    return inner(x) + (lambda z: z + WEIGHTS)(x)


def comprehension_reads(xs):
    return [x * SCALE for x in xs]


def class_body_reads():
    class Local:
        factor = SCALE

    return Local


def test_nested_code_comprehensions_and_class_bodies_are_read(monkeypatch):
    for fun in (nested_reads, comprehension_reads, class_body_reads):
        assert "SCALE" in identity.globals_read(fun.__code__), fun
        before = function_digest(fun)
        monkeypatch.setattr(f"{__name__}.SCALE", 3.0)
        assert function_digest(fun) != before, fun
        monkeypatch.setattr(f"{__name__}.SCALE", 2.0)
        assert function_digest(fun) == before, fun


def closure_named_like_a_global():
    state = 1.0  # a cell: the inner function reads it, not the global

    def inner(x):
        return x * state

    return inner


def test_a_closure_is_its_cell_not_the_global_of_its_name():
    inner = closure_named_like_a_global()
    assert "state" not in identity.globals_read(inner.__code__)
    assert function_digest(inner) == function_digest(closure_named_like_a_global())


def reads_unknown_globals(x):
    return x * globals()["SCALE"]


def test_reads_that_cannot_be_known_are_refused():
    with pytest.raises(NotStored, match=r"calls globals\(\)") as refusal:
        function_digest(reads_unknown_globals)
    assert refusal.value.reason is _reasons.WARM_UNKNOWN_READS


def reads_param(x):
    return x * PARAM.value


def reads_state_global(x):
    return x @ STATE["kernel"].value


def reads_tree(x):
    return x + TREE["w"]


def reads_key(x):
    return jax.random.normal(KEY, x.shape) + x


def reads_model(x):
    return MODEL(x)


@pytest.mark.parametrize(
    "fun, name, changed",
    [
        (reads_param, "PARAM", nnx.Param(jnp.full(3, 2.0))),
        (reads_state_global, "STATE", nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(5)))),
        (reads_tree, "TREE", {"w": jnp.ones(2), "layers": [jnp.zeros(3), (jnp.ones(1), 3)]}),
        (reads_key, "KEY", jax.random.key(1)),
        (reads_model, "MODEL", nnx.Linear(2, 2, rngs=nnx.Rngs(2))),
    ],
)
def test_arrays_variables_state_and_pytrees_are_described_by_content(monkeypatch, fun, name, changed):
    before = function_digest(fun)
    assert function_digest(fun) == before
    monkeypatch.setattr(f"{__name__}.{name}", changed)
    assert function_digest(fun) != before


def test_a_variable_of_another_type_or_shape_keys_apart():
    assert identity.value_digest(nnx.Param(jnp.ones(3))) == identity.value_digest(nnx.Param(jnp.ones(3)))
    assert identity.value_digest(nnx.Param(jnp.ones(3))) != identity.value_digest(nnx.BatchStat(jnp.ones(3)))
    assert identity.value_digest(nnx.Param(jnp.ones(3))) != identity.value_digest(nnx.Param(jnp.ones(4)))
    with pytest.raises(NotStored, match="an object of type .*Opaque"):
        identity.value_digest({"w": jnp.ones(2), "o": Opaque()})


class Classifier(linen.Module):
    features: int = 3

    @linen.compact
    def __call__(self, x):
        return linen.Dense(self.features)(x)


def test_a_linen_module_is_described_by_its_fields_not_by_its_flax_id():
    # A TrainState's apply_fn is its Module's bound apply; each Module holds a
    # FlaxId, a counter of the Modules made before it: not what it computes.
    first, second = Classifier(), Classifier()
    assert identity.value_digest(first.apply) == identity.value_digest(second.apply)
    assert identity.value_digest(first.apply) != identity.value_digest(Classifier(features=4).apply)
    # Tokens of identity: which one is which is described, not their numbers.
    a, b = ids.uuid(), ids.uuid()
    assert identity.value_digest((a, b)) == identity.value_digest((b, a))
    assert identity.value_digest((a, a)) != identity.value_digest((a, b))


def test_refusals_carry_their_reason_and_compiles_outside_are_explained(tmp_path, cache_settings):
    opaque = Opaque()

    def closes_over_opaque(x):
        return x + (opaque is not None)

    fastdispatch.warm_start(tmp_path)
    fastdispatch.jit(closes_over_opaque)(jnp.ones(2))
    jnp.sin(jnp.arange(7.0)).block_until_ready()  # an eager operation: jax compiles it
    stats = fastdispatch.warm_start_stats()
    assert set(stats["reasons"].values()) == {_reasons.WARM_UNDESCRIBED}
    assert all(reason in _reasons.ALL for reason in stats["reasons"].values())
    outside = stats["outside"]
    assert outside["reason"] is _reasons.WARM_OUTSIDE and outside["compiles"] >= 1
    assert "closes_over_opaque" not in str(outside["names"])  # its compile is a call warm start keyed
    assert _reasons.WARM_OUTSIDE in warm.summary()


def test_a_call_jax_jit_runs_for_its_numpy_arguments_is_written(tmp_path, cache_settings):
    def test_step(x):
        return x * 2

    jitted = fastdispatch.jit(test_step)
    fastdispatch.warm_start(tmp_path)
    assert jitted(np.ones(3)).tolist() == [2.0, 2.0, 2.0]  # handed to jax.jit: numpy arguments
    stats = fastdispatch.warm_start_stats()
    assert (stats["missed"], stats["written"], stats["not_stored"]) == (1, 1, {})
    jitted.clear_cache()
    assert jitted(np.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert fastdispatch.warm_start_stats()["loaded"] == 1
