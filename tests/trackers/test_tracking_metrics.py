"""Issue 46: with --eval-data sets an ablation judges several metrics, one verdict per (row, metric) in
metrics.csv; each tracker logs every further metric's Δ, CI, p, p_adj, mde and verdict per table row, and each
run's own numbers on every set. One smoke ablation on the shipped sets, logged to TensorBoard, MLflow and W&B
(offline), read back from each tracker's own store and compared with metrics.csv and the run files."""

import csv
import json
import math
from pathlib import Path

import pytest

from tests.clihelp import CLASSIC_ROPE, main_ok, tiny
from tests.trackers.test_tracking import _events, _records
from tests.wandbread import offline_env, runs

pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

SETS = Path(__file__).resolve().parents[2] / "modern_gpt" / "evalsets"
STATS = ("delta", "ci_low", "ci_high", "p", "p_adj", "mde")
PER_RUN = ("val_bpb", "code_loss", "code_bpb", "prose_loss", "prose_bpb", "icl_gain", "ctx2x_loss")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, mlflow_store):
    """(results folder, MLflow URI): three rows (classic, its placebo, rope) x 2 seeds, on code and prose."""
    base = tmp_path_factory.mktemp("metrics")
    uri = mlflow_store(base / "mlflow.db")
    sets = ["--eval-data", f"code={SETS / 'code.txt'}", "--eval-data", f"prose={SETS / 'prose.txt'}"]
    trackers = ["--track", "tensorboard", "--track", "mlflow", "--mlflow-uri", uri, "--track", "wandb"]
    with pytest.MonkeyPatch.context() as mp:
        offline_env(mp, base)
        main_ok("ablate", *tiny(4), "--jobs", "1", *CLASSIC_ROPE, *sets, "--out", base / "r", *trackers)
    return base / "r", uri


def further(folder: Path) -> list[dict[str, str]]:
    """metrics.csv's rows but val_loss's (the summary's, which the other tracker tests read)."""
    with (folder / "metrics.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] != "val_loss"]
    assert {r["metric"] for r in rows} == {"code_loss", "prose_loss", "ctx2x_loss", "icl_gain"}
    return rows


def numbers(folder: Path, variant: str) -> dict[str, float]:
    """A table row's numbers on each further metric, as metrics.csv has them (an empty cell: none)."""
    return {
        f"{r['metric']}.{k}": float(r[k]) for r in further(folder) if r["variant"] == variant for k in STATS if r[k]
    }


def verdicts(folder: Path, variant: str) -> dict[str, str]:
    return {f"{r['metric']}.verdict": r["verdict"] for r in further(folder) if r["variant"] == variant and r["verdict"]}


def test_the_ablation_judges_every_metric_and_tests_some(tracked):
    folder, _ = tracked
    tested = [r for r in further(folder) if r["verdict"] not in ("", "not tested")]
    assert len(tested) == 6 and all(r["delta"] and r["p_adj"] for r in tested)  # 3 metrics x 2 tested rows
    assert len(numbers(folder, "rope")) == 3 * len(STATS) and "ctx2x_loss.verdict" in verdicts(folder, "rope")


def test_mlflow_row_runs_hold_each_metrics_numbers_and_verdict_and_seed_runs_their_own(tracked):
    from mlflow import MlflowClient

    folder, uri = tracked
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(folder.name).experiment_id
    rows = {r.data.tags["row"]: r for r in client.search_runs([experiment], "tags.kind = 'row'")}
    for variant, row in (("classic", "0"), ("classic (placebo)", "1"), ("rope", "2")):
        data = rows[row].data
        got = {k: v for k, v in data.metrics.items() if "." in k}
        assert got == numbers(folder, variant), variant  # exactly: MLflow keeps doubles
        assert {k: v for k, v in data.tags.items() if k.endswith(".verdict")} == verdicts(folder, variant)
    summary = client.search_runs([experiment], "tags.kind = 'summary'")[0]
    assert "metrics.csv" in {a.path for a in client.list_artifacts(summary.info.run_id)}
    assert "| rope | code\\_loss | " in client.get_experiment(experiment).tags["mlflow.note.content"]
    for record in _records(folder).values():
        logged = client.get_run(record["tracked"]["mlflow"]).data.metrics
        for key in PER_RUN:
            value = record["metrics"][key]
            missing = logged[key] is None or math.isnan(logged[key])  # W&B writes NaN as null
            assert missing if math.isnan(value) else logged[key] == value, key


def test_tensorboard_summary_holds_each_metrics_numbers_and_its_verdict_text(tracked):
    folder, _ = tracked
    events = _events(folder / "tensorboard" / "summary")
    for name, variant in (("01-classic_placebo", "classic (placebo)"), ("02-rope", "rope")):
        expected = numbers(folder, variant)
        got = {t.split("/")[-1]: t for t in events.Tags()["scalars"] if t.startswith(f"row/{name}/") and "." in t}
        assert set(got) == set(expected), name
        for key, tag in got.items():
            (point,) = events.Scalars(tag)
            assert point.value == pytest.approx(expected[key], rel=1e-6), tag  # TensorBoard keeps float32
    (text,) = events.Tensors("Verdicts/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    for r in further(folder):
        if r["delta"]:
            cells = f"| {r['metric'].replace('_', chr(92) + '_')} | {r['verdict']} | {float(r['delta']):+.4f} |"
            assert cells in table, (cells, table)
    for record in _records(folder).values():
        run = _events(folder / record["tracked"]["tensorboard"])
        for key in PER_RUN:
            (point,) = run.Scalars(f"final/{key}")
            value = record["metrics"][key]
            assert math.isnan(point.value) if math.isnan(value) else point.value == pytest.approx(value, rel=1e-6)


def test_wandb_summary_holds_each_metrics_numbers_verdicts_and_table_and_seed_runs_their_own(tracked):
    folder, _ = tracked
    base = folder.parent
    (summary,) = [r for r in runs(base) if r.job_type == "summary"]
    for variant, at in (("classic", "row00"), ("classic (placebo)", "row01"), ("rope", "row02")):
        mine = {k.split(".", 1)[1]: v for k, v in summary.summary.items() if k.startswith(f"{at}.")}
        got = {k: v for k, v in mine.items() if k.split(".")[0] in {r["metric"] for r in further(folder)}}
        assert got == {**numbers(folder, variant), **verdicts(folder, variant)}, variant  # JSON: exact
    table = json.loads((summary.folder / "files" / summary.summary["metrics/path"]).read_text())
    assert table["columns"][:3] == ["variant", "metric", "verdict"]
    cells = [dict(zip(table["columns"], c, strict=True)) for c in table["data"]]
    assert [(c["variant"], c["metric"], c["verdict"]) for c in cells] == [
        (r["variant"], r["metric"], r["verdict"]) for r in further(folder)
    ]
    for c, r in zip(cells, further(folder), strict=True):
        assert c["delta_val"] == (float(r["delta"]) if r["delta"] else None) and c["p_adj"] == (
            float(r["p_adj"]) if r["p_adj"] else None
        )
    by_id = {r.id: r for r in runs(base) if r.job_type == "run"}
    for record in _records(folder).values():
        logged = by_id[record["tracked"]["wandb"]].summary
        for key in PER_RUN:
            value = record["metrics"][key]
            missing = logged[key] is None or math.isnan(logged[key])  # W&B writes NaN as null
            assert missing if math.isnan(value) else logged[key] == value, key
