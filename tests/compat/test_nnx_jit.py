"""The nnx.jit contract: every test runs on flax.nnx.jit and on fastdispatch.nnx.jit,
and asserts what flax does (a difference is a bug).

Scenarios build fresh objects, run a few calls and return what they saw;
``same_as_flax`` runs a scenario once through each implementation and requires
the same outputs, the same final state of every Variable and the same trace
count. A test that does nothing else runs once, on fastdispatch
(``against_flax``): its flax run would compare flax with itself, and its
scenario's own assertions run on both implementations anyway.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import errors as flax_errors
from flax import nnx


@pytest.fixture(params=["flax", "fastdispatch"])
def nnx_jit(request):
    """``flax.nnx.jit`` or ``fastdispatch.nnx.jit``."""
    if request.param == "flax":
        return nnx.jit
    from fastdispatch import nnx as fastdispatch_nnx

    return fastdispatch_nnx.jit


against_flax = pytest.mark.parametrize("nnx_jit", ["fastdispatch"], indirect=True)


def values(tree):
    """Every array in a tree of Modules, Variables and outputs, as numpy, by path."""
    state = nnx.state(tree) if not isinstance(tree, jax.Array) else tree
    return [(path, _numpy(leaf)) for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]]


def _numpy(leaf):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def assert_same_values(a, b):
    assert [path for path, _ in a] == [path for path, _ in b]
    for (path, x), (_, y) in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y), path


def same_as_flax(nnx_jit, scenario):
    """Run ``scenario(jit)`` with nnx_jit and with flax's; same outputs and states.
    With ``nnx_jit`` being flax's own, run it once: nothing to compare with."""
    got = scenario(nnx_jit)
    if nnx_jit is nnx.jit:
        return got
    want = scenario(nnx.jit)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert_same_values(values(a), values(b))
    return got


class Counter(nnx.Module):
    def __init__(self):
        self.count = nnx.BatchStat(jnp.array(0, jnp.int32))
        self.total = nnx.Param(jnp.zeros(3))

    def __call__(self, x):
        self.count[...] += 1
        self.total[...] += x
        return self.total[...] * 2


