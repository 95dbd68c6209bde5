"""equinox/bind.pyx: a call is bound to the function's signature as equinox
binds it (``signature.bind``, no defaults filled in), once per call layout."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch


def scaled(x, scale=2.0, *rest, shift, **extra):
    return x * scale + shift + sum(rest) + sum(extra.values())


CALLS = [
    ((jnp.ones(3),), {"shift": 1.0}),
    ((jnp.ones(3), 3.0), {"shift": 1.0}),
    ((jnp.ones(3),), {"scale": 3.0, "shift": 1.0}),  # binds as the call above
    ((jnp.ones(3), 3.0, 1.0, 2.0), {"shift": 0.5}),
    ((jnp.ones(3),), {"shift": 1.0, "more": jnp.full(3, 2.0)}),
    ((jnp.ones(3),), {"more": jnp.full(3, 2.0), "shift": 1.0}),  # other keyword order
]


def test_every_call_layout_gives_equinox_s_result(sink):
    ours, theirs = fastdispatch.filter_jit(scaled), eqx.filter_jit(scaled)
    for _ in range(2):
        for args, kwargs in CALLS:
            np.testing.assert_array_equal(ours(*args, **kwargs), theirs(*args, **kwargs))
    # Each layout's second round is a hit: the plan of its layout bound it again.
    assert [call.hit for call in sink.calls[len(CALLS) :]] == [True] * len(CALLS)


def test_positional_and_keyword_forms_of_one_binding_share_an_entry():
    f = fastdispatch.filter_jit(scaled)
    f(jnp.ones(3), 3.0, shift=1.0)
    size = f._cached._cache_size()
    f(jnp.ones(3), scale=3.0, shift=1.0)  # bound alike: equinox's key is the same
    assert f._cached._cache_size() == size


@pytest.mark.parametrize(
    "args, kwargs", [((jnp.ones(3),), {}), ((), {"shift": 1.0}), ((jnp.ones(3),), {"shift": 1, "x": 2})]
)
def test_a_call_that_does_not_bind_raises_equinox_s_error(args, kwargs):
    with pytest.raises(TypeError) as ours:
        fastdispatch.filter_jit(scaled)(*args, **kwargs)
    with pytest.raises(TypeError) as theirs:
        eqx.filter_jit(scaled)(*args, **kwargs)
    assert str(ours.value) == str(theirs.value)
