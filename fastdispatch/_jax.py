"""The door to jax's internals: every private jax name fastdispatch uses.

Everything fastdispatch needs from jax beyond its public API goes through this
module, so that a jax upgrade breaks in one place, loudly, under
tests/unit/test_jax.py.  Supported: jax 0.8.x, 0.9.x and 0.10.x (pyproject.toml's
range, SUPPORTED_JAX here).

Each name is resolved once, at import, by ``_need``: what this jax lacks is
collected, not raised.  Where anything is missing, or jax is outside the
supported range, ``UNSUPPORTED`` says so (one UnsupportedJaxWarning, at import)
and ``fastdispatch`` hands every call to the libraries' own functions
(fastdispatch/_handoff.py): the hot path never asks again.  A name that moved
between the supported minors is chosen by feature detection (which form this
jax has), never by its version string: those shims are marked "moved" below.
Attributes of instances (a Compiled's ``_executable``, an ExecuteReplicated's
fields) cannot be resolved without a compile: tests/unit/test_jax.py checks them.

Private names used, all read here only:
  jax._src.api.jit                        jax.jit itself, even while jax.jit is patched
  jax._src.tree_util._registry            Python-side pytree registry (type -> to_iter, from_iter)
  register_dataclass's flatten_func       its closure's data_fields / meta_fields tuples
  jax._src.array.ArrayImpl                the concrete jax Array type
  ArrayImpl._sharding, ArrayImpl._committed
                                          placement of an array (cheaper than .sharding)
  jax._src.random.prng.PRNGKeyArray, ._base_array, ._impl
                                          typed PRNG keys, their physical array, their impl
                                          (moved: jax._src.prng before 0.10)
  PRNGImpl.key_shape, PRNGImpl.tag        a key impl's physical trailing shape and its name
  jaxlib ExecuteResults.consume_with_handlers
                                          turns an execution's buffers into jax Arrays
  jax._src.config.trace_context           every config value that changes tracing
  jax._src.config.trace_context_names     their names (moved: before 0.10, found by setting
                                          each jaxlib Config of jax._src.config in turn)
  jax._src.config.disable_jit, no_tracing, no_execution
                                          settings under which jax itself must run a call
  jax._src.core.trace_state, eval_trace   whether a transformation is tracing right now
                                          (moved: core.trace_ctx.trace before 0.10)
  jax._src.core.trace_state_clean         the same, named axes included
  JitWrapped._jit_info                    jax.jit's resolved static/donated arguments
  jax.stages.Compiled._executable         the pxla.MeshExecutable behind a Compiled
  MeshExecutable.xla_executable           jaxlib LoadedExecutable (execute_sharded)
  MeshExecutable._unloaded_executable.device_list, .committed
                                          its device assignment, every process's (warm start);
                                          whether its outputs are committed
  ResultsHandler.out_avals, .out_shardings, pxla.global_result_handlers,
  jax._src.core.physical_aval             a typed key output made as jax.jit's C++ path
                                          makes it (the key's sharding on its physical array)
  MeshExecutable.unsafe_call              pxla.ExecuteReplicated: out_handler.handlers,
                                          kept_var_idx, ordered_effects,
                                          has_unordered_effects, has_host_callbacks, mut,
                                          pgle_profiler
  MeshExecutable._in_shardings, in_avals, _dispatch_in_layouts
                                          what the executable expects of each kept input
  ExecuteReplicated._local_devices, keepalive
                                          the devices a token is threaded per; what the
                                          host callbacks need kept alive
  jax.stages.Compiled._params.const_args  constants jax passes ahead of the arguments
  jax.stages.Traced._consts, _params      a trace's constants passed as arguments, and the
                                          parameters its lowering reads (warm start's checked key)
  jax._src.dispatch.needs_check_special   jax_debug_nans / jax_debug_infs, as this thread has them
  jax._src.config.debug_nans, debug_infs, State._update_global_hook, State._add_hooks
                                          their changes, watched after jax's own hooks
  jax._src.config.enable_x64, default_device (and disable_jit above)
                                          the jit settings behind fastdispatch.jax_jit.state
  jaxlib Config.get_global, get_local, set_local, jaxlib config unset
                                          a setting's global and per-thread values
  State._update_thread_local_hook         what jax calls when a `with` block sets a value
  jax._src.dtypes._canonicalize_dtype, python_scalar_types_to_dtypes, _jax_dtype_set
                                          the dtype jax gives a value, for a given x64
  jax._src.random.prng.KeyTy              the dtype of a typed PRNG key, from its impl
  jax._src.lib.jax_jit._ArgSignatureOfValue
                                          jaxlib's argument signature (values jax keys itself)
  jax._src.lib._profiler.TraceMe          jaxlib's profiler span (and its is_enabled)
  jax._src.util.fun_name                  the name jax.jit gives a function's spans
  jaxlib batched_device_put               puts host data (a Python or numpy scalar, a
                                          numpy array) on one device or on each of several
  Sharding._addressable_device_assignment this process's devices of a sharding, in the
                                          order jax's own shard_args puts a scalar on them
  jax._src.xla_bridge.backends_are_initialized
                                          whether a backend started (never start one to ask)
  jax._src.distributed.global_state       jax.distributed's process id and count, kept
                                          after jax.distributed.shutdown()
  xla_bridge.register_backend_factory, make_cpu_client, jaxlib make_gloo_tcp_collectives
                                          a CPU backend whose gloo collectives bind to a
                                          given address (loopback runs)
  jax._src.dispatch.runtime_tokens        jax's per-thread effect tokens (RuntimeTokenSet:
                                          current_tokens, output_runtime_tokens,
                                          get_token_input)
  jax._src.core.Token                     an ordered effect's token, wrapping its array
  jaxlib LoadedExecutable.execute_sharded(..., with_tokens=True), ExecuteResults
  .consume_token, ShardedToken.get_token  an effectful execution and its runtime tokens
  jax._src.config.transfer_guard_host_to_device, explicit_device_put_scope
                                          the host-to-device transfer guard and what
                                          makes a transfer explicit to it
  jax._src.config.enable_x64              x64, which fixes a host value's dtype
  jax._src.dtypes.canonicalize_dtype      a numpy dtype as jax stores it (x64 off: 32-bit)
  jax._src.dtypes.canonicalize_value      a host value cast as jax.device_put casts it
  jax._src.interpreters.pxla.get_default_device
                                          where device_put puts data when given no device
  jax._src.dispatch.JAXPR_TRACE_EVENT, JAXPR_TO_MLIR_MODULE_EVENT, BACKEND_COMPILE_EVENT
                                          jax.monitoring's names of a compile's phases
  jax._src.config.persistent_cache_min_compile_time_secs
                                          the shortest compile jax's persistent cache keeps,
                                          set per thread (warm start's own compiles)
  jax._src.core.AxisEnv .axis_sizes, .spmd_axis_names, .explicit_mesh_axis_names
                                          the trace context's axis environment, as data
                                          (warm start's key; before 0.10 the context holds
                                          it as plain (name, size) pairs already)
  jax._src.literals.TypedNdArray .val, .weak_type
                                          a numpy constant as a jaxpr holds it (warm
                                          start's checked key digests it; moved: an
                                          ndarray subclass from 0.9, a wrapper in 0.8)
  jax.tree_util.flatten_one_level_with_keys
                                          a node's children and their keys (moved: public
                                          since 0.10; before, tree_flatten_with_path one
                                          level deep)
  jax._src.util.register_cache            the caches jax.clear_caches() clears (ours too)
  jax._src.api._post_hook_state, jax._src.pjit._run_python_pjit, PjitFunction._fun
                                          jax.jit's two ways to dispatch (its C++ fast
                                          path, then its post hook; its Python path),
                                          and the function a jitted one wraps: where
                                          --trace counts eager ops (tracing/hooks.py),
                                          with State._update_thread_local_hook (a
                                          debug_nans block sets the thread's hook);
                                          before 0.9 the Python path is
                                          pjit._python_pjit_helper(fun, jit_info, ...)
  jax._src.pjit._pjit_call_impl_python, _resolve_and_lower, convert_to_metaty,
  jax._src.interpreters.mlir.LoweringParameters, jax._src.util.test_event
                                          jax.jit's compile-and-run of a miss, and its
                                          lowering alone: warm start keeps jax's own
                                          compiles (eager operations, a library's jit)
  jax._src.core.Primitive, the globals of jax's modules
                                          the primitives jax itself defines (warm start
                                          keys only programs of those by their jaxpr)
  jax._src.lax.lax._convert_element_type  a value made weakly typed, as a Python scalar
                                          argument is (packed host leaves, core/packing.pyx)
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from typing import NamedTuple

import jax
import numpy as np

from fastdispatch import _reasons
from fastdispatch._reasons import MustHandOff

# -- what this jax has ---------------------------------------------------------------

# The jax minors fastdispatch is tested on, lowest included, highest excluded:
# pyproject.toml's range (tests/unit/test_jax.py checks that they agree).
SUPPORTED_JAX = ((0, 8), (0, 11))
SUPPORTED_TEXT = ">=0.8,<0.11"


class UnsupportedJaxWarning(RuntimeWarning):
    """fastdispatch does not know the installed jax: every call goes to jax itself."""


class UnsupportedJaxError(RuntimeError):
    """A fastdispatch tool (trace, stats, the cache...) was used on a jax that
    fastdispatch does not serve."""


_absent = []  # dotted names this jax lacks, in the order they were asked for


def _resolve(dotted: str):
    """The object a dotted name names, importing modules along it; jaxlib's
    extension modules (jax._src.lib._jax) are attributes, not submodules."""
    parts = dotted.split(".")
    value = importlib.import_module(parts[0])
    for i, name in enumerate(parts[1:], 2):
        try:
            value = getattr(value, name)
        except AttributeError:
            if not hasattr(value, "__path__"):  # not a package: no submodule either
                raise
            value = importlib.import_module(".".join(parts[:i]))
    return value


def _need(module: str, path: str = ""):
    """The object at ``module`` and attribute ``path`` below it, or None where
    this jax lacks it, recorded in ``_absent``."""
    dotted = f"{module}.{path}" if path else module
    try:
        return _resolve(dotted)
    except (ImportError, AttributeError):
        _absent.append(dotted)
        return None


def _has(module: str, path: str) -> bool:
    """Whether this jax has the name, asked without recording it: a shim's choice."""
    try:
        _resolve(f"{module}.{path}")
    except (ImportError, AttributeError):
        return False
    return True


