"""judge on modern-gpt's own files and the trackers' exports without reshaping (issue 30, item 6): a results
folder's runs.csv, an MLflow search_runs frame and its CSV, and the CSV of MLflow's UI each give report's table
with no flags; where the rows' order came from is a footnote; a wide or indexed DataFrame is one sentence naming
the pandas call that makes it long; every problem with the new columns is one sentence."""

import csv
import dataclasses
import io
import json

import pandas as pd
import pytest

import modern_gpt
from modern_gpt.core.errors import UserError
from modern_gpt.verdict.design import SummaryRow
from modern_gpt.verdict.reading import MLFLOW_UI_HEADER
from modern_gpt.views.render import to_json
from tests.clihelp import invoke, main_ok, tiny

pytest.importorskip("mlflow")

TRAINING = {f.name for f in dataclasses.fields(SummaryRow) if f.metadata["training"]}
RENAMES = {  # judge's own names in its rows; its files and frames name the mean and Δ as summary.csv does
    f.name: f.metadata["judge"]
    for f in dataclasses.fields(SummaryRow)
    if f.metadata["judge"] not in (None, "mean", "delta")
}
# the single plan: rope and swiglu each against classic (not the row above), and the placebo under classic
ABLATE = ["ablate", *tiny(6), "--plan", "single", "--components", "rope,swiglu", "--seeds", "3", "--jobs", "1"]
ROWS = ["classic", "classic (placebo)", "rope", "swiglu"]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, mlflow_store):
    """One single-plan ablation logged to a sqlite-backed MLflow store: (results folder, the experiment's
    search_runs frame, as MLflow returns it: newest first, the summary run among the runs)."""
    import mlflow

    base = tmp_path_factory.mktemp("exports")
    uri = mlflow_store(base / "mlflow.db")
    main_ok(*ABLATE, "--out", base / "r", "--track", "mlflow", "--mlflow-uri", uri)
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        frame = mlflow.search_runs(experiment_names=["r"])
    finally:
        mlflow.set_tracking_uri(before)
    return base / "r", frame, uri


def _report(folder) -> dict:
    return json.loads(invoke("report", folder, "--format", "json"))


def _assert_reports_table(rows: list[dict], report: dict) -> None:
    """judge's rows are report's: the same variants in the same order, each against the same reference, with the
    same Δ, CI, p, p_adj, verdict and every other statistic (training columns aside: judge has none)."""
    assert [r["variant"] for r in rows] == [r["variant"] for r in report["rows"]]
    compared = 0
    for ours, theirs in zip(rows, report["rows"], strict=True):
        for key, value in theirs.items():
            if key not in TRAINING:  # the reference too: by name in both
                assert ours[RENAMES.get(key, key)] == value, (ours["variant"], key)
                compared += 1
    assert compared >= 15 * len(rows)


def _rows(frame: pd.DataFrame) -> list[dict]:
    """modern_gpt.judge's frame as the JSON document's rows (NaN as null)."""
    return json.loads(to_json(frame.to_dict("records")))


# ---------------------------------------------------------------------------
# runs.csv: each row's reference and placebo, so that judge needs no flag
# ---------------------------------------------------------------------------
def test_runs_csv_names_each_rows_reference_and_its_placebo(tracked):
    folder, _, _ = tracked
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    marks = runs.groupby("variant", sort=False)[["row", "reference", "placebo"]].first()
    assert list(marks.index) == ROWS and list(marks["row"]) == [0, 1, 2, 3]
    assert list(marks["reference"]) == ["", "classic", "classic", "classic"]
    assert list(marks["placebo"]) == [False, True, False, False]


def test_judge_on_runs_csv_with_no_flags_gives_reports_table(tracked, run_ok):
    """swiglu is compared with classic, as the single plan compares it, not with the row above; the placebo is
    tested alone, outside Holm's family."""
    folder, _, _ = tracked
    doc = json.loads(run_ok("judge", folder / "runs.csv", "--format", "json"))
    _assert_reports_table(doc["rows"], _report(folder))
    assert [r["reference"] for r in doc["rows"]] == [None, "classic", "classic", "classic"]
    assert [r["placebo"] for r in doc["rows"]] == [False, True, False, False]
    assert not any("--order" in n or "judged as a component" in n for n in doc["footnotes"])
    for frame in (pd.read_csv(folder / "runs.csv"), modern_gpt.report(folder).runs):  # in Python, as it is
        assert _rows(modern_gpt.judge(frame)) == doc["rows"]


