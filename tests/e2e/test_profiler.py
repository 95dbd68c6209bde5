"""jax.profiler sees fastdispatch's calls: a real capture, read back with jax's ProfileData.

Each capture runs in a fresh process (``subprocess_util``): a profiler session
is process-wide, and these tests must not leave one behind in pytest's.  The
spans are nested by time on each thread's line of the ``/host:CPU`` plane, as
TensorBoard and Perfetto show them.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess
import sys
import threading

from subprocess_util import run_in_subprocess

# -- reading a capture -----------------------------------------------------------


def xplane_file(log_dir):
    (path,) = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.xplane.pb"))
    return path


def host_forests(log_dir):
    """One forest per thread line of the host plane: nodes ``(name, stats, children)``,
    nested by [start, end] containment; events starting with '$' (the Python
    tracer's frames) are skipped, their children kept."""
    import jax

    profile = jax.profiler.ProfileData.from_file(xplane_file(log_dir))
    forests = []
    for line in profile.find_plane_with_name("/host:CPU").lines:
        kept = [e for e in line.events if not e.name.startswith("$")]
        events = sorted(
            ((e.name, e.start_ns, e.end_ns, dict(e.stats)) for e in kept), key=lambda e: (e[1], -e[2])
        )
        roots, stack = [], []
        for name, start, end, stats in events:
            node = (name, stats, [])
            while stack and not (stack[-1][0] <= start and end <= stack[-1][1]):
                stack.pop()
            (stack[-1][2][2] if stack else roots).append(node)
            stack.append((start, end, node))
        forests.append(roots)
    return forests


def find(nodes, name):
    """Every node of this name, depth first, in time order."""
    for node in nodes:
        if node[0] == name:
            yield node
        yield from find(node[2], name)


def children(node):
    """The names of a span's children, less jaxlib's housekeeping spans, which
    land between a call's phases as jax's version and the moment have it
    (``PythonRefManager::CollectGarbage``, ``Wait for usage holds``)."""
    return [child[0] for child in node[2] if not _housekeeping(child[0])]


def _housekeeping(name):
    return name.startswith("PythonRefManager::") or name.startswith("Wait for ")


def descendants(node):
    """The names of every span below this one."""
    for child in node[2]:
        yield child[0]
        yield from descendants(child)


def show(nodes, depth=0):
    """The spans for an assertion message: three levels deep, the calls' subtrees only."""
    if depth == 0:
        nodes = [n for n in nodes if n[0].startswith(("FastDispatch(", "PjitFunction("))]
    if depth == 3:
        return ""
    return "".join("  " * depth + f"{n[0]} {n[1] or ''}\n" + show(n[2], depth + 1) for n in nodes)


# -- the captures (run in a subprocess) ----------------------------------------------


def capture_calls_of_every_kind(log_dir):
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    import fastdispatch

    def step(x, y):
        return x * 2 + y

    def scaled(x, factor):
        return x * factor

    def broken(x):
        return x + jnp.ones(x.shape[0] + 1)

    fast, slow = fastdispatch.jit(step), jax.jit(step)
    tree = fastdispatch.jit(lambda p: {k: v + 1 for k, v in p.items()})
    part = fastdispatch.jit(functools.partial(scaled, factor=3.0))
    fails = fastdispatch.jit(broken)
    x, y, z = jnp.ones(4), jnp.ones(8), jnp.ones(8)
    fast(x, x)
    slow(x, x)
    tree({"a": x})
    part(x)
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # smaller, faster captures: TraceMe spans only
    with fastdispatch.trace() as dispatch_trace:  # --trace's recorder, at the same time
        with jax.profiler.trace(log_dir, create_perfetto_trace=True, profiler_options=options):
            fast(x, x)  # 1 hit by find's guard: the previous call's layout is made from it
            slow(x, x)  # jax.jit's own call, for its span name
            fast(y, z)  # 2 miss: compiled by jax.jit inside our compile span
            fast(x, x)  # 3 hit after a full lookup (not the previous call's signature)
            tree({"a": x})  # 4 hit by the guard after flattening
            part(x)  # 5 a partial: named after the function inside (find's guard, as 1)
            fast(np.ones(4, np.float32), x)  # 6 miss with a numpy argument
            fast(np.ones(4, np.float32), x)  # 7 numpy: jax.jit runs it
            jax.jit(lambda v: fast(v, v))(x)  # 8 under a transformation
            try:
                fails(x)  # 9 raises while compiling
            except TypeError:
                pass
            fast(x, x)  # 10 after the error: not inside its span
            worker = threading.Thread(target=lambda: fast(x, x), name="worker")
            worker.start()
            worker.join()
    forests = host_forests(log_dir)
    everything = [node for forest in forests for node in forest]
    ours = list(find(everything, "FastDispatch(step)"))
    text = show(everything)
    assert len(ours) == 8, text  # calls 1, 2, 3, 6, 7, 10, the one inside 8, the worker's

    # jax.jit names its span after the same function name.
    assert list(find(everything, "PjitFunction(step)")), text
    assert [children(n) for n in find(everything, "FastDispatch(scaled)")] == [
        ["flatten", "signature", "launch"]
    ], text

    main = next(forest for forest in forests if list(find(forest, "FastDispatch(<lambda>)")))
    calls = [n for n in main if n[0].startswith("FastDispatch(") or n[0].startswith("PjitFunction(<lambda>)")]
    shapes = [(n[0], children(n)) for n in calls]
    assert shapes[:6] == [
        ("FastDispatch(step)", ["flatten", "signature", "launch"]),
        ("FastDispatch(step)", ["flatten", "signature", "lookup", "compile", "build entry"]),
        ("FastDispatch(step)", ["flatten", "signature", "lookup", "launch"]),
        ("FastDispatch(<lambda>)", ["flatten", "signature", "launch"]),
        ("FastDispatch(scaled)", ["flatten", "signature", "launch"]),
        ("FastDispatch(step)", ["flatten", "signature", "lookup", "compile", "build entry"]),
    ], text
    # The numpy call again: its entry's executable declines it at its launch
    # (the argument array's guard, laid out now, hands the next off before).
    assert shapes[6] == ("FastDispatch(step)", ["flatten", "signature", "launch", "jax.jit"]), text
    assert shapes[8] == ("FastDispatch(broken)", ["flatten", "signature", "lookup", "compile"]), text
    assert shapes[9] == ("FastDispatch(step)", ["flatten", "signature", "lookup", "launch"]), text

    # A miss: jax.jit's first call, with its compile, nests inside ours.
    compile_span = next(find([calls[1]], "compile"))
    assert children(compile_span) == ["PjitFunction(step)"], text
    assert list(find([compile_span], "backend_compile_and_load")), text
    # A hand-off says why, and jax.jit's call nests inside.
    handoff = next(find([calls[6]], "jax.jit"))
    assert handoff[1] == {"reason": "numpy arguments"}, text
    assert children(handoff) == ["PjitFunction(step)"], text
    # Under a transformation: jax traces our call inside its own.
    (outer_jit,) = [n for n in calls if n[0] == "PjitFunction(<lambda>)"]
    (inner,) = find([outer_jit], "FastDispatch(step)")
    assert children(inner) == ["flatten", "jax.jit"] and next(find([inner], "jax.jit"))[1] == {
        "reason": "tracer"
    }, text
    # A launch holds the executable's run.
    launch = next(find([calls[0]], "launch"))
    # (jaxlib's span name: CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice
    # in jax 0.9 and 0.10, PjRtCpuExecutable::Execute in 0.8)
    assert any("Execute" in name for name in descendants(launch)), text
    # The worker thread's call is on its own line.
    (worker_forest,) = [f for f in forests if f is not main and list(find(f, "FastDispatch(step)"))]
    assert [children(n) for n in find(worker_forest, "FastDispatch(step)")] == [
        ["flatten", "signature", "launch"]
    ]

    # --trace recorded the same calls.
    stats = {row["name"].rpartition(".")[2]: row for row in dispatch_trace.stats().values()}
    assert (stats["step"]["calls"], stats["step"]["compiles"]) == (8, 2), stats["step"]
    # (the numpy miss is a compile: its entry runs calls whose numpy bytes repeat)
    assert stats["step"]["hand_offs"] == {"numpy arguments": 1, "tracer": 1}, stats["step"]["hand_offs"]
    for (_, _), times, *_ in dispatch_trace.latest_calls():
        assert list(times) == sorted(times) and times[0] > 0

    # The Chrome-format file Perfetto opens has the same spans.
    (perfetto,) = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "perfetto_trace.json.gz"))
    with gzip.open(perfetto, "rt") as f:
        names = {event.get("name") for event in json.load(f)["traceEvents"]}
    assert {"FastDispatch(step)", "flatten", "launch", "compile", "PjitFunction(step)"} <= names


