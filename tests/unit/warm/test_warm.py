"""fastdispatch.warm in one process: the identity digest, the key, the store's
files.  Across processes: tests/e2e/test_warm_start.py."""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
import sys
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from frontends import needs_equinox, needs_flax

import fastdispatch
from fastdispatch import warm
from fastdispatch.warm import identity, jax_own
from fastdispatch.warm.identity import NotStored, function_digest, value_digest
from fastdispatch.warm.store import MAGIC, Store, WarmStartWarning, _payload

SCALE = 2.0
ARRAY = np.arange(3.0)


def uses_scale(x):
    return x * SCALE


def uses_array(x):
    return x + ARRAY


def calls_helper(x):
    return uses_scale(x) + 1


def recursive(n):
    return 1 if n <= 1 else n * recursive(n - 1)


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: float
    b: int


class Opaque:
    pass


def closing_over(value):
    def inner(x):
        return x * value

    return inner


def test_digest_is_stable_and_follows_what_the_code_reaches(monkeypatch):
    before = function_digest(calls_helper)
    assert function_digest(calls_helper) == before
    monkeypatch.setattr(f"{__name__}.SCALE", 3.0)  # read through the helper
    assert function_digest(calls_helper) != before
    array = function_digest(uses_array)
    monkeypatch.setattr(f"{__name__}.ARRAY", np.arange(3.0) + 1)
    assert function_digest(uses_array) != array
    assert function_digest(recursive)  # a cycle ends


def test_digest_of_closures_defaults_and_values():
    assert function_digest(closing_over(1.0)) == function_digest(closing_over(1.0))
    assert function_digest(closing_over(1.0)) != function_digest(closing_over(2.0))
    assert function_digest(closing_over(Frozen(1.0, 2))) != function_digest(closing_over(Frozen(1.0, 3)))
    assert function_digest(closing_over(jnp.ones(2))) != function_digest(closing_over(jnp.zeros(2)))
    assert function_digest(closing_over(jnp.ones(2))) != function_digest(closing_over(np.ones(2)))
    assert function_digest(closing_over(1)) != function_digest(closing_over(1.0))
    assert function_digest(closing_over(True)) != function_digest(closing_over(1))
    partial = functools.partial(uses_scale)
    assert function_digest(partial) == function_digest(functools.partial(uses_scale))
    assert value_digest(frozenset({1, "a", 2.5})) == value_digest(frozenset({2.5, 1, "a"}))
    # Library functions by name and version, not by their code.
    assert function_digest(closing_over(jnp.sum)) == function_digest(closing_over(jnp.sum))
    assert function_digest(closing_over(np.sin)) != function_digest(closing_over(np.cos))


def test_what_cannot_be_described_is_named_with_its_place():
    fun = closing_over(Opaque())
    with pytest.raises(NotStored, match=r"closes over an object of type .*Opaque at test_warm.py:\d+"):
        function_digest(fun)
    with pytest.raises(NotStored, match=r"closes over an object of type _thread.lock"):
        function_digest(closing_over(threading.Lock()))


class Tokenizer:
    """A plain object: nothing a digest can describe."""

    def decode(self, tokens):
        return " ".join(map(str, tokens))


TOKENIZER = Tokenizer()


