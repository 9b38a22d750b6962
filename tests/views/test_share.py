"""report --html / --markdown, judge --html and modern_gpt.share: one page a researcher can attach or host.

For each kind of results folder (tests/golden/folders) the page holds the table's cells as report prints them,
the footnotes, the runs as CSV that parses back to the folder's runs, and a SciPy snippet that gives the table's
raw p-values on that CSV (and a command that gives p_adj and the verdicts); nothing in it points outside it; every
text from a file is escaped; a bad output path is one sentence and exit code 2. Headless Chromium (skipped where
/usr/bin/chromium is missing) renders the pages offline with no console error."""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import math
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import modern_gpt
from modern_gpt.core.errors import UserError
from tests.clihelp import run_main, tiny, user_error

GOLDEN = Path(__file__).parents[1] / "golden" / "folders"
KINDS = ("ablate", "lrs", "power", "duel", "auto", "damaged")
CHROMIUM = Path("/usr/bin/chromium")
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    where = tmp_path_factory.mktemp("golden")
    for kind in KINDS:
        shutil.copytree(GOLDEN / kind, where / kind)
    return where


class Tables(HTMLParser):
    """Every <table> of a page: its id, caption and rows of cell texts (header row first)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables, self._cell, self._in = [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"id": dict(attrs).get("id"), "caption": "", "rows": []})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th", "caption"):
            self._cell, self._in = [], tag

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1].append("".join(self._cell))
        elif tag == "caption" and self._cell is not None:
            self.tables[-1]["caption"] = "".join(self._cell)
        if tag in ("td", "th", "caption"):
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def tables(page: str) -> list[dict]:
    parser = Tables()
    parser.feed(page)
    return parser.tables


def pre(page: str, id_: str) -> str:
    found = re.search(rf'<pre id="{id_}">(?:<code>)?(.*?)(?:</code>)?</pre>', page, re.S)
    return html.unescape(found.group(1)) if found else ""


def markdown_rows(text: str) -> list[list[str]]:
    """The rows of the first Markdown table report or judge printed."""
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [line[2:-2].split(" | ") for line in lines[1:]]


def run_claim(page: str, where: Path) -> list[float]:
    """The page's claim test run on the page's CSV (saved as it says): the numbers it prints."""
    where.mkdir(exist_ok=True)
    (where / "runs.csv").write_text(pre(page, "runs-csv"), encoding="utf-8")
    out, cwd = io.StringIO(), os.getcwd()
    os.chdir(where)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(pre(page, "claim"), "claim.py", "exec"), {})
    finally:
        os.chdir(cwd)
    return [float(x) for x in out.getvalue().split()]


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15)
        for x, y in zip(a, b, strict=True)
    )


def self_contained(page: str) -> None:
    """Nothing the page loads or links leaves it: no address, no script, no stylesheet link, every image inline."""
    lower = page.lower()
    for bad in ("http://", "https://", "<script", "<link", "<iframe", "<object", "<embed", "url(", "@import"):
        assert bad not in lower, bad
    assert 'http-equiv="Content-Security-Policy"' in page and "default-src 'none'" in page
    for src in re.findall(r'\ssrc="([^"]*)"', page):
        assert src.startswith("data:image/png;base64,"), src[:40]
    for href in re.findall(r'\shref="([^"]*)"', page):
        assert href.startswith("data:text/csv;charset=utf-8;base64,"), href[:40]


# ---------------------------------------------------------------------------
# A results folder's page, for each kind of folder
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_the_page_of_each_kind_of_folder_holds_its_table_runs_and_claim_test(
    kind, folders, tmp_path, capsys, monkeypatch
):
    folder = folders / kind
    page_path = tmp_path / "page.html"
    code, out, err = run_main(capsys, monkeypatch, "report", folder, "--html", page_path)
    assert code == 0 and f"wrote {page_path}" in err, err
    page = page_path.read_text(encoding="utf-8")
    result = modern_gpt.report(folder)
    self_contained(page)
    # the table, cell for cell as report prints it (power: its figures, as report prints them)
    first = tables(page)[0]
    assert first["id"] == "verdicts"
    if kind == "power":
        info = __import__("modern_gpt.ablation.report", fromlist=["x"]).power_info(
            result.table.spec, result.table.summary
        )
        for line in __import__("modern_gpt.views.render", fromlist=["x"]).power_sentences(info):
            assert html.escape(line) in page
        assert any(f"{r['one_comparison']['mde']:.4f}" in row for r in info["mde"] for row in first["rows"])
    else:
        code, shown, _ = run_main(capsys, monkeypatch, "report", folder, "--format", "markdown")
        assert first["rows"][1:] == markdown_rows(shown)
        assert {r.verdict for r in result.table.summary} - {""} <= {c for row in first["rows"] for c in row}
    for note in result.footnotes:
        assert html.escape(note) in page
    # the runs, inside the page twice (a <pre> and the download link), each as runs.csv
    want = pd.read_csv(io.StringIO(result.runs.to_csv(index=False)))
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(pre(page, "runs-csv"))), want)
    link = re.search(r'href="data:text/csv;charset=utf-8;base64,([^"]*)"', page).group(1)
    pd.testing.assert_frame_equal(pd.read_csv(io.BytesIO(base64.b64decode(link))), want)
    # the claim test: SciPy on that CSV gives the table's p (and p_same with a margin), then power's and the duel's
    tested = [r for r in result.table.summary if not math.isnan(r.reference)]
    margin = result.table.design.margin
    expected = [x for r in tested for x in ((r.p, r.p_same) if margin else (r.p,))]
    if kind == "power":
        expected.append(result.table.summary[1].sd)
    if kind == "duel":
        expected.append(result.table.duel["perplexity_change"])
    assert close(run_claim(page, tmp_path / "claim"), expected)


@pytest.mark.parametrize("kind", ["ablate", "lrs", "duel", "power"])
def test_the_pages_command_gives_the_tables_p_adj_and_verdicts(kind, folders, tmp_path, capsys, monkeypatch):
    """The command the page names (judge on its CSV, or over a learning-rate grid on the runs the claim test
    writes) prints the table's p_adj and verdicts."""
    result = modern_gpt.report(folders / kind)
    shared = modern_gpt.share(result)
    run_claim(shared.html(), tmp_path)
    command = shared.claim.command.split()
    assert command[:2] == ["modern-gpt", "judge"]
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, monkeypatch, *command[1:], "--format", "csv")
    assert code == 0, err
    judged = pd.read_csv(io.StringIO(out))
    assert list(judged["verdict"].fillna("")) == [r.verdict for r in result.table.summary]
    assert close(list(judged["p_adj"]), [r.p_adj for r in result.table.summary])


