"""CompiledFunctionCache: LRU order, eviction, sharing, weak keys, stats, pickling.

Calls here pass jax Arrays (``one``), the arguments every call keeps on the fast
path; how Python scalars are counted is the compat suite's question.
"""

import gc
import pickle
import weakref

import jax.numpy as jnp
import numpy as np
import pytest

import fastdispatch
from fastdispatch import CompiledFunctionCache


def one():
    return jnp.ones((), jnp.float32)


def shapes(f, *ns):
    """Call f once on a float32 vector of each length in ns."""
    for n in ns:
        f(jnp.zeros(n))


def stats_delta(cache, before):
    after = cache.stats()
    return {k: after[k] - before[k] for k in ("hits", "misses", "evictions")}


def test_defaults_and_validation():
    assert CompiledFunctionCache().capacity() == 4096
    assert CompiledFunctionCache(3).capacity() == 3
    assert CompiledFunctionCache(capacity=3).size() == 0
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="capacity must be a positive int"):
            CompiledFunctionCache(bad)
    assert isinstance(fastdispatch.default_cache(), CompiledFunctionCache)


def test_hits_misses_and_size():
    cache = CompiledFunctionCache(8)
    f = fastdispatch.jit(lambda x: x + 1, cache=cache)
    start = cache.stats()
    shapes(f, 1, 2, 1, 1, 2, 3)
    assert stats_delta(cache, start) == {"hits": 3, "misses": 3, "evictions": 0}
    assert cache.size() == 3 == f._cache_size()
    stats = cache.stats()
    assert stats["compile_seconds"] > 0
    assert stats["size"] == 3 and stats["capacity"] == 8


def test_lru_eviction_order():
    cache = CompiledFunctionCache(2)
    f = fastdispatch.jit(lambda x: x * 2, cache=cache)
    shapes(f, 1, 2)  # [1, 2]
    shapes(f, 1)  # hit: 1 is now the most recent -> [2, 1]
    start = cache.stats()
    shapes(f, 3)  # evicts 2 -> [1, 3]
    assert stats_delta(cache, start) == {"hits": 0, "misses": 1, "evictions": 1}
    assert cache.size() == 2
    start = cache.stats()
    shapes(f, 1, 3)  # both still there
    assert stats_delta(cache, start) == {"hits": 2, "misses": 0, "evictions": 0}
    start = cache.stats()
    shapes(f, 2)  # 2 was evicted: compiles again and evicts 1 (least recent)
    assert stats_delta(cache, start) == {"hits": 0, "misses": 1, "evictions": 1}
    start = cache.stats()
    shapes(f, 3, 2)
    assert stats_delta(cache, start)["hits"] == 2
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(2))), [2.0, 2.0])


def test_shared_cache_between_functions():
    cache = CompiledFunctionCache(3)
    f = fastdispatch.jit(lambda x: x + 1, cache=cache)
    g = fastdispatch.jit(lambda x: x - 1, cache=cache)
    shapes(f, 1, 2)
    shapes(g, 1)
    assert cache.size() == 3
    assert f._cache_size() == 2 and g._cache_size() == 1
    start = cache.stats()
    shapes(g, 2)  # capacity is shared: f's least recent entry (shape 1) goes
    assert stats_delta(cache, start) == {"hits": 0, "misses": 1, "evictions": 1}
    assert f._cache_size() == 1 and g._cache_size() == 2
    # _clear_cache touches only the function's own entries
    g._clear_cache()
    assert g._cache_size() == 0 and f._cache_size() == 1 and cache.size() == 1
    f.clear_cache()
    assert cache.size() == 0
    # results unaffected by sharing
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(2))), [2.0, 2.0])
    np.testing.assert_array_equal(np.asarray(g(jnp.ones(2))), [0.0, 0.0])


def test_functions_do_not_share_entries():
    # Two different functions with the same signature get their own executables.
    cache = CompiledFunctionCache(8)
    f = fastdispatch.jit(lambda x: x + 1, cache=cache)
    g = fastdispatch.jit(lambda x: x + 2, cache=cache)
    assert float(f(one())) == 2.0 and float(g(one())) == 3.0
    assert cache.size() == 2


