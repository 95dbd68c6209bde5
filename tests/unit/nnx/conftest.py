"""Fixtures of the nnx unit tests."""

import pytest
from frontends import FLAX_REASON


@pytest.fixture
def block():
    """The Block most tests call: a Linear, a BatchNorm, an array attribute."""
    pytest.importorskip("flax", reason=FLAX_REASON)
    from flax import nnx
    from nnx_models import Block

    return Block(nnx.Rngs(0))
