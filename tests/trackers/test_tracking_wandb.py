"""--track wandb, read back from W&B's offline run folders (tests/wandbread.py), and `report DIR --track`, which
pushes a results folder after the fact, once. Nothing here reaches the network: WANDB_MODE=offline, no login."""

import json
import shutil
import sys

import pandas as pd
import pytest

from modern_gpt.ablation.results import ResultsDir
from tests.clihelp import CLASSIC_ROPE, VERDICT_COLUMNS, invoke, tiny
from tests.wandbread import offline_env, runs

pytest.importorskip("wandb")

ARGS = [*tiny(4, 2), *CLASSIC_ROPE, "--jobs", "1"]


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One smoke ablation with --track wandb (six runs): its folder and the W&B root it logged to."""
    base = tmp_path_factory.mktemp("wandb")
    with pytest.MonkeyPatch.context() as mp:
        offline_env(mp, base)
        invoke("ablate", *ARGS, "--track", "wandb", "--out", base / "r")
    return base / "r", base


def run_files(folder) -> dict[tuple[int, int], dict]:
    out = {}
    for f in (folder / "runs").glob("*.json"):
        record = json.loads(f.read_text())
        out[record["row"], record["seed"]] = record
    return out


def seed_runs(root) -> list:
    return [r for r in runs(root) if r.job_type == "run"]


def verdicts(folder) -> dict[str, str]:
    """summary.csv's verdict of each variant ("" for the reference row)."""
    table = pd.read_csv(folder / "summary.csv", keep_default_na=False)
    return dict(zip(table["variant"], table["verdict"], strict=True))


def test_one_wandb_run_per_row_and_seed_in_the_folders_group_with_its_tags_and_final_metrics(logged):
    folder, root = logged
    records, logged_runs = run_files(folder), seed_runs(root)
    verdict = verdicts(folder)
    assert len(records) == 6 and len(logged_runs) == 6
    by_id = {r.id: r for r in logged_runs}
    assert len(by_id) == 6  # one W&B run per (row, seed), none twice
    for (row, seed), record in records.items():
        run = by_id[record["tracked"]["wandb"]]  # the id the run file records
        assert run.group == "r" and run.name == f"{record['variant']} seed {seed}" and run.exit_code == 0
        marks = {f"verdict={verdict[record['variant']]}"} if row else set()  # the reference row has no verdict
        assert set(run.tags) == {"folder=r", "plan=custom", f"row={row}", f"variant={record['variant']}", *marks}
        assert run.config.get("verdict", "") == verdict[record["variant"]]
        assert run.config["seed"] == seed and run.config["variant"] == record["variant"]
        assert run.config["model.dim"] == 16 and run.config["train.lr"] == record["lr"]
        assert run.config["model.rope"] == ("rope" in record["components"].split("+"))  # the model it trained
        assert run.config["model.vocab_size"] == record["vocab_size"] != 256
        for key in ("train_loss", "val_loss", "val_bpc", "val_ppl", "tokens_per_s"):
            assert run.summary[key] == pytest.approx(record[key], rel=1e-12), key
        assert run.summary["diverged"] == 0.0
        curve = [(p["step"], p["val_loss"]) for p in record["curve"]]
        history = [(h["_step"], h["curve/val_loss"]) for h in run.history if "curve/val_loss" in h]
        assert history == curve and len(history) == 2  # JSON floats round-trip exactly


def test_the_summary_run_holds_the_table_the_curves_and_each_rows_verdict(logged):
    folder, root = logged
    (summary,) = [r for r in runs(root) if r.job_type == "summary"]
    assert summary.group == "r" and summary.name == "summary" and "summary" in summary.tags
    table = json.loads((summary.folder / "files" / summary.summary["summary/path"]).read_text())
    expected = pd.read_csv(folder / "summary.csv", keep_default_na=False)
    assert table["columns"] == list(expected.columns) and len(table["data"]) == 3
    assert [row[table["columns"].index("variant")] for row in table["data"]] == list(expected["variant"])
    assert (summary.folder / "files" / summary.summary["curves/path"]).stat().st_size > 1000  # curves.png
    for _, row in expected.iterrows():
        at = f"row{row['row']:02d}"
        assert summary.summary[f"{at}.variant"] == row["variant"]
        assert summary.summary[f"{at}.verdict"] == row["verdict"]
        if row["row"]:  # the reference row has no Δ
            assert summary.summary[f"{at}.p_adj"] == pytest.approx(float(row["p_adj"]))
            assert summary.summary[f"{at}.delta_val"] == pytest.approx(float(row["delta_val"]))
    assert {r["verdict"] for _, r in expected.iterrows() if r["row"]} <= {"better", "worse", "inconclusive", "same"}


