"""The store key of one compiled call: the same in every process that would
compile the same executable, and different wherever the executable (or its
result) could differ.

It digests four things:
  environment  fastdispatch, jax, jaxlib and Python versions; the backend, its
               devices (kinds, count) and this process's index and count; XLA's
               flags; every jax setting (``jax.config.values``)
  function     its identity (warm/identity.py): code and what the code reaches
  options      the jit options (static and donated arguments, shardings, ...)
  call         the call's signature: the tree of its dynamic arguments, each
               leaf's kind, dtype, shape, weak type, sharding (by mesh shape,
               axis names, device ids and spec) and committedness; the static
               arguments by content; jax's trace context at the call
A part it cannot describe stably raises NotStored.

In checked mode (``checked_key``) the function is keyed by its traced program
instead: the jaxpr jax traced for the call, with its constants by content and
every parameter of its lowering.
"""

from __future__ import annotations

import enum
import hashlib
import os
import sys

import jax
import jaxlib
import numpy as np

from fastdispatch import _jax
from fastdispatch.warm import identity
from fastdispatch.warm.identity import (
    NotStored,
    class_functions,
    fastdispatch_version,
    is_sharding,
    options_digest,
    sharding_description,
    tree_structure,
    value_digest,
)

# Bump when what a key covers, or how, or what a file holds, changes: old
# files are then never read.
KEY_FORMAT = 5


def environment() -> tuple:
    """What the process compiles for, beyond the call itself.  Read at every
    key (a miss only): a test may change the versions it reads."""
    devices = jax.devices()
    return (
        KEY_FORMAT,
        fastdispatch_version(),
        jax.__version__,
        jaxlib.__version__,
        sys.version,
        jax.default_backend(),
        devices[0].client.platform_version,
        tuple(sorted((device.platform, device.device_kind, device.id) for device in devices)),
        len(jax.local_devices()),
        jax.process_index(),
        jax.process_count(),
        os.environ.get("XLA_FLAGS", ""),
        os.environ.get("LIBTPU_INIT_ARGS", ""),
        tuple(
            sorted(
                (name, _setting(value))
                for name, value in jax.config.values.items()
                if name not in _CACHE_SETTINGS
            )
        ),
    )


def machine() -> dict:
    """What this process compiles for, as people read it, and the digest of
    all of it (``environment()``, jax's settings and XLA's flags included):
    the store notes each machine its files were compiled for (Store.note_machine)."""
    devices = jax.devices()
    kinds = ", ".join(sorted({device.device_kind for device in devices}))
    return {
        "digest": hashlib.sha256(repr(environment()).encode()).hexdigest()[:32],
        "versions": f"fastdispatch {fastdispatch_version()}, jax {jax.__version__}, "
        f"jaxlib {jaxlib.__version__}, Python {sys.version.split()[0]}",
        "devices": f"{jax.default_backend()}: {len(devices)} x {kinds}, {devices[0].client.platform_version}",
        "processes": jax.process_count(),
    }


# jax settings that say where and when jax keeps compiles, not what it
# compiles: warm start sets them itself (warm/jax_cache.py), in every process
# alike or not, and a store must serve a program whether jax's cache is on.
_CACHE_SETTINGS = frozenset(
    {
        "jax_compilation_cache_dir",
        "jax_enable_compilation_cache",
        "jax_compilation_cache_max_size",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    }
)


