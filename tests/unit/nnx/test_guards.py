"""nnx/guards.py: the guards of a graph are those of the nodes flax's split visits."""

import optax
import pytest
from frontends import FLAX_REASON

pytest.importorskip("flax", reason=FLAX_REASON)
from flax import nnx
from nnx_models import Block

from fastdispatch.nnx.guards import guards as guard_program


def test_guard_kinds_are_the_ones_flax_split_visits():
    model = Block(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    guards = guard_program([model, optimizer])
    kinds = {type(guard).__name__ for guard in guards}
    assert kinds == {"NodeGuard", "DictGuard", "VariableGuard", "FlagsGuard"}
    assert all(guard.holds_now() for guard in guards)
    model.eval()
    assert not all(guard.holds_now() for guard in guards)
