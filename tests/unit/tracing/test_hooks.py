"""tracing.hooks: what --trace watches (host syncs, eager ops) without replacing
any public name of jax or numpy, and programs that compare functions by
identity compute under it what they compute stock."""

import linecache
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from fastdispatch import _jax
from fastdispatch.tracing import hooks

MODULES = ("jax", "jax.numpy", "jax.lax", "jax.random", "jax.nn", "numpy")


def public_attributes():
    return {
        (module, name): value
        for module in MODULES
        for name, value in vars(sys.modules[module]).items()
        if not name.startswith("_")
    }


@pytest.fixture
def tally():
    t = hooks.Tally()
    hooks.install(t)
    try:
        yield t
    finally:
        hooks.uninstall(t)


def test_install_and_uninstall_replace_no_public_name():
    before = public_attributes()
    t = hooks.Tally()
    hooks.install(t)
    try:
        during = public_attributes()
    finally:
        hooks.uninstall(t)
    after = public_attributes()
    for seen in (during, after):
        assert seen.keys() == before.keys()
        changed = [key for key, value in before.items() if seen[key] is not value]
        assert changed == []
    assert _jax.jit_post_hook() is None


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def avg_pool(x):
    return lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "SAME") / 4


def pooled_grad(pool):
    """A new function each time, so that jit traces it again (lax.max and
    lax.add are looked up then)."""

    def loss(x):
        return jnp.sum(pool(jnp.tanh(x)) ** 2)

    return jax.jit(jax.grad(loss))


@pytest.mark.parametrize("pool", [max_pool, avg_pool])
def test_grad_through_reduce_window_is_stock_under_the_hooks(pool):
    # lax.reduce_window recognises lax.max and lax.add by identity and picks a
    # reduction with a reverse-mode rule; a replaced lax.max failed here
    # ("Linearization failed to produce known values for all output primals").
    x = jnp.arange(2 * 4 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 4, 3) % 7 / 7
    stock = pooled_grad(pool)(x)
    t = hooks.Tally()
    hooks.install(t)
    try:
        traced = pooled_grad(pool)(x)
        eager = jax.grad(lambda v: jnp.sum(pool(v)))(x)
    finally:
        hooks.uninstall(t)
    np.testing.assert_array_equal(traced, stock)
    assert traced.dtype == stock.dtype and traced.shape == x.shape
    np.testing.assert_array_equal(eager, jax.grad(lambda v: jnp.sum(pool(v)))(x))


def only_site(table, text):
    """The one entry of ``table`` whose site is this file's line holding ``text``."""
    found = [
        (site, entry)
        for site, entry in table.items()
        if site[0] == __file__ and text in linecache.getline(*site)
    ]
    assert len(found) == 1, table
    return found[0][1]


def test_eager_ops_are_counted_at_the_line_once_each(tally):
    x = jnp.ones(4)
    for _ in range(50):
        x = jnp.sin(x) * 0.5  # two dispatches: sin, then the Array's multiply
    count, ns, _ = only_site(tally.eager, "jnp.sin(x) * 0.5")
    assert count == 100 and ns > 0
    y = lax.add(x, x)  # a primitive, jitted by jax once: one dispatch, not two
    assert only_site(tally.eager, "lax.add(x, x)")[0] == 1
    assert tally.eager_seconds() > 0
    np.testing.assert_allclose(y, 2 * x)


def test_the_programs_own_jit_is_not_an_eager_op(tally):
    step = jax.jit(lambda v: v * 2 + 1)
    x = jnp.ones(3)
    for _ in range(3):
        x = step(x)  # compiled calls
    assert [site for site in tally.eager if "step(x)" in linecache.getline(*site)] == []
    assert only_site(tally.eager, "jnp.ones(3)")[0] == 2  # jax runs it as two executables


def syncs_at(tally, text):
    """{how: count} of the syncs at this file's line holding ``text``."""
    return {
        how: entry[0]
        for (site, how), entry in tally.syncs.items()
        if site[0] == __file__ and text in linecache.getline(*site)
    }


def test_host_syncs_on_the_array_type(tally):
    x = jnp.arange(3.0)
    for _ in range(4):
        float(x[1])  # the program reads
    assert syncs_at(tally, "float(x[1])") == {"float()": 4}
    jax.device_get({"a": x})  # through jax, which calls the Array's __array__
    assert syncs_at(tally, "jax.device_get(") == {"jax.device_get()": 1}
    # A bfloat16 array has no buffer-protocol format: numpy asks __array__.
    np.asarray(x.astype(ml_dtypes.bfloat16))
    assert syncs_at(tally, "np.asarray(x.astype") == {"np.asarray()": 1}
    jnp.sum(x) + jnp.asarray(x)  # jax's own work reads nothing to the host
    assert syncs_at(tally, "jnp.sum(x) + jnp.asarray(x)") == {}
    assert tally.sync_seconds() > 0


def test_debug_nans_still_checks_calls_on_the_fast_path():
    # jax_debug_nans checks fast-path calls in jax's post hook: ours must chain it.
    jax.config.update("jax_debug_nans", True)
    t = hooks.Tally()
    try:
        hooks.install(t)
        log = jax.jit(jnp.log)
        log(jnp.ones(2))  # compiled, no NaN
        with pytest.raises(FloatingPointError):
            log(-jnp.ones(2))  # the fast path, a NaN
    finally:
        hooks.uninstall(t)
        jax.config.update("jax_debug_nans", False)
    assert _jax.jit_post_hook() is None