@jax.tree_util.register_pytree_node_class
class Sampler:
    """A model-like tree node whose host-side method reads a global tokenizer."""

    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return self.scaled(x)

    def scaled(self, x):
        return x * self.w

    def text(self, tokens):
        return TOKENIZER.decode(tokens)

    def tree_flatten(self):
        return (self.w,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def sample_step(model, x):
    return model(x)


def decoding_step(model, x):
    model.text([1, 2])
    return model(x)


def named_step(model, x):
    return operator.methodcaller("scaled", x)(model)  # by a library, by the name it holds


def computed_step(model, x, name="sca" + "led"):
    return getattr(model, name)(x)


@jax.tree_util.register_pytree_node_class
class ScaledSampler(Sampler):
    def scaled(self, x):
        return x * self.w * SCALE


def test_a_method_the_trace_cannot_call_does_not_block_the_key(monkeypatch):
    # Only the methods the code may call by name (and dunders) are the
    # trace's: the tokenizer read by the host-side text() is not.
    digest = function_digest(sample_step, [Sampler])
    assert digest == function_digest(sample_step, [Sampler])
    with pytest.raises(NotStored, match="reads the global TOKENIZER, an object of type .*Tokenizer"):
        function_digest(decoding_step, [Sampler])
    assert function_digest(named_step, [Sampler]) != digest
    with pytest.raises(NotStored, match="TOKENIZER"):
        function_digest(computed_step, [Sampler])  # getattr: any method, by any name
    # A model the function closes over: its methods pruned alike.
    assert function_digest(functools.partial(sample_step, Sampler(jnp.ones(2))))
    # A global a method the trace calls reads still keys the call.
    scaled = function_digest(sample_step, [ScaledSampler])
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    assert function_digest(sample_step, [ScaledSampler]) != scaled


def test_user_module_attributes_count(tmp_path, monkeypatch):
    (tmp_path / "warm_user_mod.py").write_text("FACTOR = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import warm_user_mod

    def reads(x):
        return x * warm_user_mod.FACTOR

    before = function_digest(reads)
    monkeypatch.setattr(warm_user_mod, "FACTOR", 3)  # set at run time: not in the source
    assert function_digest(reads) != before
    assert identity._installed("numpy") and not identity._installed("warm_user_mod")


def test_payload_checks_length_and_checksum(tmp_path):
    store = Store(tmp_path)
    compiled = jax.jit(lambda x: x + 1).lower(jnp.ones(2)).compile()
    store.save("k", compiled, None)
    data = (tmp_path / "k.jit").read_bytes()
    assert data.startswith(MAGIC) and _payload(data) is not None
    assert _payload(data[:-1]) is None and _payload(data + b"x") is None
    assert _payload(data[:-1] + bytes([data[-1] ^ 1])) is None and _payload(b"") is None
    loaded = store.load("k")
    assert loaded is not None and loaded(jnp.ones(2)).tolist() == [2.0, 2.0]
    (tmp_path / "k.jit").write_bytes(data[:-5])
    with pytest.warns(WarmStartWarning, match="damaged"):
        assert store.load("k") is None
    assert store.load("k") is None  # one warning per file
    assert store.counts["damaged"] == 2 and store.load("absent") is None


def test_bound_removes_least_recently_used(tmp_path):
    store = Store(tmp_path, max_bytes=250)
    for i, name in enumerate(["old", "mid", "new"]):
        path = tmp_path / f"{name}.jit"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    (tmp_path / ".tmp-stale").write_bytes(b"x")
    os.utime(tmp_path / ".tmp-stale", (1, 1))
    store.bound()
    assert sorted(os.listdir(tmp_path)) == ["mid.jit", "new.jit"]
    assert store.counts["evicted"] == 1


def test_a_read_only_store_writes_nothing(tmp_path):
    store = Store(tmp_path)
    store.writable = False  # as os.access says for a read-only directory
    store.save("k", jax.jit(lambda x: x).lower(1.0).compile(), None)
    assert os.listdir(tmp_path) == []


def traced_times(capsys):
    return capsys.readouterr().out.count("TRACED")


def test_warm_start_in_one_process(tmp_path, capsys):
    def f(x, n):
        print("TRACED")  # runs when jax traces; reaches nothing the key reads
        return x * n

    jitted = fastdispatch.jit(f, static_argnums=1)
    fastdispatch.warm_start(tmp_path)
    try:
        assert jitted(jnp.ones(2), 3).tolist() == [3.0, 3.0]
        jitted.clear_cache()  # ours and jax's: the next call misses both
        cache = fastdispatch.CompiledFunctionCache()  # counts this function's next calls alone
        jitted = fastdispatch.jit(f, static_argnums=1, cache=cache)
        assert jitted(jnp.ones(2), 3).tolist() == [3.0, 3.0]
        assert (cache.stats()["misses"], cache.stats()["hits"]) == (1, 0)  # loaded: a miss only
        assert jitted(jnp.ones(2), 3).tolist() == [3.0, 3.0]
        assert (cache.stats()["misses"], cache.stats()["hits"]) == (1, 1)
        stats = fastdispatch.warm_start_stats()
        assert (stats["written"], stats["loaded"], traced_times(capsys)) == (1, 1, 1)
        # Beside f, only jax's own compiles (jnp.ones), counted apart.
        (name, tally), *others = [item for item in stats["functions"].items() if item[0] != jax_own.NAME]
        assert name.endswith("<locals>.f") and not others
        assert (tally["missed"], tally["written"], tally["loaded"]) == (1, 1, 1)
        assert tally["load_seconds"] > 0
        assert "f: 1 loaded in " in warm.summary() and "1 missed (not in the store" in warm.summary()
        assert jitted(jnp.ones(2), 4).tolist() == [4.0, 4.0]  # a new static value: traced
        assert traced_times(capsys) == 1
    finally:
        fastdispatch.warm_start(None)
    assert fastdispatch.warm_start_stats() is None


def donation_warnings(caught):
    return [
        (w.category, str(w.message), w.filename, w.lineno)
        for w in caught
        if "donated buffers were not usable" in str(w.message)
    ]


def test_a_load_warns_what_the_compile_warned(tmp_path):
    # Stock jax with its persistent cache lowers on every run, and warns; a
    # load skips lowering, and issues the compile's warnings itself.
    jitted = fastdispatch.jit(lambda x: x.sum(), donate_argnums=0)  # x cannot hold a scalar
    fastdispatch.warm_start(tmp_path, preload=False)
    try:
        with warnings.catch_warnings(record=True) as compiled:
            warnings.simplefilter("always")
            jitted(jnp.ones(3))
        jitted.clear_cache()  # ours and jax's: the next call loads
        with warnings.catch_warnings(record=True) as loaded:
            warnings.simplefilter("always")
            assert jitted(jnp.ones(3)) == 3.0
        assert fastdispatch.warm_start_stats()["loaded"] == 1
        assert donation_warnings(loaded) == donation_warnings(compiled)
        assert len(donation_warnings(loaded)) == 1
        # Through the program's filters, as jax's own: raised where they say
        # so, and no entry is left behind; the next call loads again.
        jitted.clear_cache()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UserWarning, match="donated buffers were not usable"):
                jitted(jnp.ones(3))
            assert jitted._cache_size() == 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert jitted(jnp.ones(3)) == 3.0
        assert fastdispatch.warm_start_stats()["loaded"] == 3
    finally:
        fastdispatch.warm_start(None)


def test_a_loaded_entry_leaves_numpy_arguments_to_jax_jit_after_its_first_calls(tmp_path, sink):
    # jax.jit converts numpy arguments faster than the fast path, so a
    # compiled entry of a small call leaves them to it.  A loaded one converts
    # them itself at first (handing a call to jax.jit would trace and compile
    # it); a loop longer than that repays jax.jit's one compile.  (Numpy
    # bytes that repeat would run here all along: each call's are new.)
    from fastdispatch.jax_jit import function as jit_function

    def step(w, x):
        return w - 0.1 * (x @ w)

    jitted = fastdispatch.jit(step)
    first = jit_function.LOADED_CALLS_BEFORE_JAX
    w = jnp.ones((3, 3))
    xs = [np.full((3, 3), i / 8) for i in range(first + 4)]  # float64: cast as jax.jit casts it
    fastdispatch.warm_start(tmp_path, preload=False)
    try:
        jitted(w, xs[-1])
        jitted.clear_cache()  # ours and jax's: the next call loads
        del sink.calls[:]
        outs = [jitted(w, x) for x in xs[:-1]]
        assert fastdispatch.warm_start_stats()["loaded"] == 1
    finally:
        fastdispatch.warm_start(None)
    outcomes = ["hit" if call.hit else call.hand_off for call in sink.calls]
    assert outcomes == ["hit"] * first + ["numpy arguments"] * 3
    for out, x in zip(outs, xs):
        np.testing.assert_array_equal(out, jax.jit(step)(w, x))


def test_a_reused_trace_is_not_written(tmp_path):
    def f(x):
        return x * 2

    jitted = fastdispatch.jit(f)
    jitted(jnp.ones(2))  # jax keeps this trace, made before warm start
    fastdispatch.warm_start(tmp_path)
    try:
        jitted._clear_cache()  # ours only: jax's trace serves the next miss
        assert jitted(jnp.ones(2)).tolist() == [2.0, 2.0]
        stats = fastdispatch.warm_start_stats()
        assert stats["written"] == 0
        (reason,) = stats["not_stored"].values()
        assert "not stored: test_a_reused_trace_is_not_written.<locals>.f was compiled" in reason
    finally:
        fastdispatch.warm_start(None)


@dataclasses.dataclass
class Derived:
    a: float

    def __post_init__(self):
        self.doubled = self.a * 2


def test_digest_counts_attributes_set_after_init_and_never_confuses_tokens():
    one, other = Derived(1.0), Derived(1.0)
    other.doubled = 3.0
    assert value_digest(one) != value_digest(other)
    assert value_digest(("a\x00", "b")) != value_digest(("a", "\x00b"))


@needs_flax
def test_digest_describes_library_mappings():
    # It sits inside every flax nnx GraphDef, the static half of split/merge.
    from flax.typing import HashableMapping

    assert value_digest(HashableMapping({"a": 1})) == value_digest(HashableMapping({"a": 1}))
    assert value_digest(HashableMapping({"a": 1})) != value_digest(HashableMapping({"a": 2}))
    assert value_digest(HashableMapping({"a": 1})) != value_digest({"a": 1})


def test_digest_describes_tree_structures():
    one = jax.tree_util.tree_structure({"w": 0, "b": (0, 0)})
    assert value_digest(one) == value_digest(jax.tree_util.tree_structure({"w": 1, "b": (1, 1)}))
    assert value_digest(one) != value_digest(jax.tree_util.tree_structure({"w": 0, "b": [0, 0]}))


@needs_flax
def test_an_nnx_graphdef_is_described():
    from flax import nnx

    graphdef, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    same, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(1)))
    wider, _ = nnx.split(nnx.Linear(2, 4, rngs=nnx.Rngs(0)))
    assert value_digest(graphdef) == value_digest(same)
    assert value_digest(graphdef) != value_digest(wider)


