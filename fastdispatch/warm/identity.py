"""A function's identity across processes: one digest of everything its trace
can read.

jax traces a function by running it: what it computes depends on its code and
on every value that code reaches at trace time, not on its name.  So the digest
covers the code (bytecode, constants, names, defaults, nested code objects) and
what it reaches: closure cells, the globals its code names (recursively, through
the functions and nested code it reaches), arrays and scalars by content,
installed modules and their functions by name and version, user modules by the
digest of their source file.  A value it cannot describe the same way in
another process (an object of an arbitrary class, a file, a lock) raises
NotStored, naming its type and where the function reaches it: such a function
is compiled as it always is, never loaded.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import dis
import enum
import functools
import hashlib
import importlib.metadata
import os
import pathlib
import sys
import sysconfig
import types

import jax
import numpy as np
from jax.tree_util import PyTreeDef

from fastdispatch import _jax, _reasons
from fastdispatch.core.pytree import tree_nodes


class NotStored(Exception):
    """A call the store cannot key stably; the message says what and where,
    ``reason`` (one of fastdispatch._reasons' WARM_ constants) why."""

    def __init__(self, message, reason=_reasons.WARM_UNDESCRIBED):
        super().__init__(message)
        self.reason = reason


# Where installed code lives: the standard library and site-packages.  A module
# there is keyed by its name and its package's version, not by its source.
_INSTALLED_PREFIXES = tuple(
    {
        os.path.realpath(path) + os.sep
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))
    }
)


@functools.cache
def _package_version(top: str) -> str:
    """The version of the installed package ``top`` (a top-level module name)."""
    if top == "fastdispatch":
        return fastdispatch_version()
    module = sys.modules.get(top)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return sys.version
    try:
        return importlib.metadata.version(top)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        pass
    folder = _install_folder(top, getattr(module, "__file__", None))
    distribution = None if folder is None else _folder_distributions(folder).get(top)
    if distribution is not None:  # PyYAML's yaml, say
        return distribution.version
    return sys.version if _is_installed_file(getattr(module, "__file__", None)) else ""


def _realpath(path: str) -> str:
    """``os.path.realpath(path)``, its folders resolved once each
    (``_real_folder``): a key asks of many files in few folders, and on a TPU
    host's file system each of realpath's system calls took ~50 us (most of a
    first key's time)."""
    folder, name = os.path.split(path)
    if not os.path.isabs(path) or name in ("", os.curdir) or os.pardir in path.split(os.sep):
        return os.path.realpath(path)
    resolved = os.path.join(_real_folder(folder), name)
    return os.path.realpath(resolved) if os.path.islink(resolved) else resolved


_real_folder = functools.lru_cache(maxsize=4096)(_realpath)


@functools.lru_cache(maxsize=4096)
def _is_installed_file(path) -> bool:
    # Cached: for each class of a large tree (an nnx GraphDef's every node).
    return path is None or _realpath(path).startswith(_INSTALLED_PREFIXES)


def _installed(module_name: str | None) -> bool:
    """Code of this module is installed (stdlib, site-packages, a folder pip
    installed into, fastdispatch itself)."""
    if not module_name:
        return False
    top = module_name.partition(".")[0]
    if top == "fastdispatch" or top in sys.builtin_module_names:
        return True
    module = sys.modules.get(module_name) or sys.modules.get(top)
    if module is None:
        return False
    path = getattr(module, "__file__", None)
    return _is_installed_file(path) or _in_its_distribution(top, path)


@functools.lru_cache(maxsize=4096)
def _in_its_distribution(top, path) -> bool:
    """``path``, a file of package ``top``, lies in the folder a distribution
    of ``top`` was installed into: ``pip install --target DIR`` on PYTHONPATH
    (as on the TPU machine), a user site.  Not so an editable install, whose
    files stay in the project (its dist-info is elsewhere: keyed by source)."""
    folder = _install_folder(top, path)
    return folder is not None and top in _folder_distributions(folder)


def _install_folder(top, path):
    """The folder that holds package (or module) ``top``, given one of its
    files, or None."""
    if path is None:
        return None
    folder = package = os.path.dirname(_realpath(path))
    while os.path.basename(package) != top:
        parent = os.path.dirname(package)
        if parent == package:
            return folder  # a module of its own, top.py
        package = parent
    return os.path.dirname(package)


