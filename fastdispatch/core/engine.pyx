# cython: boundscheck=False, wraparound=False
"""The engine: the steps between a front end and the cache, written once.

Every front end (``jit``, ``filter_jit``, ``nnx.jit``) is an Engine.  One call
is ``Engine.call``, which reads as jaxlib's pjit.cc reads its own Call:

  state      jax's: a transformation tracing right now, or jax_debug_nans
             on, hands the call off
  memo       a call the front end finds alike the last one the library
             took goes to it unread (but every 64th)
  parse      the front end's: its guard, the call's leaves and static parts
             (flatten, bind, split the graph); or the entry its own guard
             proved, whose trace context the engine checks against the
             call's (another: ``parse_unguessed``, the front end's parse
             again with no guess)
  find       the guard against the previous call's own signature, else a
             CallSignature (with jax's trace context, read once a call:
             ``trace_context``) looked up in the function's cache; a miss
             compiles (``compile``: the front end's ``cache_miss``, the
             library's own call and its executable taken) or, with warm start on,
             loads (``warm``: the front end's ``warm_key`` and
             ``build_loaded``); a call another thread compiles waits
  execute    the entry's Executable on the leaves, the outputs rebuilt by
             the entry's Outputs
  hand-off   whatever the fast path does not run, the library's own call
             runs, with the reason recorded (reasons: fastdispatch._reasons);
             once, at the bottom of ``call``, so that an error it raises
             crosses few of our frames
  returned   the front end's post hook, while one is set (jit's)

Each step returns why the library should run the call, or None, and fills
the call's ``Found`` (core/engine.pxd).  A front end is an Engine subclass
with the hooks below, each given the call and its Found; what its parse
opens for the later steps (nnx.jit: flax's split, in flax's update context)
it leaves in ``found.scope``, which the engine closes when the steps end.
The steps mark their phases' boundaries for whoever watches the call
(``reached``, ``ended``: --trace, jax.profiler; core/watch.pyx).
"""
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from libc.string cimport memset

from fastdispatch.core.cache cimport CacheEntry, CompiledFunctionCache
from fastdispatch.core.clock cimport now_ns
from fastdispatch.core.execute cimport HandOff, Outputs
from fastdispatch.core.pytree.treedef cimport TreeDef
from fastdispatch.core.signature cimport (
    CallSignature, LeafKind, LEAF_HOST, LEAF_OTHER, LEAF_TRACER, UNHASHABLE_STATIC, make_signature,
    same_context)
from fastdispatch.core.watch cimport (
    AT_FLATTENED, AT_FOUND, AT_KEYED, WATCH_CLOCK, CallTimes, Watchers, end_watch, ended, reached,
    sample_device, start_watch, top_arrays, watchers)

from contextlib import nullcontext

from fastdispatch import _jax
from fastdispatch import _reasons
from fastdispatch.core import packing

# jax's thread-local trace state: the holder, the attribute that holds it, and
# its value with no transformation tracing (which attribute: _jax, by jax version).
cdef object _trace_state = _jax.TRACE_STATE
cdef str _trace_state_attr = _jax.TRACE_STATE_ATTR
cdef object _clean_trace_state = _jax.CLEAN_TRACE_STATE
cdef object _settings_hand_off = _jax.settings_hand_off
cdef object _jax_trace_context = _jax.trace_context
# The hand-off of a call make_signature does not key, by what it did not key.
cdef dict _UNKEYED = {
    LEAF_TRACER: _reasons.TRACER,
    LEAF_OTHER: _reasons.UNSUPPORTED_LEAF,
    UNHASHABLE_STATIC: _reasons.STATIC_ARGUMENT_ERROR,
}
# Who watches calls (core/watch.pyx): --trace's sink, jax.profiler's capture.
cdef Watchers _watchers = watchers()

# The warm-start store while warm start is on, else None: read on a miss
# only, so a hit never looks at it (fastdispatch.warm).
cdef object _warm_store = None


def set_warm_store(store):
    """Look for, and keep, executables in ``store`` (a fastdispatch.warm.WarmStart);
    None stops it."""
    global _warm_store
    _warm_store = store


cdef object warm_store():
    return _warm_store


