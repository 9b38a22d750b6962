"""judge on hostile input (issue 31): large files read by column with the same sentences, Excel's CSVs named with
their fix, a tracker's unfinished runs named, the placebo spoken of in the file's own terms, a Parquet file's
repeated column, names that print reversed, and a MemoryError as one sentence."""

import json

import numpy as np
import pandas as pd
import pytest

import modern_gpt
from modern_gpt.core.errors import UserError
from modern_gpt.verdict import judge, reading

GOOD = "variant,seed,val_loss\na,0,2.0\na,1,2.1\na,2,2.05\nb,0,1.9\nb,1,2.0\nb,2,1.95\n"


def _one_sentence(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("modern-gpt: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------------------
# Item 10: read by column, every sentence as the cell-by-cell reader said it
# ---------------------------------------------------------------------------
def test_a_plain_csv_is_read_by_column_not_a_dict_per_cell(tmp_path):
    """The source holds one list per column (a million runs were a million dicts: 2.3 GB)."""
    (tmp_path / "r.csv").write_text(GOOD)
    source = reading.read_file(tmp_path / "r.csv")
    assert source.cells["val_loss"] == ["2.0", "2.1", "2.05", "1.9", "2.0", "1.95"]
    assert [source.where(i) for i in (0, 5)] == ["line 2", "line 7"]
    assert source.records[0] == ("line 2", {"variant": "a", "seed": "0", "val_loss": "2.0"})  # ladder_judge's view


CASES = [  # (file text, what the sentence says): each error of the cell-by-cell reader, found by the column reader
    (GOOD.replace("b,1,2.0", "b,1,x"), "line 6, column val_loss: 'x' is not a number"),
    (GOOD.replace("b,1,2.0", "b,1, "), "line 6, column val_loss: is empty"),
    (GOOD.replace("b,1,2.0", "b,1,1_0"), "line 6, column val_loss: '1_0' is not a number"),
    (GOOD.replace("b,1,2.0", "b,1,nan"), "line 6, column val_loss: nan is not a finite number"),
    (GOOD.replace("b,1,2.0", "b,1," + "9" * 400), "line 6, column val_loss: '9999999999"),
    (GOOD.replace("b,1,2.0", "b,1,1e-300"), "line 6, column val_loss: '1e-300' is too small"),
    (GOOD.replace("b,1,2.0", "b,x,2.0"), "line 6, column seed: 'x' is not a whole number"),
    (GOOD.replace("b,1,2.0", "b,1,x").replace("a,2,", "a,q,"), "line 4, column seed: 'q' is not a whole number"),
    (GOOD.replace("b,1,2.0", ",1,x"), "line 6, column variant: is empty"),  # the variant before the metric
    (GOOD.replace("b,2,1.95", "b,1.0,1.95"), "line 7, columns variant and seed: variant 'b', seed 1 is already on"),
    (GOOD.replace("b,2,1.95", "b,1,1.95").replace("b,1,2.0", "b,1,x"), "line 6, column val_loss: 'x' is not"),
    (GOOD.replace("b,2,1.95\n", "b,2\n"), "line 7: 2 fields where the header has 3"),
    (GOOD.replace("\n", "\r\n").replace("b,1,2.0", "b,1,x"), "line 6, column val_loss: 'x' is not a number"),
    (GOOD.replace("a,1,", '"a",1,').replace("b,1,2.0", "b,1,x"), "line 6, column val_loss: 'x' is not a number"),
    (GOOD.replace("a,1,2.1\n", "\n\n").replace("b,1,2.0", "b,1,x"), "line 7, column val_loss: 'x' is not"),
]


@pytest.mark.parametrize("text,message", CASES)
def test_the_column_reader_names_the_first_bad_cell_as_before(tmp_path, run, text, message):
    path = tmp_path / "r.csv"
    path.write_bytes(text.encode())
    err = _one_sentence(*run("judge", path))
    assert f"{path}, {message}" in err, err


def test_a_million_runs_are_read_by_column(tmp_path):
    """Not a timing (bench/bench_judge.py measures): a long file is read without a dict per cell, and judged
    to the same numbers as its DataFrame."""
    rng = np.random.default_rng(1)
    n = 20_000
    frame = pd.DataFrame(
        {"variant": np.repeat(["a", "b"], n), "seed": np.tile(np.arange(n), 2), "val_loss": rng.normal(2, 0.1, 2 * n)}
    )
    frame.to_csv(tmp_path / "big.csv", index=False)
    source = reading.read_file(tmp_path / "big.csv")
    design, runs = judge.runs_from(source, judge.JudgeSettings())
    assert "records" not in vars(source) and len(source.cells["seed"]) == len(runs) == 2 * n  # no dict was made
    a = modern_gpt.judge(pd.read_csv(tmp_path / "big.csv"))
    b = modern_gpt.judge(frame)
    assert a.iloc[1]["p"] == pytest.approx(b.iloc[1]["p"], rel=1e-12) and a.iloc[1]["pairs"] == n


def test_judge_shows_that_it_works_on_a_terminal_once_it_takes_a_while(tmp_path, monkeypatch):
    """A large file took seconds with nothing shown: the judge command now shows a spinner with the time taken,
    on a terminal, after a second (quick work shows nothing), and leaves nothing on the screen or in a pipe."""
    import io
    import time

    from rich.console import Console

    from modern_gpt.views.progress import working

    def shown(terminal: bool, secs: float) -> str:
        buf = io.StringIO()
        with working(Console(file=buf, force_terminal=terminal, width=80), "judging big.csv", after=0.2):
            time.sleep(secs)
        return buf.getvalue()

    assert "judging big.csv" in shown(True, 0.6) and "0:00:00" in shown(True, 0.6)
    assert shown(True, 0.0) == "" and shown(False, 0.6) == ""
    seen = []
    monkeypatch.setattr("modern_gpt.views.progress.working", lambda console, what: seen.append(what) or _nothing())
    (tmp_path / "r.csv").write_text(GOOD)
    from typer.testing import CliRunner

    from modern_gpt.cli.commands import app

    assert CliRunner().invoke(app, ["judge", str(tmp_path / "r.csv")]).exit_code == 0
    assert seen == [f"judging {tmp_path / 'r.csv'}"]  # the command runs its work inside it


def _nothing():
    import contextlib

    return contextlib.nullcontext()


@pytest.mark.parametrize(("scale", "margin"), [(1.0, 1e-160), (1.0, 5e-324), (1e90, 1e-70)])
def test_a_tiny_margin_gives_a_table_not_an_overflow(tmp_path, run, scale, margin):
    """need's first guess, (z * sd / margin) ** 2, raised OverflowError (a traceback, and in modern_gpt.judge)
    where the margin is tiny against the runs' sd: it is more pairs than any table plans, so need is blank."""
    (tmp_path / "r.csv").write_text(
        "variant,seed,val_loss\n"
        + "".join(
            f"{v},{s},{scale * (2 + d[s])}\n"
            for v, d in (("a", (0, 0, 0)), ("b", (0.01, -0.02, 0.015)))
            for s in range(3)
        )
    )
    code, out, err = run("judge", tmp_path / "r.csv", "--margin", str(margin))
    assert code == 0 and "Traceback" not in err and "inconclusive" in out, err
    frame = pd.read_csv(tmp_path / "r.csv")
    assert not np.isfinite(modern_gpt.judge(frame, margin=margin)["seeds_needed"]).any()  # more than any plan


def test_a_memory_error_anywhere_in_the_cli_is_one_sentence(tmp_path, run, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise MemoryError

    (tmp_path / "r.csv").write_text(GOOD)
    monkeypatch.setattr(judge, "judge_file_runs", out_of_memory)  # what the command calls
    err = _one_sentence(*run("judge", tmp_path / "r.csv"))
    assert "out of memory" in err


# ---------------------------------------------------------------------------
# Weak messages: Excel's CSVs, each named with its fix
# ---------------------------------------------------------------------------
def test_a_semicolon_csv_with_decimal_commas_is_named_with_the_fix(tmp_path, run):
    path = tmp_path / "excel.csv"
    path.write_text(GOOD.replace(",", ";").replace(".", ","))
    err = _one_sentence(*run("judge", path))
    assert f"{path}, line 1 (the header): the columns are separated by ';'" in err, err
    assert "decimal commas" in err and "sep=';', decimal=','" in err


def test_a_sep_line_is_named_with_the_fix(tmp_path, run):
    for sep in (",", ";"):
        path = tmp_path / f"sep{ord(sep)}.csv"
        path.write_text(f"sep={sep}\n" + GOOD.replace(",", sep))
        err = _one_sentence(*run("judge", path))
        assert f"{path}, line 1: 'sep={sep}' is Excel's separator line, not a header; delete that line" in err, err


def test_excels_utf16_unicode_text_is_named_with_the_fix(tmp_path, run):
    path = tmp_path / "unicode.csv"
    path.write_bytes(GOOD.replace(",", "\t").encode("utf-16"))  # Excel's "Unicode text": UTF-16 with a BOM, tabs
    err = _one_sentence(*run("judge", path))
    assert f'{path} is UTF-16 text (Excel saves "Unicode text" so)' in err and "CSV UTF-8" in err, err


# ---------------------------------------------------------------------------
# Weak messages: a tracker's unfinished runs, the placebo, Parquet, reversed names
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("column", ["State", "status"])
def test_a_tracker_exports_unfinished_runs_are_named(tmp_path, run_ok, column):
    text = GOOD.replace("variant,seed,val_loss", f"variant,seed,val_loss,{column}").replace("\n", ",finished\n")
    text = text.replace(f"{column},finished", column).replace("b,1,2.0,finished", "b,1,2.0,crashed")
    text = text.replace("a,2,2.05,finished", "a,2,2.05,RUNNING")
    (tmp_path / "export.csv").write_text(text)
    notes = json.loads(run_ok("judge", tmp_path / "export.csv", "--format", "json"))["footnotes"]
    said = [n for n in notes if n.startswith(f"Column {column} says 2 runs did not finish")]
    assert len(said) == 1 and "'a', seed 2: 'RUNNING'" in said[0] and "'b', seed 1: 'crashed'" in said[0], notes
    assert "averaged in" in said[0]


def test_the_placebo_of_someone_elses_runs_is_not_a_weight_init():
    rng = np.random.default_rng(4)
    base = rng.normal(0.8, 0.01, 4)
    df = pd.DataFrame(
        [
            {"variant": v, "seed": i, "acc": x}
            for v, xs in (("a", base), ("a again", base + 1e-3))
            for i, x in enumerate(xs)
        ]
    )
    notes = modern_gpt.judge(df, metric="acc", placebo="a again").attrs["footnotes"]
    placebo = [n for n in notes if n.startswith("Placebo:") or "placebo row" in n]
    assert placebo and not any("weight init" in n or "initialisation" in n for n in notes), notes
    assert any("run again" in n for n in placebo), placebo


def test_a_parquet_file_with_a_repeated_column_is_one_sentence(tmp_path, run):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_arrays(
        [pa.array(["a", "b"]), pa.array([0, 0]), pa.array([1, 1])], ["variant", "seed", "seed"]
    )
    pq.write_table(table, tmp_path / "twice.parquet")
    err = _one_sentence(*run("judge", tmp_path / "twice.parquet"))
    assert f"{tmp_path / 'twice.parquet'}, its columns: the column 'seed' is named twice." in err, err


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200f", "\u061c", "\x1b"])
def test_a_name_with_a_bidi_or_control_character_is_refused(tmp_path, run, char):
    """A right-to-left override printed 'b-tfel' for 'left-b': the table lied about which row is which."""
    path = tmp_path / "r.csv"
    path.write_text(GOOD.replace("b,", f"{char}left-b,"))
    err = _one_sentence(*run("judge", path))
    assert f"{path}, line 5, column variant: " in err and "holds" in err, err
    with pytest.raises(UserError, match="row 3, column variant: "):
        modern_gpt.judge(pd.read_csv(path, keep_default_na=False))


def test_a_dataframes_index_label_is_shown_as_written_not_as_numpys_repr():
    """A DataFrame with its own integer index: 'index 6', not 'index np.int64(6)'."""
    import pandas as pd

    import modern_gpt
    from modern_gpt.core.errors import UserError

    frame = pd.DataFrame(
        {"variant": ["a", "a", "b", "b"], "seed": [0, 0, 0, 1], "val_loss": [1, 2, 3, 4]}, index=[5, 6, 7, 8]
    )
    with pytest.raises(UserError) as e:
        modern_gpt.judge(frame)
    assert "row 1 (index 6)" in str(e.value) and "np.int64" not in str(e.value)


# ---------------------------------------------------------------------------
# Weak messages of the hostile pass: each named with its line or its fix
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "command"), [("gzip", "gunzip -c"), ("bzip2", "bunzip2 -c"), ("zip", "unzip -p")])
def test_a_compressed_file_named_csv_is_named_with_its_fix(tmp_path, run, kind, command):
    """It said 'line 1: not UTF-8 text (byte 0x8b)' and never that the file is compressed."""
    import bz2
    import gzip
    import zipfile

    path = tmp_path / "runs.csv"
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("runs.csv", GOOD)
    else:
        path.write_bytes((gzip if kind == "gzip" else bz2).compress(GOOD.encode()))
    err = _one_sentence(*run("judge", path))
    assert f"is a {kind}-compressed file, not CSV text; decompress it ({command} {path} > NEW.csv)" in err, err


def test_a_json_number_too_large_for_a_float_is_named_as_the_csvs_is(tmp_path, run):
    """JSON's 1e400 was read as infinity ('inf is not a finite number'); the CSV's digits were named."""
    (tmp_path / "r.jsonl").write_text(
        "".join(
            f'{{"variant": "{v}", "seed": {s}, "val_loss": {"1e400" if (v, s) == ("b", 1) else 2.0 + s}}}\n'
            for v in "ab"
            for s in range(3)
        )
    )
    err = _one_sentence(*run("judge", tmp_path / "r.jsonl"))
    assert "r.jsonl, line 5, column val_loss: '1e400' is too large for a float64" in err, err


def _ladder_csv(path, rung=lambda r: r):
    rows = ["variant,seed,rung,flops,val_loss"]
    rows += [
        f"{v},{s},{rung(r)},{10.0 ** (12 + r)},{4 - 0.3 * r - 0.05 * i + 0.01 * s}"
        for i, v in enumerate("ab")
        for r in range(3)
        for s in range(3)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_ladders_columns_are_each_their_own_and_a_nan_rung_has_its_line(tmp_path, run):
    """--compute-col naming the metric said 'mean val loss does not fall', --rung-col naming it listed every loss
    as a rung, and a rung cell 'nan' counted a fourth rung with no line."""
    path = _ladder_csv(tmp_path / "l.csv")
    for flag in ("--compute-col", "--rung-col"):
        extra = [] if flag == "--compute-col" else ["--compute-col", "flops"]
        err = _one_sentence(*run("judge", path, *extra, flag, "val_loss"))
        assert f"--metric and {flag} both name the column 'val_loss'" in err, err
    bad = _ladder_csv(tmp_path / "nan.csv", rung=lambda r: "nan" if r == 1 else r)
    err = _one_sentence(*run("judge", bad, "--compute-col", "flops"))
    assert "nan.csv, line 5, column rung: 'nan' names no rung" in err, err  # a, seed 0, rung 1


def test_a_misspelt_keyword_of_modern_gpt_judge_names_the_closest():
    """A TypeError naming verdict() before; modern_gpt.ablate and the others name the closest option."""
    frame = pd.read_csv(__import__("io").StringIO(GOOD))
    with pytest.raises(UserError, match=r"modern_gpt.judge\(\) has no option 'metrc'; did you mean metric\?"):
        modern_gpt.judge(frame, metrc="val_loss")
    assert modern_gpt.judge(frame, metric="val_loss").iloc[1]["variant"] == "b"


def test_an_mlflow_export_without_or_with_a_capitalised_kind_says_what_its_empty_variant_is(tmp_path, run):
    """Without tags.kind the summary run's empty variant read 'is empty' alone; 'Summary' was not left out."""
    runs = [f"r{v}{s},{v},{s},{2.0 + 0.1 * (v == 'b') + 0.01 * s}" for v in "ab" for s in range(3)]
    (tmp_path / "nokind.csv").write_text("run_id,tags.variant,tags.seed,metrics.val_loss\nsum,,,\n" + "\n".join(runs))
    err = _one_sentence(*run("judge", tmp_path / "nokind.csv"))
    assert "line 2, column tags.variant: is empty (an MLflow run with no variant is not a seed's run" in err, err
    rows = [f"{r},finished" for r in runs]
    (tmp_path / "case.csv").write_text(
        "run_id,tags.variant,tags.seed,metrics.val_loss,tags.kind\nsum,,,,Summary\n" + "\n".join(rows)
    )
    code, out, err = run("judge", tmp_path / "case.csv")
    assert code == 0 and "2 variants, 3 seeds" in " ".join(out.split()), err


def test_modern_gpt_judges_sentences_name_its_keywords_not_the_commands_flags():
    """The sentences are the command's, so they named --order and --reference to a Python caller."""
    frame = pd.read_csv(__import__("io").StringIO(GOOD))
    with pytest.raises(UserError, match=r"^order= names 'zz'") as e:
        modern_gpt.judge(frame, order=["a", "zz"])
    assert "--" not in str(e.value)
    with pytest.raises(UserError, match=r"^metric= and compute_col= both name the column 'val_loss'"):
        modern_gpt.judge(frame, compute_col="val_loss")


def test_a_placebo_misplaced_by_a_guessed_order_points_to_order(tmp_path, run):
    """An MLflow export without tags.row lists the newest run first, so the first row was the last variant and
    the placebo's reference looked wrong; the sentence now says the order was guessed and how to give it."""
    rows = [("b", "a", "false"), ("a (placebo)", "a", "true"), ("a", "", "false")]  # newest first
    lines = [
        f"{v},{s},{2.0 + 0.01 * s + 0.1 * i},{ref},{mark}" for i, (v, ref, mark) in enumerate(rows) for s in range(3)
    ]
    (tmp_path / "r.csv").write_text("variant,seed,val_loss,reference,placebo\n" + "\n".join(lines) + "\n")
    err = _one_sentence(*run("judge", tmp_path / "r.csv"))
    assert "where a placebo is compared with the first row, 'b' (the first to appear in the file" in err, err
    assert "give it with --order" in err


def test_the_keywords_rewrite_leaves_names_alone():
    """judge.as_keywords rewrote a variant named '--margin' to 'margin=' inside the sentence."""
    frame = pd.DataFrame(
        {
            "variant": ["--margin"] * 3 + ["b"] * 3 + ["--margin"],
            "seed": [0, 1, 2] * 2 + [1],
            "val_loss": [1, 2, 3, 1.5, 2.5, 3.6, 4],
        }
    )
    with pytest.raises(UserError, match=r"variant '--margin', seed 1 is already on row 1"):
        modern_gpt.judge(frame)


def test_a_csv_whose_header_starts_like_bzip2_is_text_and_an_xlsx_is_named(tmp_path, run):
    import zipfile

    (tmp_path / "bzh.csv").write_text(GOOD.replace("variant", "BZh_variant", 1))
    err = _one_sentence(*run("judge", tmp_path / "bzh.csv"))
    assert "compressed" not in err and "no variant column 'variant'" in err, err
    with zipfile.ZipFile(tmp_path / "book.csv", "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
    err = _one_sentence(*run("judge", tmp_path / "book.csv"))
    assert "is an Excel workbook (.xlsx), not CSV text" in err and "unzip" not in err, err
