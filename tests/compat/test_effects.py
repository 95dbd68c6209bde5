"""Effects inside the function: prints and callbacks run on every call, in order,
with jax.jit's output; ordered effects keep their order over many calls, across
threads and after a callback raised; jax.effects_barrier() waits for them."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from contract import against_jax, arange, assert_same_tree
from jax.experimental import io_callback

SCALAR = jax.ShapeDtypeStruct((), jnp.float32)


def effect_kinds(log):
    """name -> a function of a float32 scalar that records its argument through
    one kind of effect (``log`` for callbacks, stdout for prints)."""

    def record(v):
        log.append(float(v))

    def record_and_return(v):
        log.append(float(v))
        return np.asarray(v + 1, np.float32)

    return {
        "debug.print": lambda x: (jax.debug.print("v={}", x), x + 1)[1],
        "debug.print ordered": lambda x: (jax.debug.print("v={}", x, ordered=True), x + 1)[1],
        "debug.callback": lambda x: (jax.debug.callback(record, x), x + 1)[1],
        "debug.callback ordered": lambda x: (jax.debug.callback(record, x, ordered=True), x + 1)[1],
        "io_callback": lambda x: io_callback(record_and_return, SCALAR, x) * 2,
        "io_callback ordered": lambda x: io_callback(record_and_return, SCALAR, x, ordered=True) * 2,
        "pure_callback": lambda x: jax.pure_callback(record_and_return, SCALAR, x) * 2,
        "two ordered effects": lambda x: (
            jax.debug.print("w={}", x, ordered=True),
            io_callback(record_and_return, SCALAR, x, ordered=True),
        )[1],
    }


KINDS = list(effect_kinds([]))
CALLBACK_KINDS = [k for k in KINDS if "callback" in k]


def run_and_capture(jitted, values, log, capfd):
    """Outputs of ``jitted`` on each value, then what its effects recorded."""
    outputs = [jitted(jnp.float32(v)) for v in values]
    jax.effects_barrier()
    recorded = list(log)
    log.clear()
    return outputs, recorded, capfd.readouterr().out.splitlines()


@pytest.mark.parametrize("kind", KINDS)
def test_output_and_order_as_jax_jit(jit, kind, capfd):
    log = []
    fun = effect_kinds(log)[kind]
    values = [0.5 * i for i in range(20)]
    theirs = run_and_capture(jax.jit(fun), values, log, capfd)
    ours = run_and_capture(jit(fun), values, log, capfd)
    for got, want in zip(ours[0], theirs[0]):
        assert_same_tree(got, want)
    assert ours[1:] == theirs[1:]
    # Every call's effect ran once, in call order (pure_callback too: jax may not drop it here).
    printed = [float(line.split("=")[1]) for line in ours[2]]
    assert sorted(printed + ours[1]) == sorted(values * (2 if kind == "two ordered effects" else 1))
    assert ours[1] in ([], values) and printed in ([], values)


def test_debug_print(jit, capfd):
    def f(x):
        jax.debug.print("x={x}", x=x)
        return x * 2

    ours, theirs = jit(f), jax.jit(f)
    for v in [1.0, 2.0, 3.0]:
        assert_same_tree(ours(v), theirs(v))
    jax.effects_barrier()
    out = capfd.readouterr().out.splitlines()
    assert out == ["x=1.0", "x=1.0", "x=2.0", "x=2.0", "x=3.0", "x=3.0"]


def test_debug_callback_counts_and_values(jit):
    seen_ours, seen_theirs = [], []

    def make(seen):
        def f(x, y):
            jax.debug.callback(lambda a: seen.append(np.asarray(a).tolist()), x + y)
            return x - y

        return f

    f, g = jit(make(seen_ours)), jax.jit(make(seen_theirs))
    for i in range(3):
        x = arange((2,)) + i
        assert_same_tree(f(x, 1.0), g(x, 1.0))
    jax.effects_barrier()
    assert seen_ours == seen_theirs == [[1.0, 2.0], [2.0, 3.0], [3.0, 4.0]]


def test_ordered_callback(jit):
    order = []

    def f(x, tag):
        jax.debug.callback(lambda a: order.append((tag, float(a))), x, ordered=True)
        return x + 1

    g = jit(f, static_argnums=1)
    x = jnp.float32(0)
    for i in range(4):
        x = g(x, "a" if i % 2 else "b")
    jax.effects_barrier()
    assert order == [("b", 0.0), ("a", 1.0), ("b", 2.0), ("a", 3.0)]
    assert float(x) == 4.0


@against_jax
def test_pure_callback_result(jit):
    def f(x):
        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.pure_callback(lambda a: np.sin(a).astype(a.dtype), shape, x) + 1

    for _ in range(2):
        assert_same_tree(jit(f)(arange((3,))), jax.jit(f)(arange((3,))))


def counting_step(log):
    def step(x):
        return io_callback(lambda v: log.append(int(v)) or np.asarray(v + 1, np.int32), x, x, ordered=True)

    return step


def test_ordered_effects_over_100_calls(jit, capfd):
    log = []
    step = jit(counting_step(log))
    x = jnp.int32(0)
    for _ in range(100):
        x = step(x)
    jax.effects_barrier()
    assert log == list(range(100)) and int(x) == 100

    printer = jit(lambda x: (jax.debug.print("{}", x, ordered=True), x + 1)[1])
    for _ in range(100):
        x = printer(x)
    jax.effects_barrier()
    assert capfd.readouterr().out.split() == [str(i) for i in range(100, 200)]


def test_ordered_effects_interleave_with_jax_jit(jit):
    # One ordered effect, called through both: jax's token state is shared, so
    # the order holds across the two.
    log = []
    ours, theirs = jit(counting_step(log)), jax.jit(counting_step(log))
    x = jnp.int32(0)
    for i in range(60):
        x = (ours if i % 3 else theirs)(x)
    jax.effects_barrier()
    assert log == list(range(60))


@pytest.mark.parametrize("kind", CALLBACK_KINDS)
def test_callback_that_raises(jit, kind):
    def raise_on_three(v):
        if float(v) == 3.0:
            raise ValueError(f"boom {float(v)}")
        return np.asarray(v + 1, np.float32)

    def run(jitted):
        outputs, errors = [], []
        for v in range(6):
            try:
                outputs.append(jitted(jnp.float32(v)))
                jax.effects_barrier()
            except Exception as error:  # noqa: BLE001 - compared below
                errors.append(error)
        jax.effects_barrier()
        return outputs, errors

    # The callback raises where the kind's own recording would have run.
    kinds = {
        "debug.callback": lambda x: (jax.debug.callback(raise_on_three, x), x + 1)[1],
        "debug.callback ordered": lambda x: (jax.debug.callback(raise_on_three, x, ordered=True), x + 1)[1],
        "io_callback": lambda x: io_callback(raise_on_three, SCALAR, x) * 2,
        "io_callback ordered": lambda x: io_callback(raise_on_three, SCALAR, x, ordered=True) * 2,
        "pure_callback": lambda x: jax.pure_callback(raise_on_three, SCALAR, x) * 2,
    }
    fun = kinds[kind]
    theirs = run(jax.jit(fun))
    ours = run(jit(fun))
    assert len(ours[0]) == len(theirs[0]) == 5
    for got, want in zip(*(outputs for outputs, _ in (ours, theirs))):
        assert_same_tree(got, want)
    (error,), (expected,) = ours[1], theirs[1]
    # JaxRuntimeError where jax runs the call in Python (effects), ValueError from
    # its C++ fast path (pure_callback): the same type on both.
    assert type(error) is type(expected)
    # The message embeds the Python stack at the callback, which names the
    # dispatcher's frames: its first and last lines are the contract.
    lines, expected_lines = str(error).splitlines(), str(expected).splitlines()
    assert lines[0] == expected_lines[0] and lines[-1] == expected_lines[-1] == "ValueError: boom 3.0"


def test_ordered_effects_continue_after_a_callback_raised(jit):
    log = []

    def host(v):
        if int(v) == 5:
            raise ValueError("five")
        log.append(int(v))
        return np.asarray(v + 1, np.int32)

    step = jit(lambda x: io_callback(host, x, x, ordered=True))
    for v in range(10):
        try:
            step(jnp.int32(v))
            jax.effects_barrier()
        except jax.errors.JaxRuntimeError as error:
            assert v == 5 and str(error).splitlines()[-1] == "ValueError: five"
    jax.effects_barrier()
    assert log == [0, 1, 2, 3, 4, 6, 7, 8, 9]


def test_effects_barrier_waits_for_every_callback(jit):
    done = []
    release = threading.Event()

    def slow(v):
        release.wait(5)
        done.append(float(v))

    f = jit(lambda x: (jax.debug.callback(slow, x), x * 2)[1])
    release.set()
    for v in range(10):
        f(jnp.float32(v))
    jax.effects_barrier()
    assert done == [float(v) for v in range(10)]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_effects_in_threads_keep_each_threads_order(jit, ordered):
    log = []
    lock = threading.Lock()

    def record(tag, v):
        with lock:
            log.append((int(tag), int(v)))

    f = jit(lambda tag, x: (jax.debug.callback(record, tag, x, ordered=ordered), x + 1)[1])
    errors = []
    barrier = threading.Barrier(4)

    def body(tag):
        try:
            barrier.wait()
            x = jnp.int32(0)
            for _ in range(25):
                x = f(jnp.int32(tag), x)
            jax.effects_barrier()  # this thread's tokens
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=body, args=(tag,), daemon=True) for tag in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    for tag in range(4):
        assert [v for t, v in log if t == tag] == list(range(25))
