"""How a library's tree nodes read in --trace's recompile explanations, as
the front end of that library says.

A front end registers its readers when it is imported; tracing asks here, so
that it never imports a front end (and a new front end needs no change to
it).  ``fastdispatch`` says which front end speaks for which library
(``speaks_for``): it is imported the first time a node of that library's
types is described, once the program has imported the library itself.
"""

from __future__ import annotations

import importlib
import sys

# Functions: node type -> the names of its aux data items ("" where none), or None.
_aux_names = []
# Static value type -> function: value -> {attribute path (a tuple): value}.
_attributes = {}
# Library (its top-level package) -> the front end module that registers its readers.
_speakers = {}


def add_aux_names(reader) -> None:
    """``reader(node_type)`` names a node type's aux data, item by item (an
    equinox Module's static fields), or gives None for types it does not know."""
    if reader not in _aux_names:
        _aux_names.append(reader)


def add_attributes(value_type: type, reader) -> None:
    """``reader(value)`` gives ``{attribute path: value}`` of a static value of
    ``value_type`` (a flax GraphDef's attributes)."""
    _attributes[value_type] = reader


def speaks_for(library: str, module: str) -> None:
    """``module`` (a front end) registers the readers of ``library``'s types."""
    _speakers[library] = module


def _hear_from_front_end(kind: type) -> None:
    for base in getattr(kind, "__mro__", ()):
        library = (getattr(base, "__module__", None) or "").partition(".")[0]
        if library in _speakers and library in sys.modules:
            importlib.import_module(_speakers.pop(library))


def aux_names(node_type) -> tuple | None:
    """The names of ``node_type``'s aux data items, or None where no front end knows them."""
    _hear_from_front_end(node_type)
    for reader in _aux_names:
        names = reader(node_type)
        if names is not None:
            return names
    return None


def attributes_reader(value):
    """The reader of ``value``'s attributes by path (see add_attributes), or None."""
    _hear_from_front_end(type(value))
    return _attributes.get(type(value))
