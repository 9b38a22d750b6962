"""What a shared page of a result holds besides its table (cli/share.py renders it as HTML or Markdown): the
header (the commit, the versions, the machine, the wall time and the compute, from meta.json), the figures, the
runs as CSV, the runs the table read seed by seed, and the claim test a reader runs on that CSV: SciPy's paired
t-test of each row against its reference, and the command that prints the table's adjusted p and verdicts.

Nothing here computes a statistic: the p-values the claim test names are the table's own (verdict/table.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import platform
import shlex
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from .. import __version__
from ..core.files import git_state, not_regular
from ..verdict.table import failed

PNG = b"\x89PNG\r\n\x1a\n"
CSV_NAME = "runs.csv"  # the name the page's download link gives the runs, and the claim test reads
VIEW_NAME = "table-runs.csv"  # over a learning-rate grid: the runs the table read, which judge reads as the table


@dataclass
class Figure:
    name: str  # the file's name in the folder: curves.png, rung-0/curves.png
    caption: str
    data: bytes  # the PNG file


@dataclass
class Claim:
    """The claim test: Python that reads the runs' CSV and prints each row's p, the command that prints the
    adjusted p and the verdicts, and a sentence on what that command reproduces."""

    code: str
    command: str
    says: str


@dataclass
class Grid:
    """A plain table of text cells (the per-seed values and differences)."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    text: tuple[str, ...] = ("variant", "vs")  # left-aligned columns, as cli.share.Table's
    notes: list[str] = field(default_factory=list)  # none: read as a Table's are


@dataclass
class Facts:
    """Everything on the page but the verdict table and its footnotes."""

    header: list[tuple[str, str]]
    csv: str  # the runs, as CSV
    claim: Claim
    seeds: list[Grid] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # figure files left out, each with why


# ---------------------------------------------------------------------------
# The header: where the numbers come from
# ---------------------------------------------------------------------------
def _text(x) -> str | None:
    """A recorded value as text, or None when it is missing or not a plain value (a hand-edited meta.json)."""
    if isinstance(x, bool) or not isinstance(x, str | int | float):
        return None
    return str(x)


def _commit(commit, dirty) -> str:
    commit = _text(commit)
    if commit is None:
        return "not a git checkout (no commit recorded)"
    state = {True: "with uncommitted changes", False: "clean"}.get(dirty, "uncommitted changes not recorded")
    return f"commit {commit} ({state})"


def this_page() -> str:
    """What writes the page: this modern-gpt, its checkout's commit and whether it has uncommitted changes."""
    commit, dirty = git_state()
    return f"modern-gpt {__version__}, {_commit(commit, dirty)}"


def _trained_by(meta: dict) -> str:
    version = _text(meta.get("modern_gpt")) or "(version not recorded)"
    return f"modern-gpt {version}, {_commit(meta.get('git_commit'), meta.get('git_dirty'))}"


def _packages(meta: dict) -> str:
    found = [f"python {_text(meta.get('python'))}"] if _text(meta.get("python")) else []
    packages = meta.get("packages") if isinstance(meta.get("packages"), dict) else {}
    found += [f"{k} {_text(v)}" for k, v in packages.items() if isinstance(k, str) and _text(v)]
    return ", ".join(found) or "not recorded"


def _machine(meta: dict) -> str:
    parts = [_text(meta.get("platform"))]
    device, name = _text(meta.get("device")), _text(meta.get("device_name"))
    if device:
        parts.append(f"device {device}" + (f" ({name})" if name and name != device else ""))
    if _text(meta.get("threads")):
        parts.append(f"{_count(meta['threads'], 'torch thread')} per run")
    executor = meta.get("executor") if isinstance(meta.get("executor"), dict) else {}
    if _text(executor.get("name")):
        jobs = f", {_count(executor['jobs'], 'job')}" if _text(executor.get("jobs")) else ""
        parts.append(f"executor {executor['name']}{jobs}")
    return "; ".join(p for p in parts if p) or "not recorded"


