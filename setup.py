"""Build the Cython extensions; metadata lives in pyproject.toml.

Set FASTDISPATCH_ANNOTATE=1 to write Cython's annotated HTML beside each .pyx.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# One extension per concept, by layer: the core in the order of one call, then
# the front ends, each in its own package (see docs/architecture.md).
MODULES = [
    "core/pytree/fields",  # registered types read from the instance __dict__
    "core/pytree/registry",  # what each Python type is to flatten
    "core/pytree/treedef",  # a tree's structure
    "core/pytree/flatten",
    "core/pytree/paths",  # key paths, repr, differences (not the hot path)
    "core/signature",
    "core/execute",
    "core/outputs",
    "core/cache",
    "core/engine",  # the steps of a call, under every front end
    "jax_jit/layout",  # how a jit call passed its arguments: its guard, read in place
    "jax_jit/function",  # the jit front end: CompiledFunction
    "jax_jit/transfer",  # device_put: host data to devices
    "equinox/unchanged",  # a tree's objects are unchanged, proved by identity
    "equinox/bind",  # binding a call as equinox does, once per call layout
    "equinox/same_call",  # SameCall: a call on an earlier call's very objects
    "equinox/function",  # the equinox front end's hot path
    "nnx/function",  # the flax NNX front end's hot path
]

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "embedsignature": True,
    "binding": True,
    "cdivision": True,
}

# _signature reads numpy arrays' dtype and shape from their C struct (numpy's headers).
# A traceback entry names the .pyx line only, not the generated C line: an error
# that crosses the hot path's frames (jax's own, on a hand-off) is not slowed by
# Cython's runtime look-up of whether to show C lines, once per frame.
extensions = [
    Extension(
        "fastdispatch." + name.replace("/", "."),
        [f"fastdispatch/{name}.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[
            ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
            ("CYTHON_CLINE_IN_TRACEBACK", "0"),
        ],
    )
    for name in MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=COMPILER_DIRECTIVES,
        annotate=os.environ.get("FASTDISPATCH_ANNOTATE") == "1",
    ),
)