def _jax_minor() -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", jax.__version__)
    return (int(match[1]), int(match[2])) if match else None


# jax's own jit: what a hand-off runs, and the compiler.  Read from jax._src so that
# `python -m fastdispatch` patching the public ``jax.jit`` never loops back here.
jax_jit = _need("jax._src.api", "jit")

# The concrete types the fast path reads directly.
ARRAY_TYPE = _need("jax._src.array", "ArrayImpl")
# moved: jax._src.random.prng is a module from 0.10; before, jax._src.prng
# (which jax._src.random imported under that name).
_PRNG = "jax._src.prng" if _has("jax._src.prng", "PRNGKeyArray") else "jax._src.random.prng"
KEY_ARRAY_TYPE = _need(_PRNG, "PRNGKeyArray")
_KEY_TY = _need(_PRNG, "KeyTy")
TRACER_TYPE = jax.core.Tracer
RUNTIME_ERROR = jax.errors.JaxRuntimeError

# Attribute names read on ARRAY_TYPE in the hot path: ~30 ns each, against
# ~85 ns for the public ``.sharding`` property (docs/performance.md).
SHARDING_ATTR = "_sharding"
COMMITTED_ATTR = "_committed"
# A typed key's physical array and implementation: the key's own .aval and
# .sharding are computed on every read (~9 us and ~6 us).
KEY_BUFFER_ATTR = "_base_array"
KEY_IMPL_ATTR = "_impl"
# An array's device layout (jaxlib's PjRtLayout; equal layouts compare equal):
# jax.jit keys a call on it.  Read only on a live array (a deleted one's
# read crashes the process, and jax's own .format checks first).
LAYOUT_ATTR = "_pjrt_layout"

# The unbound method, called as consume(results, handlers): no attribute lookup
# on each call's fresh ExecuteResults.
consume_with_handlers = _need("jax._src.lib._jax", "ExecuteResults.consume_with_handlers")

# jax's tuple of every config value that affects tracing (x64, default device,
# mesh context, disable_jit, no_execution, ...): part of every cache key.
trace_context = _need("jax._src.config", "trace_context")

