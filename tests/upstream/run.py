"""Run upstream test suites three ways and compare the outcome of every test.

    python tests/upstream/run.py [--upstream DIR] [--cache DIR] [--suite NAME]...
                                 [--ways stock,routed,traced] [--files PATH...]
                                 [--out DIR] [--json FILE] [--timeout SECONDS] [-- PYTEST-ARGS...]

The ways:
  stock   python -m pytest ...                          the libraries as they are
  routed  python -m fastdispatch -m pytest ...          jax.jit, equinox.filter_jit
                                                        and flax.nnx.jit routed
  traced  python -m fastdispatch --trace -m pytest ...  routed, and --trace's hooks on

Every test that passes stock must pass routed and traced: the runner prints,
per suite, the counts of each way, and every test that passes stock and not
another way, with the start of its error; it exits 1 if there is one.

The suites are the upstream test files of the installed jax, flax and
equinox, never vendored.  Each is looked for as DIR/<library>-v<version>/
(``--upstream``, or the environment's FASTDISPATCH_UPSTREAM), then in the cache
(``--cache``, default ~/.cache/fastdispatch/upstream).  flax's sdist on PyPI
holds its tests, so a missing flax suite is fetched into the cache with pip;
jax's and equinox's sdists hold none: clone their tag (jax-vX.Y.Z, vX.Y.Z) into
DIR/jax-vX.Y.Z, DIR/equinox-vX.Y.Z.  Arguments after ``--`` go to pytest (-k,
a test file, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent

WAYS = {
    "stock": ["-m", "pytest"],
    "routed": ["-m", "fastdispatch", "-m", "pytest"],
    "traced": ["-m", "fastdispatch", "--trace", "-m", "pytest"],
}

OUTCOMES = ("passed", "failed", "error", "skipped", "not run")


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str  # the library whose tests these are (its distribution name)
    tag: str  # the library's git tag of a version, "{version}" to fill in
    paths: tuple  # test files and folders, relative to that folder
    exclude: dict = dataclasses.field(default_factory=dict)  # path -> why it is left out
    env: dict = dataclasses.field(default_factory=dict)  # set for every way
    # pytest's filterwarnings, as each library's own configuration sets it
    # (warnings are errors), less what its configuration needs that we do not install.
    filterwarnings: tuple = ("error",)
    markers: tuple = ()  # pytest's markers, as the library's configuration registers them
    on_pypi: bool = False  # its sdist on PyPI holds tests/

    @property
    def version(self):
        return importlib.metadata.version(self.name)

    @property
    def folder(self):
        """The suite's folder: <library>-v<installed version>."""
        return f"{self.name}-v{self.version}"


SUITES = {
    suite.name: suite
    for suite in [
        Suite(
            "jax",
            "jax-v{version}",
            # lax_autodiff_test: jit in every gradient check; the others are the
            # files that exercise jit itself: its shardings, layouts, memory kinds,
            # typed PRNG keys, arrays and debugging callbacks.
            (
                "tests/lax_autodiff_test.py",
                "tests/api_test.py",
                "tests/pjit_test.py",
                "tests/layout_test.py",
                "tests/memories_test.py",
                "tests/random_test.py",
                "tests/array_test.py",
                "tests/debugging_primitives_test.py",
            ),
            env={
                # jax's own default, unless the environment sets it: each parameterized
                # test samples this many cases, with a fixed seed (jax._src.test_util).
                "JAX_NUM_GENERATED_CASES": "10",
                # jax's CPU runs of its sharding tests: 8 devices (fewer skips them).
                "JAX_NUM_CPU_DEVICES": "8",
            },
            # Unregistered, a marker is an error under filterwarnings=error (pjit_test, array_test).
            markers=("multiaccelerator: a test that can use several accelerators",),
        ),
        Suite(
            "flax",
            "flax-v{version}",
            ("tests/nnx",),
            exclude={"tests/nnx/module_test.py": "imports cloudpickle, which we do not install"},
            filterwarnings=(
                "error",
                # flax's pyproject.toml ignores it: optax sets this config on import.
                "ignore:.*Setting `jax_pmap_shmap_merge` is deprecated in JAX.*:DeprecationWarning",
            ),
            on_pypi=True,
        ),
        Suite(
            "equinox",
            "v{version}",
            ("tests",),
            # equinox's pyproject.toml also adds --jaxtyping-packages=equinox,beartype...
            # to pytest's options: that needs beartype, which we do not install.
        ),
    ]
}


class SuiteMissing(Exception):
    pass


