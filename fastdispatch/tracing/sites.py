"""Where in the user's code something happened: the frame outside the libraries.

A finding is reported at the user's file and line, not at the jax, flax,
equinox, numpy or fastdispatch frame that did the work.  ``user_site()``
walks up the stack to the first frame of the program's own code; whether a
code object is library code is decided once per code object.

While tracing, ``fastdispatch.jit`` tells the trace of each compiled function
it makes (``remember_made``), so that a compiled function knows the line that
made it (a new ``jax.jit`` wrapper inside a loop is reported there).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import sysconfig
import weakref

__all__ = ["library_code", "made_at", "remember_made", "short", "short_path", "user_frame", "user_site"]

# Packages whose frames are never the user's: the work is done there, the
# decision to do it is made in the program.
_LIBRARIES = ("fastdispatch", "jax", "jaxlib", "flax", "equinox", "numpy", "optax", "chex", "ml_dtypes")


def _library_roots():
    roots = []
    for name in _LIBRARIES:
        # PathFinder, not importlib.util.find_spec: sys.meta_path holds the
        # routing's finder, which a lookup before the import would set off.
        module = sys.modules.get(name)
        spec = module.__spec__ if module is not None else importlib.machinery.PathFinder.find_spec(name)
        for location in getattr(spec, "submodule_search_locations", None) or ():
            roots.append(os.path.join(os.path.realpath(location), ""))
            roots.append(os.path.join(location, ""))
    roots += _stdlib_roots()  # functools, contextlib, runpy, ...
    return tuple(dict.fromkeys(roots))


def _stdlib_roots():
    return [os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")]


def _program_roots():
    """fastdispatch's own example programs (``bench --programs``): inside the
    package, but written as a user writes a program, and reported as one."""
    programs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "programs")
    return tuple(dict.fromkeys((os.path.join(programs, ""), os.path.join(os.path.realpath(programs), ""))))


_roots = None
_programs = None
_is_library = {}  # code object -> bool


def _read_roots():
    """The libraries' and the bench programs' folders, read once."""
    global _roots, _programs
    if _roots is None:
        _roots, _programs = _library_roots(), _program_roots()


def library_code(code) -> bool:
    """Whether frames of ``code`` belong to a library (or to Python itself)."""
    found = _is_library.get(code)
    if found is None:
        _read_roots()
        filename = code.co_filename
        found = filename.startswith("<frozen") or (
            filename.startswith(_roots) and not filename.startswith(_programs)
        )
        _is_library[code] = found
    return found


def user_frame(frame):
    """The innermost frame of the program's own code from ``frame`` up, or None."""
    while frame is not None:
        if not library_code(frame.f_code):
            return frame
        frame = frame.f_back
    return None


def user_site(frame=None):
    """``(filename, line)`` of the innermost frame of the program's own code
    above ``frame`` (default: the caller's caller), or None when there is none."""
    frame = user_frame(sys._getframe(2) if frame is None else frame)
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno)


def short(site, cwd) -> str:
    """``prog.py:12``: the site's file as ``short_path`` names it."""
    if site is None:
        return "?"
    filename, line = site
    return f"{short_path(filename, cwd)}:{line}"


def short_path(filename, cwd) -> str:
    """An installed package's file by its package (``optax/_src/alias.py``),
    else the file relative to ``cwd`` when it is below it, else as it is."""
    for root in _installed_roots():
        if filename.startswith(root):
            return filename[len(root) :]
    try:
        relative = os.path.relpath(filename, cwd)
    except ValueError:  # another drive on Windows
        return filename
    return filename if relative.startswith("..") else relative


_installed = None
_INSTALL_DIRS = ("site-packages", "dist-packages")


def _installed_roots():
    """Where installed packages and the standard library live, longest first."""
    global _installed
    if _installed is None:
        paths = sysconfig.get_paths()
        roots = [paths[key] for key in ("purelib", "platlib", "stdlib", "platstdlib") if key in paths]
        roots += [entry for entry in sys.path if os.path.basename(entry) in _INSTALL_DIRS]
        _read_roots()
        # The folders holding the libraries (pip install --target DIR, on PYTHONPATH).
        own = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
        roots += [
            os.path.dirname(os.path.dirname(root))
            for root in _roots
            if root not in _stdlib_roots() and root != own  # not a checkout of fastdispatch
        ]
        roots += [os.path.realpath(root) for root in roots]
        _installed = tuple(sorted({os.path.join(root, "") for root in roots}, key=len, reverse=True))
    return _installed


# -- the line that made a compiled function ---------------------------------------

_made_at = weakref.WeakKeyDictionary()  # compiled function -> (filename, line)


def made_at(fn):
    """The site that made ``fn`` while tracing, or None."""
    try:
        return _made_at.get(fn)
    except TypeError:  # not weakly referenceable or not hashable
        return None


def remember_made(fn, frame):
    """``fn`` was made just now, called from ``frame`` (``jit(f)``, or a
    decorator ``jit(static_argnums=1)`` made applied to ``f``)."""
    try:
        _made_at[fn] = user_site(frame)
    except TypeError:
        pass