def capture_with_the_python_tracer(log_dir):
    import jax
    import jax.numpy as jnp

    import fastdispatch
    from fastdispatch import _jax

    @fastdispatch.jit
    def step(x):
        return x + 1

    x = jnp.ones(3)
    step(x)
    assert not _jax.TRACE_ME.is_enabled()
    jax.profiler.start_trace(log_dir)  # default options: the Python tracer on too
    try:
        assert _jax.TRACE_ME.is_enabled()
        step(x)
        step(jnp.ones(5))
    finally:
        jax.profiler.stop_trace()
    assert not _jax.TRACE_ME.is_enabled()
    step(x)  # off again: nothing recorded, nothing left open
    everything = [node for forest in host_forests(log_dir) for node in forest]
    spans = [children(n) for n in find(everything, "FastDispatch(step)")]
    # The call after a miss passes find's guard (which lays out the argument
    # array's guard for the next); a miss compiles.
    hit, miss = (
        ["flatten", "signature", "launch"],
        ["flatten", "signature", "lookup", "compile", "build entry"],
    )
    assert spans == [hit, miss], show(everything)


def test_calls_appear_on_the_host_timeline(tmp_path):
    run_in_subprocess(capture_calls_of_every_kind, str(tmp_path), n_devices=1)


def test_start_trace_with_default_options(tmp_path):
    run_in_subprocess(capture_with_the_python_tracer, str(tmp_path), n_devices=1)


