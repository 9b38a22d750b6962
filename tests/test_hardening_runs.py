"""Issue 21's hardening of runs and their sentences: pinned threads on resume, finite learning rates that
overflow, sampling at its extremes, and sentences that name only what is true (resume, footnotes, ignored flags)."""

import json
import os

import pandas as pd
import pytest

from modern_gpt.ablation.results import ResultsDir

from .clihelp import CLASSIC_ROPE, tiny

TIMING = ["secs", "tokens_per_s"]  # the only columns allowed to differ between identical runs
# dim 64: large enough that one and two torch threads give different values (about 1e-7 apart); --threads 0
# undoes the smoke config's one thread per run, so that --jobs decides the threads
THREADED = [*tiny(6, dim=64), "--threads", "0", "--eval-tokens", "256"]


def _values(folder) -> pd.DataFrame:
    return pd.read_csv(folder / "runs.csv").drop(columns=TIMING)


def _interrupt(folder, keep: int) -> None:
    """The folder as an interrupted ablation leaves it: the first `keep` runs (seed-major) kept, the rest gone."""
    files = sorted((folder / "runs").glob("*.json"), key=lambda f: (int(f.stem.split("seed")[1]), f.stem))
    for f in files[keep:]:
        f.unlink()
    meta = json.loads((folder / "meta.json").read_text())
    meta["status"] = "interrupted"
    (folder / "meta.json").write_text(json.dumps(meta))


