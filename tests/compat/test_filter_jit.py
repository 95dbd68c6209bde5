"""The filter_jit contract: every test runs on equinox.filter_jit and on
fastdispatch.filter_jit, and asserts what equinox does (a difference is a bug).

Each call that the fast path serves is checked against the same call through
equinox where a test can compute both (``same_as_equinox``). A test that does
nothing but compare runs once, on fastdispatch (``against_equinox``): its equinox
run would compare equinox with itself.
"""

import threading
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from contract import TraceCounter, assert_same_tree


@pytest.fixture(params=["equinox", "fastdispatch"])
def filter_jit(request):
    """``equinox.filter_jit`` or ``fastdispatch.filter_jit``."""
    if request.param == "equinox":
        return eqx.filter_jit
    import fastdispatch

    return fastdispatch.filter_jit


against_equinox = pytest.mark.parametrize("filter_jit", ["fastdispatch"], indirect=True)


def same_as_equinox(filter_jit, fun, *args, donate="none", **kwargs):
    """Call ``fun`` through equinox and through ``filter_jit`` (twice: the first
    call compiles, the second is a hit); require the same outputs. With
    ``filter_jit`` being equinox's own, only call it: nothing to compare with."""
    if filter_jit is eqx.filter_jit:
        return filter_jit(fun, donate=donate)(*args, **kwargs)
    expected = eqx.filter_jit(fun, donate=donate)(*args, **kwargs)
    jitted = filter_jit(fun, donate=donate)
    for _ in range(2):
        got = jitted(*args, **kwargs)
        assert_same_outputs(got, expected)
    return got


def assert_same_outputs(got, expected):
    """Arrays as assert_same_tree compares them; every other leaf the same value."""
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(expected)
    assert got_tree == want_tree, (got_tree, want_tree)
    for a, b in zip(got_leaves, want_leaves):
        if isinstance(a, jax.Array) or isinstance(b, jax.Array):
            assert_same_tree(a, b)
        else:
            assert type(a) is type(b) and (a is b or a == b), (a, b)


def mlp(seed=0, **kwargs):
    options = dict(in_size=3, out_size=2, width_size=4, depth=2)
    options.update(kwargs)
    return eqx.nn.MLP(**options, key=jax.random.key(seed))


# -- results ---------------------------------------------------------------------


def test_arrays_are_traced_and_everything_else_is_static(filter_jit):
    def f(tree):
        return jax.tree.map(lambda x: x + 1 if eqx.is_array(x) else x, tree)

    marker = object()
    tree = [1, True, marker, {"a": jnp.ones(2), "t": (2.0, jnp.arange(3.0))}, "text", mlp()]
    out = same_as_equinox(filter_jit, f, tree)
    assert out[2] is marker and out[4] == "text"


@against_equinox
def test_module_forward_pass_and_training_step(filter_jit):
    model, x = mlp(), jnp.ones(3)
    same_as_equinox(filter_jit, lambda m, x: m(x), model, x)

    def step(model, x, y):
        def loss(m):
            return jnp.mean((jax.vmap(m)(x) - y) ** 2)

        value, grads = eqx.filter_value_and_grad(loss)(model)
        return eqx.apply_updates(model, jax.tree.map(lambda g: -0.1 * g, grads)), value

    xs, ys = jnp.ones((5, 3)), jnp.zeros((5, 2))
    same_as_equinox(filter_jit, step, model, xs, ys)
    jitted = filter_jit(step)
    reference = eqx.filter_jit(step)
    a = b = model
    for _ in range(3):  # outputs fed back
        (a, loss_a), (b, loss_b) = jitted(a, xs, ys), reference(b, xs, ys)
        assert_same_outputs((a, loss_a), (b, loss_b))


@against_equinox
def test_keyword_arguments_and_defaults(filter_jit):
    def f(x, y=2, *rest, scale, **extra):
        return x * y * scale + sum(rest) + sum(extra.values())

    x = jnp.arange(3.0)
    same_as_equinox(filter_jit, f, x, scale=jnp.float32(2))
    same_as_equinox(filter_jit, f, x, 3, 4.0, 5.0, scale=jnp.float32(2), a=jnp.ones(3))
    same_as_equinox(filter_jit, f, x, y=jnp.float32(3), scale=1.5)


def test_numpy_arrays_are_traced_python_scalars_static(filter_jit):
    count = TraceCounter()
    f = filter_jit(count(lambda x, n: x * n))
    np.testing.assert_array_equal(f(np.ones(3, np.float32), 2), np.full(3, 2.0))
    np.testing.assert_array_equal(f(jnp.ones(3), 2), np.full(3, 2.0))
    assert count.n == 1  # numpy and jax arrays of one aval share a trace
    f(jnp.ones(3), 3)
    assert count.n == 2  # a new static value retraces


class Tag:
    """A static leaf equal by value."""

    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Tag) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


