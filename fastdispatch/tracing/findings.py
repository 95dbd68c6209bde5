"""Findings: what to change, at the user's line.  The report's model.

``summary(trace)`` is what both the text report and ``--trace-json`` are
made from: the wall-time split (compiled calls, compiling, eager ops, host
syncs, the rest), the executables each function keeps, and the findings,
each at a file and line of the program with a count, the seconds it cost and
one sentence saying what to change:

  recompile_new_object  recompiles whose only change is a new object of the
                        same kind (a lambda made anew, a rebuilt module's
                        bound method) in a static argument or graph attribute
  shape_churn           one argument compiled for many shapes
  new_wrapper           the same signature compiled again through a new jit
  host_sync             device-to-host reads of jax arrays (float(), .item(), ...)
  host_transfer         numpy data converted to device arrays at every call
  eager_ops             jax operations dispatched one by one outside jit

A site must cross a threshold to be a finding (below): a handful of host
reads to print a loss every few epochs is not one, nor are host syncs that
cost under a thousandth of the traced wall time.
"""

from __future__ import annotations

import dataclasses

import jax

from fastdispatch.tracing.names import label, trace_title
from fastdispatch.tracing.sites import short

__all__ = ["Finding", "summary"]

# What makes a finding: the least count at one site (or of one function).
MIN_RECOMPILES_NEW_OBJECT = 1
MIN_SHAPE_RECOMPILES = 2  # three shapes of one argument
MIN_NEW_WRAPPERS = 1
MIN_HOST_SYNCS = 10
MIN_HOST_TRANSFERS = 10
# ... and the least share of the wall time the host syncs at one site cost
# (0.02 s of reads in a three-minute run is clutter).  Timed around each
# read; an eager op on jax's fast path is not always timed (hooks.py).
MIN_WALL_SHARE = 0.001
# Eager ops are kept by their share of the wall alone, whatever their count:
# a model's init runs a few ops at each of many lines, all under one call.
MIN_EAGER_SHARE = 0.02
# Of an eager-op finding's time, the share compiling from which it advises
# --warm-start (which keeps jax's compiles of eager ops) beside jitting.
EAGER_COMPILE_SHARE = 0.5

KINDS = ("recompile_new_object", "shape_churn", "new_wrapper", "host_sync", "host_transfer", "eager_ops")


@dataclasses.dataclass
class Finding:
    kind: str  # one of KINDS
    file: str  # the user's file, relative to the working directory when below it
    line: int
    count: int  # recompiles, host reads, calls or operations
    seconds: float  # the time they took
    message: str  # what happened and what to change
    function: str = ""  # the compiled function concerned, "name (file:line)"

    def as_dict(self):
        return dataclasses.asdict(self)


def summary(trace) -> dict:
    """The whole report as data (JSON-ready): title, wall time and its split,
    the function table, the executables kept, the findings."""
    from fastdispatch._jax import process_of_program

    functions = trace.function_stats()
    wall_ns = trace._wall_ns()
    # Shares that keep a finding are of the program's own wall, start-up apart.
    traced_ns = wall_ns - trace.start_up_ns
    findings = _function_findings(functions, trace._cwd, label) + _site_findings(trace, traced_ns)
    findings.sort(key=lambda f: -f.seconds)
    syncs = sync_by_function(trace.tally)
    return {
        "title": trace_title(process_of_program()),
        "wall_seconds": wall_ns / 1e9,
        "split": wall_split(functions, wall_ns, trace.tally, trace.start_up_ns),
        "functions": [_with_syncs(s.as_dict(wall_ns), syncs.get((s.name, s.location))) for s in functions],
        "executables": executables(trace, functions, label),
        "findings": [f.as_dict() for f in findings],
        # the wall time by the program's line, from the sampled main thread
        "lines": trace.sampler.by_line(trace._cwd) if trace.sampler is not None else [],
        # every site of eager ops and of host transfers, whatever its count
        "eager_sites": _eager_sites(trace),
        "transfer_sites": _transfer_sites(trace),
    }


def _with_syncs(function, syncs):
    """A function's row with the host syncs that read its outputs."""
    count, ns = syncs or (0, 0)
    return {**function, "host_syncs": count, "host_sync_seconds": ns / 1e9}


def _eager_sites(trace) -> list:
    tally = trace.tally
    if tally is None:
        return []
    sites = [
        {
            **_where(site, trace._cwd),
            "count": count,
            "seconds": ns / 1e9,
            "compile_seconds": compile_ns / 1e9,
            "building": tally.built.get(site, ""),
            "inside": tally.called.get(site, ""),
        }
        for site, (count, ns, compile_ns) in tally.eager.items()
        if site is not None
    ]
    return sorted(sites, key=lambda row: -row["seconds"])


def _transfer_sites(trace) -> list:
    sites = [
        {
            **_where(site, trace._cwd),
            "calls": calls,
            "bytes": size,
            "seconds": ns / 1e9,
            "handed_off": handed_off,
        }
        for site, (calls, size, ns, handed_off) in trace._transfers.items()
        if site is not None
    ]
    return sorted(sites, key=lambda row: -row["seconds"])


