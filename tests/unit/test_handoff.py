"""The hand-off on a jax fastdispatch does not know: a private name hidden, or a
version outside the range, in a fresh process each.  Import works, the front
ends are the libraries' own, one warning names what is wrong, programs run stock.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Run before fastdispatch is imported: a name jax itself never reads, so that
# jax still works and only fastdispatch's check can notice it is gone.
HIDE_NAME = "from jax._src.lib import jax_jit\ndel jax_jit._ArgSignatureOfValue\n"
# A jax minor outside the range, every name present.
FUTURE_JAX = "import jax\njax.__version__ = '0.99.0'\n"

PROGRAM = """\
import jax, jax.numpy as jnp
f = jax.jit(lambda x, y: x * y + 1)
print("RESULT", f(jnp.arange(3.0), 2.0).tolist(), type(f).__name__)
"""


def run_python(prelude, body, *args):
    code = prelude + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )


def warnings_in(stderr):
    return [line for line in stderr.splitlines() if "UnsupportedJaxWarning:" in line]


CHECKS = """\
import jax, jax.numpy as jnp
stock_jit = jax.jit
import fastdispatch
from fastdispatch import UnsupportedJaxError, UnsupportedJaxWarning
assert fastdispatch.jit is stock_jit, fastdispatch.jit
assert fastdispatch.device_put is jax.device_put and fastdispatch.eval_shape is jax.eval_shape
f = fastdispatch.jit(lambda x: x * 2 + 1)
stock = stock_jit(lambda x: x * 2 + 1)
assert f(jnp.arange(4)).tolist() == stock(jnp.arange(4)).tolist()
assert type(f) is type(stock)
assert fastdispatch.warm_start_stats() is None and fastdispatch.warm_start("/nonexistent") is None
for name in ("CompiledFunctionCache", "trace", "stats", "assert_max_compiles", "set_post_hook"):
    try:
        getattr(fastdispatch, name)()
    except UnsupportedJaxError as error:
        assert "jax" in str(error) and name in str(error), error
    else:
        raise AssertionError(name + " did not raise")
try:
    import equinox
except ImportError:
    pass
else:
    assert fastdispatch.filter_jit is equinox.filter_jit
try:
    import flax.nnx
except ImportError:
    pass
else:
    import fastdispatch.nnx
    from fastdispatch.nnx import jit as nnx_jit
    assert fastdispatch.nnx.jit is flax.nnx.jit and nnx_jit is flax.nnx.jit
print("CHECKS-OK")
"""


def test_a_hidden_name_hands_off_with_one_warning():
    proc = run_python(HIDE_NAME, CHECKS)
    assert "CHECKS-OK" in proc.stdout, proc.stdout + proc.stderr
    (warning,) = warnings_in(proc.stderr)
    import jax

    assert f"jax {jax.__version__}" in warning
    assert "jax._src.lib.jax_jit._ArgSignatureOfValue" in warning
    assert "jax>=0.8,<0.11" in warning


def test_a_jax_outside_the_range_hands_off_with_one_warning():
    proc = run_python(FUTURE_JAX, CHECKS)
    assert "CHECKS-OK" in proc.stdout, proc.stdout + proc.stderr
    (warning,) = warnings_in(proc.stderr)
    assert "jax 0.99.0 is outside the tested range" in warning and "lacks" not in warning


def test_the_command_line_runs_the_program_stock(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    launch = "import runpy\nrunpy.run_module('fastdispatch', run_name='__main__')\n"
    stock = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, cwd=ROOT)
    assert "RESULT" in stock.stdout, stock.stderr
    for options in ([], ["--trace"]):
        proc = run_python(HIDE_NAME, launch, *options, str(program))
        assert proc.returncode == 0, proc.stderr
        # Stock results, and jax.jit's own wrapper: nothing was patched.
        assert proc.stdout == stock.stdout
        assert len(warnings_in(proc.stderr)) == 1, proc.stderr
        if options:
            assert "python -m fastdispatch: no dispatch report: the program ran on stock jax" in proc.stderr
    bench = run_python(HIDE_NAME, launch, "bench", "--quick")
    assert bench.returncode == 1 and "bench: nothing to measure" in bench.stderr
    assert len(warnings_in(bench.stderr)) == 1, bench.stderr


@pytest.mark.skipif(importlib.util.find_spec("equinox") is None, reason="equinox is not installed")
def test_the_command_line_leaves_filter_jit_alone(tmp_path):
    program = tmp_path / "eqx_prog.py"
    program.write_text("import equinox, jax\nprint(equinox.filter_jit.__module__)\n")
    launch = "import runpy, sys\nrunpy.run_module('fastdispatch', run_name='__main__')\n"
    proc = run_python(HIDE_NAME, launch, str(program))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("equinox"), proc.stdout
