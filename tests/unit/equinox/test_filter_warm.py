"""Warm start for fastdispatch.filter_jit in one process: keys, the output
recipe as plain data.  Across processes: tests/e2e/test_filter_warm_start.py."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import fastdispatch
from fastdispatch import equinox as front
from fastdispatch.warm import identity, outputs
from fastdispatch.warm.identity import NotStored

SHIFT = 1.0


class Shifted(eqx.Module):
    w: jax.Array
    label: str = eqx.field(static=True)
    act: object = lambda y: y  # a leaf equinox keeps static: not an array

    def __call__(self, x):
        return self.act(self.w * x + SHIFT)  # a global its method reads: part of the key


@pytest.fixture
def store(tmp_path):
    fastdispatch.warm_start(tmp_path)
    yield tmp_path
    fastdispatch.warm_start(None)


def fresh(fun):
    """fun under a new filter_jit, as in a new process: equinox's and our
    caches cleared, so the next call misses (and loads, or traces)."""
    eqx.clear_caches()
    return fastdispatch.filter_jit(fun)


def traced_times(capsys):
    return capsys.readouterr().out.count("TRACED")


def apply(module, x):
    print("TRACED")
    return module(x), module, module.label


def test_a_miss_loads_what_an_earlier_compile_wrote(store, capsys):
    module, x = Shifted(jnp.ones(2), "a"), jnp.arange(2.0)
    out, returned, label = fresh(apply)(module, x)
    again, returned_again, label_again = fresh(apply)(module, x)
    stats = fastdispatch.warm_start_stats()
    assert (stats["written"], stats["loaded"], traced_times(capsys)) == (1, 1, 1)
    assert again.tolist() == out.tolist() == [1.0, 2.0] and label_again == label == "a"
    # The returned Module rebuilt around the argument's own static parts
    # (its function the very object: the next call keys alike).
    assert type(returned_again) is Shifted and returned_again.act is module.act
    assert returned_again.w.tolist() == module.w.tolist()


def test_a_global_a_module_method_reads_is_keyed(store, capsys):
    global SHIFT
    module, x = Shifted(jnp.ones(2), "a"), jnp.arange(2.0)
    fresh(apply)(module, x)
    SHIFT = 5.0
    try:
        assert fresh(apply)(module, x)[0].tolist() == [5.0, 6.0]
    finally:
        SHIFT = 1.0
    assert traced_times(capsys) == 2
    assert fresh(apply)(module, x)[0].tolist() == [1.0, 2.0]  # the first file again
    assert traced_times(capsys) == 0


def test_an_argument_the_key_cannot_describe_is_not_stored(store, capsys):
    class Opaque:  # hashable by identity: equinox keys it as static
        pass

    def f(x, opaque):
        print("TRACED")
        return x + 1

    opaque = Opaque()
    assert fresh(f)(jnp.ones(2), opaque).tolist() == [2.0, 2.0]
    assert fresh(f)(jnp.ones(2), opaque).tolist() == [2.0, 2.0]
    assert traced_times(capsys) == 2
    (reason,) = fastdispatch.warm_start_stats()["not_stored"].values()
    assert "takes as static argument an object of type" in reason and "Opaque" in reason


def test_recipe_round_trip_by_value_input_name_and_constant():
    module = Shifted(jnp.ones(2), "a")
    out = (module, jax.nn.relu, 3, {"k": (1.5, None)})
    leaves, treedef = jax.tree_util.tree_flatten(out)
    sources = [1 if isinstance(leaf, jax.Array) else -1 for leaf in leaves]
    statics = [None if source >= 0 else leaf for source, leaf in zip(sources, leaves)]
    for name, value in front._warm_options({})["constants"].items():  # as a key does
        identity.register_constant(name, value)
    call_objects = ["a", module.act]
    described = outputs.describe(treedef, sources, statics, call_objects)
    rebuilt_treedef, rebuilt_sources, rebuilt_statics = outputs.rebuild(described, call_objects)
    assert rebuilt_treedef == treedef and rebuilt_sources == sources
    assert rebuilt_statics == statics and rebuilt_statics[2] is jax.nn.relu
    assert described[2][1] == ("input", 1)  # the Module's function, by its place


def test_recipe_refuses_what_no_process_can_rebuild():
    def local(x):
        return x

    for value in (local, object()):
        treedef = jax.tree_util.tree_structure(0)
        with pytest.raises(NotStored, match="returns a non-array output of type"):
            outputs.describe(treedef, [-1], [value], [])
    # The same object among the call's inputs: stored as its place there.
    assert outputs.describe(treedef, [-1], [local], [None, local])[2] == (("input", 1),)


def test_a_trace_that_changes_program_state_is_not_stored(store):
    traces = 0

    def counted(x):
        nonlocal traces
        traces += 1
        return x + 1

    fresh(counted)(jnp.ones(2))
    fresh(counted)(jnp.ones(2))
    assert traces == 2  # each process-like start traces: nothing was skipped
    (reason,) = fastdispatch.warm_start_stats()["not_stored"].values()
    assert "assigns the nonlocal variable traces" in reason


def test_donate_warn_is_stored_and_a_load_warns_as_equinox_does(store):
    # donate="warn" asks for jax's compile-time warning about donated buffers
    # it cannot use: the compile's warning is written, and a load gives it.
    def f(x, y):
        return x + jnp.sum(y)

    for _ in range(2):
        eqx.clear_caches()
        g = fastdispatch.filter_jit(f, donate="warn")
        with pytest.warns(UserWarning, match="Some donated buffers were not usable"):
            assert g(jnp.array(1.0), jnp.ones((10,))) == 11.0
    stats = fastdispatch.warm_start_stats()
    assert stats["written"] == stats["loaded"] == 1
