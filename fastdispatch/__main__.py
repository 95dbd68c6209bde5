"""The command line: run a Python program with jax.jit routed through fastdispatch.

    python -m fastdispatch [--trace] [--trace-json FILE] [--trace-out FILE.json]
                           [--warm-start DIR [--warm-start-max-bytes N]
                                             [--warm-start-checked]]
                           [--no-patch] script.py [args...]
    python -m fastdispatch [options] -m module [args...]
    python -m fastdispatch bench [args...]

The program runs as ``python script.py`` would run it: its own ``sys.argv``,
``__main__``, ``sys.path[0]``, exit code and tracebacks.  ``--trace`` prints
a report of every compiled-function call on stderr at exit, with findings
(what to change, at the program's line); ``--trace-json`` writes that report
as JSON; ``--trace-out``
writes the calls as Chrome trace-event JSON (open it in ui.perfetto.dev).
Under ``jax.distributed`` every process reports for itself: the report's
header and the file's name carry the process index.  ``--warm-start DIR``
keeps every compiled executable in DIR and loads it there in later runs,
skipping tracing and compiling; ``--warm-start-checked`` keys each call on
its traced program instead, skipping lowering and compiling
(docs/warm-start.md).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import types

USAGE = """\
usage: python -m fastdispatch [--trace] [--trace-json FILE] [--trace-out FILE.json]
                              [--warm-start DIR [--warm-start-max-bytes N]
                                                [--warm-start-checked]]
                              [--no-patch] script.py [args...]
       python -m fastdispatch [options] -m module [args...]
       python -m fastdispatch bench [args...]

Runs a Python program with jax.jit routed through fastdispatch.jit.

options:
  --trace               print a dispatch report on stderr at exit: calls, hits,
                        compiles, hand-offs, overhead per function, and what
                        changed in the signature at each recompile; where the
                        wall time went (compiled calls, compiling, eager ops,
                        host syncs) and findings: what to change, at your line
  --trace-json FILE     write that report (split, functions, findings) as JSON
  --trace-out FILE.json write the calls as Chrome trace-event JSON (Perfetto);
                        in a program of several processes (jax.distributed),
                        each writes FILE.processN.json, N its process index
  --warm-start DIR      keep every executable jit compiles in DIR, and in later
                        runs load it from there instead of tracing and
                        compiling (jit, jax.jit, filter_jit, nnx.jit)
  --warm-start-max-bytes N
                        bound DIR to N bytes, least recently used first
                        (default 1 GiB)
  --warm-start-checked  trace every call first and key it on the traced
                        program: a load skips lowering and compiling only,
                        and functions the normal key refuses are stored
                        (jit, jax.jit; docs/warm-start.md)
  --no-patch            leave jax.jit alone (trace only code that calls
                        fastdispatch.jit itself)
  -m module             run a library module as a script, like python -m
  -h, --help            show this message
"""

PROG = "python -m fastdispatch"


@dataclasses.dataclass
class Options:
    trace: bool = False
    trace_out: str | None = None
    trace_json: str | None = None
    patch: bool = True
    warm_start: str | None = None
    warm_start_max_bytes: int | None = None
    warm_start_checked: bool = False
    module: str | None = None  # run with -m
    script: str | None = None
    args: list = dataclasses.field(default_factory=list)


# Options that take a file name, as --name FILE or --name=FILE: their field.
_FILE_OPTIONS = {
    "--trace-out": "trace_out",
    "--trace-json": "trace_json",
    "--warm-start": "warm_start",
    "--warm-start-max-bytes": "warm_start_max_bytes",
}


def parse(argv):
    """Options up to the script (or -m module); everything after belongs to it."""
    options = Options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            sys.exit(0)
        elif arg == "--trace":
            options.trace = True
        elif arg == "--no-patch":
            options.patch = False
        elif arg == "--warm-start-checked":
            options.warm_start_checked = True
        elif arg.partition("=")[0] in _FILE_OPTIONS:
            name = arg.partition("=")[0]
            if "=" in arg:
                value = arg.partition("=")[2]
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                usage_error(f"{name} needs a {'number' if name.endswith('bytes') else 'file name'}")
            setattr(options, _FILE_OPTIONS[name], value)
        elif arg == "-m":
            if i + 1 >= len(argv):
                usage_error("-m needs a module name")
            options.module = argv[i + 1]
            options.args = argv[i + 2 :]
            return options
        elif arg.startswith("-") and arg != "-":
            usage_error(f"unknown option {arg}")
        else:
            options.script = arg
            options.args = argv[i + 1 :]
            return options
        i += 1
    usage_error("no script or -m module to run")


def usage_error(message):
    sys.stderr.write(USAGE.split("\n\n")[0] + "\n")
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.exit(2)


def check_writable(path, option="--trace-out"):
    """Refuse an unwritable --trace-out (or --trace-json) before the program runs, not after."""
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: cannot write {option} {path!r}: {e.strerror}\n")
        sys.exit(2)
    if not existed:
        # The processes of a multi-process program check the same path at once:
        # another may have removed it already.
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def check_script(path):
    """Python's own message and exit code for a script that cannot be opened."""
    try:
        with open(path, "rb"):
            pass
    except IsADirectoryError:
        pass  # a directory with __main__.py: runpy handles it
    except OSError as e:
        interpreter = sys.orig_argv[0] if sys.orig_argv else "python"
        sys.stderr.write(
            f"{interpreter}: can't open file '{os.path.abspath(path)}': [Errno {e.errno}] {e.strerror}\n"
        )
        sys.exit(2)