def test_runs_csv_rows_in_another_order_are_put_in_the_plans_order(tracked, tmp_path, run_ok):
    """A runs.csv sorted another way (by seed, or newest first) still gives report's table: its row column is the
    order, and a footnote says so."""
    folder, _, _ = tracked
    shuffled = pd.read_csv(folder / "runs.csv").sort_values(["seed", "row"], ascending=[True, False])
    shuffled.to_csv(tmp_path / "runs.csv", index=False)
    doc = json.loads(run_ok("judge", tmp_path / "runs.csv", "--format", "json"))
    _assert_reports_table(doc["rows"], _report(folder))
    assert "The rows are in the order of column row (each variant's number there)" in doc["footnotes"][0]


# ---------------------------------------------------------------------------
# MLflow: the search_runs frame, its CSV, and the UI's CSV
# ---------------------------------------------------------------------------
def test_the_mlflow_frame_is_newest_first_with_the_summary_run(tracked):
    """What the frame is, so that the next tests judge what a user gets: first appearance would run the chain
    backwards (swiglu first), and the summary run is one of its rows."""
    _, frame, _ = tracked
    assert frame["tags.kind"].tolist().count("summary") == 1
    variants = frame["tags.variant"].dropna().drop_duplicates().tolist()
    assert variants == ROWS[::-1]
    assert "params.seed" not in frame and "params.variant" not in frame and "params.lr" not in frame


def test_judge_on_an_mlflow_search_runs_frame_gives_reports_table(tracked):
    folder, frame, _ = tracked
    out = modern_gpt.judge(frame)
    _assert_reports_table(_rows(out), _report(folder))
    assert out.attrs["footnotes"][0].startswith("The rows are in the order of column tags.row")


def test_judge_on_the_csv_of_an_mlflow_frame_gives_reports_table(tracked, tmp_path, run_ok):
    folder, frame, _ = tracked
    frame.to_csv(tmp_path / "mlflow.csv")  # its index too, as to_csv writes by default
    doc = json.loads(run_ok("judge", tmp_path / "mlflow.csv", "--format", "json"))
    _assert_reports_table(doc["rows"], _report(folder))
    assert doc["title"].startswith("val_loss (lower is better)")


def _ui_cell(value) -> str:
    """A cell as MLflow's UI writes it (its runs table's Download CSV): quoted, and a ' before = + - @."""
    text = "" if value is None else str(value)
    if text[:1] in ("=", "+", "-", "@", "\r", "\t"):
        text = "'" + text
    return '"' + text.replace('"', '""') + '"'


def _ui_csv(uri: str, experiment: str) -> str:
    """The CSV MLflow's UI downloads of an experiment's runs: its eight run columns, then every param, metric and
    tag by its bare key (mlflow/server/js, runInfosToCsv)."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    params = sorted({k for r in runs for k in r.data.params})
    metrics = sorted({k for r in runs for k in r.data.metrics})
    tags = sorted({k for r in runs for k in r.data.tags if not k.startswith("mlflow.")})
    lines = [",".join(_ui_cell(c) for c in [*MLFLOW_UI_HEADER, *params, *metrics, *tags])]
    for r in runs:
        info = [r.info.start_time, "", r.info.run_id, r.info.run_name, "LOCAL", "", "", r.info.status]
        cells = info + [r.data.params.get(k) for k in params] + [r.data.metrics.get(k) for k in metrics]
        lines.append(",".join(_ui_cell(c) for c in cells + [r.data.tags.get(k) for k in tags]))
    return "\n".join(lines) + "\n"


def test_judge_on_the_csv_of_mlflows_ui_gives_reports_table(tracked, tmp_path, run_ok):
    """Each key is one column (seed, variant and lr were params and tags both: 'the column is named twice'), and
    the ' the UI puts before a negative Δ or a '+name' is taken off again."""
    folder, _, uri = tracked
    text = _ui_csv(uri, "r")
    header = next(csv.reader(io.StringIO(text)))
    assert len(header) == len(set(header)) and {"variant", "seed", "lr", "reference", "placebo"} <= set(header)
    (tmp_path / "runs.csv").write_text(text)
    doc = json.loads(run_ok("judge", tmp_path / "runs.csv", "--format", "json"))
    _assert_reports_table(doc["rows"], _report(folder))