@pytest.mark.parametrize("kind", ["ablate", "lrs", "power", "duel", "damaged"])  # auto's looks would disagree
def test_the_claim_test_runs_on_a_folder_whose_runs_all_diverged(kind, folders, tmp_path, capsys, monkeypatch):
    """Issue 43, class 6: every run diverged, the page said "the table's p nan" and its Python block raised
    KeyError (no row left in the pivoted table). Now it prints NaN where the table has no p, and so does the
    command it names."""
    folder = Path(shutil.copytree(folders / kind, tmp_path / kind))
    for path in (folder / "runs").glob("*.json"):
        record = json.loads(path.read_text())
        losses = [k for k in record if k.startswith(("val_", "train_loss", "best_val"))]
        path.write_text(json.dumps({**record, "diverged": True, **dict.fromkeys(losses, float("nan"))}))
    result = modern_gpt.report(folder)
    page = modern_gpt.share(result)
    code = page.claim.code
    assert "the table's p nan" not in code and ("fewer than two pairs" in code or "no learning rate chosen" in code)
    printed = run_claim(page.html(), tmp_path / "claim")  # over a grid: nothing to test, and the code says why
    assert all(math.isnan(x) for x in printed) and (printed or kind == "lrs")
    assert all(math.isnan(r.p) for r in result.table.summary)  # the table has no p either
    command = page.claim.command.split()
    monkeypatch.chdir(tmp_path / "claim")
    code, out, err = run_main(capsys, monkeypatch, *command[1:], "--format", "csv")
    assert code == 0 and "Traceback" not in err, err  # judge on the CSV, or report on the folder


@pytest.mark.parametrize("kind", ["ablate", "duel", "auto"])
def test_the_page_opens_on_the_one_line_answer_then_the_table_then_provenance(kind, folders):
    """Issue 44, item 9: the page opened on eight rows of provenance with no answer. Now the trackers' line
    (better: ... (Δ ...); n inconclusive) is under the title, then the table, then where the numbers come from."""
    from modern_gpt.trackers.records import answer, summary_cells

    result = modern_gpt.report(folders / kind)
    page = modern_gpt.share(result)
    said = answer(summary_cells(result.table.summary))
    assert page.answer == said and ("inconclusive" in said or "better" in said or "worse" in said)
    text = page.html()
    order = [text.index(x) for x in ("<h1>", 'id="answer"', 'id="verdicts"', "Where the numbers come from")]
    assert order == sorted(order) and html.escape(said) in text
    md = page.markdown()
    order = [md.index(x) for x in ("# ", f"**{said.replace('[', chr(92) + '[').replace(']', chr(92) + ']')}**")]
    assert order == sorted(order) and md.index("## Where the numbers come from") > md.index("| variant")
    tested = [r for r in result.table.summary if r.verdict in ("better", "worse", "same")]
    for row in tested:
        assert f"{row.variant} (Δ {row.delta_val:+.4f}" in said


