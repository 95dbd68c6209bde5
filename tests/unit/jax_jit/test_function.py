"""fastdispatch.jax_jit.function: what the fast path takes, what it hands to jax, and why."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

import fastdispatch
from fastdispatch.tracing.explain import describe


def test_effects_run_on_the_fast_path(sink, capfd):
    f = fastdispatch.jit(lambda x: jax.debug.print("x={}", x) or x + 1)
    f(jnp.float32(1))
    f(jnp.float32(2))
    jax.effects_barrier()
    assert [(hit, hand_off) for _, hit, hand_off, _ in sink.calls] == [(False, None), (True, None)]
    assert capfd.readouterr().out.split() == ["x=1.0", "x=2.0"]


def test_ordered_effects_and_callbacks_run_on_the_fast_path(sink):
    log = []

    def step(x):
        y = io_callback(lambda v: log.append(int(v)) or np.asarray(v + 1, np.int32), x, x, ordered=True)
        jax.debug.callback(lambda v: None, y)
        return y

    f = fastdispatch.jit(step)
    x = jnp.int32(0)
    for _ in range(5):
        x = f(x)
    jax.effects_barrier()
    assert log == [0, 1, 2, 3, 4] and sink.reasons() == [None] * 5
    assert [entry.is_fast for entry in f._cache_entries()] == [True]


class Counted:
    """A registered node that counts its flattens (jax's and ours alike)."""

    flattens = 0

    def __init__(self, value):
        self.value = value


def _flatten_counted(node):
    Counted.flattens += 1
    return (node.value,), None


jax.tree_util.register_pytree_node(Counted, _flatten_counted, lambda _, children: Counted(*children))


def test_tree_calls_jax_takes_for_their_leaves_are_handed_off_before_flattening():
    f = fastdispatch.jit(lambda tree, x: tree.value * x)
    tree = Counted(jnp.ones(3))
    for i in range(3):  # a compile, then hits handed off after our flatten
        f(tree, np.full(3, i, np.float32))
    Counted.flattens = 0
    for i in range(128):  # new numpy bytes every call (repeating ones would run here)
        f(tree, np.full(3, i, np.float32))
    # jax.jit's own flatten every call; ours every 64th call only, to key it again.
    assert Counted.flattens == 128 + 2
    # Device arrays where the numpy argument was: a type the hand-off does
    # not cover, so the call is keyed and served here.
    np.testing.assert_array_equal(f(tree, jnp.full(3, 2.0)), np.full(3, 2.0))


def test_a_tree_call_with_a_value_jax_raises_for_goes_to_jax_before_flattening(sink):
    def scaled(tree, step):
        return sum(tree.value) * step

    # 20 arrays beside the step: the fast path converts a new step itself.
    tree = Counted([jnp.full(3, float(i)) for i in range(20)])
    flattens = []
    for f in (jax.jit(scaled), fastdispatch.jit(scaled)):
        f(tree, 3)
        sink.calls.clear()
        Counted.flattens = 0
        for _ in range(63):
            with pytest.raises(OverflowError):
                f(tree, 2**40)  # too large for int32: jax.jit's OverflowError
        flattens.append(Counted.flattens)
    # Ours flattened the first (to find its entry and try the value); the
    # rest went to jax.jit unflattened, as each was to raise there.
    assert flattens[1] == flattens[0] + 1
    assert set(sink.reasons()) == {"scalar_conversion"}
    np.testing.assert_array_equal(f(tree, 2), np.full(3, 380.0))


def test_unhashable_static_argument_gets_jax_error(sink):
    f = fastdispatch.jit(lambda x, opts: x, static_argnums=1)
    with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
        f(jnp.ones(1), ["not", "hashable"])
    assert sink.reasons() == ["static_argument_error"]


class Flagged:
    """A static argument hashable or not by a flag; all instances are equal."""

    def __init__(self, hashable):
        self.hashable = hashable

    def __hash__(self):
        if not self.hashable:
            raise TypeError("unhashable Flagged")
        return 0

    def __eq__(self, other):
        return type(other) is Flagged


def test_calls_shaped_as_a_refused_one_go_to_jax_before_flattening(sink):
    f = fastdispatch.jit(lambda tree, opts: tree.value * 2, static_argnums=1)
    tree = Counted(jnp.ones(3))
    for _ in range(2):  # refused by the fast path, then handed off unflattened
        with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
            f(tree, Flagged(hashable=False))
    assert sink.reasons() == ["static_argument_error"] * 2
    sink.calls.clear()
    f(tree, Flagged(hashable=True))  # a call of that shape goes to jax.jit, raising or not
    Counted.flattens = 0  # (its compile flattens more)
    for _ in range(61):
        np.testing.assert_array_equal(f(tree, Flagged(hashable=True)), np.full(3, 2.0))
    assert Counted.flattens == 61  # jax.jit's own, never ours
    assert sink.reasons() == ["static_argument_error"] * 62
    sink.calls.clear()
    for _ in range(3):  # the 64th after the refusal goes the whole way: compiled, then hits
        np.testing.assert_array_equal(f(tree, Flagged(hashable=True)), np.full(3, 2.0))
    assert sink.reasons() == [None] * 3


def test_signature_describes_arguments_by_name(sink):
    @fastdispatch.jit
    def step(params, lr, *, batch):
        return params

    step({"w": jnp.ones((2, 3))}, 0.1, batch=jnp.ones(4, jnp.int32))
    described = describe(sink.calls[0][3])
    assert [(leaf.label, leaf.text) for leaf in described.args] == [
        ("params['w']", "f32[2,3]"),
        ("lr", "f32[]{weak}"),
        ("batch", "i32[4]"),
    ]
    assert [leaf.argument for leaf in described.args] == ["params", "lr", "batch"]
    assert dict(described.context)["jax_enable_x64"] == "False"
    # The core's own text: a Python scalar by its type, before jax gives it an aval.
    assert repr(sink.calls[0][3]) == "CallSignature(params['w']: f32[2,3], lr: float, batch: i32[4])"


def test_every_way_into_a_call_gives_the_same_result(sink):
    f = fastdispatch.jit(lambda x, y=1.0: x * y)
    x = jnp.arange(3.0)
    want = np.arange(3.0) * 2
    calls = [
        lambda: f(x, 2.0),  # vectorcall, flat
        lambda: f(x, y=2.0),  # vectorcall with keyword names
        lambda: functools.partial(f, x)(2.0),  # PyObject_Call: tp_call
        lambda: f(*[x, 2.0]),  # star-args
        lambda: f(**{"x": x, "y": 2.0}),  # keywords only
    ]
    for call in calls * 2:
        np.testing.assert_array_equal(call(), want)
    assert {hand_off for _, _, hand_off, _ in sink.calls} == {None}


def test_method_call_binds_self():
    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        def __hash__(self):
            return hash(self.factor)

        def __eq__(self, other):
            return isinstance(other, Scaler) and other.factor == self.factor

        @functools.partial(fastdispatch.jit, static_argnums=0)
        def scale(self, x):
            return x * self.factor

    x = jnp.ones(2)
    assert float(Scaler(3).scale(x)[0]) == 3.0
    assert float(Scaler(3).scale(x)[0]) == 3.0
    assert float(Scaler(4).scale(x)[0]) == 4.0
    assert Scaler.scale._cache_size() == 2


def test_keyword_calls_from_one_call_site_stay_right(sink):
    f = fastdispatch.jit(lambda x, *, y, mode: x + y if mode == "add" else x * y, static_argnames="mode")
    x, y = jnp.full(2, 3.0), jnp.full(2, 2.0)
    modes = ["add", "add", "mul", "add", "mul", "mul"]
    results = [float(f(x, y=y, mode=mode)[0]) for mode in modes]
    assert results == [5.0, 5.0, 6.0, 5.0, 6.0, 6.0]
    # Keywords unpacked from dicts (a new names tuple each call), either order.
    unpacked = [float(f(x, **{"y": y, "mode": mode})[0]) for mode in modes]
    unpacked += [float(f(x, **{"mode": mode, "y": y})[0]) for mode in modes]
    assert unpacked == results * 2
    # Same names, another order, another call site: same executables.
    assert float(f(x, mode="mul", y=y)[0]) == 6.0 and f._cache_size() == 2
    # A static value of another type but equal (1 == 1.0 == True) is another key.
    g = fastdispatch.jit(lambda x, *, n: x * n, static_argnames="n")
    assert [g(x, n=n).dtype for n in (2, 2.0, 2)] == [jnp.float32] * 3
    assert g._cache_size() == 2
    assert {hand_off for _, _, hand_off, _ in sink.calls} == {None}


def test_keyword_leaves_that_change_kind_leave_the_layout():
    f = fastdispatch.jit(lambda x, *, y: jax.tree.map(lambda a: a + x, y))
    x = jnp.ones(2)
    assert float(f(x, y=jnp.zeros(2))[0]) == 1.0
    assert float(f(x, y={"a": jnp.zeros(2)})["a"][0]) == 1.0
    assert float(f(x, y=2.0)[0]) == 3.0
    assert float(f(x, y=jnp.zeros(2))[0]) == 1.0
    assert f._cache_size() == 3


def test_lists_of_leaves_on_the_layout_path_stay_right(sink):
    # f(x, 2, w=[...], b=[...], mode=...): the layout reads the lists' items in
    # place; a list of another length, type or content is a new structure.
    def dense(x, n, *, w, b, mode):
        for wi, bi in zip(w, b):
            x = x @ wi + jax.tree.leaves(bi)[0]  # bi may be a nested list
        return x * n if mode == "train" else x

    opts = {"static_argnums": (1,), "static_argnames": ("mode",)}
    ours, theirs = fastdispatch.jit(dense, **opts), jax.jit(dense, **opts)
    x = jnp.ones((1, 2))
    w = [jnp.eye(2), 2 * jnp.eye(2)]
    b = [jnp.zeros(2), jnp.ones(2)]
    calls = [
        dict(w=w, b=b, mode="train"),
        dict(w=w, b=b, mode="train"),  # the layout's hit
        dict(w=[w[0], w[1] * 3], b=b, mode="train"),  # new values, same structure
        dict(w=w[:1], b=b[:1], mode="train"),  # shorter lists
        dict(w=tuple(w), b=tuple(b), mode="train"),  # tuples, not lists
        dict(w=w, b=[b[0], np.ones(2, np.float32)], mode="train"),  # a numpy item
        dict(w=w, b=[b[0], 1.0], mode="eval"),  # a Python scalar item, another static
        dict(w=w, b=[b[0], [b[1]]], mode="train"),  # a nested list: not a leaf
        dict(w=w, b=b, mode="train"),
    ]
    for kwargs in calls:
        expected = theirs(x, 2, **kwargs)
        got = ours(x, 2, **kwargs)
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == expected.dtype and got.weak_type == expected.weak_type
    # The same keys as jax's: one executable per structure, each compiled once.
    assert ours._cache_size() == theirs._cache_size()
    assert [call.hit for call in sink.calls[:3]] == [False, True, True]


def test_static_keyword_whose_eq_raises_on_the_layout_path(sink):
    class Flaky:
        calls = 0

        def __hash__(self):
            return 1

        def __eq__(self, other):
            Flaky.calls += 1
            raise RuntimeError("no eq")

    f = fastdispatch.jit(lambda x, *, option: x, static_argnames="option")
    g = jax.jit(lambda x, *, option: x, static_argnames="option")
    x = jnp.ones(1)
    first = Flaky()
    f(x, option=first)
    # The very same object again: the layout guard matches it by identity, so the
    # call is a hit that never asks __eq__.
    np.testing.assert_array_equal(f(x, option=first), x)
    assert sink.calls[-1].hit and Flaky.calls == 0
    with pytest.raises(ValueError) as ours:
        f(x, option=Flaky())
    g(x, option=first)
    with pytest.raises(ValueError) as theirs:
        g(x, option=Flaky())
    assert str(ours.value).split("\n")[0] == str(theirs.value).split("\n")[0]


def test_uninitialised_compiled_function_refuses_calls():
    bare = fastdispatch.CompiledFunction.__new__(fastdispatch.CompiledFunction)
    with pytest.raises(TypeError, match="created without __init__"):
        bare(jnp.ones(1))
