"""A result as one page to share: `report DIR --html FILE` / `--markdown FILE`, `judge FILE --html PAGE`,
`modern_gpt.share`. It holds the table in render.py's cells with its footnotes, and where the numbers come from.
Then the figures, the runs seed by seed and as CSV, and the claim test a reader runs on that CSV. Nothing here
computes a statistic. The HTML is one file. Its Content-Security-Policy allows only inline styles and data:
figures. Every text from a file is escaped: a variant named <script> is those characters."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import html
import math
import os
import re
import shlex
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import SimpleNamespace

from .. import __version__
from ..core.errors import UserError
from ..core.files import advice, atomic_path, check_name, git_state, not_regular
from . import render
from .progress import duration

CSV_NAME = "runs.csv"  # the name the page gives the runs, which the claim test reads
VIEW_NAME = "table-runs.csv"  # over a learning-rate grid: the runs the table read, which the claim test writes


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # under the table


@dataclass
class Claim:
    code: str  # Python that prints each row's p from the CSV ("" for a ladder: a jackknife, not SciPy)
    command: str  # what prints p_adj and the verdicts
    says: str  # why that command


@dataclass
class Page:
    title: str
    tables: list[Table]  # the verdict table first
    notes: list[str]  # the footnotes
    header: list[tuple[str, str]]  # where the numbers come from
    csv: str  # the runs
    claim: Claim
    answer: str  # the table in one line, as the trackers say it
    lines: list[str] = field(default_factory=list)  # the sentences under the tables (power's, a duel's)
    seeds: list[Table] = field(default_factory=list)
    figures: list[tuple[str, bytes]] = field(default_factory=list)  # (its name in the folder, the PNG file)
    missing: list[str] = field(default_factory=list)  # figure files left out, each with why


# The tables in render.py's cells, and the answer in one line
def folder_tables(rep) -> tuple[list[Table], list[str]]:
    """A folder's tables (ablation.report.Report) and the lines under them, as `modern-gpt report` prints them."""
    from ..ablation import report

    if rep.spec.plan == "power":
        info = report.power_info(rep.spec, rep.summary)
        return ([Table(*render.power_cells(info))] if info["mde"] else []), render.power_sentences(info)
    tables = [Table(report.title(rep), *render.folder_cells(rep))]
    if rep.metrics is not None:  # --eval-data sets: a table per further metric
        titles = render.report_metric_titles(rep.metrics, rep.design)
        tables += [Table(t, h, c) for t, (_, h, c) in zip(titles, render.metric_plain(rep.metrics, 1), strict=True)]
    if rep.duel:
        return [*tables, Table(*render.duel_cells(rep.duel))], [render.duel_sentence(rep.duel)]
    return tables, []


def ladder_table(rep) -> Table:
    return Table(render.ladder_title(rep), render.ladder_headers(rep), render.ladder_cells(rep), list(rep.notes))


def ladder_answer(rows) -> str:
    """The scale table in one line (records.answer): the rows whose k is better or worse, with k, CI and trend."""
    from ..trackers.records import answer

    def said(r: dict) -> str:
        return f"k {r['k']:.3g} [{r['k_low']:.3g}, {r['k_high']:.3g}], {r['trend']}"

    return answer([vars(r) for r in rows], ("better", "worse"), said)


# The pages: a results folder's, a ladder's, and runs judged from a file or a DataFrame
def folder_page(result) -> Page:
    """The page of a results folder (session.Result) or of a ladder (session.LadderResult)."""
    from ..ablation.results import ResultsDir
    from ..trackers.records import answer, summary_cells

    if hasattr(result, "rungs"):
        return _ladder_page(result)
    rep, folder = result.table, Path(result.folder)
    (tables, lines), rows, meta = folder_tables(rep), rep.design.rows, ResultsDir(folder).read_meta()
    header, csv = folder_header([meta], result.runs, components(rows, meta)), result.runs.to_csv(index=False)
    power = rep.spec.plan == "power"
    said = (lines[0] if lines else "") if power else answer(summary_cells(rep.summary))  # as the trackers
    title = f"power: {result.title}" if power else tables[0].title
    page = Page(title, tables, result.footnotes, header, csv, folder_claim(rep, folder), said)
    metric = "val loss" + (" (the test half)" if rep.design.sweep is not None else "")
    page.seeds = seed_grids([r.name for r in rows], [r.reference for r in rows], rep.runs, ".4f", metric)
    page.lines, (page.figures, page.missing) = lines, figures(folder, ["curves.png", "lr.png"])
    return page