# ---------------------------------------------------------------------------
# Item 7: a resume keeps the threads of the folder's first run, whatever --jobs says
# ---------------------------------------------------------------------------
def test_a_resume_on_a_machine_with_other_cores_gives_identical_values(run_ok, tmp_path, monkeypatch):
    """--jobs 1 gives each run every core; a resume where the cores differ (another machine, or what another
    --jobs divides them into) keeps the threads meta.json pinned, so the values equal an uninterrupted run's."""
    args = ["ablate", *THREADED, *CLASSIC_ROPE, "--no-placebo", "--jobs", "1"]
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    run_ok(*args, "--out", "cut")
    whole = _values(tmp_path / "cut")  # uninterrupted; the runs the resume trains again must equal these
    assert ResultsDir(tmp_path / "cut").read_meta()["threads"] == 1
    _interrupt(tmp_path / "cut", keep=2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # unpinned, --jobs 1 would now train with 2 threads
    run_ok("ablate", "--resume", "cut", "--jobs", "1")
    resumed = _values(tmp_path / "cut")
    assert set(resumed["threads"]) == {1}
    pd.testing.assert_frame_equal(resumed, whole)


def test_a_folder_from_before_the_pin_keeps_its_first_runs_threads(run_ok, tmp_path, monkeypatch):
    """A meta.json without threads (an older folder): the threads of its first finished run are kept."""
    args = ["ablate", *THREADED, *CLASSIC_ROPE, "--no-placebo", "--jobs", "1"]
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    run_ok(*args, "--out", "old")
    whole = _values(tmp_path / "old")  # uninterrupted; the runs the resume trains again must equal these
    _interrupt(tmp_path / "old", keep=2)
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    del meta["threads"]
    (tmp_path / "old" / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    run_ok("ablate", "--resume", "old", "--jobs", "1")
    assert ResultsDir(tmp_path / "old").read_meta()["threads"] == 1
    pd.testing.assert_frame_equal(_values(tmp_path / "old"), whole)


@pytest.mark.slow
def test_a_resume_with_another_jobs_gives_identical_values(run_ok, tmp_path):
    """Started with --jobs 2 (a pool: one thread per run on two workers), resumed with --jobs 1 (in this
    process, which unpinned would take every core): the values equal the uninterrupted --jobs 2 run's, bitwise."""
    args = ["ablate", *THREADED, *CLASSIC_ROPE, "--no-placebo"]
    run_ok(*args, "--jobs", "2", "--out", "cut")
    whole = _values(tmp_path / "cut")  # uninterrupted; the runs the resume trains again must equal these
    pinned = ResultsDir(tmp_path / "cut").read_meta()["threads"]
    _interrupt(tmp_path / "cut", keep=1)
    run_ok("ablate", "--resume", "cut", "--jobs", "1")
    resumed = _values(tmp_path / "cut")
    assert set(resumed["threads"]) == {pinned}
    pd.testing.assert_frame_equal(resumed, whole)


def test_hand_edited_threads_are_named(run, run_ok, tmp_path):
    run_ok("ablate", *tiny(2), *CLASSIC_ROPE, "--no-placebo", "--jobs", "1", "--out", "f")
    meta = json.loads((tmp_path / "f" / "meta.json").read_text())
    for bad, said in ((0, "threads must be 1 or more"), ("two", "threads must be")):
        (tmp_path / "f" / "meta.json").write_text(json.dumps({**meta, "threads": bad}))
        code, _, err = run("ablate", "--resume", "f", "--jobs", "1")
        assert code == 2 and said in err and "Traceback" not in err, err


# ---------------------------------------------------------------------------
# A finite learning rate whose update overflows float32: a diverged run, never a traceback
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(("lr", "weight_decay"), [(1e300, 0.1), (3.5e38, 0.0), (1e-3, 1e300)])
def test_an_update_beyond_float32_is_a_diverged_run(corpus, lr, weight_decay):
    from modern_gpt.core.config import ModelConfig, TrainConfig
    from modern_gpt.run.train import train_run

    cfg = TrainConfig(steps=3, eval_every=3, lr=lr, weight_decay=weight_decay, warmup_steps=0, device="cpu")
    result, _ = train_run(ModelConfig(context=16, dim=16, heads=2, layers=1), corpus, cfg, seed=0)
    assert result.diverged and result.error == "" and result.steps_done <= 1


def test_train_at_an_overflowing_lr_says_it_diverged(run):
    code, out, err = run("train", *tiny(3), "--lr", "1e300", "--warmup-steps", "0", "--out", "ckpt")
    assert code == 0 and "Traceback" not in err, err
    assert "diverged (the loss or an update became NaN or infinite) after 0 steps" in out
    code, _, err = run("generate", "ckpt")
    assert code == 2 and "holds a run that diverged" in err


def test_an_overflowing_lr_is_recorded_fresh_and_on_resume(run_ok, tmp_path):
    """--lrs with an absurd rate: its runs are diverged, the table chooses the other rate; a folder interrupted
    before those runs resumes and records them too (every resume used to crash on the same run)."""
    args = ["ablate", *tiny(3), "--plan", "custom", "--variants", "classic;rope", "--seeds", "2", "--no-placebo"]
    args += ["--lrs", "1e-3,1e300", "--warmup-steps", "0", "--eval-tokens", "64", "--jobs", "1"]
    out = run_ok(*args, "--out", "fresh")
    runs = pd.read_csv(tmp_path / "fresh" / "runs.csv")
    assert len(runs) == 8 and runs[runs.lr == 1e300].diverged.all() and not runs[runs.lr == 1e-3].diverged.any()
    assert "At lr 1e+300, of 4 runs 4 diverged or failed" in out
    _interrupt(tmp_path / "fresh", keep=1)  # the first run: lr 1e-3; every lr 1e300 run is still to do
    run_ok("ablate", "--resume", "fresh", "--jobs", "1")
    resumed = pd.read_csv(tmp_path / "fresh" / "runs.csv")
    pd.testing.assert_frame_equal(resumed.drop(columns=TIMING), runs.drop(columns=TIMING))
    assert ResultsDir(tmp_path / "fresh").read_meta()["status"] == "finished"


# ---------------------------------------------------------------------------
# Item 8: best val loss comes from the curve's windows, and its label says how many
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(("eval_tokens", "eval_batches", "batch_size"), [(8192, 4, 8), (256, 4, 8), (4096, 1, 3)])
def test_curve_windows_counts_what_the_curve_evaluates(corpus, eval_tokens, eval_batches, batch_size):
    from modern_gpt.core.config import TrainConfig
    from modern_gpt.data.corpus import eval_offsets, subset
    from modern_gpt.run.train import curve_windows

    final = eval_offsets(len(corpus.val), 16, eval_tokens)
    cfg = TrainConfig(eval_tokens=eval_tokens, eval_batches=eval_batches, batch_size=batch_size)
    assert curve_windows(cfg, len(final)) == len(subset(final, eval_batches * batch_size))


def _best_row(out: str) -> str:
    return next(line for line in out.splitlines() if "best val loss" in line)


def test_the_duel_labels_its_best_val_loss_truthfully(run_ok):
    duel = ["duel", *tiny(4), "--batch-size", "8", "--seeds", "2", "--no-placebo", "--jobs", "1", "--lrs", "1e-3,3e-3"]
    # 1 batch of 8 windows on the curve; the final loss on the 256 of --eval-tokens 4096 at context 16
    row = _best_row(run_ok(*duel, "--eval-batches", "1", "--eval-tokens", "4096", "--out", "part"))
    assert "curve: 8 of 256 windows" in row and "all windows" not in row
    row = _best_row(run_ok(*duel, "--eval-tokens", "128", "--out", "whole"))  # 8 windows: the curve has them all
    assert "best val loss (mean step, all windows)" in row


def test_train_labels_its_best_val_loss_truthfully(run_ok):
    out = run_ok(
        "train", *tiny(4), "--batch-size", "8", "--eval-batches", "1", "--eval-tokens", "4096", "--out", "ckpt"
    )
    assert "best val loss (step; curve: 8 of 256 windows)" in _best_row(out)


# ---------------------------------------------------------------------------
# Sampling at its extremes: one sentence, or a well-defined limit
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from .clihelp import invoke

    folder = tmp_path_factory.mktemp("sampling") / "ckpt"
    invoke("train", *tiny(4), "--out", folder)
    return folder


def _generate(run, checkpoint, *args) -> str:
    code, out, err = run("generate", checkpoint, "--prompt", "The ", "--tokens", "12", *args)
    assert code == 0 and "Traceback" not in err, err
    return out


@pytest.mark.parametrize("temperature", ["1e-300", "5e-324", "1e-40", "1e-8"])
def test_a_temperature_near_zero_tends_to_greedy(run, checkpoint, temperature):
    greedy = _generate(run, checkpoint, "--temperature", "0")
    assert _generate(run, checkpoint, "--temperature", temperature, "--top-k", "3") == greedy


@pytest.mark.parametrize("args", [["--temperature", "1e308"], ["--top-k", str(2**70)], ["--tokens", "0"]])
def test_huge_sampling_values_are_well_defined(run, checkpoint, args):
    first = _generate(run, checkpoint, *args, "--seed", "5")
    assert first.startswith("The ") and first == _generate(run, checkpoint, *args, "--seed", "5")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tokens", "-1"], "--tokens must be between 0 and 100,000, got -1."),
        (["--tokens", str(10**20)], "--tokens must be between 0 and 100,000"),
        (["--tokens", "nan"], "Invalid value for '--tokens'"),
        (["--temperature", "-1e-9"], "--temperature must be a finite number of 0 or more"),
        (["--temperature", "nan"], "--temperature must be a finite number of 0 or more"),
        (["--temperature", "-inf"], "--temperature must be a finite number of 0 or more"),
        (["--top-k", "0"], "--top-k must be at least 1, got 0."),
        (["--top-k", "-5"], "--top-k must be at least 1, got -5."),
        (["--top-k", "inf"], "Invalid value for '--top-k'"),
    ],
)
def test_impossible_sampling_values_are_one_sentence(run, checkpoint, args, said):
    code, out, err = run("generate", checkpoint, *args)
    assert code == 2 and said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_finite_weights_whose_logits_overflow_are_one_sentence(run, checkpoint, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    weights = load_file(broken / "model.safetensors")
    weights["norm_f.weight"].zero_()
    weights["norm_f.bias"].fill_(1.0)  # every feature 1 ...
    weights["lm_head.weight"].fill_(3e38)  # ... times the largest float32 times dim: +inf, from finite weights
    assert all(torch.isfinite(w).all() for w in weights.values())
    save_file(weights, broken / "model.safetensors")
    for temperature in ("0", "0.8"):
        code, _, err = run("generate", broken, "--temperature", temperature)
        assert code == 2 and "logits are not finite (NaN or infinite) at generated token 1" in err, err


# ---------------------------------------------------------------------------
# Sentences that name what is true
# ---------------------------------------------------------------------------
def _error(run, *args) -> str:
    code, _, err = run(*args)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_resume_names_only_the_given_flags_that_differ(run, run_ok, tmp_path):
    """A folder made with a custom plan, no placebo and tiny settings: a flag given with --resume is compared,
    never the defaults nobody typed (the plan, the data path, the context); equal flags are no difference."""
    run_ok("ablate", *tiny(2), *CLASSIC_ROPE, "--no-placebo", "--jobs", "1", "--out", "f")
    err = _error(run, "ablate", "--resume", "f", "--steps", "5")
    assert "(settings.train.steps: 2 -> 5)" in err
    for never in ("plan", "data.path", "context", "rows", "placebo"):
        assert never not in err.split(";")[0], err
    for same in (["--seeds", "2"], ["--seed-list", "0,1"], ["--variants", "classic;rope"], ["--no-placebo"]):
        run_ok("ablate", "--resume", "f", "--jobs", "1", *same)
    assert "(placebo: False -> True)" in _error(run, "ablate", "--resume", "f", "--placebo")
    assert "plan: 'custom' -> 'single'" in _error(run, "ablate", "--resume", "f", "--plan", "single")
    assert "rows: ['classic', 'rope'] -> ['classic', 'rmsnorm']" in _error(
        run, "ablate", "--resume", "f", "--variants", "classic;rmsnorm"
    )
    assert "(alpha: 0.05 -> 0.1)" in _error(run, "ablate", "--resume", "f", "--alpha", "0.1")
    assert "(lrs: None -> [0.001, 0.002])" in _error(run, "ablate", "--resume", "f", "--lrs", "1e-3,2e-3")


@pytest.mark.parametrize("seeds", [["--seeds", "3"], ["--seed-list", "0,1,2"], ["--seeds", "auto"], ["--seeds", "1"]])
def test_resume_says_seeds_cannot_be_added(run, run_ok, seeds):
    run_ok("ablate", *tiny(2), *CLASSIC_ROPE, "--no-placebo", "--jobs", "1", "--out", "f")
    err = _error(run, "ablate", "--resume", "f", *seeds)
    assert "--resume cannot change or add seeds: the folder was made with seeds [0, 1]" in err
    assert "start a new folder" in err


def test_duel_and_power_resume_compare_their_own_flags(run, run_ok):
    run_ok("duel", *tiny(2), "--seeds", "2", "--jobs", "1", "--out", "d")
    run_ok("duel", "--resume", "d", "--seeds", "2", "--jobs", "1")
    assert "(placebo: True -> False)" in _error(run, "duel", "--resume", "d", "--no-placebo")
    run_ok("power", *tiny(2), "--seeds", "3", "--jobs", "1", "--out", "p")
    run_ok("power", "--resume", "p", "--variant", "classic", "--seeds", "3", "--jobs", "1")
    assert "rows: ['classic'] -> ['rope']" in _error(run, "power", "--resume", "p", "--variant", "rope")
    assert "seeds [0, 1, 2]" in _error(run, "power", "--resume", "p", "--seeds", "8")


@pytest.mark.parametrize("kind", ["ablate", "duel", "power"])
def test_the_unfinished_runs_footnote_gives_each_folder_its_own_command(run, run_ok, tmp_path, kind):
    args = {"ablate": CLASSIC_ROPE, "duel": ["--seeds", "2"], "power": ["--seeds", "3"]}[kind]
    run_ok(kind, *tiny(2), *args, "--jobs", "1", "--out", "my folder")
    _interrupt(tmp_path / "my folder", keep=1)
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
    assert said in _error(run, *args)


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
    assert "kv_heads (in the config file) is read by gqa alone" in _error(run, "params", "--config", "c.toml")


@pytest.mark.parametrize("placebo", ["--placebo", "--no-placebo"])
def test_a_table_with_no_tested_row_says_so(run_ok, placebo):
    out = run_ok(
        "ablate", *tiny(2), "--plan", "custom", "--variants", "classic", "--seeds", "3", placebo, "--jobs", "1"
    )
    assert "across the 0" not in out and "/0)" not in out
    assert "verdict: no component row is compared with a reference, so the table gives no verdict" in out
    assert ("the placebo row" in out) == (placebo == "--placebo")


# ---------------------------------------------------------------------------
# Item 4: a power folder's report shows what every folder's does: unfinished, diverged and left-out runs
# ---------------------------------------------------------------------------
POWER = ["power", *tiny(3), "--jobs", "1"]


def test_an_interrupted_power_folder_gives_no_mde_from_too_few_pairs(run_ok, tmp_path):
    run_ok(*POWER, "--seeds", "4", "--out", "p")
    _interrupt(tmp_path / "p", keep=3)  # seed 0's pair and seed 1's first run: one pair
    out = " ".join(run_ok("report", "p").split())
    assert "classic: 2 of the 4 planned seeds trained, and 1 pair with the placebo init: too few" in out
    assert "mde:" not in out and "as it should be" not in out and "Placebo check" not in out
    assert "5 of 8 runs have not finished; finish them with: modern-gpt power --resume p" in out
    doc = json.loads(run_ok("report", "p", "--format", "json"))
    assert doc["mde"] == [] and doc["pairs"] == 1 and doc["seeds"] == 2 and doc["planned"] == 4
    assert any("modern-gpt power --resume p" in n for n in doc["footnotes"])


def test_a_power_folder_counts_the_architectures_seeds_and_names_what_is_missing(run_ok, tmp_path):
    run_ok(*POWER, "--seeds", "5", "--out", "p")
    _interrupt(tmp_path / "p", keep=8)  # four whole pairs
    placebo = tmp_path / "p" / "runs" / "row01-seed3.json"  # one placebo run diverged: 4 seeds, 3 pairs
    record = json.loads(placebo.read_text())
    record.update(diverged=True, val_loss=float("nan"))
    placebo.write_text(json.dumps(record))
    (tmp_path / "p" / "runs" / "row00-seed9.json").write_text("{}")  # a file that is no run of this folder
    out = " ".join(run_ok("report", "p").split())  # the console wraps long lines
    assert "classic: val loss" in out and "over 4 of the 5 planned seeds" in out and "from 3 pairs" in out
    notes = "\n".join(json.loads(run_ok("report", "p", "--format", "json"))["footnotes"])
    for said in (
        "classic (placebo), seed 3: diverged",
        "runs/row00-seed9.json (row is missing) is left out of the table",
        "2 of 10 runs have not finished; finish them with: modern-gpt power --resume p",
    ):
        assert said in notes and said in out, said
    assert "verdict:" not in notes and "Placebo: " not in notes  # the verdict table's notes: power has its own


def test_a_power_folder_whose_runs_all_diverged_says_so(run_ok):
    out = run_ok(*POWER, "--seeds", "3", "--lr", "1e300", "--warmup-steps", "0", "--out", "p")
    report = " ".join(run_ok("report", "p").split())
    assert " ".join(out.split()).startswith(report)  # what power printed, then the results line
    assert "classic: 0 of the 3 planned seeds trained, and 0 pairs with the placebo init: too few" in report
    assert "as it should be" not in report and "mde:" not in report
    assert report.count("diverged (loss NaN or infinite) after 0 steps") == 6


def test_the_looks_advice_names_the_folders_own_command(run, run_ok, tmp_path):
    run_ok("duel", *tiny(2), "--seeds", "auto", "--max-seeds", "3", "--jobs", "1", "--out", "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    meta["sequential"]["looks"][0]["decided"] = 9
    (tmp_path / "d" / "meta.json").write_text(json.dumps(meta))
    assert "modern-gpt duel --resume d recomputes the looks" in _error(run, "report", "d")
    run_ok("duel", "--resume", "d", "--jobs", "1")  # and it does
    run_ok("report", "d")


@pytest.mark.parametrize("resume", [False, True])
def test_jobs_with_ray_is_refused_not_ignored(run, run_ok, resume):
    if resume:
        run_ok("ablate", *tiny(1), *CLASSIC_ROPE, "--jobs", "1", "--out", "f")
    args = ["--resume", "f"] if resume else [*tiny(1), *CLASSIC_ROPE]
    err = _error(run, "ablate", *args, "--executor", "ray", "--jobs", "2")
    assert "--jobs 2 goes with --executor local; on Ray every run is a task" in err


def test_a_folder_that_is_no_results_folder_names_every_command(run, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "give a folder written by modern-gpt ablate, duel or power" in _error(run, "report", "empty")