def test_the_ui_csv_of_older_runs_names_the_key_logged_twice_and_the_way_out(tmp_path, run):
    header = [*MLFLOW_UI_HEADER, "lr", "seed", "variant", "val_loss", "lr", "seed", "variant"]
    (tmp_path / "old.csv").write_text(
        ",".join(f'"{c}"' for c in header) + "\n" + ",".join('"1"' for _ in header) + "\n"
    )
    code, out, err = run("judge", tmp_path / "old.csv")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "the column 'lr' is named twice, as MLflow's UI names a param and a tag of one key" in err
    assert "mlflow.search_runs(...), whose columns are params.lr and tags.lr" in err


def test_an_older_mlflow_frame_with_a_key_as_param_and_tag_reads_and_two_that_differ_are_one_sentence(tracked):
    folder, frame, _ = tracked
    older = frame.assign(**{"params.seed": frame["tags.seed"], "params.variant": frame["tags.variant"]})
    assert _rows(modern_gpt.judge(older)) == _rows(modern_gpt.judge(frame))
    differ = older.assign(**{"params.seed": older["tags.seed"].where(older["tags.variant"] != "rope", "7")})
    with pytest.raises(UserError) as e:
        modern_gpt.judge(differ)
    message = str(e.value)
    assert "columns tags.seed and params.seed both hold seed, and differ" in message
    assert message.endswith("differ ('2' and '7'); name the one to read, as in seed_col='tags.seed'.")


def test_an_experiment_of_only_the_summary_run_is_one_sentence(tracked):
    _, frame, _ = tracked
    with pytest.raises(UserError, match="holds only modern-gpt's summary run"):
        modern_gpt.judge(frame[frame["tags.kind"] == "summary"])


# ---------------------------------------------------------------------------
# The rows' order: from the file's row column, else as first seen, which a footnote says
# ---------------------------------------------------------------------------
FIRST_SEEN = "variant,seed,val_loss\nb,0,2.0\nb,1,2.1\nb,2,2.05\na,0,1.9\na,1,2.0\na,2,1.95\n"


def test_an_order_taken_from_first_appearance_is_a_footnote_naming_order(tmp_path, run_ok):
    (tmp_path / "r.csv").write_text(FIRST_SEEN)
    notes = json.loads(run_ok("judge", tmp_path / "r.csv", "--format", "json"))["footnotes"]
    assert notes[0] == (
        f"The rows are in the order the variants first appear in {tmp_path / 'r.csv'}, and each is compared with "
        "the row above it; if that is not the table's order, give it with --order A,B,C (every variant once)."
    )
    for flags in (["--order", "a,b"], ["--reference", "a"]):  # the order given, or only shown: no footnote
        notes = json.loads(run_ok("judge", tmp_path / "r.csv", *flags, "--format", "json"))["footnotes"]
        assert not any("first appear" in n for n in notes), flags
    api = modern_gpt.judge(pd.read_csv(tmp_path / "r.csv")).attrs["footnotes"]
    assert "order=[...]" in api[0] and "the DataFrame" in api[0]