def _ladder_page(result) -> Page:
    """The scale table with the ladder's footnotes, each rung's tables, scale.png and the rungs' curves.png."""
    import pandas as pd

    from ..ablation.results import ResultsDir

    rep, tables = result.table, [ladder_table(result.table)]
    tables[0].notes = list(result.footnotes)  # the ladder's, under the scale table
    for name, rung in zip(rep.design.rungs, result.rungs, strict=True):
        mine = folder_tables(rung.table)[0]
        for i, t in enumerate(mine):  # the rung's footnotes under its last table
            notes = list(rung.footnotes) if i == len(mine) - 1 else []
            tables.append(Table(f"Rung {name} ({Path(rung.folder).name}): {t.title}", t.headers, t.rows, notes))
    metas, every = [ResultsDir(r.folder).read_meta() for r in result.rungs], pd.concat([r.runs for r in result.rungs])
    said, command = components(rep.rungs[-1].design.rows, metas[-1]), _text(getattr(rep.ladder, "command", None))
    header, csv = folder_header(metas, every, said, command), rep.runs.to_csv(index=False)
    page = Page(tables[0].title, tables, [], header, csv, ladder_claim(rep.design), ladder_answer(rep.rows))
    rows, rungs, runs = rep.design.rows, rep.design.rungs, rep.runs.copy()
    runs["row"] = runs["rung"] * len(rows) + runs["row"]  # a grid row per (rung, row)
    labels = [f"{r.name} at {rung}" for rung in rungs for r in rows]
    refs = [None if r.reference is None else i * len(rows) + r.reference for i in range(len(rungs)) for r in rows]
    page.seeds = seed_grids(labels, refs, runs, ".4f", "val loss")
    names = ["scale.png", *(f"rung-{i}/curves.png" for i in range(len(rungs)))]
    page.figures, page.missing = figures(Path(result.folder), names)
    return page


def judged_page(design, s, runs, rows: list[dict], notes: list[str], source) -> Page:
    """Runs judged from a file or a DataFrame (source) with JudgeSettings s: judge's table, and the runs as a CSV."""
    from ..trackers.records import answer
    from ..verdict.judge import judge_columns, title

    headers, cells, formats = render.judge_cells(s.metric, rows)
    table = Table(title(design, s), headers, cells)
    frame, metric = judged_runs(design, s, runs)
    names, refs = [r.name for r in design.rows], [r.reference for r in design.rows]
    tests = [(lit(names[b]), lit(names[r]), _says(**rows[b])) for b, r in enumerate(refs) if r is not None]
    flags = f" --metric {shlex.quote(metric)}" + (" --higher-is-better" if s.higher_is_better else "")
    command = f"modern-gpt judge {CSV_NAME}{flags}{_flags(design.alpha, design.margin)}"
    code, says = claim_code("variant", metric, tests, design.margin), f"{_adjusts(design.margin)}; {FROM_CSV}"
    claim = Claim(code, command, says)
    shown = {shown: name for name, shown in judge_columns()}  # judge's column names, as a folder's
    said = answer([{shown.get(k, k): v for k, v in r.items()} | {"variant": r["variant"]} for r in rows])
    header, csv = judged_header(source, len(frame), len(names)), frame.to_csv(index=False)
    page = Page(table.title, [table], notes, header, csv, claim, said)
    page.seeds = seed_grids(names, refs, frame.assign(val_loss=frame[metric]), formats["mean"], s.metric)
    return page


def judged_ladder_page(design, rows, notes: list[str], source, s, ls) -> Page:
    """A ladder of runs judged from a file (judge --compute-col): the scale table, the file as CSV, its command.
    A CSV file is shown as its own text, whose sha256 the header gives: pandas would blank an NA name."""
    import pandas as pd

    table = ladder_table(SimpleNamespace(design=design, rows=rows, notes=notes, size_col=ls.size_col))
    read = {".csv": pd.read_csv, ".parquet": pd.read_parquet}.get(Path(str(source)).suffix.lower())
    frame = source if isinstance(source, pd.DataFrame) else read(source) if read else pd.read_json(source, lines=True)
    flags = ""  # judge's flags that give the settings s and ls again (those not at their defaults), for a shell
    for f, v in ((f, getattr(x, f.name)) for x in (s, ls) for f in fields(x)):
        name = "--" + {"target": "target-compute"}.get(f.name, f.name).replace("_", "-")
        text = ",".join(v) if isinstance(v, tuple) else format(v, "g") if isinstance(v, float) else str(v)
        flags += "" if v in (None, f.default) else f" {name}" if v is True else f" {name} {shlex.quote(text)}"
    header, claim = judged_header(source, len(frame), len(design.rows)), ladder_claim(design, flags)
    own = read is pd.read_csv and not isinstance(source, pd.DataFrame)  # a CSV file: its own text
    csv = Path(source).read_text(encoding="utf-8-sig") if own else frame.to_csv(index=False)
    return Page(table.title, [table], [], header, csv, claim, ladder_answer(rows))


# Where the numbers come from
def _text(x) -> str | None:
    """A recorded value as text; None when missing or not a plain value (a hand-edited meta.json)."""
    return None if isinstance(x, bool) or not isinstance(x, str | int | float) else str(x)


def _by(version, commit, dirty) -> str:
    """What trained or wrote: the modern-gpt version, its checkout's commit and whether that was clean."""
    state = {True: "with uncommitted changes", False: "clean"}.get(dirty, "uncommitted changes not recorded")
    checkout = f"commit {commit} ({state})" if _text(commit) else "not a git checkout (no commit recorded)"
    return f"modern-gpt {version}, {checkout}"