# A transformation in progress (an outer jit, grad, vmap) sets jax's thread-local
# trace state; calls made then must be staged by jax, never executed by us.  The
# engine asks ``getattr(TRACE_STATE, TRACE_STATE_ATTR) is CLEAN_TRACE_STATE``.
# moved: from 0.10 a jaxlib Config holding the trace's weak reference; before,
# core.trace_ctx, a threading.local holding the trace itself.
_eval_trace = _need("jax._src.core", "eval_trace")
if _has("jax._src.core", "trace_state"):
    TRACE_STATE = _need("jax._src.core", "trace_state")
    TRACE_STATE_ATTR = "value"
    CLEAN_TRACE_STATE = _need("jax._src.core", "eval_trace._weakref")
else:
    TRACE_STATE = _need("jax._src.core", "trace_ctx")
    TRACE_STATE_ATTR = "trace"
    CLEAN_TRACE_STATE = _eval_trace
_trace_state_clean = _need("jax._src.core", "trace_state_clean")


def trace_state_is_clean() -> bool:
    """jax's own answer (no trace and no named axes in effect), for the miss
    path and the tools.  Every call asks the cheaper half of it in C (the
    engine's ``trace_state_clean``: is TRACE_STATE's value the clean one);
    a miss then asks this, so that a call made under named axes alone is
    jax's too."""
    return _trace_state_clean()


_config_ext = _need("jax._src.config", "config_ext")
_trace_context_names = (
    _need("jax._src.config", "trace_context_names")
    if _has("jax._src.config", "trace_context_names")
    else None
)
_found_names = None


def trace_context_names() -> tuple:
    """Names of the values in ``trace_context()``, in order (for reports and
    warm start's keys)."""
    if _trace_context_names is not None:
        try:
            return tuple(_trace_context_names())
        except NotImplementedError:  # jax 0.10 on a jaxlib that cannot name them
            pass
    global _found_names
    if _found_names is None:
        _found_names = _probe_trace_context_names()
    return _found_names


def _probe_trace_context_names() -> tuple:
    """moved: jaxlib before 0.10 does not name the trace context's values.  Each
    is a jaxlib Config of jax._src.config: set each Config's per-thread value to
    a marker in turn, see where the marker shows up, and put the value back."""
    configs = {}
    for value in (*vars(_config_module).values(), *_config_module.config_states.values()):
        if isinstance(value, _config_ext.Config):
            configs[id(value)] = value
    names = [f"trace_context[{i}]" for i in range(len(trace_context()))]
    for config in configs.values():
        marker = object()
        previous = config.get_local()
        config.set_local(marker)
        try:
            context = trace_context()
        finally:
            config.set_local(previous)
        for i, value in enumerate(context):
            if value is marker:
                names[i] = config.name
    return tuple(names)


_config_module = _need("jax._src.config")
_DISABLE_JIT = _need("jax._src.config", "disable_jit")
_NO_TRACING = _need("jax._src.config", "no_tracing")
_NO_EXECUTION = _need("jax._src.config", "no_execution")


def settings_hand_off() -> str | None:
    """Why jax itself must take a call right now, or None.

    Read on a cache miss only: each of these settings is part of
    ``trace_context()``, so a change in them also changes the cache key.
    """
    if _DISABLE_JIT.value:
        return _reasons.DISABLE_JIT
    if _NO_TRACING.value:
        return _reasons.NO_TRACING
    if _NO_EXECUTION.value:
        return _reasons.NO_EXECUTION
    if not trace_state_is_clean():
        return _reasons.TRACER
    return None


# -- pytrees -------------------------------------------------------------------


_registry = _need("jax._src.tree_util", "_registry")


def pytree_registry() -> dict:
    """jax's Python-side pytree registry: ``type -> (to_iter, from_iter)``.

    Every node type registered through jax's public functions
    (``register_pytree_node``, ``register_pytree_with_keys``,
    ``register_dataclass``, ``register_static``) appears here; the dict only
    grows, so its length tells a cache when to look again.
    """
    return _registry


def dataclass_fields(to_iter):
    """``(data_fields, meta_fields)`` when ``to_iter`` is the flatten function that
    ``jax.tree_util.register_dataclass`` made, else None.

    jax flattens such types in C++ by getattr; calling its Python flatten function
    instead costs ~1 us per node, so we read the two field tuples it closes over.
    The first instance of each type is checked against ``to_iter`` itself
    (``fastdispatch.core.pytree.registry.check_reader``), and any difference
    falls back to calling ``to_iter``.
    """
    if getattr(to_iter, "__qualname__", None) != "register_dataclass.<locals>.flatten_func":
        return None
    code = getattr(to_iter, "__code__", None)
    closure = getattr(to_iter, "__closure__", None)
    if code is None or closure is None or len(code.co_freevars) != len(closure):
        return None
    try:
        cells = {name: cell.cell_contents for name, cell in zip(code.co_freevars, closure)}
    except ValueError:  # an empty cell
        return None
    data, meta = cells.get("data_fields"), cells.get("meta_fields")
    if type(data) is not tuple or type(meta) is not tuple:
        return None
    if not all(type(name) is str for name in data + meta):
        return None
    return data, meta


def _one_level_with_path(tree):
    """moved: jax before 0.10 has no flatten_one_level_with_keys; flattening with
    paths, every node below the root a leaf, gives the same keys and children."""
    pairs, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda node: node is not tree)
    return [(path[0], child) for path, child in pairs]


# A node's children with their keys, as jax names them: ``[(key, child), ...]``.
flatten_one_level_with_keys = (
    (lambda tree: list(jax.tree_util.flatten_one_level_with_keys(tree)[0]))
    if hasattr(jax.tree_util, "flatten_one_level_with_keys")
    else _one_level_with_path
)


# -- arrays and keys -------------------------------------------------------------


def array_descriptor(name: str):
    """The descriptor behind ``ARRAY_TYPE``'s attribute ``name``; it must be a
    data descriptor, so that reading it through its slot equals getattr."""
    for klass in ARRAY_TYPE.__mro__:
        if name in vars(klass):
            descriptor = vars(klass)[name]
            if not hasattr(type(descriptor), "__set__"):
                raise TypeError(f"{ARRAY_TYPE.__name__}.{name} is not a data descriptor")
            return descriptor
    raise AttributeError(f"{ARRAY_TYPE.__name__} has no attribute {name!r}")


