"""``fastdispatch.eval_shape``: jax.eval_shape, tracing a jit function once.

jax.eval_shape traces a jax.jit function through the function's own trace
cache, and anything else under a new jax.jit of its own: a fastdispatch.jit
function would be traced twice, its own trace inside a wrapper's.  This takes
the function's own trace, as jax's does for its own.  ``python -m fastdispatch``
routes jax.eval_shape here with jax.jit.
"""

import jax

from fastdispatch.jax_jit.function import CompiledFunction

# jax's own, taken before routing replaces it.
_JAX_EVAL_SHAPE = jax.eval_shape


def eval_shape(fun, *args, **kwargs):
    """``jax.eval_shape(fun, *args, **kwargs)``: the output's shapes and dtypes
    (jax.ShapeDtypeStruct leaves), traced as jax.jit traces them."""
    if isinstance(fun, CompiledFunction):
        return fun.trace(*args, **kwargs).out_info
    return _JAX_EVAL_SHAPE(fun, *args, **kwargs)
