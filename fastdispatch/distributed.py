"""Several jax processes on one machine, over loopback: a launcher that watches
them, and ``jax.distributed`` set up inside each.

fastdispatch needs nothing of its own under ``jax.distributed``: global arrays
take the fast path as they are (docs/distributed.md).  This module is what
``examples/distributed_train.py``, ``tests/distributed/`` and
``python -m fastdispatch bench --distributed`` share to run a multi-process
program on one machine, every address 127.0.0.1::

    # the launcher
    run = launch([sys.executable, "train.py"], num_processes=2, cpu_devices=2)
    print(run.summary())

    # train.py, before anything starts a jax backend
    process_id, num_processes = fastdispatch.distributed.initialize()

The launcher hands each process its place through the environment: jax's own
``JAX_COORDINATOR_ADDRESS``, ``JAX_COORDINATOR_BIND_ADDRESS`` and
``JAX_NUM_CPU_DEVICES``, our ``FASTDISPATCH_PROCESS_ID`` and
``FASTDISPATCH_NUM_PROCESSES``, and in ``XLA_FLAGS`` a collective timeout.

Every failure ends in bounded time (docs/distributed.md, "Faults"): a process
that dies is noticed by the others' heartbeats (``HEARTBEAT_TIMEOUT_S``); a
collective waiting for a live but stuck peer fails after
``COLLECTIVE_TIMEOUT_S``; a coordinator that never answers fails a process
after ``INITIALIZATION_TIMEOUT_S``.  jax ends the first case with an abort
(SIGABRT), not a Python exception; the launcher says which process failed
first and how each ended, and kills whatever still runs ``grace`` seconds
later or at its ``timeout``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = [
    "COLLECTIVE_TIMEOUT_S",
    "HEARTBEAT_TIMEOUT_S",
    "INITIALIZATION_TIMEOUT_S",
    "LOOPBACK",
    "Launch",
    "NUM_PROCESSES_ENV",
    "PROCESS_ID_ENV",
    "ProcessResult",
    "SHUTDOWN_TIMEOUT_S",
    "free_port",
    "initialize",
    "launch",
]

LOOPBACK = "127.0.0.1"
PROCESS_ID_ENV = "FASTDISPATCH_PROCESS_ID"
NUM_PROCESSES_ENV = "FASTDISPATCH_NUM_PROCESSES"

# The bounds, in seconds (jax's defaults: 300, 100, 300, and 1800 for the
# collective timeout).  Measured on 2 cores, 2 processes x 2 CPU devices: a
# dead peer aborts the others at HEARTBEAT_TIMEOUT_S; a stuck one raises
# JaxRuntimeError at COLLECTIVE_TIMEOUT_S, then exiting waits up to
# SHUTDOWN_TIMEOUT_S for the shutdown barrier.  COLLECTIVE_TIMEOUT_S must
# exceed any honest skew between processes reaching a collective, the first
# call's compile included.
INITIALIZATION_TIMEOUT_S = 30
HEARTBEAT_TIMEOUT_S = 10
SHUTDOWN_TIMEOUT_S = 10
COLLECTIVE_TIMEOUT_S = 20
COLLECTIVE_TIMEOUT_FLAG = "--xla_cpu_collective_timeout_seconds"
READER_JOIN_S = 5.0  # waiting for the rest of an ended process's output


def free_port() -> int:
    """A TCP port free on the loopback address right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


# -- inside each process ---------------------------------------------------------