def components(rows, meta: dict) -> str:
    """Each component the table's rows use, with its summary. A plugin's is as its file says, and names the file."""
    from ..core.components import COMPONENT_SUMMARY, PLUGINS

    plugins = [p for p in meta.get("plugins") or [] if isinstance(p, dict) and isinstance(p.get("components"), list)]
    files = {}
    for p in plugins:
        files |= dict.fromkeys(p["components"], f"plugin {_text(p.get('file'))}, sha256 {str(p.get('sha256'))[:12]}")
    said = []
    for name in dict.fromkeys(c for r in rows for c in r.components):
        summary = COMPONENT_SUMMARY.get(name) or getattr(PLUGINS.get(name), "summary", None) or "no summary"
        said.append(f"{name}: {summary}" + (f" ({files[name]})" if name in files else ""))
    return "; ".join(said) or "none (every row is classic)"


def folder_header(metas: list[dict], runs, components: str, command: str | None = None) -> list[tuple[str, str]]:
    """A folder's header from its meta.json and its runs. A ladder has one per rung: the top rung's versions show."""
    import pandas as pd

    meta = metas[-1] if metas else {}
    found = {"python": meta.get("python"), **(meta.get("packages") if isinstance(meta.get("packages"), dict) else {})}
    device, name, threads, version = (_text(meta.get(k)) for k in ("device", "device_name", "threads", "modern_gpt"))
    executor = meta.get("executor") if isinstance(meta.get("executor"), dict) else {}
    jobs = f", {executor['jobs']} job{'s' * (executor['jobs'] != 1)}" if _text(executor.get("jobs")) else ""
    machine = [
        _text(meta.get("platform")),
        device and f"device {device}" + (f" ({name})" if name and name != device else ""),
        threads and f"{threads} torch thread{'s' * (meta['threads'] != 1)} per run",
        _text(executor.get("name")) and f"executor {executor['name']}{jobs}",
    ]
    cols = (pd.to_numeric(runs[c], errors="coerce") if c in runs else pd.Series([0.0]) for c in ("flops", "secs"))
    flops, secs = (float(x[x.apply(math.isfinite)].sum()) for x in cols)  # a folder from before FLOPs has none
    compute = f", {flops:.3g} training FLOPs" if flops else ", training FLOPs not recorded (runs from before they were)"
    run_time = f", {duration(secs)} of run time" if secs else ""
    try:  # from the first start to the last end (a ladder has a meta.json per rung); a hand-edited time: not recorded
        start = min(dt.datetime.fromisoformat(m["started"]) for m in metas if isinstance(m.get("started"), str))
        ends = [dt.datetime.fromisoformat(m["finished"]) for m in metas if isinstance(m.get("finished"), str)]
        wall = f"started {start.isoformat()}, no end recorded"
        if ends:
            wall = f"{duration((max(ends) - start).total_seconds())}, {start.isoformat()} to {max(ends).isoformat()}"
    except (ValueError, TypeError):  # none, not a time, or one with a zone and one without
        wall = "not recorded"
    return [
        ("command", command or _text(meta.get("command")) or "not recorded"),
        ("components", components),
        ("trained by", _by(version or "(version not recorded)", meta.get("git_commit"), meta.get("git_dirty"))),
        ("this page by", _by(__version__, *git_state())),
        ("packages", ", ".join(f"{k} {_text(v)}" for k, v in found.items() if _text(v)) or "not recorded"),
        ("machine", "; ".join(p for p in machine if p) or "not recorded"),
        ("wall time", wall),
        ("compute", f"{len(runs)} run{'s' * (len(runs) != 1)}{compute}{run_time}"),
    ]


def judged_header(source, runs: int, variants: int) -> list[tuple[str, str]]:
    """What judge had: the file, with its sha256, or a DataFrame. It says the training is not recorded."""
    import platform
    from importlib import metadata
    from importlib.util import find_spec

    where = "a DataFrame"
    if isinstance(source, str | os.PathLike):
        where = f"{source} (sha256 {hashlib.sha256(Path(source).read_bytes()).hexdigest()})"
    versions = [f"python {platform.python_version()}"]
    versions += [f"{pkg} {metadata.version(pkg)}" for pkg in ("numpy", "pandas", "scipy") if find_spec(pkg)]
    return [
        ("runs", f"{runs} runs of {variants} variants from {where}"),
        ("judged by", _by(__version__, *git_state())),
        ("packages", ", ".join(versions) + " (judging; the training's are not recorded)"),
        ("training", TRAINING),
    ]


TRAINING = "not recorded: judge reads only the runs, so no commit, machine, wall time or compute of it, nor figures"
CAPTIONS = {
    "curves.png": "validation loss against step: the mean over seeds and a min-max band, one colour per run row",
    "lr.png": "final validation loss against learning rate, one line per table row",
    "scale.png": "loss against compute, and k against compute",
}