def _count(n, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _when(x) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(x) if isinstance(x, str) else None
    except ValueError:
        return None


def duration(secs: float) -> str:
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        return f"{secs / 60:.1f} min"
    return f"{secs / 3600:.1f} h"


def _wall(metas: list[dict]) -> str:
    """From the first start to the last end the meta.json files record (a ladder has one per rung)."""
    starts = [t for t in (_when(m.get("started")) for m in metas) if t is not None]
    ends = [t for t in (_when(m.get("finished")) for m in metas) if t is not None]
    states = sorted({s for s in (_text(m.get("status")) for m in metas) if s and s != "finished"})
    unfinished = f"; status {', '.join(states)}" if states else ""
    if not starts:
        return "not recorded" + unfinished
    if not ends:
        return f"started {min(starts).isoformat()}, no end recorded{unfinished}"
    try:
        secs = (max(ends) - min(starts)).total_seconds()
    except TypeError:  # one time with a zone and one without (edited by hand)
        return f"{min(starts).isoformat()} to {max(ends).isoformat()}{unfinished}"
    return f"{duration(secs)}, {min(starts).isoformat()} to {max(ends).isoformat()}{unfinished}"


def _compute(runs: pd.DataFrame) -> str:
    """The runs' training FLOPs and wall seconds, summed (a folder from before FLOPs were counted has none)."""
    n = len(runs)

    def total(col: str) -> float | None:
        if col not in runs:
            return None
        x = pd.to_numeric(runs[col], errors="coerce")
        return float(x[x.apply(lambda v: math.isfinite(v))].sum()) if x.notna().any() else None

    flops, secs = total("flops"), total("secs")
    said = f"{n} run{'s' if n != 1 else ''}"
    said += f", {flops:.3g} training FLOPs" if flops else ", training FLOPs not recorded (runs from before they were)"
    return said + (f", {duration(secs)} of run time" if secs else "")


def components(rows, meta: dict) -> str:
    """Each component the table's rows use, with its summary (a plugin's as its file says it, and the file)."""
    from ..core.components import COMPONENT_SUMMARY, PLUGINS

    files = {}
    for p in meta.get("plugins") or []:
        if isinstance(p, dict) and isinstance(p.get("components"), list):
            sha = _text(p.get("sha256")) or ""
            files.update({c: f"plugin {_text(p.get('file'))}, sha256 {sha[:12]}" for c in p["components"]})
    said = []
    for name in dict.fromkeys(c for r in rows for c in r.components):
        summary = COMPONENT_SUMMARY.get(name) or getattr(PLUGINS.get(name), "summary", None) or "no summary"
        said.append(f"{name}: {summary}" + (f" ({files[name]})" if name in files else ""))
    return "; ".join(said) or "none (every row is classic)"


def folder_header(metas: list[dict], runs: pd.DataFrame, command: str | None = None) -> list[tuple[str, str]]:
    """The header of a folder's page (a ladder's: one meta.json per rung, the top rung's versions)."""
    meta = metas[-1] if metas else {}
    return [
        ("command", command or _text(meta.get("command")) or "not recorded"),
        ("trained by", _trained_by(meta)),
        ("this page by", this_page()),
        ("packages", _packages(meta)),
        ("machine", _machine(meta)),
        ("wall time", _wall(metas)),
        ("compute", _compute(runs)),
    ]


def judged_header(source: str, data: bytes | None, runs: int, variants: int) -> list[tuple[str, str]]:
    """The header of a judged file's page: what judge had (the file and its runs), and what it did not."""
    digest = f" (sha256 {hashlib.sha256(data).hexdigest()})" if data is not None else ""
    versions = [f"python {platform.python_version()}"]
    for pkg in ("numpy", "pandas", "scipy"):
        try:
            versions.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            pass
    return [
        ("runs", f"{runs} runs of {variants} variants from {source}{digest}"),
        ("judged by", this_page()),
        ("packages", ", ".join(versions) + " (judging; the training's are not recorded)"),
        (
            "training",
            "not recorded: judge reads only the runs, so this page has no commit, machine, wall time or compute "
            "of their training, and no figures",
        ),
    ]


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------
CAPTIONS = {
    "curves.png": "validation loss against step: the mean over seeds and a min-max band, one colour per run row",
    "lr.png": "final validation loss against learning rate, one line per table row",
    "scale.png": "loss against compute, and k against compute",
}


def figures(folder: Path, names: list[str]) -> tuple[list[Figure], list[str]]:
    """The figure files the folder holds, of those named (paths inside it), and a note for each that is there
    but no PNG file (a pipe is never opened: it would block)."""
    found, missing = [], []
    for name in names:
        path = Path(folder) / name
        if not path.exists() and not path.is_symlink():
            continue
        what = not_regular(path)
        try:
            data = path.read_bytes() if what is None else b""
        except OSError as e:
            what = f"unreadable ({e.strerror or e})"
        if what is None and not data.startswith(PNG):
            what = "not a PNG file"
        if what is not None:
            missing.append(f"{name} is {what}: left out")
            continue
        found.append(Figure(name, f"{name}: {CAPTIONS.get(Path(name).name, '')}".rstrip(": "), data))
    return found, missing


# ---------------------------------------------------------------------------
# The runs seed by seed
# ---------------------------------------------------------------------------
def _state(run: dict, fmt: str) -> str:
    if bool(run.get("diverged")):
        return "diverged"
    if run.get("error"):
        return "failed"
    x = run.get("val_loss")
    return format(x, fmt) if isinstance(x, int | float) and math.isfinite(x) else "no value"


def seed_grids(names: list[str], references: list[int | None], runs: pd.DataFrame, fmt: str, metric: str) -> list:
    """Two grids of the runs the table read (row = table row, val_loss = the metric compared): the metric per
    row and seed, and each row's paired difference from its reference per seed (the pairs its t-test reads)."""
    seeds = sorted({int(s) for s in runs["seed"]})
    bad = failed(runs).to_numpy()
    at = {(int(r["row"]), int(r["seed"])): (r, b) for r, b in zip(runs.to_dict("records"), bad, strict=True)}
    values = [[names[b], *(_state(at[b, s][0], fmt) if (b, s) in at else "" for s in seeds)] for b in range(len(names))]
    diffs = []
    for b, ref in enumerate(references):
        if ref is None:
            continue
        cells = []
        for s in seeds:
            mine, theirs = at.get((b, s)), at.get((ref, s))
            both = mine and theirs and not mine[1] and not theirs[1]
            cells.append(format(mine[0]["val_loss"] - theirs[0]["val_loss"], f"+{fmt}") if both else "")
        diffs.append([names[b], names[ref], *cells])
    heads = [f"seed {s}" for s in seeds]
    return [
        Grid(f"{metric} of each run the table read", ["variant", *heads], values),
        Grid(
            f"Δ {metric} against the reference, seed by seed (the pairs each t-test reads)",
            ["variant", "vs", *heads],
            diffs,
        ),
    ]


# ---------------------------------------------------------------------------
# The claim test: a few lines of SciPy on the runs' CSV, and the command that adjusts them
# ---------------------------------------------------------------------------
def _safe(text: str) -> str:
    """Text for a Python comment: a name's newline (or any character that is not printable) would end the
    comment and make the rest of the name code."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def lit(text: str) -> str:
    """A Python string literal of text, in double quotes where it can be (repr escapes every character that is
    not printable, so that the literal stays on its line)."""
    r = repr(str(text))
    return f'"{r[1:-1]}"' if r.startswith("'") and '"' not in text and "'" not in text else r


@dataclass
class Test:
    row: str  # the row's column in the pivoted table, as a Python literal
    ref: str
    says: str  # what the table holds for it, for the comment


def claim_code(csv_name: str, columns: str, value: str, tests: list[Test], margin=None, extra=()) -> str:
    """Python that reads the CSV, leaves out the failed runs (and so their pairs), and prints each row's paired
    t-test against its reference (with a margin, also the two one-sided tests of |Δ| < margin)."""
    lines = [
        "import pandas as pd",
        "from scipy.stats import ttest_rel" + (", ttest_1samp" if margin else ""),
        "",
        f"runs = pd.read_csv({lit(csv_name)})",
        f'failed = runs["diverged"].astype(bool) | runs["error"].notna() | runs[{lit(value)}].isna()',
        f'table = runs[~failed].pivot(index="seed", columns={lit(columns)}, values={lit(value)})  # a column per row',
        "",
        "",
        "def pairs(row, ref):  # the seeds both rows finished (none where every run of one failed)",
        "    both = table.reindex(columns=[row, ref]).dropna()",
        "    return both[row], both[ref]",
        "",
        "",
        "def p(row, ref):  # the paired t-test over those seeds; NaN under two pairs, as in the table",
        "    a, b = pairs(row, ref)",
        '    return ttest_rel(a, b).pvalue if len(a) >= 2 else float("nan")',
    ]
    if margin:
        lines += [
            "",
            "",
            f"def p_same(row, ref, margin={float(margin)!r}):  # two one-sided tests of |Δ| < margin",
            "    a, b = pairs(row, ref)",
            "    if len(a) < 2:",
            '        return float("nan")',
            '    above = ttest_1samp(a - b, -margin, alternative="greater").pvalue',
            '    return max(above, ttest_1samp(a - b, margin, alternative="less").pvalue)',
        ]
    lines += ["", ""]
    for t in tests:
        lines.append(f"print(p({t.row}, {t.ref}))  # {_safe(t.says)}")
        if margin:
            lines.append(f"print(p_same({t.row}, {t.ref}))")
    return "\n".join([*lines, *extra]) + "\n"


def _says(row) -> str:
    if not math.isfinite(row.p):
        return f"the table has no p (fewer than two pairs finished): {row.verdict or 'no verdict'}"
    adj = "" if not math.isfinite(row.p_adj) else f", p_adj {row.p_adj:.4g}"
    return f"the table's p {row.p!r}{adj}: {row.verdict or 'no verdict'}"


def _flags(alpha: float, margin) -> str:
    from ..verdict.design import ALPHA

    return (f" --alpha {alpha:g}" if alpha != ALPHA else "") + (f" --margin {margin:g}" if margin else "")


def folder_claim(rep, folder) -> Claim:
    """The claim test of a folder's table (ablation.report.Report) on its runs.csv."""
    d, summary = rep.design, rep.summary
    names = [r.name for r in d.rows]
    extra: list[str] = []
    if d.sweep is None:
        named = len(set(names)) == len(names)
        keys = [lit(n) if named else str(b) for b, n in enumerate(names)]
        columns, value = ("variant" if named else "row"), "val_loss"
    else:  # each row at its chosen learning rate: runs.csv's run row of it, on the test half
        lrs = d.sweep.lrs
        keys = [str(d.sweep.design.run_row(b, lrs.index(r.lr))) if r.lr in lrs else None for b, r in enumerate(d.rows)]
        columns, value = "row", "val_loss_test"
        chosen = ", ".join(k for k in keys if k is not None)
        extra = [
            "",
            f'view = runs[runs["row"].isin([{chosen}])]  # each row at the learning rate the table shows',
            f'view.assign(val_loss=view["val_loss_test"]).to_csv({lit(VIEW_NAME)}, index=False)',
        ]
    tests = [
        Test(keys[b], keys[r.reference], _says(summary[b]))
        for b, r in enumerate(d.rows)
        if r.reference is not None and keys[b] is not None and keys[r.reference] is not None
    ]
    unchosen = [  # over a learning-rate grid, a row whose every run failed has no rate to test it at
        f"# {_safe(r.name)}: no learning rate chosen (its runs all failed), so the table has no p"
        for b, r in enumerate(d.rows)
        if r.reference is not None and (keys[b] is None or keys[r.reference] is None)
    ]
    extra = _plan_lines(rep, keys) + unchosen + extra
    code = claim_code(CSV_NAME, columns, value, tests, d.margin, extra)
    return Claim(code, *_folder_command(rep, folder))


def _plan_lines(rep, keys: list) -> list[str]:
    """power's paired sd of two inits, the duel's perplexity change: their own figures, from the same table."""
    names = [r.name for r in rep.design.rows]
    if rep.spec.plan == "power" and len(keys) > 1 and rep.summary[1].pairs >= 2:
        sd = rep.summary[1].sd
        return [
            f"second, first = pairs({keys[1]}, {keys[0]})",
            f"print((second - first).std())  # the paired sd of two inits: {sd!r}",
        ]
    if rep.duel and "modern" in names and "classic" in names:
        a, b = keys[names.index("modern")], keys[names.index("classic")]
        change = rep.duel["perplexity_change"]
        return [
            "",
            "import math",
            "",
            f"modern, classic = pairs({a}, {b})",
            f"print(math.exp((modern - classic).mean()) - 1)  # the perplexity change: {change!r}",
        ]
    return []


def _folder_command(rep, folder) -> tuple[str, str]:
    d = rep.design
    if d.sequential:
        return (
            f"modern-gpt report {shlex.quote(str(folder))}",
            "A --seeds auto table's p_adj is each row's p on alpha's scale at the boundary it was held to, from the "
            "looks the folder records: report on the folder prints it and the verdicts; judge on the CSV alone "
            "tests every row at the fixed level instead (its footnote says so).",
        )
    rule = "Holm-Shaffer's step-down with the margin" if d.margin else "Hommel's procedure"
    runs = d.sweep.all if d.sweep is not None else rep.runs
    if len(runs) < len(d.seeds) * len(d.sweep.design.rows if d.sweep is not None else d.rows):
        return (
            f"modern-gpt report {shlex.quote(str(folder))}",
            f"p_adj adjusts the component rows' p together by {rule} (the placebo is tested alone), which is not in "
            "SciPy; judge needs a run of every row at every seed and this folder lacks some (the footnotes say "
            "which), so report on the folder prints p_adj and the verdicts.",
        )
    if d.sweep is not None and any(r.lr not in d.sweep.lrs for r in d.rows):
        return (
            f"modern-gpt report {shlex.quote(str(folder))}",
            f"p_adj adjusts the component rows' p together by {rule}, which is not in SciPy; a row whose runs all "
            "failed has no learning rate chosen, so the runs the table read are not one file judge can read, and "
            "report on the folder prints p_adj and the verdicts.",
        )
    if d.sweep is not None:
        return (
            f"modern-gpt judge {VIEW_NAME}{_flags(d.alpha, d.margin)}",
            f"The code's last lines write the runs the table read ({VIEW_NAME}: each row at its learning rate, "
            f"val_loss from the test half); p_adj adjusts the component rows' p together by {rule}, which is not in "
            "SciPy, and the command prints it and the verdicts from that file.",
        )
    return (
        f"modern-gpt judge {CSV_NAME}{_flags(d.alpha, d.margin)}",
        f"p_adj adjusts the component rows' p together by {rule} (the placebo is tested alone), which is not in "
        "SciPy; the command prints it and the verdicts from the CSV alone.",
    )


# ---------------------------------------------------------------------------
# Each kind of page's facts
# ---------------------------------------------------------------------------
def folder_facts(result) -> Facts:
    """A results folder's page (api.Result of report): its meta.json's header, curves.png and lr.png, runs.csv,
    the runs its table read, and the claim test."""
    from .results import ResultsDir

    rep, folder = result.table, Path(result.folder)
    figs, missing = figures(folder, ["curves.png", "lr.png"])
    rows = rep.design.rows
    metric = "val loss" + (" (the test half)" if rep.design.sweep is not None else "")
    grids = seed_grids([r.name for r in rows], [r.reference for r in rows], rep.runs, ".4f", metric)
    meta = ResultsDir(folder).read_meta()
    header = folder_header([meta], result.runs)
    header.insert(1, ("components", components(rows, meta)))
    return Facts(header, result.runs.to_csv(index=False), folder_claim(rep, folder), grids, figs, missing)


def ladder_facts(result) -> Facts:
    """A ladder folder's page (api.LadderResult): every rung's meta.json, scale.png and the rungs' curves.png,
    the ladder's runs.csv, and the judge command that gives its scale table."""
    from . import ladder as lad
    from .results import ResultsDir

    rep, folder = result.table, Path(result.folder)
    metas = [ResultsDir(lad.rung_folder(folder, i)).read_meta() for i in range(len(rep.rungs))]
    every = pd.concat([r.runs for r in result.rungs], ignore_index=True)
    header = folder_header(metas, every, command=_text(getattr(rep.ladder, "command", None)))
    header.insert(1, ("components", components(rep.rungs[-1].design.rows, metas[-1])))
    names = [f"rung-{i}/curves.png" for i in range(len(rep.rungs))]
    figs, missing = figures(folder, ["scale.png", *names])
    rows, rungs = rep.design.rows, rep.design.rungs
    runs = rep.runs.copy()
    runs["row"] = runs["rung"] * len(rows) + runs["row"]  # a grid row per (rung, row)
    labels = [f"{r.name} at {rung}" for rung in rungs for r in rows]
    refs = [None if r.reference is None else i * len(rows) + r.reference for i in range(len(rungs)) for r in rows]
    grids = seed_grids(labels, refs, runs, ".4f", "val loss")
    return Facts(header, rep.runs.to_csv(index=False), ladder_claim(rep.design), grids, figs, missing)


def ladder_claim(design, flags: str | None = None) -> Claim:
    """The scale table is a jackknife of a shared loss-compute fit, not a few lines of SciPy: the command that
    gives it from the CSV. flags: judge's flags as given (a judged file's); None: a ladder folder's runs.csv, whose
    reference and placebo columns say its references and placebo, and the flags its table choices."""
    if flags is None:
        flags = " --compute-col flops"
        flags += f" --alpha {design.alpha:g}" if design.alpha != _alpha() else ""
        flags += f" --trend-margin {design.trend_margin:g}" if design.trend_margin else ""
        flags += f" --target-compute {design.target:g}" if design.target else ""
    return Claim(
        "",
        f"modern-gpt judge {CSV_NAME}{flags}",
        "k and its trend come from a shared loss-compute fit with a delete-one-seed jackknife (docs/statistics.md, "
        "the scale verdict), which is not a few lines of SciPy; the command gives this scale table from the CSV.",
    )


def _alpha() -> float:
    from ..verdict.design import ALPHA

    return ALPHA


RESERVED = ("row", "variant", "reference", "placebo", "seed", "diverged", "error")


def judged_runs(design, s, runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs judge read as one CSV that judge reads back into the same table with no flag but --metric: the
    rows' order, references and placebo as columns, the metric as measured, the failed runs marked. And the
    metric's column (its own name, or `metric` when that is one of the other columns')."""
    metric = s.metric if s.metric not in RESERVED else "metric"
    names = [r.name for r in design.rows]
    rows = [int(i) for i in runs["row"]]
    refs = ["" if r.reference is None else names[r.reference] for r in design.rows]
    sign = -1.0 if s.higher_is_better else 1.0  # judge's runs hold the metric negated when higher is better
    frame = pd.DataFrame(
        {
            "row": rows,
            "variant": [names[i] for i in rows],
            "reference": [refs[i] for i in rows],
            "placebo": [design.rows[i].placebo for i in rows],
            "seed": list(runs["seed"]),
            metric: list(sign * runs["val_loss"].astype(float)),
            "diverged": [bool(x) for x in runs["diverged"]],
            "error": ["" if x is None or x != x else str(x) for x in runs["error"]],
        }
    )
    return frame, metric


def judged_facts(design, s, runs: pd.DataFrame, rows: list[dict], source: str, data: bytes | None, fmt: str):
    """A judged file's page: what judge had (the file, its runs), the runs as one CSV, the claim test on it.
    fmt: the format of the table's mean column, for the values seed by seed."""
    frame, metric = judged_runs(design, s, runs)
    names = [r.name for r in design.rows]
    tests = [
        Test(lit(names[b]), lit(names[r.reference]), _says(SimpleNamespace(**rows[b])))
        for b, r in enumerate(design.rows)
        if r.reference is not None
    ]
    code = claim_code(CSV_NAME, "variant", metric, tests, design.margin)
    flags = f" --metric {shlex.quote(metric)}" + (" --higher-is-better" if s.higher_is_better else "")
    rule = "Holm-Shaffer's step-down with the margin" if design.margin else "Hommel's procedure"
    claim = Claim(
        code,
        f"modern-gpt judge {CSV_NAME}{flags}{_flags(design.alpha, design.margin)}",
        f"p_adj adjusts the rows' p together by {rule} (a placebo is tested alone), which is not in SciPy; the "
        "command prints it and the verdicts from the CSV alone.",
    )
    view = frame.assign(val_loss=frame[metric])  # seed_grids reads val_loss
    grids = seed_grids(names, [r.reference for r in design.rows], view, fmt, s.metric)
    header = judged_header(source, data, len(frame), len(names))
    return Facts(header, frame.to_csv(index=False), claim, grids)