def test_a_seeds_auto_page_names_report_for_its_boundarys_p_adj(folders):
    claim = modern_gpt.share(folders / "auto").claim
    assert claim.command == f"modern-gpt report {folders / 'auto'}" and "boundary" in claim.says


def test_the_figures_are_inline_png_data_and_each_page_is_one_file(folders, tmp_path, capsys, monkeypatch):
    """Issue 41: a page is one file at the path given: the Markdown holds the runs' CSV and names the figures (the
    HTML holds them). Issue 44: the folders above a page are made, as --out's are."""
    folder = Path(shutil.copytree(folders / "lrs", tmp_path / "lrs"))
    code, _, err = run_main(capsys, monkeypatch, "report", folder, "--plot")
    assert code == 0, err
    out = tmp_path / "out" / "share"  # neither folder exists yet
    args = ("report", folder, "--html", out / "page.html", "--markdown", out / "RESULT.md")
    code, table, err = run_main(capsys, monkeypatch, *args)
    assert code == 0 and "wrote" in err and "custom ablation" in table, err  # the table is printed as always
    assert sorted(p.name for p in out.iterdir()) == ["RESULT.md", "page.html"]
    page = (out / "page.html").read_text(encoding="utf-8")
    images = re.findall(r'<img src="data:image/png;base64,([^"]*)"', page)
    assert [base64.b64decode(x) for x in images] == [(folder / n).read_bytes() for n in ("curves.png", "lr.png")]
    self_contained(page)
    text = (out / "RESULT.md").read_text(encoding="utf-8")
    assert "`curves.png`, `lr.png` in the results folder" in text
    csv_text = re.search(r"(?s)<details><summary>runs.csv</summary>\n\n```csv\n(.*?)\n```", text).group(1)
    want = pd.read_csv(io.StringIO(modern_gpt.report(folder).runs.to_csv(index=False)))
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(csv_text)), want)
    assert 'pd.read_csv("runs.csv")' in text and "```python" in text
    code, shown, _ = run_main(capsys, monkeypatch, "report", folder, "--format", "markdown")
    for row in markdown_rows(shown):  # the table report prints, cell for cell (its brackets escaped)
        assert "| " + " | ".join(c.replace("[", "\\[").replace("]", "\\]") for c in row) + " |" in text


def test_a_figure_that_is_a_pipe_or_no_png_is_left_out_with_a_note(folders, tmp_path):
    folder = Path(shutil.copytree(folders / "lrs", tmp_path / "lrs"))
    os.mkfifo(folder / "curves.png")  # opened, it would block the page forever
    (folder / "lr.png").write_text("<script>alert(1)</script>")
    page = modern_gpt.share(folder).html()
    assert "curves.png is a pipe (FIFO): left out" in page and "lr.png is not a PNG file: left out" in page
    assert "<img" not in page and "<script" not in page


def test_a_folder_records_whether_its_checkout_was_clean_and_the_header_says_so(folders, tmp_path):
    """meta.json records git_dirty beside git_commit (running.environment, from core.files.git_state), and the
    page's header reads it: clean, or with uncommitted changes (a folder written before it: not recorded)."""
    from modern_gpt.ablation.running import environment
    from modern_gpt.core.files import git_state

    env = environment("cpu")
    assert (env["git_commit"], env["git_dirty"]) == git_state()
    for dirty, said in ((False, "clean"), (True, "with uncommitted changes")):
        folder = Path(shutil.copytree(folders / "ablate", tmp_path / str(dirty)))
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps({**meta, "git_dirty": dirty}))
        assert f"{meta['git_commit']} ({said})" in dict(modern_gpt.share(folder).header)["trained by"]