def _setting(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return (type(value).__qualname__, value.name)
    return (type(value).__qualname__, repr(value))


def _context_value(value):
    """One value of jax's trace context, as stable data."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return (type(value).__qualname__, value.name)
    parts = _jax.axis_env_parts(value)
    if parts is not None:
        return ("axis env", parts)
    if isinstance(value, tuple):
        return tuple(_context_value(item) for item in value)
    if hasattr(value, "platform") and hasattr(value, "id"):  # a device
        return ("device", value.platform, value.id)
    if isinstance(value, jax.sharding.AbstractMesh):
        return ("abstract mesh", repr(value))
    if isinstance(value, jax.sharding.Mesh):
        return (
            "mesh",
            tuple(value.axis_names),
            tuple(value.shape.values()),
            tuple(int(d.id) for d in value.devices.flat),
        )
    raise NotStored(f"runs under a jax setting holding an object of type {type(value).__qualname__}")


def _leaf(view) -> tuple:
    kind = view.kind
    if view.aval is not None:
        aval = view.aval
        described = (
            aval.dtype.str if hasattr(aval.dtype, "str") else str(aval.dtype),
            tuple(aval.shape),
            bool(aval.weak_type),
        )
    else:
        described = None
    sharding = None
    if view.sharding is not None:
        sharding = sharding_description(view.sharding, None)
    impl = None if view.impl is None else str(view.impl)
    py_type = None if view.py_type is None else view.py_type.__qualname__
    dtype = None if view.dtype is None else str(view.dtype)
    return (kind, described, sharding, bool(view.committed), impl, py_type, dtype, view.shape)


def call_key(label: str, options: dict, signature, parts=(), node_types=(), function=None) -> str:
    """The store key (hex) of a call of a front end's function (``label``
    names the front end) with this CallSignature; raises NotStored.

    ``function`` is the function's identity digest, or None where ``parts``
    describe the function (equinox's is a tree of its own); ``options`` are the
    front end's options, its library's version among them, and
    ``options["constants"]`` the library's sentinels by name; ``parts`` are
    ``(value, what it is to the call)``: what else the front end keys the call
    by (its argument tree, its static arguments), each by content, a jax tree
    structure by its nodes, the phrase naming a value that cannot be
    described; ``node_types``: the classes of the trees' nodes, whose methods
    the trace runs (every one: where ``function`` is an identity digest, it
    covers those its code may call, and ``node_types`` is empty)."""
    constants = options.get("constants", {})
    for name, value in constants.items():
        identity.register_constant(name, value)
    names = _jax.trace_context_names()
    context = tuple(zip(names, (_context_value(value) for value in signature.context)))
    described = (
        label,
        environment(),
        function,
        options_digest({name: value for name, value in options.items() if name != "constants"}),
        tuple(value_digest(_by_content(value), phrase) for value, phrase in parts),
        value_digest(class_functions(node_types), "calls a method that"),
        tuple(_leaf(view) for view in signature.leaf_keys()),
        context,
    )
    return hashlib.sha256(repr(described).encode()).hexdigest()


def _by_content(value):
    """A jax tree structure as its nodes (types and data), else ``value``."""
    if isinstance(value, jax.tree_util.PyTreeDef):
        return tree_structure(value)
    return value


def checked_key(traced, options: dict, signature) -> str:
    """The store key (hex) in checked mode of a call of ``jit(fun, **options)``
    that jax traced to ``traced`` (a jax.stages.Traced), with this
    CallSignature; raises NotStored.

    It covers what lowering and compiling read: the program (``_program_key``);
    the jit options; the call's leaves (their shardings and committedness
    resolve unspecified input shardings); jax's trace context; the
    environment."""
    constant_args, params = _jax.traced_parts(traced)
    _check_keyable(traced.jaxpr)
    if constant_args:
        raise NotStored("passes its constants as arguments (jax_use_simplified_jaxpr_constants)")
    call = (options_digest(options), tuple(_leaf(view) for view in signature.leaf_keys()))
    return _program_key("checked", traced.jaxpr, params, call, signature.context)


def jax_own_key(closed, params: dict, args) -> str:
    """The store key (hex) of a compile jax makes for itself on a miss of
    jax.jit's own cache (an eager operation, a library's jit: warm/jax_own.py),
    of ``closed`` (the ClosedJaxpr) with these lowering parameters, for these
    flat arguments; raises NotStored.  As ``checked_key``, with each argument
    described as jax's lowering reads it (``_argument``)."""
    _check_keyable(closed)
    foreign = _foreign_primitive(closed.jaxpr)
    if foreign is not None:
        raise NotStored(
            f"has a primitive that is not jax's own ({foreign}): its lowering is not in its jaxpr"
        )
    call = tuple(_argument(arg) for arg in args)
    return _program_key("jax own", closed, params, call, _jax.trace_context())


def _foreign_primitive(jaxpr):
    """The name of the first primitive of ``jaxpr`` (nested jaxprs included)
    that jax does not define, or None: a library's or a program's primitive
    is lowered by a rule of its own, which may change while the jaxpr does not."""
    for eqn in jaxpr.eqns:
        if not _jax.is_jax_primitive(eqn.primitive):
            return eqn.primitive.name
        for inner, _ in _inner_jaxprs(eqn):
            found = _foreign_primitive(inner)
            if found is not None:
                return found
    return None


