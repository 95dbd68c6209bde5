"""fastdispatch.distributed without jax: the launcher's watchdog, its report,
and initialize()'s refusals.  tests/distributed/ runs real jobs."""

import signal
import sys

import pytest

from fastdispatch import distributed
from fastdispatch.distributed import Launch, ProcessResult, launch


def python(code):
    return [sys.executable, "-c", code]


def test_every_process_gets_its_place_and_the_bounds():
    code = (
        "import os; print(*(os.environ[k] for k in ('FASTDISPATCH_PROCESS_ID', 'FASTDISPATCH_NUM_PROCESSES',"
        " 'JAX_COORDINATOR_ADDRESS', 'JAX_COORDINATOR_BIND_ADDRESS', 'JAX_NUM_CPU_DEVICES', 'no_proxy',"
        " 'XLA_FLAGS')))"
    )
    env = {"XLA_FLAGS": "--xla_dump_to=/dev/null", "no_proxy": "example.org"}
    run = launch(python(code), 3, cpu_devices=4, env=env, timeout=30)
    assert run.ok and run.first_failure is None, run.summary()
    address = f"127.0.0.1:{run.port}"
    for i, p in enumerate(run.processes):
        assert p.stdout.split() == [
            str(i),
            "3",
            address,
            address,
            "4",
            "example.org,127.0.0.1",
            "--xla_dump_to=/dev/null",
            "--xla_cpu_collective_timeout_seconds=20",
        ]


def test_the_first_failure_is_named_and_survivors_are_killed_after_the_grace():
    code = (
        "import os, time\n"
        "if os.environ['FASTDISPATCH_PROCESS_ID'] == '1': raise RuntimeError('boom')\n"
        "time.sleep(60)"
    )
    run = launch(python(code), 2, timeout=30, grace=0.5)
    first, survivor = run.processes[1], run.processes[0]
    assert run.first_failure == 1 and first.returncode == 1 and "boom" in first.stderr
    assert survivor.returncode == -signal.SIGKILL
    assert survivor.stopped == "still running 0.5 s after process 1 failed"
    summary = run.summary().splitlines()
    assert summary[0] == f"process 1: exited 1 after {first.seconds:.1f} s (the first to fail): " + (
        "RuntimeError: boom"
    )
    assert summary[1].startswith("process 0: killed by the launcher: " + survivor.stopped)
    assert not run.ok


def test_the_timeout_kills_everything_and_says_so():
    run = launch(python("import time; time.sleep(60)"), 2, timeout=0.5)
    assert [p.stopped for p in run.processes] == ["still running at the launch's 0.5 s timeout"] * 2
    assert all(p.returncode == -signal.SIGKILL for p in run.processes)


def test_only_the_given_processes_start_and_echo_prefixes_their_lines(capsys):
    run = launch(python("print('hello')"), 2, process_ids=[1], echo=True, timeout=30)
    assert [p.process_id for p in run.processes] == [1] and run.ok
    assert "[process 1] hello\n" in capsys.readouterr().out


JAX_ABORT = """\
E1201 03:21:39.974577    6440 coordination_service_agent.cc:289] Polled an error
F1201 03:21:39.974782    6440 client.h:80] Terminating process because the JAX distributed service detected \
fatal errors. This most likely indicates that another task died; see the other task logs for more details. \
absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):
1
The tasks have crashed.

RPC: /xla.coordination.CoordinationService/PollForError
*** Check failure stack trace: ***
    @     0x7f89c1340634  absl::lts_20260107::log_internal::LogMessage::SendToLog()
"""


@pytest.mark.parametrize(
    "returncode, stderr, how, why",
    [
        (
            -signal.SIGABRT,
            JAX_ABORT,
            "aborted (SIGABRT)",
            "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats): 1 "
            "The tasks have crashed. RPC: /xla.coordination.CoordinationService/PollForError",
        ),
        (1, "Traceback ...\nTimeoutError: no coordinator\n", "exited 1", "TimeoutError: no coordinator"),
        (-signal.SIGKILL, "", "killed by SIGKILL", ""),
        (0, "", "exited 0", ""),
    ],
)
def test_how_a_process_ended_and_why(returncode, stderr, how, why):
    p = ProcessResult(0, returncode, 1.0, "", stderr)
    assert p.how() == how and p.error_line() == why


def test_summary_orders_processes_by_their_end():
    late = ProcessResult(0, -signal.SIGABRT, 11.0, "", JAX_ABORT)
    early = ProcessResult(1, -signal.SIGKILL, 1.0, "", "")
    lines = Launch([late, early], 1234, first_failure=1).summary().splitlines()
    assert lines[0] == "process 1: killed by SIGKILL after 1.0 s (the first to fail)"
    assert lines[1].startswith("process 0: aborted (SIGABRT) after 11.0 s: UNAVAILABLE: The following tasks")


def test_initialize_needs_the_launcher_and_loopback(monkeypatch):
    monkeypatch.delenv("FASTDISPATCH_PROCESS_ID", raising=False)
    with pytest.raises(RuntimeError, match="FASTDISPATCH_PROCESS_ID is not set: start this program with"):
        distributed.initialize()
    monkeypatch.setenv("FASTDISPATCH_PROCESS_ID", "1")
    monkeypatch.setenv("FASTDISPATCH_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    with pytest.raises(ValueError, match="for 127.0.0.1 only"):
        distributed.initialize()


def test_waiting_for_a_coordinator_that_never_comes_is_a_timeout_error():
    port = distributed.free_port()  # nobody listens on it
    with pytest.raises(TimeoutError, match=f"no jax.distributed coordinator at 127.0.0.1:{port} after 0.2 s"):
        distributed._wait_for_port("127.0.0.1", port, 0.2)