def test_digest_describes_partition_specs_and_shardings():
    P = jax.sharding.PartitionSpec
    assert value_digest(P(None, "model")) == value_digest(P(None, "model"))
    specs = [P(None, "model"), P("model", None), P(None, ("a", "b")), P(P.UNCONSTRAINED), P()]
    assert len({value_digest(spec) for spec in specs}) == len(specs)
    mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    one = jax.sharding.NamedSharding(mesh, P("x"))
    assert value_digest(one) == value_digest(jax.sharding.NamedSharding(mesh, P("x")))
    assert value_digest(one) != value_digest(jax.sharding.NamedSharding(mesh, P()))


@needs_flax
def test_an_nnx_graphdef_with_sharding_metadata_is_described():
    """flax's tutorials annotate parameters with a PartitionSpec (MiniGPT's
    kernel_metadata): the GraphDef holds it, and the key describes it."""
    from flax import nnx

    def model(spec):
        metadata = {"out_sharding": jax.sharding.PartitionSpec(*spec)}
        with jax.set_mesh(jax.make_mesh((1, 1), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)):
            return nnx.split(nnx.Linear(2, 4, kernel_metadata=metadata, rngs=nnx.Rngs(0)))[0]

    assert value_digest(model((None, None))) == value_digest(model((None, None)))
    assert value_digest(model((None, None))) != value_digest(model((None, "x")))