def _check_keyable(closed) -> None:
    """Raise NotStored for a program a key by its jaxpr cannot serve."""
    if closed.jaxpr.is_high:
        raise NotStored("traces to a jaxpr with high-level types (lowered another way)")
    if closed.effects:
        raise NotStored(f"has effects ({', '.join(sorted(map(str, closed.effects)))})")


def _program_key(label: str, closed, params: dict, call: tuple, context: tuple) -> str:
    """The digest of a traced program, as lowering and compiling read it: the
    jaxpr as jax prints it with every parameter of every equation (no
    pretty-printing shortcuts), its effects and name stacks; the values of
    its constants, nested ones included; the input and output avals with weak
    types and shardings; lowering's parameters (shardings, layouts, donation,
    mesh, compiler options); with ``call`` (how the call is described), jax's
    trace ``context`` and the environment."""
    with np.printoptions(threshold=sys.maxsize):
        text = closed.pretty_print(
            source_info=False, name_stack=True, custom_pp_eqn_rules=False, print_effects=True
        )
    if " at 0x" in text:
        # Every process prints another address: no key would ever match.
        raise NotStored("traces to a jaxpr holding an object printed by its address")
    names = _jax.trace_context_names()
    described = (
        label,
        environment(),
        hashlib.sha256(text.encode()).hexdigest(),
        value_digest(tuple(_constants(closed, [])), "closes over"),
        tuple(_aval(aval) for aval in (*closed.in_avals, *closed.out_avals)),
        tuple((name, _lowering_param(params[name])) for name in sorted(params) if name != "jaxpr"),
        call,
        tuple(zip(names, (_context_value(value) for value in context))),
    )
    return hashlib.sha256(repr(described).encode()).hexdigest()


def _argument(arg) -> tuple:
    """One argument of a jax.jit miss as lowering reads it (jax's MetaTy): its
    aval, sharding, committedness, layout, and whether it is a numpy array."""
    aval = jax.typeof(arg)
    sharding = getattr(arg, "sharding", None)
    described = None if sharding is None else sharding_description(sharding, None)
    layout = getattr(getattr(arg, "format", None), "layout", None)
    return (
        _aval(aval),
        described,
        bool(getattr(arg, _jax.COMMITTED_ATTR, True)),
        None if layout is None else repr(layout),
        isinstance(arg, np.ndarray),
    )


def _constants(closed, found: list) -> list:
    """The constants of a closed jaxpr and of every jaxpr in its equations'
    parameters (a scan's body, a custom_jvp's call), in order."""
    found.extend(closed.consts)
    _nested_constants(closed.jaxpr, found)
    return found


def _nested_constants(jaxpr, found):
    for eqn in jaxpr.eqns:
        for inner, constants in _inner_jaxprs(eqn):
            found.extend(constants)
            _nested_constants(inner, found)


def _inner_jaxprs(eqn):
    """``(jaxpr, its constants)`` of each jaxpr in an equation's parameters
    (a scan's body, a custom_jvp's call), in order."""
    # Imported here: jax.extend loads pallas and checkify (about 30 ms), and
    # only keys by the traced program read jaxprs.
    from jax.extend.core import ClosedJaxpr, Jaxpr

    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, ClosedJaxpr):
                yield item.jaxpr, item.consts
            elif isinstance(item, Jaxpr):
                yield item, ()


def _aval(aval) -> tuple:
    return (str(aval), bool(getattr(aval, "weak_type", False)), repr(getattr(aval, "sharding", None)))


def _lowering_param(value):
    """One parameter of jax's lowering (a sharding, a layout, the mesh, a
    flag), as stable data."""
    if isinstance(value, (tuple, list)):
        return tuple(_lowering_param(item) for item in value)
    if is_sharding(value):
        return sharding_description(value, None)
    if isinstance(value, jax.sharding.Mesh):
        return ("mesh", "empty") if value.empty else _context_value(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    text = repr(value)
    if " at 0x" in text:
        raise NotStored(f"is lowered with a parameter of type {type(value).__qualname__}")
    return (type(value).__qualname__, text)
