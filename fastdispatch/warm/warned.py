"""What a compile warned, kept with its executable and warned again by a load.

Stock jax with its persistent cache traces and lowers a call on every run, so
it warns on every run: a donated buffer it could not use, a dtype it
truncated, a warning of the traced code itself.  A load skips tracing and
lowering, and so would skip those warnings too.  So the compile that is
written records the warnings its thread issued (as the program's filters let
them through; they are shown as they come, nothing is held back), and a
load issues each again: through the loading process's filters and once-per-
place registries, as coming from the same module and line, so that it is
shown, ignored, deduplicated or raised (``-W error``) as jax's own would be.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import warnings

# The threads recording now (thread id -> their list), and the hook that
# ``_record`` passes each warning on to; installed while any thread records.
_lock = threading.Lock()
_recording = {}
_shown = None


@contextlib.contextmanager
def recording(into: list):
    """Append to ``into`` each warning this thread shows inside the block, as
    plain data (``describe``); each is shown as it comes, and other threads'
    are only shown.  (Through ``warnings.showwarning``, the hook the warnings
    module offers for this: its filters are left untouched.)"""
    global _shown
    thread = threading.get_ident()
    with _lock:
        if not _recording:
            _shown, warnings.showwarning = warnings.showwarning, _record
        outer = _recording.get(thread)
        _recording[thread] = into
    try:
        yield into
    finally:
        with _lock:
            if outer is None:
                del _recording[thread]
            else:
                _recording[thread] = outer
            if not _recording and warnings.showwarning is _record:
                warnings.showwarning = _shown
        into[:] = [describe(*each) for each in into]


def _record(message, category, filename, lineno, file=None, line=None):
    into = _recording.get(threading.get_ident())
    if into is not None:
        into.append((message, category, filename, lineno))
    _shown(message, category, filename, lineno, file, line)


def describe(message, category, filename, lineno) -> tuple:
    """A shown warning as plain data: (category's module, its qualified name,
    the message's text, the issuing module's name or None, filename, line)."""
    return (
        category.__module__,
        category.__qualname__,
        str(message),
        _module_of(filename),
        filename,
        lineno,
    )


def issue(warned) -> None:
    """Issue again the warnings ``recording`` described, in order (raises
    what a filter turns a warning into, as ``warnings.warn`` does)."""
    for category_module, category_name, text, module_name, filename, lineno in warned:
        category = _category(category_module, category_name)
        module = sys.modules.get(module_name) if module_name else None
        namespace = getattr(module, "__dict__", None)
        if namespace is not None:
            filename = namespace.get("__file__") or filename
        warnings.warn_explicit(
            text,
            category,
            filename,
            lineno,
            module=module_name,
            registry=None if namespace is None else namespace.setdefault("__warningregistry__", {}),
            module_globals=namespace,
        )


def _category(module_name: str, qualname: str) -> type:
    """The warning class named so, or UserWarning where it is gone."""
    try:
        found = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return UserWarning
    return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning


def _module_of(filename: str) -> str | None:
    """The name of the loaded module whose source is ``filename`` (warnings
    match filters and keep registries by module), or None."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return None