def test_a_function_that_assigns_outside_state_is_refused():
    count = 0

    def counts(x):
        nonlocal count
        count += 1
        return x

    def counts_globally(x):
        global SCALE
        SCALE = 3.0
        return x

    def local_cells_only(x):
        total = 0

        def add(y):
            nonlocal total  # the function's own variable: no state outside
            total += y

        add(x)
        return total

    with pytest.raises(NotStored, match="assigns the nonlocal variable count"):
        function_digest(counts)
    with pytest.raises(NotStored, match="assigns the global variable SCALE"):
        function_digest(counts_globally)
    function_digest(local_cells_only)


def test_checked_mode_keys_the_traced_program(tmp_path, capsys, monkeypatch):
    scale = Opaque()  # refused by the identity digest: checked mode stores it
    scale.factor = 3.0

    def f(x):
        print("TRACED")
        return x * scale.factor + ARRAY

    jitted = fastdispatch.jit(f)
    jitted(jnp.ones(3))  # jax keeps this trace: checked mode keys it, and writes
    fastdispatch.warm_start(tmp_path, checked=True)
    try:
        jitted._clear_cache()  # ours only: jax's trace serves the next miss
        assert jitted(jnp.ones(3)).tolist() == [3.0, 4.0, 5.0]
        assert fastdispatch.warm_start_stats()["written"] == 1
        jitted.clear_cache()  # ours and jax's: traced again, then loaded
        assert jitted(jnp.ones(3)).tolist() == [3.0, 4.0, 5.0]
        stats = fastdispatch.warm_start_stats()
        assert (stats["checked"], stats["loaded"], stats["written"], stats["not_stored"]) == (True, 1, 1, {})
        assert traced_times(capsys) == 2  # before warm start, and for the load's key
        # A closed-over value, a global array, a weak type: each another program.
        for change in (
            lambda: setattr(scale, "factor", 4.0),
            lambda: monkeypatch.setattr(sys.modules[__name__], "ARRAY", np.arange(3.0) + 1),
        ):
            change()
            jitted.clear_cache()
            expected = (np.ones(3) * scale.factor + ARRAY).tolist()
            assert jitted(jnp.ones(3)).tolist() == expected
        assert jitted(2.0).tolist() == (2.0 * scale.factor + ARRAY).tolist()  # weak f32[]
        jitted.clear_cache()
        assert jitted(jnp.float32(2.0)).tolist() == (2.0 * scale.factor + ARRAY).tolist()  # f32[]
        stats = fastdispatch.warm_start_stats()
        assert (stats["loaded"], stats["written"]) == (1, 5)
        # After a load, jax.jit's own path (it holds the trace, not the
        # executable) compiles and runs the same program.
        jitted.clear_cache()
        jitted(jnp.ones(3))
        assert stats["loaded"] + 1 == fastdispatch.warm_start_stats()["loaded"]
        assert jitted.lower(jnp.ones(3)).compile()(jnp.ones(3)).tolist() == expected
    finally:
        fastdispatch.warm_start(None)


def test_checked_mode_refuses_effects(tmp_path):
    def f(x):
        jax.debug.print("x {x}", x=x)
        return x

    fastdispatch.warm_start(tmp_path, checked=True)
    try:
        fastdispatch.jit(f)(jnp.ones(2))
        jax.effects_barrier()
        (reason,) = fastdispatch.warm_start_stats()["not_stored"].values()
        assert "has effects" in reason
    finally:
        fastdispatch.warm_start(None)


@needs_equinox
def test_trees_are_stored_as_they_are_only_where_they_come_back_so():
    # An equinox Module's tree node holds equinox's MISSING sentinel, which
    # pickles into another object; its unflatten would then reject it.
    import equinox as eqx

    model = eqx.nn.Linear(2, 3, key=jax.random.key(0))
    assert not warm._trees_pickle(jax.jit(lambda m: m.weight.sum()).lower(model).compile())
    assert warm._trees_pickle(jax.jit(lambda x: {"y": x}).lower(jnp.ones(2)).compile())
