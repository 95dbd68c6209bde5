"""Build the Cython extensions; metadata lives in pyproject.toml.

Set FASTDISPATCH_ANNOTATE=1 to write Cython's annotated HTML beside each .pyx.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

# One extension per concept, in the order of one call (see docs/architecture.md).
MODULES = [
    "_pytree",
    "_signature",
    "_execute",
    "_cache",
    "_dispatch",
    "_filter",  # the equinox front end's hot path
    "_nnx",  # the flax NNX front end's hot path
]

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "embedsignature": True,
    "binding": True,
    "cdivision": True,
}

extensions = [Extension(f"fastdispatch.{name}", [f"fastdispatch/{name}.pyx"]) for name in MODULES]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=COMPILER_DIRECTIVES,
        annotate=os.environ.get("FASTDISPATCH_ANNOTATE") == "1",
    ),
)
