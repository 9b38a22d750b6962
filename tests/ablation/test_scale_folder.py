"""A ladder folder read back. judge --compute-col on its own runs.csv gives the ladder's own table: runs.csv says
each row's reference and placebo, as an ablation's does, so that a ladder with a placebo row is judged against the
plan's references (not each row against the row above, which compared RoPE with the placebo). And every misuse of
a ladder folder (resumed as an ablation, a rung resumed as a ladder, a lost rung, a ladder.json that is no file)
is one sentence naming what the folder is and the command that fits."""

from __future__ import annotations

import os
import shutil
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest

import modern_gpt
from tests.clihelp import user_error

# classic, its placebo and RoPE at three widths, 2 seeds, 12 steps at the top rung: eighteen short runs.
LADDER = dict(smoke=True, plan="custom", variants="classic;rope", seeds=2, steps=12, eval_every=12, jobs=1)


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    return modern_gpt.scale(out=tmp_path_factory.mktemp("ladder") / "scale", **LADDER)


def _summary(folder) -> pd.DataFrame:
    return pd.read_csv(folder / "summary.csv")


def test_a_ladders_summary_compares_rope_with_classic_and_names_p_adj(ladder):
    summary = _summary(ladder.folder).set_index("variant")
    assert summary.loc["rope", "reference"] == "classic"
    assert summary.loc["classic (placebo)", "reference"] == "classic"
    assert "p_adj" in summary and "p_trend_adj" in summary and "p_holm" not in summary  # the ablation's name


def test_judge_on_a_ladders_runs_csv_with_a_placebo_equals_its_summary(ladder, run):
    code, out, err = run("judge", ladder.folder / "runs.csv", "--compute-col", "flops", "--format", "csv")
    assert code == 0, err
    pd.testing.assert_frame_equal(pd.read_csv(StringIO(out)), _summary(ladder.folder))


def test_modern_gpt_judge_of_a_ladders_runs_equals_its_summary(ladder):
    got = modern_gpt.judge(ladder.runs, compute_col="flops")
    as_csv = pd.read_csv(StringIO(got.to_csv(index=False)))  # as the file holds it: an empty reference is NaN
    pd.testing.assert_frame_equal(as_csv, _summary(ladder.folder))


def test_an_old_ladders_runs_csv_without_the_columns_is_read_with_the_placebo_named(ladder, run, tmp_path):
    old = pd.read_csv(ladder.folder / "runs.csv").drop(columns=["reference", "placebo"])
    old.to_csv(tmp_path / "runs.csv", index=False)
    code, out, err = run(
        "judge", tmp_path / "runs.csv", "--compute-col", "flops", "--placebo", "classic (placebo)", "--format", "csv"
    )
    assert code == 0, err
    pd.testing.assert_frame_equal(pd.read_csv(StringIO(out)), _summary(ladder.folder))


def test_a_file_without_the_columns_says_each_row_is_compared_with_the_row_above(ladder):
    old = ladder.runs.drop(columns=["reference", "placebo", "row"])
    got = modern_gpt.judge(old, compute_col="flops")
    assert list(got["reference"].fillna("")) == ["", "classic", "classic (placebo)"]  # as the file gives it
    assert any("compared with the row above" in n and "order=" in n for n in got.attrs["footnotes"])


# ---------------------------------------------------------------------------
# Misusing a ladder folder: one sentence that names what it is and the command that fits
# ---------------------------------------------------------------------------
def _copy(ladder, tmp_path):
    return shutil.copytree(ladder.folder, tmp_path / "copy")


def test_a_ladder_resumed_as_an_ablation_or_given_as_a_new_out_names_scale_resume(ladder, run):
    folder = ladder.folder
    err = user_error(run, "ablate", "--resume", folder)
    assert "is a ladder, not one ablation" in err and f"scale --resume {folder}" in err, err
    for command in ("scale", "ablate"):
        err = user_error(run, command, "--smoke", "--out", folder)
        assert "already holds a ladder" in err and f"scale --resume {folder}" in err, err


