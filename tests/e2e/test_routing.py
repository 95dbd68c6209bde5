"""What a program run by ``python -m fastdispatch`` can see of the routing:
one program, written the way users write them, checks each property itself
and prints one line per check; the test compares those lines."""

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = """\
    import sys

    # What ran before the program (the patch, fastdispatch) imported no library
    # that could have taken jax.jit, or jitted a function, before the patch.
    preloaded = {"equinox", "flax", "optax"} & {name.split(".")[0] for name in sys.modules}

    from jax import jit as J  # taken before anything else: the patch ran first

    import copy
    import functools
    import inspect
    import operator
    import pickle
    import pydoc
    import warnings

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import fastdispatch


    def check(name, ok):
        print(name, "ok" if ok else "FAILED")


    def scale(x, factor=2.0):
        "Scales x."
        return x * factor


    class Unhashable:
        def __call__(self, x):
            return x + 1

        def __eq__(self, other):
            return self is other


    linear = eqx.nn.Linear(2, 2, key=jax.random.key(0))
    check("nothing preloaded", not preloaded)
    check("routed", J is jax.jit is fastdispatch.jit and jax.eval_shape is fastdispatch.eval_shape)
    wrapper = type(jax.jit(lambda x: x))
    callables = [scale, Unhashable(), linear, linear.__call__, functools.partial(scale, factor=3.0),
                 jnp.sin, operator.add, jax.custom_jvp(scale), jax.jit(scale)]
    check("one wrapper type", all(type(jax.jit(f)) is wrapper for f in callables))
    check("factory", type(jax.jit(static_argnums=1)(scale)) is wrapper)
    try:
        jax.jit(linear)(jnp.ones(2))
    except TypeError as error:
        message = str(error)
        check("module call raises jax's error", message.startswith("unhashable type: 'jaxlib._jax.Array"))

    class Holder(eqx.Module):
        layer: object

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Holder(jax.jit(linear))
    check("equinox warns of a jitted Module field", any("JAX-transformed" in str(w.message) for w in caught))

    f = jax.jit(scale)
    check("wraps attributes", (f.__wrapped__, f.__name__, f.__qualname__, f.__doc__, f.__module__)
          == (scale, "scale", "scale", "Scales x.", "__main__"))
    check("signature", str(inspect.signature(f)) == "(x, factor=2.0)")
    check("help", "scale(x, factor=2.0)" in pydoc.render_doc(f, renderer=pydoc.plaintext))
    outer = functools.wraps(f)(lambda *a: f(*a))
    check("wraps over jit", outer.__wrapped__ is f and str(inspect.signature(outer)) == "(x, factor=2.0)")
    inner = jax.jit(functools.wraps(scale)(lambda *a, **k: scale(*a, **k)))
    check("jit over wraps", inner.__name__ == "scale" and float(inner(1.0)) == 2.0)
    stages = ("lower", "trace", "eval_shape", "clear_cache")
    check("stage methods", all(callable(getattr(f, name)) for name in stages))
    check("copy", float(copy.deepcopy(f)(1.0)) == 2.0 and float(copy.copy(f)(1.0)) == 2.0)
    try:
        pickle.dumps(jax.jit(lambda x: x))
    except (AttributeError, pickle.PicklingError) as error:
        check("unpicklable function refused as stock", "lambda" in str(error))
    check("jax's own jitted functions stay jax's", type(jnp.sin) is type(fastdispatch._jax.jax_jit(scale)))
    import optax  # its module-level @partial(jax.jit, inline=True) runs now: routed

    check("a library's import-time jit is routed", type(optax.tree_utils.tree_bias_correction) is wrapper)
"""

EXPECTED = [
    "nothing preloaded",
    "routed",
    "one wrapper type",
    "factory",
    "module call raises jax's error",
    "equinox warns of a jitted Module field",
    "wraps attributes",
    "signature",
    "help",
    "wraps over jit",
    "jit over wraps",
    "stage methods",
    "copy",
    "unpicklable function refused as stock",
    "jax's own jitted functions stay jax's",
    "a library's import-time jit is routed",
]


def test_a_routed_program_sees_jax_jit_as_stock(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO + (os.pathsep + path if path else ""))
    result = subprocess.run(
        [sys.executable, "-m", "fastdispatch", "prog.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{name} ok" for name in EXPECTED], result.stdout
