"""nnx/function.pyx: which calls the fast path serves, on which records, and
which it leaves to flax."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import nnx
from nnx_models import Block, X, forward

import fastdispatch
from fastdispatch import nnx as fnnx
from fastdispatch.nnx import _flax


def test_steady_state_calls_take_the_fast_path(sink, block):
    jitted = fnnx.jit(forward)
    for _ in range(4):
        jitted(block, X)
    assert sink.outcomes() == ["compile", "hit", "hit", "hit"]
    assert len(jitted._records()) == 1


def test_a_record_of_another_trace_context_never_runs(sink, block):
    # The record proves the graph; the engine checks its entry's trace
    # context against the call's, and asks again: the record keys the call
    # in its context, compiled once for it, then served in either.
    jitted, flax_jitted, reference = fnnx.jit(forward), nnx.jit(forward), Block(nnx.Rngs(0))
    precise = jax.default_matmul_precision("highest")
    for context in (None, None, precise, precise, None, precise):
        with context or contextlib.nullcontext():
            np.testing.assert_array_equal(jitted(block, X), flax_jitted(reference, X))
    assert sink.outcomes() == ["compile", "hit", "compile", "hit", "hit", "hit"]
    assert jitted._cache_size() == 2 and len(jitted._records()) == 1
    np.testing.assert_array_equal(block.norm.mean[...], reference.norm.mean[...])


def test_a_new_graph_of_a_compiled_structure_is_found_by_its_split(sink):
    """Other objects of a structure compiled before: the engine finds the
    entry by the split's leaves (no compile), and a record of the new graph
    serves its next calls; outputs and updates (BatchNorm's statistics) are
    flax's."""
    jitted, flax_jitted = fnnx.jit(forward), nnx.jit(forward)
    first, second = Block(nnx.Rngs(0)), Block(nnx.Rngs(1))
    references = {id(first): Block(nnx.Rngs(0)), id(second): Block(nnx.Rngs(1))}
    for block in (first, second, second, first):
        np.testing.assert_array_equal(jitted(block, X), flax_jitted(references[id(block)], X))
    assert sink.outcomes() == ["compile", "hit", "hit", "hit"]
    assert len(jitted._records()) == 2 and jitted._cache_size() == 1
    for block in (first, second):
        ours, reference = nnx.state(block), nnx.state(references[id(block)])
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(reference)):
            np.testing.assert_array_equal(a, b)


def changes():
    """Each changes a Block between calls so that flax's split would see another
    graph (or another Variable): the next call must not be a hit."""

    def replace_variable(block):
        block.linear.bias = nnx.Param(jnp.ones(3))

    def set_metadata(block):
        block.linear.kernel.set_metadata(note="changed")

    def new_attribute(block):
        block.extra = nnx.Param(jnp.zeros(1))

    def eval_mode(block):
        block.eval()

    def new_array_attribute_type(block):
        block.scale = 2.0  # a Python float now: static, not an array

    def replace_submodule(block):
        block.linear = nnx.Linear(3, 3, rngs=nnx.Rngs(7))

    return [
        replace_variable,
        set_metadata,
        new_attribute,
        eval_mode,
        new_array_attribute_type,
        replace_submodule,
    ]


@pytest.mark.parametrize("change", changes(), ids=lambda f: f.__name__)
def test_a_changed_graph_is_split_again_then_recorded_again(sink, change):
    ours, reference = Block(nnx.Rngs(0)), Block(nnx.Rngs(0))
    jitted, flax_jitted = fnnx.jit(forward), nnx.jit(forward)
    for block, fn in ((ours, jitted), (reference, flax_jitted)):
        fn(block, X)
        fn(block, X)
        change(block)
    (recorded,) = jitted._records()
    del sink.calls[:]
    for _ in range(3):
        np.testing.assert_array_equal(jitted(ours, X), flax_jitted(reference, X))
    # The record refused the changed graph: the call was split as flax
    # splits it (a compile where its structure is new, else the entry of that
    # structure), and a record of the changed graph (or one more shape of the
    # same record, where only an array's type changed) serves the next.
    records = jitted._records()
    assert recorded in records and sum(record.shape_count() for record in records) == 2
    assert sink.outcomes()[-1] == "hit"
    for a, b in zip(jax.tree.leaves(nnx.state(ours)), jax.tree.leaves(nnx.state(reference))):
        np.testing.assert_array_equal(a, b)


def test_a_new_input_shape_is_another_record(sink, block):
    jitted = fnnx.jit(forward)
    for x in (X, X, X[:2], X[:2], X, X[:2]):
        jitted(block, x)
    assert sink.outcomes() == ["compile", "hit", "compile", "hit", "hit", "hit"]