def key_aval_text(impl, base_aval) -> str:
    """``key<fry>[3]`` for keys of this impl whose physical array has ``base_aval``."""
    shape = base_aval.shape[: len(base_aval.shape) - len(impl.key_shape)]
    return f"key<{impl.tag}>[{','.join(map(str, shape))}]"


# -- jit options -------------------------------------------------------------------


class ResolvedArguments(NamedTuple):
    static_argnums: tuple
    static_argnames: tuple
    donate_argnums: tuple
    donate_argnames: tuple


def resolved_arguments(jitted) -> ResolvedArguments:
    """jax.jit's static and donated arguments, after it matched argnums to argnames."""
    info = jitted._jit_info
    return ResolvedArguments(
        tuple(info.static_argnums),
        tuple(info.static_argnames),
        tuple(info.donate_argnums),
        tuple(info.donate_argnames),
    )


# -- executables ---------------------------------------------------------------------


class ExecutableParts(NamedTuple):
    """A jax.stages.Compiled taken apart into what a direct PjRt call needs."""

    execute: object  # LoadedExecutable.execute_sharded, bound
    out_handlers: list  # one result handler per flat output
    out_treedef: object  # jax PyTreeDef of the outputs
    kept: tuple  # indices of the flat inputs the executable takes, increasing
    in_shardings: tuple  # the sharding each kept input must have
    in_avals: tuple  # the aval of each kept input
    ordered_effects: tuple  # jax's ordered effects: one token input and output each
    with_tokens: bool  # effects: run with runtime tokens, as ExecuteReplicated does
    devices: tuple  # the executable's local devices, in its order (its tokens' order)
    keepalive: object  # what the executable's host callbacks need kept alive
    calls_host: bool  # it runs Python on the host (callbacks, effects)


_MESH_EXECUTABLE = _need("jax._src.interpreters.pxla", "MeshExecutable")
_EXECUTE_REPLICATED = _need("jax._src.interpreters.pxla", "ExecuteReplicated")
_RESULT_HANDLERS = _need("jax._src.interpreters.pxla", "global_result_handlers")
_physical_aval = _need("jax._src.core", "physical_aval")
_needs_check_special = _need("jax._src.dispatch", "needs_check_special")


def compiled_memory_bytes(execute) -> int | None:
    """The device memory one loaded executable holds (its code, temporaries,
    arguments and outputs, from XLA's memory analysis), given the
    ``execute`` of its ExecutableParts; None where the backend does not say."""
    try:
        stats = execute.__self__.get_compiled_memory_stats()
    except Exception:
        return None
    return int(
        stats.generated_code_size_in_bytes
        + stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )


def executable_parts(compiled) -> ExecutableParts:
    """Split ``compiled`` into the pieces of a direct PjRt call, or say why not.

    Runs what ``pxla.ExecuteReplicated.__call__`` runs: a plain replicated
    executable with no mutable arrays, profiling, custom input layouts or
    constants passed as arguments.  Effects are run as it runs them (tokens in
    and out, ``with_tokens``); host callbacks without effects (``pure_callback``)
    run without tokens, as on jax's own C++ fast path (``pjit._get_fastpath_data``).
    Whether the call's own inputs fit is the execute layer's to check.  Raises
    MustHandOff with the reason to hand the call off.
    """
    executable = compiled._executable
    if not isinstance(executable, _MESH_EXECUTABLE):
        raise MustHandOff(_reasons.NOT_MESH_EXECUTABLE)
    call = executable.unsafe_call
    if not isinstance(call, _EXECUTE_REPLICATED):
        raise MustHandOff(_reasons.NOT_REPLICATED_EXECUTABLE)
    if call.mut is not None:
        raise MustHandOff(_reasons.MUTABLE_ARRAYS)
    if call.pgle_profiler is not None:
        raise MustHandOff(_reasons.PGLE)
    if _needs_check_special():
        raise MustHandOff(_reasons.DEBUG_NANS)
    if any(layout is not None for layout in executable._dispatch_in_layouts):
        raise MustHandOff(_reasons.CUSTOM_LAYOUTS)
    if getattr(compiled._params, "const_args", ()):
        # jax_use_simplified_jaxpr_constants: jax passes them first and
        # kept_var_idx counts them.
        raise MustHandOff(_reasons.CONSTANT_ARGUMENTS)
    ordered = tuple(call.ordered_effects)
    devices = tuple(call._local_devices)
    if ordered and len(devices) != 1:
        raise MustHandOff(_reasons.ORDERED_EFFECTS_ON_DEVICES)
    handlers = list(call.out_handler.handlers)
    if len(handlers) != compiled.out_tree.num_leaves:
        raise MustHandOff(_reasons.OUTPUTS_FLATTEN_DIFFERENTLY)
    unloaded = executable._unloaded_executable
    committed = True if unloaded is None else unloaded.committed
    for i, (aval, sharding) in enumerate(zip(call.out_handler.out_avals, call.out_handler.out_shardings)):
        if isinstance(getattr(aval, "dtype", None), _KEY_TY):
            handlers[i] = _key_result_handler(aval, sharding, committed)
    # _in_shardings and in_avals list the kept inputs only, in order.
    return ExecutableParts(
        call.xla_executable.execute_sharded,
        handlers,
        compiled.out_tree,
        tuple(sorted(call.kept_var_idx)),
        tuple(executable._in_shardings),
        tuple(executable.in_avals),
        ordered,
        bool(ordered or call.has_unordered_effects),
        devices,
        call.keepalive,
        bool(ordered or call.has_unordered_effects or call.has_host_callbacks),
    )


def output_description(compiled) -> tuple:
    """(whether its outputs are committed, their avals, their shardings) of a
    Compiled that executable_parts accepts: what makes two executables' results
    alike (packed host leaves compare their variant's with the entry's)."""
    executable = compiled._executable
    unloaded = executable._unloaded_executable
    handler = executable.unsafe_call.out_handler
    committed = True if unloaded is None else unloaded.committed
    return committed, tuple(handler.out_avals), tuple(handler.out_shardings)


_CONVERT_ELEMENT_TYPE = _need("jax._src.lax.lax", "_convert_element_type")


def weakly_typed(value):
    """``value`` (a traced array) as a weakly typed one of its dtype: what a
    Python scalar argument is inside jax.jit's trace."""
    return _CONVERT_ELEMENT_TYPE(value, value.dtype, weak_type=True)


