"""bench --programs --warm-start (fastdispatch/bench/programs_warm.py): its
timing of one run, its summary of the store, its rows and table."""

import sys

from fastdispatch.bench import programs_warm


def test_a_run_is_timed_to_its_step_1_line(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import time\nprint('loading')\ntime.sleep(0.3)\nprint('step 1 loss 0.5')\n")
    run = programs_warm.run_timed([sys.executable, str(script)], str(tmp_path), {}, "prog")
    assert run["error"] is None and run["stdout"].splitlines()[1] == "step 1 loss 0.5"
    assert 0.3 <= run["first_s"] <= run["wall_s"] and run["begin_s"] is None
    assert 0 < run["cpu_s"] < run["wall_s"]  # it slept
    failed = programs_warm.run_timed([sys.executable, "-c", "raise SystemExit(3)"], str(tmp_path), {}, "bad")
    assert failed["error"].startswith("bad exited 3")


def test_the_first_step_is_timed_from_its_own_start(tmp_path):
    # Imports and the model before the `training` line are the wall time's, not the step's.
    script = tmp_path / "prog.py"
    script.write_text(
        "import time\ntime.sleep(0.4)\nprint('training 3 steps')\ntime.sleep(0.3)\nprint('step 1 loss 0.5')\n"
    )
    run = programs_warm.run_timed([sys.executable, str(script)], str(tmp_path), {}, "prog")
    assert run["error"] is None and run["begin_s"] >= 0.4
    # The step's 0.3 s, give or take a busy machine's late read of either line; never the 0.4 s before.
    assert 0.2 <= run["first_s"] < run["wall_s"] - 0.4
    assert run["stdout"] == "training 3 steps\nstep 1 loss 0.5\n"


def test_the_store_summary_is_read_from_stderr():
    stderr = (
        "noise\nwarm start (/s): 2 loaded, 0 missed, 0 written, 0 damaged, 0 evicted\n"
        "  train_step: 2 loaded in 0.01 s\n  3 compiled by jax outside the calls warm start keys (...)\n"
    )
    lines = programs_warm.store_lines(stderr)
    assert lines[0] == "2 loaded, 0 missed, 0 written, 0 damaged, 0 evicted"
    assert lines[1] == "train_step: 2 loaded in 0.01 s"
    assert lines[2] == "3 compiled by jax outside the calls warm start keys (...)"
    assert programs_warm.store_lines("") == ["no warm start summary"]


def test_rows_give_the_ratios_against_jax_cache():
    samples = {
        "jax cache": [{"wall_s": 4.0, "first_s": 2.0, "begin_s": 1.5, "cpu_s": 2.0}],
        "fd warm": [{"wall_s": 3.0, "first_s": 0.5, "begin_s": 1.75, "cpu_s": 1.8}],
        "no cache": [{"wall_s": 8.0, "first_s": 6.0, "begin_s": 1.5, "cpu_s": 7.0}],
    }
    stdout = dict.fromkeys(programs_warm.MODES, "step 1 loss 0.5\n")
    row = programs_warm.summarize("prog", samples, stdout, ["1 loaded", "train_step: 1 loaded"])
    assert (row["wall_ratio"], row["first_ratio"], row["same_output"]) == (0.75, 0.25, True)
    table = programs_warm.format_table([row], 1, 100)
    assert "prog" in table and "0.75" in table and "0.25" in table and "store 1 loaded" in table
    assert row["begin_s"]["fd warm"] == 1.75 and "1.75" in table
    assert row["cpu_ratio"] == 0.9 and "0.90" in table
    stdout["fd warm"] = "other\n"
    differs = programs_warm.summarize("p", samples, stdout, ["x"])
    assert "stdout differs" in programs_warm.format_table([differs], 1, 1)


def test_a_quick_row_has_no_uncached_column():
    samples = {
        "jax cache": [{"wall_s": 4.0, "first_s": 2.0, "begin_s": 1.5, "cpu_s": 2.0}],
        "fd warm": [{"wall_s": 2.0, "first_s": 0.2, "begin_s": 1.5, "cpu_s": 1.0}],
    }
    stdout = dict.fromkeys(programs_warm.QUICK_MODES, "step 1\n")
    row = programs_warm.summarize("prog", samples, stdout, ["1 loaded"])
    assert "no cache" not in row["wall_s"] and (row["wall_ratio"], row["first_ratio"]) == (0.5, 0.1)
    cells = programs_warm.format_table([row], 1, 100).splitlines()[2].split()
    assert cells[:4] == ["prog", "4.00", "2.00", "-"]