def _where(site, cwd) -> dict:
    file, _, line = short(site, cwd).rpartition(":")
    return {"file": file, "line": int(line)}


def wall_split(functions, wall_ns, tally, start_up_ns=0) -> dict:
    """Seconds of the traced wall time by where they went; ``eager_ops`` and
    ``host_syncs`` are None where they were not watched (``trace()`` from Python);
    ``start_up``: the process's life before the trace began (Python, imports)."""
    compiling = sum(s.compile_ns for s in functions) / 1e9
    in_calls = sum(s.call_ns for s in functions) / 1e9 - compiling
    eager = tally.eager_seconds() if tally is not None else None
    syncs = tally.sync_seconds() if tally is not None else None
    start_up = start_up_ns / 1e9
    rest = wall_ns / 1e9 - start_up - in_calls - compiling - (eager or 0.0) - (syncs or 0.0)
    return {
        "start_up": start_up,
        "compiled_calls": in_calls,
        "compiling": compiling,
        "compile_phases": dict(tally.compile_seconds) if tally is not None else {},
        # jax's persistent cache: whether it is on; compiles that asked it, served by it, written to it
        "jax_cache": dict(tally.jax_cache, on=_jax_cache_on()) if tally is not None else None,
        "eager_ops": eager,
        "host_syncs": syncs,
        "rest": max(rest, 0.0),
        # Overlapping the above: the device's time past the launches, from the sampled calls.
        "device_work": min(_device_work(functions), wall_ns / 1e9),
        # Inside the above: Python's garbage collector, and its collections by generation.
        "garbage_collection": tally.gc_seconds() if tally is not None else None,
        "gc_collections": list(tally.gc_collections) if tally is not None else None,
    }


def _jax_cache_on() -> bool:
    # jax asks its cache (and says so) even with no directory set: it is on with one.
    return bool(jax.config.jax_compilation_cache_dir) and bool(jax.config.jax_enable_compilation_cache)


def _device_work(functions):
    return sum(s.device_seconds() or 0.0 for s in functions)


def executables(trace, functions, label) -> list:
    """Per function: the executables the shared cache keeps for it, the
    device memory they hold (XLA's memory analysis; None where no executable
    of the fast path says), and how many recompiles were for signatures that
    differ only by object identity."""
    from fastdispatch.core.cache import default_cache

    kept, memory = {}, {}
    for entry in default_cache().entries():
        found = trace._compiled.get(id(entry.signature))
        if found is not None and found[0] is entry.signature:
            kept[found[1]] = kept.get(found[1], 0) + 1
            size = entry.executable.memory_bytes() if entry.executable is not None else None
            if size is not None:
                memory[found[1]] = memory.get(found[1], 0) + size
    rows = []
    for s in functions:
        identity = sum(c.count for (kind, _), c in s.causes.items() if kind == "new_object")
        rows.append(
            {
                "function": label(s),
                "compiles": s.compiles,
                "kept": kept.get((s.name, s.location), 0),
                "identity_only": identity,
                "memory_bytes": memory.get((s.name, s.location)),
            }
        )
    return rows


def _function_findings(functions, cwd, label) -> list:
    findings = []
    for s in functions:
        for (kind, paths), cause in s.causes.items():
            site = cause.sites.most_common(1)[0][0] if cause.sites else None
            if site is None:
                continue
            if kind == "new_object" and cause.count >= MIN_RECOMPILES_NEW_OBJECT:
                findings.append(_new_object(s, paths, cause, site, cwd, label))
            elif kind == "shape" and cause.count >= MIN_SHAPE_RECOMPILES:
                findings.append(_shape_churn(s, paths, cause, site, cwd, label))
            elif kind == "new_wrapper" and cause.count >= MIN_NEW_WRAPPERS:
                findings.append(_new_wrapper(s, cause, site, cwd, label))
    return findings


def _new_object(s, paths, cause, site, cwd, label):
    names = _names(paths)
    made = f" (made at {short(cause.made_at, cwd)})" if cause.made_at else ""
    message = (
        f"{s.name} compiled {_more(cause.count)}: {names} held a new object{made}, compared by identity; "
        f"make it once, outside the loop (a module-level function, not a lambda)"
    )
    return _finding("recompile_new_object", site, cause.count, cause.ns, message, cwd, label(s))


def _shape_churn(s, paths, cause, site, cwd, label):
    names = _names(paths)
    latest = _clipped(cause.shapes[-1], 60) if cause.shapes else ""
    message = (
        f"{s.name} compiled {_more(cause.count)} for new shapes ({latest}); "
        f"pad {names} to a few sizes (buckets, or a mask)"
    )
    return _finding("shape_churn", site, cause.count, cause.ns, message, cwd, label(s))


def _new_wrapper(s, cause, site, cwd, label):
    message = (
        f"{s.name} compiled {_more(cause.count)}, unchanged, through a new jit wrapper made on this line; "
        f"make the jit once, outside the loop"
    )
    return _finding("new_wrapper", site, cause.count, cause.ns, message, cwd, label(s))


