"""Build the Cython extensions; metadata lives in pyproject.toml.

Set FASTDISPATCH_ANNOTATE=1 to write Cython's annotated HTML beside each .pyx.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# One extension per concept, in the order of one call (see docs/architecture.md).
MODULES = [
    "_pytree",
    "_signature",
    "_unchanged",  # the identity guard's proof that a tree's objects are unchanged
    "_execute",
    "_outputs",
    "_cache",
    "_engine",  # the steps of a call, under every front end
    "_dispatch",
    "_filter",  # the equinox front end's hot path
    "_nnx",  # the flax NNX front end's hot path
    "_device_put",  # device_put: host data to devices
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
        f"fastdispatch.{name}",
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
