"""tracing.sites: where in the program something happened, and how a file is named."""

import os
import sys
import sysconfig

import optax

from fastdispatch.tracing import sites


def test_an_installed_package_is_named_by_its_package(tmp_path):
    # A library's jit in the report: optax/..., not the site-packages path.
    filename = optax.adam.__code__.co_filename
    named = sites.short_path(filename, str(tmp_path))
    assert named.startswith("optax" + os.sep) and named.endswith(".py")
    assert sites.short(("x", 3), str(tmp_path)).endswith("x:3")


def test_the_standard_library_is_named_from_its_root(tmp_path):
    filename = os.path.join(sysconfig.get_paths()["stdlib"], "functools.py")
    assert sites.short_path(filename, str(tmp_path)) == "functools.py"


def test_the_programs_file_is_named_from_the_working_directory(tmp_path):
    program = tmp_path / "sub" / "prog.py"
    assert sites.short_path(str(program), str(tmp_path)) == os.path.join("sub", "prog.py")
    elsewhere = "/elsewhere/prog.py" if sys.platform != "win32" else r"C:\elsewhere\prog.py"
    assert sites.short_path(elsewhere, str(tmp_path)) == elsewhere
    assert sites.short(None, str(tmp_path)) == "?"


def test_user_site_skips_library_frames():
    def through_a_library():
        return sites.user_site()  # the caller's caller: this test's line

    site = through_a_library()
    assert site[0] == __file__
    assert sites.library_code(optax.adam.__code__) and not sites.library_code(through_a_library.__code__)


def test_the_bench_programs_are_user_code_though_inside_the_package():
    # They are written as a user writes a program: --trace's findings name their lines.
    from fastdispatch.bench import whole_programs
    from fastdispatch.tracing import findings

    program = os.path.join(whole_programs.PROGRAMS_DIR, "rl_numpy_dqn.py")
    code = compile("pass", program, "exec")
    assert not sites.library_code(code)
    assert sites.library_code(findings.summary.__code__)
