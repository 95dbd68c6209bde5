"""core.engine: the steps of a call, as any front end's calls take them:
hits on the fast path (the guard takes fed-back outputs and fresh batches),
jax's state read first (a transformation tracing, a config), compiles and
their errors, and the frames an error crosses."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch


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
    assert sink.reasons() == [None] * 4 and step._cache_size() == 1
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
    assert sink.reasons() == [None] * 4 and [hit for _, hit, _, _ in sink.calls][1:] == [True] * 3


def test_transformations_and_configs_go_to_jax(sink):
    f = fastdispatch.jit(lambda x: jnp.sin(x) * 2)
    x = jnp.ones(2)
    f(x)
    jax.grad(lambda v: f(v).sum())(x)
    with jax.disable_jit():
        f(x)
    jax.jit(lambda v: f(x) + v)(1.0)  # a closed-over concrete array inside a trace
    assert sink.reasons()[1:] == ["tracer", "disable_jit", "tracer"]
    assert f._cache_size() == 1


def _jit_front():
    def matmul(x, y):
        return x @ y

    return fastdispatch.jit(matmul), jax.jit(matmul), (jnp.ones((3, 3)), jnp.ones(3))


def _filter_jit_front():
    import equinox as eqx

    model = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.key(0))
    return fastdispatch.filter_jit(lambda m, x: m(x)), eqx.filter_jit(lambda m, x: m(x)), (model, jnp.ones(3))


@pytest.mark.parametrize("front", [_jit_front, _filter_jit_front], ids=["jit", "filter_jit"])
def test_a_guessed_entry_of_another_trace_context_never_runs(sink, front):
    # A front end's guard proves a call passes the previous call's arguments;
    # the engine checks the entry's trace context against the call's: under
    # another (a setting changed), the call is parsed again and compiled for
    # it, then served in either context by its own entry.
    ours, theirs, args = front()
    expected = theirs(*args)
    precise = jax.default_matmul_precision("highest")
    for context in (None, None, precise, precise, None, precise):
        with context or contextlib.nullcontext():
            np.testing.assert_array_equal(ours(*args), expected)
    assert sink.outcomes() == ["compile", "hit", "compile", "hit", "hit", "hit"]
    assert getattr(ours, "_cached", ours)._cache_size() == 2  # one entry each context


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


def test_compile_errors_are_recorded_and_leave_no_entry(sink):
    f = fastdispatch.jit(lambda x: x.reshape(7))
    for _ in range(2):
        with pytest.raises(TypeError):
            f(jnp.ones(3))
    assert sink.reasons() == ["compile_error", "compile_error"]
    assert f._cache_size() == 0


def test_clear_cache_forgets_the_previous_call_and_the_hand_off_memo(sink):
    decay = fastdispatch.jit(lambda params, step: jax.tree.map(lambda p: p * 0.9**step, params))
    params = {"w": jnp.ones(3), "b": jnp.ones(2)}
    for step in range(3):
        decay(params, step)
    # jax.jit converts a new Python scalar faster: the second call's reason,
    # the third's from the memo, before the call is read.
    assert sink.outcomes() == ["compile", "new scalar value", "new scalar value"]
    decay.clear_cache()
    out = decay(params, 3)
    assert sink.outcomes()[3] == "compile"  # read whole: nothing remembered
    np.testing.assert_allclose(out["w"], np.full(3, 0.9**3), rtol=1e-6)
