"""Calls of filter_jit the equinox unit tests share: a model, a wrapper
served a few times, its identity guard's state, a check against equinox."""

import equinox as eqx
import jax
import numpy as np

import fastdispatch


def forward(model, x):
    return model(x)


def mlp(seed=0):
    return eqx.nn.MLP(3, 2, 4, 2, key=jax.random.key(seed))


def state(f):
    """(calls the record served, or None without one; records refused or dropped)."""
    return f._cached._same_call()


def check(ours, theirs, *args):
    got, want = ours(*args), theirs(*args)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


def served(fun, *args, calls=4):
    """A fresh filter_jit of ``fun``, called ``calls`` times on ``args``."""
    f = fastdispatch.filter_jit(fun)
    f._cached.clear()
    for _ in range(calls):
        f(*args)
    return f
