"""A result as one page to share (`report DIR --html FILE`, `--markdown FILE`, `judge FILE --html PAGE`,
`modern_gpt.share`): the table with its footnotes, in the cells the terminal prints (render.py's), and what
ablation/share.py gathers: the header, the figures, the runs seed by seed and as CSV, and the claim test.

The HTML file is self-contained: its styles are inline, its figures data: URIs, and its Content-Security-Policy
allows nothing else (no script runs, nothing is fetched). The Markdown file is README-ready, with the runs' CSV
inside it. Each is one file at the path given (one already there is replaced only with --force). Every text that
comes from a file (names, footnotes, messages, the command) is escaped, never markup: a variant named
<script>alert(1)</script> is shown as those characters.
"""

from __future__ import annotations

import base64
import html
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..ablation.share import CSV_NAME, Claim, Facts, Grid
from ..core.errors import UserError
from ..core.files import advice, atomic_path, check_name, not_regular, temporary_beside


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    text: tuple[str, ...] = ("variant", "vs", "verdict", "trend", "")  # left-aligned columns, by header
    notes: list[str] = field(default_factory=list)  # a rung's own footnotes, under its table


@dataclass
class Page:
    """A page: its title, what it is of, the tables (the verdict table first), the lines printed under them (the
    duel's, power's), the footnotes, the one-line answer and the rest (ablation.share.Facts)."""

    title: str
    kind: str
    tables: list[Table]
    notes: list[str]
    facts: Facts
    lines: list[str] = field(default_factory=list)
    answer: str = ""  # the table in one line, under the title (the trackers' own line: trackers.records.answer)

    def html(self) -> str:
        return to_html(self)

    def markdown(self) -> str:
        return to_markdown(self)


# ---------------------------------------------------------------------------
# The tables, in the terminal's cells
# ---------------------------------------------------------------------------
def _plain(x) -> str:
    """A rich table's cell as the terminal shows it: its markup taken off (judge escapes a name's brackets)."""
    from rich.errors import MarkupError
    from rich.text import Text

    if isinstance(x, Text):
        return x.plain
    try:
        return Text.from_markup(str(x)).plain
    except MarkupError:
        return str(x)


def from_rich(table, notes=()) -> Table:
    """One of render.py's rich tables (the duel's, power's), cell for cell."""
    heads = [_plain(c.header) for c in table.columns]
    columns = [[_plain(x) for x in c.cells] for c in table.columns]
    return Table(_plain(table.title or ""), heads, [list(r) for r in zip(*columns, strict=True)], notes=list(notes))


def report_tables(rep) -> tuple[list[Table], list[str]]:
    """A folder's tables (ablation.report.Report) and the lines under them, as `modern-gpt report` prints them:
    power's figures for a power folder, else the verdict table (and a duel's own table and sentence)."""
    from ..ablation import report
    from . import render

    if rep.spec.plan == "power":
        info = report.power_info(rep.spec, rep.summary)
        return ([from_rich(render.power_table(info))] if info["mde"] else []), render.power_sentences(info)
    columns = render._columns(rep)
    rows = [[render.cell(row, f.name, f.metadata["fmt"]) for f in columns] for row in rep.summary]
    tables = [Table(report.title(rep), [f.metadata["header"] for f in columns], rows)]
    if rep.metrics is not None:  # --eval-data sets: one table per further metric, the terminal's cells
        titles = render.report_metric_titles(rep.metrics, rep.design)
        for title, (_, headers, cells) in zip(titles, render.metric_plain(rep.metrics, skip=1), strict=True):
            tables.append(Table(title, headers, cells))
    if rep.duel:
        return [*tables, from_rich(render.duel_table(rep.duel))], [render.duel_sentence(rep.duel)]
    return tables, []


def judge_table(design, s, rows: list[dict]) -> Table:
    from ..verdict.judge import title
    from . import render

    formats = render._judge_formats(rows)
    return Table(title(design, s), render._judge_headers(s.metric), [render._judge_cells(r, formats) for r in rows])


def ladder_table(rep) -> Table:
    from . import render

    return Table(render.ladder_title(rep), render.ladder_headers(rep), render.ladder_cells(rep))


# ---------------------------------------------------------------------------
# The pages
# ---------------------------------------------------------------------------
def summary_answer(summary) -> str:
    """A folder's table (its SummaryRows) in one line, as the trackers say it."""
    from ..trackers.records import answer, named, summary_cells

    return answer(named(summary_cells(summary)))