def _key_result_handler(aval, sharding, committed):
    """A typed PRNG key output as jax.jit's C++ fast path makes it from its
    second call on: the physical array with the key's own sharding (its
    trailing key dimension unnamed: ``P(None, 'y', 'x')``), where the Python
    path's handler names it (``P(None, 'y', 'x', None)``); the same placement."""
    physical_aval = _physical_aval(aval)
    physical = _RESULT_HANDLERS[type(physical_aval)](physical_aval, sharding, committed)
    impl = aval.dtype._impl
    return physical.wrap(lambda array: KEY_ARRAY_TYPE(impl, array))


def traced_parts(traced) -> tuple:
    """(constants passed as arguments, lowering parameters: a dict) of a
    jax.stages.Traced: what lowering it reads besides its jaxpr."""
    return traced._consts, traced._params


def executable_device_ids(compiled) -> tuple:
    """The ids of the devices ``compiled`` runs on, in its device assignment's
    order, every process's (jax.distributed): what deserializing it must be
    given (all of the backend's, by default, which is wrong for an executable
    of one device among several)."""
    unloaded = compiled._executable._unloaded_executable
    if unloaded is not None:
        return tuple(device.id for device in unloaded.device_list)
    return tuple(device.id for device in compiled._executable.xla_executable.local_devices())


def scalar_devices(sharding) -> tuple:
    """The devices, in order, that a host input (a Python scalar, a numpy value)
    of this sharding goes to:
    this process's devices of the sharding (all of them in a one-process program);
    MustHandOff says why the fast path cannot put it there.

    A scalar's sharding is replicated (the value is rank 0), over one device or
    many, and in a multi-process program over other processes' devices too;
    every process puts the same value on its own devices, as jax's
    ``pxla._shard_np_array`` does.  (Like jax, nothing checks that every process
    passed the same value.)"""
    if not sharding.is_fully_replicated:
        raise MustHandOff(_reasons.HOST_ARGUMENT_PARTITIONED)
    devices = tuple(sharding._addressable_device_assignment)
    if not devices:
        raise MustHandOff(_reasons.HOST_ARGUMENT_ELSEWHERE)
    return devices


# -- jit settings (fastdispatch.jax_jit.state) ------------------------------------------------

# Each is a jaxlib Config with a global value and a per-thread one that wins
# when set: `with jax.disable_jit():`, `with jax.enable_x64(True):` and
# `with jax.default_device(d):` set the calling thread's.
DISABLE_JIT = _DISABLE_JIT
ENABLE_X64 = _need("jax._src.config", "enable_x64")
DEFAULT_DEVICE = _need("jax._src.config", "default_device")
_UNSET = _need("jax._src.lib._jax", "config.unset")


def local_setting(setting):
    """The calling thread's own value of ``setting``, or None where it has none."""
    value = setting.get_local()
    return None if value is _UNSET else value


def set_local_setting(setting, value) -> None:
    """Set the calling thread's value as entering ``with setting(value):`` does
    (jax's parser, validator and hook); None removes it, as leaving the
    outermost such block does, so that the global value applies again."""
    if value is not None:
        setting(value).__enter__()  # the block is never left: the value stays
        return
    setting.set_local(_UNSET)
    hook = setting._update_thread_local_hook
    if hook is not None:
        hook(None)


# -- jax_debug_nans / jax_debug_infs (fastdispatch.core.engine) ---------------------------

# While either is on, jax's C++ jit checks each call's outputs in its post hook
# and, on a NaN, reruns the call op by op to raise FloatingPointError.  The
# fast path has no such check, so the engine hands calls to the library then.
# jax tells each setting's change to the two hooks it holds: the global one
# (jax.config.update) and the thread's (a `with jax.debug_nans(True):` block).
_SPECIAL_CHECKS = (_need("jax._src.config", "debug_nans"), _need("jax._src.config", "debug_infs"))
_special_checks_watched = False


def needs_special_checks() -> bool:
    """Whether jax checks outputs for NaNs or infinities in this thread now."""
    return bool(_needs_check_special())


def watch_special_checks(changed) -> None:
    """Call ``changed(maybe_on)`` now and each time jax_debug_nans or
    jax_debug_infs is set, after jax's own hooks.  ``maybe_on`` is True while
    either is on globally, and for good once a thread has turned one on: a
    thread's own value cannot be read from another thread, so the caller then
    asks ``needs_special_checks()`` on each call."""
    set_in_a_thread = False

    def update():
        changed(set_in_a_thread or any(setting.get_global() for setting in _SPECIAL_CHECKS))

    def chained(setting):
        jax_global, jax_local = setting._update_global_hook, setting._update_thread_local_hook

        def on_global(value):
            if jax_global is not None:
                jax_global(value)
            update()

        def on_local(value):
            nonlocal set_in_a_thread
            if jax_local is not None:
                jax_local(value)
                _rehook_thread()
            set_in_a_thread = set_in_a_thread or bool(value)
            update()

        return on_global, on_local

    global _special_checks_watched
    _special_checks_watched = True
    for setting in _SPECIAL_CHECKS:
        setting._add_hooks(*chained(setting))  # calls on_global with today's value


# -- argument signatures (fastdispatch.jax_jit.arg_signature) ---------------------------------

# jaxlib's signature of one argument, for values the dispatcher hands to jax
# without keying them itself (enums, float subclasses, strings, tracers).
jaxlib_arg_signature = _need("jax._src.lib.jax_jit", "_ArgSignatureOfValue")
_jax_dtype_set = _need("jax._src.dtypes", "_jax_dtype_set")
_canonicalize_dtype = _need("jax._src.dtypes", "_canonicalize_dtype")
_python_scalar_dtypes = _need("jax._src.dtypes", "python_scalar_types_to_dtypes")


def canonical_dtype(dtype, x64: bool):
    """The dtype jax gives a numpy value of ``dtype``: 64-bit types squashed to
    32 bits unless ``x64``.  None for a dtype jax arrays cannot have (strings,
    objects)."""
    if np.dtype(dtype) not in _jax_dtype_set:
        return None
    return _canonicalize_dtype(x64, False, dtype)


def python_scalar_dtype(py_type: type, x64: bool):
    """The dtype jax gives a Python bool, int, float or complex of this type."""
    return canonical_dtype(_python_scalar_dtypes[py_type], x64)


def key_dtype(impl):
    """The dtype of typed PRNG keys of this implementation, e.g. ``key<fry>``."""
    return _KEY_TY(impl)


