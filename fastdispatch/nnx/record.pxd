# A Record: a graph state an nnx.jit call left, its guards, how calls on it are read and written.
from fastdispatch.core.cache cimport CacheEntry
from fastdispatch.core.execute cimport Outputs
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport CallSignature

# The most records kept per function: train and eval states of one model, say;
# and the most shapes one record runs (a decode loop's prompt lengths).
cdef enum:
    MAX_RECORDS = 4
    MAX_SHAPES = 128

# How one argument of a call reaches the executable.
cpdef enum InputKind:
    INPUT_ROOT = 0       # a graph node or Variable: its leaves, read from the recorded slots
    INPUT_PLAIN = 1      # anything else (no graph node inside): its own leaves


# One check of a Record's guard program, one subclass per kind of object.
cdef class Guard:
    cdef readonly object target    # the object checked (held: Variables have no weak references)
    cdef bint holds(self) except -1

cdef class NodeGuard(Guard):       # a graph node or State
    cdef object target_type
    cdef tuple keys                # its __dict__'s keys, in order
    cdef tuple values              # the values held (ARRAY_SLOT, STATE_SLOT: by type)
    cdef Py_ssize_t size

cdef class DictGuard(Guard):       # a dict container
    cdef tuple keys
    cdef tuple values
    cdef Py_ssize_t size

cdef class ListGuard(Guard):       # a list container
    cdef tuple values              # its items, by identity

cdef class VariableGuard(Guard):   # a Variable
    cdef object target_type
    cdef dict metadata             # a copy of its metadata

cdef class FlagsGuard(Guard):      # a node's PytreeState, whichever object holds it now
    cdef str key                   # the node's attribute holding it
    cdef tuple flags               # its (initializing, is_setup)


cdef class Input:
    cdef readonly int kind         # an InputKind
    cdef readonly object position  # an int (positional) or a str (keyword) of the call
    cdef readonly object root      # ROOT: the graph node the call passes there
    cdef TreeDef treedef           # PLAIN: the argument's structure
    cdef readonly Py_ssize_t slot_start  # ROOT: its slots, [slot_start, slot_stop)
    cdef readonly Py_ssize_t slot_stop


cdef class Record(Outputs):
    cdef readonly Py_ssize_t nargs  # positional arguments of the calls it matches
    cdef readonly tuple kwnames    # their keyword names, in call order
    cdef readonly tuple inputs     # Input per argument the executable takes, in its order
    cdef readonly tuple statics    # (position, value) of each static argument
    cdef readonly tuple guards     # Guard: the graph is the recorded one
    cdef readonly tuple slots      # per root leaf, in order: a Variable, or (owner, attribute)
    # The executable of the graph's leaves as the last call gave them ...
    cdef CacheEntry entry          # the executable of this structure
    cdef readonly CallSignature signature  # the recorded leaves: the identity guard of the inputs
    cdef TreeDef out_treedef       # the structure of what the function returns
    # ... and of the other shapes calls on the same graph gave (a decode loop's
    # growing prompt): CallSignature -> (CacheEntry, out TreeDef), oldest first
    cdef dict shapes
    cdef readonly Py_ssize_t num_slots

    cdef bint matches(self, tuple args, dict kwargs) except -1
    cdef list gather(self, tuple args, dict kwargs)
    cdef int write(self, list outputs) except -1
    cdef bint switch_to(self, CallSignature signature) except -1
    cdef int add_shape(self, CallSignature signature, CacheEntry entry, TreeDef out_treedef) except -1
