"""Faults in a two-process job: every process ends, in bounded time, with a
non-zero exit and a message that names the cause.

jax ends some of these with an abort (SIGABRT from its LOG(FATAL)), not a
Python exception; the launcher reports which process failed first and how each
ended.  "Bounded" is checked without timing: a survivor must end by itself,
before the launcher's grace period after the first failure would kill it
(``ProcessResult.stopped`` empty), and the launch's timeout bounds the test.
"""

import signal

from distributed_util import describe, run_workers


def by_id(run):
    return {p.process_id: p for p in run.processes}


def assert_ended_by_itself_with(process, *causes):
    assert not process.stopped and process.returncode != 0, process.how()
    assert any(cause in process.error_line() for cause in causes), process.error_line()


def test_a_dead_worker_ends_the_others():
    run = run_workers("worker_fault.py", "die", 1)
    p = by_id(run)
    assert p[1].returncode == -signal.SIGKILL and run.first_failure == 1, describe(run)
    # The coordinator misses the dead worker's heartbeats and aborts.
    assert_ended_by_itself_with(p[0], "stopped sending heartbeats", "Gloo")
    assert "process 1: killed by SIGKILL" in run.summary() and "(the first to fail)" in run.summary()


def test_a_dead_coordinator_ends_the_others():
    run = run_workers("worker_fault.py", "die", 0)
    p = by_id(run)
    assert p[0].returncode == -signal.SIGKILL and run.first_failure == 0, describe(run)
    assert_ended_by_itself_with(p[1], "coordination service", "Gloo")


def test_a_stuck_peer_fails_the_collective_at_its_timeout():
    # Alive and heartbeating, so only the collective timeout can end this one
    # (jax's default: 30 minutes; fastdispatch.distributed sets 20 s, here 5 s).
    flags = {"XLA_FLAGS": "--xla_cpu_collective_timeout_seconds=5"}
    run = run_workers("worker_fault.py", "stall", 1, env=flags)
    p = by_id(run)
    assert p[0].returncode == 3, describe(run)  # JaxRuntimeError caught, os._exit(3)
    assert "Timed out waiting" in p[0].error_line() and "Gloo" in p[0].error_line()
    # Its coordinator gone, the stuck process is aborted by jax.
    assert_ended_by_itself_with(p[1], "coordination service")


def test_an_unreachable_coordinator_is_a_python_error():
    run = run_workers("worker_fault.py", "none", 0, 3, process_ids=[1])
    (p,) = run.processes
    assert p.returncode == 1 and not p.stopped, describe(run)
    assert "TimeoutError: no jax.distributed coordinator at 127.0.0.1:" in p.error_line()


def test_a_coordinator_whose_peers_never_come_aborts():
    run = run_workers("worker_fault.py", "none", 0, 3, process_ids=[0])
    (p,) = run.processes
    assert p.returncode == -signal.SIGABRT and not p.stopped, describe(run)
    assert "DEADLINE_EXCEEDED" in p.error_line() and "RegisterTask" in p.error_line()