@functools.lru_cache(maxsize=64)
def _folder_distributions(folder) -> dict:
    """Top-level name -> its Distribution, of the distributions installed
    into ``folder`` (their dist-info folders there): only that folder is
    read, not every distribution on the path (which takes 0.1 s and more)."""
    try:
        names = [name for name in os.listdir(folder) if name.endswith(".dist-info")]
    except OSError:
        return {}
    found = {}
    for name in names:
        distribution = importlib.metadata.PathDistribution(pathlib.Path(folder, name))
        declared = (distribution.read_text("top_level.txt") or "").split()
        # Else the first part of each installed file's path (RECORD's first
        # column), read as text: parsing it into paths is most of the time.
        record = "" if declared else distribution.read_text("RECORD") or ""
        tops = declared or {
            line.partition(",")[0].split("/")[0].partition(".")[0] for line in record.splitlines()
        }
        for top in tops:
            found.setdefault(top, distribution)
    return found


def read_install_folders() -> None:
    """Read which distributions each folder on ``sys.path`` holds, outside
    the installed prefixes (``pip install --target DIR`` on PYTHONPATH), so
    that a key does not: the warm-start preloader calls this while the
    program imports (45 dist-info folders took 16 ms of a TPU host's first
    key)."""
    for entry in list(sys.path):
        if entry and os.path.isdir(entry):
            folder = _realpath(entry)  # and the folders of its modules' files, resolved
            if not (folder + os.sep).startswith(_INSTALLED_PREFIXES):
                _folder_distributions(folder)


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    # Keyed by mtime and size too, so an edited file is read again.
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# Sentinel objects a library puts in its trees (equinox's MISSING in a Module's
# aux data), known by a stable name: id -> (name, the object, kept alive).
_constants: dict = {}


def register_constant(name: str, value) -> None:
    """Describe ``value`` by ``name`` in every digest: a library's sentinel,
    the same object in every process that imports the library."""
    _constants[id(value)] = (name, value)


def constant_name(value):
    """The name ``value`` was registered under, or None."""
    found = _constants.get(id(value))
    return None if found is None or found[1] is not value else found[0]


def constant(name: str):
    """The object registered under ``name``, or None."""
    for registered, value in _constants.values():
        if registered == name:
            return value
    return None


# Classes of installed libraries whose objects are tokens of identity, never
# of value: a trace reads one only by comparing it with others (flax's FlaxId,
# the counter-based id of every Linen Module and Scope, which flax itself
# fingerprints by order of first appearance: linen/transforms.py).  Its
# number counts the objects made before it in the process, not what the trace
# computes, so an object of one is described by which distinct token of its
# class it is among those the digest met, in order.  Matched by the class's
# module and name: describing one imports nothing.
_IDENTITY_TOKENS = frozenset({("flax.ids", "FlaxId")})


def _resolve(module_name: str, qualname: str):
    value = sys.modules.get(module_name)
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value