def initialize(
    *,
    initialization_timeout: int = INITIALIZATION_TIMEOUT_S,
    heartbeat_timeout_seconds: int = HEARTBEAT_TIMEOUT_S,
    shutdown_timeout_seconds: int = SHUTDOWN_TIMEOUT_S,
) -> tuple[int, int]:
    """``jax.distributed.initialize`` for a process that ``launch`` started;
    returns ``(process_id, num_processes)``.

    Call it before anything starts a jax backend.  The coordinator binds to
    loopback only, and so do gloo's connections (jax would bind them to the
    address of the machine's hostname).  A process other than 0 first waits
    for the coordinator's port, so that a coordinator that never comes is a
    Python ``TimeoutError`` naming it, not jax's abort from inside
    ``initialize``.
    """
    try:
        process_id = int(os.environ[PROCESS_ID_ENV])
        num_processes = int(os.environ[NUM_PROCESSES_ENV])
        address = os.environ["JAX_COORDINATOR_ADDRESS"]
    except KeyError as e:
        raise RuntimeError(
            f"{e.args[0]} is not set: start this program with fastdispatch.distributed.launch "
            "(or call jax.distributed.initialize yourself, docs/distributed.md)"
        ) from None
    host, _, port = address.rpartition(":")
    if host != LOOPBACK:
        raise ValueError(f"JAX_COORDINATOR_ADDRESS={address!r}: this set-up is for {LOOPBACK} only")
    os.environ["XLA_FLAGS"] = _with_collective_timeout(os.environ.get("XLA_FLAGS", ""))

    import jax

    from fastdispatch import _jax

    if process_id != 0:
        _wait_for_port(host, int(port), initialization_timeout)
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=num_processes,
        process_id=process_id,
        coordinator_bind_address=address,
        initialization_timeout=initialization_timeout,
        heartbeat_timeout_seconds=heartbeat_timeout_seconds,
        shutdown_timeout_seconds=shutdown_timeout_seconds,
    )
    _jax.gloo_on_address(LOOPBACK)
    return process_id, num_processes


def _with_collective_timeout(flags: str) -> str:
    """XLA_FLAGS with the collective timeout added, unless it is there already
    (XLA reads them when the CPU backend starts)."""
    if COLLECTIVE_TIMEOUT_FLAG in flags:
        return flags
    return f"{flags} {COLLECTIVE_TIMEOUT_FLAG}={COLLECTIVE_TIMEOUT_S}".strip()


def _wait_for_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no jax.distributed coordinator at {host}:{port} after {timeout:g} s: "
                    "process 0 did not start it, or died"
                ) from None
            time.sleep(0.1)


# -- the launcher ------------------------------------------------------------------


@dataclasses.dataclass
class ProcessResult:
    """How one launched process ended."""

    process_id: int
    returncode: int | None  # negative: killed by that signal
    seconds: float  # from launch to its end
    stdout: str
    stderr: str
    stopped: str = ""  # why the launcher killed it, if it did

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def how(self) -> str:
        """How it ended, in words: "exited 0", "aborted (SIGABRT)", ..."""
        if self.stopped:
            return f"killed by the launcher: {self.stopped}"
        rc = self.returncode
        if rc is not None and rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            return "aborted (SIGABRT)" if name == "SIGABRT" else f"killed by {name}"
        return f"exited {rc}"

    def error_line(self) -> str:
        """What its output says went wrong, in one line ("" if nothing)."""
        text = self.stdout + "\n" + self.stderr
        # jax's LOG(FATAL) before an abort: the status after the boilerplate
        # names the cause ("... tasks are unhealthy (stopped sending heartbeats): 1").
        fatal = text.find(_FATAL_MARKER)
        status = text.find(_STATUS_MARKER, fatal) if fatal >= 0 else -1
        if status >= 0:
            cause = text[status + len(_STATUS_MARKER) :].split("*** Check failure")[0]
            return " ".join(cause.split())[:_LINE_CHARS]
        for line in reversed(text.splitlines()):
            if any(marker in line for marker in _ERROR_MARKERS):
                return line.strip()[:_LINE_CHARS]
        return ""


_FATAL_MARKER = "Terminating process because the JAX distributed service detected fatal errors"
_STATUS_MARKER = "absl::Status: "
_ERROR_MARKERS = ("Error", "error", "failed", "DEADLINE_EXCEEDED", "UNAVAILABLE")
_LINE_CHARS = 300


@dataclasses.dataclass
class Launch:
    """The processes of one ``launch``, in process-id order."""

    processes: list[ProcessResult]
    port: int
    first_failure: int | None  # process id of the first to end badly

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.processes)

    def summary(self) -> str:
        """One line per process: how and when it ended, and why."""
        lines = []
        for p in sorted(self.processes, key=lambda p: p.seconds):
            line = f"process {p.process_id}: {p.how()} after {p.seconds:.1f} s"
            if p.process_id == self.first_failure:
                line += " (the first to fail)"
            why = "" if p.ok else p.error_line()
            lines.append(line + (f": {why}" if why else ""))
        return "\n".join(lines)