def test_the_header_says_commit_versions_machine_wall_time_and_compute(folders):
    header = dict(modern_gpt.share(folders / "ablate").header)
    meta = json.loads((folders / "ablate" / "meta.json").read_text())
    assert meta["git_commit"] in header["trained by"] and "uncommitted changes not recorded" in header["trained by"]
    assert "modern-gpt" in header["this page by"]
    assert all(f"{k} {v}" in header["packages"] for k, v in meta["packages"].items())
    assert meta["platform"] in header["machine"] and "device cpu" in header["machine"]
    assert header["wall time"].startswith("15 s, 2026-12-01T19:41:04")
    assert header["compute"].startswith("24 runs, training FLOPs not recorded")  # a folder from before FLOPs
    assert "rope: learned position table -> rotary position embedding (RoPE)" in header["components"]


# ---------------------------------------------------------------------------
# Runs judged from a file
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("margin", [None, "0.02"])
def test_judge_html_holds_judges_table_and_a_csv_judge_reads_back(margin, folders, tmp_path, capsys, monkeypatch):
    flags = ["--placebo", "classic (placebo)", *(["--margin", margin] if margin else [])]
    source = folders / "ablate" / "runs.csv"
    code, shown, _ = run_main(capsys, monkeypatch, "judge", source, *flags, "--format", "markdown")
    code, out, err = run_main(capsys, monkeypatch, "judge", source, *flags, "--html", tmp_path / "p.html")
    assert code == 0, err
    page = (tmp_path / "p.html").read_text(encoding="utf-8")
    self_contained(page)
    assert tables(page)[0]["rows"][1:] == markdown_rows(shown)
    assert "no commit, machine, wall time or compute" in page and "<img" not in page
    _, before, _ = run_main(capsys, monkeypatch, "judge", source, *flags, "--format", "csv")
    judged = pd.read_csv(io.StringIO(before))
    want = [
        x
        for _, r in judged.iterrows()
        if isinstance(r["reference"], str)
        for x in (r["p"], *([r["p_same"]] * bool(margin)))
    ]
    assert close(run_claim(page, tmp_path / "c"), want)
    command = modern_gpt.share(source, placebo="classic (placebo)", margin=float(margin) if margin else None)
    args = command.claim.command.split()[1:]
    monkeypatch.chdir(tmp_path / "c")
    _, again, _ = run_main(capsys, monkeypatch, *args, "--format", "csv")
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(again)), judged)  # the same table from the page's CSV


def test_judge_of_a_higher_is_better_metric_and_its_markdown(tmp_path, capsys, monkeypatch):
    rows = [
        (v, s, 0.9 + 0.01 * s + d * (1 + s % 3))
        for v, d in (("base", 0), ("+aug", 0.02), ("+mix", 0.021))
        for s in range(4)
    ]
    pd.DataFrame(rows, columns=["model", "seed", "acc"]).to_csv(tmp_path / "acc.csv", index=False)
    flags = ["--variant-col", "model", "--metric", "acc", "--higher-is-better", "--reference", "base"]
    code, _, err = run_main(capsys, monkeypatch, "judge", tmp_path / "acc.csv", *flags, "--markdown", tmp_path / "a.md")
    assert code == 0, err
    text = (tmp_path / "a.md").read_text(encoding="utf-8")
    assert "acc (higher is better)" in text and "--higher-is-better" in text and "sha256" in text
    page = modern_gpt.share(
        tmp_path / "acc.csv", variant_col="model", metric="acc", higher_is_better=True, reference="base"
    )
    got = modern_gpt.judge(
        pd.read_csv(tmp_path / "acc.csv"), variant_col="model", metric="acc", higher_is_better=True, reference="base"
    )
    assert close(run_claim(page.html(), tmp_path / "c"), list(got["p"].dropna()))
    values = tables(page.html())[2]["rows"]  # the metric seed by seed, as measured (not negated)
    assert values[2][1:] == [f"{0.9 + 0.01 * s + 0.02 * (1 + s % 3):.4f}" for s in range(4)]


def test_a_page_of_unpaired_runs_is_refused_not_silently_skipped(run, tmp_path):
    """judge of runs without seeds (or a folder of logs, or --threshold) printed its table and exited 0 with
    --html given, and wrote no page."""
    rows = [("base", 2.30 + 0.01 * i) for i in range(3)] + [("new", 2.25 + 0.01 * i) for i in range(3)]
    pd.DataFrame(rows, columns=["variant", "val_loss"]).to_csv(tmp_path / "r.csv", index=False)
    for flag in ("--html", "--markdown"):
        err = user_error(run, "judge", tmp_path / "r.csv", flag, tmp_path / "p")
        assert "make a page of runs paired by seed" in err, err
    assert not (tmp_path / "p").exists()