def library_function(function):
    """The library's own function behind ``function`` when it is one of ours
    (an Engine), else ``function``.  Under ``python -m fastdispatch``, jax.jit
    is fastdispatch.jit, and a library's own jax.jit (equinox's, flax's) is a
    CompiledFunction: front ends take its jax.jit, so that a call is recorded
    once, as the front end's."""
    if isinstance(function, Engine):
        return function.library_function()
    return function


def current_trace_context():
    """jax's trace context now, for a front end keying outside a call's
    steps (nnx.jit's graphs, made while flax's call runs); in a call, a step
    asks ``Engine.trace_context``."""
    return _jax_trace_context()


cdef inline bint _trace_state_clean() noexcept:
    # Inline: Engine.call asks it first on every call.
    return getattr(_trace_state, _trace_state_attr) is _clean_trace_state


cdef bint trace_state_clean() noexcept:
    return _trace_state_clean()


cdef inline tuple _trace_context(Found* found):
    # jax's trace context now, read once a call (kept in ``found``).
    if found.context == NULL:
        keep(&found.context, _jax_trace_context())
    return <tuple>found.context


# Whether a post hook is set (jit's set_post_hook): only then does a call end
# in its front end's ``returned``.
cdef bint _post_hooks = False


def post_hooks_set(bint on):
    """A post hook was set (``on``) or the last one removed."""
    global _post_hooks
    _post_hooks = on


# jax_debug_nans / jax_debug_infs: whether either may be on (_jax's watch sets
# it), so that a call asks jax only then.
cdef bint _special_checks_maybe_on = False
cdef object _needs_special_checks = _jax.needs_special_checks
cdef str _TRACER = _reasons.TRACER
cdef frozenset NOT_RUN = _reasons.NOT_RUN
cdef str _DEBUG_NANS = _reasons.DEBUG_NANS


def _special_checks_changed(maybe_on):
    global _special_checks_maybe_on
    _special_checks_maybe_on = maybe_on


_jax.watch_special_checks(_special_checks_changed)


cdef object _NOT_RECORDING = nullcontext()


cdef class PreviousCall:
    """The guard's guess for the next call: the previous call's entry, its own
    signature (the very aval and sharding objects it held), and the front
    end's own guard, made from that signature once a call passes it.  One
    object, replaced whole, so that a thread never pairs one call's entry
    with another's signature."""


cdef inline void _release(Found* found) noexcept:
    Py_XDECREF(found.treedef)
    Py_XDECREF(found.leaves)
    Py_XDECREF(found.static_args)
    Py_XDECREF(found.context)
    Py_XDECREF(found.arg_names)
    Py_XDECREF(found.front)
    Py_XDECREF(found.scope)
    Py_XDECREF(found.entry)
    Py_XDECREF(found.finish)
    Py_XDECREF(found.signature)
    Py_XDECREF(found.out)
    Py_XDECREF(found.sample)


cdef inline void _clear(PyObject** field) noexcept:
    Py_XDECREF(field[0])
    field[0] = NULL


cdef int _close_scope(Found* found) except -1:
    """Close what the front end's parse left open for the steps (found.scope)."""
    cdef PyObject* scope = found.scope
    found.scope = NULL
    try:
        (<object>scope).close()
    finally:
        Py_XDECREF(scope)
    return 0


cdef CallSignature _reported_signature(Found* found):
    """The signature a hand-off is reported with: the one the steps made or
    the front end named, else its entry's, else None."""
    if found.signature != NULL:
        return <CallSignature>found.signature
    if found.entry != NULL:
        return (<CacheEntry>found.entry).signature
    return None


cdef extern from "Python.h":
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct _VectorcallType "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags


cdef object _vectorcall(Engine self, PyObject** argv, size_t nargsf, PyObject* kwnames):
    # The slot of every type given install_vectorcall.
    cdef Call call
    call.function = <PyObject*>self
    call.argv = argv
    call.nargsf = nargsf
    call.kwnames = kwnames
    if self.executables is None:
        raise TypeError(f"{type(self).__name__} was created without __init__")
    return self.call(&call)


cdef void install_vectorcall(type kind):
    # Cython gives cdef classes tp_call only; point the type's vectorcall slot
    # at the instance field that Engine.__cinit__ fills.  Only a final type:
    # a subclass would inherit a slot that skips its own __call__.
    cdef Engine probe = kind.__new__(kind)
    cdef _VectorcallType* type_object = <_VectorcallType*>kind
    type_object.tp_vectorcall_offset = <char*>&probe.vectorcall_slot - <char*><PyObject*>probe
    type_object.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL


cdef inline void _forget_hand_off(Engine engine) noexcept:
    # The hand-off memo emptied (the fields Engine.remember_hand_off sets).
    engine.handed_off_like = None
    engine.memo_reason = None
    engine.memo_repeats = 0
    engine.memo_signature = None
    engine.memo_entry = None


cdef inline int _remember(Engine engine, Call* call, Found* found, CacheEntry entry,
                          CallSignature signature) except -1:
    # ``entry`` runs the call (found, loaded or compiled): the hand-off memo is
    # forgotten, and the front end's ``remember`` makes the call the guess
    # for the next.  Inline: every miss passes here.
    _forget_hand_off(engine)
    return engine.remember(call, found, entry, signature)


cdef class Engine:
    """One function's fast path: the steps of a call, with a front end's hooks."""

    def __cinit__(self):
        self.vectorcall_slot = <vectorcallfunc>_vectorcall

    cdef object call(self, Call* call):
        """One call: jax's state, parse, find (a miss compiles), execute; else
        the one hand-off; then, while one is set, the post hook."""
        cdef CallTimes times
        cdef Found found
        cdef CompiledFunctionCache lru
        cdef CacheEntry entry, pack_entry = None
        memset(&found, 0, sizeof(Found))
        span = start_watch(&times, _watchers, self.span_name)
        try:
            try:
                # jax's state first: a transformation tracing right now stages
                # the call, and with jax_debug_nans on jax checks the outputs
                # (jax.jit does, in its post hook).
                if not _trace_state_clean():
                    reason = _TRACER
                elif _special_checks_maybe_on and _needs_special_checks():
                    reason = _DEBUG_NANS
                else:
                    reason = None
                    if self.handed_off_like is not None and self.alike(call, self.handed_off_like):
                        # The library took the last call alike this one: this
                        # one goes to it unread, but every 64th (handed_off_again).
                        reason = self.handed_off_again(&found)
                    if reason is None:
                        reason = self.parse(call, &found, &times)
                        if reason is None and found.entry != NULL and not same_context(
                                (<CacheEntry>found.entry).signature.context, _trace_context(&found)):
                            reason = self.parse_unguessed(call, &found, &times)
                if reason is None and found.entry == NULL and found.out == NULL:
                    reason = self.find(call, &found, &times)
                if found.entry != NULL and not found.loaded:
                    # A hit, run or handed off: the shared LRU counts it, and
                    # the entry is its latest use (one loaded now was a miss).
                    lru = self.executables.shared
                    lru.clock += 1
                    lru.hits += 1
                    entry = <CacheEntry>found.entry
                    entry.last_used = lru.clock
                    if entry.executable is not None and entry.executable.pack_countdown >= 0:
                        if entry.executable.pack_countdown > 0:
                            entry.executable.pack_countdown -= 1
                        if entry.executable.pack_countdown == 0:
                            entry.executable.pack_countdown = -1
                            pack_entry = entry   # its packing starts once this call is done
                if reason is None and found.out == NULL:
                    reason = self.execute(call, &found, &times)
            finally:
                if found.scope != NULL:
                    _close_scope(&found)
            if reason is None:
                out = <object>found.out
            elif not times.watch:
                out = self.library_call(call, &found)
            else:
                # The library's own spans nest inside this one.
                reached(&times, AT_FOUND, self.library, reason)
                try:
                    out = self.library_call(call, &found)
                finally:
                    # Recorded also when the library raises: the report counts the hand-off.
                    ended(call.function, &times, False, 0, reason, _reported_signature(&found))
                if times.watch & WATCH_CLOCK and reason not in NOT_RUN:
                    # Its executable ran: its device time, as a hit's, from
                    # when the library's call returned.
                    arrays = top_arrays(out)
                    if arrays is not None:
                        times.launched = times.end
                        keep(&found.sample, arrays)
        finally:
            if span is not None:
                end_watch(&times, span)
            if found.sample != NULL:
                # After the call's spans: the wait for its outputs is not the call's.
                sample_device(call.function, &times, <object>found.sample, &self.watched_launches)
            _release(&found)
        if pack_entry is not None:
            self.start_packing(call, pack_entry)
        if _post_hooks:
            return self.returned(call, out)
        return out

    cdef tuple trace_context(self, Found* found):
        """jax's trace context now, read once a call (kept in ``found``)."""
        return _trace_context(found)

    cdef bint context_changed(self, Found* found, PreviousCall previous) except -1:
        """Whether jax's trace context differs from the previous call's."""
        return not same_context(previous.signature.context, _trace_context(found))

    cdef str parse_unguessed(self, Call* call, Found* found, CallTimes* times):
        """The front end's guard found an entry made under another trace
        context than this call's (a setting changed since): a call jax.jit
        itself runs goes to it unread; another is parsed again, unguessed."""
        _clear(&found.entry)
        _clear(&found.leaves)
        _clear(&found.finish)
        reason = _settings_hand_off()
        if reason is not None:
            return reason
        found.unguessed = True
        return self.parse(call, found, times)

    cdef void start_packing(self, Call* call, CacheEntry entry):
        """The entry's calls bring host leaves, one transfer each: have its
        packed variant compiled in the background from the call's trace (the
        front end's, jax's cached one), to take them in one."""
        try:
            traced = self.traced(call)
            if traced is not None:
                packing.start(traced, entry.executable.pack_plan, entry.executable.install_packed)
        except Exception:
            pass   # the entry stays as it was

    cdef str find(self, Call* call, Found* found, CallTimes* times):
        """The entry of the call's leaves and static parts: by the guard, or
        the cache; a miss compiles (or loads), a call another thread compiles
        waits for it."""
        reached(times, AT_FLATTENED, "signature")
        cdef TreeDef treedef = <TreeDef>found.treedef
        cdef list leaves = <list>found.leaves
        cdef tuple static_args = <tuple>found.static_args
        cdef tuple context = _trace_context(found)
        # The guard compares with the previous call's own objects, not the
        # entry's, and takes an equal leaf's objects as its own: a training
        # loop feeds back outputs whose avals differ (by identity) from those
        # of the arrays it was first called with, and a fresh batch each step.
        cdef PreviousCall previous = self.previous
        if (previous is not None and not previous.entry.evicted
                and previous.signature.adopts_call(treedef, leaves, static_args, context)):
            self.guard_passed(call, previous, leaves)
            keep(&found.entry, previous.entry)
            return None

        cdef LeafKind unkeyed = LEAF_HOST
        cdef CallSignature signature = make_signature(
            treedef, leaves, static_args, context, <tuple>found.arg_names, &unkeyed,
            None if found.front == NULL else <object>found.front)
        if signature is None:
            # An unhashable static argument, a tracer, a leaf jax refuses: the
            # library runs the call (and raises its error).
            self.handed_off(call, None, _UNKEYED[unkeyed])
            return _UNKEYED[unkeyed]
        keep(&found.signature, signature)
        reached(times, AT_KEYED, "lookup")
        cdef CacheEntry entry
        try:
            entry = self.executables.find(signature)
        except Exception:
            # A static argument's __eq__ raised: the library reports it its way.
            self.handed_off(call, None, _reasons.STATIC_ARGUMENT_ERROR)
            return _reasons.STATIC_ARGUMENT_ERROR
        if entry is None:
            reason = _settings_hand_off()
            if reason is not None:
                return reason
            entry = self.executables.insert(signature)
            if _warm_store is not None:
                return self.warm(call, found, entry, times, _warm_store)
            return self.compile(call, found, entry, times)
        entry.wait(<object>call.function)
        _remember(self, call, found, entry, signature)
        keep(&found.entry, entry)
        return None

    cdef str compile(self, Call* call, Found* found, CacheEntry entry, CallTimes* times):
        """A miss, on the one thread that compiles this signature: the front
        end's ``cache_miss`` has the library run the call (tracing, compiling,
        converting, donating, warning and failing as it does) and returns its
        output with the fast path's data, which completes the entry: its
        (Executable, Outputs), or the MustHandOff that says why the library
        runs its calls; the call is then the guess for the next
        (``_remember``).  A compile warm start may write is written with
        the warnings the library's call issued (WarmStart.recording_warnings)."""
        reached(times, AT_FOUND, "compile")   # the library's own spans nest inside
        cdef long long began = now_ns()
        store = None if entry.warm_key is None else warm_store()
        try:
            out, fast = self.cache_miss(call, found, entry, times,
                                        _NOT_RECORDING if store is None else store.recording_warnings())
        except BaseException as error:
            self.executables.fail(entry, error)
            ended(call.function, times, False, now_ns() - began, _reasons.COMPILE_ERROR, entry.signature)
            raise
        cdef long long compiled = now_ns() - began
        if type(fast) is tuple:
            self.executables.complete(entry, fast[0], fast[1], None, compiled / 1e9)
        else:
            entry.hand_off_detail = fast.detail
            self.executables.complete(entry, None, None, fast.reason, compiled / 1e9)
        _remember(self, call, found, entry, entry.signature)
        ended(call.function, times, False, compiled, entry.hand_off_reason, entry.signature)
        keep(&found.out, out)
        return None

    cdef str warm(self, Call* call, Found* found, CacheEntry entry, CallTimes* times,
                  object store):
        """A miss with warm start on, before anything is traced: the executable
        stored under the call's key becomes the entry, for ``execute``;
        without one (or a key), ``compile``, whose ``cache_miss`` writes it
        under the key."""
        reached(times, AT_FOUND, "warm start")
        cdef long long began = now_ns()
        try:
            key = self.warm_key(call, found, entry.signature, store)
            loaded = None if key is None else store.load(key)
        except BaseException as error:
            # Never expected (the store answers None on any failure); an
            # interrupt: no waiter is left on an entry that never completes.
            self.executables.fail(entry, error)
            raise
        if key is None:
            return self.compile(call, found, entry, times)
        if loaded is None:
            entry.warm_key = key
            return self.compile(call, found, entry, times)
        try:
            executable, finish = self.build_loaded(call, found, entry, loaded)
        except Exception as error:
            # Not for this call after all (MustHandOff: a reshard, host data): the
            # library compiles it, and the stored file stays as it is.
            store.refuse(<object>call.function, _reasons.WARM_UNFIT,
                         f"has a stored executable that does not fit its call ({error})")
            return self.compile(call, found, entry, times)
        self.executables.complete(entry, executable, finish, None, (now_ns() - began) / 1e9)
        _remember(self, call, found, entry, entry.signature)
        keep(&found.entry, entry)
        found.loaded = True
        return None

    cdef str execute(self, Call* call, Found* found, CallTimes* times):
        """A hit: the entry's executable runs on the leaves, its Outputs (or
        the front end's ``found.finish``) rebuild the result; or the reason the
        library runs it (an entry it runs for numpy arguments or effects, a
        HandOff from the executable)."""
        cdef CacheEntry entry = <CacheEntry>found.entry
        if not entry.finished:   # a guess made by the thread compiling it, before it completed
            entry.wait(<object>call.function)
        if entry.executable is None:
            # An entry the library runs (numpy arguments, effects): still a
            # hit, found by the guard, so the hand-off costs as little as it can.
            self.handed_off(call, entry, entry.hand_off_reason)
            return entry.hand_off_reason
        reached(times, AT_FOUND, "launch")
        outputs = entry.executable.run(
            <object>found.leaves, &times.launched if times.watch & WATCH_CLOCK else NULL)
        if type(outputs) is HandOff:
            self.handed_off(call, entry, (<HandOff>outputs).reason)
            return (<HandOff>outputs).reason
        if self.handed_off_like is not None:
            # A call alike the one handed off ran here (one every 64th that
            # went the whole way: numpy data that now repeats): so may the next.
            _forget_hand_off(self)
        finish = entry.finish if found.finish == NULL else <object>found.finish
        keep(&found.out, (<Outputs>finish).rebuild(outputs))
        ended(call.function, times, True, 0, None, entry.signature)
        if times.watch & WATCH_CLOCK:
            keep(&found.sample, outputs)   # sampled once the call's spans end (Engine.call)
        return None

    cdef void handed_off(self, Call* call, CacheEntry entry, str reason):
        """The library takes a call on ``entry``, for ``reason`` (``entry``
        None: refused before one was found): into the memo, as the front end
        describes the call's arguments, where it does."""
        like = self.hand_off_like(call, entry, reason)
        if like is not None:
            self.remember_hand_off(like, reason, None if entry is None else entry.signature)

    cdef void forget_calls(self):
        self.executables.clear()
        self.previous = None
        _forget_hand_off(self)

    cdef void remember_hand_off(self, object like, str reason, CallSignature signature):
        """The library took a call for what its arguments are (``like``, the
        front end's description of them), for ``reason``, with its leaves'
        ``signature`` when it was made (None: handed off before)."""
        self.handed_off_like = like
        self.memo_reason = reason
        self.memo_repeats = 0
        self.memo_signature = signature
        self.memo_entry = None if signature is None else self.executables.find(signature)

    cdef str handed_off_again(self, Found* found):
        """A call the front end finds alike the one handed off: the reason to
        hand it off before reading it, reported with that call's signature (a
        trace counts its numpy data: it is converted on every call), or None
        for every 64th, which goes the whole way."""
        self.memo_repeats += 1
        if not self.memo_repeats & 63:
            return None
        cdef CacheEntry entry = self.memo_entry
        if entry is not None and entry.executable is not None:
            if entry.executable.packed is not None:
                return None   # its packed variant takes such calls now: the whole way
            if entry.executable.pack_countdown > 0:
                # The entry's calls count toward its packed variant here too;
                # the call that ends the count goes the whole way, which starts it.
                entry.executable.pack_countdown -= 1
                if entry.executable.pack_countdown == 0:
                    return None
        if self.memo_signature is not None:
            keep(&found.signature, self.memo_signature)
        return self.memo_reason

    # -- the front end's hooks ---------------------------------------------

    cdef str parse(self, Call* call, Found* found, CallTimes* times):
        """The call's traced arguments (``found_arguments``), or the entry the
        front end's own guard proved (``found_entry``), or the output of a call
        its library just ran (``found.out``); or why the library runs it."""
        raise NotImplementedError

    cdef object library_call(self, Call* call, Found* found):
        """The library's own call, for a hand-off (the scope closed)."""
        raise NotImplementedError

    cdef tuple cache_miss(self, Call* call, Found* found, CacheEntry entry, CallTimes* times,
                          object recording):
        """A miss: the library's call (inside ``recording``, a context), then
        ``reached(times, AT_LAUNCHED, "build entry")``; returns its output
        and the fast path's data, ``(Executable, Outputs)`` for the entry, or
        a MustHandOff (``MustHandOff.from_error``).  The engine completes the
        entry, then makes the call the guess for the next (``remember``)."""
        raise NotImplementedError

    cdef object warm_key(self, Call* call, Found* found, CallSignature signature, object store):
        """The store key of this call (``store.key(...)``), or None: not stored."""
        return None

    cdef tuple build_loaded(self, Call* call, Found* found, CacheEntry entry, object loaded):
        """(Executable, Outputs) for the entry from the executable ``loaded``
        from the store (what ``store.load`` returned) to run on ``found.leaves``;
        raises MustHandOff for one the library must run."""
        raise NotImplementedError

    cdef int remember(self, Call* call, Found* found, CacheEntry entry,
                      CallSignature signature) except -1:
        """``entry`` runs this call (found, loaded, or compiled, once
        ``cache_miss`` returned): make the call the guard's guess for the next
        one."""
        cdef PreviousCall previous = PreviousCall.__new__(PreviousCall)
        previous.entry = entry
        previous.signature = signature
        self.previous = previous
        return 0

    cdef void guard_passed(self, Call* call, PreviousCall previous, list leaves):
        """The call matched the previous one's signature, with these leaves;
        ``previous.entry`` runs it next.  A front end with a guard of its own
        makes it here (``previous.guard``), from a call proved alike."""

    cdef object hand_off_like(self, Call* call, CacheEntry entry, str reason):
        """The library takes a call on ``entry``, for ``reason`` (``entry``
        None: handed off before one was found: an unhashable static argument,
        a leaf the fast path does not key; never for jax's state): what the
        call's arguments are, for the hand-off memo to compare later calls
        with (``alike``), or None: the next call goes the whole way."""
        return None

    cdef bint alike(self, Call* call, object like):
        """Whether the call's arguments are what ``hand_off_like`` described."""
        return False

    cdef object returned(self, Call* call, object out):
        """The output, after the call's post hook (jit's); called only while
        a post hook is set."""
        return out

    cdef object traced(self, Call* call):
        """The library's trace of the call (a jax.stages.Traced), for an
        entry's packed variant; None: this front end's entries never pack."""
        return None

    # -- what a front end hands the tools ------------------------------------

    def library_function(self):
        """The library's own function that runs this one's hand-offs."""
        raise NotImplementedError

    def warm_identity(self):
        """``(function, options)`` by which warm start's identity of a value
        (fastdispatch.warm.identity) describes this one, or None: not so
        described."""
        return None