PROFILED_PROGRAM = """\
import sys

import jax
import jax.numpy as jnp

@jax.jit  # patched: fastdispatch.jit
def train_step(w, x):
    return w - 0.1 * x

w, x = jnp.ones(3), jnp.ones(3)
options = jax.profiler.ProfileOptions()
options.python_tracer_level = 0
with jax.profiler.trace(sys.argv[1], profiler_options=options):
    for _ in range(3):
        w = train_step(w, x)
w.block_until_ready()
"""


def test_trace_cli_and_jax_profiler_together(tmp_path):
    (tmp_path / "program.py").write_text(PROFILED_PROGRAM)
    log_dir = tmp_path / "profile"
    proc = subprocess.run(
        [sys.executable, "-m", "fastdispatch", "--trace", "program.py", str(log_dir)],
        cwd=tmp_path,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stderr.splitlines() if line.startswith("train_step ("))
    assert row.split()[2:5] == ["3", "2", "1"], row  # calls, hits, compiles
    everything = [node for forest in host_forests(str(log_dir)) for node in forest]
    spans = [children(n) for n in find(everything, "FastDispatch(train_step)")]
    assert spans == [
        ["flatten", "signature", "lookup", "compile", "build entry"],
        # a fed-back output: new aval objects, equal ones (find's guard takes
        # them, and lays out the argument array's guard, which the next passes)
        ["flatten", "signature", "launch"],
        ["flatten", "launch"],
    ], show(everything)