def figures(folder: Path, names: list[str]) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The PNG files named that the folder holds, and why each other one there is left out. A pipe is never opened."""
    found, missing = [], []
    for name, path in ((n, Path(folder) / n) for n in names):
        what, data = not_regular(path), b""
        if what is None and not path.exists():
            continue
        try:
            data = path.read_bytes() if what is None else b""
        except OSError as err:
            what = f"unreadable ({err.strerror or err})"
        what = what or (None if data.startswith(b"\x89PNG\r\n\x1a\n") else "not a PNG file")
        (missing if what else found).append(f"{name} is {what}: left out" if what else (name, data))
    return found, missing


def seed_grids(names: list[str], references: list, runs, fmt: str, metric: str) -> list[Table]:
    """The runs the table read, per row and seed, and each row's paired Δs. row: its row; val_loss: the metric."""
    from ..verdict.table import failed

    def shown(d, err, x) -> str:
        finite = isinstance(x, int | float) and math.isfinite(x)
        return "diverged" if bool(d) else "failed" if err else format(x, fmt) if finite else "no value"

    cells = zip(runs["row"], runs["seed"], runs["diverged"], runs["error"], runs["val_loss"], failed(runs), strict=True)
    at = {(int(r), int(s)): (shown(d, err, x), x, bad) for r, s, d, err, x, bad in cells}
    seeds = sorted({s for _, s in at})

    def diff(b: int, ref: int, s: int) -> str:
        (_, mine, bad), (_, theirs, lost) = at.get((b, s), ("", 0, True)), at.get((ref, s), ("", 0, True))
        return "" if bad or lost else format(mine - theirs, f"+{fmt}")

    values = [[n, *(at.get((b, s), [""])[0] for s in seeds)] for b, n in enumerate(names)]
    diffs = [[names[b], names[r], *(diff(b, r, s) for s in seeds)] for b, r in enumerate(references) if r is not None]
    heads = [f"seed {s}" for s in seeds]
    said = f"Δ {metric} against the reference, seed by seed (the pairs each t-test reads)"
    grid = Table(f"{metric} of each run the table read", ["variant", *heads], values)
    return [grid, Table(said, ["variant", "vs", *heads], diffs)]


# The claim test: a few lines of SciPy on the runs' CSV, and the command that adjusts them
CODE = """import pandas as pd
from scipy.stats import ttest_rel{also}

runs = pd.read_csv("runs.csv")
failed = runs["diverged"].astype(bool) | runs["error"].notna() | runs[{value}].isna()
table = runs[~failed].pivot(index="seed", columns={columns}, values={value})  # a column per row


def pairs(row, ref):  # the seeds both rows finished (none where every run of one failed)
    both = table.reindex(columns=[row, ref]).dropna()
    return both[row], both[ref]


def p(row, ref):  # the paired t-test over those seeds; NaN under two pairs, as in the table
    a, b = pairs(row, ref)
    return ttest_rel(a, b).pvalue if len(a) >= 2 else float("nan")
"""
P_SAME = """

def p_same(row, ref, margin={margin!r}):  # two one-sided tests of |Δ| < margin
    a, b = pairs(row, ref)
    if len(a) < 2:
        return float("nan")
    above = ttest_1samp(a - b, -margin, alternative="greater").pvalue
    return max(above, ttest_1samp(a - b, margin, alternative="less").pvalue)
"""


def lit(text: str) -> str:
    """A Python string literal of text on one line, double-quoted if it can. repr escapes what is not printable."""
    r = repr(str(text))
    return f'"{r[1:-1]}"' if r.startswith("'") and '"' not in text and "'" not in text else r


def _safe(text: str) -> str:
    """Text for a Python comment. A newline in a name would end the comment and make the rest code."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def _says(p: float, p_adj: float, verdict: str, **_) -> str:
    if not math.isfinite(p):
        return f"the table has no p (fewer than two pairs finished): {verdict or 'no verdict'}"
    return f"the table's p {p!r}{f', p_adj {p_adj:.4g}' if math.isfinite(p_adj) else ''}: {verdict or 'no verdict'}"


def claim_code(columns: str, value: str, tests: list[tuple[str, str, str]], margin=None, extra=()) -> str:
    """Each test's paired t-test, and TOST with a margin, as Python. tests: (row, reference, what the table says)."""
    code = CODE.format(also=", ttest_1samp" if margin else "", value=lit(value), columns=lit(columns))
    code += P_SAME.format(margin=float(margin)) if margin else ""
    same = "\nprint(p_same({}, {}))" if margin else ""
    said = [f"print(p({a}, {b}))  # {_safe(says)}" + same.format(a, b) for a, b, says in tests]
    return code + "\n\n" + "\n".join([*said, *extra]) + "\n"


def _flags(alpha: float, margin) -> str:
    from ..verdict.design import ALPHA

    return (f" --alpha {alpha:g}" if alpha != ALPHA else "") + (f" --margin {margin:g}" if margin else "")


FROM_CSV = "the command prints it and the verdicts from the CSV alone."


def _adjusts(margin) -> str:
    rule = "Holm-Shaffer's step-down with the margin" if margin else "Hommel's procedure"
    return f"p_adj adjusts the rows' p together by {rule} (a placebo is tested alone), which is not in SciPy"


