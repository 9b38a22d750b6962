"""--track tensorboard and mlflow (issue 24): one tiny ablation logs each (row, seed) once, read back through the
trackers' own readers (tensorboard's EventAccumulator, MLflow's MlflowClient on a sqlite:/// store); the summary
and the verdicts are there; a resume logs only the runs it adds; bad input is one sentence before anything
trains; a tracker that fails mid-ablation stops nothing (a warning and a footnote)."""

import csv
import json
import math
import shutil
import socket
import sys
from pathlib import Path

import pytest

from modern_gpt.trackers import checks, tensorboard, tracking
from modern_gpt.trackers import mlflow as mlflow_backend
from modern_gpt.trackers import records as trecords
from tests.clihelp import CLASSIC_ROPE, VERDICT_COLUMNS, main_ok, tiny
from tests.errhelp import assert_user_error

pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")

TINY = tiny(steps=4, eval_every=2)
ABLATE = ["ablate", *TINY, "--jobs", "1", *CLASSIC_ROPE]  # 3 rows (classic, its placebo, rope) x 2 seeds
ROWS, SEEDS = 3, 2


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, mlflow_store):
    """One ablation logged to TensorBoard and to MLflow: (results folder, MLflow URI)."""
    base = tmp_path_factory.mktemp("tracked")
    uri = mlflow_store(base / "mlflow.db")
    main_ok(*ABLATE, "--out", base / "r", "--track", "tensorboard", "--track", "mlflow", "--mlflow-uri", uri)
    return base / "r", uri


def _records(folder: Path) -> dict[tuple[int, int], dict]:
    records = [json.loads(f.read_text()) for f in sorted((folder / "runs").glob("*.json"))]
    return {(r["row"], r["seed"]): r for r in records}


