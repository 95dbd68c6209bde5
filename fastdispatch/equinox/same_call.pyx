# cython: boundscheck=False, wraparound=False
"""``SameCall``: filter_jit's identity guard.  A call on the very objects of
an earlier one (an unchanged model) is proved so by identity, and skips
binding, flattening, partitioning and keying: the earlier call's executable
inputs serve it, with this call's arrays in their places.
"""
import sys
import weakref

from cpython.dict cimport PyDict_GetItem
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport Py_EQ, PyObject, PyObject_RichCompareBool
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from fastdispatch.core.engine cimport call_args, call_kwargs
from fastdispatch.core.signature cimport LeafKind, LEAF_ARRAY, LEAF_KEY, classify_leaf
from fastdispatch.equinox.bind cimport bound_argument
from fastdispatch.equinox.unchanged cimport record_unchanged

cdef extern from "Python.h":
    dict PyObject_GenericGetDict(object o, void* context)
    PyObject* PyWeakref_GET_OBJECT(object ref)

cdef str _DYNAMIC_FUN = sys.intern("_dynamic_fun")
cdef str _STATIC_FUN = sys.intern("_static_fun")
cdef str _DONATE_FIRST = sys.intern("donate_first")
cdef str _DONATE_REST = sys.intern("donate_rest")

# SameCall.input_at, for a bound argument that is not an array.
cdef enum:
    SAME_OBJECT = -1    # the very object (held weakly), its contents unchanged
    SAME_VALUE = -2     # None, or an equal int, float, bool or str of the same type


cdef class SameCall:
    """Proof that a call passes an earlier call's very objects, so that the
    earlier call's executable inputs serve it without binding, flattening,
    partitioning or keying anything.  It holds when:
      * the call is made through the same wrapper (its function's parts the
        same objects), bound by the same plan (the same argument layout);
      * each bound argument that was an array is an array with the same key
        (aval, sharding, committed: CallSignature.adopt_leaf), and it takes
        that array's place among the inputs;
      * each that was None, an int, float, bool or str is an equal value of
        the same type (equinox's static leaves, compared as it does);
      * each other one is the very object, and every list, dict and Module
        below it holds the same objects (fastdispatch.equinox.unchanged);
      * the entry is still in the cache.
    Then flatten would meet the same objects, partition them alike and key
    them to this entry (jax's trace context alike: the engine checks it).  A
    donating wrapper is never recorded (a donated array must raise as
    deleted, on equinox's path).

    The objects are held weakly.  What lies below them is held strongly, by a
    ``_Strong`` that the weak references' callback empties when one of them
    (or the wrapper) dies: the record never keeps a model alive past its
    owner, as jax.jit keeps nothing, and no reference cycle holds it."""

    def __dealloc__(self):
        PyMem_Free(self.input_at)

    cdef list inputs_for(self, object wrapper, dict fields, BindPlan plan, tuple args,
                         dict kwargs):
        """The executable's inputs for this call, when the proof holds; else None."""
        cdef Py_ssize_t i, at
        cdef object value, expected
        cdef _Strong strong = self.strong
        if strong.contents is None or plan is not self.plan:
            return None
        if PyWeakref_GET_OBJECT(self.wrapper) != <PyObject*>wrapper:
            return None
        if (PyDict_GetItem(fields, _DYNAMIC_FUN) != PyTuple_GET_ITEM(strong.fun_parts, 0)
                or PyDict_GetItem(fields, _STATIC_FUN) != PyTuple_GET_ITEM(strong.fun_parts, 1)):
            return None
        if self.entry.evicted:
            return None
        cdef list inputs = list(strong.inputs)   # may collect garbage, and empty `strong`
        cdef tuple sources = self.sources, held = self.held
        for i in range(PyTuple_GET_SIZE(sources)):
            value = bound_argument(<object>PyTuple_GET_ITEM(sources, i), args, kwargs)
            at = self.input_at[i]
            if at == SAME_OBJECT:
                if PyWeakref_GET_OBJECT(<object>PyTuple_GET_ITEM(held, i)) != <PyObject*>value:
                    return None
            elif at == SAME_VALUE:
                expected = <object>PyTuple_GET_ITEM(held, i)
                if type(value) is not type(expected) or not PyObject_RichCompareBool(
                        value, expected, Py_EQ):
                    return None
            else:
                if not self.signature.adopt_leaf(value, at):
                    return None
                inputs[at] = value
        cdef Unchanged contents = strong.contents
        if contents is None or not contents.holds():
            return None
        return inputs


cdef class _Strong:
    """What a SameCall holds strongly (the contents below its objects, the
    executable inputs among them, the function's parts).  It is the callback
    of the SameCall's weak references, so it is emptied when one of their
    objects dies; it holds nothing that leads back to them."""

    cdef void drop(self):
        self.contents = None
        self.inputs = None
        self.fun_parts = None

    def __call__(self, ref):
        self.drop()


cdef SameCall record_same(Call* call, PreviousCall previous, list leaves, BindPlan plan):
    """A SameCall for this call (bound by ``plan``), which ``previous``'s
    entry serves with these inputs; None when identity cannot prove its
    successors alike."""
    cdef tuple args = call_args(call)
    cdef dict kwargs = call_kwargs(call)
    cdef object wrapper = <object>call.function
    cdef dict fields = PyObject_GenericGetDict(wrapper, NULL)
    cdef CacheEntry entry = previous.entry
    if entry.executable is None or (<object>PyDict_GetItem(fields, _DONATE_FIRST) is True
                                    or <object>PyDict_GetItem(fields, _DONATE_REST) is True):
        return None
    if plan.refused:
        return None
    cdef SameCall same = SameCall.__new__(SameCall)
    cdef _Strong strong = _Strong.__new__(_Strong)
    same.sources = plan.sources
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(same.sources)
    same.input_at = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    if same.input_at == NULL:
        raise MemoryError()
    cdef list inputs = list(leaves)
    cdef LeafKind kind
    held, roots = [], []
    for i in range(n):
        value = bound_argument(<object>PyTuple_GET_ITEM(same.sources, i), args, kwargs)
        kind = classify_leaf(value)
        if kind == LEAF_ARRAY or kind == LEAF_KEY:
            # Its one place among the inputs (found by identity: the same
            # array twice is not recorded). Not held: each call brings its own.
            places = [k for k in range(len(leaves)) if leaves[k] is value]
            if len(places) != 1:
                return None
            same.input_at[i] = places[0]
            inputs[places[0]] = None
            held.append(None)
        elif value is None or type(value) in (int, float, bool, str):
            same.input_at[i] = SAME_VALUE
            held.append(value)
        else:
            try:
                held.append(weakref.ref(value, strong))
            except TypeError:
                return None   # no weak references (a tuple, a list): not recorded
            same.input_at[i] = SAME_OBJECT
            roots.append(value)
    strong.contents = record_unchanged(tuple(roots))
    if strong.contents is None:
        return None
    try:
        same.wrapper = weakref.ref(wrapper, strong)
    except TypeError:
        return None
    strong.inputs = inputs
    strong.fun_parts = (<object>PyDict_GetItem(fields, _DYNAMIC_FUN),
                        <object>PyDict_GetItem(fields, _STATIC_FUN))
    same.strong = strong
    same.plan = plan
    same.held = tuple(held)
    same.entry = entry
    same.signature = previous.signature
    return same