def judged_answer(rows: list[dict]) -> str:
    """judge's rows (its column names) in one line, as the trackers say a folder's."""
    from ..trackers.records import answer
    from ..verdict.judge import judge_columns

    names = {shown: name for name, shown in judge_columns()}
    return answer([{names.get(k, k): v for k, v in r.items()} | {"variant": r["variant"]} for r in rows])


def ladder_answer(rows) -> str:
    """The scale table in one line: the rows whose k is better or worse, with k, its CI and its trend."""
    parts = []
    for verdict in ("better", "worse"):
        found = [
            f"{r.variant} (k {r.k:.3g} [{r.k_low:.3g}, {r.k_high:.3g}], {r.trend})"
            for r in rows
            if r.verdict == verdict
        ]
        if found:
            parts.append(f"{verdict}: {', '.join(found)}")
    rest = sum(r.verdict not in ("better", "worse") for r in rows if r.reference)
    if not parts:
        return f"all {rest} rows inconclusive" if rest > 1 else "1 row, inconclusive" if rest else "no row is tested"
    return "; ".join(parts) + (f"; {rest} inconclusive" if rest else "")


def folder_page(result) -> Page:
    """The page of a results folder (api.Result) or a ladder's (api.LadderResult)."""
    from ..ablation import share

    if hasattr(result, "rungs"):
        tables = [ladder_table(result.table)]
        tables[0].notes = list(result.footnotes)  # under the scale table, before the rungs' tables
        for name, rung in zip(result.table.design.rungs, result.rungs, strict=True):
            mine, _ = report_tables(rung.table)
            for t in mine:
                t.title = f"Rung {name} ({Path(rung.folder).name}): {t.title}"
            if mine:
                mine[-1].notes = list(rung.footnotes)
            tables += mine
        answer = ladder_answer(result.table.rows)
        return Page(tables[0].title, "a ladder folder", tables, [], share.ladder_facts(result), answer=answer)
    tables, lines = report_tables(result.table)
    power = result.table.spec.plan == "power"
    title = f"power: {result.title}" if power else tables[0].title
    answer = (lines[0] if lines else "") if power else summary_answer(result.table.summary)
    return Page(title, "a results folder", tables, result.footnotes, share.folder_facts(result), lines, answer)


def judged_page(design, s, runs, rows: list[dict], notes: list[str], source: str, data: bytes | None) -> Page:
    """The page of runs judged from a file or a DataFrame: no figures, and no training header."""
    from ..ablation import share
    from . import render

    fmt = render._judge_formats(rows)["mean"]
    facts = share.judged_facts(design, s, runs, rows, source, data, fmt)
    table = judge_table(design, s, rows)
    kind = f"runs judged from {'a DataFrame' if data is None else 'a file'}"
    return Page(table.title, kind, [table], notes, facts, answer=judged_answer(rows))


def judged_ladder_page(
    design, rows, notes: list[str], source: str, data: bytes | None, csv: str, flags: str, size_col: str | None = None
) -> Page:
    """The page of a ladder of runs judged from a file (judge --compute-col): the scale table, the file as CSV,
    and judge's command with the flags given."""
    from types import SimpleNamespace

    from ..ablation import share

    table = ladder_table(SimpleNamespace(design=design, rows=rows, notes=notes, size_col=size_col))
    table.notes = list(notes)  # under the scale table
    header = share.judged_header(source, data, max(0, csv.count("\n") - 1), len(design.rows))
    facts = Facts(header, csv, share.ladder_claim(design, flags))
    return Page(table.title, "a ladder of runs judged from a file", [table], [], facts, answer=ladder_answer(rows))


