"""modern-gpt scale end to end: a tiny ladder decides and writes its table, judge --compute-col gives the same
table from its runs.csv, a resumed ladder and one trained with --jobs 2 equal --jobs 1, and every bad input is
one sentence (exit 2) before anything trains."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

import modern_gpt
from modern_gpt.core.errors import UserError
from tests.clihelp import TIMING, user_error

# Two rows (classic, RoPE) at three widths, 2 seeds, 24 steps at the top rung: twelve short runs.
LADDER = dict(
    smoke=True, plan="custom", variants="classic;rope", placebo=False, seeds=2, steps=24, eval_every=12, jobs=1
)
FLAGS = ["--smoke", "--plan", "custom", "--variants", "classic;rope", "--no-placebo", "--seeds", "2", "--steps", "24"]


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ladder") / "scale"
    return modern_gpt.scale(out=folder, **LADDER)


def _values(folder, name):
    frame = pd.read_csv(os.path.join(folder, name))
    return frame.drop(columns=[c for c in TIMING if c in frame])


def test_a_ladder_writes_its_rungs_and_its_scale_table(ladder):
    folder = ladder.folder
    rungs = json.loads((folder / "ladder.json").read_text())["rungs"]
    assert [r["dim"] for r in rungs] == [16, 32, 64] and rungs[-1]["steps"] == 24  # the top rung is the config
    assert rungs[0]["steps"] < rungs[1]["steps"] < 24  # tokens in proportion to parameters
    assert all((folder / f"rung-{i}" / "summary.csv").is_file() for i in range(3))
    assert (folder / "scale.png").stat().st_size > 10_000  # loss against compute, and k against compute
    summary = pd.read_csv(folder / "summary.csv")
    for col in ("k", "k_low", "k_high", "trend", "k_0", "k_2_high", "flops_1"):
        assert col in summary
    rope = summary.set_index("variant").loc["rope"]
    assert rope["k_low"] < rope["k"] < rope["k_high"] and rope["trend"] in ("grows", "shrinks", "inconclusive")
    runs = pd.read_csv(folder / "runs.csv")
    assert len(runs) == 2 * 2 * 3 and (runs["flops"] > 0).all()
    # each variant charged its own compute, growing with the rung
    assert (runs.groupby("rung")["flops"].mean().diff().dropna() > 0).all()


def test_judge_compute_col_gives_the_ladders_own_table(ladder, run):
    code, out, _ = run("judge", ladder.folder / "runs.csv", "--compute-col", "flops", "--format", "csv")
    assert code == 0
    from io import StringIO

    pd.testing.assert_frame_equal(pd.read_csv(StringIO(out)), pd.read_csv(ladder.folder / "summary.csv"))


def test_modern_gpt_judge_compute_col_gives_it_in_python(ladder):
    got = modern_gpt.judge(pd.read_csv(ladder.folder / "runs.csv"), compute_col="flops")
    from io import StringIO

    as_csv = pd.read_csv(StringIO(got.to_csv(index=False)))  # as the file holds it: an empty reference is NaN
    pd.testing.assert_frame_equal(as_csv, pd.read_csv(ladder.folder / "summary.csv"))
    assert any("shared E" in n for n in got.attrs["footnotes"])


def test_report_of_a_ladder_folder_prints_its_scale_table(ladder, run):
    code, out, _ = run("report", ladder.folder)
    assert code == 0 and "compute multiplier k" in out and "Rung 16x1" not in out and "Rung 16x" in out


@pytest.mark.slow
def test_a_resumed_ladder_and_jobs_2_equal_jobs_1(ladder, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(ladder.folder, copy)
    for i in (0, 2):  # a run lost from two rungs
        victim = sorted((copy / f"rung-{i}" / "runs").glob("*.json"))[-1]
        victim.unlink()
    modern_gpt.scale(resume=copy)
    two = modern_gpt.scale(out=tmp_path / "jobs2", **{**LADDER, "jobs": 2})
    for name in ("runs.csv", "summary.csv"):
        want = _values(ladder.folder, name)
        pd.testing.assert_frame_equal(_values(copy, name), want)
        pd.testing.assert_frame_equal(_values(two.folder, name), want)


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--rungs", "32,64"], "at least 3 rungs"),
        (["--rungs", "1"], "3 to 8 rungs"),
        (["--rungs", "64,32,128"], "must grow in size"),
        (["--rungs", "16,32,64", "--depths", "1,2"], "one per rung"),
        (["--rungs", "7"], "rung 1x2: the width 1 is not divisible by the 4 heads"),
        (["--dim", "48", "--rungs", "6"], "does not stay a whole number"),
        (["--rungs", "12,32,64"], "multiples of"),
        (["--tokens-per-param", "0.0001"], "below one batch"),
        (["--rung-steps", "5,10"], "one whole number"),
        (["--seeds", "auto"], "--seeds N"),
        (["--lr-rule", "magic"], "--lr-rule must be one of"),
        (["--lrs", "1e-3,3e-3", "--lr-rule", "constant"], "give one"),
        (["--trend-margin", "0.9"], "above 1"),
        (["--rungs", "64,128,131072"], "memory"),
    ],
)
def test_bad_ladders_are_one_sentence_before_anything_trains(run, tmp_path, flags, says):
    args = [*FLAGS, *flags, "--out", tmp_path / "x"]
    if flags[0] == "--seeds":
        args = [a for a in args if a != "2" or args[args.index(a) - 1] != "--seeds"]
        args.remove("--seeds")
    err = user_error(run, "scale", *args)
    assert says in err, err
    assert not (tmp_path / "x").exists()  # nothing made


def test_resume_refuses_to_change_the_rungs(ladder, run):
    err = user_error(run, "scale", "--resume", ladder.folder, "--rungs", "4")
    assert "fixed when it starts" in err
    args = ["--lr-rule", "constant", "--depths", "1,1,1", "--trend-margin", "1.2"]  # the table's own is let be
    err = user_error(run, "scale", "--resume", ladder.folder, *args)
    assert "--depths with --resume" in err, err  # the first of the rungs' flags, in the flags' order


def test_the_api_refuses_auto_seeds():
    with pytest.raises(UserError, match="--seeds N"):
        modern_gpt.scale(smoke=True, seeds="auto")


@pytest.mark.slow
def test_a_ladder_takes_plugins_and_trackers_as_an_ablation_does(run, tmp_path):
    pytest.importorskip("tensorboard")
    from pathlib import Path

    plugin = Path(__file__).parents[2] / "examples" / "components" / "relu2.py"
    tiny = ["--smoke", "--context", "16", "--dim", "32", "--heads", "2", "--layers", "1", "--steps", "12"]
    args = [*tiny, "--seeds", "1", "--plan", "custom", "--variants", "classic;relu2", "--no-placebo"]
    code, out, err = run("scale", *args, "--plugin", plugin, "--track", "tensorboard", "--out", tmp_path / "l")
    assert code == 0, err
    assert "relu2" in out and "compute multiplier k" in out
    for i in range(3):
        meta = json.loads((tmp_path / "l" / f"rung-{i}" / "meta.json").read_text())
        assert [p["components"] for p in meta["plugins"]] == [["relu2"]]  # recorded at every rung
        assert list((tmp_path / "l" / f"rung-{i}" / "tensorboard").rglob("events.out.tfevents.*"))


@pytest.mark.slow
def test_the_smoke_ladder_prints_k_with_cis_and_trend_verdicts(run, tmp_path):
    """What CI shows: modern-gpt scale --smoke --seeds 3 at widths 16, 32 and 64, in seconds (here with two of the
    components, half the default plan's runs: the test budget)."""
    code, out, err = run("scale", "--smoke", "--seeds", "3", "--components", "rope,qk_norm", "--out", tmp_path / "s")
    assert code == 0, err
    summary = pd.read_csv(tmp_path / "s" / "summary.csv")
    assert summary["variant"].tolist() == ["classic", "classic (placebo)", "+rope", "+qk_norm"]
    tested = summary.iloc[2:]
    assert (tested["k_low"] < tested["k"]).all() and (tested["k"] < tested["k_high"]).all()
    assert set(tested["trend"]) <= {"grows", "shrinks", "inconclusive"}
    # at seeds 0-2 the smoke rungs fall about straight in ln C: fitted as such (not bent at E = 0, which read both
    # trends as `grows`), RoPE reads 1.20x per 10x compute (CI 0.99-1.47) and neither trend is decided, so no crossover
    assert set(tested["trend"]) == {"inconclusive"} and tested["crossover"].isna().all()
    assert "k (ladder)" in out and "Rung 64x2" in out


def test_a_rung_that_trains_more_than_an_epoch_is_named_in_the_scale_table(tmp_path):
    """The memorisation warning, per rung: a small corpus and many tokens per parameter."""
    text = tmp_path / "small.txt"
    text.write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(200)))
    result = modern_gpt.scale(
        path=str(text),
        tokenizer="char",
        context=16,
        dim=32,
        heads=2,
        layers=1,
        batch_size=8,
        steps=60,
        eval_every=30,
        eval_tokens=512,
        plan="custom",
        variants="classic;rope",
        placebo=False,
        seeds=1,  # the warning is the rung's, whatever the seeds
        tokens_per_param=2.0,
        out=tmp_path / "l",
    )
    epochs = [n for n in result.footnotes if "epochs of the training split" in n]
    assert epochs and epochs[-1].startswith("Rung 32x1")  # the top rung, which sees the most tokens