# -- the profiler (jax.profiler) --------------------------------------------------------

# jaxlib's TraceMe: a span on the host timeline of a running jax.profiler
# capture, from its construction to __exit__.  TRACE_ME.is_enabled() says
# whether a capture is running (~5 ns from Cython: an atomic load in C++);
# a span made while none is records nothing.
TRACE_ME = _need("jax._src.lib._profiler", "TraceMe")
_fun_name = _need("jax._src.util", "fun_name")


def fun_name(fun) -> str:
    """The name jax.jit puts in its spans, ``PjitFunction(<name>)``: the
    function's ``__name__``, through functools.partial."""
    return _fun_name(fun)


# -- several processes (jax.distributed) -------------------------------------------


_backends_are_initialized = _need("jax._src.xla_bridge", "backends_are_initialized")
_distributed = _need("jax._src.distributed")
_need("jax._src.distributed", "global_state")
_xla_bridge = _need("jax._src.xla_bridge")
_need("jax._src.xla_bridge", "register_backend_factory")
_need("jax._src.xla_bridge", "make_cpu_client")
_xc = _need("jax._src.lib._jax")
_need("jax._src.lib._jax", "make_gloo_tcp_collectives")


def process_of_program() -> tuple[int, int] | None:
    """``(jax.process_index(), jax.process_count())`` in a program of several
    processes, else None; for naming a trace's report and file.

    Never starts a backend to answer (that would fix the device count behind
    the program's back, and under jax.distributed would wait for the other
    processes): with no backend up yet, jax.distributed's own record answers,
    which ``jax.distributed.shutdown()`` leaves in place."""
    if _backends_are_initialized():
        count = jax.process_count()
        return (jax.process_index(), count) if count > 1 else None
    state = _distributed.global_state
    if state.coordinator_address is not None and state.num_processes > 1:
        return state.process_id, state.num_processes
    return None


def gloo_on_address(address: str) -> None:
    """Make the CPU backend's gloo collectives bind to ``address`` (an IP).

    jax's own CPU backend lets gloo bind to whatever the machine's hostname
    resolves to; there is no option for it.  Call after
    ``jax.distributed.initialize`` and before anything starts the CPU backend."""
    if _backends_are_initialized():
        raise RuntimeError("gloo_on_address: jax's backends have started already")
    if _distributed.global_state.client is None:
        raise RuntimeError("gloo_on_address: call jax.distributed.initialize first")

    def make_cpu_client():
        collectives = _xc.make_gloo_tcp_collectives(
            distributed_client=_distributed.global_state.client, hostname=address
        )
        return _xla_bridge.make_cpu_client(collectives=collectives)

    _xla_bridge.register_backend_factory("cpu", make_cpu_client, priority=0, fail_quietly=False)


# -- effects ---------------------------------------------------------------------------

# An ordered effect's token: core.Token(array).  Its array is what the
# executable takes and returns for the effect.
TOKEN_TYPE = _need("jax._src.core", "Token")
_runtime_tokens_module = _need("jax._src.dispatch")
_need("jax._src.dispatch", "runtime_tokens")
_typeof = _need("jax._src.core", "typeof")
_SHAPED_ARRAY = _need("jax._src.core", "ShapedArray")


def runtime_tokens():
    """jax's effect tokens for the calling thread (``dispatch.runtime_tokens``, a
    threading.local).  Read on every call: ``current_tokens`` and
    ``output_runtime_tokens`` are per thread, and ``clear()`` (jax.effects_barrier)
    replaces them."""
    return _runtime_tokens_module.runtime_tokens


def fresh_token_buffer(device):
    """A ``bool[0]`` array on ``device``: what jax passes for an ordered effect's
    token after blocking on the previous one (``array._token_shard_arg``).  The
    executable never reads it, nor donates it, so one serves every call."""
    host = np.zeros(0, np.bool_)
    with explicit_put_scope():
        return batched_device_put(
            _typeof(host), jax.sharding.SingleDeviceSharding(device), [host], [device], True
        )


# -- host data ---------------------------------------------------------------------------


# jaxlib's own function, for callers that build its argument lists themselves
# (fastdispatch.device_put: ~0.1 us a leaf less than put_host's frame).
batched_device_put = _need("jax._src.lib._jax", "batched_device_put")


def put_host(value, aval, sharding, devices, committed):
    """``value`` (a Python or numpy scalar, a numpy array) as a jax Array of
    ``aval`` and ``sharding``, one copy on each of ``devices`` (a tuple: one
    device, or this process's devices of a replicated sharding), converted by
    jaxlib's C++ as jax.jit converts its arguments (64-bit squashed when x64 is
    off; numpy memory aliased, not copied).

    jaxlib does not check ``aval`` against the value: callers pass the aval jax
    gives a value of this type, dtype and shape.  The implicit host-to-device
    transfer guard applies (inside ``explicit_put_scope()``, the explicit one).
    Raises jax's JaxRuntimeError for a value that does not convert (an int too
    large for int32) or a transfer the guard disallows."""
    return batched_device_put(aval, sharding, [value] * len(devices), list(devices), committed)


_TRANSFER_GUARD = _need("jax._src.config", "transfer_guard_host_to_device")


def host_transfer_guard():
    """The host-to-device transfer guard in force: None (unset), "allow", "log",
    "disallow", "log_explicit" or "disallow_explicit".  Not part of
    ``trace_context()``: read it where a transfer might be skipped."""
    return _TRANSFER_GUARD.value


explicit_put_scope = _need("jax._src.config", "explicit_device_put_scope")
default_device = _need("jax._src.interpreters.pxla", "get_default_device")
_dtype_of_host = _need("jax._src.dtypes", "canonicalize_dtype")
_canonicalize_value = _need("jax._src.dtypes", "canonicalize_value")


def x64_enabled() -> bool:
    return ENABLE_X64.value


def host_array_aval(dtype, shape):
    """The aval jax gives a numpy array or scalar of this dtype and shape (not weak)."""
    return _SHAPED_ARRAY(shape, _dtype_of_host(dtype))


def canonicalize_host(value):
    """A numpy value of a 64-bit dtype cast as jax.device_put casts it when x64 is
    off (numpy's cast, with numpy's overflow warning); jaxlib's own squashing
    casts silently."""
    return _canonicalize_value(value)