# ---------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
MARKED = {"better", "worse", "same", "inconclusive", "grows", "shrinks", "steady"}
CSS = """
:root { color-scheme: light dark; --line: #d0d7de; --soft: #f6f8fa; --dim: #59636e; }
@media (prefers-color-scheme: dark) { :root { --line: #3d444d; --soft: #151b23; --dim: #9198a1; } }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  margin: 0; }
main { margin: 0 auto; padding: 24px; width: max-content; max-width: calc(100vw - 48px); }
p, ul, figure, details { max-width: 1100px; } .answer { font-size: 1.1em; font-weight: 600; margin: 8px 0 16px; }
h1 { font-size: 1.45em; margin: 0 0 4px; } h2 { font-size: 1.15em; margin: 32px 0 8px; }
.kind, .dim, figcaption { color: var(--dim); }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: var(--soft); } .l { text-align: left; }
caption { text-align: left; font-weight: 600; padding: 6px 0; caption-side: top; white-space: normal; }
.scroll { overflow-x: auto; }
.facts th { text-align: left; vertical-align: top; } .facts td { text-align: left; white-space: normal; }
.better, .grows { color: #1a7f37; font-weight: 600; } .worse, .shrinks { color: #cf222e; font-weight: 600; }
.same, .steady { color: #0969da; font-weight: 600; } .inconclusive { color: var(--dim); }
pre { background: var(--soft); border: 1px solid var(--line); padding: 10px; overflow-x: auto; font-size: 13px; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; }
img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figure { margin: 16px 0; } li { margin: 3px 0; }
"""


def e(text) -> str:
    """Text as HTML: every <, >, &, " and ' escaped."""
    return html.escape(str(text), quote=True)


def _html_table(t: Table | Grid, css: str = "") -> str:
    left = [h in t.text for h in t.headers]
    head = "".join(
        f'<th class="l">{e(h)}</th>' if lf else f"<th>{e(h)}</th>" for h, lf in zip(t.headers, left, strict=True)
    )
    body = []
    for row in t.rows:
        cells = []
        for c, lf in zip(row, left, strict=False):
            cls = " ".join(x for x in ("l" if lf else "", c if c in MARKED else "") if x)
            cells.append(f'<td class="{cls}">{e(c)}</td>' if cls else f"<td>{e(c)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    out = f'<div class="scroll"><table{css}><caption>{e(t.title)}</caption><thead><tr>{head}</tr></thead>'
    out += f"<tbody>{''.join(body)}</tbody></table></div>"
    return out + (_html_list(t.notes) if t.notes else "")


def _html_list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{e(n)}</li>" for n in items) + "</ul>"


def _data_uri(kind: str, data: bytes) -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def _html_claim(claim: Claim, csv_name: str) -> str:
    out = ["<h2>Re-check the claim</h2>"]
    if claim.code:
        out.append(
            f"<p>Save the runs below as <code>{e(csv_name)}</code> and run this (Python, pandas and SciPy): "
            "it prints each row's paired t-test against its reference, the table's <code>p</code>.</p>"
        )
        out.append(f'<pre id="claim"><code>{e(claim.code)}</code></pre>')
    if claim.command:
        out.append(f"<p>{e(claim.says)} With modern-gpt installed:</p><pre><code>{e(claim.command)}</code></pre>")
    else:
        out.append(f"<p>{e(claim.says)}</p>")
    return "".join(out)


def _html_runs(facts: Facts) -> str:
    n = max(0, facts.csv.count("\n") - 1)
    link = _data_uri("text/csv;charset=utf-8", facts.csv.encode("utf-8"))
    return (
        f'<h2>The runs</h2><p><a download="{CSV_NAME}" href="{link}">Download {CSV_NAME}</a> '
        f'<span class="dim">({n} runs, {len(facts.csv.encode("utf-8")):,} bytes, inside this page)</span></p>'
        f'<details><summary>{CSV_NAME} as text</summary><pre id="runs-csv">{e(facts.csv)}</pre></details>'
    )


def to_html(page: Page) -> str:
    f = page.facts
    facts = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in f.header)
    parts = [
        f"<h1>{e(page.title)}</h1>",
        f'<p class="answer" id="answer">{e(page.answer)}</p>' if page.answer else "",
        *(_html_table(t, ' id="verdicts"' if i == 0 else "") for i, t in enumerate(page.tables)),
        *(f"<p>{e(line)}</p>" for line in page.lines),
        _html_list(page.notes) if page.notes else "",
        "<h2>Where the numbers come from</h2>",
        f'<p class="kind">The table of {e(page.kind)}, shared by modern-gpt {e(__version__)}.</p>',
        f'<table class="facts">{facts}</table>',
    ]
    if f.figures or f.missing:
        parts.append("<h2>Figures</h2>")
        for fig in f.figures:
            uri = _data_uri("image/png", fig.data)
            parts.append(
                f'<figure><img src="{uri}" alt="{e(fig.name)}"><figcaption>{e(fig.caption)}</figcaption></figure>'
            )
        parts += [f'<p class="dim">{e(m)}</p>' for m in f.missing]
    if f.seeds:
        parts += ["<h2>Seed by seed</h2>", *(_html_table(g) for g in f.seeds)]
    parts += [_html_claim(f.claim, CSV_NAME), _html_runs(f)]
    parts.append(
        '<footer class="dim"><p>One file: its styles are inline and its figures and runs inside it; it runs no '
        "script and loads nothing from the network.</p></footer>"
    )
    body = "\n".join(p for p in parts if p)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="modern-gpt {e(__version__)}">\n'
        f"<title>{e(page.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------