def test_static_outputs_are_the_objects_the_trace_returned(filter_jit):
    first, second = Tag("a"), Tag("a")

    def f(x, tag):
        return x + 1, [tag]

    jitted = filter_jit(f)
    out1 = jitted(jnp.ones(2), first)
    out2 = jitted(jnp.ones(2), second)  # equal static: a hit, the trace's object back
    assert out1[1][0] is first and out2[1][0] is first
    assert out1[1] is not out2[1]  # containers are rebuilt every call


def test_one_true_and_one_point_zero_share_a_trace_as_equinox(filter_jit):
    count = TraceCounter()
    f = filter_jit(count(lambda x, n: (x, n)))
    outs = [f(jnp.ones(1), n)[1] for n in (1, True, 1.0)]
    assert count.n == 1 and outs == [1, 1, 1] and all(type(o) is int for o in outs)


# -- trace counts -------------------------------------------------------------------


def test_retraces_exactly_where_equinox_retraces(filter_jit):
    count = TraceCounter()
    f = filter_jit(count(lambda *args: None))
    calls = [
        (jnp.zeros(2),),
        (jnp.zeros(2),),
        (jnp.zeros(3),),
        ([jnp.zeros(2)],),
        ([jnp.zeros(2), jnp.zeros(3)],),
        ([jnp.zeros(2), True],),
        ([jnp.zeros(2), True],),
        ({"a": 1, "b": 1},),
        ({"a": 1, "b": 0},),
        ({"a": 1, "b": 0},),
        (jnp.zeros(2, jnp.int32),),
        (jnp.float32(1),),
        (jnp.asarray(1.0),),  # weakly typed: another entry
    ]
    seen = []
    for args in calls:
        f(*args)
        seen.append(count.n)
    assert seen == [1, 1, 2, 3, 4, 5, 5, 6, 7, 7, 8, 9, 10]


def test_wrappers_of_one_function_share_their_traces(filter_jit):
    count = TraceCounter()
    fun = count(lambda x: x * 2)
    for _ in range(3):
        filter_jit(fun)(jnp.ones(2))
    assert count.n == 1


def test_a_module_as_the_function_traces_its_arrays(filter_jit):
    count = TraceCounter()

    class Scale(eqx.Module):
        factor: jax.Array
        name: str = eqx.field(static=True)

        def __call__(self, x):
            count.n += 1
            return x * self.factor

    x = jnp.ones(2)
    assert float(filter_jit(Scale(jnp.float32(2), "a"))(x)[0]) == 2.0
    assert float(filter_jit(Scale(jnp.float32(3), "a"))(x)[0]) == 3.0
    assert count.n == 1  # array fields are traced
    filter_jit(Scale(jnp.float32(3), "b"))(x)
    assert count.n == 2  # static fields are not


# -- methods ---------------------------------------------------------------------


def test_methods_of_modules_and_plain_classes(filter_jit):
    count = TraceCounter()

    class Model(eqx.Module):
        weight: jax.Array
        width: int

        @filter_jit
        def __call__(self, x):
            count.n += 1
            return self.weight * x + self.width

        @filter_jit
        def double(self, x):
            return 2 * self(x)

    model = Model(jnp.arange(2.0), 1)
    x = jnp.ones(2)
    np.testing.assert_array_equal(model(x), np.array([1.0, 2.0]))
    np.testing.assert_array_equal(model.double(x), np.array([2.0, 4.0]))
    model(x)
    Model(jnp.ones(2), 1)(x)
    assert count.n == 1  # double's trace reuses __call__'s: same avals
    Model(jnp.ones(2), 5)(x)
    assert count.n == 2  # the int field is static
    bound = model.double
    assert isinstance(bound, eqx.Partial) and bound.args == (model,)
    assert jax.tree_util.tree_structure(bound) == jax.tree_util.tree_structure(
        eqx.Partial(type(model).__dict__["double"], model)
    )

    class Plain:
        def __init__(self):
            self.offset = 3

        @filter_jit
        def shift(self, x):
            return x + self.offset

    np.testing.assert_array_equal(Plain().shift(jnp.zeros(2)), np.full(2, 3.0))


def test_wrapper_is_equinox_s_module(filter_jit):
    def scale(x, factor=2.0):
        """Scale x."""
        return x * factor

    wrapped = filter_jit(scale)
    assert isinstance(wrapped, eqx._jit._JitWrapper)
    assert wrapped.__wrapped__ is scale
    assert wrapped.__name__ == "scale" and wrapped.__doc__ == "Scale x."
    assert "fn='test_wrapper_is_equinox_s_module.<locals>.scale'" in repr(wrapped)
    assert jax.tree_util.tree_leaves(wrapped) == jax.tree_util.tree_leaves(eqx.filter_jit(scale))


# -- donation --------------------------------------------------------------------