def _runs(uri: str, experiment: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def _seeds(uri: str, experiment: str) -> list:
    """The experiment's training runs: not the summary's run nor a table row's (tags.kind summary, row)."""
    return [r for r in _runs(uri, experiment) if not r.data.tags.get("kind")]


def _summary(folder: Path) -> list[dict]:
    with (folder / "summary.csv").open() as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------
# MLflow
# ---------------------------------------------------------------------------
def test_mlflow_holds_each_run_once_with_its_tags_settings_curve_and_final_metrics(tracked):
    from mlflow import MlflowClient

    folder, uri = tracked
    runs = _seeds(uri, folder.name)
    records = _records(folder)
    assert sorted((int(r.data.tags["row"]), int(r.data.tags["seed"])) for r in runs) == sorted(records)
    assert len(records) == ROWS * SEEDS
    for run in runs:
        record = records[int(run.data.tags["row"]), int(run.data.tags["seed"])]
        assert record["tracked"]["mlflow"] == run.info.run_id  # the run file knows its MLflow run
        tags, metrics, params = run.data.tags, run.data.metrics, run.data.params
        assert (tags["variant"], tags["folder"], tags["plan"]) == (record["variant"], "r", "custom")
        assert metrics["val_loss"] == record["val_loss"] and metrics["val_bpc"] == record["val_bpc"]
        assert metrics["tokens_per_s"] == record["tokens_per_s"] and metrics["diverged"] == 0.0
        assert params["model.dim"] == "16" and tags["seed"] == str(record["seed"])
        assert params["components"] == record["components"] and float(tags["lr"]) == record["lr"]
        history = MlflowClient(uri).get_metric_history(run.info.run_id, "curve/val_loss")
        assert [(m.step, m.value) for m in history] == [(p["step"], p["val_loss"]) for p in record["curve"]]
        assert run.info.status == "FINISHED"


def test_each_run_logs_the_model_it_trained_not_the_folder_s_base_settings(tracked):
    """Issue 41: a rope run's params said model.rope = False, and model.vocab_size the setting's 256 where the
    tokenizer's vocabulary differs, so filtering by a component found nothing. MLflow's params hold each run's
    own switches and vocabulary; TensorBoard's hparams its vocabulary (its components as one column)."""
    from tensorboard.plugins.hparams import metadata

    folder, uri = tracked
    records = _records(folder)
    assert {r["vocab_size"] for r in records.values()} != {256}  # the smoke corpus's characters, not the default
    for run in _seeds(uri, folder.name):
        record, params = records[int(run.data.tags["row"]), int(run.data.tags["seed"])], run.data.params
        rope = "rope" in record["components"].split("+")
        assert (params["model.rope"], params["model.rmsnorm"]) == (str(rope), "False"), record["variant"]
        assert params["model.vocab_size"] == str(record["vocab_size"])
    for record in records.values():
        events = _events(folder / record["tracked"]["tensorboard"])
        content = events.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content
        hparams = metadata.parse_session_start_info_plugin_data(content).hparams
        assert hparams["components"].string_value == record["components"]  # one column, not a switch each
        assert hparams["model.vocab_size"].number_value == record["vocab_size"]


def test_mlflow_logs_each_key_once_and_each_run_s_reference_and_placebo(tracked):
    """Issue 30, item 6: seed, variant and lr were params and tags both, so MLflow's UI CSV (a column per bare key
    of params, metrics and tags) named them twice; and judge needs each row's reference and placebo mark."""
    folder, uri = tracked
    runs = _seeds(uri, folder.name)
    expected = {"classic": ("", "false"), "classic (placebo)": ("classic", "true"), "rope": ("classic", "false")}
    for run in runs:
        params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
        assert not set(params) & set(tags) and not set(params) & set(metrics) and not set(metrics) & set(tags)
        assert {"seed", "variant", "lr"} <= set(tags) and not {"seed", "variant", "lr"} & set(params)
        assert (tags["reference"], tags["placebo"]) == expected[tags["variant"]], tags["variant"]


def test_mlflow_summary_run_holds_the_table_and_figures(tracked, tmp_path):
    """The summary run holds summary.csv, the figures and the verdict table as mlflow.log_table's verdicts.json
    (which the UI's artifact view renders), its numbers typed; its description is the table in Markdown."""
    from mlflow import MlflowClient

    folder, uri = tracked
    (summary,) = [r for r in _runs(uri, folder.name) if r.data.tags.get("kind") == "summary"]
    client = MlflowClient(uri)
    paths = {a.path for a in client.list_artifacts(summary.info.run_id)}
    assert paths == {"summary.csv", "curves.png", "verdicts.json"}
    assert json.loads(summary.data.tags["mlflow.loggedArtifacts"]) == [{"path": "verdicts.json", "type": "table"}]
    table = json.loads(Path(client.download_artifacts(summary.info.run_id, "verdicts.json", str(tmp_path))).read_text())
    expected = _summary(folder)
    assert table["columns"] == VERDICT_COLUMNS
    for cells, row in zip(table["data"], expected, strict=True):
        got = dict(zip(table["columns"], cells, strict=True))
        assert (got["variant"], got["verdict"]) == (row["variant"], row["verdict"])
        for key in ("delta_val", "ci_low", "ci_high", "p", "p_adj", "mde"):
            assert got[key] == (pytest.approx(float(row[key]), rel=1e-12) if row[key] else None), key
    assert [dict(zip(table["columns"], c, strict=True))["reference"] for c in table["data"]] == [
        "",
        "classic",
        "classic",
    ]
    assert "| rope | " in summary.data.tags["mlflow.note.content"] and not summary.data.metrics


def test_mlflow_opens_on_a_run_per_table_row_named_by_its_verdict_with_its_seeds_nested(tracked):
    """Issue 33: the default runs table (newest first, names shown, metric columns hidden) shows the answer: the
    experiment's description starts with it, and each table row is a run whose name starts with its verdict,
    in the table's order, with its Δ, CI, p, p_adj and mde as numbers (they were string tags, sorted as text),
    its verdict and reference as tags, and its seeds' runs nested under it, each with the row's verdict."""
    from mlflow import MlflowClient

    folder, uri = tracked
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(folder.name)
    newest_first = client.search_runs([experiment.experiment_id], "tags.kind = 'row'", order_by=["start_time DESC"])
    table = _summary(folder)
    assert [r.data.tags["row"] for r in newest_first] == [row["row"] for row in table]  # the table's order
    seeds = _seeds(uri, folder.name)
    for run, row in zip(newest_first, table, strict=True):
        tags, metrics = run.data.tags, run.data.metrics
        assert "variant" not in tags and not run.data.params  # not a training run: judge leaves it out
        assert tags["verdict"] == row["verdict"] and tags["reference"] == ("" if row["row"] == "0" else "classic")
        stats = {k: float(row[k]) for k in ("delta_val", "ci_low", "ci_high", "p", "p_adj", "mde") if row[k]}
        assert metrics == pytest.approx(stats, rel=1e-12) and (len(stats) == 6 or row["row"] == "0")
        assert run.info.run_name.startswith(f"{row['verdict'] or 'reference'}: {row['variant']}")
        assert tags["mlflow.note.content"].startswith(f"**{run.info.run_name}**")  # its page's description
        if stats:
            assert f"Δ {stats['delta_val']:+.4f} [{stats['ci_low']:+.4f}, {stats['ci_high']:+.4f}]" in run.info.run_name
        children = [s for s in seeds if s.data.tags.get("mlflow.parentRunId") == run.info.run_id]
        assert sorted(s.data.tags["seed"] for s in children) == [str(i) for i in range(SEEDS)]
        assert {s.data.tags["variant"] for s in children} == {row["variant"]}
        assert {s.data.tags["verdict"] for s in children} == {row["verdict"]}
        assert not {"delta_val", "p_adj", "mde"} & set(children[0].data.tags)  # a row's numbers once, on its run
    first, *_ = experiment.tags["mlflow.note.content"].split("\n")  # what the runs page shows, collapsed
    tested = [row for row in table if row["row"] != "0"]
    for row in tested:
        decided = row["verdict"] in ("better", "worse", "same")
        assert (f"{row['variant']} (Δ {float(row['delta_val']):+.4f}" in first) == decided, (first, row)
    undecided = sum(row["verdict"] == "inconclusive" for row in tested)
    assert first.startswith("**") and (f"{undecided} inconclusive" in first or f"all {undecided} rows" in first)
    rope = next(row for row in table if row["variant"] == "rope")
    verdict = f"tags.verdict = '{rope['verdict']}' and tags.variant = 'rope'"  # the seeds' verdict is searchable
    assert len(client.search_runs([experiment.experiment_id], filter_string=verdict)) == SEEDS


def test_a_run_logged_again_replaces_the_earlier_copy(tracked, tmp_path):
    """A kill after logging and before the id reached the run file: logging it again leaves one copy."""
    folder, uri = tracked
    copy = Path(shutil.copytree(folder, tmp_path / "again"))
    meta = json.loads((copy / "meta.json").read_text())
    backend = mlflow_backend.MlflowBackend(uri)
    backend.start(copy, trecords.Tracked.of(meta))
    record = _records(copy)[(2, 1)]
    first, second = backend.log_run(record), backend.log_run(record)
    assert first != second and [r.info.run_id for r in _runs(uri, "again")] == [second]


def test_train_logs_its_one_run(tracked, run_ok, tmp_path):
    _, uri = tracked
    run_ok("train", *TINY, "--out", tmp_path / "ck", "--track", "mlflow", "--mlflow-uri", uri, "--track", "tensorboard")
    metrics = json.loads((tmp_path / "ck" / "metrics.json").read_text())
    (run,) = _runs(uri, trecords.TRAIN_EXPERIMENT)
    assert run.data.metrics["val_loss"] == metrics["val_loss"] and run.data.tags["plan"] == "train"
    assert len(list((tmp_path / "ck" / "tensorboard" / "00-classic" / "seed0").glob("events.*[0-9]"))) == 1


# ---------------------------------------------------------------------------
# TensorBoard
# ---------------------------------------------------------------------------
def _events(path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(path))
    events.Reload()
    return events


def test_tensorboard_holds_each_run_once_with_its_curve_and_final_metrics(tracked):
    folder, _ = tracked
    root = folder / "tensorboard"
    records = _records(folder)
    runs = sorted(p.parent for p in root.glob("*/seed*/events.*[0-9]"))
    assert len(runs) == len(set(runs)) == ROWS * SEEDS  # one event file per run, and one of its hparams:
    assert len(list(root.glob("*/seed*/events.*.hparams"))) == ROWS * SEEDS  # written again with the verdict
    for (row, seed), record in records.items():
        path = folder / record["tracked"]["tensorboard"]
        assert path.parent.name.startswith(f"{row:02d}-") and path.name == f"seed{seed}"
        events = _events(path)
        assert [(s.step, s.value) for s in events.Scalars("curve/val_loss")] == [
            (p["step"], pytest.approx(p["val_loss"], rel=1e-6)) for p in record["curve"]
        ]
        (final,) = events.Scalars("final/val_loss")
        assert final.value == pytest.approx(record["val_loss"], rel=1e-6) and final.step == record["steps_done"]


def test_tensorboard_summary_holds_the_table_figure_and_verdicts(tracked):
    """The answer chart is TIME SERIES' first card, the verdict table is the Text tab's first entry (TensorBoard
    lists its tags by name, capitals first), each row's numbers are scalars, and curves.png is under Images."""
    folder, _ = tracked
    events = _events(folder / "tensorboard" / "summary")
    rope = next(row for row in _summary(folder) if row["variant"] == "rope")
    for key in ("delta_val", "ci_low", "ci_high", "p", "p_adj", "mde"):
        (point,) = events.Scalars(f"row/02-rope/{key}")
        assert point.value == pytest.approx(float(rope[key]), rel=1e-6), key
    assert "row/00-classic/delta_val" not in events.Tags()["scalars"]  # the reference row has no Δ
    assert events.Tags()["images"] == ["answer", "curves"]
    # TIME SERIES, the page TensorBoard opens on, lists scalars and images together by tag: the answer is first
    cards = {t for path in (folder / "tensorboard").glob("**/seed*") for t in _events(path).Tags()["scalars"]}
    cards |= set(events.Tags()["scalars"]) | set(events.Tags()["images"])
    assert sorted(cards, key=str.lower)[0] == sorted(cards)[0] == "answer"
    (image,) = events.Images("answer")
    assert image.height == 140 + 45 * len(_summary(folder)) and image.width == 900  # a row each, drawn
    texts = {tag for path in (folder / "tensorboard").glob("**/seed*") for tag in _events(path).Tags()["tensors"]}
    texts |= {t for t in events.Tags()["tensors"] if t.endswith("text_summary")}
    assert sorted(texts)[0] == "Verdicts/text_summary"
    (text,) = events.Tensors("Verdicts/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    ci = f"[{float(rope['ci_low']):+.4f}, {float(rope['ci_high']):+.4f}]"
    assert f"| rope | {rope['verdict']} | {float(rope['delta_val']):+.4f} | {ci} |" in table


def _layout(events):
    from tensorboard.plugins.custom_scalar import layout_pb2

    (config,) = events.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout()
    layout.ParseFromString(config.tensor_proto.string_val[0])
    return {c.title: {chart.title: list(chart.margin.series) for chart in c.chart} for c in layout.category}


def test_tensorboard_custom_scalars_chart_each_rows_delta_with_its_ci_band(tracked):
    """Issue 33: CUSTOM SCALARS holds a margin chart of every row's Δ and CI (step = the run row) under a section
    that says the answer, and one margin chart per row named by its verdict; each series is a scalar there."""
    folder, _ = tracked
    events = _events(folder / "tensorboard" / "summary")
    table = _summary(folder)
    (first, everyone), (second, per_row) = _layout(events).items()
    assert first.startswith("Verdicts: ") and second == "Verdicts by row"
    ((chart, (series,)),) = everyone.items()
    assert chart.endswith("(step 1 = classic (placebo), 2 = rope)")  # issue 44 §10: the chart names its rows
    value, low, high = (
        [(p.step, p.value) for p in events.Scalars(t)] for t in (series.value, series.lower, series.upper)
    )
    assert [s for s, _ in value] == [1, 2]  # the tested rows
    for (step, v), (_, lo), (_, hi) in zip(value, low, high, strict=True):
        row = table[step]
        assert (v, lo, hi) == pytest.approx((float(row["delta_val"]), float(row["ci_low"]), float(row["ci_high"])))
    assert len(per_row) == 2
    for row in table[1:]:
        ci = f"[{float(row['ci_low']):+.4f}, {float(row['ci_high']):+.4f}]"
        name = f"{int(row['row']):02d}-{row['variant'].replace(' (placebo)', '_placebo')}"
        title = f"{row['verdict']}: {row['variant']}, Δ {float(row['delta_val']):+.4f} {ci}"
        assert [(s.value, s.lower, s.upper) for s in per_row[title]] == [
            (f"row/{name}/delta_val", f"row/{name}/ci_low", f"row/{name}/ci_high")
        ]


def test_tensorboard_hparams_hold_each_runs_variant_and_its_rows_verdict(tracked):
    """HPARAMS: each seed's run holds its variant and, once the table is written, its row's verdict (its event
    file of hparams written again): what differs between runs, which HPARAMS lists first."""
    from tensorboard.plugins.hparams import metadata

    folder, _ = tracked
    verdicts = {row["variant"]: row["verdict"] for row in _summary(folder)}
    for record in _records(folder).values():
        path = folder / record["tracked"]["tensorboard"]
        assert len(list(path.glob("*.hparams"))) == 1
        content = _events(path).SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content
        hparams = metadata.parse_session_start_info_plugin_data(content).hparams
        assert hparams["variant"].string_value == record["variant"]
        assert hparams["verdict"].string_value == verdicts[record["variant"]]
        assert hparams["seed"].number_value == record["seed"] and "params" not in hparams


MARGINS = [
    (["--seeds", "auto", "--min-seeds", "2", "--max-seeds", "3"], "step = the pairs at each look of --seeds auto"),
    (["--seeds", "2", "--lrs", "1e-3,3e-3"], "step 0, 1 = lr 0.001, 0.003"),
]


@pytest.mark.parametrize("flags, axis", MARGINS, ids=["looks", "lrs"])
def test_tensorboard_margin_charts_follow_a_row_across_looks_or_learning_rates(run_ok, tmp_path, flags, axis):
    """Where a row has more than one point, its margin chart draws its Δ and CI band across them: at each look
    of --seeds auto on the seeds that look saw (the last look's is the table's), or at each learning rate of
    --lrs, every row at that rate (the table's rate's is the table's)."""
    from modern_gpt.verdict.stats import paired

    folder = tmp_path / "r"
    plan = ["--jobs", "1", "--plan", "custom", "--variants", "classic;rope", "--no-placebo"]
    run_ok("ablate", *TINY, *plan, *flags, "--out", folder, "--track", "tensorboard")
    events = _events(folder / "tensorboard" / "summary")
    ((title, (series,)),) = _layout(events)["Verdicts by row"].items()
    assert title.endswith(f"({axis})") and series.value.startswith("margin/")
    value, low, high = (
        [(p.step, p.value) for p in events.Scalars(t)] for t in (series.value, series.lower, series.upper)
    )
    runs = list(csv.DictReader((folder / "runs.csv").open()))
    (row,) = [r for r in _summary(folder) if r["variant"] == "rope"]
    looks = json.loads((folder / "meta.json").read_text()).get("sequential", {}).get("looks", [])
    points = [look["seeds"] for look in looks] if looks else [0, 1]
    assert [s for s, _ in value] == [s for s, _ in low] == [s for s, _ in high] == points
    for k, step in enumerate(points):  # each point recomputed here from runs.csv, on its own seeds or rate
        lr, seeds = (None, range(step)) if looks else ((1e-3, 3e-3)[step], range(2))
        loss = {
            (r["variant"], int(r["seed"])): float(r["val_loss_test" if lr else "val_loss"])
            for r in runs
            if lr is None or math.isclose(float(r["lr"]), lr)
        }
        stats = paired([loss["rope", s] - loss["classic", s] for s in seeds])
        assert (value[k][1], low[k][1], high[k][1]) == pytest.approx(
            (stats.delta, stats.ci_low, stats.ci_high), rel=1e-5
        )
    at = -1 if looks else [0.001, 0.003].index(float(row["lr"]))  # the table's point
    assert (value[at][1], low[at][1], high[at][1]) == pytest.approx(
        (float(row["delta_val"]), float(row["ci_low"]), float(row["ci_high"])), rel=1e-6
    )


# ---------------------------------------------------------------------------
# Resume: only the runs it adds
# ---------------------------------------------------------------------------
def test_resume_logs_only_the_runs_it_adds(tracked, run, tmp_path):
    """A tracker is a sink: a resume logs the runs whose files lack its id (the two it trains), by their key, and
    reads nothing back from the tracker; the first folder's experiment is untouched."""
    folder, uri = tracked
    copy = Path(shutil.copytree(folder, tmp_path / "resumed"))
    before = _records(copy)
    for key in ((1, 1), (2, 1)):
        (copy / "runs" / f"row{key[0]:02d}-seed{key[1]}.json").unlink()
    code, _, err = run("ablate", "--resume", copy, "--track", "mlflow", "--mlflow-uri", uri, "--track", "tensorboard")
    assert code == 0 and "does not hold" not in err, err
    after = _records(copy)
    kept = {k for k in after if after[k]["tracked"] == before[k]["tracked"]}
    assert kept == set(after) - {(1, 1), (2, 1)}
    runs = _seeds(uri, "resumed")
    assert sorted((int(r.data.tags["row"]), int(r.data.tags["seed"])) for r in runs) == [(1, 1), (2, 1)]
    assert len(_runs(uri, folder.name)) == ROWS * SEEDS + 1 + ROWS  # the first folder's experiment is untouched
    assert len(list((copy / "tensorboard").glob("*/seed*/events.*[0-9]"))) == ROWS * SEEDS


# ---------------------------------------------------------------------------
# Bad input: one sentence, exit 2, nothing trained
# ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--track", "comet"], ["unknown tracker 'comet' in --track", "tensorboard, mlflow or wandb"]),
        (["--mlflow-uri", "sqlite:///x.db"], ["--mlflow-uri goes with --track mlflow"]),
        (["--track", "mlflow", "--mlflow-uri", "sqlite:///no/such/folder/m.db"], ["does not exist"]),
        (["--track", "mlflow", "--mlflow-uri", "sqlite:///."], ["sqlite:///.", "is not a file"]),
    ],
)
def test_bad_tracking_flags_are_one_sentence_before_anything_trains(run, tmp_path, flags, fragments):
    assert_user_error(run(*ABLATE, "--out", tmp_path / "out", *flags), *fragments)
    assert not (tmp_path / "out").exists()