def test_a_row_column_of_one_number_per_variant_is_the_order(tmp_path, run_ok):
    """A row column that gives each variant one number of its own orders the rows (runs.csv's plan row, MLflow's
    tags.row); one that does not (a line number) is no order, and the footnote says why."""
    numbered = "variant,seed,val_loss,row\nb,0,2.0,1\nb,1,2.1,1\nb,2,2.05,1\na,0,1.9,0\na,1,2.0,0\na,2,1.95,0\n"
    (tmp_path / "r.csv").write_text(numbered)
    doc = json.loads(run_ok("judge", tmp_path / "r.csv", "--format", "json"))
    assert [r["variant"] for r in doc["rows"]] == ["a", "b"] and doc["rows"][1]["verdict"] == "worse"
    assert doc["footnotes"][0] == (
        f"The rows are in the order of column row (each variant's number there), not as the variants first appear "
        f"in {tmp_path / 'r.csv'}; --order A,B,C gives another."
    )
    lines = "variant,seed,val_loss,row\nb,0,2.0,1\nb,1,2.1,2\nb,2,2.05,3\na,0,1.9,4\na,1,2.0,5\na,2,1.95,6\n"
    (tmp_path / "n.csv").write_text(lines)
    doc = json.loads(run_ok("judge", tmp_path / "n.csv", "--format", "json"))
    assert [r["variant"] for r in doc["rows"]] == ["b", "a"]
    assert "(column row does not give each variant one number of its own)" in doc["footnotes"][0]


# ---------------------------------------------------------------------------
# The reference and placebo columns: each problem one sentence
# ---------------------------------------------------------------------------
MARKED = (
    "variant,seed,val_loss,reference,placebo\n"
    "a,0,2.0,,false\na,1,2.1,,false\na,2,2.05,,false\n"
    "p,0,2.01,a,true\np,1,2.08,a,true\np,2,2.06,a,true\n"
    "b,0,1.9,a,false\nb,1,2.0,a,false\nb,2,1.95,a,false\n"
    "c,0,1.8,a,false\nc,1,2.0,a,false\nc,2,1.9,a,false\n"
)


def test_reference_and_placebo_columns_are_the_tables(tmp_path, run_ok):
    (tmp_path / "r.csv").write_text(MARKED)
    doc = json.loads(run_ok("judge", tmp_path / "r.csv", "--format", "json"))
    assert [(r["variant"], r["reference"], r["placebo"]) for r in doc["rows"]] == [
        ("a", None, False),
        ("p", "a", True),
        ("b", "a", False),
        ("c", "a", False),
    ]
    flagged = json.loads(run_ok("judge", tmp_path / "r.csv", "--placebo", "p", "--format", "json"))
    assert flagged["rows"] == doc["rows"]
    above = json.loads(run_ok("judge", tmp_path / "r.csv", "--reference", "b", "--format", "json"))
    assert [r["reference"] for r in above["rows"]] == ["b", "a", None, "b"]  # --reference wins; p stays the placebo


BAD_MARKS = [
    (
        "two references",
        MARKED.replace("c,1,2.0,a,", "c,1,2.0,b,"),
        "line 12, column reference: 'c' is compared with 'b' here and with 'a' on line 11; give each variant one reference",
    ),
    ("no such variant", MARKED.replace(",a,false", ",z,false"), "line 8, column reference: 'z' is no variant of"),
    (
        "itself",
        MARKED.replace("b,0,1.9,a,", "b,0,1.9,b,")
        .replace("b,1,2.0,a,", "b,1,2.0,b,")
        .replace("b,2,1.95,a,", "b,2,1.95,b,"),
        "line 8, column reference: 'b' is compared with itself",
    ),
    (
        "not a flag",
        MARKED.replace("p,1,2.08,a,true", "p,1,2.08,a,yes"),
        "line 6, column placebo: 'yes' is not true or false (is the row the placebo?)",
    ),
    (
        "half marked",
        MARKED.replace("p,1,2.08,a,true", "p,1,2.08,a,false"),
        "line 6, column placebo: 'p' is marked false here and true on line 5",
    ),
    (
        "two placebos",
        MARKED.replace(",a,false", ",a,true"),
        "column placebo: 'p', 'b' and 'c' are each marked as the placebo",
    ),
    (
        "placebo first",
        "variant,seed,val_loss,placebo\np,0,2.0,true\np,1,2.1,true\na,0,1.9,false\na,1,2.0,false\n",
        "column placebo: the placebo 'p' is the first row, which a placebo is compared with; put it lower with --order A,B,C",
    ),
    (
        "placebo elsewhere",
        MARKED.replace("p,0,2.01,a,", "p,0,2.01,b,")
        .replace("p,1,2.08,a,", "p,1,2.08,b,")
        .replace("p,2,2.06,a,", "p,2,2.06,b,"),
        "column placebo: the placebo 'p' is compared with 'b' in column reference, where a placebo is compared with the first row, 'a'",
    ),
]


