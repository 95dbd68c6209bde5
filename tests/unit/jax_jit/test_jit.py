"""fastdispatch.jax_jit.function: what the fast path takes, what it hands to jax, and why."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

import fastdispatch
from fastdispatch.tracing.explain import describe


def reasons(sink):
    return [hand_off for _, _, hand_off, _ in sink.calls]


def test_hits_stay_on_the_fast_path(sink):
    @fastdispatch.jit
    def add(x, y):
        return x + y

    x = jnp.ones(3)
    for _ in range(3):
        add(x, x)
    assert [(hit, hand_off) for _, hit, hand_off, _ in sink.calls] == [
        (False, None),
        (True, None),
        (True, None),
    ]


def test_fed_back_outputs_hit_after_a_first_call_with_other_avals(sink):
    step = fastdispatch.jit(lambda p: jax.tree.map(lambda a: a * 0.5, p))
    params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
    for _ in range(4):
        params = step(params)
    assert reasons(sink) == [None] * 4 and step._cache_size() == 1
    np.testing.assert_array_equal(params["b"], np.full(2, 1 / 16))


@pytest.mark.parametrize("in_trees", [False, True], ids=["arguments", "trees"])
def test_a_fresh_batch_each_step_is_taken_by_the_guard(sink, in_trees):
    # A batch put on the device each step holds objects of its own (here its
    # sharding): the guard takes them in place of the previous call's (the
    # argument array's guard, or Engine.find's for trees), so no signature
    # is made and the entry's own holds the latest batch's objects.
    fun = (lambda p, b: p["w"] @ b["x"]) if in_trees else (lambda w, x: w @ x)
    f = fastdispatch.jit(fun)
    w = jnp.ones((2, 3))
    shardings = []
    for step in range(4):
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        batch = jax.device_put(np.full(3, step, np.float32), sharding)
        args = ({"w": w}, {"x": batch}) if in_trees else (w, batch)
        np.testing.assert_array_equal(f(*args), np.full(2, 3.0 * step))
        shardings.append(sharding)
    (entry,) = f._cache_entries()
    assert entry.signature.leaf_keys()[-1].sharding is shardings[-1]
    assert reasons(sink) == [None] * 4 and [hit for _, hit, _, _ in sink.calls][1:] == [True] * 3


def test_transformations_and_configs_go_to_jax(sink):
    f = fastdispatch.jit(lambda x: jnp.sin(x) * 2)
    x = jnp.ones(2)
    f(x)
    jax.grad(lambda v: f(v).sum())(x)
    with jax.disable_jit():
        f(x)
    jax.jit(lambda v: f(x) + v)(1.0)  # a closed-over concrete array inside a trace
    assert reasons(sink)[1:] == ["tracer", "disable_jit", "tracer"]
    assert f._cache_size() == 1


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
    assert log == [0, 1, 2, 3, 4] and reasons(sink) == [None] * 5
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


def test_unhashable_static_argument_gets_jax_error(sink):
    f = fastdispatch.jit(lambda x, opts: x, static_argnums=1)
    with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
        f(jnp.ones(1), ["not", "hashable"])
    assert reasons(sink) == ["static_argument_error"]


def test_an_error_jax_raises_on_a_hand_off_crosses_three_of_our_frames():
    # The hand-off runs at the bottom of our stack (Engine.call): each of our
    # frames an error crosses adds a traceback entry, at ~0.2 us each.
    f = fastdispatch.jit(lambda x, opts: x, static_argnums=1)
    with pytest.raises(ValueError, match="Non-hashable static arguments") as raised:
        f(jnp.ones(1), ["not", "hashable"])
    ours = [entry for entry in raised.traceback if "fastdispatch" in str(entry.path)]
    assert [entry.name for entry in ours] == [
        "fastdispatch.core.engine._vectorcall",
        "fastdispatch.core.engine.Engine.call",
        "fastdispatch.jax_jit.function.CompiledFunction.library_call",
    ]


def test_an_error_jax_raises_on_a_miss_crosses_into_the_front_end_once():
    # A miss takes the front end's parse (returned by then) and its cache_miss,
    # which runs jax.jit's call: the only front-end frame the error crosses.
    def fails(x):
        raise KeyError("traced")

    f = fastdispatch.jit(fails)
    with pytest.raises(KeyError, match="traced") as raised:
        f(jnp.ones(1))
    names = [entry.name for entry in raised.traceback if "fastdispatch" in str(entry.path)]
    # (Cython adds an entry at a re-raise and at a with block's exit too.)
    frames = [name for i, name in enumerate(names) if i == 0 or name != names[i - 1]]
    assert frames == [
        "fastdispatch.core.engine._vectorcall",
        "fastdispatch.core.engine.Engine.call",
        "fastdispatch.core.engine.Engine.find",
        "fastdispatch.core.engine.Engine.compile",
        "fastdispatch.jax_jit.function.CompiledFunction.cache_miss",
    ]
    assert f._cache_entries() == []  # the failed entry is not kept


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
    assert reasons(sink) == ["static_argument_error"] * 2
    sink.calls.clear()
    f(tree, Flagged(hashable=True))  # a call of that shape goes to jax.jit, raising or not
    Counted.flattens = 0  # (its compile flattens more)
    for _ in range(61):
        np.testing.assert_array_equal(f(tree, Flagged(hashable=True)), np.full(3, 2.0))
    assert Counted.flattens == 61  # jax.jit's own, never ours
    assert reasons(sink) == ["static_argument_error"] * 62
    sink.calls.clear()
    for _ in range(3):  # the 64th after the refusal goes the whole way: compiled, then hits
        np.testing.assert_array_equal(f(tree, Flagged(hashable=True)), np.full(3, 2.0))
    assert reasons(sink) == [None] * 3


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


def test_static_arguments_in_signature(sink):
    f = fastdispatch.jit(lambda x, mode: x, static_argnames="mode")
    f(jnp.ones(1), mode="train")
    f(jnp.ones(1), mode="eval")
    assert [describe(call[3]).static for call in sink.calls] == [
        (("mode", "'train'"),),
        (("mode", "'eval'"),),
    ]
    assert f._cache_size() == 2


def test_negative_static_argnums_count_from_the_end():
    f = fastdispatch.jit(lambda x, n: x * n, static_argnums=-1)
    assert float(f(jnp.float32(2), 3)) == 6.0
    assert float(f(jnp.float32(2), 4)) == 8.0
    assert f._cache_size() == 2


def test_compile_errors_are_recorded_and_leave_no_entry(sink):
    f = fastdispatch.jit(lambda x: x.reshape(7))
    for _ in range(2):
        with pytest.raises(TypeError):
            f(jnp.ones(3))
    assert reasons(sink) == ["compile_error", "compile_error"]
    assert f._cache_size() == 0


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