def test_every_seed_run_carries_its_rows_verdict_and_the_summary_a_typed_table_with_the_ci(logged):
    """Issue 33: only the summary run held the verdicts; now each seed's run has its row's verdict in its
    config (a column of W&B's runs table, to filter and group by) and tags, and the summary run a wandb.Table
    of the verdicts whose Δ, CI, p, p_adj and mde are numbers (summary.csv's table holds the file's text)."""
    folder, root = logged
    verdict = verdicts(folder)
    tested = [r for r in seed_runs(root) if verdict[r.config["variant"]]]
    assert len(tested) == 4 and all(r.config["verdict"] == verdict[r.config["variant"]] for r in tested)
    assert all(len(r.history) == 2 and r.exit_code == 0 for r in tested)  # logged again whole, not doubled
    (summary,) = [r for r in runs(root) if r.job_type == "summary"]
    table = json.loads((summary.folder / "files" / summary.summary["verdicts/path"]).read_text())
    assert table["columns"] == VERDICT_COLUMNS
    expected = pd.read_csv(folder / "summary.csv")
    for cells, (_, row) in zip(table["data"], expected.iterrows(), strict=True):
        got = dict(zip(table["columns"], cells, strict=True))
        assert got["variant"] == row["variant"] and got["verdict"] == verdict[row["variant"]]
        for key in ("delta_val", "ci_low", "ci_high", "p", "p_adj", "mde"):
            assert got[key] == (None if pd.isna(row[key]) else pytest.approx(row[key], rel=1e-12)), key
        assert got["reference"] == ("" if pd.isna(row["reference"]) else "classic")


def copy_of(logged, tmp_path, drop=(), untrack=()) -> tuple:
    """The logged folder copied to tmp_path (a new folder: new W&B ids), less the run files of drop and less
    the W&B ids of untrack, as an interrupted ablation or a tracker that failed midway leaves it."""
    folder = shutil.copytree(logged[0], tmp_path / "r")
    for row, seed in drop:
        (folder / "runs" / f"row{row:02d}-seed{seed}.json").unlink()
    for row, seed in untrack:
        f = folder / "runs" / f"row{row:02d}-seed{seed}.json"
        f.write_text(json.dumps({k: v for k, v in json.loads(f.read_text()).items() if k != "tracked"}))
    meta = json.loads((folder / "meta.json").read_text())
    meta["status"] = "interrupted" if drop else meta["status"]
    (folder / "meta.json").write_text(json.dumps(meta))
    root = tmp_path / "wb"
    root.mkdir()
    return folder, root


def test_a_resumed_ablation_logs_only_the_runs_it_adds(logged, tmp_path, monkeypatch):
    """Resumed where W&B logged its first runs (the same offline root): those are held, and only the two runs the
    resume adds are logged."""
    folder, _ = copy_of(logged, tmp_path, drop=[(1, 1), (2, 1)])
    root = logged[1]
    offline_env(monkeypatch, root)
    before = {r.id for r in seed_runs(root)}
    invoke("ablate", "--resume", folder, "--track", "wandb")
    added = [r for r in seed_runs(root) if r.id not in before]
    assert sorted((r.config["row"], r.config["seed"]) for r in added) == [(1, 1), (2, 1)]
    records = run_files(folder)
    assert {records[1, 1]["tracked"]["wandb"], records[2, 1]["tracked"]["wandb"]} == {r.id for r in added}


def test_report_track_pushes_what_a_tracker_lacks_once_and_replaces_a_half_logged_run(
    logged, tmp_path, monkeypatch, run
):
    folder, root = copy_of(logged, tmp_path, untrack=[(row, seed) for row in range(3) for seed in range(2)])
    offline_env(monkeypatch, root)
    writer = ResultsDir(folder)
    writer.lock()  # as an ablation still writing the folder holds it
    try:
        code, out, err = run("report", folder, "--track", "wandb")
    finally:
        writer.unlock()
    assert code == 2 and f"{folder} is being written by another modern-gpt process" in err and not runs(root), err
    code, out, err = run("report", folder, "--track", "wandb")
    assert code == 0 and "wandb: logged 6 runs and the summary" in err, err
    assert len(seed_runs(root)) == 6 and len(runs(root)) == 7
    # killed after logging two runs, before their ids reached the run files: pushed again, replaced, not doubled
    for f in [folder / "runs" / "row01-seed0.json", folder / "runs" / "row02-seed1.json"]:
        f.write_text(json.dumps({k: v for k, v in json.loads(f.read_text()).items() if k != "tracked"}))
    code, out, err = run("report", folder)
    assert code == 0 and "2 of 6 runs are not in wandb; modern-gpt report" in out, out
    code, out, err = run("report", folder, "--track", "wandb")
    assert code == 0 and "wandb: logged 2 runs and the summary" in err and "not in wandb" not in out, (out, err)
    folders = [r.folder.name for r in runs(root)]
    assert len(folders) == 7 and len({r.id for r in runs(root)}) == 7, folders
    code, out, err = run("report", folder, "--track", "wandb")  # nothing new: nothing logged
    assert code == 0 and "wandb: holds every run already" in err
    assert sorted(r.folder.name for r in runs(root)) == sorted(folders)