class MLP(nnx.Module):
    def __init__(self, rngs, dropout=0.0, batch_norm=False):
        self.l1 = nnx.Linear(4, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs) if batch_norm else None
        self.drop = nnx.Dropout(dropout, rngs=rngs)
        self.l2 = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x):
        x = self.l1(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.l2(self.drop(jax.nn.relu(x)))


X, Y = jnp.linspace(-1, 1, 32).reshape(8, 4), jnp.linspace(0, 1, 8).reshape(8, 1)


def train_step(model, optimizer, x, y):
    def loss_fn(m):
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


# -- updates reach the caller's objects ---------------------------------------------


@against_flax
def test_in_place_updates_propagate(nnx_jit):
    def scenario(jit):
        counter = Counter()
        step = jit(lambda c, x: c(x))
        outs = [step(counter, jnp.ones(3) * i) for i in range(4)]
        assert int(counter.count[...]) == 4
        np.testing.assert_array_equal(counter.total[...], np.full(3, 6.0))
        return outs + [counter]

    same_as_flax(nnx_jit, scenario)


@against_flax
def test_a_python_int_step_counter_updates_the_module(nnx_jit):
    # Each call's int is new: the fast path hands those calls to flax, which
    # must still write the update back.
    def scenario(jit):
        counter = Counter()
        step = jit(lambda c, x, i: c(x * i))
        outs = [step(counter, jnp.ones(3), i) for i in range(6)]
        assert int(counter.count[...]) == 6
        np.testing.assert_array_equal(counter.total[...], np.full(3, 15.0))
        return outs + [counter]

    same_as_flax(nnx_jit, scenario)


def test_variables_keep_their_identity_and_traces_are_not_repeated(nnx_jit):
    traces = []

    def step(counter, x):
        traces.append(1)
        return counter(x)

    counter = Counter()
    count, total = counter.count, counter.total
    jitted = nnx_jit(step)
    for _ in range(3):
        jitted(counter, jnp.ones(3))
    assert counter.count is count and counter.total is total
    assert len(traces) == 1


@against_flax
def test_shared_variables_are_updated_once(nnx_jit):
    def scenario(jit):
        a, b = Counter(), Counter()
        b.total = a.total  # one Variable reachable from both

        @jit
        def step(a, b):
            a.total[...] += 1
            b.total[...] += 10

        for _ in range(3):
            step(a, b)
        assert a.total is b.total
        np.testing.assert_array_equal(a.total[...], np.full(3, 33.0))
        return [a, b]

    same_as_flax(nnx_jit, scenario)


@against_flax
def test_optimizer_step(nnx_jit):
    def scenario(jit):
        model = MLP(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
        step = jit(train_step)
        losses = [step(model, optimizer, X, Y) for _ in range(5)]
        assert int(optimizer.step[...]) == 5
        return losses + [model, optimizer]

    same_as_flax(nnx_jit, scenario)


def test_batch_norm_statistics_and_eval_mode(nnx_jit):
    def scenario(jit):
        model = MLP(nnx.Rngs(0), batch_norm=True)
        forward = jit(lambda m, x: m(x))
        outs = [forward(model, X * (i + 1)) for i in range(3)]
        model.eval()
        outs += [forward(model, X) for _ in range(2)]
        model.train()
        outs.append(forward(model, X))
        return outs + [model]

    got = same_as_flax(nnx_jit, scenario)
    assert not np.array_equal(np.asarray(got[3]), np.asarray(got[5]))  # running averages used


@against_flax
def test_dropout_with_rngs(nnx_jit):
    def scenario(jit):
        model = MLP(nnx.Rngs(0, dropout=1), dropout=0.5)
        forward = jit(lambda m, x: m(x))
        outs = [forward(model, X) for _ in range(3)]
        assert not np.array_equal(np.asarray(outs[0]), np.asarray(outs[1]))  # new masks each call
        return outs + [model]

    same_as_flax(nnx_jit, scenario)


@against_flax
def test_rngs_as_an_argument(nnx_jit):
    def scenario(jit):
        rngs = nnx.Rngs(params=0, noise=1)
        sample = jit(lambda rngs, shape_like: jax.random.normal(rngs.noise(), shape_like.shape))
        outs = [sample(rngs, jnp.zeros(3)) for _ in range(3)]
        return outs + [rngs]

    same_as_flax(nnx_jit, scenario)


# -- graph updates --------------------------------------------------------------------


@against_flax
def test_new_attributes_and_replaced_submodules(nnx_jit):
    def scenario(jit):
        model = MLP(nnx.Rngs(0))

        @jit
        def grow(m):
            m.extra = nnx.Param(jnp.ones(2))
            m.l1, m.l2 = m.l1, nnx.Linear(8, 1, rngs=nnx.Rngs(5))

        old_l2 = model.l2
        grow(model)
        assert model.l2 is not old_l2 and isinstance(model.extra, nnx.Param)
        grow(model)
        return [model]

    same_as_flax(nnx_jit, scenario)


def test_swapped_submodules_swap_identities(nnx_jit):
    model = MLP(nnx.Rngs(0))
    l1, l2 = model.l1, model.l2

    @nnx_jit
    def swap(m):
        m.l1, m.l2 = m.l2, m.l1

    swap(model)
    assert model.l1 is l2 and model.l2 is l1
    swap(model)
    assert model.l1 is l1 and model.l2 is l2


def test_returning_the_input_module(nnx_jit):
    counter = Counter()
    step = nnx_jit(lambda c: (c, c.count[...] + 1))
    for _ in range(2):
        out, value = step(counter)
        assert out is counter
    assert int(value) == 1


# -- options --------------------------------------------------------------------------


def test_static_arguments(nnx_jit):
    traces = []

    def apply(counter, x, double):
        traces.append(double)
        return counter(x) * (2 if double else 1)

    counter = Counter()
    jitted = nnx_jit(apply, static_argnums=2)
    for double in (True, True, False, True):
        jitted(counter, jnp.ones(3), double)
    assert traces == [True, False]
    named = nnx_jit(apply, static_argnames="double")
    named(counter, jnp.ones(3), double=True)
    named(counter, jnp.ones(3), double=True)
    assert int(counter.count[...]) == 6


@against_flax
def test_static_values_alternating_on_one_graph_run_their_own_executables(nnx_jit):
    # One graph, two static values: each value's calls run the executable
    # compiled for it, never the other's (its record's entry is keyed by it).
    def scenario(jit):
        def apply(counter, x, scale):
            return counter(x) * scale

        counter = Counter()
        jitted = jit(apply, static_argnums=2)
        named = jit(apply, static_argnames="scale")
        outs = [jitted(counter, jnp.ones(3), scale) for scale in (1, 2, 1, 2, 3, 1, 2)]
        outs += [named(counter, jnp.ones(3), scale=scale) for scale in (1, 2, 1, 2)]
        return [counter, *outs]

    same_as_flax(nnx_jit, scenario)


@against_flax
def test_donated_module(nnx_jit):
    def scenario(jit):
        counter = Counter()
        step = jit(lambda c, x: c(x), donate_argnums=0)
        outs = []
        for i in range(3):
            old = counter.total[...]
            outs.append(step(counter, jnp.ones(3) * i))
            assert old.is_deleted()
        return outs + [counter]

    same_as_flax(nnx_jit, scenario)


def test_methods(nnx_jit):
    class Scaler(nnx.Module):
        def __init__(self):
            self.factor = nnx.Param(jnp.float32(3))
            self.calls = nnx.BatchStat(jnp.array(0))

        @nnx_jit
        def __call__(self, x):
            self.calls[...] += 1
            return self.factor * x

    scaler = Scaler()
    for _ in range(3):
        assert float(scaler(jnp.float32(2))) == 6.0
    assert int(scaler.calls[...]) == 3


def test_modes_other_than_graph_updates(nnx_jit):
    counter = Counter()
    for options in (dict(graph=False), dict(graph=True, graph_updates=False)):
        step = nnx_jit(lambda c, x: c(x), **options)
        step(counter, jnp.ones(3))
        step(counter, jnp.ones(3))
    assert int(counter.count[...]) == 4


def test_lower_and_eval_shape(nnx_jit):
    counter = Counter()
    jitted = nnx_jit(lambda c, x: c(x))
    assert "stablehlo" in jitted.lower(counter, jnp.ones(3)).as_text()
    assert jitted.eval_shape(counter, jnp.ones(3)).shape == (3,)
    assert int(counter.count[...]) == 0  # eval_shape works on a clone


def test_attributes_of_flax_wrapper(nnx_jit):
    def fun(c, x):
        return c(x)

    jitted = nnx_jit(fun, static_argnums=(), donate_argnums=0)
    assert jitted.fun is fun and jitted.__wrapped__ is fun
    assert (jitted.in_shardings, jitted.out_shardings, jitted.static_argnums) == (None, None, ())
    assert callable(jitted.jitted_fn)
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        getattr(jitted, "missing")  # noqa: B009
    assert not hasattr(jitted, "__deepcopy__")


# -- errors ----------------------------------------------------------------------------


def test_mutating_a_captured_module_is_an_error(nnx_jit):
    captured = Counter()

    @nnx_jit
    def step(x):
        captured.count[...] += 1
        return x

    with pytest.raises(flax_errors.TraceContextError, match="Cannot mutate BatchStat from a different trace"):
        step(jnp.ones(1))


def test_bound_methods_are_refused(nnx_jit):
    counter = Counter()
    with pytest.raises(ValueError, match="does not support bound methods"):
        nnx_jit(counter.__call__)


def test_graph_node_prefix_is_refused(nnx_jit):
    with pytest.raises(ValueError, match="Graph nodes are not allowed as prefixes"):
        nnx_jit(lambda x: x, in_shardings=Counter())


def test_shared_variables_in_tree_mode_are_an_error(nnx_jit):
    counter = Counter()
    step = nnx_jit(lambda a, b: None, graph=False)
    with pytest.raises(ValueError, match="found at paths"):
        step(counter.total, counter.total)


def test_trace_errors_leave_the_function_usable(nnx_jit):
    counter = Counter()
    step = nnx_jit(lambda c, x: c(x))
    with pytest.raises(TypeError):
        step(counter, jnp.ones(4))  # the wrong shape for total
    np.testing.assert_array_equal(step(counter, jnp.ones(3)), np.full(3, 2.0))