def test_a_best_learning_rate_at_the_edge_of_its_grid_is_flagged_per_rung():
    from types import SimpleNamespace

    from modern_gpt.ablation.ladder import Rung, _edge_notes

    rung = Rung(32, 2, 10, 1, 5, None, 1000)
    rows = [SimpleNamespace(name="classic", lr=1e-3), SimpleNamespace(name="rope", lr=3e-3)]
    sweep = SimpleNamespace(lrs=(1e-3, 3e-3, 1e-2), at=None)
    (note,) = _edge_notes(rung, SimpleNamespace(sweep=sweep, rows=rows))
    assert note.startswith("Rung 32x2: the best learning rate of classic (0.001) is at the edge") and "rope" not in note
    inside = [SimpleNamespace(name="rope", lr=3e-3)]
    assert _edge_notes(rung, SimpleNamespace(sweep=sweep, rows=inside)) == []
    assert _edge_notes(rung, SimpleNamespace(sweep=None, rows=rows)) == []  # no grid, no edge


# ---------------------------------------------------------------------------
# A hostile pass on the ladder (each case was a traceback, a hang or a silently wrong table before)
# ---------------------------------------------------------------------------
def _copy(ladder, tmp_path):
    import shutil

    return Path(shutil.copytree(ladder.folder, tmp_path / "copy"))


