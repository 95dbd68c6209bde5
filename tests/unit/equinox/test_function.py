"""fastdispatch.equinox: the private equinox names it relies on, Module flattening
through FieldLayout, and which calls the fast path serves."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import treecases
from jax._src import tree_util as jax_tree_util
from lazy_reader_body import plain_jit_reads_equinox_modules_in_c
from subprocess_util import run_in_subprocess

import fastdispatch
from fastdispatch import equinox as front
from fastdispatch.core import pytree as _pytree


def outcomes(sink):
    return [(call.hit, call.hand_off) for call in sink.calls]


# -- equinox's private names ------------------------------------------------------


def test_equinox_names_used():
    from equinox import _jit

    assert issubclass(front.FilterJitWrapper, _jit._JitWrapper)
    assert callable(_jit._JitWrapper.__call__) and callable(_jit._JitWrapper.lower)
    assert front._eqx_filter_jit is _jit.filter_jit
    assert isinstance(eqx.nn.Linear, front.ModuleMeta)
    assert repr(front.MISSING) == "Missing"
    # Warm start keys equinox's sentinel by name: the one object of that name.
    assert front._warm_options({})["constants"] == {"equinox.MISSING": front.MISSING}
    assert front.MISSING is eqx._module._flatten.MISSING
    assert front._clear_dispatchers in eqx._caches.cache_clears
    fields = {f.name for f in dataclasses.fields(_jit._JitWrapper)}
    assert {"_cached", "_signature", "_dynamic_fun", "_static_fun", "donate_first", "donate_rest"} <= fields
    # equinox's Module-field warning knows jax.jit's wrapper by type, from this set.
    assert type(jax.jit(lambda x: x)) in eqx._module._module._transform_types


def _jax_transform_warning_with_equinox_imported_first():
    import warnings

    import equinox

    from fastdispatch.__main__ import patch_jax

    class Holder(equinox.Module):
        linear: object

    def warnings_for(jitted):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Holder(jitted)
        return [str(w.message).split(" on")[0].strip() for w in caught]

    def linear():
        return equinox.nn.Linear(2, 2, key=jax.random.key(0))

    stock_jit = jax.jit
    expected = warnings_for(stock_jit(linear()))
    assert expected and set(expected) == {"Possibly assigning a JAX-transformed callable as an attribute"}
    patch_jax()  # after equinox took type(jax.jit(...)): as a sitecustomize import would leave it
    assert type(jax.jit(linear())) is fastdispatch.CompiledFunction
    assert warnings_for(jax.jit(linear())) == expected
    assert warnings_for(stock_jit(linear())) == expected  # a jitted function made before the patch
    assert warnings_for(jax.jit(lambda x: x)) == []


def test_jax_transform_warning_whichever_jit_equinox_saw_first():
    run_in_subprocess(_jax_transform_warning_with_equinox_imported_first, n_devices=1)


def test_layout_of_a_module_matches_its_generated_flatten():
    class Base(eqx.Module):
        a: jax.Array
        sa: str = eqx.field(static=True)

    class Child(Base):
        b: jax.Array
        sb: int = eqx.field(static=True)
        c: object = None

    to_iter = jax_tree_util._registry[Child].to_iter
    layout = front._module_layout(Child, to_iter)
    assert layout.children == ("a", "b", "c") and layout.aux_names == ("sa", "sb")
    assert layout.aux_prefix == (front.MISSING,) and layout.dict_size == 5
    assert layout.direct_unflatten
    child = Child(jnp.ones(1), "s", jnp.zeros(2), 7)
    children, aux = to_iter(child)
    assert children == (child.a, child.b, None) and aux == (front.MISSING, "s", 7)
    assert front._module_layout(int, to_iter) is None
    assert front._module_layout(Child, lambda obj: ((), None)) is None
    # --trace names what differs in aux data by field: its names line up with it.
    assert front.static_field_names(Child) == ("", "sa", "sb")
    assert front.static_field_names(int) is None


# -- Modules flatten as jax flattens them ------------------------------------------


class Linear(eqx.Module):
    weight: jax.Array
    bias: jax.Array
    name: str = eqx.field(static=True)
    activation: object = jax.nn.relu


class WithConverter(eqx.Module):
    value: jax.Array = eqx.field(converter=jnp.asarray)
    count: int = eqx.field(static=True, default=3)


class Sized(eqx.Module):
    weight: jax.Array
    size: int = eqx.field(static=True)


class WithProperty(eqx.Module):
    x: jax.Array

    @property
    def doubled(self):
        return 2 * self.x


def module_cases():
    linear = Linear(jnp.ones((2, 2)), jnp.zeros(2), "lin")
    extra = Linear(jnp.ones(1), jnp.ones(1), "extra")
    object.__setattr__(extra, "cached", 5)  # an entry beyond the fields
    wrapped = eqx.module_update_wrapper(front.filter_jit(lambda x: x))
    return [
        ("linear", linear),
        ("nested", [linear, {"m": Linear(jnp.ones(3), jnp.ones(3), "b", None)}]),
        ("converter", WithConverter(1.0)),
        ("property", WithProperty(jnp.ones(2))),
        ("mlp", eqx.nn.MLP(2, 2, 3, 2, key=jax.random.key(0))),
        ("extra entry", extra),
        ("wrapper module", wrapped),
        ("bound method", eqx.nn.Linear(2, 2, key=jax.random.key(1)).__call__),
        ("partial", eqx.Partial(lambda a, b: a + b, jnp.ones(2))),
    ]


@pytest.mark.parametrize("name, tree", module_cases(), ids=[name for name, _ in module_cases()])
def test_modules_flatten_and_unflatten_as_jax(name, tree):
    for _ in range(2):  # the first instance of each type is checked; then memos
        leaves, treedef = _pytree.flatten(tree)
        treecases.structures_match_jax(tree, leaves, treedef)
    rebuilt = treedef.unflatten(leaves)
    theirs = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(tree), leaves)
    assert jax.tree_util.tree_structure(rebuilt) == jax.tree_util.tree_structure(theirs)
    for ours, jax_made in zip(_modules(rebuilt), _modules(theirs)):
        assert type(ours) is type(jax_made)
        assert list(vars(ours).items()) == list(vars(jax_made).items())


def test_fields_are_read_whatever_order_each_instance_stored_them_in():
    # __init__ stores fields in one order, unflatten in another (children
    # first), object.__setattr__ in a third: each is read by its own order,
    # and by name when it is new; the leaves and aux data stay jax's.
    made = Linear(jnp.ones(2), jnp.zeros(2), "made")
    leaves, treedef = _pytree.flatten(made)
    rebuilt = treedef.unflatten([jnp.full(2, 3.0), jnp.full(2, 4.0), *leaves[2:]])
    reordered = Linear(jnp.ones(1), jnp.ones(1), "re")
    for name in ("activation", "name", "weight", "bias"):
        value = vars(reordered)[name]
        del vars(reordered)[name]
        object.__setattr__(reordered, name, value)
    orders = {tuple(vars(m)) for m in (made, rebuilt, reordered)}
    assert len(orders) == 3
    for tree in [made, rebuilt, reordered, made, reordered, rebuilt, [made, rebuilt, reordered]]:
        for _ in range(2):
            leaves, treedef = _pytree.flatten(tree)
            treecases.structures_match_jax(tree, leaves, treedef)


def test_layers_of_alternating_static_fields_keep_their_own_aux_data():
    # The memos checked first by address: three layer shapes in turn, then
    # equal but distinct aux values (a large int made anew).
    model = eqx.nn.MLP(8, 1, 32, 2, key=jax.random.key(0))
    for _ in range(3):
        leaves, treedef = _pytree.flatten(model)
        treecases.structures_match_jax(model, leaves, treedef)
    big = Sized(jnp.ones(2), 10**30)
    again = Sized(jnp.ones(2), int("1" + "0" * 30))
    assert _pytree.flatten(big)[1] == _pytree.flatten(again)[1]
    other = Sized(jnp.ones(2), 10**30 + 1)
    assert _pytree.flatten(big)[1] != _pytree.flatten(other)[1]
    treecases.structures_match_jax(other, *_pytree.flatten(other))


def _modules(tree):
    return [
        node
        for node in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, eqx.Module))
        if isinstance(node, eqx.Module)
    ]


def test_unflatten_of_a_module_runs_no_init():
    calls = []

    class Checked(eqx.Module):
        x: jax.Array

        def __check_init__(self):
            calls.append(1)

    module = Checked(jnp.ones(2))
    leaves, treedef = _pytree.flatten(module)
    calls.clear()
    rebuilt = treedef.unflatten([jnp.zeros(2)])
    assert type(rebuilt) is Checked and calls == []
    np.testing.assert_array_equal(rebuilt.x, np.zeros(2))


# -- which calls the fast path serves ------------------------------------------------


def test_hits_stay_on_the_fast_path(sink):
    model = eqx.nn.MLP(3, 2, 4, 2, key=jax.random.key(0))
    f = fastdispatch.filter_jit(lambda m, x, scale: m(x) * scale)
    x = jnp.ones(3)
    for _ in range(3):
        f(model, x, 2.0)
    assert outcomes(sink) == [(False, None), (True, None), (True, None)]


def test_calls_equinox_runs_itself(sink):
    f = fastdispatch.filter_jit(lambda x: x + 1)
    f(jnp.ones(2))
    jax.grad(lambda v: f(v).sum())(jnp.ones(2))
    with jax.disable_jit():
        f(jnp.ones(2))
    assert [hand_off for _, hand_off in outcomes(sink)] == [None, "tracer", "disable_jit"]
    g = fastdispatch.filter_jit(lambda x: jax.debug.callback(lambda v: None, x) or x)
    g(jnp.ones(2))
    g(jnp.ones(2))
    assert outcomes(sink)[-1] == (False, "effects")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
def test_numpy_arguments_run_on_the_fast_path_as_equinox_converts_them(sink, dtype):
    fun = lambda model, x, scale: model(x.astype(jnp.float32)) * scale  # noqa: E731
    ours, theirs = fastdispatch.filter_jit(fun), eqx.filter_jit(fun)
    model = eqx.nn.Linear(3, 2, key=jax.random.key(0))
    for i in range(3):
        x = (np.arange(3) + i).astype(dtype)
        for scale in (np.float64(2.0), np.ones((), np.float32)):
            got, want = ours(model, x, scale), theirs(model, x, scale)
            assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type)
            np.testing.assert_array_equal(got, want)
    assert [hit for hit, _ in outcomes(sink)].count(True) >= 4
    assert all(hand_off is None for _, hand_off in outcomes(sink))


def test_wrappers_of_one_function_share_a_dispatcher():
    def fun(x):
        return x * 2

    a, b = fastdispatch.filter_jit(fun), fastdispatch.filter_jit(fun)
    assert a._cached is b._cached and isinstance(a._cached, fastdispatch.equinox.function.FilterDispatcher)
    a(jnp.ones(2))
    assert b._cached._cache_size() == 1
    eqx.clear_caches()
    assert b._cached._cache_size() == 0
    np.testing.assert_array_equal(b(jnp.ones(2)), np.full(2, 2.0))


def test_a_wrapper_equinox_made_is_refused_by_the_fast_call():
    with pytest.raises(TypeError, match="was not made by fastdispatch.filter_jit"):
        front.FilterJitWrapper.__call__(eqx.filter_jit(lambda x: x), jnp.ones(1))


def test_a_hand_off_names_the_user_function_in_the_trace():
    def loss(x):
        return (x**2).sum()

    f = fastdispatch.filter_jit(loss)
    with fastdispatch.trace() as t:
        f(jnp.ones(2))
        f(jnp.ones(2))
    (row,) = t.stats().values()
    assert row["name"] == "test_a_hand_off_names_the_user_function_in_the_trace.<locals>.loss"
    assert row["location"].endswith(f"test_function.py:{loss.__code__.co_firstlineno}")
    assert (row["calls"], row["hits"], row["compiles"]) == (2, 1, 1)


def test_plain_jit_reads_equinox_modules_in_c():
    # In a fresh process: this one has imported the front end already.
    run_in_subprocess(plain_jit_reads_equinox_modules_in_c, n_devices=1)