class _Digest:
    """Writes values into a sha256 as tokens; refuses what it cannot describe."""

    def __init__(self, prune_methods=False):
        self.hash = hashlib.sha256()
        self.parts = []  # the tokens not yet hashed (flush)
        self.seen = {}  # id -> order of the functions, code and containers met (cycles)
        self.alive = []  # keeps them alive, so that ids stay unique
        self.where = "?"  # the function being read: file:line
        self.tokens = {}  # identity token (by equality) -> the order it was met in
        # The classes of the tree nodes met, whose methods the trace may run:
        # digested last (``methods``), each where the code read may call it
        # by name when ``prune_methods``, else every one.
        self.node_types = []
        self.prune_methods = prune_methods
        self.names = set()  # the names the code read looks up: attributes, globals, strings
        self.any_name = False  # the code read looks attributes up by computed name (getattr)

    def token(self, *parts):
        # repr, so that no part can hold the separator: one stream, one meaning.
        # Joined and hashed at once (``flush``): a key writes hundreds.
        self.parts.extend(map(repr, parts))

    def flush(self):
        if self.parts:
            self.parts.append("")
            self.hash.update("\x00".join(self.parts).encode("utf-8", "backslashreplace"))
            self.parts = []

    def raw(self, data: bytes):
        self.token("bytes", len(data))
        self.flush()
        self.hash.update(data)

    def hexdigest(self) -> str:
        self.flush()
        return self.hash.hexdigest()

    def refuse(self, value, how):
        kind = type(value)
        name = (
            kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        )
        raise NotStored(f"{how} an object of type {name} at {self.where}")

    def once(self, value) -> bool:
        """True the first time ``value`` is met; after, writes a back reference."""
        index = self.seen.get(id(value))
        if index is not None:
            self.token("ref", index)
            return False
        self.seen[id(value)] = len(self.seen)
        self.alive.append(value)
        return True

    # -- values ----------------------------------------------------------------

    def value(self, value, how):
        # Each kind is described by one method, which the kind alone decides
        # (``_describer``, once per kind); ``by_value`` reads the value itself.
        kind = type(value)
        describe = _DESCRIBERS.get(kind)
        if describe is None:
            describe = _describer(kind)
        describe(self, value, how)

    def scalar(self, value, how):
        self.token(type(value).__name__, value)

    def float_(self, value, how):
        self.token("float", value.hex())

    def complex_(self, value, how):
        self.token("complex", value.real.hex(), value.imag.hex())

    def bytes_(self, value, how):
        self.raw(value)

    def enum(self, value, how):
        self.type_(type(value), how)
        self.token("enum", value.name)

    def sharding(self, value, how):  # a Variable's sharding metadata, say
        self.token("sharding", sharding_description(value, None))

    def sequence(self, value, how):
        if self.once(value):
            self.token(type(value).__name__, len(value))
            for item in value:
                self.value(item, how)

    def namedtuple(self, value, how):
        self.type_(type(value), how)
        self.token("namedtuple", len(value))
        for item in value:
            self.value(item, how)

    def dict_(self, value, how):
        if self.once(value):
            self.token("dict", len(value))
            for key, item in value.items():
                self.value(key, how)
                self.value(item, how)

    def treedef(self, value, how):  # a static value holding a tree's structure (nnx's GraphDef does)
        self.token("treedef")
        self.value(tree_structure(value), how)

    def mapping(self, value, how):
        # A library's read-only mapping (flax's HashableMapping, inside every
        # nnx GraphDef): its type, then its items as a dict's.
        self.type_(type(value), how)
        if self.once(value):
            self.token("mapping", len(value))
            for key, item in value.items():
                self.value(key, how)
                self.value(item, how)

    def set_(self, value, how):
        # Unordered: each element by its own digest, sorted.
        self.token(type(value).__name__, sorted(_digest_of(item, how, self.where) for item in value))

    def typed_ndarray(self, value, how):
        # A numpy constant as jax 0.8 keeps it in a jaxpr (from 0.9 an
        # ndarray): its array and weak type.
        self.token("typed ndarray", bool(value.weak_type))
        self.numpy(value.val, how)

    def dtype(self, value, how):
        self.token("dtype", value.str, value.name)

    def method(self, value, how):
        self.token("method")
        self.value(value.__self__, how)
        self.value(value.__func__, how)

    def partial(self, value, how):
        self.token("partial")
        self.value(value.func, how)
        self.value(value.args, how)
        self.value(value.keywords, how)

    def dataclass(self, value, how):
        self.type_(type(value), how)
        if self.once(value):
            # Its fields, and whatever else __post_init__ set on it.
            names = [field.name for field in dataclasses.fields(value)]
            names += sorted(set(getattr(value, "__dict__", ())) - set(names))
            for name in names:
                self.token(name)
                self.value(getattr(value, name), how)

    def by_value(self, value, how):
        """A value whose kind does not decide how it is described."""
        if self.jitted(value, how):
            pass
        elif isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            self.key_array(value, how)
        elif self.pytree(value, how):
            pass
        elif (name := constant_name(value)) is not None:
            self.token("constant", name)
        elif self.named(value):
            pass
        else:
            self.refuse(value, how)

    def partition_spec(self, spec, how=None):
        """A PartitionSpec (flax's sharding metadata holds them): each
        dimension's axis names (None, a name, a tuple of names, or
        UNCONSTRAINED), then its unreduced and reduced axes."""
        unconstrained = jax.sharding.PartitionSpec.UNCONSTRAINED
        dims = tuple("unconstrained" if axes is unconstrained else axes for axes in spec)
        self.token(
            "partition spec",
            dims,
            sorted(getattr(spec, "unreduced", ())),
            sorted(getattr(spec, "reduced", ())),
        )

    def numpy(self, value, how):
        array = np.asarray(value)
        if array.dtype.hasobject:
            self.refuse(value, how)
        self.token("numpy", type(value).__name__, array.dtype.str, array.shape)
        self.raw(np.ascontiguousarray(array).tobytes())

    def jax_array(self, value, how):
        if not value.is_fully_addressable:
            self.refuse(value, how)
        self.token("jax", value.dtype.str, value.shape, value.weak_type)
        self.raw(np.ascontiguousarray(np.asarray(value)).tobytes())

    def key_array(self, value, how):
        """A typed PRNG key array (an ``nnx.Rngs`` stream's): its
        implementation, then its key data as an array."""
        self.token("key", str(jax.random.key_impl(value)), value.shape)
        self.jax_array(jax.random.key_data(value), how)

    def pytree(self, value, how) -> bool:
        """A value of a pytree node type jax knows (a flax Variable, State or
        Module, an optax state): its structure's node types and data, each
        leaf by content, and the functions defined in its user classes (a
        Module's ``__call__`` runs in the trace, with the globals it reads)."""
        try:
            leaves, treedef = jax.tree_util.tree_flatten(value)
        except Exception:
            return False
        if treedef.num_nodes == 1 and treedef.num_leaves == 1 and leaves and leaves[0] is value:
            return False  # a leaf: no node type describes it
        if not self.once(value):
            return True
        self.token("pytree")
        self.value(tree_structure(treedef), how)
        for leaf in leaves:
            self.value(leaf, how)
        self.add_node_types(kind for kind, _ in tree_nodes(treedef))
        return True

    def add_node_types(self, kinds):
        for kind in kinds:
            if kind not in self.node_types:
                self.node_types.append(kind)

    def methods(self):
        """The functions of the user classes among the node types met (a
        Module's ``__call__``: the trace runs them, and their class's source
        alone does not describe the globals they read).  Pruned, those the
        code read cannot call: a method is called by its name (an attribute
        the code looks up, or a string it holds: ``apply(method="encode")``),
        by Python's protocols (dunders) or by a library's hook (linen's
        ``setup``); a method only the host calls (a sampler's text decoding
        through a global tokenizer) is not the trace's.  Each method read
        adds its own names, until none is left to add."""
        done = set()
        while True:
            pending = [
                (name, function)
                for name, function in class_functions(self.node_types)
                if function not in done and (not self.prune_methods or self.may_call(name))
            ]
            if not pending:
                return
            for name, function in pending:
                done.add(function)
                self.token("method", name)
                self.value(function, "calls a method that")

    def may_call(self, name) -> bool:
        return (
            self.any_name
            or name in self.names
            or (name.startswith("__") and name.endswith("__"))
            or name in _LIBRARY_HOOKS
        )

    def identity_token(self, value, how=None):
        """An identity token (``_IDENTITY_TOKENS``): its class, and its order
        among the distinct tokens met (equal tokens, the same place)."""
        kind = type(value)
        self.type_(kind, "holds")
        order = self.tokens.setdefault((kind, value), len(self.tokens))
        self.token("identity token", order)

    def jitted(self, value, how) -> bool:
        """A fastdispatch function that describes itself (a fastdispatch.jit
        function: its function and its options; Engine.warm_identity)."""
        from fastdispatch.core.engine import Engine

        parts = value.warm_identity() if isinstance(value, Engine) else None
        if parts is None:
            return False
        fun, options = parts
        self.token("jit")
        self.value(fun, how)
        self.token(options_digest(options))
        return True

    def named(self, value) -> bool:
        """An installed module's function, class or other named object (a
        numpy ufunc, jax.nn.relu): by its name and its package's version."""
        module_name = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        if isinstance(value, np.ufunc):
            module_name, qualname = "numpy", value.__name__
        if not isinstance(module_name, str) or not isinstance(qualname, str):
            return False
        if not _installed(module_name) or _resolve(module_name, qualname) is not value:
            return False
        self.token("named", module_name, qualname, _package_version(module_name.partition(".")[0]))
        return True

    def type_(self, kind, how):
        """A class: installed ones by name and version, user ones by name and
        the source of their module (their methods' code lives there)."""
        module_name = kind.__module__
        self.token("type", module_name, kind.__qualname__)
        if _installed(module_name):
            self.token(_package_version(module_name.partition(".")[0]))
            return
        module = sys.modules.get(module_name)
        if module is None:
            self.refuse(kind, how)
        self.module(module, ())

    # -- code ----------------------------------------------------------------------

    def function(self, fun, how=None):
        if not self.once(fun):
            return
        where = self.where
        code = fun.__code__
        self.where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
        try:
            if _installed(fun.__module__):
                # A library's code: by name and version, but what it closes over
                # (an optimizer's learning rate) by value.
                self.token(
                    "library function",
                    fun.__module__,
                    fun.__qualname__,
                    _package_version(fun.__module__.partition(".")[0]),
                )
            else:
                written = _state_written(code, frozenset(code.co_freevars))
                if written is not None:
                    # Tracing changes the program's state (a trace counter,
                    # say), and a load would skip that change.
                    raise NotStored(
                        f"assigns the {written[0]} variable {written[1]} at {self.where}: "
                        "a load would skip its trace's change to the program's state",
                        _reasons.WARM_CHANGES_STATE,
                    )
                self.token("function")
                self.code(code)
                self.globals_of(fun, code)
            self.value(fun.__defaults__, "has as default")
            self.value(fun.__kwdefaults__, "has as default")
            for name, cell in zip(code.co_freevars, fun.__closure__ or ()):
                self.token("cell", name)
                try:
                    contents = cell.cell_contents
                except ValueError:  # empty: not assigned yet
                    self.token("empty")
                    continue
                if type(contents) is types.ModuleType:
                    self.module(contents, sorted(_names(code)))
                else:
                    self.value(contents, "closes over")
        finally:
            self.where = where

    def code(self, code, how=None):
        if not self.once(code):
            return
        self.token(
            "code",
            code.co_name,
            code.co_qualname,
            code.co_argcount,
            code.co_posonlyargcount,
            code.co_kwonlyargcount,
            code.co_flags,
        )
        self.token(code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
        self.raw(code.co_code)
        self.names.update(code.co_names)
        self.any_name = self.any_name or "getattr" in code.co_names
        for constant in code.co_consts:
            if type(constant) is str:
                self.names.add(constant)
            self.value(constant, "has as constant")

    def globals_of(self, fun, code):
        """The globals the code (and its nested code) reads, by value; a user
        module among them with the attributes the code may read of it."""
        namespace = fun.__globals__
        attributes = None
        for name in sorted(globals_read(code)):
            if name not in namespace:
                if name in _UNKNOWN_READS:
                    # globals(), eval, exec: reads no bytecode names.
                    raise NotStored(
                        f"calls {name}() at {self.where}: the globals it reads cannot be known",
                        _reasons.WARM_UNKNOWN_READS,
                    )
                continue  # a builtin (by Python's version, in the environment)
            self.token("global", name)
            value = namespace[name]
            if type(value) is types.ModuleType:
                if attributes is None:
                    attributes = sorted(_names(code))
                self.module(value, attributes)
            else:
                self.value(value, "reads the global " + name + ",")

    def module_value(self, module, how):
        """A module met as a value: by name and version, or its source."""
        self.module(module, ())

    def module(self, module, names):
        """An installed module by name and version; a user module by its source,
        and the attributes the code may read of it (``names``) by value, as a
        program may set them at run time (``mylib.SCALE = 2.0``)."""
        self.token("module", module.__name__)
        if _installed(module.__name__):
            self.token(_package_version(module.__name__.partition(".")[0]))
            return
        if not self.once(module):
            return
        path = getattr(module, "__file__", None)
        if not path:
            self.refuse(module, "reads a module without a source file,")
        stat = os.stat(path)
        self.token(_file_digest(path, stat.st_mtime_ns, stat.st_size))
        for name in names:
            if name in vars(module):
                self.token("attribute", name)
                value = vars(module)[name]
                if type(value) is not types.ModuleType:
                    self.value(value, "reads " + module.__name__ + "." + name + ",")


# How each kind of value met is described: _Digest's method, by kind, for
# kinds whose type alone decides it (most of a key's values: tuples,
# strings, classes, dataclasses), read once per kind.
_DESCRIBERS = {}


def _describer(kind):
    """The _Digest method that describes values of ``kind`` (``by_value``:
    one that reads the value), kept for the next."""
    if kind is type(None) or kind is type(Ellipsis) or kind in (bool, int, str):
        describe = _Digest.scalar
    elif kind is float:
        describe = _Digest.float_
    elif kind is complex:
        describe = _Digest.complex_
    elif kind is bytes:
        describe = _Digest.bytes_
    elif issubclass(kind, enum.Enum):
        describe = _Digest.enum
    elif issubclass(kind, jax.sharding.PartitionSpec):
        describe = _Digest.partition_spec
    elif issubclass(kind, jax.sharding.Sharding):
        describe = _Digest.sharding
    elif kind in (tuple, list):
        describe = _Digest.sequence
    elif issubclass(kind, tuple) and hasattr(kind, "_fields"):
        describe = _Digest.namedtuple
    elif kind is dict:
        describe = _Digest.dict_
    elif kind is PyTreeDef:
        describe = _Digest.treedef
    elif issubclass(kind, collections.abc.Mapping) and _installed(kind.__module__):
        describe = _Digest.mapping
    elif kind in (set, frozenset):
        describe = _Digest.set_
    elif issubclass(kind, (np.ndarray, np.generic)):
        describe = _Digest.numpy
    elif kind is _jax.ARRAY_TYPE:
        describe = _Digest.jax_array
    elif kind is _jax.TYPED_NDARRAY_TYPE:
        describe = _Digest.typed_ndarray
    elif issubclass(kind, np.dtype):
        describe = _Digest.dtype
    elif kind is types.FunctionType:
        describe = _Digest.function
    elif kind is types.CodeType:
        describe = _Digest.code
    elif kind is types.ModuleType:
        describe = _Digest.module_value
    elif kind is types.MethodType:
        describe = _Digest.method
    elif kind is functools.partial:
        describe = _Digest.partial
    elif issubclass(kind, type):
        describe = _Digest.type_
    elif dataclasses.is_dataclass(kind):
        describe = _Digest.dataclass
    elif (kind.__module__, kind.__qualname__) in _IDENTITY_TOKENS and _installed(kind.__module__):
        describe = _Digest.identity_token
    else:
        describe = _Digest.by_value
    if len(_DESCRIBERS) >= 4096:
        _DESCRIBERS.clear()  # kinds made at run time: the table stays bounded
    _DESCRIBERS[kind] = describe
    return describe


def tree_structure(treedef) -> tuple:
    """jax's tree structure as nested tuples of node types and their data."""
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return ("*",)
    kind, data = treedef.node_data()
    return (kind, data, tuple(tree_structure(child) for child in treedef.children()))


_STATE_WRITES = {
    "STORE_GLOBAL": "global",
    "DELETE_GLOBAL": "global",
    "STORE_DEREF": "nonlocal",
    "DELETE_DEREF": "nonlocal",
}


@functools.lru_cache(maxsize=1024)
def _state_written(code, outside: frozenset):
    """(kind, name) of the first global, or variable of an enclosing scope
    (``outside``: the free variables that reach beyond the trace), that
    ``code`` or code nested in it assigns; None if it assigns none."""
    for instruction in dis.get_instructions(code):
        kind = _STATE_WRITES.get(instruction.opname)
        if kind == "global" or (kind == "nonlocal" and instruction.argval in outside):
            return kind, instruction.argval
    for constant in code.co_consts:
        if type(constant) is types.CodeType:
            written = _state_written(constant, outside & frozenset(constant.co_freevars))
            if written is not None:
                return written
    return None


def _names(code) -> set:
    """Every name ``code`` (and code nested in it) looks up by name: globals,
    and attributes too (``co_names`` holds both).  For a user module's
    attributes the code may read (``mylib.SCALE``)."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if type(constant) is types.CodeType:
            names |= _names(constant)
    return names


# The instructions that read a global by name: LOAD_NAME in a class body or
# module code (a local of the namespace first, then a global).
_GLOBAL_READS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
# Builtins through which code reads globals whose names its bytecode does not hold.
_UNKNOWN_READS = frozenset({"globals", "eval", "exec"})


@functools.lru_cache(maxsize=1024)
def globals_read(code) -> frozenset:
    """The globals ``code`` reads, as Python runs it: the names of its
    ``LOAD_GLOBAL`` and ``LOAD_NAME`` instructions, and those of the code
    nested in it (functions, lambdas, comprehensions, class bodies), which
    share its globals.  An attribute (``state.params``, ``nnx.state(...)``)
    is not a global, whatever its name."""
    names = {
        instruction.argval
        for instruction in dis.get_instructions(code)
        if instruction.opname in _GLOBAL_READS
    }
    for constant in code.co_consts:
        if type(constant) is types.CodeType:
            names |= globals_read(constant)
    return frozenset(names)


def _digest_of(value, how, where) -> str:
    digest = _Digest()
    digest.where = where
    digest.value(value, how)
    digest.methods()
    return digest.hexdigest()


def function_digest(fun, node_types=()) -> str:
    """The digest of ``fun``'s identity, and of the methods of its call's
    tree nodes (``node_types``) and of those it reaches that its code may
    call; raises NotStored with what it reaches that cannot be described
    stably, and where."""
    digest = _Digest(prune_methods=True)
    digest.value(fun, "is")
    digest.add_node_types(node_types)
    digest.methods()
    return digest.hexdigest()


def value_digest(value, how="takes") -> str:
    """The digest of one value (a static argument, a jit option) by content."""
    return _digest_of(value, how, "the call")


# -- what keys describe too: shared here, the lower of the two modules --------------


@functools.cache
def fastdispatch_version() -> str:
    try:
        return importlib.metadata.version("fastdispatch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def options_digest(options: dict) -> str:
    """jit options (as ``jit`` was given them), by content."""
    return value_digest(
        {name: _option(value) for name, value in sorted(options.items())}, "has as jit option"
    )


def _option(value):
    if is_sharding(value):
        return sharding_description(value, None)
    if isinstance(value, (tuple, list)):
        return tuple(_option(item) for item in value)
    if type(value) is dict:
        return {key: _option(item) for key, item in value.items()}
    if type(value).__name__ == "Device" or hasattr(value, "platform") and hasattr(value, "id"):
        return ("device", value.platform, value.id)
    return value


def is_sharding(value) -> bool:
    return isinstance(value, jax.sharding.Sharding)


def sharding_description(sharding, ndim) -> tuple:
    """A sharding as mesh shape, axis names, device ids and spec (NamedSharding)
    or its device (SingleDeviceSharding); other kinds raise NotStored."""
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        (device,) = sharding.device_set
        return ("single", device.platform, device.id, sharding.memory_kind)
    if isinstance(sharding, jax.sharding.NamedSharding):
        mesh = sharding.mesh
        ids = tuple(int(device.id) for device in mesh.devices.flat) if hasattr(mesh, "devices") else ()
        return (
            "named",
            tuple(mesh.axis_names),
            tuple(mesh.shape.values()),
            tuple(str(kind) for kind in getattr(mesh, "axis_types", ())),
            ids,
            repr(sharding.spec),
            sharding.memory_kind,
        )
    raise NotStored(f"takes an argument with a sharding of type {type(sharding).__qualname__}")


# Methods a library calls on a user's class by name (not through the user's
# code): linen's setup, jax's flattening of a registered pytree class.
_LIBRARY_HOOKS = frozenset({"setup", "tree_flatten", "tree_unflatten", "tree_flatten_with_keys"})


def class_functions(node_types) -> tuple:
    """``(name, function)`` of the functions defined in the bodies of the
    user classes among ``node_types`` (a Module's ``__call__``), a property
    by its getter: the trace runs them, and the class's source file alone
    does not describe the globals they read."""
    functions = []
    seen = set()
    for node_type in node_types:
        for cls in getattr(node_type, "__mro__", ()):
            if cls in seen or _installed(cls.__module__):
                continue
            seen.add(cls)
            prefix = cls.__qualname__ + "."
            for name in sorted(vars(cls)):
                value = vars(cls)[name]
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                if type(value) is types.FunctionType and value.__qualname__.startswith(prefix):
                    functions.append((name, value))
    return tuple(functions)