def test_a_rung_or_a_missing_folder_resumed_as_a_ladder_is_named_without_an_errno(ladder, run, tmp_path):
    err = user_error(run, "scale", "--resume", ladder.folder / "rung-0")
    assert "is a rung of the ladder" in err and f"scale --resume {ladder.folder}" in err and "Errno" not in err
    ablation = Path(__file__).parents[1] / "golden" / "folders" / "ablate"  # read only: refused before a write
    err = user_error(run, "scale", "--resume", ablation)
    assert "is an ablation folder, not a ladder" in err and "ablate --resume" in err, err
    err = user_error(run, "scale", "--resume", tmp_path / "nowhere")
    assert "does not exist" in err and "Errno" not in err, err
    (tmp_path / "empty").mkdir()
    err = user_error(run, "scale", "--resume", tmp_path / "empty")
    assert "holds no ladder.json" in err and "Errno" not in err, err


def test_a_rung_without_meta_json_says_how_to_train_it_again_and_no_out(ladder, run, tmp_path):
    folder = _copy(ladder, tmp_path)
    (folder / "rung-1" / "meta.json").unlink()
    for args in (["scale", "--resume", folder], ["report", folder]):
        err = user_error(run, *args)
        assert "rung-1 holds no meta.json" in err and "--out" not in err, err


@pytest.mark.parametrize("kind", ["pipe (FIFO)", "folder"])
def test_a_ladder_json_that_is_no_file_is_named_as_what_it_is(ladder, run, tmp_path, kind):
    folder = _copy(ladder, tmp_path)
    (folder / "ladder.json").unlink()
    os.mkfifo(folder / "ladder.json") if kind != "folder" else (folder / "ladder.json").mkdir()
    for args in (["scale", "--resume", folder], ["report", folder], ["ablate", "--resume", folder]):
        err = user_error(run, *args)
        assert f"ladder.json is a {kind}" in err or "is a ladder" in err, err


@pytest.mark.parametrize(
    "flags, says, never",
    [
        (["--rung-steps", "10,5,60"], "would train fewer steps (5) than the smaller rung", None),
        (["--target-compute", "1e400"], "too large for a float", "got inf"),
        (["--lrs", ""], "--lrs '': give 1 to", "None"),
    ],
)
def test_ladder_flags_are_refused_before_training_in_their_own_words(run, tmp_path, flags, says, never):
    err = user_error(run, "scale", "--smoke", *flags, "--out", tmp_path / "x")
    assert says in err and (never is None or never not in err), err
    assert not (tmp_path / "x").exists()  # nothing trained


def test_a_size_column_titles_the_table_in_its_units_not_compute(ladder, run):
    code, out, err = run("judge", ladder.folder / "runs.csv", "--size-col", "params", "--rung-col", "rung")
    assert code == 0, err
    title = out.strip().splitlines()[0]
    assert title.startswith("size multiplier k") and "times the params" in title and "compute" not in title, title
    got = modern_gpt.judge(ladder.runs, size_col="params", rung_col="rung")
    assert got.attrs["title"].startswith("size multiplier k"), got.attrs["title"]


def test_a_ladder_with_no_complete_seed_names_its_resume_not_a_file_of_your_own(ladder, run, tmp_path):
    folder = _copy(ladder, tmp_path)
    for seed in (0, 1):
        (folder / "rung-0" / "runs" / f"row00-seed{seed}.json").unlink()
    err = user_error(run, "report", folder)
    assert "no seed trained every row" in err and f"scale --resume {folder}" in err, err
    assert "file of your own" not in err and "--rung-col" not in err, err
    runs = pd.read_csv(ladder.folder / "runs.csv")
    runs.loc[(runs["rung"] == 0) & (runs["seed"] == 1), "flops"] *= 1.5  # seed 1's own compute: another rung
    runs.drop(columns=["rung"]).to_csv(tmp_path / "mine.csv", index=False)
    err = user_error(run, "judge", tmp_path / "mine.csv", "--compute-col", "flops")
    assert "--rung-col" in err, err