# ---------------------------------------------------------------------------
# Hostile text: shown, never run
# ---------------------------------------------------------------------------
NAMES = [HOSTILE, '"><img src=x onerror=alert(2)>', "[x](javascript:alert(3))", "a|b ` *c*", 'it\'s "quoted" \\ end']


def test_hostile_names_are_escaped_in_every_page_and_the_claim_test_still_runs(tmp_path):
    rows = [
        (v, s, 2.0 + 0.03 * i + 0.01 * ((7 * s + 3 * i) % 5))
        for i, v in enumerate(["classic", *NAMES])
        for s in range(3)
    ]
    frame = pd.DataFrame(rows, columns=["variant", "seed", "val_loss"])
    page = modern_gpt.share(frame, html=tmp_path / "p.html", markdown=tmp_path / "p.md")
    text = (tmp_path / "p.html").read_text(encoding="utf-8")
    self_contained(text)
    assert (
        "<img" not in text
        and "<script" not in text.lower()
        and "onerror=alert" not in text.replace("onerror=alert(2)&gt;", "")
    )
    assert html.escape(HOSTILE) in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert tables(text)[0]["rows"][2][0] == HOSTILE  # the cell's text is the name, character for character
    md = (tmp_path / "p.md").read_text(encoding="utf-8")
    outside = re.sub(r"(?s)(`{3,}).*?\1", "", md)  # the fenced code: Python literals and the CSV, never rendered
    assert "<script" not in outside and "<img" not in outside and not re.search(r"(?<!\\)\]\(javascript", outside)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in outside and "a\\|b" in outside
    got = modern_gpt.judge(frame)
    assert close(run_claim(page.html(), tmp_path / "c"), list(got["p"].dropna()))


def test_a_folders_messages_and_command_are_escaped(folders, tmp_path):
    folder = Path(shutil.copytree(folders / "damaged", tmp_path / "d"))
    meta = json.loads((folder / "meta.json").read_text())
    meta["command"] = f"modern-gpt ablate {HOSTILE}"
    meta["packages"] = {"torch": "<b>2</b>", "x": {"nested": 1}}
    (folder / "meta.json").write_text(json.dumps(meta))
    run = next((folder / "runs").glob("row03-seed1.json"))
    record = json.loads(run.read_text())
    record["error"] = f"killed {HOSTILE}"
    run.write_text(json.dumps(record))
    page = modern_gpt.share(folder).html()
    assert "<script" not in page.lower() and "<b>" not in page
    assert page.count(html.escape(HOSTILE)) >= 3  # the command, the failed run's footnote, the CSV


@pytest.mark.slow
def test_a_plugins_summary_is_escaped(tmp_path, capsys, monkeypatch):
    """A plugin component's summary (free text in the user's file) is shown in the header, as text."""
    plugin = tmp_path / "evil.py"
    source = (Path(__file__).parents[2] / "examples" / "components" / "relu2.py").read_text()
    plugin.write_text(
        source.replace('"relu2", "GELU MLP -> squared-ReLU MLP (Primer)"', f'"evil", "GELU MLP -> {HOSTILE}"')
    )
    args = [*tiny(4), "--seeds", "2", "--plan", "custom", "--variants", "classic;evil", "--plugin", plugin]
    code, _, err = run_main(capsys, monkeypatch, "ablate", *args, "--out", tmp_path / "r", "--jobs", "1")
    assert code == 0, err
    code, _, err = run_main(capsys, monkeypatch, "report", tmp_path / "r", "--html", tmp_path / "p.html")
    assert code == 0, err
    page = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert f"evil: GELU MLP -&gt; {html.escape(HOSTILE)} (plugin evil.py" in page and "<script" not in page


# ---------------------------------------------------------------------------
# Where the page goes: one sentence, exit 2, nothing written
# ---------------------------------------------------------------------------
def _bad_paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    (tmp_path / "afile").write_text("x")
    return {
        "folder": (tmp_path, "is a folder"),
        "fifo": (fifo, "is a pipe (FIFO), not a file to write"),
        "under a file": (tmp_path / "afile" / "p.html", "is not a folder"),
        "stdout": (Path("-"), "a page is written to a file"),
    }


@pytest.mark.parametrize("case", ["folder", "fifo", "under a file", "stdout"])
@pytest.mark.parametrize("flag", ["--html", "--markdown"])
def test_a_bad_output_path_is_one_sentence(case, flag, folders, run, tmp_path):
    path, says = _bad_paths(tmp_path)[case]
    for command in (["report", folders / "ablate"], ["judge", folders / "ablate" / "runs.csv"]):
        err = user_error(run, *command, flag, path)
        assert says in err and flag in err, err
    assert (tmp_path / "afile").read_text() == "x" and not Path("-").exists()


