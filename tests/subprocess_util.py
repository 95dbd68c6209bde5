"""Run a test body in a fresh Python process with N CPU devices.

jax fixes its device count when it first initialises a backend, so a test that
needs 8 CPU devices cannot run in the pytest process (which has one). The body
is a module-level function of a test module; it runs in a subprocess that sets
``jax_num_cpu_devices`` before anything touches a backend, imports the module
by path, and calls the function with the given (repr-able) arguments. Batch
several checks into one body: each process pays jax's start-up (~2 s here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

_PRELUDE = """\
import importlib.util, sys, warnings
sys.path[:0] = {paths!r}
import jax
jax.config.update("jax_num_cpu_devices", {n_devices})
assert len(jax.devices()) == {n_devices}, jax.devices()
# pytest runs with filterwarnings = error; the body does too, with pyproject.toml's
# one exception: equinox's import reads jax.core names that jax 0.8 deprecates.
warnings.simplefilter("error")
warnings.filterwarnings("ignore", "jax[.]core[.][a-z_]+ is deprecated", DeprecationWarning, "equinox[.]")
spec = importlib.util.spec_from_file_location("_subprocess_body", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.{func}(*{args!r})
print("SUBPROCESS-OK")
"""


def run_in_subprocess(func, *args, n_devices: int = 8, timeout: float = 300.0) -> str:
    """Call ``func(*args)`` in a new interpreter with ``n_devices`` CPU devices.

    ``func`` must be defined at module level of an importable file; ``args``
    must round-trip through ``repr`` (strings, numbers, tuples). Returns the
    subprocess's stdout; raises AssertionError with its stdout and stderr when
    it fails, times out, or does not reach the end of ``func``.
    """
    path = os.path.abspath(sys.modules[func.__module__].__file__)
    code = _PRELUDE.format(
        paths=[os.path.dirname(path), _TESTS_DIR],
        n_devices=n_devices,
        path=path,
        func=func.__name__,
        args=tuple(args),
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"{func.__name__} did not finish in {timeout} s (deadlock?)\n"
            f"stdout:\n{e.stdout}\nstderr:\n{e.stderr}"
        ) from None
    if proc.returncode != 0 or "SUBPROCESS-OK" not in proc.stdout:
        raise AssertionError(
            f"{func.__name__} failed in a subprocess with {n_devices} devices "
            f"(exit code {proc.returncode})\n"
            f"stdout:\n{textwrap.indent(proc.stdout, '  ')}\n"
            f"stderr:\n{textwrap.indent(proc.stderr, '  ')}"
        )
    return proc.stdout