def patch_jax():
    """Route jax.jit through fastdispatch.jit (and jax.eval_shape, which traces
    jax's own jit functions in their own trace cache, through fastdispatch's,
    which does the same for ours), and each front end's library's jit through
    the front end once the program imports that library (fastdispatch.FRONT_ENDS).
    The same objects with and without --trace: a trace learns from the
    dispatcher where each compiled function was made."""
    import jax

    import fastdispatch

    jax.jit = fastdispatch.jit
    jax.eval_shape = fastdispatch.eval_shape
    for front_end in fastdispatch.FRONT_ENDS:
        when_imported(front_end.routed, functools.partial(route, front_end))


def route(front_end, library_module):
    """The library's jit is the front end's; the front end's ``routed(jit_type)``,
    where it has one, does what else routing needs of the library, knowing the
    type of the functions jax.jit now makes."""
    import fastdispatch

    package = importlib.import_module(front_end.package)
    setattr(library_module, front_end.jit_name, getattr(package, front_end.jit_name))
    routed = getattr(package, "routed", None)
    if routed is not None:
        routed(fastdispatch.CompiledFunction)


def when_imported(name, patch):
    """Call ``patch(module)`` once module ``name`` is imported: now if it is,
    else right after the program imports it (a library is not imported for
    a program that does not use it)."""
    if name in sys.modules:
        patch(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it wraps the loader of one module so that the
    patch runs as soon as the module has executed, then leaves sys.meta_path."""

    def __init__(self, name, patch):
        self.name = name
        self.patch = patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, self.patch)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, with the patch after exec_module."""

    def __init__(self, loader, patch):
        self.loader = loader
        self.patch = patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.patch(module)

    def __getattr__(self, name):  # get_data, get_resource_reader, ...
        return getattr(self.loader, name)


def start_warm(options):
    """Warm start on, before the program compiles anything."""
    import fastdispatch
    from fastdispatch.warm.store import DEFAULT_MAX_BYTES

    max_bytes = options.warm_start_max_bytes
    fastdispatch.warm_start(
        options.warm_start,
        max_bytes=DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes),
        program=program_name(options),
        checked=options.warm_start_checked,
    )


def program_name(options):
    """The program, by which the store remembers what to load in the background."""
    return f"-m {options.module}" if options.module is not None else os.path.abspath(options.script)


def start_tracing(options):
    """Switch tracing on; report and save from an atexit hook, which Python
    runs after the program's threads finished and after its own atexit hooks
    (registered later, so run earlier)."""
    from fastdispatch import _jax
    from fastdispatch.tracing import start, stop
    from fastdispatch.tracing.recorder import process_age_ns

    t = start(watch_host=True)
    # The wall from the process's start: Python's own, and the imports before --trace began.
    t.start_up_ns = process_age_ns()
    # Resolved now: the program may change directory.
    trace_out = os.path.abspath(options.trace_out) if options.trace_out else None
    trace_json = os.path.abspath(options.trace_json) if options.trace_json else None

    def finish():
        stop(t)
        if options.trace:
            sys.stderr.write("\n" + t.report())
            if options.warm_start is not None:
                from fastdispatch.tracing.report import fit_lines
                from fastdispatch.warm import summary

                sys.stderr.write(fit_lines(summary()))
        if trace_out:
            # Read at exit: the program may have joined jax.distributed since.
            process = _jax.process_of_program()
            t.save(per_process_path(trace_out, process))
            written = per_process_path(options.trace_out, process)
            sys.stderr.write(f"{PROG}: wrote {written} (open it in ui.perfetto.dev)\n")
        if trace_json:
            process = _jax.process_of_program()
            t.save_report(per_process_path(trace_json, process))
        sys.stderr.flush()

    atexit.register(finish)


