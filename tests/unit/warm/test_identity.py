"""warm.identity: what counts as installed code, keyed by name and version."""

import importlib
import importlib.metadata
import sys

import pytest

from fastdispatch.warm import identity


def write_package(folder, name, version=None, dist_folder=None, distribution=None):
    """A package ``name`` in ``folder``; with ``version``, its dist-info in
    ``dist_folder`` (default: beside it, as pip --target writes it), of the
    distribution ``distribution`` (default: ``name``)."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("class Mapping(dict):\n    pass\n")
    if version is not None:
        distribution = distribution or name
        info = (dist_folder or folder) / f"{distribution}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
        (info / "top_level.txt").write_text(name + "\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n")


@pytest.fixture
def on_path(monkeypatch):
    def add(folder):
        monkeypatch.syspath_prepend(str(folder))
        importlib.invalidate_caches()
        identity._folder_distributions.cache_clear()
        identity._in_its_distribution.cache_clear()

    yield add
    identity._folder_distributions.cache_clear()
    identity._in_its_distribution.cache_clear()


def test_a_package_pip_installed_into_a_folder_on_the_path_is_installed(tmp_path, on_path):
    # The TPU machine installs flax with pip install --target /tmp/site, on
    # PYTHONPATH: its HashableMapping is a library's mapping, keyed by version.
    write_package(tmp_path / "site", "fd_target_lib", "1.2.3")
    on_path(tmp_path / "site")
    try:
        module = importlib.import_module("fd_target_lib")
        assert identity._installed("fd_target_lib")
        assert identity._package_version("fd_target_lib") == "1.2.3"
        identity.value_digest(module.Mapping(a=1))  # described, not refused
    finally:
        sys.modules.pop("fd_target_lib", None)


def test_the_folders_on_the_path_are_read_ahead_of_a_key(tmp_path, on_path):
    # The preloader reads them while the program imports: a key then finds
    # the folder's distributions read, and reads no dist-info itself.
    write_package(tmp_path / "site", "fd_ahead_lib", "2.0.0")
    on_path(tmp_path / "site")
    identity.read_install_folders()
    read = identity._folder_distributions.cache_info()
    assert read.currsize >= 1
    try:
        importlib.import_module("fd_ahead_lib")
        assert identity._installed("fd_ahead_lib")
        assert identity._package_version("fd_ahead_lib") == "2.0.0"
        after = identity._folder_distributions.cache_info()
        assert after.misses == read.misses and after.hits > read.hits
    finally:
        sys.modules.pop("fd_ahead_lib", None)


def test_an_editable_install_stays_the_programs_code(tmp_path, on_path):
    # Its dist-info is elsewhere: its files are the project's, keyed by source.
    write_package(tmp_path / "project", "fd_editable_lib", "0.1.0", dist_folder=tmp_path / "site")
    on_path(tmp_path / "site")
    on_path(tmp_path / "project")
    try:
        importlib.import_module("fd_editable_lib")
        assert not identity._installed("fd_editable_lib")
    finally:
        sys.modules.pop("fd_editable_lib", None)


def test_a_package_named_unlike_its_distribution_is_keyed_by_its_version(tmp_path, on_path):
    # PyYAML's yaml: importlib.metadata.version("yaml") finds nothing.
    write_package(tmp_path / "site", "fd_named_lib", "4.5.6", distribution="FdOtherName")
    on_path(tmp_path / "site")
    try:
        importlib.import_module("fd_named_lib")
        identity._package_version.cache_clear()
        assert identity._installed("fd_named_lib")
        assert identity._package_version("fd_named_lib") == "4.5.6"
    finally:
        sys.modules.pop("fd_named_lib", None)
        identity._package_version.cache_clear()


def test_the_programs_own_module_reads_no_distribution_but_its_folders(tmp_path, on_path, monkeypatch):
    # The first key of a program must not scan every installed distribution
    # (0.1 s and more, in its first step).
    def scan(*args, **kwargs):
        raise AssertionError("every distribution scanned")

    monkeypatch.setattr(importlib.metadata, "packages_distributions", scan)
    monkeypatch.setattr(importlib.metadata, "distributions", scan)
    (tmp_path / "fd_own_module.py").write_text("X = 1\n")
    on_path(tmp_path)
    try:
        importlib.import_module("fd_own_module")
        assert not identity._installed("fd_own_module")
    finally:
        sys.modules.pop("fd_own_module", None)


def test_a_value_is_described_by_the_method_its_kind_decides():
    import collections
    import dataclasses
    import enum
    import functools
    import types

    import jax
    import numpy as np

    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass(frozen=True)
    class Config:
        scale: float

    class Mode(enum.Enum):
        TRAIN = 1

    class Plain:
        pass

    expected = [
        (None, "scalar"),
        (3, "scalar"),
        ("s", "scalar"),
        (True, "scalar"),
        (1.5, "float_"),
        ((1, 2), "sequence"),
        (Pair(1, 2), "namedtuple"),
        (Config(2.0), "dataclass"),
        (Mode.TRAIN, "enum"),
        (jax.sharding.PartitionSpec("x"), "partition_spec"),
        (np.float32(1.0), "numpy"),
        (np.dtype("float32"), "dtype"),
        (len, "by_value"),  # a builtin: by its name, which the value tells
        (Plain, "type_"),
        (types, "module_value"),
        (functools.partial(len), "partial"),
        (Plain(), "by_value"),
    ]
    for value, method in expected:
        assert identity._describer(type(value)) is getattr(identity._Digest, method), value
        assert identity._DESCRIBERS[type(value)] is getattr(identity._Digest, method)
    # Described alike, whichever object of the kind came first.
    assert identity.value_digest((Config(2.0), Pair(1, "a"))) == identity.value_digest(
        (Config(2.0), Pair(1, "a"))
    )
    assert identity.value_digest(Config(2.0)) != identity.value_digest(Config(3.0))
    with pytest.raises(identity.NotStored, match="Plain"):
        identity.value_digest(Plain())


def test_a_path_resolves_as_realpath_resolves_it(tmp_path):
    import os

    (tmp_path / "real" / "pkg").mkdir(parents=True)
    (tmp_path / "else").mkdir()
    (tmp_path / "real" / "pkg" / "m.py").write_text("")
    os.symlink(tmp_path / "real" / "pkg", tmp_path / "else" / "link")  # a folder linked
    os.symlink(tmp_path / "real" / "pkg" / "m.py", tmp_path / "real" / "pkg" / "alias.py")  # a file
    paths = [
        "else/link/m.py",
        "real/pkg/alias.py",
        "else/link/alias.py",
        "else/link/../pkg/m.py",
        "real/./pkg/m.py",
    ]
    for path in [str(tmp_path / path) for path in paths] + [m.__file__ for m in (os, pytest, identity)]:
        assert identity._realpath(path) == os.path.realpath(path), path