def test_an_unwritable_folder_and_the_input_itself_are_one_sentence(folders, run, tmp_path):
    if os.geteuid() == 0:  # root writes anywhere a mode allows: sysfs refuses even root a new file
        target = Path("/sys/kernel/modern-gpt-share.html")
        if not Path("/sys/kernel").is_dir():
            pytest.skip("no /sys/kernel to stand for a folder root cannot write")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "p.html"
    err = user_error(run, "report", folders / "ablate", "--html", target)
    assert "cannot" in err and str(target.parent) in err, err
    source = tmp_path / "runs.csv"
    shutil.copy(folders / "ablate" / "runs.csv", source)
    before = source.read_bytes()
    err = user_error(run, "judge", source, "--html", source)
    assert "is a file this command reads" in err and source.read_bytes() == before
    copy = Path(shutil.copytree(folders / "ablate", tmp_path / "a"))
    err = user_error(run, "report", copy, "--html", copy / "meta.json")
    assert f"is already in {copy.resolve()}, whose files are never replaced" in err, err
    record = sorted((copy / "runs").glob("*.json"))[0]  # any file already in the folder, even with --force
    before = record.read_bytes()
    err = user_error(run, "report", copy, "--markdown", record, "--force")
    assert "whose files are never replaced" in err, err
    assert record.read_bytes() == before


def test_an_existing_file_is_replaced_only_with_force_and_never_the_input(folders, run, tmp_path):
    """Issue 41: a page is one file; one already there is refused without --force, as output folders are."""
    source = tmp_path / "runs.csv"
    shutil.copy(folders / "ablate" / "runs.csv", source)
    mine = tmp_path / "notes.md"
    mine.write_text("mine")
    for flag in ("--html", "--markdown"):
        for command in (["report", folders / "ablate"], ["judge", source]):
            err = user_error(run, *command, flag, mine)
            assert f"{flag} {mine} already exists" in err and "--force" in err, err
        with pytest.raises(UserError, match="already exists"):
            modern_gpt.share(source, **{flag[2:]: mine})
    assert mine.read_text() == "mine"
    assert run("judge", source, "--markdown", mine, "--force")[0] == 0 and mine.read_text().startswith("# ")
    assert "is a file this command reads" in user_error(run, "judge", source, "--html", source, "--force")


def test_html_and_markdown_never_name_one_file(folders, run, tmp_path):
    source = folders / "ablate" / "runs.csv"
    for command in (["report", folders / "ablate"], ["judge", source]):
        err = user_error(run, *command, "--html", tmp_path / "p", "--markdown", tmp_path / "p")
        assert "are one file" in err, err
    (tmp_path / "p").write_text("mine")
    os.link(tmp_path / "p", tmp_path / "q")
    both = ("--html", tmp_path / "p", "--markdown", tmp_path / "q", "--force")
    assert "are one file" in user_error(run, "judge", source, *both)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p", "q"] and (tmp_path / "p").read_text() == "mine"


def test_the_messages_name_the_path_given_and_fit_the_error(run, tmp_path):
    source = tmp_path / "x-runs.csv"
    shutil.copy(GOLDEN / "ablate" / "runs.csv", source)
    for flag in ("--html", "--markdown"):
        err = user_error(run, "judge", source, flag, "")
        assert f"{flag} is an empty path" in err and "is a folder" not in err, err
        with pytest.raises(UserError, match=f"{flag} is an empty path"):
            modern_gpt.share(source, **{flag[2:]: ""})
    if Path("/proc/version").is_file():
        err = user_error(run, "judge", source, "--html", "/proc/version", "--force")
        assert "cannot write in /proc" in err and "cannot hold new files" in err and "free some space" not in err
    import errno

    from modern_gpt.views.page import cannot

    page = Path("/p/page.html")
    says = {
        errno.ENOSPC: "free some space on its disk",
        errno.EACCES: "make /p writable",
        errno.EPERM: "make /p writable",
        errno.EROFS: "read-only",
        errno.ENOENT: "cannot hold new files",
    }
    for code, advice in says.items():
        text = cannot("--html", page, OSError(code, os.strerror(code)))
        assert advice in text and text.startswith("--html /p/page.html: cannot write in /p"), text
        assert ("free some space" in text) == (code == errno.ENOSPC), text