def default_cache():
    """Where fetched suites are kept: FASTDISPATCH_UPSTREAM_CACHE, else the user's cache."""
    fallback = pathlib.Path.home() / ".cache" / "fastdispatch" / "upstream"
    return os.environ.get("FASTDISPATCH_UPSTREAM_CACHE", str(fallback))


def locate(suite, upstream, cache, fetch=True):
    """The folder holding the suite's test files: in ``upstream``, in ``cache``,
    or fetched into ``cache`` from PyPI (flax)."""
    for root in (upstream, cache):
        if root is not None and all((pathlib.Path(root) / suite.folder / p).exists() for p in suite.paths):
            return pathlib.Path(root) / suite.folder
    if not (fetch and suite.on_pypi):
        where = f"{upstream}/{suite.folder}" if upstream else f"--upstream DIR (DIR/{suite.folder})"
        raise SuiteMissing(
            f"{suite.name} {suite.version}'s tests are not in {where} nor in {cache}, and its sdist on "
            f"PyPI holds none: clone its tag {suite.tag.format(version=suite.version)} there"
        )
    return fetch_sdist(suite, pathlib.Path(cache))


def fetch_sdist(suite, cache):
    """Download the suite's sdist from PyPI (pip) and keep its tests/ in the cache."""
    target = cache / suite.folder
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--disable-pip-version-check", "-q", "-d", download, f"{suite.name}=={suite.version}"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            wanted = f"{suite.name}=={suite.version}"
            raise SuiteMissing(f"pip could not download {wanted}:\n{done.stderr[-2000:]}")
        (sdist,) = pathlib.Path(download).glob("*.tar.gz")
        cache.mkdir(parents=True, exist_ok=True)
        partial = pathlib.Path(tempfile.mkdtemp(dir=cache))
        with tarfile.open(sdist) as tar:
            top = f"{suite.name}-{suite.version}/"
            members = [m for m in tar.getmembers() if m.name.startswith(top + "tests/") and m.isfile()]
            for member in members:
                member.name = member.name.removeprefix(top)
            tar.extractall(partial, members=members, filter="data")
        # In place at once, so that a folder in the cache is always whole.
        try:
            partial.rename(target)
        except OSError:  # another run got there first
            if not target.exists():
                raise
    return target


@dataclasses.dataclass
class Run:
    way: str
    tests: dict  # nodeid -> {"outcome", "message", "seconds"}
    session: dict  # how the run was routed, as its tests saw it
    returncode: int
    seconds: float
    log: pathlib.Path


