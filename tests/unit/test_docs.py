"""The examples of docs/api.md run, in order, in one namespace."""

import pathlib
import re

import pytest
from frontends import FLAX_REASON, HAS_FLAX

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_api_examples_run():
    blocks = python_blocks(DOCS / "api.md")
    assert len(blocks) >= 5
    namespace = {"__name__": "api_examples"}
    left_out = []
    for number, block in enumerate(blocks):
        if not HAS_FLAX and "flax" in block:
            left_out.append(number)  # the nnx.jit examples: no flax on this jax
            continue
        code = compile(block, f"docs/api.md block {number}", "exec")
        exec(code, namespace)
    if left_out:
        pytest.skip(f"docs/api.md blocks {left_out} not run (every other one ran): {FLAX_REASON}")