def _edit_ladder(folder, change):
    path = folder / "ladder.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d.update(target_compute="big"), "target_compute is 'big', not a number"),
        (lambda d: d.update(trend_margin=0.5), "trend_margin is 0.5, not a number above 1"),
        (lambda d: d["rungs"][0].update(dim=64), "rungs[0] says 64x2"),
        (lambda d: d["rungs"][0].update(dim="eight"), "rungs[0].dim is 'eight'"),
        (lambda d: d["rungs"].reverse(), "rungs[0] says 64x2"),
        (lambda d: d.update(lr_rule=3), "lr_rule is 3, not text"),
    ],
)
def test_a_hand_edited_ladder_json_is_one_sentence(ladder, run, tmp_path, change, says):
    folder = _copy(ladder, tmp_path)
    _edit_ladder(folder, change)
    for args in (["report", folder], ["scale", "--resume", folder]):
        err = user_error(run, *args)
        assert "ladder.json" in err and says in err, err


def test_a_ladder_json_that_is_a_pipe_is_never_read(ladder, run, tmp_path):
    folder = _copy(ladder, tmp_path)
    (folder / "ladder.json").unlink()
    os.mkfifo(folder / "ladder.json")
    err = user_error(run, "scale", "--resume", folder)  # it hung, reading the pipe
    assert "ladder.json is a named pipe" in err or "FIFO" in err or "pipe" in err, err


