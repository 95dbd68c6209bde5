"""Build the Cython extensions; metadata lives in pyproject.toml.

Set FASTDISPATCH_ANNOTATE=1 to write Cython's annotated HTML beside each .pyx.
"""

import os
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# One extension per .pyx file: a concept each, in the package of its layer
# (docs/architecture.md); a new front end's modules are found here by their folder.
MODULES = sorted(
    str(path.relative_to("fastdispatch").with_suffix("")) for path in Path("fastdispatch").rglob("*.pyx")
)

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
        # timer_create (tracing/timer.pyx) is librt's before glibc 2.34.
        libraries=["rt"] if name == "tracing/timer" and sys.platform.startswith("linux") else [],
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
