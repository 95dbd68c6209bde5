"""nnx/graph.py: what a Record is made of, and the graphs no record may hold
(a function that returns new graph nodes)."""

import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import nnx

from fastdispatch import nnx as fnnx


def test_functions_returning_new_modules_are_not_recorded(sink):
    make = fnnx.jit(lambda rngs: nnx.Linear(2, 2, rngs=rngs))
    rngs = nnx.Rngs(0)
    first, second = make(rngs), make(rngs)
    assert first is not second and not make._records()
    assert "hit" not in sink.outcomes()
