"""The executable equinox's or flax's jit compiled for a call, and the
arguments it takes, for the raw limit of the equinox and NNX groups.

The benchmark's one door to those libraries' private names (the package's own
are in fastdispatch/equinox/__init__.py and fastdispatch/nnx/_flax.py, for the fast path):

  equinox._jit._preprocess                a call split as equinox's jit takes it
  equinox._jit._JitWrapper._signature, ._dynamic_fun, ._static_fun, .donate_first,
                           .donate_rest, ._cached
                                          the wrapper's parts _preprocess needs; its jax.jit
  flax.nnx.transforms.compilation.JitWrapped._get_pure_args_kwargs, .jitted_fn
                                          flax's split of a call; its jax.jit
"""

from __future__ import annotations


def equinox_executable(wrapper, *args, **kwargs):
    """``(compiled, dynamic)`` for a call of ``wrapper`` (an equinox.filter_jit
    wrapper): the jax.stages.Compiled equinox's shared jax.jit runs, and the
    dynamic arguments it takes (equinox's dicts of donated and kept arrays)."""
    from equinox import _jit

    info = (
        wrapper._signature,
        wrapper._dynamic_fun,
        wrapper._static_fun,
        wrapper.donate_first,
        wrapper.donate_rest,
    )
    donated, kept, static = _jit._preprocess(info, args, kwargs, return_static=True)
    return wrapper._cached.lower(donated, kept, static).compile(), (donated, kept)


def nnx_executable(jitted, *args, **kwargs):
    """``(compiled, pure_args, pure_kwargs, state_outputs)`` for a call of
    ``jitted`` (a flax.nnx.jit function, graph mode): the jax.stages.Compiled
    flax's jax.jit runs, the split arguments it takes, and how many of its
    first outputs are the graphs' leaves (the function's own come after)."""
    from flax import nnx

    with nnx.update_context(jitted):
        pure_args, pure_kwargs = jitted._get_pure_args_kwargs(args, kwargs)
    with nnx.update_context(jitted):
        compiled = jitted.jitted_fn.lower(*pure_args, **pure_kwargs).compile()
    # Its outputs are (args, kwargs, the function's output): the function's leaves last.
    own = compiled.out_tree.children()[2].num_leaves
    return compiled, pure_args, pure_kwargs, compiled.out_tree.num_leaves - own
