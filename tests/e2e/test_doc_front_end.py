"""docs/architecture.md's worked example of a new front end, built and run.

The section "Adding a front end" gives a front end's package file by file; this
takes its code blocks as written, builds them as a package of their own
(``toy_lib_jit``, beside a ``lib`` whose jit is jax.jit), and runs it: its
calls must give jax.jit's results, hit the engine's cache, and load from warm
start's store in a second process.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"

LIB = """\
import jax

__version__ = "1.0"
jit = jax.jit
"""

PROGRAM = """\
import json, sys
import jax, jax.numpy as jnp
import fastdispatch
import toy_lib_jit

def f(x, tree):
    return {"sum": x + tree["a"], "scaled": tree["b"] * 2}

ours, stock = toy_lib_jit.jit(f), jax.jit(f)
x, tree = jnp.arange(3.0), {"a": jnp.ones(3), "b": jnp.int32(4)}
results = []
for _ in range(3):
    got, expected = ours(x, tree), stock(x, tree)
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        assert a.dtype == b.dtype and a.aval.weak_type == b.aval.weak_type and a.sharding == b.sharding
        assert (a == b).all()
    results.append(jax.tree.map(lambda v: v.tolist(), got))
stats = fastdispatch.default_cache().stats()
print(json.dumps({"results": results, "hits": stats["hits"], "misses": stats["misses"],
                  "warm": fastdispatch.warm_start_stats()}))
"""


def doc_files():
    """{path: text} of the section's code blocks, each after its "`path`:" line."""
    section = DOC.read_text().split("## Adding a front end", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"`(fastdispatch/lib_jit/[\w.]+)`(?:(?!```).)*?:\n\n```\w+\n(.*?)```", section, re.S)
    return {pathlib.PurePath(path).name: text for path, text in found}


def test_the_docs_name_every_file_of_the_package():
    assert sorted(doc_files()) == ["__init__.py", "function.pxd", "function.pyx", "warm.py"]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    package = root / "toy_lib_jit"
    package.mkdir()
    for name, text in doc_files().items():
        (package / name).write_text(text.replace("fastdispatch.lib_jit", "toy_lib_jit"))
    (root / "lib.py").write_text(LIB)
    (root / "program.py").write_text(PROGRAM)
    build = textwrap.dedent(
        f"""\
        from Cython.Build import cythonize
        from setuptools import Extension, setup
        extension = Extension("toy_lib_jit.function", ["toy_lib_jit/function.pyx"])
        setup(ext_modules=cythonize([extension], include_path=[{str(REPO)!r}],
                                    compiler_directives={{"language_level": 3, "binding": True}}),
              script_args=["build_ext", "--inplace", "-q"])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", build], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def run(root, **env):
    path = os.pathsep.join([str(root), str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "program.py"],
        cwd=root,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_example_runs_as_jax_jit_on_the_engine(toy):
    first = run(toy)
    assert first["results"][0] == {"scaled": 8, "sum": [1.0, 2.0, 3.0]}
    assert first["results"] == [first["results"][0]] * 3
    assert (first["misses"], first["hits"]) == (1, 2)  # compiled once, then the engine's cache


def test_the_example_loads_from_warm_start_in_a_second_process(toy, tmp_path):
    store = {"FASTDISPATCH_WARM_START": str(tmp_path / "store")}
    written = run(toy, **store)
    assert written["warm"]["written"] >= 1
    loaded = run(toy, **store)
    assert loaded["warm"]["loaded"] >= 1 and loaded["results"] == written["results"]