def test_no_server_behind_the_uri_is_one_sentence_naming_it(run, tmp_path):
    uri = f"http://127.0.0.1:{_free_port()}"
    assert_user_error(run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", uri), uri, "no MLflow")
    assert not (tmp_path / "o").exists()


def test_the_environment_s_uri_is_named_when_it_chose(run, tmp_path, monkeypatch):
    uri = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert_user_error(run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow"), f"MLFLOW_TRACKING_URI={uri}")


def test_an_unwritable_store_is_one_sentence(run, tmp_path, monkeypatch):
    store = tmp_path / "ro"
    store.mkdir()
    monkeypatch.setattr(checks.os, "access", lambda path, mode: Path(path) != store)  # root may write anywhere
    flags = ["--track", "mlflow", "--mlflow-uri", f"sqlite:///{store}/m.db"]
    assert_user_error(run(*ABLATE, "--out", tmp_path / "o", *flags), str(store), "not writable")


@pytest.mark.parametrize("name", ["mlflow", "tensorboard"])
def test_a_tracker_not_installed_says_how_to_install_it(run, tmp_path, monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # what import finds when the package is missing
    assert_user_error(run("train", *TINY, "--out", tmp_path / "c", "--track", name), f'pip install -e ".[{name}]"')
    assert not (tmp_path / "c").exists()


def test_track_in_the_config_file(tmp_path):
    from modern_gpt.core.errors import UserError
    from modern_gpt.core.settings import read_toml, resolve_options

    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('[ablation]\ntrack = ["tensorboard", "mlflow"]\nmlflow_uri = "sqlite:///m.db"\n')
    bad.write_text('[ablation]\ntrack = "mlflow"\n')
    tracking = resolve_options(read_toml(good), {}, "ablate", ("track", "mlflow_uri")).tracking
    assert tracking.track == ("tensorboard", "mlflow") and tracking.mlflow_uri == "sqlite:///m.db"
    with pytest.raises(UserError, match="ablation.track must be a list of strings"):
        read_toml(bad)


# ---------------------------------------------------------------------------
# A tracker that fails mid-ablation: a warning and a footnote, every run kept
# ---------------------------------------------------------------------------
def test_a_tracker_that_fails_mid_ablation_stops_nothing(run, tmp_path, monkeypatch):
    log_run, calls = tensorboard.TensorBoardBackend.log_run, []

    def dies_after_one(self, record):
        calls.append(record["row"])
        if len(calls) > 1:
            raise ConnectionError("the server went away")
        return log_run(self, record)

    monkeypatch.setattr(tensorboard.TensorBoardBackend, "log_run", dies_after_one)
    folder = tmp_path / "r"
    code, out, err = run(*ABLATE, "--no-placebo", "--out", folder, "--track", "tensorboard")
    assert code == 0, err
    records = _records(folder)
    assert len(records) == 4 and len(calls) == 2  # switched off after it failed: not called again
    assert sum("tracked" in r for r in records.values()) == 1
    assert err.count("warning: tensorboard failed (ConnectionError: the server went away)") == 1
    assert f"goes on without it. modern-gpt report {folder} --track tensorboard logs what is missing" in err
    note = f"3 of 4 runs are not in tensorboard (ConnectionError: the server went away); modern-gpt report {folder}"
    assert note in " ".join(out.split())
    assert json.loads((folder / "meta.json").read_text())["tracking"]["tensorboard"]["error"].startswith("Connection")
    assert not (folder / "tensorboard" / "summary").exists()


def test_notes_count_the_runs_a_tracker_lacks():
    meta = {"tracking": {"mlflow": {"error": None}, "tensorboard": {"error": "OSError: disk full"}}}
    records = {(0, 0): {"tracked": {"mlflow": "a", "tensorboard": "t"}}, (0, 1): {"tracked": {"mlflow": "b"}}}
    (note,) = tracking.notes(meta, records, "DIR")
    assert note == "1 of 2 runs are not in tensorboard (OSError: disk full); " + tracking.push("tensorboard", "DIR")
    assert tracking.notes({}, records, "DIR") == [] and math.isnan(trecords.run_metrics({})["val_loss"])
    at = {"tracking": {"mlflow": {"error": "E", "uri": "http://h:5000"}}}  # pushed into the store its runs are in
    (note,) = tracking.notes(at, {(0, 0): {}}, "my results")
    assert (
        note
        == "1 of 1 runs are not in mlflow (E); modern-gpt report 'my results' --track mlflow --mlflow-uri http://h:5000 logs what is missing."
    )


# ---------------------------------------------------------------------------
# Review of issue 24: times, learning-rate sweeps, hostile URIs and hand-edited folders
# ---------------------------------------------------------------------------
def test_mlflow_runs_span_their_own_training_time_not_the_logging(tracked):
    folder, uri = tracked
    records = _records(folder)
    for run in _runs(uri, folder.name):
        if run.data.tags.get("kind"):  # the summary's and the rows' runs
            continue
        record = records[int(run.data.tags["row"]), int(run.data.tags["seed"])]
        start = int(record["timing"]["started"] * 1000)
        assert (run.info.start_time, run.info.end_time) == (start, start + int(record["secs"] * 1000))


def test_a_learning_rate_sweep_tells_its_runs_apart_and_names_the_table_rows_by_run_row(tmp_path):
    variants = [{"name": n, "lr": lr} for n in ("classic", "rope") for lr in (1e-3, 3e-3)]
    meta = trecords.Tracked.of({"spec": {"plan": "duel", "lrs": [1e-3, 3e-3], "variants": variants}, "started": "t"})
    record = {"row": 3, "variant": "rope", "seed": 1, "lr": 3e-3}
    tags = trecords.run_tags(meta, record, tmp_path / "f")
    assert (tags["row"], tags["variant"], tags["seed"], tags["lr"]) == ("3", "rope", "1", "0.003")
    assert trecords.run_name(meta, record) == "rope lr 0.003 seed 1"
    backend = tensorboard.TensorBoardBackend()
    backend.start(tmp_path / "f", meta)
    assert backend.run_dir(record).relative_to(tmp_path / "f") == Path("tensorboard/03-rope-lr0.003/seed1")
    # summary.csv counts table rows (rope is its row 1) and shows each at its best lr: its runs' row is 2 or 3
    assert trecords.row_tag(meta, {"row": "1", "variant": "rope", "lr": "0.001"}) == 2
    assert trecords.row_tag(meta, {"row": "1", "variant": "rope", "lr": "0.003"}) == 3
    single = trecords.Tracked.of({"spec": {"plan": "custom", "lrs": None, "variants": variants[:1]}})
    assert trecords.run_name(single, record) == "rope seed 1"
    assert trecords.row_tag(single, {"row": "1", "variant": "rope", "lr": "0.003"}) == 1


def _serve(reply: bytes) -> socket.socket:
    """A TCP server on 127.0.0.1 answering each connection with `reply`: something that is not MLflow."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(reply)

    threading.Thread(target=answer, daemon=True).start()
    return server


@pytest.mark.parametrize(
    "reply, why",
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "BadStatusLine"),
        (b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n", "HTTP 404"),
    ],
)
def test_something_else_than_mlflow_at_the_uri_is_one_sentence(run, tmp_path, reply, why):
    server = _serve(reply)
    try:
        uri = f"http://127.0.0.1:{server.getsockname()[1]}"
        result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", uri)
    finally:
        server.close()
    assert_user_error(result, f"--mlflow-uri {uri}", why)
    assert not (tmp_path / "o").exists()


def test_garbage_uris_are_one_sentence_naming_them(run, tmp_path):
    import os

    fifo, file = tmp_path / "fifo", tmp_path / "file"
    os.mkfifo(fifo)
    file.write_text("x")
    cases = {
        "foo://bar": "MLflow cannot use this store",
        f"file://{fifo}": f"{fifo} is not a folder",
        f"file://{file}": f"{file} is not a folder",
        f"sqlite:///{fifo}": f"{fifo} is not a file",
        "sqlite://": "in-memory",
        "": "--mlflow-uri is empty",
    }
    for uri, fragment in cases.items():
        assert_user_error(run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", uri), fragment)
        assert not (tmp_path / "o").exists()


def test_hand_edited_tracker_fields_count_as_not_logged():
    assert trecords.tracked_ids({"tracked": "abc"}) == {} and trecords.tracked_ids({}) == {}
    assert trecords.tracked_ids({"tracked": {"mlflow": 5, "tensorboard": "t", "comet": "c"}}) == {"tensorboard": "t"}
    assert trecords.tracking_state({"tracking": ["mlflow"]}) == {}
    assert trecords.tracking_state({"tracking": {"mlflow": "x", "wandb": {"error": None}}}) == {
        "wandb": {"error": None}
    }
    records = {(0, 0): {"tracked": ["mlflow"]}, (0, 1): {"tracked": {"mlflow": 7}}}
    (note,) = tracking.notes({"tracking": {"mlflow": {"error": None}}}, records, "DIR")
    assert note.startswith("2 of 2 runs are not in mlflow")
    assert tracking.notes({"tracking": "broken"}, records, "DIR") == []


def test_report_track_on_a_hand_edited_folder_logs_the_damaged_runs_again(tracked, run, tmp_path):
    folder, _ = tracked
    copy = Path(shutil.copytree(folder, tmp_path / "edited"))
    edits = {(0, 0): "abc", (1, 0): {"tensorboard": 5}, (2, 0): None}  # None: no tracked field at all
    for (row, seed), value in edits.items():
        path = copy / "runs" / f"row{row:02d}-seed{seed}.json"
        record = json.loads(path.read_text())
        record.pop("tracked") if value is None else record.update(tracked=value)
        path.write_text(json.dumps(record))
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "tracking": ["tensorboard"]}))
    code, out, err = run("report", copy, "--track", "tensorboard")
    assert code == 0 and "Traceback" not in err, err
    assert "tensorboard: logged 3 runs and the summary" in err
    records = _records(copy)
    assert all(isinstance(r["tracked"]["tensorboard"], str) for r in records.values())
    assert [r["tracked"]["mlflow"] for k, r in records.items() if k not in edits] == [
        r["tracked"]["mlflow"] for k, r in _records(folder).items() if k not in edits
    ]  # the other tracker's ids are kept


def test_report_track_after_a_tracked_ablation_logs_nothing(tracked, run, tmp_path):
    folder, uri = tracked
    copy = Path(shutil.copytree(folder, tmp_path / "again"))
    summary = sorted((copy / "tensorboard" / "summary").iterdir())
    code, _, err = run("report", copy, "--track", "tensorboard")
    assert code == 0 and "tensorboard: holds every run already\n" in err, err  # its summary too: not logged again
    assert sorted((copy / "tensorboard" / "summary").iterdir()) == summary
    assert json.loads((copy / "meta.json").read_text())["tracking"]["tensorboard"]["summary"] is True


def test_another_mlflow_store_gets_every_run_on_report_track_and_refuses_a_resume(tracked, run, tmp_path):
    """The run files' MLflow ids belong to meta.json's tracking.mlflow.uri: a push to another store logs every
    run there; a resume into another store would split the ablation, so it is one sentence."""
    folder, uri = tracked
    copy = Path(shutil.copytree(folder, tmp_path / "moved"))
    meta = json.loads((copy / "meta.json").read_text())
    assert meta["tracking"]["mlflow"]["uri"] == checks.store_id(uri)
    meta["tracking"]["mlflow"]["uri"] = "sqlite:////elsewhere/mlflow.db"
    (copy / "meta.json").write_text(json.dumps(meta))
    code, _, err = run("ablate", "--resume", copy, "--track", "mlflow", "--mlflow-uri", uri)
    assert_user_error((code, "", err), "are in the MLflow store sqlite:////elsewhere/mlflow.db")
    code, _, err = run("report", copy, "--track", "mlflow", "--mlflow-uri", uri)
    assert code == 0 and f"mlflow: logged {ROWS * SEEDS} runs and the summary" in err, err
    runs = _seeds(uri, "moved")
    assert sorted(r.info.run_id for r in runs) == sorted(r["tracked"]["mlflow"] for r in _records(copy).values())
    assert json.loads((copy / "meta.json").read_text())["tracking"]["mlflow"]["uri"] == checks.store_id(uri)
