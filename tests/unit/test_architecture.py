"""docs/architecture.md's jit hit and miss, read against the code: the
functions its tables list are the ones the code defines where they say, as
many as the text claims, none of them inline; the helpers it leaves out as
inline are inline; the front end's hooks on the miss are the crossings it
counts, and the engine's hooks it lists are not a front end's."""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fastdispatch"
DOC = (REPO / "docs" / "architecture.md").read_text()
NUMBERS = {"twice": 2, "three times": 3}


def section(opening):
    """The text from the paragraph that opens with ``opening`` to the end of its table."""
    start = DOC.index(opening)
    table = DOC.index("\n| # |", start)
    end = DOC.find("\n\n", table + 1)
    return DOC[start:end]


def rows(text):
    """(names, file) per table row: its function column's backquoted names."""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 3 or not cells[0][:1].isdigit():
            continue
        names = re.findall(r"`([^`]+)`", cells[1].split(" (")[0])
        yield names, cells[2].strip("`")


def definitions(path):
    """{name: inline?} of the functions and methods a Cython file defines
    (``Class.method`` for methods), and its .pxd's inline functions."""
    found = {}
    for source in (path, path.with_suffix(".pxd")):
        if not source.exists():
            continue
        cls = None
        for line in source.read_text().splitlines():
            klass = re.match(r"(?:cdef )?class (\w+)", line)
            if klass:
                cls = klass.group(1)
                continue
            if line and not line.startswith((" ", "#", "@")):
                cls = None
            match = re.match(r"(\s*)(?:cdef|cpdef|def)\s+(inline\s+)?(?:[\w.*]+\s+)*?(\w+)\(", line)
            if match and source == path or match and match.group(2):
                name = match.group(3) if not match.group(1) else f"{cls}.{match.group(3)}"
                found[name] = bool(match.group(2))
    return found


HIT = section("A jit hit on `f(x, y)`")
MISS = section("A jit miss")


@pytest.mark.parametrize("text", [HIT, MISS], ids=["hit", "miss"])
def test_every_listed_function_is_defined_where_listed_and_not_inline(text):
    for names, file in rows(text):
        defined = definitions(PACKAGE / file) if file.endswith(".pyx") else None
        for name in names:
            if defined is None:  # a Python module: a plain function
                assert re.search(rf"^def {name}\(", (PACKAGE / file).read_text(), re.M), (name, file)
                continue
            assert name in defined, f"{name} is not defined in {file}"
            assert not defined[name], f"{name} is inline: the doc leaves such helpers out"


@pytest.mark.parametrize("text", [HIT, MISS], ids=["hit", "miss"])
def test_the_count_the_text_claims_is_the_tables(text):
    claimed = int(re.search(r"passes through (\d+)", text).group(1))
    assert claimed == sum(len(names) for names, _ in rows(text))


def test_the_helpers_left_out_are_inline():
    helpers = DOC[DOC.index("The small inline helpers") : DOC.index("neither is what lies below")]
    names = re.findall(r"`(\w+)`", helpers)
    inline = {}
    for path in list(PACKAGE.rglob("*.pyx")) + list(PACKAGE.rglob("*.pxd")):
        inline.update({name.rpartition(".")[2]: flag for name, flag in definitions(path).items() if flag})
    assert len(names) >= 8
    assert not [name for name in names if name not in inline]


def test_the_miss_crosses_into_jit_as_often_as_it_says_and_nowhere_else():
    claimed = NUMBERS[re.search(r"front end (twice|three times)", MISS).group(1)]
    jit = definitions(PACKAGE / "jax_jit" / "function.pyx")
    crossings = [
        name
        for names, file in rows(MISS)
        if file.startswith("jax_jit/")
        for name in names
        if name.startswith("CompiledFunction.")
    ]
    assert len(crossings) == claimed
    # An engine method the miss lists is the engine's: jit does not override it.
    for names, _ in rows(MISS):
        for name in names:
            if name.startswith("Engine."):
                assert "CompiledFunction." + name.partition(".")[2] not in jit, name