def test_a_run_file_with_a_bad_compute_or_an_absurd_loss_is_a_sentence_or_a_table(ladder, run, tmp_path):
    folder = _copy(ladder, tmp_path)
    victim = folder / "rung-0" / "runs" / "row01-seed1.json"
    record = json.loads(victim.read_text())
    victim.write_text(json.dumps({**record, "flops": -5.0}))
    err = user_error(run, "report", folder)
    assert "has a training compute of -5.0, not a positive number of FLOPs" in err, err
    victim.write_text(json.dumps({**record, "val_loss": 1e308}))
    code, out, err = run("report", folder / "rung-0")  # an OverflowError traceback before
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--tokens-per-param", "1e9"], "more than the 100,000,000 a ladder takes"),
        (["--rung-steps", "2,3,99999999999999999999"], "from 1 to 100,000,000 per rung"),
        (["--rungs", "32,,64"], "has an empty entry"),
        (["--rungs", "8,16,32,"], "has an empty entry"),
        (["--depths", "1,,1"], "has an empty entry"),
    ],
)
def test_ladder_flags_that_hung_or_were_read_loosely_are_refused(run, tmp_path, flags, says):
    err = user_error(run, "scale", *FLAGS, *flags, "--out", tmp_path / "x")
    assert says in err and not (tmp_path / "x").exists(), err


def test_judge_refuses_rungs_that_differ_by_variant_or_do_not_grow(ladder, run, tmp_path):
    runs = pd.read_csv(ladder.folder / "runs.csv")
    shifted = runs.assign(
        rung=[r + 10 if v == "rope" else r for r, v in zip(runs["rung"], runs["variant"], strict=True)]
    )
    shifted.to_csv(tmp_path / "shifted.csv", index=False)
    err = user_error(run, "judge", tmp_path / "shifted.csv", "--compute-col", "flops")  # an IndexError before
    assert "every variant needs the same rungs" in err, err
    flat = runs.assign(flops=[1e9 if r == 2 else f for r, f in zip(runs["rung"], runs["flops"], strict=True)])
    flat.loc[flat["rung"] == 1, "flops"] = 1e9
    flat.to_csv(tmp_path / "flat.csv", index=False)
    err = user_error(run, "judge", tmp_path / "flat.csv", "--compute-col", "flops")
    assert "training compute does not grow from rung to rung" in err, err
    with pytest.raises(UserError, match="DataFrame"):
        modern_gpt.judge([1, 2], compute_col="flops")  # a TypeError before
    with pytest.raises(UserError, match="trend margin must be a number"):
        modern_gpt.judge(runs, compute_col="flops", trend_margin="1.1")


def test_judge_of_a_ladder_names_unfinished_states_and_says_how_to_mark_a_failed_run(ladder, run, tmp_path):
    """judge's footnote for a State column (W&B's export) that says a counted run crashed, and the hint of a
    loss that is not finite, as judge gives them for one size (the ladder's reader gave neither)."""
    runs = pd.read_csv(ladder.folder / "runs.csv").drop(columns=["rung"])
    runs["State"] = ["crashed" if i == 4 else "finished" for i in range(len(runs))]
    runs.to_csv(tmp_path / "state.csv", index=False)
    code, out, err = run("judge", tmp_path / "state.csv", "--compute-col", "flops")
    row = runs.iloc[4]
    assert code == 0 and "Column State says 1 run did not finish" in " ".join(out.split()), err
    assert f"{row['variant']!r}, seed {row['seed']}, rung" in " ".join(out.split())
    runs["val_loss"] = runs["val_loss"].astype(object)
    runs.loc[4, "val_loss"] = "nan"  # as a tracker writes it (pandas writes NaN as an empty cell)
    runs.to_csv(tmp_path / "nan.csv", index=False)
    err = user_error(run, "judge", tmp_path / "nan.csv", "--compute-col", "flops")
    assert "line 6, column val_loss: nan is not a finite number (a failed run is marked true in a diverged" in err