def per_process_path(path, process):
    """``run.json`` as ``run.process1.json`` for process 1 of a program of several
    processes (``process`` is ``(index, count)``), so that each writes its own
    file, on a shared file system too; unchanged for a program of one process."""
    if process is None:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.process{process[0]}{ext}"


def run(options):
    """Run the program as python would; return its exit code or raise SystemExit."""
    if options.module is not None:
        sys.argv = [options.module] + options.args
        run_program = lambda: runpy.run_module(options.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [options.script] + options.args
        # python script.py puts the script's directory (symlinks resolved) first.
        sys.path[0] = os.path.dirname(os.path.realpath(options.script))
        if os.path.isfile(options.script):
            run_program = lambda: run_file(options.script)
        else:  # a directory or zip file with __main__.py
            run_program = lambda: runpy.run_path(options.script, run_name="__main__")
    try:
        run_program()
    except SystemExit:
        raise
    except BaseException as error:
        error.__traceback__ = program_frames(error.__traceback__)
        sys.excepthook(type(error), error, error.__traceback__)
        return 130 if isinstance(error, KeyboardInterrupt) else 1
    return 0


def run_file(script):
    """Execute a script file as the __main__ module, as python does.  (runpy.run_path
    would set sys.argv[0] to the path; python keeps it as typed.)"""
    path = os.path.abspath(script)  # python names the file by its absolute path
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__cached__ = None
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    with open(path, "rb") as f:
        # dont_inherit: not this module's `from __future__ import annotations`
        # (python compiles a script with none; and its code, warm start's key).
        code = compile(f.read(), path, "exec", dont_inherit=True)
    exec(code, module.__dict__)


def program_frames(tb):
    """Drop the leading frames of this module and of runpy from a traceback,
    so that it reads as python's own: it starts in the program (and is empty
    for a SyntaxError in the script, which python shows without frames)."""
    launcher = (__file__, runpy.__file__, "<frozen runpy>")
    while tb is not None and tb.tb_frame.f_code.co_filename in launcher:
        tb = tb.tb_next
    return tb


def run_stock(options, tracing):
    """On a jax fastdispatch does not serve (import warned why): the program as
    ``python script.py`` runs it, with nothing patched, and --trace's report, or
    a warm-start store, replaced by a plain line saying there is none."""
    from fastdispatch._jax import UNSUPPORTED

    if tracing or options.warm_start is not None:
        what = "no dispatch report" if tracing else "no warm start"
        if tracing and options.warm_start is not None:
            what = "no dispatch report and no warm start"
        atexit.register(
            lambda: sys.stderr.write(f"{PROG}: {what}: the program ran on stock jax ({UNSUPPORTED})\n")
        )
    return run(options)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    import fastdispatch  # noqa: F401  (on a jax it does not serve: one warning, here)
    from fastdispatch._jax import UNSUPPORTED

    if argv[:1] == ["bench"]:
        if UNSUPPORTED is not None:
            sys.stderr.write(f"{PROG} bench: nothing to measure: {UNSUPPORTED}\n")
            return 1
        from fastdispatch.bench import main as bench_main

        return bench_main(argv[1:])
    options = parse(argv)
    if options.trace_out:
        check_writable(options.trace_out)
    if options.trace_json:
        check_writable(options.trace_json, "--trace-json")
    if options.script is not None:
        check_script(options.script)
    if options.warm_start_max_bytes is not None:
        if options.warm_start is None:
            usage_error("--warm-start-max-bytes needs --warm-start DIR")
        if not options.warm_start_max_bytes.isdigit():
            usage_error(
                f"--warm-start-max-bytes needs a number of bytes, got {options.warm_start_max_bytes!r}"
            )
    if options.warm_start_checked and options.warm_start is None:
        usage_error("--warm-start-checked needs --warm-start DIR")
    tracing = bool(options.trace or options.trace_out or options.trace_json)
    if UNSUPPORTED is not None:
        return run_stock(options, tracing)
    if options.warm_start is not None:
        start_warm(options)
    elif os.environ.get("FASTDISPATCH_WARM_START"):
        # Warm start began as fastdispatch was imported, before the program
        # was known: its background loads begin now.
        from fastdispatch.warm import preload_program

        preload_program(program_name(options))
    if options.patch:
        patch_jax()
    if tracing:
        start_tracing(options)
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