def run_way(suite, root, way, out, pytest_args=(), timeout=None):
    """One way of one suite: pytest in a subprocess, in the suite's folder."""
    out.mkdir(parents=True, exist_ok=True)
    outcomes = out / f"{suite.name}.{way}.jsonl"
    outcomes.unlink(missing_ok=True)
    log = out / f"{suite.name}.{way}.log"
    config = out / f"{suite.name}.ini"
    lines = "\n".join(f"    {w}" for w in suite.filterwarnings)
    markers = "".join(f"\n    {m}" for m in suite.markers)
    config.write_text(f"[pytest]\nfilterwarnings =\n{lines}\nmarkers ={markers}\n")

    command = [sys.executable, *WAYS[way]]
    command += ["-c", str(config), "--rootdir", str(root), "-p", "no:cacheprovider"]
    command += ["-p", "upstream_outcomes", "-q", "-rN", "--color=no", "--continue-on-collection-errors"]
    command += [f"--ignore={root / path}" for path in suite.exclude]
    command += [str(root / path) for path in suite.paths]
    command += list(pytest_args)

    env = {**suite.env, **os.environ}  # the caller's settings win (JAX_NUM_GENERATED_CASES=2)
    env["FASTDISPATCH_OUTCOMES"] = str(outcomes)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the suite's folder may be read-only
    # This plugin, and the fastdispatch that imports here (an in-place build or
    # an installed one), importable from the suite's folder.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), fastdispatch_root(), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    start = time.monotonic()
    with open(log, "w") as stream:
        try:
            returncode = subprocess.run(
                command, cwd=root, env=env, stdout=stream, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = "timeout"
    seconds = time.monotonic() - start
    return Run(way, *read_outcomes(outcomes), returncode, seconds, log)


def fastdispatch_root():
    """The folder to import fastdispatch from: where it imports here (an
    installed one), else the checkout this runner is in (an in-place build)."""
    spec = importlib.util.find_spec("fastdispatch")
    if spec is None:
        return str(HERE.parents[1])
    return str(pathlib.Path(spec.origin).resolve().parents[1])


def read_outcomes(path):
    tests, session = {}, {}
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "session" in record:
                session = record["session"]
            else:
                tests[record.pop("test")] = record
    return tests, session


def compare(runs):
    """Tests that pass the first way (stock) and not another: (test, way, outcome, message)."""
    stock, *others = runs
    differences = []
    for test, result in stock.tests.items():
        if result["outcome"] != "passed":
            continue
        for other in others:
            absent = {"outcome": "not run", "message": f"(pytest exit: {other.returncode})"}
            got = other.tests.get(test, absent)
            if got["outcome"] != "passed":
                differences.append((test, other.way, got["outcome"], got["message"]))
    return differences


def counts(run):
    tally = dict.fromkeys(OUTCOMES[:-1], 0)
    for result in run.tests.values():
        tally[result["outcome"]] += 1
    return tally


def check_routing(run):
    """A run that was not routed as its way says proves nothing: say so."""
    want = {"stock": (False, False), "routed": (True, False), "traced": (True, True)}[run.way]
    got = (run.session.get("routed"), run.session.get("tracing"))
    if got != want:
        saw = run.session or "nothing"
        return f"{run.way}: expected routed={want[0]} tracing={want[1]}, the tests saw {saw}"
    return None


def report(suite, root, runs, differences, problems):
    lines = [f"== {suite.name} {suite.version}: {' '.join(suite.paths)} (in {root})"]
    for path, why in suite.exclude.items():
        lines.append(f"   left out: {path}: {why}")
    for run in runs:
        tally = counts(run)
        summary = ", ".join(f"{n} {outcome}" for outcome, n in tally.items())
        took = f"{run.seconds:.0f} s, exit {run.returncode}"
        lines.append(f"   {run.way:<7} {len(run.tests):>5} tests: {summary}  ({took})")
    lines += [f"   NOT ROUTED AS SAID: {p}" for p in problems]
    if differences:
        lines.append(f"   {len(differences)} passing stock, not passing another way:")
        for test, way, outcome, message in differences:
            lines.append(f"   - {test} [{way}: {outcome}]")
            lines += [f"       {line}" for line in message.strip().splitlines()[:6]]
    else:
        lines.append("   every test that passes stock passes the other ways")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    pytest_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=__doc__.split("\n\n")[1])
    parser.add_argument(
        "--upstream",
        default=os.environ.get("FASTDISPATCH_UPSTREAM"),
        help="a folder holding <library>-v<version>/ checkouts (default: $FASTDISPATCH_UPSTREAM)",
    )
    parser.add_argument("--cache", default=default_cache(), help="where fetched suites are kept")
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), help="(default: all)")
    parser.add_argument("--ways", default=",".join(WAYS), help="stock first (default: %(default)s)")
    parser.add_argument(
        "--files", nargs="+", default=None, help="test files or folders, relative to the suite's folder"
    )
    parser.add_argument("--out", default=None, help="where the logs and outcomes go (default: a temp dir)")
    parser.add_argument("--json", default=None, help="write the counts and differences as JSON")
    parser.add_argument("--timeout", type=float, default=None, help="seconds for one way of one suite")
    options = parser.parse_args(argv)
    ways = options.ways.split(",")
    if ways[0] != "stock" or not set(ways) <= set(WAYS):
        parser.error(f"--ways: stock first, then any of {', '.join(WAYS)}")
    out = pathlib.Path(options.out or tempfile.mkdtemp(prefix="fastdispatch-upstream-"))

    failed = False
    summary = {}
    for name in options.suite or list(SUITES):
        suite = SUITES[name]
        try:
            root = locate(suite, options.upstream, options.cache)
        except SuiteMissing as e:
            print(f"== {name}: {e}", flush=True)
            failed = True
            continue
        if options.files:
            suite = dataclasses.replace(suite, paths=tuple(options.files))
        runs = [run_way(suite, root, way, out, pytest_args, options.timeout) for way in ways]
        differences = compare(runs)
        problems = [p for p in map(check_routing, runs) if p]
        print(report(suite, root, runs, differences, problems), flush=True)
        failed |= bool(differences or problems)
        summary[name] = {
            "version": suite.version,
            "paths": list(suite.paths),
            "excluded": suite.exclude,
            "ways": {r.way: {**counts(r), "seconds": round(r.seconds), "exit": r.returncode} for r in runs},
            "differences": [dict(zip(("test", "way", "outcome", "message"), d)) for d in differences],
            "not_routed_as_said": problems,
        }
    print(f"logs and outcomes: {out}")
    if options.json:
        pathlib.Path(options.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
