"""Writes through fastdispatch's JitState views change how jitted functions run,
for jax.jit and fastdispatch.jit alike, in the writing thread only."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch
from fastdispatch import _jax


@pytest.fixture(autouse=True)
def restore_settings():
    yield
    jax.config.update("jax_disable_jit", False)
    jax.config.update("jax_enable_x64", False)
    for setting in (_jax.DISABLE_JIT, _jax.ENABLE_X64):
        _jax.set_local_setting(setting, None)


def traced_calls(jit):
    """A jitted function that counts how often its Python body runs."""
    runs = []

    def body(x):
        runs.append(isinstance(x, jax.core.Tracer))
        return x + 1

    return jit(body), runs


def test_thread_local_disable_jit_runs_the_function_eagerly_in_that_thread(jit):
    f, runs = traced_calls(jit)
    x = jnp.ones(2)
    f(x)
    fastdispatch.thread_local_state().disable_jit = True
    f(x)
    f(x)
    assert runs == [True, False, False]  # eager: the body runs on every call
    other = threading.Thread(target=lambda: f(x))
    other.start()
    other.join(60)
    assert runs == [True, False, False]  # the other thread hits the compiled entry
    fastdispatch.thread_local_state().disable_jit = None
    f(x)
    assert runs == [True, False, False]


def test_global_disable_jit_applies_to_every_thread(jit):
    f, runs = traced_calls(jit)
    x = jnp.ones(2)
    fastdispatch.global_state().disable_jit = True
    other = threading.Thread(target=lambda: f(x))
    other.start()
    other.join(60)
    f(x)
    assert runs == [False, False]


def test_thread_local_enable_x64_changes_dtypes_in_that_thread(jit):
    f = jit(lambda x: x * 2)
    assert f(1).dtype == np.int32
    fastdispatch.thread_local_state().enable_x64 = True
    assert f(1).dtype == np.int64 and f(jnp.arange(3)).dtype == np.int64
    box = {}
    other = threading.Thread(target=lambda: box.update(dtype=f(1).dtype))
    other.start()
    other.join(60)
    assert box["dtype"] == np.int32
    fastdispatch.thread_local_state().enable_x64 = None
    assert f(1).dtype == np.int32