@pytest.mark.parametrize("case,text,message", BAD_MARKS, ids=[c[0] for c in BAD_MARKS])
def test_bad_reference_and_placebo_columns_are_one_sentence(tmp_path, run, case, text, message):
    (tmp_path / "r.csv").write_text(text)
    code, out, err = run("judge", tmp_path / "r.csv")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err, err


def test_a_placebo_flag_on_a_file_with_a_placebo_column_wins(tmp_path, run_ok):
    """--placebo names another row than the file's mark: the flag's is the placebo, and the file's a component."""
    (tmp_path / "r.csv").write_text(MARKED)
    doc = json.loads(run_ok("judge", tmp_path / "r.csv", "--placebo", "c", "--format", "json"))
    assert [r["placebo"] for r in doc["rows"]] == [False, False, False, True]


# ---------------------------------------------------------------------------
# A wide or indexed DataFrame: one sentence naming the pandas call that makes it long
# ---------------------------------------------------------------------------
LONG = pd.DataFrame(
    [{"variant": v, "seed": s, "val_loss": 2.0 - 0.05 * i + 0.01 * s} for i, v in enumerate("abc") for s in range(3)]
)


def _refusal(frame, **kwargs) -> str:
    with pytest.raises(UserError) as e:
        modern_gpt.judge(frame, **kwargs)
    return str(e.value)


def test_an_indexed_frame_names_reset_index_and_that_call_fixes_it():
    indexed = LONG.set_index(["variant", "seed"])
    message = _refusal(indexed)
    assert message == (
        "the DataFrame holds 'variant' and 'seed' in its index, not in a column; pass df.reset_index(), which makes "
        "them columns."
    )
    assert _rows(modern_gpt.judge(indexed.reset_index())) == _rows(modern_gpt.judge(LONG))
    series = indexed["val_loss"]
    assert "series.reset_index() makes one, with its index ('variant', 'seed') as columns" in _refusal(series)
    assert _rows(modern_gpt.judge(series.reset_index())) == _rows(modern_gpt.judge(LONG))


def test_a_wide_frame_names_the_melt_that_makes_it_long():
    wide = (
        LONG.pivot(index="seed", columns="variant", values="val_loss").rename_axis(columns=None).reset_index(drop=True)
    )
    message = _refusal(wide)
    call = "df.rename_axis('seed').reset_index().melt(id_vars='seed', var_name='variant', value_name='val_loss')"
    assert message == (
        "the DataFrame has no variant column 'variant' and no metric column 'val_loss': it is a wide table, a column "
        f"per variant ('a', 'b', 'c'), where judge reads a long one, one row per run; make it long with {call} (its "
        "rows as the seeds)."
    )
    df = wide  # the sentence's call, run as written
    assert _rows(modern_gpt.judge(eval(call))) == _rows(modern_gpt.judge(LONG))
    with_seeds = df.rename_axis("seed").reset_index()
    acc = _refusal(with_seeds, metric="acc")
    assert "make it long with df.melt(id_vars='seed', var_name='variant', value_name='acc')." in acc
    indexed = df.rename_axis("seed")
    assert "make it long with df.reset_index().melt(id_vars='seed'" in _refusal(indexed)


def test_a_frame_with_a_multiindex_of_columns_names_stack():
    pivot = LONG.pivot(index="seed", columns="variant", values=["val_loss"])
    message = _refusal(pivot)
    assert message == (
        "the DataFrame has a MultiIndex of columns (levels None, 'variant'): a wide table, where judge reads a long "
        "one, one row per run; make it long with df.stack('variant').reset_index()."
    )
    assert _rows(modern_gpt.judge(pivot.stack("variant").reset_index())) == _rows(modern_gpt.judge(LONG))