_MD = re.compile(r"([\\`*\[\]|])")


def md(text) -> str:
    """Text as Markdown that renders as those characters: HTML's <, > and & as entities, Markdown's marks and a
    table's | escaped, a line break a space (it would end a table row or a list item)."""
    text = html.escape(" ".join(str(text).splitlines()), quote=False)
    return _MD.sub(r"\\\1", text)


def _md_table(t: Table | Grid) -> list[str]:
    lines = [f"**{md(t.title)}**", "", "| " + " | ".join(md(h) for h in t.headers) + " |"]
    lines.append("|" + "|".join(" --- " for _ in t.headers) + "|")
    lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in t.rows]
    return [*lines, "", *(f"- {md(n)}" for n in t.notes), *([""] if t.notes else [])]


def _fence(text: str, lang: str = "") -> list[str]:
    """A fenced code block longer than any run of backticks inside it, so that nothing in it ends it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", text.rstrip("\n"), fence]


def to_markdown(page: Page) -> str:
    """The page as one Markdown file: the runs' CSV inside it, the figures named (the HTML page holds them)."""
    f = page.facts
    lines = [f"# {md(page.title)}", "", *([f"**{md(page.answer)}**", ""] if page.answer else [])]
    for t in page.tables:
        lines += _md_table(t)
    lines += [*(md(line) + "\n" for line in page.lines), *(f"- {md(n)}" for n in page.notes), ""]
    kind = f"The table of {md(page.kind)}, shared by modern-gpt {md(__version__)}."
    lines += ["## Where the numbers come from", "", kind, ""]
    lines += ["| | |", "| --- | --- |", *(f"| {md(k)} | {md(v)} |" for k, v in f.header), ""]
    if f.figures:
        names = ", ".join(f"`{fig.name}`" for fig in f.figures)  # the folder's fixed names
        lines += [f"Figures: {names} in the results folder (the HTML page, --html, holds them inline).", ""]
    lines += [md(m) + "\n" for m in f.missing]
    if f.seeds:
        lines += ["## Seed by seed", ""]
        for g in f.seeds:
            lines += _md_table(g)
    lines += ["## Re-check the claim", ""]
    if f.claim.code:
        lines += [
            f"Save the runs below as `{CSV_NAME}` and run this (Python, pandas and SciPy): it prints each row's "
            "paired t-test against its reference, the table's `p`:",
            "",
            *_fence(f.claim.code, "python"),
            "",
        ]
    lines += [md(f.claim.says), ""] + ([*_fence(f.claim.command, "sh"), ""] if f.claim.command else [])
    lines += ["<details><summary>" + CSV_NAME + "</summary>", "", *_fence(f.csv, "csv"), "", "</details>"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Writing: checked first, then atomic
# ---------------------------------------------------------------------------
EXAMPLE = {"--html": "result.html", "--markdown": "RESULT.md"}


def cannot(flag: str, path: Path, err: OSError) -> str:
    """A page that cannot be written, in one sentence whose advice fits the error (core.files.advice)."""
    folder = path.parent
    said = advice(err, str(folder), f"choose another {flag}")
    return f"{flag} {path}: cannot write in {folder} ({err.strerror or err}); {said}."


def _probe(path: Path, flag: str) -> None:
    """A file of path's name can be created in the nearest folder above it that exists, which put() makes the
    rest of (not so under a file, in /proc, /sys, a read-only or locked folder, or for a name too long)."""
    at = path.absolute()
    while not at.parent.exists() and at.parent != at:
        at = at.parent
    if not at.parent.is_dir():
        raise UserError(f"{flag} {path}: {at.parent} is not a folder; choose another {flag}.")
    tmp = temporary_beside(at.parent / path.name)
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        os.unlink(tmp)
    except OSError as err:
        raise UserError(cannot(flag, path, err)) from None


def put(path: Path, data: bytes, flag: str) -> None:
    """data written to a temporary file beside path, then renamed onto it (core.files.atomic_path): a reader
    never sees half a page; the folders above it are made as --out's are; a failure is cannot()'s sentence."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(cannot(flag, path, err)) from None
    with atomic_path(path, failed=lambda err: cannot(flag, path, err)) as tmp:
        tmp.write_bytes(data)


def check_output(path, flag: str, inputs=(), force: bool = False) -> Path:
    """A file to write a page to: one path, not a folder, a pipe or a device, none of the files read (inputs),
    and a file already there only with --force, as output folders are. Each problem is one sentence."""
    if str(path) in ("", "-"):
        what = "an empty path" if str(path) == "" else "-, but a page is written to a file (the table goes to stdout)"
        raise UserError(f"{flag} is {what}; give the file to write, e.g. {flag} {EXAMPLE[flag]}.")
    path = Path(path)
    check_name(path, flag)
    if path.is_dir():
        raise UserError(f"{flag} {path} is a folder; give the file to write, e.g. {flag} {path / EXAMPLE[flag]}.")
    _probe(path, flag)
    what = not_regular(path)
    if what is not None:
        raise UserError(f"{flag} {path} is {what}, not a file to write; choose another {flag}.")
    if any(_same(path, Path(given)) for given in inputs):
        raise UserError(f"{flag} {path} is the file this command reads; choose another {flag}.")
    if os.path.lexists(path) and not force:
        raise UserError(f"{flag} {path} already exists; choose another {flag}, or add --force to replace it.")
    return path


def check_pages(html_path=None, markdown_path=None, inputs=(), force: bool = False):
    """--html and --markdown checked together (check_output, and never one file for both): (html, markdown)."""
    html_path = None if html_path is None else check_output(html_path, "--html", inputs, force)
    markdown_path = None if markdown_path is None else check_output(markdown_path, "--markdown", inputs, force)
    if html_path is not None and markdown_path is not None:
        if html_path.absolute() == markdown_path.absolute() or _same(html_path, markdown_path):
            raise UserError(f"--html {html_path} and --markdown {markdown_path} are one file; give each its own.")
    return html_path, markdown_path


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def write(page: Page, html_path=None, markdown_path=None, inputs=(), force: bool = False) -> list[Path]:
    """Write the page as HTML and/or Markdown, each one file; returns what was written."""
    html_path, markdown_path = check_pages(html_path, markdown_path, inputs, force)
    written = []
    if html_path is not None:
        put(html_path, page.html().encode("utf-8"), "--html")
        written.append(html_path)
    if markdown_path is not None:
        put(markdown_path, page.markdown().encode("utf-8"), "--markdown")
        written.append(markdown_path)
    return written


# ---------------------------------------------------------------------------
# modern_gpt.share: the Python API
# ---------------------------------------------------------------------------
JUDGE_KEYS = ("variant_col", "seed_col", "metric", "higher_is_better", "order", "reference", "placebo", "alpha")
LADDER_KEYS = ("compute_col", "size_col", "rung_col", "trend_margin", "target_compute")
FOLDER_FILES = (
    "meta.json",
    "ladder.json",
    "runs.csv",
    "curves.csv",
    "summary.csv",
    "curves.png",
    "lr.png",
    "scale.png",
)


def share(
    source, html=None, markdown=None, *, force: bool = False, at_lr: float | None = None, plugins=(), **judge
) -> Page:
    """A result as one page to share (docs/sharing.md): source is a results folder (a ladder's too), a Result or
    LadderResult, or runs to judge (a .csv, .jsonl or .parquet file, or a DataFrame) with modern_gpt.judge's
    keywords. html, markdown: the files to write, each one file (force: replace one that exists). Returns the
    Page: page.html() and page.markdown() are its text."""
    import pandas as pd

    from .. import api

    unknown = sorted(set(judge) - {*JUDGE_KEYS, "margin", *LADDER_KEYS})
    if unknown:
        raise UserError(f"share has no option {unknown[0]!r}; its options are judge's: {', '.join(JUDGE_KEYS)}, ...")
    _check_source(source, api)
    check_pages(html, markdown, force=force)
    if isinstance(source, api.Result | api.LadderResult):
        page, inputs = folder_page(source), _folder_files(source.folder)
    elif isinstance(source, pd.DataFrame) or not Path(source).is_dir():
        if at_lr is not None:
            raise UserError("at_lr goes with a results folder trained at several learning rates, not runs to judge.")
        page, inputs = judged(source, judge), ([] if isinstance(source, pd.DataFrame) else [source])
    else:
        if judge:
            raise UserError(
                f"{next(iter(judge))}= goes with runs to judge (a file or a DataFrame), not a results folder."
            )
        page, inputs = folder_page(api.report(source, at_lr=at_lr, plugins=plugins)), _folder_files(source)
    write(page, html, markdown, inputs, force)
    return page


def _check_source(source, api) -> None:
    """share's source is a Result, a DataFrame, or a path that exists: anything else is one sentence."""
    import pandas as pd

    if isinstance(source, api.Result | api.LadderResult | pd.DataFrame):
        return
    what = "share takes a results folder, a Result or LadderResult, or runs to judge (a .csv, .jsonl or .parquet file"
    if not isinstance(source, str | os.PathLike):
        raise UserError(f"{what}, or a DataFrame), not a {type(source).__name__}.")
    if not Path(source).exists():
        raise UserError(f"{source} does not exist; {what}, or a DataFrame).")


def _folder_files(folder) -> list[Path]:
    """The files of a results folder that a page must never be written over."""
    return [Path(folder) / name for name in FOLDER_FILES]


def judged(source, keywords: dict) -> Page:
    """The page of runs judged from a file or a DataFrame, with modern_gpt.judge's keywords."""
    import pandas as pd

    from ..verdict.judge import api_settings, judge, judge_file_runs, read_runs
    from ..verdict.ladder_judge import LadderSettings, judge_ladder
    from ..verdict.reading import from_frame

    s = api_settings(**{k: keywords[k] for k in (*JUDGE_KEYS, "margin") if k in keywords})
    frame = isinstance(source, pd.DataFrame)
    ladder = {k: keywords.get(k) for k in LADDER_KEYS}
    if any(v is not None for v in ladder.values()):
        if s.margin is not None:
            raise UserError("margin is in the metric's units for one size; for a ladder give trend_margin.")
        ls = LadderSettings(*ladder.values())
        design, rows, notes = judge_ladder(source, s, ls)
        return judged_ladder_page(design, rows, notes, *_file_facts(source), judge_flags(s, ls), ls.size_col)
    if frame:
        design, runs, first = read_runs(from_frame(source), s, api=True)
        rows, notes = judge(design, s, runs, first=first)
    else:
        design, runs, rows, notes = judge_file_runs(source, s)
    name, data, _ = _file_facts(source)
    return judged_page(design, s, runs, rows, notes, name, data)


def _file_facts(source) -> tuple[str, bytes | None, str]:
    """What a judged page says of its input: its name, its bytes (for their sha256), and its runs as CSV."""
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        return "a DataFrame", None, source.to_csv(index=False)
    path = Path(source)
    data = path.read_bytes()  # judge has read it: a regular file
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return str(path), data, data.decode("utf-8", errors="replace")
    frame = pd.read_parquet(path) if suffix == ".parquet" else pd.read_json(path, lines=True)
    return str(path), data, frame.to_csv(index=False)


def judge_flags(s, ls) -> str:
    """judge's flags that say these settings again (those not at their defaults), as a shell reads them."""
    import shlex

    from ..verdict.design import ALPHA

    given = [
        ("--variant-col", s.variant_col, "variant"),
        ("--seed-col", s.seed_col, "seed"),
        ("--metric", s.metric, "val_loss"),
        ("--order", ",".join(s.order) if s.order else None, None),
        ("--reference", s.reference, None),
        ("--placebo", s.placebo, None),
        ("--alpha", f"{s.alpha:g}", f"{ALPHA:g}"),
        ("--compute-col", ls.compute_col, None),
        ("--size-col", ls.size_col, None),
        ("--rung-col", ls.rung_col, None),
        ("--trend-margin", None if ls.trend_margin is None else f"{ls.trend_margin:g}", None),
        ("--target-compute", None if ls.target is None else f"{ls.target:g}", None),
    ]
    flags = "".join(f" {flag} {shlex.quote(str(v))}" for flag, v, default in given if v is not None and v != default)
    return flags + (" --higher-is-better" if s.higher_is_better else "")