@pytest.mark.parametrize("donate", ["all", "all-except-first", "warn", "warn-except-first", "none"])
def test_donation_modes(filter_jit, donate):
    f = filter_jit(lambda x, y: (x + 1, y * 2), donate=donate)
    for _ in range(2):  # the compiling call, then a hit
        x, y = jnp.ones(3), jnp.ones(3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = f(x, y)
        np.testing.assert_array_equal(out[0], np.full(3, 2.0))
        donates_first = donate in ("all", "warn")
        donates_rest = donate != "none"
        assert x.is_deleted() == donates_first
        assert y.is_deleted() == donates_rest
        assert not caught


def test_donation_warning_once_per_compile(filter_jit):
    f = filter_jit(lambda x, y: x + jnp.sum(y), donate="warn")
    with pytest.warns(UserWarning, match="Some donated buffers were not usable") as record:
        f(jnp.array(1.0), jnp.ones(10))
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(jnp.array(1.0), jnp.ones(10))  # a hit: no warning


def test_donated_buffer_is_reused_and_a_deleted_input_fails(filter_jit):
    f = filter_jit(lambda x: x + 1, donate="all")
    x = jnp.ones(8)
    pointer = x.unsafe_buffer_pointer()
    out = f(x)
    assert x.is_deleted() and out.unsafe_buffer_pointer() == pointer
    f(jnp.ones(8))
    with pytest.raises((RuntimeError, ValueError)):
        f(x)


# -- AOT ---------------------------------------------------------------------------


def test_lower_and_compile(filter_jit):
    def f(x, n, *, scale):
        return x * n * scale

    wrapped = filter_jit(f)
    lowered = wrapped.lower(jnp.ones(3), 4, scale=jnp.float32(2))
    assert "stablehlo" in lowered.as_text() or "func.func" in lowered.as_text()
    compiled = lowered.compile()
    np.testing.assert_array_equal(compiled(jnp.ones(3), 4, scale=jnp.float32(2)), np.full(3, 8.0))


# -- transformations ------------------------------------------------------------------


def test_inside_and_around_transformations(filter_jit):
    count = TraceCounter()

    @filter_jit
    def f(x):
        count.n += 1
        return jnp.sin(x) * 2

    x = jnp.arange(3.0)
    np.testing.assert_allclose(jax.grad(lambda v: f(v).sum())(x), 2 * np.cos(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(f)(x), 2 * np.sin(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(f)(x), 2 * np.sin(np.arange(3.0)), rtol=1e-6)
    grad_f = filter_jit(eqx.filter_grad(lambda v: f(v).sum()))
    np.testing.assert_allclose(grad_f(x), 2 * np.cos(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(filter_jit(eqx.filter_vmap(f))(x), 2 * np.sin(np.arange(3.0)), rtol=1e-6)
    with jax.disable_jit():
        np.testing.assert_allclose(f(x), 2 * np.sin(np.arange(3.0)), rtol=1e-6)


# -- errors --------------------------------------------------------------------------


def test_bad_donate_and_jit_options(filter_jit):
    with pytest.raises(ValueError, match="must be one of 'all', 'all-except-first'"):
        filter_jit(lambda x: x, donate="some")
    with pytest.raises(ValueError, match="cannot contain 'static_argnums'"):
        filter_jit(lambda x: x, static_argnums=0)


def test_binding_and_tracing_errors(filter_jit):
    f = filter_jit(lambda x, y: x + y)
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        f(jnp.ones(2))
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'z'"):
        f(jnp.ones(2), jnp.ones(2), z=1)
    with pytest.raises(TypeError, match="add got incompatible shapes"):
        f(jnp.ones(2), jnp.ones(3))
    np.testing.assert_array_equal(f(jnp.ones(2), jnp.ones(2)), np.full(2, 2.0))


def test_unhashable_static_argument(filter_jit):
    f = filter_jit(lambda x, options: x)
    with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
        f(jnp.ones(1), {1, 2} and [{1, 2}])


def test_error_if_raises_equinox_runtime_error(filter_jit):
    @filter_jit
    def f(x):
        return eqx.error_if(x, x < 0, "negative input")

    np.testing.assert_array_equal(f(jnp.ones(2)), np.ones(2))
    for _ in range(2):
        with pytest.raises(eqx.EquinoxRuntimeError, match="negative input"):
            f(-jnp.ones(2))


# -- threads -----------------------------------------------------------------------


def test_threads_share_one_trace(filter_jit):
    count = TraceCounter()
    f = filter_jit(count(lambda x, n: x * n))
    results, errors = [None] * 8, []
    barrier = threading.Barrier(8)

    def work(i):
        try:
            barrier.wait()
            results[i] = [float(f(jnp.ones(()), i % 2)) for _ in range(20)]
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and all(not t.is_alive() for t in threads)
    assert results == [[float(i % 2)] * 20 for i in range(8)]
    assert count.n == 2