def launch(
    argv: list[str],
    num_processes: int = 2,
    *,
    cpu_devices: int = 2,
    process_ids: list[int] | None = None,
    timeout: float = 120.0,
    grace: float | None = None,
    env: dict | None = None,
    cwd: str | None = None,
    echo: bool = False,
) -> Launch:
    """Run ``argv`` as processes ``0 .. num_processes - 1`` of one jax.distributed
    job on this machine, each with ``cpu_devices`` CPU devices, and wait for all.

    ``process_ids`` starts only those (a fault test: the others never come).
    Every process is killed ``timeout`` seconds after the launch, and every
    survivor ``grace`` seconds after the first process ended badly (default:
    long enough for jax's own bounds to end it first).  ``echo`` copies each
    line of output as it comes, prefixed ``[process i]``.  Outputs are kept in
    the results.
    """
    if grace is None:
        grace = HEARTBEAT_TIMEOUT_S + COLLECTIVE_TIMEOUT_S + SHUTDOWN_TIMEOUT_S
    port = free_port()
    address = f"{LOOPBACK}:{port}"
    base = dict(os.environ)
    base.update(env or {})
    base.update(
        {
            "JAX_COORDINATOR_ADDRESS": address,
            "JAX_COORDINATOR_BIND_ADDRESS": address,
            "JAX_NUM_CPU_DEVICES": str(cpu_devices),
            "JAX_PLATFORMS": "cpu",
            NUM_PROCESSES_ENV: str(num_processes),
            "PYTHONUNBUFFERED": "1",
        }
    )
    base["XLA_FLAGS"] = _with_collective_timeout(base.get("XLA_FLAGS", ""))
    # gRPC (the coordinator's channel) honours proxy variables: never for loopback.
    for name in ("no_proxy", "NO_PROXY"):
        base[name] = ",".join(filter(None, [base.get(name, ""), LOOPBACK]))

    started = time.monotonic()
    running = {}  # process id -> (Popen, [stdout lines], [stderr lines], reader threads)
    ended = {}  # process id -> ProcessResult
    first_failure = None
    try:
        for i in process_ids if process_ids is not None else range(num_processes):
            proc = subprocess.Popen(
                argv,
                env=dict(base, **{PROCESS_ID_ENV: str(i)}),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
            out, err = [], []
            readers = [
                _reader(proc.stdout, out, f"[process {i}] " if echo else None, sys.stdout),
                _reader(proc.stderr, err, f"[process {i}] " if echo else None, sys.stderr),
            ]
            running[i] = (proc, out, err, readers)
        deadline = started + timeout
        while running:
            now = time.monotonic()
            for i, (proc, out, err, readers) in list(running.items()):
                stopped = ""
                if proc.poll() is None:
                    if now < deadline:
                        continue
                    stopped = (
                        f"still running {grace:g} s after process {first_failure} failed"
                        if first_failure is not None and deadline < started + timeout
                        else f"still running at the launch's {timeout:g} s timeout"
                    )
                    proc.kill()
                    proc.wait()
                for reader in readers:
                    # Bounded too: a child of the process may hold its pipes open.
                    reader.join(timeout=READER_JOIN_S)
                del running[i]
                output = "".join(out), "".join(err)
                ended[i] = ProcessResult(i, proc.returncode, now - started, *output, stopped)
                if proc.returncode != 0 and first_failure is None:
                    first_failure = i
                    deadline = min(deadline, now + grace)
            time.sleep(0.02)
    finally:
        for proc, *_ in running.values():  # the launcher itself failed (Ctrl-C, say)
            proc.kill()
            proc.wait()
    return Launch([ended[i] for i in sorted(ended)], port, first_failure)


def _reader(stream, lines: list, prefix: str | None, echo_to) -> threading.Thread:
    """A thread that keeps a process's output (and echoes it, prefixed)."""

    def read():
        for line in stream:
            lines.append(line)
            if prefix is not None:
                echo_to.write(prefix + line)
                echo_to.flush()
        stream.close()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread
