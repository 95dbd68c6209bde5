"""Why a call left the fast path: every reason the dispatcher gives, once.

A reason is an interned str, so that the hot path compares it by identity and
the report prints it as it is.  ``docs/tracing.md``'s hand-off table lists
every one of them (tests/unit/test_reasons.py checks it).  Where the fast path
will not run an executable, the code that finds out raises ``MustHandOff`` with
one of these; where it will not run a call, it hands the call off to the
library with the reason (a step of ``Engine.call`` returns it; the call hands
off once, at its bottom).
"""

import sys

# The call: jax's state, the arguments.
TRACER = sys.intern("tracer")
DISABLE_JIT = sys.intern("disable_jit")
NO_TRACING = sys.intern("no_tracing")
NO_EXECUTION = sys.intern("no_execution")
UNSUPPORTED_LEAF = sys.intern("unsupported_leaf")
STATIC_ARGUMENT_ERROR = sys.intern("static_argument_error")
ARGUMENT_BINDING = sys.intern("argument_binding")
COMPILE_ERROR = sys.intern("compile_error")

# Hand-offs after which no executable of the function runs: a trace stages
# the call, jit is off, or the library raises.  After any other, --trace
# counts the call's device time as a hit's.
NOT_RUN = frozenset(
    {
        TRACER,
        DISABLE_JIT,
        NO_TRACING,
        NO_EXECUTION,
        UNSUPPORTED_LEAF,
        STATIC_ARGUMENT_ERROR,
        ARGUMENT_BINDING,
        COMPILE_ERROR,
    }
)

# Host data the library converts faster than the fast path would.
HOST_DATA = sys.intern("numpy arguments")
NEW_SCALAR = sys.intern("new scalar value")
SCALAR_CONVERSION = sys.intern("scalar_conversion")

# The executable: what the fast path does not run as jax would.
EXECUTABLE_NOT_REUSABLE = sys.intern("executable not reusable")
NOT_MESH_EXECUTABLE = sys.intern("not a mesh executable")
NOT_REPLICATED_EXECUTABLE = sys.intern("not a replicated executable")
MUTABLE_ARRAYS = sys.intern("mutable arrays")
PGLE = sys.intern("profile-guided optimisation")
DEBUG_NANS = sys.intern("debug_nans or debug_infs")
CUSTOM_LAYOUTS = sys.intern("custom input layouts")
CONSTANT_ARGUMENTS = sys.intern("constants passed as arguments")
ORDERED_EFFECTS_ON_DEVICES = sys.intern("ordered effects on several devices")
OUTPUTS_FLATTEN_DIFFERENTLY = sys.intern("outputs flatten differently for dispatch")
ARGUMENTS_FLATTEN_DIFFERENTLY = sys.intern("arguments flatten differently from jax")
RESHARD = sys.intern("argument must be resharded")
HOST_ARGUMENT_PARTITIONED = sys.intern("host argument with a partitioned sharding")
HOST_ARGUMENT_ELSEWHERE = sys.intern("host argument on no device of this process")
DELETED_INPUT = sys.intern("deleted input")

# filter_jit: equinox's call runs these.
EFFECTS = sys.intern("effects")
NON_ARRAY_OUTPUTS = sys.intern("outputs that are not jax arrays")
OUTPUTS_FLATTEN_UNLIKE_EQUINOX = sys.intern("outputs flatten differently from equinox's")

# nnx.jit: flax's call runs these (the graph is not one a Record can serve).
NOT_GRAPH_UPDATES = sys.intern("not graph mode with graph updates")
RETURNS_GRAPH_NODES = sys.intern("the function returns graph nodes")
ARGUMENT_STRUCTURE_CHANGED = sys.intern("an argument's structure changed")
CALL_CHANGED_GRAPH = sys.intern("the call changed the graph")
NOT_SPLIT_AS_NODE = sys.intern("a graph argument flax does not split as a node")
EXECUTABLE_CHANGES_GRAPH = sys.intern("the executable changes the graph")
NODES_IN_CONTAINER = sys.intern("graph nodes inside a container argument")
CALL_CHANGED_SHAPES = sys.intern("the call changed its arguments' shapes")
OUTPUTS_NOT_GRAPH_LEAVES = sys.intern("outputs that are not the graph's leaves and the function's")
VALUE_NOT_SPLIT = sys.intern("a Variable's value is not the split's")
ARRAY_IN_CONTAINER = sys.intern("an array inside a container of the graph")
ATTRIBUTE_NOT_SPLIT = sys.intern("an array attribute that is not the split's")
OTHER_LEAVES = sys.intern("leaves that are neither Variables nor array attributes")
REF_VARIABLE = sys.intern("a hijax or ref Variable")
VALUE_NOT_ARRAY = sys.intern("a Variable whose value is not a jax array")
ARRAY_REF = sys.intern("an array ref in the graph")
STATE_OUTSIDE_NODE = sys.intern("a PytreeState outside its node")
OTHER_CONTAINER = sys.intern("a container of another type in the graph")

# Warm start: why a function's calls are not stored, or what jax compiled that
# warm start did not key (warm_start_stats()["reasons"], the --trace summary).
WARM_UNDESCRIBED = sys.intern("reaches a value the key cannot describe")
WARM_CHANGES_STATE = sys.intern("its trace changes the program's state")
WARM_UNKNOWN_READS = sys.intern("reads globals its code does not name")
WARM_KEY_FAILED = sys.intern("its key failed")
WARM_CHECKED_FILTER = sys.intern("filter_jit in checked mode")
WARM_OTHER_TRACE = sys.intern("compiled from another trace than the one keyed")
WARM_NOT_SERIALIZABLE = sys.intern("an executable that does not serialize")
WARM_OUTPUTS = sys.intern("outputs a load cannot rebuild")
WARM_LIBRARY_CALL = sys.intern("run by the library's own call")
WARM_UNFIT = sys.intern("a stored executable that does not fit its call")
WARM_OUTSIDE = sys.intern("compiled by jax outside the calls warm start keys")
WARM_FROM_JAX_CACHE = sys.intern("served by jax's persistent cache")

ALL = tuple(value for name, value in sorted(globals().items()) if name.isupper() and type(value) is str)


class MustHandOff(Exception):
    """The calls of this executable (or graph) are handed off: the fast path
    will not run them; ``reason`` is one of this module's constants,
    ``detail`` what else is worth showing."""

    def __init__(self, reason, detail=None):
        assert reason in ALL, reason
        super().__init__(reason if detail is None else f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    @classmethod
    def from_error(cls, error):
        """Why the library runs the calls of an entry whose executable could
        not be built, from the error building raised: a MustHandOff itself,
        any other error as EXECUTABLE_NOT_REUSABLE (the library ran the call
        well: its output stands)."""
        if isinstance(error, MustHandOff):
            return error
        return cls(EXECUTABLE_NOT_REUSABLE, repr(error))
