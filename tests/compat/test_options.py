"""The remaining jit options, unused (pruned) arguments, and warnings at jit and call time."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from contract import against_jax, arange, assert_same_tree, expect_same


def first(x, y, z):
    return x * 2


UNUSED_ARGS = (arange((2,)), np.ones(3, np.float32), jax.random.key(0))


@against_jax
@pytest.mark.parametrize("keep_unused", [False, True])
def test_unused_arguments(jit, keep_unused):
    # jax prunes unused inputs unless keep_unused: the executable takes fewer
    # arguments than the call has leaves. Results must not depend on it.
    options = dict(keep_unused=keep_unused)
    for _ in range(2):
        expect_same(jit, first, *UNUSED_ARGS, jit_kwargs=options)
    expect_same(jit, lambda a, b: {"b": b}, 1.0, arange((2,)), jit_kwargs=options)
    lowered = jit(first, **options).lower(*UNUSED_ARGS).as_text()
    assert lowered == jax.jit(first, **options).lower(*UNUSED_ARGS).as_text()


def test_unused_donated_argument(jit):
    # A pruned donated input is neither deleted nor warned about; kept with
    # keep_unused=True, it cannot be reused for the output and jax warns.
    def f(x, y):
        return x + 1

    for _ in range(2):
        x, y = arange((2,)), arange((3,))
        jit(f, donate_argnums=1)(x, y)
        assert not x.is_deleted() and not y.is_deleted()
    x, y = arange((2,)), arange((3,))
    with pytest.warns(UserWarning, match=r"Some donated buffers were not usable: float32\[3\]"):
        jit(lambda x, y: x + 1, donate_argnums=1, keep_unused=True)(x, y)
    assert not x.is_deleted() and not y.is_deleted()


@against_jax
@pytest.mark.parametrize(
    "options",
    [dict(inline=True), dict(compiler_options={"xla_cpu_enable_fast_math": False})],
    ids=["inline", "compiler_options"],
)
def test_options_pass_through(jit, options):
    expect_same(jit, lambda x, y: jnp.sin(x) * y, arange((3,)), 2.0, jit_kwargs=options)


def test_bad_compiler_option(jit):
    f = jit(lambda x: x + 1, compiler_options={"not_an_option": 1})
    with pytest.raises(Exception, match="No such compile option: 'not_an_option'") as info:
        f(1.0)
    assert type(info.value).__name__ == "JaxRuntimeError"


def record(thunk):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = thunk()
    return result, [(w.category, str(w.message)) for w in caught]


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_backend_option_warnings_and_errors(jit, backend):
    # Deprecated by jax: the same DeprecationWarning at the same moments, and
    # the same error for a backend that is not present.
    ours, ours_w = record(lambda: jit(lambda x: x + 1, backend=backend))
    theirs, theirs_w = record(lambda: jax.jit(lambda x: x + 1, backend=backend))
    assert ours_w == theirs_w
    if backend == "cpu":
        (out_ours, call_w_ours), (out_theirs, call_w_theirs) = (
            record(lambda: ours(1.0)),
            record(lambda: theirs(1.0)),
        )
        assert call_w_ours == call_w_theirs
        assert_same_tree(out_ours, out_theirs)
        assert any(issubclass(c, DeprecationWarning) for c, _ in theirs_w + call_w_theirs)
    else:
        with pytest.raises(RuntimeError, match="Unknown backend: 'gpu' requested"):
            record(lambda: ours(1.0))