def test_eager_ops_are_counted_after_a_debug_nans_block(tally):
    # Leaving `with jax.debug_nans(False):` (jax's gradient of relu runs one)
    # sets the thread's own post hook to None, which hid ours from then on.
    jax.grad(lambda v: jnp.sum(jax.nn.relu(v)))(jnp.ones(3))
    with jax.debug_nans(False):
        pass
    x = jnp.ones(4)
    for _ in range(30):
        x = jnp.cos(x)  # the fast path, after the block
    assert only_site(tally.eager, "x = jnp.cos(x)")[0] == 30


def test_a_debug_nans_block_still_checks_under_the_hooks(tally):
    log = jax.jit(jnp.log)
    log(jnp.ones(2))
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError):
            log(-jnp.ones(2))  # jax's check, which the thread's hook (ours) calls
    assert np.isnan(log(-jnp.ones(2))).all()  # outside the block: no check


class Layer:
    def __init__(self, key):
        self.w = jax.random.normal(key, (3, 3))  # eager ops, reported where the model is built
        self.b = jnp.zeros(3)


class Stack:
    def __init__(self, key):
        self.layers = [Layer(k) for k in jax.random.split(key, 4)]


def test_eager_ops_in_constructors_are_counted_where_the_model_is_built(tally):
    Stack(jax.random.key(0))  # the model built here
    count, _, _ = only_site(tally.eager, "Stack(jax.random.key(0))")
    assert count >= 4 * 2 + 1  # each layer's two (or more), the split
    (site,) = [site for site in tally.eager if "Stack(jax.random.key(0))" in linecache.getline(*site)]
    assert tally.built[site] == "Stack"
    assert [site for site in tally.eager if "self." in linecache.getline(*site)] == []
    x = jnp.ones(2)
    for _ in range(3):
        x = jnp.sin(x)  # outside any constructor: its own line, no class
    (loop,) = [site for site in tally.eager if "x = jnp.sin(x)" in linecache.getline(*site)]
    assert loop not in tally.built


def _scaled(leaf):
    return jnp.tanh(leaf) * 2.0 + 1.0  # three ops a leaf, called back by jax.tree.map


def test_eager_ops_in_code_a_jax_library_calls_back_are_counted_at_the_call(tally):
    # jax.tree.map runs the program's function on each leaf: one call of the
    # program's, at the line that made it, named by the library function.
    tree = {f"w{i}": jnp.full((3,), float(i)) for i in range(5)}
    jax.tree.map(_scaled, tree)  # the call
    (call,) = [site for site in tally.eager if "jax.tree.map(_scaled, tree)" in linecache.getline(*site)]
    assert tally.eager[call][0] == 5 * 3 and tally.called[call] == "jax's map"  # jax.tree.map
    assert [site for site in tally.eager if "three ops a leaf" in linecache.getline(*site)] == []
    # The program's own functions calling each other are no library's call.
    x = jnp.ones(2)
    for _ in range(2):
        x = _sin_twice(x)
    (helper,) = [site for site in tally.eager if "return jnp.sin(jnp.sin(v))" in linecache.getline(*site)]
    assert tally.eager[helper][0] == 4 and helper not in tally.called


def _sin_twice(v):
    return jnp.sin(jnp.sin(v))


def test_an_eager_op_s_first_compile_is_kept_apart(tally):
    x = jnp.arange(7.0)
    for _ in range(3):
        x = jnp.cosh(x) * 0.1  # its first shape compiles, then the fast path
    count, ns, compile_ns = only_site(tally.eager, "x = jnp.cosh(x) * 0.1")
    assert count == 6 and 0 < compile_ns <= ns


def test_compiles_for_the_warm_start_store_are_not_the_program_s(tally):
    from fastdispatch.warm import refill

    lowered = jax.jit(lambda v: v * 5 - 1).lower(jnp.ones(7))  # traced and lowered here
    before = (dict(tally.compile_seconds), dict(tally.jax_cache))
    written, failed = [], []
    refill.start(lowered, "0" * 64, written.append, failed.append, lambda: 0)
    assert refill.join(60) and failed == [] and len(written) == 1
    assert (tally.compile_seconds, tally.jax_cache) == before  # compiled beside the program
    assert tally.compile_seconds["XLA"] == 0
    lowered.compile()  # the program's own compile counts
    assert tally.compile_seconds["XLA"] > 0


def test_the_garbage_collector_s_time_is_counted_while_installed():
    import gc

    t = hooks.Tally()
    hooks.install(t)
    try:
        cycles = []
        for _ in range(1000):
            node = []
            node.append(node)  # a cycle: only the collector frees it
            cycles.append(node)
        del cycles
        gc.collect()
    finally:
        hooks.uninstall(t)
    assert t.gc_collections[2] >= 1 and t.gc_ns > 0
    before = (t.gc_ns, list(t.gc_collections))
    gc.collect()  # uninstalled: not counted
    assert (t.gc_ns, t.gc_collections) == before
    assert hooks._gc_event not in gc.callbacks