def folder_claim(rep, folder) -> Claim:
    """The claim test of a folder's table (ablation.report.Report) on its runs.csv."""
    d, extra, names = rep.design, [], [r.name for r in rep.design.rows]
    if d.sweep is None:
        named = len(set(names)) == len(names)
        keys = [lit(n) if named else str(b) for b, n in enumerate(names)]
        columns, value = ("variant" if named else "row"), "val_loss"
    else:  # each row at its chosen learning rate: runs.csv's run row of it, on the test half
        lrs = d.sweep.lrs
        keys = [str(d.sweep.design.run_row(b, lrs.index(r.lr))) if r.lr in lrs else None for b, r in enumerate(d.rows)]
        columns, value, chosen = "row", "val_loss_test", ", ".join(k for k in keys if k is not None)
        extra = ["", f'view = runs[runs["row"].isin([{chosen}])]  # each row at the learning rate the table shows']
        extra.append(f'view.assign(val_loss=view["val_loss_test"]).to_csv({lit(VIEW_NAME)}, index=False)')
    tested = [(b, r.reference) for b, r in enumerate(d.rows) if r.reference is not None]
    tests = [(keys[b], keys[r], _says(**vars(rep.summary[b]))) for b, r in tested if None not in (keys[b], keys[r])]
    why = "no learning rate chosen (its runs all failed), so the table has no p"  # over a learning-rate grid
    unchosen = [f"# {_safe(names[b])}: {why}" for b, r in tested if None in (keys[b], keys[r])]
    if rep.spec.plan == "power" and len(keys) > 1 and rep.summary[1].pairs >= 2:  # power's and the duel's figures
        sd = f"print((second - first).std())  # the paired sd of two inits: {rep.summary[1].sd!r}"
        unchosen = [f"second, first = pairs({keys[1]}, {keys[0]})", sd, *unchosen]
    elif rep.duel and "modern" in names and "classic" in names:
        a, b, change = keys[names.index("modern")], keys[names.index("classic")], rep.duel["perplexity_change"]
        ppl = f"print(math.exp((modern - classic).mean()) - 1)  # the perplexity change: {change!r}"
        unchosen = ["", "import math", "", f"modern, classic = pairs({a}, {b})", ppl, *unchosen]
    code = claim_code(columns, value, tests, d.margin, unchosen + extra)
    return Claim(code, *_folder_command(rep, folder))


def _folder_command(rep, folder) -> tuple[str, str]:
    """judge on the CSV where it gives the table's p_adj and verdicts, else report on the folder. Also why."""
    d, report = rep.design, f"modern-gpt report {shlex.quote(str(folder))}"
    if d.sequential:
        return report, (
            "A --seeds auto table's p_adj is each row's p at the boundary the folder's looks give: report on the "
            "folder prints it and the verdicts, which judge on the CSV alone cannot (it tests at the fixed level)."
        )
    runs, rows = (d.sweep.all, d.sweep.design.rows) if d.sweep is not None else (rep.runs, d.rows)
    missing = len(runs) < len(d.seeds) * len(rows)
    if missing or (d.sweep is not None and any(r.lr not in d.sweep.lrs for r in d.rows)):
        why = "runs are missing (the footnotes say which)" if missing else "a row's runs all failed (no rate chosen)"
        return report, f"{_adjusts(d.margin)}; {why}, so report on the folder prints p_adj and the verdicts."
    if d.sweep is None:
        return f"modern-gpt judge {CSV_NAME}{_flags(d.alpha, d.margin)}", f"{_adjusts(d.margin)}; {FROM_CSV}"
    view = f"the code's last lines write the runs the table read as {VIEW_NAME} (val_loss from the test half)"
    return f"modern-gpt judge {VIEW_NAME}{_flags(d.alpha, d.margin)}", f"{_adjusts(d.margin)}; {view}, and {FROM_CSV}"


def ladder_claim(design, flags: str | None = None) -> Claim:
    """judge's command for the scale table. flags: as given (a judged file's), else a ladder folder's runs.csv's."""
    if flags is None:
        flags = " --compute-col flops" + _flags(design.alpha, None)
        flags += f" --trend-margin {design.trend_margin:g}" if design.trend_margin else ""
        flags += f" --target-compute {design.target:g}" if design.target else ""
    says = "k and its trend come from a shared loss-compute fit and a delete-one-seed jackknife, not SciPy; the "
    return Claim("", f"modern-gpt judge {CSV_NAME}{flags}", says + "command gives this scale table from the CSV.")


def judged_runs(design, s, runs):
    """The runs judge read, as a CSV judge reads back into the same table with --metric alone; the metric's column.
    The rows' order, references and placebo are columns, and the failed runs are marked."""
    import pandas as pd

    reserved = ("row", "variant", "reference", "placebo", "seed", "diverged", "error")  # the CSV's other columns
    metric = "metric" if s.metric in reserved else s.metric
    names, at = [r.name for r in design.rows], [int(i) for i in runs["row"]]
    refs = ["" if r.reference is None else names[r.reference] for r in design.rows]
    frame = pd.DataFrame({"row": at, "variant": [names[i] for i in at], "reference": [refs[i] for i in at]})
    frame["placebo"], frame["seed"] = [design.rows[i].placebo for i in at], list(runs["seed"])
    frame[metric] = list((-1.0 if s.higher_is_better else 1.0) * runs["val_loss"].astype(float))  # un-negated
    frame["diverged"] = [bool(x) for x in runs["diverged"]]
    frame["error"] = ["" if x is None or x != x else str(x) for x in runs["error"]]
    return frame, metric


