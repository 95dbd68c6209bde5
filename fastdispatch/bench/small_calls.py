"""A loop of small jitted calls fed their own outputs: ``bench --trace-cost``
runs it as a whole program (``python small_calls.py [calls]``, 10,000 by default)."""

import sys

import jax
import jax.numpy as jnp


@jax.jit
def step(x, y):
    return x * 0.5 + y


def main(calls: int) -> None:
    x, y = jnp.ones(8), jnp.ones(8)
    for _ in range(calls):
        x = step(x, y)
    print(f"x[0] after {calls} calls: {float(x[0]):.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