def test_clear_and_clear_all():
    a, b = CompiledFunctionCache(4), CompiledFunctionCache(4)
    f = fastdispatch.jit(lambda x: x + 1, cache=a)
    g = fastdispatch.jit(lambda x: x + 1, cache=b)
    h = fastdispatch.jit(lambda x: x * 5)  # the default cache
    shapes(f, 1, 2)
    shapes(g, 1)
    h(one())
    a.clear()
    assert a.size() == 0 and f._cache_size() == 0 and b.size() == 1
    start = a.stats()
    shapes(f, 1)
    assert stats_delta(a, start)["misses"] == 1
    CompiledFunctionCache.clear_all()
    assert a.size() == b.size() == 0
    assert h._cache_size() == 0
    assert float(h(one())) == 5.0 and float(g(one())) == 2.0


def test_entries_dropped_when_function_dies():
    cache = CompiledFunctionCache(8)

    def make():
        def fun(x):
            return x * 7

        return fun

    fun = make()
    f = fastdispatch.jit(fun, cache=cache)
    shapes(f, 1, 2)
    keep = fastdispatch.jit(lambda x: x, cache=cache)
    keep(one())
    assert cache.size() == 3
    ref = weakref.ref(fun)
    del f, fun
    gc.collect()
    assert ref() is None
    assert cache.size() == 1
    assert keep._cache_size() == 1


def test_pickle_empty_same_capacity():
    cache = CompiledFunctionCache(5)
    f = fastdispatch.jit(lambda x: x + 1, cache=cache)
    shapes(f, 1, 2)
    restored = pickle.loads(pickle.dumps(cache))
    assert type(restored) is CompiledFunctionCache
    assert restored is not cache
    assert restored.capacity() == 5 and restored.size() == 0
    assert restored.stats()["hits"] == restored.stats()["misses"] == 0
    assert cache.size() == 2  # the original is untouched
    g = fastdispatch.jit(lambda x: x, cache=restored)
    g(one())
    assert restored.size() == 1
    CompiledFunctionCache.clear_all()  # the restored cache is live too
    assert restored.size() == 0


def test_pickle_version_checked():
    cache = CompiledFunctionCache(7)
    rebuild, args = cache.__reduce__()[:2]
    assert rebuild(*args).capacity() == 7
    version_at = [i for i, a in enumerate(args) if isinstance(a, int) and a != 7]
    assert len(version_at) == 1, args
    bad = list(args)
    bad[version_at[0]] += 1000
    with pytest.raises(ValueError, match="pickled in format"):
        rebuild(*bad)


def test_cache_size_on_function():
    f = fastdispatch.jit(lambda x, n: x * n, static_argnums=1)
    assert f._cache_size() == 0
    f(one(), 1)
    f(one(), 2)
    f(one(), 2)
    assert f._cache_size() == 2
    f._clear_cache()
    assert f._cache_size() == 0
    assert float(f(one() * 2, 3)) == 6.0


def test_unhashable_functions_are_keyed_by_identity():
    from fastdispatch.core.cache import ByIdentity

    class Unhashable:
        __hash__ = None

        def __call__(self, x):
            return x

    forgotten = []
    a, b = Unhashable(), Unhashable()
    key_a = ByIdentity(a, forgotten.append)
    assert key_a == ByIdentity(a, None) and hash(key_a) == hash(ByIdentity(a, None))
    assert key_a != ByIdentity(b, None)
    # Held weakly: the callback runs when the function dies, and a dead key
    # equals itself alone.
    del a
    gc.collect()
    assert len(forgotten) == 1
    assert key_a == key_a and key_a != ByIdentity(b, None)


def test_unhashable_function_without_weak_references_is_held():
    from fastdispatch.core.cache import ByIdentity

    class Slotted:
        __slots__ = ()
        __hash__ = None

    fun = Slotted()
    assert ByIdentity(fun, None) == ByIdentity(fun, None)