def python_scalar_aval(value):
    """The aval jax gives a Python scalar (weak, but bool); OverflowError for an int
    beyond the integer type x64 allows."""
    return _typeof(value)


# -- for --trace's findings (tracing/hooks.py) ------------------------------------

# jax.monitoring's event for a function traced at top level (warm start: a
# compile that traced in this process).
JAXPR_TRACE_EVENT = _need("jax._src.dispatch", "JAXPR_TRACE_EVENT")

# jax.monitoring's duration events of one compile, by the phase they time.
COMPILE_PHASE_EVENTS = {
    JAXPR_TRACE_EVENT: "tracing",
    _need("jax._src.dispatch", "JAXPR_TO_MLIR_MODULE_EVENT"): "lowering",
    _need("jax._src.dispatch", "BACKEND_COMPILE_EVENT"): "XLA",
}

# jax.monitoring's events of its persistent compilation cache, by what they
# count: a compile that asked the cache, one it served, one written to it
# (jax calls the write a miss; a compile under the cache's thresholds asks
# and is neither served nor written).
JAX_CACHE_EVENTS = {
    "/jax/compilation_cache/compile_requests_use_cache": "asked",
    "/jax/compilation_cache/cache_hits": "served",
    "/jax/compilation_cache/cache_misses": "written",
}
JAX_CACHE_SERVED_EVENT = next(event for event, kind in JAX_CACHE_EVENTS.items() if kind == "served")

# The shortest compile jax writes to its persistent cache: a thread's own value
# of it (a `with` block) holds for that thread's compiles only.
_JAX_CACHE_MIN_COMPILE_TIME = _need("jax._src.config", "persistent_cache_min_compile_time_secs")


def jax_cache_unwritten():
    """A `with` block in which this thread's compiles are not written to jax's
    persistent cache (warm start's compiles for its own store, warm/refill.py)."""
    return _JAX_CACHE_MIN_COMPILE_TIME(float("inf"))


# -- for --trace's eager ops (tracing/hooks.py) -----------------------------------
# Every eager jax operation is a jax.jit dispatch: jnp's functions are jitted, and
# a primitive bound outside any trace is run by jitting it (dispatch.apply_primitive).
# jax.jit dispatches a call in one of two ways: its C++ fast path, which then calls
# jax's post hook (also jax_debug_nans's check) as hook(jitted, args, kwargs,
# outputs); or its Python path, for every call the fast path hands back (a miss, a
# hand-off, a call under a transformation).  Watching both replaces no public name.
_pjit = _need("jax._src.pjit")
_post_hook_state = _need("jax._src.api", "_post_hook_state")
# moved: from 0.9 the Python path is _run_python_pjit(p, args_flat, fun, args,
# kwargs); before, _python_pjit_helper(fun, jit_info, *args, **kwargs).
_PYTHON_PATH = "_run_python_pjit" if _has("jax._src.pjit", "_run_python_pjit") else "_python_pjit_helper"
_run_python_jit = _need("jax._src.pjit", _PYTHON_PATH)
_thread_post_hook_watcher = None  # see keep_thread_post_hook
_thread_post_hook_given = _UNSET  # what it last gave


def jit_post_hook():
    """The hook jax's C++ jit calls after each call it ran (None: none)."""
    return _post_hook_state.get_global()


def set_jit_post_hook(hook) -> None:
    """Set the hook for every thread.  Leaving a ``with jax.debug_nans(...)``
    block sets the thread's own value to None, which hides the global one
    there: on the calling thread, that None goes."""
    _post_hook_state.set_global(hook)
    if _post_hook_state.get_local() is None:
        _post_hook_state.set_local(_UNSET)


def keep_thread_post_hook(watcher) -> None:
    """Call ``watcher(hook)`` each time jax sets the calling thread's own post
    hook, and set the hook it returns instead.  jax sets it on entering and
    leaving a ``with jax.debug_nans(...)`` (or ``debug_infs``) block: to its
    NaN check, or to None, which then hides the global hook in that thread for
    good (jax's own gradient of ``jax.nn.relu`` runs such a block).  None:
    jax's hook alone again."""
    global _thread_post_hook_watcher
    _thread_post_hook_watcher = watcher
    if not _special_checks_watched:
        watch_special_checks(lambda maybe_on: None)


def _rehook_thread():
    global _thread_post_hook_given
    hook = _post_hook_state.get_local()
    # Each watch_special_checks chains its own hooks: the outer ones see ours.
    if _thread_post_hook_watcher is not None and hook is not _UNSET and hook is not _thread_post_hook_given:
        _thread_post_hook_given = _thread_post_hook_watcher(hook)
        _post_hook_state.set_local(_thread_post_hook_given)


def observe_jit_python_path(observer) -> None:
    """Send each call of jax.jit's Python path through ``observer(fun, run)``:
    ``fun`` the function jit traces, ``run()`` the path itself, returning its
    result; None puts jax's own path back."""
    if observer is None:
        setattr(_pjit, _PYTHON_PATH, _run_python_jit)
        return

    if _PYTHON_PATH == "_run_python_pjit":

        def run_python_jit(p, args_flat, fun, args, kwargs):
            return observer(fun, lambda: _run_python_jit(p, args_flat, fun, args, kwargs))

    else:

        def run_python_jit(fun, jit_info, *args, **kwargs):
            return observer(fun, lambda: _run_python_jit(fun, jit_info, *args, **kwargs))

    setattr(_pjit, _PYTHON_PATH, run_python_jit)


def jitted_function(jitted):
    """The function a jax.jit-made callable wraps (None for one jax made
    without a Python function: a jaxpr's call, ``jit_p``'s own dispatch)."""
    return getattr(jitted, "_fun", None)


# -- jax.clear_caches (fastdispatch.core.cache) ----------------------------------------
# jax.clear_caches() clears every cache registered with jax's util.register_cache
# (held weakly, by an object offering cache_clear, cache_info and cache_keys).
_register_cache = _need("jax._src.util", "register_cache")


class ClearedWithJax:
    """A registration in jax's cache registry: ``jax.clear_caches()`` calls
    ``clear()``.  jax holds it weakly, so its owner keeps it alive."""

    def __init__(self, clear, what: str):
        self._clear = clear
        _register_cache(self, what)

    def cache_clear(self):
        self._clear()

    def cache_info(self):
        return None

    def cache_keys(self):
        return ()


# -- warm start (fastdispatch.warm) ---------------------------------------------------

