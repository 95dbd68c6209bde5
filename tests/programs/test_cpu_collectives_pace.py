"""A data-parallel flax NNX loop on 8 CPU devices, run whole under
``python -m fastdispatch``, must not abort.

XLA's CPU client launches a program on several devices from a pool with one
thread per device, and each device takes at most 32 computations in flight; a
launch past that blocks its pool thread, and a program with collectives then
never gathers its 8 participants: XLA aborts ("Termination timeout for all
reduce ... only 7 of them arrived").  A caller that dispatches faster than the
devices compute gets there, so the fast path keeps a few launches ahead at
most (fastdispatch.core.execute, MAX_CPU_LAUNCHES_AHEAD).

The program is made to be device-bound (a wide MLP, a big batch, nothing read
back until the end): unpaced, the host is 32 launches ahead within the first
hundred steps, and the run aborts (every time it was tried on 2 cores).  The
collective timeouts are shortened, so that a stuck run aborts in seconds, not
XLA's 40.  Stock (``python prog.py``) runs alongside: the two load each other,
as a busy machine does, and must print the same loss.
"""

import os
import subprocess
import sys
import textwrap

from frontends import needs_flax

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = """
import jax

jax.config.update("jax_num_cpu_devices", 8)

import argparse

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


class MLP(nnx.Module):
    def __init__(self, din, dmid, dout, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dmid, rngs=rngs)
        self.linear3 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.linear1(x))
        x = nnx.relu(self.linear2(x))
        return self.linear3(x)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--sync", action="store_true", help="wait for every step")
    args = parser.parse_args()

    mesh = jax.make_mesh((8,), ("data",))
    data_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())

    model = MLP(16, args.width, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    state = nnx.state((model, optimizer))
    state = jax.device_put(state, replicated)
    nnx.update((model, optimizer), state)

    rng = np.random.default_rng(0)
    w_true = rng.normal(size=(16, 1)).astype(np.float32)
    loss = None
    for _ in range(args.steps):
        x = rng.normal(size=(args.batch, 16)).astype(np.float32)
        y = x @ w_true
        x = jax.device_put(x, data_sharding)
        y = jax.device_put(y, data_sharding)
        loss = train_step(model, optimizer, x, y)
        if args.sync:
            loss.block_until_ready()
    print(f"loss {float(loss):.6f}")


if __name__ == "__main__":
    main()
"""

STEPS = "150"
# A stuck collective aborts after this many seconds instead of XLA's 40.
TERMINATE_S = 15


def start(*argv):
    flags = (
        f"--xla_cpu_collective_call_warn_stuck_timeout_seconds={TERMINATE_S // 3} "
        f"--xla_cpu_collective_call_terminate_timeout_seconds={TERMINATE_S}"
    )
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        PYTHONDONTWRITEBYTECODE="1",
        XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flags).strip(),
    )
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process, timeout=150):
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        return None, stdout, stderr
    return process.returncode, stdout, stderr


@needs_flax
def test_data_parallel_nnx_loop_does_not_abort(tmp_path):
    program = tmp_path / "nnx_data_parallel_unsynced.py"
    program.write_text(textwrap.dedent(PROGRAM))

    patched = start("-m", "fastdispatch", str(program), "--steps", STEPS)
    # Stock waits for every step: jax.jit's own path is exposed to the same
    # XLA limit when its caller runs ahead, and the reference must not abort.
    stock = start(str(program), "--steps", STEPS, "--sync")
    patched_rc, patched_out, patched_err = finish(patched)
    stock_rc, stock_out, stock_err = finish(stock)

    assert stock_rc == 0, f"the program fails stock (exit {stock_rc}):\n{stock_err[-3000:]}"
    stuck = "Termination timeout" in patched_err or "may be stuck" in patched_err
    assert patched_rc == 0, (
        f"under python -m fastdispatch the program exits {patched_rc}"
        f"{' in a stuck CPU collective' if stuck else ''}:\n{patched_err[-3000:]}"
    )
    assert patched_out == stock_out and stock_out.startswith("loss "), (
        f"--- stock\n{stock_out}--- fastdispatch\n{patched_out}"
    )