# HTML and Markdown
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
LEFT = {"variant", "vs", "verdict", "trend", ""}  # left-aligned columns, by header
MARKED = {"better", "worse", "same", "inconclusive", "grows", "shrinks", "steady"}
CSS = """
:root { color-scheme: light dark; --line: #d0d7de; --soft: #f6f8fa; --dim: #59636e; }
@media (prefers-color-scheme: dark) { :root { --line: #3d444d; --soft: #151b23; --dim: #9198a1; } }
body { font: 15px/1.5 system-ui, sans-serif; margin: 0; } h1 { font-size: 1.45em; margin: 0 0 4px; }
main { margin: 0 auto; padding: 24px; width: max-content; max-width: calc(100vw - 48px); } th { background: var(--soft); }
p, ul, figure, details { max-width: 1100px; } .answer { font-size: 1.1em; font-weight: 600; margin: 8px 0 16px; }
h2 { font-size: 1.15em; margin: 32px 0 8px; } .dim, figcaption { color: var(--dim); } .scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: right; white-space: nowrap; }
caption { text-align: left; font-weight: 600; padding: 6px 0; white-space: normal; } .facts th { vertical-align: top; }
.l, .facts th, .facts td { text-align: left; } .facts td { white-space: normal; } .inconclusive { color: var(--dim); }
.better, .grows { color: #1a7f37; font-weight: 600; } .worse, .shrinks { color: #cf222e; font-weight: 600; }
.same, .steady { color: #0969da; font-weight: 600; } img { max-width: 100%; border: 1px solid var(--line); }
pre { background: var(--soft); border: 1px solid var(--line); padding: 10px; overflow-x: auto; font-size: 13px; }
"""
SAVE = "Save the runs below as {} and run this (Python, pandas and SciPy): it prints each row's paired t-test "
SAVE += "against its reference, the table's {}"


def e(text) -> str:  # text as HTML: every <, >, &, " and ' escaped
    return html.escape(str(text), quote=True)


def _html_table(t: Table, attrs: str = "") -> str:
    def cell(tag: str, text: str, left: bool) -> str:
        css = " ".join(filter(None, ("l" * left, text * (tag == "td" and text in MARKED))))
        return f'<{tag} class="{css}">{e(text)}</{tag}>' if css else f"<{tag}>{e(text)}</{tag}>"

    left = [h in LEFT for h in t.headers]
    rows = "".join(f"<tr>{''.join(cell('td', c, lf) for c, lf in zip(r, left, strict=False))}</tr>" for r in t.rows)
    head = "".join(cell("th", h, lf) for h, lf in zip(t.headers, left, strict=True))
    out = f'<div class="scroll"><table{attrs}><caption>{e(t.title)}</caption><thead><tr>{head}</tr></thead>'
    return out + f"<tbody>{rows}</tbody></table></div>" + _html_list(t.notes)


def _html_list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{e(n)}</li>" for n in items) + "</ul>" if items else ""


def to_html(page: Page) -> str:
    c, csv, n = page.claim, page.csv.encode("utf-8"), max(0, page.csv.count("\n") - 1)
    uri = "data:text/csv;charset=utf-8;base64," + base64.b64encode(csv).decode("ascii")
    figs = [(f, base64.b64encode(d).decode("ascii"), f"{f}: {CAPTIONS.get(Path(f).name, '')}") for f, d in page.figures]
    parts = [
        f"<h1>{e(page.title)}</h1>",
        f'<p class="answer" id="answer">{e(page.answer)}</p>' * bool(page.answer),
        *(_html_table(t, ' id="verdicts"' * (i == 0)) for i, t in enumerate(page.tables)),
        *(f"<p>{e(line)}</p>" for line in page.lines),
        _html_list(page.notes),
        "<h2>Where the numbers come from</h2>",
        f'<table class="facts">{"".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in page.header)}</table>',
        "<h2>Figures</h2>" * bool(page.figures or page.missing),
        *(
            f'<figure><img src="data:image/png;base64,{b}" alt="{e(f)}"><figcaption>{e(t)}</figcaption></figure>'
            for f, b, t in figs
        ),
        *(f'<p class="dim">{e(m)}</p>' for m in page.missing),
        "<h2>Seed by seed</h2>" * bool(page.seeds),
        *(_html_table(g) for g in page.seeds),
        "<h2>Re-check the claim</h2>",
        f"<p>{SAVE.format(f'<code>{CSV_NAME}</code>', '<code>p</code>')}.</p>" * bool(c.code),
        f'<pre id="claim"><code>{e(c.code)}</code></pre>' * bool(c.code),
        f"<p>{e(c.says)}"
        + (f" With modern-gpt installed:</p><pre><code>{e(c.command)}</code></pre>" if c.command else "</p>"),
        f'<h2>The runs</h2><p><a download="{CSV_NAME}" href="{uri}">Download {CSV_NAME}</a> <span class="dim">({n} '
        f"runs, {len(csv):,} bytes, inside this page: it loads nothing and runs no script)</span></p>",
        f'<details><summary>{CSV_NAME} as text</summary><pre id="runs-csv">{e(page.csv)}</pre></details>',
    ]
    head = f'<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
    head += f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{e(page.title)}</title>'
    body = "\n".join(filter(None, parts))
    return f'<!DOCTYPE html>\n<html lang="en">\n<head>\n{head}\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n'


