"""Resuming an ablation: the threads of the folder's first run are kept whatever the machine or --jobs, a
folder from before the pin keeps its first run's, hand-edited threads are named, and the flags given with
--resume are compared with the folder's (only those given, each named; seeds cannot be added)."""

import json
import os
import shutil

import pandas as pd
import pytest

from modern_gpt.ablation.results import ResultsDir
from tests.clihelp import CLASSIC_ROPE, flat, interrupt, invoke, run_values, tiny, user_error

# dim 64: large enough that one and two torch threads give different values (about 1e-7 apart); --threads 0
# undoes the smoke config's one thread per run, so that --jobs decides the threads
THREADED = [*tiny(6, dim=64), "--threads", "0", "--eval-tokens", "256"]


# ---------------------------------------------------------------------------
# Item 7: a resume keeps the threads of the folder's first run, whatever --jobs says
# ---------------------------------------------------------------------------
def test_a_resume_on_a_machine_with_other_cores_gives_identical_values(run_ok, tmp_path, monkeypatch):
    """--jobs 1 gives each run every core; a resume where the cores differ (another machine, or what another
    --jobs divides them into) keeps the threads meta.json pinned, so the values equal an uninterrupted run's."""
    args = ["ablate", *THREADED, *CLASSIC_ROPE, "--no-placebo", "--jobs", "1"]
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    run_ok(*args, "--out", "cut")
    whole = run_values(
        threads=True, folder=tmp_path / "cut"
    )  # uninterrupted; the runs the resume trains again must equal these
    assert ResultsDir(tmp_path / "cut").read_meta()["threads"] == 1
    interrupt(tmp_path / "cut", keep=2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # unpinned, --jobs 1 would now train with 2 threads
    run_ok("ablate", "--resume", "cut", "--jobs", "1")
    resumed = run_values(threads=True, folder=tmp_path / "cut")
    assert set(resumed["threads"]) == {1}
    pd.testing.assert_frame_equal(resumed, whole)


def test_a_folder_from_before_the_pin_keeps_its_first_runs_threads(run_ok, tmp_path, monkeypatch):
    """A meta.json without threads (an older folder): the threads of its first finished run are kept."""
    args = ["ablate", *THREADED, *CLASSIC_ROPE, "--no-placebo", "--jobs", "1"]
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    run_ok(*args, "--out", "old")
    whole = run_values(
        threads=True, folder=tmp_path / "old"
    )  # uninterrupted; the runs the resume trains again must equal these
    interrupt(tmp_path / "old", keep=2)
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    del meta["threads"]
    (tmp_path / "old" / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    run_ok("ablate", "--resume", "old", "--jobs", "1")
    assert ResultsDir(tmp_path / "old").read_meta()["threads"] == 1
    pd.testing.assert_frame_equal(run_values(threads=True, folder=tmp_path / "old"), whole)


@pytest.mark.slow
def test_a_resume_with_another_jobs_gives_identical_values(run_ok, tmp_path):
    """Started with --jobs 2 (a pool: one thread per run on two workers), resumed with --jobs 1 (in this
    process, which unpinned would take every core): the values equal the uninterrupted --jobs 2 run's, bitwise."""
    args = ["ablate", *THREADED, *CLASSIC_ROPE, "--no-placebo"]
    run_ok(*args, "--jobs", "2", "--out", "cut")
    whole = run_values(
        threads=True, folder=tmp_path / "cut"
    )  # uninterrupted; the runs the resume trains again must equal these
    pinned = ResultsDir(tmp_path / "cut").read_meta()["threads"]
    interrupt(tmp_path / "cut", keep=1)
    run_ok("ablate", "--resume", "cut", "--jobs", "1")
    resumed = run_values(threads=True, folder=tmp_path / "cut")
    assert set(resumed["threads"]) == {pinned}
    pd.testing.assert_frame_equal(resumed, whole)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A finished tiny ablation (classic and rope, 2 seeds, no placebo), trained once for the module."""
    folder = tmp_path_factory.mktemp("tiny") / "f"
    invoke("ablate", *tiny(2), *CLASSIC_ROPE, "--no-placebo", "--jobs", "1", "--out", folder)
    return folder


@pytest.fixture
def f(tiny_folder, tmp_path):
    """A copy of it as f in the test's own folder (the run fixture's working folder)."""
    return shutil.copytree(tiny_folder, tmp_path / "f")


def test_hand_edited_threads_are_named(run, f, tmp_path):
    meta = json.loads((tmp_path / "f" / "meta.json").read_text())
    for bad, said in ((0, "threads must be 1 or more"), ("two", "threads must be")):
        (tmp_path / "f" / "meta.json").write_text(json.dumps({**meta, "threads": bad}))
        code, _, err = run("ablate", "--resume", "f", "--jobs", "1")
        assert code == 2 and said in err and "Traceback" not in err, err


# ---------------------------------------------------------------------------
# Sentences that name what is true
# ---------------------------------------------------------------------------
def test_resume_names_only_the_given_flags_that_differ(run, run_ok, f):
    """A folder made with a custom plan, no placebo and tiny settings: a flag given with --resume is compared,
    never the defaults nobody typed (the plan, the data path, the context); equal flags are no difference."""
    err = user_error(run, "ablate", "--resume", "f", "--steps", "5")
    assert "(settings.train.steps: 2 -> 5)" in err
    for never in ("plan", "data.path", "context", "rows", "placebo"):
        assert never not in err.split(";")[0], err
    for same in (["--seeds", "2"], ["--seed-list", "0,1"], ["--variants", "classic;rope"], ["--no-placebo"]):
        run_ok("ablate", "--resume", "f", "--jobs", "1", *same)
    assert "(placebo: False -> True)" in user_error(run, "ablate", "--resume", "f", "--placebo")
    assert "plan: 'custom' -> 'single'" in user_error(run, "ablate", "--resume", "f", "--plan", "single")
    assert "rows: ['classic', 'rope'] -> ['classic', 'rmsnorm']" in user_error(
        run, "ablate", "--resume", "f", "--variants", "classic;rmsnorm"
    )
    assert "(alpha: 0.05 -> 0.1)" in user_error(run, "ablate", "--resume", "f", "--alpha", "0.1")
    assert "(lrs: None -> [0.001, 0.002])" in user_error(run, "ablate", "--resume", "f", "--lrs", "1e-3,2e-3")


@pytest.mark.parametrize("seeds", [["--seeds", "3"], ["--seed-list", "0,1,2"], ["--seeds", "auto"], ["--seeds", "1"]])
def test_resume_says_seeds_cannot_be_added(run, f, seeds):
    err = user_error(run, "ablate", "--resume", "f", *seeds)
    assert "--resume cannot change or add seeds: the folder was made with seeds [0, 1]" in err
    assert "start a new folder" in err


def test_duel_and_power_resume_compare_their_own_flags(run, run_ok):
    run_ok("duel", *tiny(2), "--seeds", "2", "--jobs", "1", "--out", "d")
    run_ok("duel", "--resume", "d", "--seeds", "2", "--jobs", "1")
    assert "(placebo: True -> False)" in user_error(run, "duel", "--resume", "d", "--no-placebo")
    run_ok("power", *tiny(2), "--seeds", "3", "--jobs", "1", "--out", "p")
    run_ok("power", "--resume", "p", "--variant", "classic", "--seeds", "3", "--jobs", "1")
    assert "rows: ['classic'] -> ['rope']" in user_error(run, "power", "--resume", "p", "--variant", "rope")
    assert "seeds [0, 1, 2]" in user_error(run, "power", "--resume", "p", "--seeds", "8")


@pytest.mark.parametrize("kind", ["ablate", "duel", "power"])
def test_the_unfinished_runs_footnote_gives_each_folder_its_own_command(run, run_ok, tmp_path, kind):
    args = {"ablate": CLASSIC_ROPE, "duel": ["--seeds", "2"], "power": ["--seeds", "3"]}[kind]
    run_ok(kind, *tiny(2), *args, "--jobs", "1", "--out", "my folder")
    interrupt(tmp_path / "my folder", keep=1)
    out = run_ok("report", "my folder", "--format", "markdown")
    assert f"finish them with: modern-gpt {kind} --resume 'my folder'" in out
    for other in {"ablate", "duel", "power"} - {kind}:
        assert f"modern-gpt {other} --resume" not in out
    run_ok(kind, "--resume", "my folder", "--jobs", "1")  # the command it gives works


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["params", "--kv-heads", "2"], "--kv-heads is read by gqa alone, which is off; add --gqa, or leave out"),
        (["train", *tiny(1), "--kv-heads", "1"], "--kv-heads is read by gqa alone, which is off"),
        (["params", "--rope-base", "500"], "--rope-base is read by rope alone, which is off; add --rope"),
        (["params", "--multiple-of", "16"], "--multiple-of is read by swiglu alone, which is off; add --swiglu"),
        (["params", "--swiglu", "--multiple-of", "16", "--mlp-hidden", "40"], "--mlp-hidden sets outright"),
        (
            ["ablate", *tiny(1), *CLASSIC_ROPE, "--kv-heads", "1"],
            "--kv-heads is read by gqa alone, and no row of this plan has it; add a row with gqa",
        ),
        (["duel", *tiny(1), "--lr", "1e-3", "--lrs", "1e-3,3e-3"], "--lr and --lrs both set the learning rate"),
        (["ablate", *tiny(1), "--lr", "1e-3", "--lr-sweep", "1e-3:1e-2:2"], "--lr and --lr-sweep both set"),
        (["power", *tiny(1), "--variant", "rope", "--kv-heads", "1"], "no row of this plan has it"),
    ],
)
def test_a_flag_that_nothing_reads_is_refused(run, args, said):
    assert said in user_error(run, *args)


def test_flags_that_are_read_pass(run_ok, tmp_path):
    assert "K/V heads" in run_ok("params", "--gqa", "--kv-heads", "2")
    run_ok("params", "--swiglu", "--multiple-of", "16")
    # the plan has a gqa row; the smoke config's own lr is replaced by --lrs, as documented (only a typed --lr is refused)
    run_ok(
        "ablate", *tiny(1), "--plan", "custom", "--variants", "classic;gqa", "--seeds", "1", "--jobs", "1", "--out", "a"
    )
    run_ok("ablate", *tiny(1), *CLASSIC_ROPE, "--lrs", "1e-3,3e-3", "--eval-tokens", "64", "--jobs", "1", "--out", "b")


def test_a_config_files_unread_setting_is_named_as_the_files(run, tmp_path):
    (tmp_path / "c.toml").write_text("[model]\nkv_heads = 1\n")
    assert "kv_heads (in the config file) is read by gqa alone" in user_error(run, "params", "--config", "c.toml")


@pytest.mark.parametrize("placebo", ["--placebo", "--no-placebo"])
def test_a_table_with_no_tested_row_says_so(run_ok, placebo):
    out = run_ok(
        "ablate", *tiny(2), "--plan", "custom", "--variants", "classic", "--seeds", "3", placebo, "--jobs", "1"
    )
    assert "across the 0" not in out and "/0)" not in out
    assert flat("verdict: no component row is compared with a reference, so the table gives no verdict") in flat(out)
    assert ("the placebo row" in out) == (placebo == "--placebo")
