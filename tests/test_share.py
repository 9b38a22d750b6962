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

import pandas as pd
import pytest

import modern_gpt
from modern_gpt.core.errors import UserError

from .clihelp import run_main, tiny, user_error

GOLDEN = Path(__file__).parent / "golden" / "folders"
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
    first = tables(page)[1]
    assert first["id"] == "verdicts"
    if kind == "power":
        info = __import__("modern_gpt.ablation.report", fromlist=["x"]).power_info(
            result.table.spec, result.table.summary
        )
        for line in __import__("modern_gpt.cli.render", fromlist=["x"]).power_sentences(info):
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
    command = shared.facts.claim.command.split()
    assert command[:2] == ["modern-gpt", "judge"]
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, monkeypatch, *command[1:], "--format", "csv")
    assert code == 0, err
    judged = pd.read_csv(io.StringIO(out))
    assert list(judged["verdict"].fillna("")) == [r.verdict for r in result.table.summary]
    assert close(list(judged["p_adj"]), [r.p_adj for r in result.table.summary])


def test_a_seeds_auto_page_names_report_for_its_boundarys_p_adj(folders):
    claim = modern_gpt.share(folders / "auto").facts.claim
    assert claim.command == f"modern-gpt report {folders / 'auto'}" and "boundary" in claim.says


def test_the_figures_are_inline_png_data_and_markdown_puts_them_beside(folders, tmp_path, capsys, monkeypatch):
    folder = Path(shutil.copytree(folders / "lrs", tmp_path / "lrs"))
    code, _, err = run_main(capsys, monkeypatch, "report", folder, "--plot")
    assert code == 0, err
    out = tmp_path / "out"
    out.mkdir()
    args = ("report", folder, "--html", out / "page.html", "--markdown", out / "RESULT.md")
    code, table, err = run_main(capsys, monkeypatch, *args)
    assert code == 0 and "wrote" in err and "custom ablation" in table, err  # the table is printed as always
    page = (out / "page.html").read_text(encoding="utf-8")
    images = re.findall(r'<img src="data:image/png;base64,([^"]*)"', page)
    assert [base64.b64decode(x) for x in images] == [(folder / n).read_bytes() for n in ("curves.png", "lr.png")]
    self_contained(page)
    text = (out / "RESULT.md").read_text(encoding="utf-8")
    assert "](RESULT-curves.png)" in text and "](RESULT-lr.png)" in text
    assert (out / "RESULT-curves.png").read_bytes() == (folder / "curves.png").read_bytes()
    assert (out / "RESULT-lr.png").read_bytes() == (folder / "lr.png").read_bytes()
    runs = pd.read_csv(out / "RESULT-runs.csv")
    pd.testing.assert_frame_equal(runs, pd.read_csv(io.StringIO(modern_gpt.report(folder).runs.to_csv(index=False))))
    assert 'pd.read_csv("RESULT-runs.csv")' in text and "```python" in text and "<details>" in text
    code, shown, _ = run_main(capsys, monkeypatch, "report", folder, "--format", "markdown")
    for row in markdown_rows(shown):  # the table report prints, cell for cell (its brackets escaped)
        assert "| " + " | ".join(c.replace("[", "\\[").replace("]", "\\]") for c in row) + " |" in text
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


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
        assert f"{meta['git_commit']} ({said})" in dict(modern_gpt.share(folder).facts.header)["trained by"]


def test_the_header_says_commit_versions_machine_wall_time_and_compute(folders):
    header = dict(modern_gpt.share(folders / "ablate").facts.header)
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
    assert tables(page)[1]["rows"][1:] == markdown_rows(shown)
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
    args = command.facts.claim.command.split()[1:]
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
    assert tables(text)[1]["rows"][2][0] == HOSTILE  # the cell's text is the name, character for character
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
    source = (Path(__file__).parent.parent / "examples" / "components" / "relu2.py").read_text()
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
        "missing folder": (tmp_path / "nowhere" / "p.html", "does not exist; create the folder"),
        "under a file": (tmp_path / "afile" / "p.html", "is not a folder"),
    }


@pytest.mark.parametrize("case", ["folder", "fifo", "missing folder", "under a file"])
@pytest.mark.parametrize("flag", ["--html", "--markdown"])
def test_a_bad_output_path_is_one_sentence(case, flag, folders, run, tmp_path):
    path, says = _bad_paths(tmp_path)[case]
    for command in (["report", folders / "ablate"], ["judge", folders / "ablate" / "runs.csv"]):
        err = user_error(run, *command, flag, path)
        assert says in err and flag in err, err
    assert not (tmp_path / "nowhere").exists() and (tmp_path / "afile").read_text() == "x"


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
    assert "is the file this command reads" in err and source.read_bytes() == before
    copy = Path(shutil.copytree(folders / "ablate", tmp_path / "a"))
    err = user_error(run, "report", copy, "--html", copy / "meta.json")
    assert "is the file this command reads" in err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_page_never_goes_over_or_into_a_results_folders_own_files(folders, run, tmp_path):
    copy = Path(shutil.copytree(folders / "ablate", tmp_path / "a"))
    (copy / "tensorboard").mkdir()
    (copy / "tensorboard" / "events.out").write_bytes(b"events")
    (copy / "notes.txt").write_text("mine")
    before = _snapshot(copy)
    run_file = sorted((copy / "runs").iterdir())[0]
    cases = {  # each page path, and what its sentence says
        run_file: "inside runs/ of the results folder",
        copy / "runs" / "row99-seed0.json": "inside runs/ of the results folder",  # a new run file: read as a run
        copy / "tensorboard" / "events.out": "inside tensorboard/ of the results folder",
        copy / "curves.png": "own curves.png",  # the folder's name, though report --plot has not drawn it
        copy / "notes.txt": "no page that modern-gpt wrote",
    }
    for path, says in cases.items():
        for flag in ("--html", "--markdown"):
            for command in (["report", copy], ["judge", copy / "runs.csv"]):
                err = user_error(run, *command, flag, path)
                assert says in err and flag in err, err
        with pytest.raises(UserError, match=re.escape(says)):
            modern_gpt.share(copy, html=path)
    link = tmp_path / "link"
    link.symlink_to(copy / "runs", target_is_directory=True)
    assert "inside runs/" in user_error(run, "report", copy, "--html", link / run_file.name)
    err = user_error(run, "report", copy, "--markdown", copy / "runs" / "p.md")
    assert "inside runs/" in err
    assert _snapshot(copy) == before  # nothing of the folder replaced, nothing new in it
    for _ in range(2):  # a new page at its top, then over that page of ours
        assert run(*["report", copy, "--html", copy / "page.html", "--markdown", copy / "RESULT.md"])[0] == 0
    assert {"page.html", "RESULT.md", "RESULT-runs.csv"} <= {p.name for p in copy.iterdir()}
    assert all(_snapshot(copy)[name] == data for name, data in before.items())


