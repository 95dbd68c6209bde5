"""``fastdispatch.filter_jit``: equinox's ``filter_jit``, with its Python overhead gone.

    from fastdispatch import filter_jit      # instead of: from equinox import filter_jit

The wrapper is built by equinox itself (``equinox.filter_jit``: its checks,
errors, donation modes, and the one ``jax.jit`` it shares between every wrapper
of a function), then given a ``__call__`` in Cython (``_filter.call``): calls
whose arguments it can key run the executable equinox's jit compiled, directly;
every other call is equinox's own.  This module is imported only when
``filter_jit`` is used, and it is the only one that touches equinox's private
names, all listed here and tested in tests/unit/equinox/test_function.py:

  equinox._jit._JitWrapper               the wrapper Module; FilterJitWrapper subclasses it
  equinox._jit._JitWrapper.__call__, .lower
                                         equinox's own call and lowering: what a hand-off runs,
                                         and the source of each executable
  equinox._jit.filter_jit                equinox's filter_jit itself, even while
                                         `python -m fastdispatch` patches equinox.filter_jit
  equinox._module._module._ModuleMeta    the metaclass of every Module
  equinox._module._flatten.MISSING       the first aux item of a Module's flatten
  equinox._caches.cache_clears           what equinox.clear_caches() clears
  equinox._module._module._transform_types
                                         the wrapper types a Module field is warned about
                                         (``type(jax.jit(...))`` among them): see
                                         routed
  a Module's generated flatten function  recognised by its docstring; its fields read
                                         from dataclasses.fields (FieldLayout)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref

import equinox
from equinox import _caches as _eqx_caches
from equinox import _jit as _eqx_jit
from equinox._module import _flatten as _eqx_flatten
from equinox._module import _module as _eqx_module

from fastdispatch import _jax
from fastdispatch.core import descriptions
from fastdispatch.core import pytree as _pytree
from fastdispatch.core.engine import library_function
from fastdispatch.equinox import function as _filter

__all__ = ["FilterJitWrapper", "filter_jit"]

_eqx_filter_jit = _eqx_jit.filter_jit
MISSING = _eqx_flatten.MISSING
ModuleMeta = _eqx_module._ModuleMeta


class FilterJitWrapper(_eqx_jit._JitWrapper):
    """What ``fastdispatch.filter_jit`` returns: equinox's wrapper Module (the
    same fields, pytree, repr and attributes), called through the fast path."""

    __call__ = _filter.call

    def __get__(self, instance, owner):
        # equinox binds a method as Partial(self, instance); this builds the
        # same Partial without the Module constructor (~8 us a method access).
        if instance is None:
            return self
        bound = object.__new__(equinox.Partial)
        fields = object.__getattribute__(bound, "__dict__")
        fields["func"] = self
        fields["args"] = (instance,)
        fields["keywords"] = {}
        return bound


# One dispatcher per jax.jit that equinox shares (held by the wrappers that
# use it): id(jitted) -> dispatcher.
_dispatchers = weakref.WeakValueDictionary()


def _dispatcher_for(jitted, jitkwargs) -> _filter.FilterDispatcher:
    found = _dispatchers.get(id(jitted))
    if found is None or found.jitted is not library_function(jitted):
        found = _filter.FilterDispatcher(
            jitted,
            _eqx_jit._JitWrapper.__call__,
            _eqx_jit._JitWrapper.lower,
            equinox.is_array,
            _warm_options(jitkwargs),
        )
        _dispatchers[id(jitted)] = found
    return found


def _warm_options(jitkwargs) -> dict:
    """The options a filter_jit call's warm-start key adds (warm/keys.py's
    call_key, with equinox/warm.py's parts): equinox's version (its jit's function, its Modules'
    flatten), the jit options (equinox shares one jax.jit per function and
    options), and equinox's sentinel by name."""
    return {"equinox": equinox.__version__, "jit": dict(jitkwargs), "constants": {"equinox.MISSING": MISSING}}


def _clear_dispatchers():
    for dispatcher in list(_dispatchers.values()):
        dispatcher.clear()


_eqx_caches.cache_clears.append(_clear_dispatchers)


def routed(jit_type):
    """Under ``python -m fastdispatch``, once equinox.filter_jit is ours:
    equinox warns when a Module field holds a jax-transformed callable that
    wraps arrays, and knows one by its type, ``type(jax.jit(lambda x: x))``,
    taken when equinox is imported: ``jit_type`` (fastdispatch.jit's) or
    jax's own PjitFunction, whichever jax.jit was then.  Both kinds of wrapper
    exist in a routed program (a library may have made its jitted functions
    before the patch), so equinox is told of both."""
    _eqx_module._transform_types.update({jit_type, type(_jax.jax_jit(lambda x: x))})


def _module_layout(cls, to_iter):
    """The FieldLayout of an equinox Module class whose registered flatten is
    equinox's generated one: children are the dynamic fields, aux data is
    (MISSING, *static fields), for an instance whose __dict__ holds exactly its
    fields (no wrapper attributes); equinox's unflatten is object.__new__ and
    the field writes, which FieldLayout does in C."""
    if not isinstance(cls, ModuleMeta) or not dataclasses.is_dataclass(cls):
        return None
    if not (getattr(to_iter, "__doc__", None) or "").startswith("Generated flatten function"):
        return None
    fields = dataclasses.fields(cls)
    dynamic = tuple(f.name for f in fields if not f.metadata.get("static", False))
    static = tuple(f.name for f in fields if f.metadata.get("static", False))
    descriptors = any(
        hasattr(type(inspect.getattr_static(cls, name, None)), "__set__") for name in dynamic + static
    )
    return _pytree.FieldLayout(
        dynamic, (MISSING,), static, len(fields), direct_unflatten=not descriptors, absent=MISSING
    )


_pytree.add_field_reader(_module_layout)


def static_field_names(cls) -> tuple | None:
    """The names of a Module's flatten aux data, item by item ("" for the
    wrapper attributes' slot, then its static fields), for --trace's recompile
    explanations (``e.f``, not ``e[1]``); None for any other class."""
    if not isinstance(cls, ModuleMeta) or not dataclasses.is_dataclass(cls):
        return None
    return ("",) + tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("static", False))


descriptions.add_aux_names(static_field_names)


def filter_jit(fun=_eqx_jit.sentinel, *, donate="none", **jitkwargs):
    """``equinox.filter_jit`` with less dispatch time; same arguments, same behaviour.

    Every array argument leaf is traced, every other leaf is static; ``donate``
    is one of "all", "all-except-first", "warn", "warn-except-first", "none".
    Usable as ``@filter_jit`` and ``@filter_jit(donate=...)``.  Returns a
    FilterJitWrapper: call it as the function; ``.lower(...)`` for AOT.
    """
    if fun is _eqx_jit.sentinel:
        return functools.partial(filter_jit, donate=donate, **jitkwargs)
    built = _eqx_filter_jit(fun, donate=donate, **jitkwargs)
    wrapper = object.__new__(FilterJitWrapper)
    fields = object.__getattribute__(wrapper, "__dict__")
    fields.update(object.__getattribute__(built, "__dict__"))
    fields["_cached"] = _dispatcher_for(fields["_cached"], jitkwargs)
    return wrapper
