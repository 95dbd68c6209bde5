"""fastdispatch.nnx.jit against flax's nnx.jit on generated programs: a model
called through a jitted step that updates its state, with the model changed
between calls as programs change theirs (a parameter's value set, its shape
changed, a layer replaced, an attribute added, a static setting flipped, a
Variable shared between two places).  After every call the outputs (or the
error), every Variable of the model, and the trace counts must be flax's.
Each implementation has its own model, built and changed the same way."""

import jax
import jax.numpy as jnp
import numpy as np
from compat.contract import TraceCounter, assert_same_tree
from frontends import import_flax
from fuzzing import assert_same_outcome, fuzz_settings, outcome
from hypothesis import given
from hypothesis import strategies as st

import_flax()
from flax import nnx  # noqa: E402


class Count(nnx.Variable):
    pass


class Model(nnx.Module):
    def __init__(self, width=4):
        self.first = nnx.Linear(3, width, rngs=nnx.Rngs(0))
        self.second = nnx.Linear(width, 2, rngs=nnx.Rngs(1))
        self.calls = Count(jnp.zeros((), jnp.int32))
        self.scale = 1.0  # static: a change retraces

    def __call__(self, x):
        self.calls.value += 1
        return self.second(jax.nn.relu(self.first(x))) * self.scale


def step(model, x):
    out = model(x)
    return out, jnp.sum(out)


def set_value(model):
    kernel = model.first.kernel  # get_value and set_value: flax 0.12 deprecates .value
    kernel.set_value(kernel.get_value() * 0.5 + 1.0)


def change_shape(model):
    model.first = nnx.Linear(3, 5, rngs=nnx.Rngs(2))
    model.second = nnx.Linear(5, 2, rngs=nnx.Rngs(3))


def replace_layer(model):
    model.second = nnx.Linear(model.second.in_features, 2, rngs=nnx.Rngs(4))


def add_attribute(model):
    model.extra = nnx.Param(jnp.ones(2))


def flip_static(model):
    model.scale = 2.0 if model.scale == 1.0 else 1.0


def share_variable(model):
    model.alias = model.calls  # the same Variable in two places of the graph


def set_wrong_shape(model):
    model.first.kernel.set_value(jnp.ones((2, 2)))  # the call fails, as flax's does


MUTATIONS = {
    f.__name__: f
    for f in (
        set_value,
        change_shape,
        replace_layer,
        add_attribute,
        flip_static,
        share_variable,
        set_wrong_shape,
    )
}


def state_of(model):
    """Every Variable of the model, by path, as numpy."""
    flat = jax.tree_util.tree_flatten_with_path(nnx.state(model))[0]
    return [(jax.tree_util.keystr(path), np.asarray(leaf)) for path, leaf in flat]


def same_state(ours, theirs):
    assert [path for path, _ in ours] == [path for path, _ in theirs]
    for (path, a), (_, b) in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        np.testing.assert_array_equal(a, b, err_msg=path)


@fuzz_settings
@given(
    program=st.lists(
        st.one_of(st.just("call"), st.just("call"), st.sampled_from(sorted(MUTATIONS))),
        min_size=1,
        max_size=8,
    ),
    batch=st.sampled_from([1, 2]),
)
def test_model_changes_between_calls_match_flax(program, batch):
    from fastdispatch import nnx as fastdispatch_nnx

    ours_count, theirs_count = TraceCounter(), TraceCounter()
    ours_step = fastdispatch_nnx.jit(ours_count(step))
    theirs_step = nnx.jit(theirs_count(step))
    ours_model, theirs_model = Model(), Model()
    x = jnp.arange(3 * batch, dtype=jnp.float32).reshape(batch, 3)
    for action in program:
        if action == "call":
            got = outcome(lambda: ours_step(ours_model, x))
            expected = outcome(lambda: theirs_step(theirs_model, x))
            assert_same_outcome(got, expected, assert_same_tree)
            assert ours_count.n == theirs_count.n, (action, ours_count.n, theirs_count.n)
        else:
            MUTATIONS[action](ours_model)
            MUTATIONS[action](theirs_model)
        same_state(state_of(ours_model), state_of(theirs_model))