def test_the_markdown_page_never_replaces_a_file_of_yours_beside_it(folders, run, tmp_path):
    source = folders / "ablate" / "runs.csv"
    out = tmp_path / "share"
    out.mkdir()
    (out / "y-runs.csv").write_text("my precious\n")
    for page in ("y.md", "y"):
        err = user_error(run, "judge", source, "--markdown", out / page)
        assert f"would write {out / 'y-runs.csv'} beside it" in err and "not written by modern-gpt" in err, err
    assert (out / "y-runs.csv").read_text() == "my precious\n" and not (out / "y.md").exists()
    assert run("judge", source, "--markdown", out / "z.md")[0] == 0
    text = (out / "z.md").read_text(encoding="utf-8")
    assert text.rstrip().splitlines()[-1].startswith("<!-- modern-gpt page: the files beside it, by sha256: ")
    assert run("judge", source, "--markdown", out / "z.md")[0] == 0  # its own files, as it wrote them
    (out / "z-runs.csv").write_text("edited since\n")
    assert "or changed since" in user_error(run, "judge", source, "--markdown", out / "z.md")
    assert (out / "z-runs.csv").read_text() == "edited since\n"
    (out / "z-runs.csv").unlink()
    (out / "z.md").write_text("my notes\n")  # a page path given is written over, as --html's is
    assert run("judge", source, "--markdown", out / "z.md")[0] == 0 and (out / "z.md").read_text() != "my notes\n"
    folder = Path(shutil.copytree(folders / "lrs", tmp_path / "lrs"))  # a figure's file, known once it is read
    assert run("report", folder, "--plot")[0] == 0
    (out / "R-lr.png").write_bytes(b"my picture")
    err = user_error(run, "report", folder, "--markdown", out / "R.md")
    assert f"would write {out / 'R-lr.png'} beside it" in err, err
    assert (out / "R-lr.png").read_bytes() == b"my picture" and not (out / "R.md").exists()
    assert not (out / "R-curves.png").exists() and not (out / "R-runs.csv").exists()  # checked before any write
    with pytest.raises(UserError, match="not written by modern-gpt"):
        modern_gpt.share(folder, markdown=out / "R.md")


def test_html_and_markdown_never_name_one_file(folders, run, tmp_path):
    source = folders / "ablate" / "runs.csv"
    for command in (["report", folders / "ablate"], ["judge", source]):
        err = user_error(run, *command, "--html", tmp_path / "p", "--markdown", tmp_path / "p")
        assert "are one file" in err, err
        err = user_error(run, *command, "--html", tmp_path / "p-runs.csv", "--markdown", tmp_path / "p.md")
        assert f"would write {tmp_path / 'p-runs.csv'} beside it, the file --html names" in err, err
    (tmp_path / "p").write_text("mine")
    os.link(tmp_path / "p", tmp_path / "q")
    assert "are one file" in user_error(run, "judge", source, "--html", tmp_path / "p", "--markdown", tmp_path / "q")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p", "q"] and (tmp_path / "p").read_text() == "mine"


def test_the_messages_name_the_path_given_and_fit_the_error(run, tmp_path):
    source = tmp_path / "x-runs.csv"
    shutil.copy(GOLDEN / "ablate" / "runs.csv", source)
    err = user_error(run, "judge", source, "--markdown", tmp_path / "x.md")
    assert f"--markdown {tmp_path / 'x.md'} would write {source} beside it, the file this command reads" in err
    for flag in ("--html", "--markdown"):
        err = user_error(run, "judge", source, flag, "")
        assert f"{flag} is an empty path" in err and "is a folder" not in err, err
        with pytest.raises(UserError, match=f"{flag} is an empty path"):
            modern_gpt.share(source, **{flag[2:]: ""})
    if Path("/proc/version").is_file():
        err = user_error(run, "judge", source, "--html", "/proc/version")
        assert "cannot write in /proc" in err and "cannot hold new files" in err and "free some space" not in err
    import errno

    from modern_gpt.cli.share import cannot

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
    modern_gpt.share(folders / "ablate", html=path)
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
    assert tables(page)[1]["rows"][1:] == markdown_rows(shown)
    images = re.findall(r'<img src="data:image/png;base64,([^"]*)"', page)
    assert base64.b64decode(images[0]) == (ladder.folder / "scale.png").read_bytes() and len(images) == 1 + 3
    command = modern_gpt.share(ladder).facts.claim.command.split()
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
    assert tables(judged)[1]["rows"][1:] == tables(page)[1]["rows"][1:]  # the same scale table, from the file


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