# A host constant of a jaxpr, as jax keeps a numpy value a traced function closes
# over: in 0.8 a wrapper (``.val``, a numpy array, and ``.weak_type``).
TYPED_NDARRAY_TYPE = _need("jax._src.literals", "TypedNdArray")


# moved: before 0.10 the trace context holds the axis environment as a tuple
# of (name, size) pairs, plain data already, and core.AxisEnv is not in it.
_AXIS_ENV = _need("jax._src.core", "AxisEnv")


def axis_env_parts(value):
    """The trace context's axis environment as plain data (axis sizes, SPMD and
    explicit mesh axis names), or None when ``value`` is not one."""
    if _AXIS_ENV is None or type(value) is not _AXIS_ENV:
        return None
    return (
        tuple(sorted(value.axis_sizes.items(), key=repr)),
        tuple(sorted(value.spmd_axis_names, key=repr)),
        tuple(sorted(value.explicit_mesh_axis_names, key=repr)),
    )


def backends_started() -> bool:
    """Whether jax's backends have started (asking never starts one): the
    warm-start preloader waits for the program to start them itself."""
    return _backends_are_initialized()


# -- warm start of jax's own compiles (warm/jax_own.py) -------------------------------
# Every compile jax makes for itself (an eager operation, a library's own jit, a
# call handed to jax.jit) is made on a miss of jax.jit's C++ cache, by one function:
# _pjit_call_impl_python(*args, jaxpr=..., **lowering parameters), which lowers,
# compiles and runs the call and returns (outputs, its pxla.MeshExecutable, a PGLE
# profiler, constants passed as arguments).  Its callers (jit's Python path,
# jit_p's evaluation) look it up by name at each call.
_COMPILE_AND_RUN = "_pjit_call_impl_python"
_compile_and_run = _need("jax._src.pjit", _COMPILE_AND_RUN)
_resolve_and_lower = _need("jax._src.pjit", "_resolve_and_lower")
_convert_to_metaty = _need("jax._src.pjit", "convert_to_metaty")
_LoweringParameters = _need("jax._src.interpreters.mlir", "LoweringParameters")
_test_event = _need("jax._src.util", "test_event")


def serve_jit_misses(server) -> None:
    """Send each compile-and-run of a jax.jit miss through ``server(args,
    jaxpr, params, run)``, which returns what ``run()`` (jax's own) returns:
    ``args`` the call's flat arguments, ``jaxpr`` its ClosedJaxpr, ``params``
    the lowering parameters (shardings, layouts, donation, mesh, name, ...).
    None puts jax's own back."""
    if server is None:
        setattr(_pjit, _COMPILE_AND_RUN, _compile_and_run)
        return

    def compile_and_run(*args, jaxpr, **params):
        return server(args, jaxpr, params, lambda: _compile_and_run(*args, jaxpr=jaxpr, **params))

    setattr(_pjit, _COMPILE_AND_RUN, compile_and_run)


def run_jit_miss(executable, args) -> tuple:
    """What jax's compile-and-run returns, with ``executable`` (a loaded
    pxla.MeshExecutable of a call without constant arguments) run on ``args``
    in place of jax's compile: jax.jit's C++ cache then keeps it."""
    _test_event("jit_cpp_cache_miss")
    return executable.unsafe_call(*args), executable, None, []


def lower_jit_miss(args, jaxpr, params):
    """The pxla.MeshComputation jax lowered for this miss (from jax's lowering
    cache: the same object), whose ``compile(compiler_options)`` compiles it
    again."""
    return _resolve_and_lower(
        [_convert_to_metaty(arg) for arg in args],
        jaxpr=jaxpr,
        **params,
        lowering_platforms=None,
        lowering_parameters=_LoweringParameters(),
        pgle_profiler=None,
    )


def as_compiled(executable, num_args: int, num_outputs: int):
    """A jax.stages.Compiled around a pxla.MeshExecutable of jax's own compile,
    with flat trees of as many leaves: what jax's serializer takes (and its
    deserializer gives back, ``compiled._executable`` the MeshExecutable)."""
    return jax.stages.Compiled(
        executable,
        [],
        ((0,) * num_args, {}),
        jax.tree_util.tree_structure([0] * num_outputs),
        no_kwargs=True,
    )


def loaded_executable(compiled):
    """The pxla.MeshExecutable of a jax.stages.Compiled."""
    return compiled._executable


# The primitives jax defines: globals of its modules (jax._src.lax.lax.add_p, ...),
# gathered again whenever more modules have been imported since.
_PRIMITIVE_TYPE = _need("jax._src.core", "Primitive")
_jax_primitives = set()
_modules_scanned = 0


def is_jax_primitive(primitive) -> bool:
    """Whether ``primitive`` is one of jax's own (a global of one of jax's
    modules), lowered as this jax version lowers it: not a library's or a
    program's own, whose lowering rule may change while its jaxpr does not."""
    global _modules_scanned
    if primitive in _jax_primitives:
        return True
    if len(sys.modules) == _modules_scanned:
        return False
    _modules_scanned = len(sys.modules)
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "jax" or name.startswith(("jax.", "jaxlib."))):
            _jax_primitives.update(
                value for value in list(vars(module).values()) if isinstance(value, _PRIMITIVE_TYPE)
            )
    return primitive in _jax_primitives


# -- the hand-off -------------------------------------------------------------------


def _unsupported() -> str | None:
    """Why fastdispatch cannot serve this jax (a sentence for the warning), or None."""
    minor = _jax_minor()
    low, high = SUPPORTED_JAX
    outside = minor is None or not low <= minor < high
    if not outside and not _absent:
        return None
    problems = []
    if outside:
        problems.append("is outside the tested range")
    if _absent:
        problems.append("lacks " + ", ".join(_absent))
    return (
        f"fastdispatch: jax {jax.__version__} {' and '.join(problems)} (fastdispatch supports "
        f"jax{SUPPORTED_TEXT}); every call goes to jax itself: fastdispatch.jit is jax.jit, "
        "filter_jit is equinox.filter_jit, nnx.jit is flax.nnx.jit"
    )


# Decided once: None, or the warning's text (fastdispatch/__init__.py hands off).
MISSING = tuple(_absent)
UNSUPPORTED = _unsupported()
if UNSUPPORTED is not None:
    warnings.warn(UNSUPPORTED, UnsupportedJaxWarning, stacklevel=2)