def md(text) -> str:
    """Text as Markdown that shows those characters. <, > and & are entities; Markdown's marks and a table's | are
    escaped. A line break is a space: it would end a table row or a list item."""
    return re.sub(r"([\\`*\[\]|])", r"\\\1", html.escape(" ".join(str(text).splitlines()), quote=False))


def _md_table(t: Table) -> list[str]:
    lines = [f"**{md(t.title)}**", "", *("| " + " | ".join(map(md, r)) + " |" for r in [t.headers, *t.rows]), ""]
    lines.insert(3, "|" + " --- |" * len(t.headers))
    return [*lines, *(f"- {md(n)}" for n in t.notes), *[""] * bool(t.notes)]


def _fence(text: str, lang: str = "") -> list[str]:
    """A fenced block longer than any run of backticks inside it, so that nothing in it ends it."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return [f"{fence}{lang}", text.rstrip("\n"), fence, ""]


def to_markdown(page: Page) -> str:
    """The page as one Markdown file, the runs' CSV inside it. The figures are named; the HTML page holds them."""
    c, lines = page.claim, [f"# {md(page.title)}", "", *[f"**{md(page.answer)}**", ""] * bool(page.answer)]
    lines += [line for t in page.tables for line in _md_table(t)]
    lines += [*(md(line) + "\n" for line in page.lines), *(f"- {md(n)}" for n in page.notes), ""]
    lines += ["## Where the numbers come from", "", "| | |", "| --- | --- |"]
    lines += [*(f"| {md(k)} | {md(v)} |" for k, v in page.header), ""]
    if page.figures:  # the folder's fixed names
        names = ", ".join(f"`{name}`" for name, _ in page.figures)
        lines += [f"Figures: {names} in the results folder (the HTML page, --html, holds them inline).", ""]
    lines += [md(m) + "\n" for m in page.missing] + ["## Seed by seed", ""] * bool(page.seeds)
    lines += [line for g in page.seeds for line in _md_table(g)] + ["## Re-check the claim", ""]
    lines += [SAVE.format(f"`{CSV_NAME}`", "`p`") + ":", "", *_fence(c.code, "python")] if c.code else []
    lines += [md(c.says), "", *(_fence(c.command, "sh") if c.command else [])]
    return "\n".join([*lines, f"<details><summary>{CSV_NAME}</summary>", "", *_fence(page.csv, "csv"), "</details>\n"])


Page.html, Page.markdown = to_html, to_markdown  # page.html() and page.markdown(): the page's text


# Writing: each file checked before anything is read, then written atomically
def cannot(flag: str, path: Path, err: OSError) -> str:
    """A page that cannot be written, in one sentence whose advice fits the error (core.files.advice)."""
    said = advice(err, str(path.parent), f"choose another {flag}")
    return f"{flag} {path}: cannot write in {path.parent} ({err.strerror or err}); {said}."


