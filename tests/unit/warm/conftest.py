"""Fixtures of the warm-start tests."""

import jax
import pytest

import fastdispatch
from fastdispatch.warm import jax_cache


@pytest.fixture
def cache_settings():
    """jax's cache settings as the test found them, put back after it."""
    names = ("jax_compilation_cache_dir", *(name for name, _, _ in jax_cache._THRESHOLDS))
    before = {name: getattr(jax.config, name) for name in names}
    yield before
    fastdispatch.warm_start(None)
    for name, value in before.items():
        jax.config.update(name, value)