def test_shapes_loaded_by_warm_start_share_their_graph_s_record(sink, tmp_path, block):
    # A decode loop's prompt grows a token a step: more shapes of one graph
    # than there are records.  Loaded from the store, each shape is one more
    # of the graph's record, as compiled ones are, not a record of its own
    # (five records of one graph pushed each other out: every call loaded).
    jitted = fnnx.jit(forward)
    prompts = [jnp.ones((n, 3)) for n in range(1, 7)]
    fastdispatch.warm_start(tmp_path, preload=False)
    try:
        for x in prompts:
            jitted(block, x)
        assert fastdispatch.warm_start_stats()["written"] == len(prompts)
        jitted.clear_cache()
        del sink.calls[:]
        outs = [jitted(block, x) for x in prompts + prompts]
        assert fastdispatch.warm_start_stats()["loaded"] == len(prompts)
        assert len(jitted._records()) == 1
    finally:
        fastdispatch.warm_start(None)
    assert sink.outcomes() == ["hit"] * 2 * len(prompts)  # a load runs as a hit
    for x, out in zip(prompts + prompts, outs):
        np.testing.assert_array_equal(out, forward(block, x))


def test_host_values_are_converted_on_the_fast_path(sink):
    # Unlike jax.jit's, flax's own call costs far more than converting a new
    # Python scalar (a step counter) or a numpy batch: the fast path does it.
    linear = nnx.Linear(3, 3, rngs=nnx.Rngs(0))
    jitted = fnnx.jit(lambda model, x, scale: model(x) * scale)
    batch = np.asarray(X)
    for scale in (1.0, 2.0, 2, 3.0):
        out = jitted(linear, batch, scale)
    assert sink.outcomes() == ["compile", "hit", "compile", "hit"]  # an int is another signature
    np.testing.assert_allclose(out, linear(X) * 3.0, rtol=1e-6)


def test_calls_flax_runs_itself(sink, block):
    jitted = fnnx.jit(forward)
    jitted(block, X)
    jax.jit(lambda x: jitted(Block(nnx.Rngs(1)), x))(X)
    tree_mode = fnnx.jit(forward, graph=False)
    tree_mode(block, X)
    assert sink.outcomes() == ["compile", "tracer", "not graph mode with graph updates"]


def train(model, optimizer, x):
    loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
    optimizer.update(model, grads)
    return loss


def test_cached_partial_runs_on_the_fast_path(sink):
    linear = nnx.Linear(3, 3, rngs=nnx.Rngs(0))  # cached_partial takes no array attributes
    optimizer = nnx.Optimizer(linear, optax.sgd(0.1), wrt=nnx.Param)
    step = fnnx.jit(train)
    reference = nnx.Linear(3, 3, rngs=nnx.Rngs(0))
    reference_optimizer = nnx.Optimizer(reference, optax.sgd(0.1), wrt=nnx.Param)
    flax_step = nnx.cached_partial(nnx.jit(train), reference, reference_optimizer)
    cached = nnx.cached_partial(step, linear, optimizer)
    precise = jax.default_matmul_precision("highest")
    for context in (None, None, None, precise, precise):  # another context: parsed again
        with context or contextlib.nullcontext():
            np.testing.assert_array_equal(cached(X), flax_step(X))
    # flax's static cache is consumed on every call, as flax's own jit consumes it.
    assert _flax.GRAPH_CONTEXT.tmp_static_cache is None
    assert sink.outcomes() == ["compile", "hit", "hit", "compile", "hit"]
    # The updates reached the caller's model through the shared Variables.
    np.testing.assert_array_equal(linear.kernel[...], reference.kernel[...])
    assert int(optimizer.step[...]) == 5


def test_records_are_bounded_and_most_recent_first():
    jitted = fnnx.jit(forward)
    blocks = [Block(nnx.Rngs(i)) for i in range(6)]
    for block in blocks:
        jitted(block, X)
    records = jitted._records()
    assert len(records) == 4
    jitted.clear_cache()
    assert jitted._records() == [] and jitted._cache_size() == 0