def _same(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        return a.exists() and b.exists() and os.path.samefile(a, b)
    return False


def check_output(path, flag: str, inputs=(), force: bool = False) -> Path:
    """A file to write a page to, or one sentence why not. Never a folder, pipe or device, nor a file there without
    force. Even with --force, never a file the command reads: one of inputs, or a file already in an input folder."""
    example = "result.html" if flag == "--html" else "RESULT.md"
    if str(path) in ("", "-"):
        what = "an empty path" if str(path) == "" else "-, but a page is written to a file (the table goes to stdout)"
        raise UserError(f"{flag} is {what}; give the file to write, e.g. {flag} {example}.")
    check_name(path := Path(path), flag)
    if path.is_dir():
        raise UserError(f"{flag} {path} is a folder; give the file to write, e.g. {flag} {path / example}.")
    if not (above := next(p for p in path.absolute().parents if p.exists())).is_dir():
        raise UserError(f"{flag} {path}: {above} is not a folder; choose another {flag}.")
    if (what := not_regular(path)) is not None:
        raise UserError(f"{flag} {path} is {what}, not a file to write; choose another {flag}.")
    where, inside = Path(os.path.realpath(path.absolute().parent)) / path.name, [Path(d).resolve() for d in inputs]
    if any(_same(path, Path(i)) for i in inputs):
        raise UserError(f"{flag} {path} is a file this command reads; choose another {flag}.")
    if path.exists() and (folder := next((d for d in inside if where.is_relative_to(d)), None)):
        raise UserError(f"{flag} {path} is already in {folder}, whose files are never replaced; choose another {flag}.")
    if os.path.lexists(path) and not force:
        raise UserError(f"{flag} {path} already exists; choose another {flag}, or add --force to replace it.")
    return path


def check_pages(html_path=None, markdown_path=None, inputs=(), force: bool = False):
    """--html and --markdown checked (check_output), and never one file for both: (html, markdown)."""
    html_path = None if html_path is None else check_output(html_path, "--html", inputs, force)
    markdown_path = None if markdown_path is None else check_output(markdown_path, "--markdown", inputs, force)
    both = html_path and markdown_path
    if both and (html_path.absolute() == markdown_path.absolute() or _same(html_path, markdown_path)):
        raise UserError(f"--html {html_path} and --markdown {markdown_path} are one file; give each its own.")
    return html_path, markdown_path


def write(page: Page, html_path=None, markdown_path=None, inputs=(), force: bool = False) -> list[Path]:
    """The page as HTML and/or Markdown. Each is one file, renamed onto its path when whole; folders above are made."""
    checked = check_pages(html_path, markdown_path, inputs, force)
    paths = [(path, flag) for path, flag in zip(checked, ("--html", "--markdown"), strict=True) if path]
    for path, flag in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(cannot(flag, path, err)) from None
        with atomic_path(path, failed=lambda err, p=path, f=flag: cannot(f, p, err)) as tmp:
            tmp.write_bytes((page.html() if flag == "--html" else page.markdown()).encode("utf-8"))
    return [path for path, _ in paths]


# modern_gpt.share: what --html and --markdown write, from Python
JUDGE_KEYS = ("variant_col", "seed_col", "metric", "higher_is_better", "order", "reference", "placebo", "alpha")
LADDER_KEYS = ("compute_col", "size_col", "rung_col", "trend_margin", "target_compute")


def share(source, html=None, markdown=None, *, force: bool = False, at_lr=None, plugins=(), **judge) -> Page:
    """The page of a results folder (a ladder's too), a Result or LadderResult, or runs to judge (docs/sharing.md).
    Runs to judge: a file or a DataFrame, with modern_gpt.judge's keywords. Written to html and/or markdown."""
    import pandas as pd

    from ..ablation.ladder import is_ladder
    from ..ablation.session import LadderResult, Result, folder_result, ladder_result
    from ..model.plugins import load

    if unknown := sorted(set(judge) - {*JUDGE_KEYS, "margin", *LADDER_KEYS}):
        raise UserError(f"share has no option {unknown[0]!r}; its options are judge's: {', '.join(JUDGE_KEYS)}, ...")
    what = "share takes a results folder, a Result or LadderResult, or runs to judge (a .csv, .jsonl or .parquet file"
    path = isinstance(source, str | os.PathLike)
    if not path and not isinstance(source, Result | LadderResult | pd.DataFrame):
        raise UserError(f"{what}, or a DataFrame), not a {type(source).__name__}.")
    if path and not Path(source).exists():
        raise UserError(f"{source} does not exist; {what}, or a DataFrame).")
    check_pages(html, markdown, force=force)
    if judge and (not path or Path(source).is_dir()) and not isinstance(source, pd.DataFrame):
        raise UserError(f"{next(iter(judge))}= goes with runs to judge (a file or a DataFrame), not a results folder.")
    if isinstance(source, Result | LadderResult) or (path and Path(source).is_dir()):
        if path and plugins:  # a folder read as modern_gpt.report reads it
            load(list(plugins))
        if (ladder := path and is_ladder(source)) and at_lr is not None:
            raise UserError(f"{source} is a ladder: each rung's table shows each row at its best learning rate.")
        result = ladder_result(source, draw=False) if ladder else folder_result(Path(source), at_lr) if path else source
        page, inputs = folder_page(result), [result.folder]
    elif at_lr is not None:
        raise UserError("at_lr goes with a results folder trained at several learning rates, not runs to judge.")
    else:
        page, inputs = _judged(source, judge), [source] if path else []
    write(page, html, markdown, inputs, force)
    return page


def _judged(source, keywords: dict) -> Page:
    """The page of runs judged from a file or a DataFrame, with modern_gpt.judge's keywords."""
    import pandas as pd

    from ..verdict.judge import api_settings, judge, judge_file_runs, read_runs
    from ..verdict.ladder_judge import LadderSettings, judge_ladder
    from ..verdict.reading import from_frame

    s = api_settings(**{k: keywords[k] for k in (*JUDGE_KEYS, "margin") if k in keywords})
    if any(keywords.get(k) is not None for k in LADDER_KEYS):
        if s.margin is not None:
            raise UserError("margin is in the metric's units for one size; for a ladder give trend_margin.")
        ls = LadderSettings(*(keywords.get(k) for k in LADDER_KEYS))
        return judged_ladder_page(*judge_ladder(source, s, ls), source, s, ls)
    if not isinstance(source, pd.DataFrame):
        design, runs, rows, notes = judge_file_runs(source, s)
        return judged_page(design, s, runs, rows, notes, source)
    design, runs, first = read_runs(from_frame(source), s, api=True)
    return judged_page(design, s, runs, *judge(design, s, runs, first=first), source)