def test_wandb_that_cannot_log_is_one_sentence_before_anything_trains(tmp_path, monkeypatch, run):
    offline_env(monkeypatch, tmp_path)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no `wandb login` either
    code, out, err = run("ablate", *ARGS, "--track", "wandb", "--out", tmp_path / "a")
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "a").exists(), err
    assert "--track wandb with WANDB_MODE=online needs a W&B login (wandb login, or WANDB_API_KEY)" in err
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "missing"))
    code, out, err = run("ablate", *ARGS, "--track", "wandb", "--out", tmp_path / "a")
    assert code == 2 and not (tmp_path / "a").exists()
    assert (
        err
        == f"modern-gpt: error: --track wandb: WANDB_DIR={tmp_path / 'missing'} is not a writable folder; create it or unset it.\n"
    )
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    code, out, err = run("ablate", *ARGS, "--track", "wandb", "--out", tmp_path / "a")
    assert code == 2 and 'pip install -e ".[wandb]"' in err and not (tmp_path / "a").exists(), err


def test_what_a_tracker_that_failed_left_undone_is_pushed_by_report_track(tmp_path, monkeypatch, run):
    """W&B fails after one run of the ablation (which goes on), then after one more run of a push (one sentence,
    exit 2, that run's id kept); the next push logs the rest and the summary, and the footnote is gone."""
    from modern_gpt.trackers.wandb import WandbBackend

    offline_env(monkeypatch, tmp_path)
    log_run, calls = WandbBackend.log_run, []

    def fails_after(n):
        def log(self, record):
            calls.append(record["row"])
            if len(calls) > n:
                raise ConnectionError("wandb went away")
            return log_run(self, record)

        return log

    monkeypatch.setattr(WandbBackend, "log_run", fails_after(1))
    folder = tmp_path / "r"
    code, out, err = run("ablate", *ARGS, "--no-placebo", "--out", folder, "--track", "wandb")
    assert code == 0 and err.count("warning: wandb failed (ConnectionError: wandb went away)") == 1, err
    assert len(run_files(folder)) == 4 and "3 of 4 runs are not in wandb (ConnectionError" in " ".join(out.split())
    calls.clear()
    code, out, err = run("report", folder, "--track", "wandb")
    assert code == 2 and err.startswith("modern-gpt: error: 2 of 4 runs are not in wandb (ConnectionError"), err
    assert err.rstrip().endswith(f"modern-gpt report {folder} --track wandb logs what is missing.")
    monkeypatch.setattr(WandbBackend, "log_run", log_run)
    code, out, err = run("report", folder, "--track", "wandb")
    assert code == 0 and "wandb: logged 2 runs and the summary" in err and "not in wandb" not in out, (out, err)
    assert sorted(r.id for r in seed_runs(tmp_path)) == sorted(
        r["tracked"]["wandb"] for r in run_files(folder).values()
    )
    assert [r.name for r in runs(tmp_path) if r.job_type == "summary"] == ["summary"]
    assert json.loads((folder / "meta.json").read_text())["tracking"]["wandb"] == {"error": None, "summary": True}


def test_wandb_that_would_log_nothing_is_refused_before_anything_trains(logged, tmp_path, monkeypatch, run):
    """WANDB_MODE=disabled gives run ids and logs nothing: they went into the run files as logged."""
    offline_env(monkeypatch, tmp_path)
    for mode, fragment in [("disabled", "logs nothing"), ("bogus", "is not a W&B mode")]:
        monkeypatch.setenv("WANDB_MODE", mode)
        code, out, err = run("ablate", *ARGS, "--track", "wandb", "--out", tmp_path / "a")
        assert code == 2 and err.count("\n") == 1 and not (tmp_path / "a").exists(), err
        assert err.startswith(f"modern-gpt: error: --track wandb with WANDB_MODE={mode}") and fragment in err, err
        code, out, err = run("train", *tiny(2), "--track", "wandb", "--out", tmp_path / "c")
        assert code == 2 and fragment in err and not (tmp_path / "c").exists(), err
    monkeypatch.setenv("WANDB_MODE", "disabled")
    folder, _ = copy_of(logged, tmp_path)
    code, out, err = run("report", folder, "--track", "wandb")
    assert code == 2 and err.count("\n") == 1 and "logs nothing" in err, err