def test_a_page_is_written_atomically_over_an_old_one(folders, tmp_path):
    path = tmp_path / "p.html"
    path.write_text("old")
    inode = path.stat().st_ino
    modern_gpt.share(folders / "ablate", html=path, force=True)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>") and path.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.html"]  # no temporary file left


def test_the_python_api(folders, tmp_path):
    result = modern_gpt.report(folders / "ablate")
    page = modern_gpt.share(result, html=tmp_path / "a.html")
    assert (tmp_path / "a.html").read_text(encoding="utf-8") == page.html()
    assert page.title == result.title and "| +rope |" in page.markdown()
    with pytest.raises(UserError, match="share has no option 'metrc'"):
        modern_gpt.share(folders / "ablate" / "runs.csv", metrc="x")
    with pytest.raises(UserError, match="metric= goes with runs to judge"):
        modern_gpt.share(folders / "ablate", metric="val_loss")
    with pytest.raises(UserError, match="is a folder"):
        modern_gpt.share(result, html=tmp_path)


# ---------------------------------------------------------------------------
# A ladder's folder, and a ladder judged from its runs
# ---------------------------------------------------------------------------
LADDER = dict(smoke=True, plan="custom", variants="classic;rope", seeds=2, steps=24, eval_every=12, jobs=1)


@pytest.mark.slow
def test_a_ladders_page_holds_its_scale_table_figures_and_judges_command(tmp_path, capsys, monkeypatch):
    ladder = modern_gpt.scale(out=tmp_path / "scale", **LADDER)
    code, shown, _ = run_main(capsys, monkeypatch, "report", ladder.folder, "--format", "markdown")
    code, _, err = run_main(capsys, monkeypatch, "report", ladder.folder, "--html", tmp_path / "p.html")
    assert code == 0, err
    page = (tmp_path / "p.html").read_text(encoding="utf-8")
    self_contained(page)
    assert tables(page)[0]["rows"][1:] == markdown_rows(shown)
    notes = [html.escape(n) for n in ladder.footnotes]  # under the scale table, before the rungs' tables
    assert notes and all(page.index(n) < page.index("Rung ") for n in notes)
    assert page.index('id="answer"') < page.index('id="verdicts"')
    images = re.findall(r'<img src="data:image/png;base64,([^"]*)"', page)
    assert base64.b64decode(images[0]) == (ladder.folder / "scale.png").read_bytes() and len(images) == 1 + 3
    command = modern_gpt.share(ladder).claim.command.split()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "runs.csv").write_text(pre(page, "runs-csv"), encoding="utf-8")
    monkeypatch.chdir(tmp_path / "c")
    import shlex

    code, out, err = run_main(capsys, monkeypatch, *shlex.split(" ".join(command[1:])), "--format", "csv")
    assert code == 0, err
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(out)), pd.read_csv(ladder.folder / "summary.csv"))
    code, _, err = run_main(capsys, monkeypatch, *shlex.split(" ".join(command[1:])), "--html", tmp_path / "j.html")
    assert code == 0, err
    judged = (tmp_path / "j.html").read_text(encoding="utf-8")
    assert tables(judged)[0]["rows"][1:] == tables(page)[0]["rows"][1:]  # the same scale table, from the file


# ---------------------------------------------------------------------------
# Headless Chromium: the page renders offline, with no console error, and a script-named variant is text
# ---------------------------------------------------------------------------
needs_chromium = pytest.mark.skipif(not CHROMIUM.is_file(), reason="no /usr/bin/chromium (apt-get install chromium)")


