"""warm/jax_cache.py: jax's persistent compilation cache on underneath the
store, unless the program set its own."""

import os

import jax
import jax.numpy as jnp

import fastdispatch
from fastdispatch import warm


def test_jax_cache_is_on_underneath_the_store(tmp_path, cache_settings):
    assert cache_settings["jax_compilation_cache_dir"] is None
    fastdispatch.warm_start(tmp_path)
    directory = os.path.join(str(tmp_path), ".programs", "jax-cache")
    assert jax.config.jax_compilation_cache_dir == directory
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == -1
    jax.jit(lambda x: x * 3 + 1)(jnp.arange(5.0)).block_until_ready()  # a stock jit: not ours
    assert os.listdir(directory)  # jax wrote its entry
    stats = fastdispatch.warm_start_stats()
    assert stats["jax_cache"]["owner"] == "warm start" and stats["jax_cache"]["directory"] == directory
    assert "jax's persistent compilation cache underneath: " + directory in warm.summary()
    fastdispatch.warm_start(None)
    assert jax.config.jax_compilation_cache_dir is None
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0


def test_a_jax_cache_the_program_set_is_left_alone(tmp_path, cache_settings):
    own = str(tmp_path / "mine")
    jax.config.update("jax_compilation_cache_dir", own)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    fastdispatch.warm_start(tmp_path / "store")
    assert jax.config.jax_compilation_cache_dir == own
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.5
    stats = fastdispatch.warm_start_stats()
    assert stats["jax_cache"]["owner"] == "the program"
    assert "the program's own, " + own in warm.summary()
    fastdispatch.warm_start(None)
    assert jax.config.jax_compilation_cache_dir == own  # never ours to put back


def test_a_threshold_the_program_set_is_kept(tmp_path, cache_settings):
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)
    fastdispatch.warm_start(tmp_path)
    assert jax.config.jax_compilation_cache_dir == os.path.join(str(tmp_path), ".programs", "jax-cache")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == -1
