"""The package's layers, read from its imports: every .py, .pyx and .pxd under
fastdispatch/, with imports at module level and inside functions, ``cimport``
included.

The layers, lowest first.  A module imports only from its own layer or lower
ones, so that each layer can be read, tested and changed knowing only those
below it (docs/architecture.md):

  base        _jax.py, _reasons.py: every private jax name and the vocabulary of
              hand-off reasons.  Everything reads them; they read nothing of ours.
  core        core/: trees, signatures, executables, outputs, the cache and the
              engine that every front end shares.
  front ends  jax_jit/, equinox/, nnx/: each is whole in its package (its
              dispatcher, its library's private names, its warm-start hooks) and
              imports no other front end: what two share lives in the core.
  tools       tracing/, warm/, distributed.py: they see a call through what the
              core records of it and what a front end hands them (a signature's
              ``front``, a function's warm-start hooks), never by importing one,
              so a new front end needs no change to them.
  package     __init__.py, _handoff.py: the public names, which wire the layers
              together (the front ends' lazy imports, warm start from the
              environment).
  programs    __main__.py, bench/: the command line and the benchmark use the
              package as a program does, through its public names.

An import of ``fastdispatch.a.b`` also runs ``fastdispatch/__init__.py`` and
``fastdispatch/a/__init__.py`` (Python imports parents first): those implicit
imports are the import system's, not the module's, and are not counted.
"""

import ast
import pathlib
import re

import fastdispatch

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "fastdispatch"

# jit's, and those the package registers (fastdispatch.FRONT_ENDS, one line each).
FRONT_ENDS = ("fastdispatch.jax_jit",) + tuple(front_end.package for front_end in fastdispatch.FRONT_ENDS)

# (layer, the modules in it by dotted prefix), lowest first.
LAYERS = [
    ("base", ("fastdispatch._jax", "fastdispatch._reasons")),
    ("core", ("fastdispatch.core",)),
    ("front ends", FRONT_ENDS),
    ("tools", ("fastdispatch.tracing", "fastdispatch.warm", "fastdispatch.distributed")),
    ("package", ("fastdispatch", "fastdispatch._handoff")),
    ("programs", ("fastdispatch.__main__", "fastdispatch.bench")),
]

# Imports the rules allow anyway: (importer, imported) -> why.  Empty: keep it so.
ALLOWED = {}


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_files():
    return sorted(p for suffix in ("*.py", "*.pyx", "*.pxd") for p in PACKAGE.rglob(suffix))


MODULES = {module_name(p) for p in package_files()}


def is_package(name):
    return (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()


def python_imports(path):
    """(module, names) per import statement anywhere in a Python file."""
    tree = ast.parse(path.read_text(), str(path))
    base = module_name(path)
    package = base if path.name == "__init__.py" else base.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(anchor + ([module] if module else []))
            yield module, tuple(alias.name for alias in node.names)


# Cython: `from X cimport a, b`, `from X import (a,\n b)`, `cimport X`, `import X`.
_CYTHON_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+c?import\s+(\([^)]*\)|[^\n#]*)", re.M)
_CYTHON_IMPORT = re.compile(r"^\s*c?import\s+([\w.]+(?:\s*,\s*[\w.]+)*)", re.M)


def cython_imports(path):
    text = path.read_text()
    for match in _CYTHON_FROM.finditer(text):
        names = [n.strip().split(" as ")[0].strip() for n in match.group(2).strip("()").split(",")]
        yield match.group(1), tuple(n for n in names if n)
    for match in _CYTHON_IMPORT.finditer(text):
        for name in match.group(1).split(","):
            yield name.strip(), ()


def imports_of(path):
    """The package's modules that one file imports."""
    found = set()
    reader = python_imports if path.suffix == ".py" else cython_imports
    for module, names in reader(path):
        if module != "fastdispatch" and not module.startswith("fastdispatch."):
            continue
        targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
        if len(targets) < len(names) or not names:
            targets.append(module)  # names defined in the module itself
        found.update(t for t in targets if t in MODULES)
    found.discard(module_name(path))
    return found


def import_graph():
    graph = {}
    for path in package_files():
        graph.setdefault(module_name(path), set()).update(imports_of(path))
    return graph


def layer_of(module):
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (index, prefix)
    return best


def front_end_of(module):
    return next((f for f in FRONT_ENDS if module == f or module.startswith(f + ".")), None)


def test_the_reader_sees_every_kind_of_import():
    graph = import_graph()
    assert "fastdispatch.core.cache" in graph["fastdispatch.core.engine"]  # a cimport
    assert "fastdispatch._jax" in graph["fastdispatch.core.engine"]  # `from fastdispatch import _jax`
    assert "fastdispatch.tracing.hooks" in graph["fastdispatch.tracing"]  # inside a function
    assert "fastdispatch.nnx.function" in graph["fastdispatch.nnx"]  # a package's own module


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


def test_no_module_imports_from_a_higher_layer():
    upward = []
    for importer, imported in sorted(import_graph().items()):
        for target in sorted(imported):
            if layer_of(target)[0] > layer_of(importer)[0] and (importer, target) not in ALLOWED:
                upward.append(f"{importer} ({LAYERS[layer_of(importer)[0]][0]}) imports {target}")
    assert upward == []


def test_front_ends_do_not_import_each_other():
    crossing = []
    for importer, imported in sorted(import_graph().items()):
        mine = front_end_of(importer)
        for target in sorted(imported):
            theirs = front_end_of(target)
            if mine and theirs and theirs != mine and (importer, target) not in ALLOWED:
                crossing.append(f"{importer} imports {target}")
    assert crossing == []


def test_tools_import_no_front_end():
    tools = LAYERS[3][1]
    reaching = []
    for importer, imported in sorted(import_graph().items()):
        if not any(importer == t or importer.startswith(t + ".") for t in tools):
            continue
        for target in sorted(imported):
            if front_end_of(target) and (importer, target) not in ALLOWED:
                reaching.append(f"{importer} imports {target}")
    assert reaching == []


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_every_allowed_import_still_exists():
    graph = import_graph()
    gone = [pair for pair in ALLOWED if pair[1] not in graph.get(pair[0], ())]
    assert gone == [], "allowed imports that are gone: remove them from ALLOWED"
