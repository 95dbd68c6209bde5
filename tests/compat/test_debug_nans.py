"""jax_debug_nans and jax_debug_infs, turned on after a function's first
calls: each front end raises FloatingPointError where its library does, and
returns what its library returns once they are off again."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from frontends import needs_equinox, needs_flax

import fastdispatch


def _library(name):
    if name == "jit":
        return jax.jit, fastdispatch.jit
    if name == "filter_jit":
        import equinox as eqx

        return eqx.filter_jit, fastdispatch.filter_jit
    from flax import nnx

    return nnx.jit, fastdispatch.nnx.jit


FRONT_ENDS = [
    "jit",
    pytest.param("filter_jit", marks=needs_equinox),
    pytest.param("nnx.jit", marks=needs_flax),
]


@pytest.fixture(params=FRONT_ENDS)
def both(request):
    """(the library's function, fastdispatch's) for one front end."""
    yield _library(request.param)
    jax.config.update("jax_debug_nans", False)
    jax.config.update("jax_debug_infs", False)


def _log(x):
    return jnp.log(x)


def _reciprocal(x):
    return 1.0 / x


def _outcome(fun, x):
    """What a call gives: its result as numpy, or the type of what it raised."""
    try:
        return np.asarray(fun(x))
    except FloatingPointError:
        return FloatingPointError


def _same(a, b):
    if a is FloatingPointError or b is FloatingPointError:
        return a is b
    np.testing.assert_array_equal(a, b)
    return True


@pytest.mark.parametrize(
    ("setting", "body", "value"),
    [
        ("jax_debug_nans", _log, -1.0),
        ("jax_debug_infs", _reciprocal, 0.0),
    ],
)
def test_a_setting_turned_on_after_the_first_calls_is_obeyed(both, setting, body, value):
    x = jnp.array([value, 2.0])
    outcomes = []
    for jit in both:
        fun = jit(body)
        seen = [_outcome(fun, x), _outcome(fun, x)]  # compiled, then from the cache
        jax.config.update(setting, True)
        seen.append(_outcome(fun, x))
        jax.config.update(setting, False)
        seen.append(_outcome(fun, x))
        outcomes.append(seen)
    library, ours = outcomes
    assert library[2] is FloatingPointError
    assert all(_same(a, b) for a, b in zip(library, ours, strict=True))


def test_a_with_block_is_obeyed_in_its_own_thread_only(both):
    x = jnp.array([-1.0, 2.0])

    def in_a_thread(jit):
        # Its own thread: leaving the block leaves jax's thread-local post
        # hook at None, which would hide a global one from later tests.
        seen = {}

        def run():
            fun = jit(_log)
            seen["before"] = _outcome(fun, x)
            with jax.debug_nans(True):
                seen["inside"] = _outcome(fun, x)
                other = threading.Thread(target=lambda: seen.setdefault("other thread", _outcome(fun, x)))
                other.start()
                other.join()
            seen["after"] = _outcome(fun, x)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        return seen

    library, ours = (in_a_thread(jit) for jit in both)
    assert library["inside"] is FloatingPointError
    assert library["other thread"] is not FloatingPointError
    assert library.keys() == ours.keys()
    assert all(_same(library[k], ours[k]) for k in library)
