"""A pytest plugin that writes every test's outcome, one JSON line each, to the
file named by ``FASTDISPATCH_OUTCOMES``: the runner (``run.py``) loads it into
the upstream suites' pytest with ``-p upstream_outcomes``.

A line is written as soon as a test ends, so that a run that crashes leaves
the outcomes of the tests before the crash.  A test's outcome is the worst of
its phases: ``failed`` (its call failed), ``error`` (its setup or teardown
failed, or its module did not collect), ``skipped`` (xfail included), else
``passed``.
"""

from __future__ import annotations

import json
import os

_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


class Outcomes:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole session)
        self.tests = {}  # nodeid -> the outcome so far, its message, its seconds

    def pytest_runtest_logreport(self, report):
        outcome = report.outcome
        if outcome == "failed" and report.when != "call":
            outcome = "error"
        test = self.tests.setdefault(report.nodeid, {"outcome": "passed", "message": "", "seconds": 0.0})
        test["seconds"] += report.duration
        if _RANK[outcome] > _RANK[test["outcome"]]:
            test["outcome"] = outcome
            test["message"] = message(report)
        if report.when == "teardown":
            self.write(report.nodeid, self.tests.pop(report.nodeid))

    def pytest_collectreport(self, report):
        if report.failed:
            self.write(report.nodeid, {"outcome": "error", "message": message(report), "seconds": 0.0})

    def write(self, nodeid, test):
        self.file.write(json.dumps({"test": nodeid, **test}) + "\n")
        self.file.flush()

    def write_session(self):
        self.file.write(json.dumps({"session": session()}) + "\n")
        self.file.flush()

    def pytest_sessionfinish(self):
        for nodeid, test in self.tests.items():  # a test whose teardown never ran
            self.write(nodeid, test)
        self.write_session()
        self.file.close()


def message(report):
    """Where and how the test failed (or why it skipped), in a few lines."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (file, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return f"{crash.path}:{crash.lineno}: {crash.message}"
    return str(longrepr)[-2000:]


def pytest_configure(config):
    path = os.environ.get("FASTDISPATCH_OUTCOMES")
    if path:
        outcomes = Outcomes(path)
        outcomes.write_session()
        config.pluginmanager.register(outcomes, "fastdispatch-outcomes")


def session():
    """How this run is routed, as the tests see it: proof that a routed run was
    routed and a traced one watched (and that a stock one was neither).
    Written at the start, and again at the end, when the tests have imported
    equinox or flax, and the jits in them are seen too."""
    import sys

    import jax

    jits = {"jax.jit": jax.jit}
    if "equinox" in sys.modules:
        jits["equinox.filter_jit"] = sys.modules["equinox"].filter_jit
    if "flax.nnx" in sys.modules:
        jits["flax.nnx.jit"] = sys.modules["flax.nnx"].jit
    seen = {name: f"{jit.__module__}.{jit.__qualname__}" for name, jit in jits.items()}
    routed = tracing = False
    if "fastdispatch" in sys.modules:  # a stock run never imports it
        import fastdispatch
        from fastdispatch import tracing as fastdispatch_tracing

        ours = {"jax.jit": fastdispatch.jit}  # (under --trace, a wrapper that remembers sites)
        if "equinox.filter_jit" in jits:
            from fastdispatch.equinox import filter_jit

            ours["equinox.filter_jit"] = filter_jit
        if "flax.nnx.jit" in jits:
            from fastdispatch.nnx import jit

            ours["flax.nnx.jit"] = jit
        routed = all(jits[name] is ours[name] for name in jits)
        tracing = any(getattr(t, "tally", None) is not None for t in fastdispatch_tracing._active)
    return {**seen, "routed": routed, "tracing": tracing}
