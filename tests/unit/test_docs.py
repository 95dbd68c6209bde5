"""The examples of docs/api.md run, in order, in one namespace."""

import pathlib
import re

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_api_examples_run():
    blocks = python_blocks(DOCS / "api.md")
    assert len(blocks) >= 5
    namespace = {"__name__": "api_examples"}
    for number, block in enumerate(blocks):
        code = compile(block, f"docs/api.md block {number}", "exec")
        exec(code, namespace)
