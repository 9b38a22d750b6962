"""judge --compute-col on a ladder folder's own runs.csv gives the ladder's own table: runs.csv says each row's
reference and placebo, as an ablation's does, so that a ladder with a placebo row is judged against the plan's
references (not each row against the row above, which compared RoPE with the placebo)."""

from __future__ import annotations

from io import StringIO

import pandas as pd
import pytest

import modern_gpt

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
