"""What the benchmark times: a workload is a function, its options, a factory of
fresh arguments and a loop that calls an implementation's version of it ``n``
times.  Loops only dispatch (the runner blocks once on the last output) unless
the workload is a blocking one; feedback loops pass outputs back in as the next
call's inputs, as a training loop does.  A raising workload's calls raise: its
loop catches each error and its output is the last one, as ``Raised``, which
the runner compares with the reference's (type and message).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import jax

# A loop takes (fn, args, kwargs, n), calls fn n times and returns
# (args for the next loop, last output).
Loop = Callable[[Callable, tuple, dict, int], "tuple[tuple, Any]"]


def same_args(fn, args, kwargs, n):
    """Dispatch only: the same arguments every call."""
    for _ in range(n):
        out = fn(*args, **kwargs)
    return args, out


def same_args_then_barrier(fn, args, kwargs, n):
    """Dispatch only, then wait for the calls' effects (jax.effects_barrier)."""
    for _ in range(n):
        out = fn(*args, **kwargs)
    jax.effects_barrier()
    return args, out


def block_every_call(fn, args, kwargs, n):
    """Wait for each call's result before the next call."""
    for _ in range(n):
        out = fn(*args, **kwargs).block_until_ready()
    return args, out


@dataclasses.dataclass(frozen=True)
class Raised:
    """What a call raised, as the runner compares it: the exception's type and message."""

    type: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> Raised:
        return cls(type(error).__name__, str(error))


def raised(fn, args, kwargs):
    """fn's output, or the Raised of its error."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        return Raised.of(e)


def catching(fn, args, kwargs, n):
    """The same arguments every call, each call's error caught; the output is the
    last call's Raised (or its output, where it did not raise)."""
    error = None
    for _ in range(n):
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            error = e
        else:
            error = None
    if error is not None:
        out = Raised.of(error)
        del error  # its traceback holds this frame
    return args, out


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str  # id for --only
    title: str  # row label
    fun: Callable
    make_args: Callable[[], tuple[tuple, dict]]  # fresh (args, kwargs) each call
    loop: Loop = same_args
    jit_options: dict = dataclasses.field(default_factory=dict)
    devices: int = 1  # CPU devices the workload needs
    skip: dict = dataclasses.field(default_factory=dict)  # implementation -> why it can't run this
    traced: bool = False  # run fastdispatch under `with fastdispatch.trace():`
    note: str = ""  # printed under the table
    # The raw limit: workload -> (a zero-argument callable running the bare PjRt
    # call, how many of its first outputs are not the function's: equinox's
    # marker, flax's Variables); default: jax.jit's executable of fun.
    raw: Callable[[Workload], tuple[Callable[[], list], int]] | None = None
    # The loop runs each call on the previous call's outputs (a training loop):
    # the default raw limit does too (raw_runner's feed_back: the honest floor
    # on an accelerator, where an input still being computed costs the launch).
    feeds_back: bool = False
    # Python scalar types whose values the loop changes every call (a step
    # counter's int): the raw limit puts them on the device on every call, as
    # it does numpy leaves (fastdispatch.bench.raw.raw_runner).
    new_scalars: tuple[type, ...] = ()
    quiet: bool = False  # the function prints (jax.debug.print): stdout goes to os.devnull
    # A row of plain functions rather than one function wrapped by each implementation
    # (fastdispatch.device_put against jax.device_put): called once per run, it gives
    # {implementation name: callable}; the raw entry is a zero-argument callable
    # returning the flat outputs.  None: each implementation wraps `fun`.
    given: Callable[[], dict[str, Callable]] | None = None
    # The calls raise (each loop catches every error): implementations are checked
    # to raise the reference's error, type and message; no raw limit.
    raises: bool = False
    # The hand-off reason fastdispatch hands this row's calls to jax.jit for: the report
    # says where fastdispatch.trace counts another, and the summary holds the row to
    # HAND_OFF_TARGET_US above jax.jit rather than to the ratio targets.
    hand_off: str = ""
    needs: tuple[str, ...] = ()  # modules the workload imports: without one, the row says so

    @property
    def blocking(self) -> bool:
        return self.loop is block_every_call


@contextlib.contextmanager
def quiet_stdout():
    """Send sys.stdout to os.devnull (jax.debug.print writes there from its callback)."""
    with open(os.devnull, "w") as devnull:
        saved, sys.stdout = sys.stdout, devnull
        try:
            yield
        finally:
            sys.stdout = saved