def chromium(page: Path, *args: str, user: Path) -> subprocess.CompletedProcess:
    """Headless Chromium on a local file, offline: every host resolves nowhere and the proxy is a closed port."""
    flags = [
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=127.0.0.1:9",
        f"--user-data-dir={user}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    return subprocess.run(
        [str(CHROMIUM), *flags, *args, page.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )


def console_errors(stderr: str) -> list[str]:
    """What the page's console said (Chromium logs it as CONSOLE lines), and any refusal of its policy."""
    return [
        line
        for line in stderr.splitlines()
        if "CONSOLE" in line or "Refused to" in line or "Uncaught" in line or "ERR_" in line
    ]


@needs_chromium
@pytest.mark.slow
def test_chromium_renders_the_pages_offline_with_no_console_error(folders, tmp_path):
    rows = [
        (v, s, 2.0 + 0.03 * i + 0.01 * ((7 * s + 3 * i) % 5))
        for i, v in enumerate(["classic", HOSTILE])
        for s in range(3)
    ]
    frame = pd.DataFrame(rows, columns=["variant", "seed", "val_loss"])
    hostile = tmp_path / "hostile.html"
    modern_gpt.share(frame, html=hostile)
    folder = tmp_path / "ablate.html"
    modern_gpt.share(folders / "ablate", html=folder)
    said = modern_gpt.judge(frame)["verdict"][1]
    for path, verdict in ((folder, "better"), (hostile, said)):
        done = chromium(path, "--dump-dom", user=tmp_path / f"u-{path.stem}")
        assert done.returncode == 0, done.stderr[-2000:]
        dom = done.stdout
        assert '<table id="verdicts">' in dom and re.search(rf'class="[^"]*\b{verdict}\b[^"]*">{verdict}</td>', dom)
        assert "<script" not in dom.lower()  # no script element: a name is text, and no script ever ran
        assert console_errors(done.stderr) == [], console_errors(done.stderr)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;</td>" in chromium(hostile, "--dump-dom", user=tmp_path / "u").stdout
    shot = tmp_path / "shot.png"
    done = chromium(folder, f"--screenshot={shot}", "--window-size=1200,1600", user=tmp_path / "u-shot")
    assert done.returncode == 0 and shot.stat().st_size > 20_000, done.stderr[-2000:]
    assert console_errors(done.stderr) == []


@needs_chromium
@pytest.mark.slow
def test_chromium_sees_a_console_error_the_check_would_catch(tmp_path):
    """The negative control: a page that tries the network (its policy refuses it) does log to the console."""
    bad = tmp_path / "bad.html"
    page = modern_gpt.share(
        pd.DataFrame(
            [("a", 0, 1.0), ("a", 1, 1.1), ("b", 0, 1.2), ("b", 1, 1.0)], columns=["variant", "seed", "val_loss"]
        )
    ).html()
    bad.write_text(page.replace("</main>", '<img src="https://example.invalid/x.png"></main>'), encoding="utf-8")
    done = chromium(bad, "--dump-dom", user=tmp_path / "u")
    assert console_errors(done.stderr), done.stderr[-2000:]


LAYOUT = """<div id="layout"></div><script>
const t = document.getElementById("verdicts"), th = t.querySelectorAll("thead th");
const r = th[th.length - 1].getBoundingClientRect();
document.getElementById("layout").textContent = JSON.stringify(
  {right: r.right, width: innerWidth, scroll: document.documentElement.scrollWidth});
</script>"""


@needs_chromium
@pytest.mark.slow
def test_chromium_at_1400px_shows_the_tables_last_column(folders, tmp_path):
    """At a 1400 px wide window the verdict table's last header cell is inside the viewport, with no page scroll
    (issue 44 §9): a test copy of the page, its policy taken off, runs a script that writes the cell's box."""
    ladder = modern_gpt.scale(out=tmp_path / "scale", **LADDER)
    for name, source in (("ablate", folders / "ablate"), ("ladder", ladder)):
        page = modern_gpt.share(source).html()
        page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
        path = tmp_path / f"{name}.html"
        path.write_text(page.replace("</main>", f"</main>{LAYOUT}"), encoding="utf-8")
        done = chromium(path, "--dump-dom", "--window-size=1400,900", user=tmp_path / f"u-{name}")
        assert done.returncode == 0, done.stderr[-2000:]
        box = json.loads(html.unescape(re.search(r'<div id="layout">(.*?)</div>', done.stdout).group(1)))
        assert box["width"] == 1400, box
        assert 0 < box["right"] <= box["width"] and box["scroll"] <= box["width"], (name, box)


def test_a_judged_ladders_page_carries_the_csv_it_judged_as_its_own_text(run, tmp_path):
    """The header gives the file's sha256, so the page holds that file: pandas would blank a variant named NA and
    rewrite 3.90625e+10, and the page's own command would then refuse its CSV."""
    rng = np.random.default_rng(3)
    lines = ["variant,seed,val_loss,flops"]
    for variant, gain in (("NA", 0.0), ("swiglu", -0.03)):
        for seed in range(3):
            for flops in ("3.90625e+10", "6.25e+11", "1e+13"):
                loss = 2.0 + 4.0 * (float(flops) / 1e9) ** -0.3 + gain + 0.005 * rng.standard_normal()
                lines.append(f"{variant},{seed},{loss!r},{flops}")
    source = tmp_path / "ladder.csv"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run("judge", source, "--compute-col", "flops", "--html", tmp_path / "p.html")
    assert code == 0, err
    assert pre((tmp_path / "p.html").read_text(encoding="utf-8"), "runs-csv") == source.read_text(encoding="utf-8")
