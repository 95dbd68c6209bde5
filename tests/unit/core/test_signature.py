"""core.signature: a signature takes a call's equal objects as its own (adopt_leaves).

The rest of CallSignature is tested through the calls that key it: the jit
suite (tests/unit/jax_jit), the leaf keys (jax_jit/test_arg_signature.py);
the guards that adopt a fresh batch each step with their front ends (jit's,
tests/unit/jax_jit; equinox's SameCall, tests/unit/equinox; nnx's records,
tests/unit/nnx).
"""

import jax
import jax.numpy as jnp
import numpy as np

import fastdispatch


def signature_of_call(*args):
    """The signature fastdispatch.jit keys a call of these arguments with."""
    f = fastdispatch.jit(lambda *xs: sum(jnp.sum(x) for x in xs))
    f(*args)
    (entry,) = f._cache_entries()
    return entry.signature


def fresh(array):
    """A device array of these values, with a sharding object of its own (as
    a batch put on the device each step has)."""
    return jax.device_put(np.asarray(array), jax.sharding.SingleDeviceSharding(jax.devices()[0]))


def test_equal_leaves_are_adopted_and_then_pass_by_identity():
    params, batch = jnp.ones(3), fresh(np.arange(4.0, dtype=np.float32))
    signature = signature_of_call(params, batch)
    new_batch = fresh(np.arange(4.0, dtype=np.float32) + 1)
    assert new_batch.sharding is not batch.sharding and new_batch.sharding == batch.sharding
    assert signature.leaf_keys()[1].sharding is batch.sharding
    assert signature.adopt_leaves_now([params, new_batch])
    assert signature.leaf_keys()[1].sharding is new_batch.sharding
    assert signature.leaf_keys()[0].aval is params.aval  # matched by identity: untouched


def test_a_leaf_keyed_otherwise_is_refused():
    params, batch = jnp.ones(3), fresh(np.zeros(4, np.float32))
    signature = signature_of_call(params, batch)
    before = signature.leaf_keys()
    assert not signature.adopt_leaves_now([params, fresh(np.zeros(5, np.float32))])  # shape
    assert not signature.adopt_leaves_now([params, fresh(np.zeros(4, np.int32))])  # dtype
    assert not signature.adopt_leaves_now([params, 1.0])  # kind
    assert not signature.adopt_leaves_now([params])  # count
    assert signature.leaf_keys() == before
