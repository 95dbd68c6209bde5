"""A call no record serves, made as flax makes it, one step at a time across
the engine's steps (core/engine.pyx): the call's ``found.scope``.

  open       flax's update context entered and the arguments split, as
             flax's call splits them; the engine keys the split's leaves
  run        a miss: flax's jax.jit on the split (it traces and compiles a new
             structure), then flax's merge; or, when a record proves the
             graph is its own and the executable keeps it, a write-back into
             that record's slots, which leaves the graph's objects (and every
             record of them) as they are
  built      the Graph the run left, for the entry and its Record (or
             MustHandOff: the entry's calls are flax's), written to the warm
             store when a load could serve it
  warm_key, loaded
             with warm start: the split's key, before anything is traced, and
             the Graph of an executable loaded under it
  kept_graph an entry found by its signature: the Graph of the graph as
             the split found it, for the executable that keeps it
  close      the update context left, when the engine's steps end
"""

from __future__ import annotations

import jax

from fastdispatch._reasons import MustHandOff
from fastdispatch.nnx import _flax
from fastdispatch.nnx import graph as _graph
from fastdispatch.nnx import warm as _warm
from fastdispatch.nnx.paths import Paths


class FlaxCall:
    """One call of ``function`` (an NnxJitFunction) split as flax splits it;
    ``holding``: a Record whose graph the call has, in another shape."""

    def __init__(self, function, args, kwargs, holding):
        self.function, self.args, self.kwargs, self.holding = function, args, kwargs, holding
        self.graph = None  # the Graph a record is made of, once known
        self._kept = False  # the run wrote into holding's slots
        flax_function = function.flax_function
        self._context = _flax.update_context(flax_function)
        self._context.__enter__()
        try:
            self.before = _flax.split(flax_function, args, kwargs)
            statics = _graph.static_positions(function, args)
            self.leaves, self.treedef = _graph.dynamic_leaves(self.before, statics)
            self.static_args = _graph.static_key(_graph.static_values(statics, args, kwargs))
            self.paths = Paths.of(function, args, kwargs, self.treedef, statics)
        except BaseException:
            self.close()
            raise

    def close(self):
        context, self._context = self._context, None
        if context is not None:
            context.__exit__(None, None, None)

    def run(self):
        """The call's output, as flax's call returns it."""
        flax_function = self.function.flax_function
        outputs = flax_function.jitted_fn(*self.before[0], **self.before[1])
        self._kept = self.holding is not None and _graph.keeps_graph(outputs, self.before, self.holding)
        if self._kept:
            self.holding.write_slots(jax.tree_util.tree_leaves(outputs))
            return outputs[2]
        return _flax.merge(flax_function, outputs)

    def built(self, warm_key, store):
        """The Graph the run left (MustHandOff where no record can serve it);
        written under ``warm_key`` to ``store`` (a WarmStart) when given."""
        holding = self.holding if self._kept else None
        try:
            graph = _graph.build(self.function, self.args, self.kwargs, self.before, holding, self.paths)
        except MustHandOff as hand_off:
            if warm_key is not None and store is not None:
                _warm.save_unrecorded(self.function, warm_key, self.before, hand_off.reason, store)
            raise
        if warm_key is not None and store is not None:
            own = _graph.own_output_structure(graph.compiled)
            _warm.save(self.function, warm_key, graph.compiled, own, self.before, store)
        self.graph = graph
        return graph

    def warm_key(self, store):
        """The split's key in the warm-start store, or None."""
        return _warm.key(self.function, self.args, self.before, store)

    def loaded(self, loaded, store):
        """The Graph for the executable ``loaded`` from ``store`` (raises where
        it does not fit the call)."""
        self.graph = _warm.loaded_graph(
            self.function, self.args, self.kwargs, self.before, self.paths, loaded, store, self.holding
        )
        return self.graph

    def kept_graph(self, compiled):
        """The Graph for ``compiled``, the executable of an entry found by the
        split's signature; None where no record can run it."""
        try:
            self.graph = _graph.kept(
                self.function,
                self.args,
                self.kwargs,
                self.before,
                self.holding,
                self.paths,
                compiled,
                _graph.own_output_structure(compiled),
            )
        except (MustHandOff, LookupError, TypeError, ValueError):
            return None
        return self.graph