def test_judge_names_seeds_of_a_row_whose_computes_differ_at_a_rung(ladder, run, tmp_path):
    """One seed's compute at a rung 1.9x the others' was averaged (geometrically) into that rung's k without a
    word; the ladder's own runs.csv (the control) has none."""
    runs = pd.read_csv(ladder.folder / "runs.csv")
    code, out, err = run("judge", ladder.folder / "runs.csv", "--compute-col", "flops")
    assert code == 0 and "differs between the seeds" not in out, err
    i = runs.index[(runs["rung"] == 1) & (runs["seed"] == 0)][1]
    runs.loc[i, "flops"] *= 1.9
    runs.to_csv(tmp_path / "uneven.csv", index=False)
    code, out, err = run("judge", tmp_path / "uneven.csv", "--compute-col", "flops")
    said = " ".join(out.split())
    assert code == 0 and "Column flops differs between the seeds of one row at one rung" in said, err
    assert f"{runs.loc[i, 'variant']!r} at rung" in said


def test_a_diverged_runs_smaller_compute_is_not_uneven(ladder, run, tmp_path):
    """A run that diverged early records the compute of the steps it did; it is left out, and so from the
    uneven-compute footnote too (it named that run's rung though the table does not read it)."""
    runs = pd.read_csv(ladder.folder / "runs.csv")
    i = runs.index[(runs["rung"] == 1) & (runs["seed"] == 0)][1]
    runs.loc[i, ["flops", "diverged"]] = [runs.loc[i, "flops"] * 0.4, True]
    runs.to_csv(tmp_path / "diverged.csv", index=False)
    code, out, err = run("judge", tmp_path / "diverged.csv", "--compute-col", "flops")
    assert code == 0 and "differs between the seeds" not in out, (out, err)


def test_resume_takes_the_tables_own_choices_and_a_narrow_terminal_keeps_every_column(
    ladder, run, tmp_path, monkeypatch
):
    folder = _copy(ladder, tmp_path)
    code, out, err = run("scale", "--resume", folder, "--target-compute", "1e12")  # refused before: not a rung's
    assert code == 0 and "k at 1e+12" in out, err
    assert json.loads((folder / "ladder.json").read_text())["target_compute"] == 1e12
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = run("report", folder)
    assert code == 0 and "classic" in out and "rope" in out  # rich dropped the names' columns in a narrow console


def test_a_rungs_missing_runs_name_the_ladders_resume_in_either_table(ladder, run, tmp_path):
    """The rung's own report and the scale table both say modern-gpt scale --resume DIR (ablate --resume on the
    rung would leave the scale table stale)."""
    folder = _copy(ladder, tmp_path)
    (folder / "rung-1" / "runs" / "row01-seed1.json").unlink()
    for where in (folder / "rung-1", folder):
        code, out, err = run("report", where)
        shown = " ".join((out + err).split())
        assert f"finish them with: modern-gpt scale --resume {folder}" in shown, shown[-400:]
        assert "ablate --resume" not in shown


def _foreign(ladder, tmp_path, change) -> Path:
    """A copy of the ladder whose rung-0 meta.json is changed by change(meta) (as a rung from another ladder)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(ladder.folder, copy)
    path = copy / "rung-0" / "meta.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))
    return copy


def _other_plan(meta):
    """rung-0 of a ladder of classic;swiglu in place of classic;rope."""
    row = meta["spec"]["variants"][1]
    row["name"], row["components"] = "swiglu", ["swiglu"]
    meta["variants"][1]["name"] = "swiglu"


def _other_size(meta):
    meta["spec"]["settings"]["model"]["dim"] = 24


@pytest.mark.parametrize(("change", "says"), [(_other_plan, "holds the rows classic, swiglu"), (_other_size, "24x")])
def test_a_rung_from_another_ladder_is_named_before_a_number_is_read(ladder, run, tmp_path, change, says):
    """Rungs are matched by position: a rung-0 copied from a ladder of classic;swiglu gave rope's k from swiglu's
    runs, with exit 0, by report and by scale --resume."""
    copy = _foreign(ladder, tmp_path, change)
    for args in (("report", copy), ("scale", "--resume", copy)):
        err = user_error(run, *args)
        assert f"{copy / 'rung-0'} is not rung 0 of the ladder" in err and says in err, err
