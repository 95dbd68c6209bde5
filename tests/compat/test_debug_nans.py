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


def _in_a_fresh_thread(run):
    """``run()``'s result, run in a thread of its own.  jax leaves its post
    hook's thread-local value at None after some traces (a vmap of a jaxpr
    enters ``debug_nans(False)``), which hides jax.jit's own check in that
    thread; a fresh thread starts without it, and leaves this one as it is."""
    result = []
    thread = threading.Thread(target=lambda: result.append(run()))
    thread.start()
    thread.join()
    return result[0]


@pytest.mark.parametrize(
    ("setting", "body", "value"),
    [
        ("jax_debug_nans", _log, -1.0),
        ("jax_debug_infs", _reciprocal, 0.0),
    ],
)
def test_a_setting_turned_on_after_the_first_calls_is_obeyed(both, setting, body, value):
    x = jnp.array([value, 2.0])

    def outcomes(jit):
        fun = jit(body)
        seen = [_outcome(fun, x), _outcome(fun, x)]  # compiled, then from the cache
        jax.config.update(setting, True)
        seen.append(_outcome(fun, x))
        jax.config.update(setting, False)
        seen.append(_outcome(fun, x))
        return seen

    library, ours = (_in_a_fresh_thread(lambda: outcomes(jit)) for jit in both)
    assert library[2] is FloatingPointError
    assert all(_same(a, b) for a, b in zip(library, ours, strict=True))


def test_a_with_block_is_obeyed_in_its_own_thread_only(both):
    x = jnp.array([-1.0, 2.0])

    def in_a_block(jit):
        fun = jit(_log)
        seen = {"before": _outcome(fun, x)}
        with jax.debug_nans(True):
            seen["inside"] = _outcome(fun, x)
            seen["other thread"] = _in_a_fresh_thread(lambda: _outcome(fun, x))
        seen["after"] = _outcome(fun, x)
        return seen

    library, ours = (_in_a_fresh_thread(lambda: in_a_block(jit)) for jit in both)
    assert library["inside"] is FloatingPointError
    assert library["other thread"] is not FloatingPointError
    assert library.keys() == ours.keys()
    assert all(_same(library[k], ours[k]) for k in library)
