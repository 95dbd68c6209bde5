"""fastdispatch.core.descriptions: how a library's tree nodes read in
--trace's recompile explanations, as the front end that speaks for the
library registers them, imported on first need."""

import sys
import types

import pytest

from fastdispatch.core import descriptions


@pytest.fixture
def registry(monkeypatch):
    """descriptions' registrations, emptied for the test and restored after."""
    monkeypatch.setattr(descriptions, "_aux_names", [])
    monkeypatch.setattr(descriptions, "_attributes", {})
    monkeypatch.setattr(descriptions, "_speakers", {})
    return descriptions


def test_aux_names_come_from_the_first_reader_that_knows_the_type(registry):
    class Known:
        pass

    registry.add_aux_names(lambda kind: ("size", "") if kind is Known else None)
    registry.add_aux_names(lambda kind: ("never asked",) if kind is Known else ("other",))
    assert registry.aux_names(Known) == ("size", "")
    assert registry.aux_names(int) == ("other",)


def test_a_reader_registered_twice_is_asked_once(registry):
    asked = []

    def reader(kind):
        asked.append(kind)

    registry.add_aux_names(reader)
    registry.add_aux_names(reader)
    assert registry.aux_names(float) is None
    assert asked == [float]


def test_attributes_are_read_by_the_value_type(registry):
    class Graph:
        depth = 3

    registry.add_attributes(Graph, lambda value: {("depth",): value.depth})
    assert registry.attributes_reader(Graph())(Graph()) == {("depth",): 3}
    assert registry.attributes_reader(3) is None


def test_a_front_end_is_imported_when_its_library_is_first_described(registry, monkeypatch):
    """speaks_for: the front end module is imported once the program has
    imported the library and one of its types is described, then never again."""
    library = types.ModuleType("fd_test_library")
    exec("class Node:\n    pass", library.__dict__)
    library.Node.__module__ = "fd_test_library.nodes"
    front_end = types.ModuleType("fd_test_front_end")
    imported = []

    def load(name):
        imported.append(name)
        registry.add_aux_names(lambda kind: ("static",) if kind is library.Node else None)
        return front_end

    monkeypatch.setattr(descriptions.importlib, "import_module", load)
    registry.speaks_for("fd_test_library", "fd_test_front_end")
    # Not imported by the program yet: the front end stays unloaded.
    assert registry.aux_names(library.Node) is None and imported == []
    monkeypatch.setitem(sys.modules, "fd_test_library", library)
    assert registry.aux_names(library.Node) == ("static",)
    assert registry.aux_names(library.Node) == ("static",)
    assert imported == ["fd_test_front_end"]
