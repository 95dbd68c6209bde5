"""Run by tests/unit/equinox/test_function.py in a fresh process: plain ``jit`` given an
equinox Module loads the equinox front end's field reader by itself."""


def plain_jit_reads_equinox_modules_in_c():
    import sys

    import equinox as eqx
    import jax
    import numpy as np

    import fastdispatch
    from fastdispatch.core import pytree as _pytree

    assert "fastdispatch.equinox" not in sys.modules
    model = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)
    step = fastdispatch.jit(lambda params, x: eqx.combine(params, static)(x))
    reference = jax.jit(lambda params, x: eqx.combine(params, static)(x))
    x = jax.numpy.ones(3)
    for _ in range(2):
        np.testing.assert_array_equal(step(params, x), reference(params, x))
    # The first equinox Module flattened loaded the front end's field reader.
    assert "fastdispatch.equinox" in sys.modules
    assert _pytree.flatten(params)[1] == _pytree.flatten(params)[1]