def _site_findings(trace, wall_ns) -> list:
    """host_transfer, host_sync and eager_ops: one finding per call site
    past its kind's thresholds."""
    candidates = [
        ("host_transfer", MIN_HOST_TRANSFERS, site, calls, ns, _transfer_message(calls, size, handed_off), "")
        for site, (calls, size, ns, handed_off) in trace._transfers.items()
    ]
    tally = trace.tally
    if tally is not None:
        by_site = {}
        for (site, how), (count, ns) in tally.syncs.items():
            entry = by_site.setdefault(site, [0, 0, [], {}])
            entry[0] += count
            entry[1] += ns
            entry[2].append(how)
            for key, (_, owner_ns) in tally.sync_owners.get((site, how), {}).items():
                entry[3][key] = entry[3].get(key, 0) + owner_ns
        candidates += [
            ("host_sync", MIN_HOST_SYNCS, site, count, ns, *_sync_message(trace, count, hows, owners))
            for site, (count, ns, hows, owners) in by_site.items()
            if ns >= MIN_WALL_SHARE * wall_ns
        ]
        candidates += [
            (
                "eager_ops",
                1,
                site,
                count,
                ns,
                _eager_message(count, ns, compile_ns, tally.built.get(site), tally.called.get(site)),
                "",
            )
            for site, (count, ns, compile_ns) in tally.eager.items()
            if ns >= MIN_EAGER_SHARE * wall_ns
        ]
    return [
        _finding(kind, site, count, ns, message, trace._cwd, function)
        for kind, least, site, count, ns, message, function in candidates
        if site is not None and count >= least
    ]


def sync_by_function(tally) -> dict:
    """Function key -> [syncs, ns]: the host syncs that read its outputs."""
    totals = {}
    for owners in tally.sync_owners.values() if tally is not None else ():
        for key, (count, ns) in owners.items():
            entry = totals.setdefault(key, [0, 0])
            entry[0] += count
            entry[1] += ns
    return totals


def _transfer_message(calls, total_bytes, handed_off):
    sent = f"numpy data put on the device every call ({_bytes(total_bytes // calls)} a call, {calls} calls)"
    if handed_off * 2 > calls:
        # Handed off for its host data (docs/tracing.md, "numpy arguments"):
        # new data every step (an environment's observation) stays there.
        return f"{sent} by jax.jit, faster here than the fast path; on-device data runs on the fast path"
    return f"{sent}; jax.device_put it once before the loop, or slice device-resident data"


def _sync_message(trace, count, hows, owners):
    """The message of a host-sync finding and the function whose outputs most
    of its reads waited for ("" if none is known)."""
    owner = trace._functions[max(owners, key=owners.get)] if owners else None
    read = "an output of " + owner.name if owner is not None else "a jax array"
    message = (
        f"{' and '.join(sorted(set(hows)))} of {read} waits for the device, {_times(count)}; "
        f"keep values on the device (accumulate in the step) and read them every N steps"
    )
    return message, label(owner) if owner is not None else ""


def _eager_message(count, ns, compile_ns, built, called):
    ops = f"{count} jax ops one by one"
    compiling = f", {compile_ns / 1e9:.2f} of {ns / 1e9:.2f} s compiling them" if compile_ns else ""
    warm = ", or run with --warm-start" if compile_ns >= EAGER_COMPILE_SHARE * ns else ""
    if built:
        return f"{ops} while building {built} here{compiling}; build it under jit{warm}, or once"
    if called:
        name = called.rpartition(".")[2]
        example = f" (jax.jit(model.{name}))" if name in ("init", "apply", "init_with_output") else ""
        return f"{ops} inside {called} here{compiling}; jit the call{example}{warm}"
    return (
        f"{ops} outside jit here{compiling}; move them into the jitted function (or jit the loop body){warm}"
    )


# The longest message a finding prints (on one line, under its site).
MAX_MESSAGE = 156


def _finding(kind, site, count, ns, message, cwd, function=""):
    where = short(site, cwd)
    file, _, line = where.rpartition(":")
    return Finding(kind, file, int(line), count, ns / 1e9, _clipped(message, MAX_MESSAGE), function)


def _names(paths, limit=60):
    """The paths a finding names, clipped: ``x, y`` or ``x, y and 3 more``."""
    paths = list(paths)
    text = ", ".join(paths)
    if len(text) <= limit:
        return text
    shown = []
    for path in paths:
        if len(", ".join(shown + [path])) > limit - 12:
            break
        shown.append(path)
    if not shown:
        return _clipped(paths[0], limit - 12) + f" and {len(paths) - 1} more"
    return ", ".join(shown) + f" and {len(paths) - len(shown)} more"


def _clipped(text, limit):
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _more(n):
    return "once more" if n == 1 else f"{n} more times"


def _times(n):
    return "once" if n == 1 else f"{n} times"


def _bytes(n):
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"