def test_training_with_an_optimizer_stays_on_the_fast_path(sink):
    model = Block(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    @fnnx.jit
    def step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
        optimizer.update(model, grads)
        return loss

    losses = [float(step(model, optimizer, X)) for _ in range(5)]
    assert sink.outcomes() == ["compile"] + ["hit"] * 4
    assert losses == sorted(losses, reverse=True)


def test_a_fresh_batch_each_step_is_adopted_by_the_record(sink, block):
    # A batch put on the device each step holds objects of its own (here its
    # sharding): the record's signature takes them in place (no new signature
    # is made), and the step stays a hit.
    jitted = fnnx.jit(forward)
    twin = nnx.jit(forward)
    stock = nnx.clone(block)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    signatures = []
    for step in range(5):
        batch = jax.device_put(np.asarray(X) + step, device)
        np.testing.assert_allclose(jitted(block, batch), twin(stock, batch))
        (record,) = jitted._records() or (None,)
        signatures.append(None if record is None else record.signature)
    assert signatures[-1].leaf_keys()[-1].sharding is batch.sharding
    assert signatures[-1] is signatures[-2] is signatures[-3]
    # (The first call commits the model's arrays: its graph is recorded from the second.)
    assert sink.outcomes()[-3:] == ["hit"] * 3


def test_the_wrapper_looks_like_the_function():
    def step(model, x):
        """Step docs."""
        return model(x)

    jitted = fnnx.jit(step)
    assert jitted.__wrapped__ is step and jitted.__name__ == "step" and jitted.__doc__ == "Step docs."
    assert repr(jitted).startswith("<fastdispatch nnx.jit of <function")
    assert isinstance(fastdispatch.nnx.jit(static_argnums=1), type(fnnx.jit(static_argnums=1)))


def test_trace_report_names_the_user_function(block):
    jitted = fnnx.jit(forward)
    with fastdispatch.trace() as t:
        for _ in range(3):
            jitted(block, X)
    (row,) = t.stats().values()
    assert row["name"] == "forward" and row["location"].endswith(
        f"nnx_models.py:{forward.__code__.co_firstlineno}"
    )
    assert (row["calls"], row["hits"], row["compiles"]) == (3, 2, 1)


# -- explicit-sharding meshes (2 CPU devices, in a subprocess) ------------------------


class _Outcomes:
    """A trace sink keeping each call's outcome: "hit", "compile" or its hand-off."""

    def __init__(self):
        self.calls = []

    def record(self, fn, times, hit, compile_ns, hand_off, signature):
        self.calls.append("hit" if hit else hand_off or "compile")


def _assert_same_arrays(ours, reference):
    """Each leaf of two states: value, dtype, weak type, sharding, committed flag."""
    ours_leaves, reference_leaves = jax.tree.leaves(ours), jax.tree.leaves(reference)
    assert len(ours_leaves) == len(reference_leaves)
    for a, b in zip(ours_leaves, reference_leaves):
        assert type(a) is type(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.sharding == b.sharding, (a.sharding, b.sharding)
        assert a.committed == b.committed
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(jax.random.key_data(a), jax.random.key_data(b))
        else:
            assert a.weak_type == b.weak_type
            np.testing.assert_array_equal(a, b)


def _mesh_program_body():
    """A donated train step over a model (Variables sharded by kernel_metadata,
    Dropout rng streams, reshard inside __call__), an Optimizer and a
    MultiMetric, interleaved with an nnx.jit method called per token with a
    fresh prompt and a Python int: every array written back is flax's, and
    every call after a shape's first two is a hit."""
    import warnings

    from jax.sharding import PartitionSpec as P

    from fastdispatch.core import watch as _watch

    warnings.filterwarnings("ignore", "Some donated buffers were not usable")  # int32 prompts: as stock
    jax.set_mesh(jax.make_mesh((2, 1), ("batch", "model")))

    def program(jit):
        class Model(nnx.Module):
            def __init__(self, rngs):
                self.embed = nnx.Embed(8, 4, rngs=rngs)
                self.linear = nnx.Linear(4, 8, kernel_metadata={"out_sharding": P(None, "model")}, rngs=rngs)
                self.dropout = nnx.Dropout(0.5, rngs=rngs)

            def __call__(self, tokens):
                x = self.dropout(self.embed(tokens, out_sharding=P(*jax.typeof(tokens).sharding.spec, None)))
                out = self.linear(x, out_sharding=jax.typeof(x).sharding)
                return jax.sharding.reshard(out, jax.typeof(x).sharding)

            @jit(donate_argnums=(1,))
            def next_token(self, tokens, index):
                return jnp.argmax(self(tokens)[0, index])

        @jit(donate_argnums=(0, 1, 3))
        def train_step(model, optimizer, metrics, batch):
            def loss_fn(model):
                logits = model(batch[0])
                return optax.softmax_cross_entropy_with_integer_labels(logits, batch[1]).mean()

            loss, grads = nnx.value_and_grad(loss_fn)(model)
            metrics.update(loss=loss)
            optimizer.update(model, grads)

        model = Model(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
        metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))
        return model, optimizer, metrics, train_step

    ours, reference = program(fnnx.jit), program(nnx.jit)
    sink = _Outcomes()
    _watch.set_trace_sink(sink)
    rng = np.random.default_rng(0)
    for step in range(12):
        tokens = rng.integers(0, 8, size=(4, 5)).astype(np.int32)
        for model, optimizer, metrics, train_step in (ours, reference):
            batch = jax.device_put((tokens, (tokens + 1) % 8), P("batch", None))
            train_step(model, optimizer, metrics, batch)
        _assert_same_arrays(nnx.state(ours[:3]), nnx.state(reference[:3]))
        if step % 4 == 3:
            for _, _, metrics, _ in (ours, reference):
                metrics.reset()
            results = []
            for model, *_ in (ours, reference):
                generated = [1]
                for _ in range(3):
                    generated.append(int(model.next_token(jnp.array(generated)[None, :], len(generated) - 1)))
                results.append(generated)
            assert results[0] == results[1]
            _assert_same_arrays(nnx.state(ours[0]), nnx.state(reference[0]))
    _watch.set_trace_sink(None)
    # train_step compiles once, then hits (the metrics' fresh arrays after a
    # reset too); next_token compiles once per prompt length, then hits.
    assert sink.calls.count("compile") == 1 + 3, sink.calls
    assert sink.calls.count("hit") == len(sink.calls) - 4, sink.calls


def test_explicit_mesh_calls_are_hits_and_write_back_what_flax_does():
    from subprocess_util import run_in_subprocess

    run_in_subprocess(_mesh_program_body, n_devices=2)
