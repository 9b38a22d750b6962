"""What the command line prints: every table, sentence and JSON document. Each is rendered from what the library
computes: report.py for a results folder, config.py for a model's price, train.py, extrapolate.py, explain.py.

cli/commands.py parses the flags, calls the library and prints what these functions return. Nothing here computes
a number that a table shows: the verdicts, the means and the parameter counts are computed where they live.
"""

from __future__ import annotations

import io
import json
import math
import shlex
import textwrap
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from ..core.components import label
from ..core.config import PIECES, POWER_SEEDS, ModelConfig, kv_cache_bytes_per_token, param_counts
from ..core.schema import count
from ..verdict.design import SummaryRow, summary_frame, table_columns
from ..verdict.stats import INCONCLUSIVE, MAX_PAIRS

if TYPE_CHECKING:
    from ..ablation.report import Report
    from ..verdict.design import Design
    from ..verdict.judge import JudgeSettings

# pandas, report, results and train (torch) are imported inside the functions that need them: `params`
# renders its table here, and must start without them.


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------
def clean(x):
    """JSON has no NaN or infinity. None stands for a number that does not exist."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def to_json(obj) -> str:
    """Every JSON document the command line prints: indented, NaN and infinity as null."""
    return json.dumps(clean(obj), indent=2)


# ---------------------------------------------------------------------------
# params: the price of each piece
# ---------------------------------------------------------------------------
def params_info(cfg: ModelConfig) -> dict:
    counts = param_counts(cfg)
    return {
        "total": counts["total"],
        "pieces": {p: counts[p] for p in PIECES},
        "components": list(cfg.components),
        "mlp_width": cfg.mlp_width,
        "head_dim": cfg.head_dim,
        "kv_heads": cfg.n_kv_heads,
        "kv_cache_bytes_per_token": kv_cache_bytes_per_token(cfg),
        "config": cfg.to_dict(),
    }


def params_table(info: dict) -> Table:
    name = label(info["components"]) + ("" if info["components"] else " (GPT-2)")
    table = Table(title=f"Parameters: {name}")
    table.add_column("piece")
    table.add_column("params", justify="right")
    table.add_column("share", justify="right")
    total = info["total"]
    for piece, n in info["pieces"].items():
        if piece == "output_head" and n == 0:  # tied to the token embedding
            continue
        table.add_row(piece.replace("_", " "), f"{n:,}", f"{100 * n / total:.1f}%")
    table.add_section()
    table.add_row("total", f"{total:,}", "100.0%", style="bold")
    return table


def params_sentence(info: dict) -> str:
    return (
        f"MLP hidden width {info['mlp_width']}, head dim {info['head_dim']}, {info['config']['heads']} query heads, "
        f"{info['kv_heads']} K/V heads, KV cache {info['kv_cache_bytes_per_token']:,} bytes per token at bf16."
    )


# ---------------------------------------------------------------------------
# train
# ---------------------------------------------------------------------------
def train_table(result, components, corpus_name: str, seed: int, windows: dict | None = None) -> Table:
    """One run's numbers (a train.RunResult); windows: {all, curve} validation windows (train_windows)."""
    table = Table(title=f"{label(components)} on {corpus_name}, seed {seed}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("params", f"{result.params:,}"),
        ("train loss (nats/token)", f"{result.train_loss:.4f}"),
        ("val loss (nats/token)", f"{result.val_loss:.4f}"),
        ("val bits/char", f"{result.val_bpc:.4f}"),
        ("val perplexity", f"{result.val_ppl:.2f}"),
        *metric_rows(result),
        (best_label(windows, "step"), f"{result.best_val_loss:.4f} ({result.best_step})"),
        ("epochs of the training split", f"{result.epochs:.2f}"),
        ("tokens/s", f"{result.tokens_per_s:,.0f}"),
        ("wall seconds", f"{result.secs:.1f}"),
        ("device, threads", f"{result.device}, {result.threads}"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


METRIC_LABELS = {
    "val_bpb": "val bits/byte",
    "ctx2x_loss": "val loss at 2x the context",
    "icl_gain": "in-context gain (late - early loss)",
}


def metric_rows(result) -> list[tuple[str, str]]:
    """The run's further metrics (run/evaluation.py). One with no value shows its note's first word (wall)."""
    rows = []
    for name, value in (result.metrics or {}).items():
        what = METRIC_LABELS.get(name) or name.replace("_bpb", " bits/byte").replace("_loss", " loss (nats/token)")
        note = (result.metric_notes or {}).get(name, "")
        shown = f"{value:.4f}" if value == value else (note.split(":")[0] or "n/a")
        rows.append((what, shown + (" (lossy)" if note and value == value else "")))
    return rows


def train_windows(result, settings) -> dict:
    """A run's validation windows. all: its final loss's. curve: its curve's, where best val loss comes from."""
    from ..run.train import curve_windows

    every = result.val_tokens // settings.model.context
    return {"all": every, "curve": curve_windows(settings.train, every)}


def train_failed(result, out: Path) -> str:
    why = "diverged (the loss or an update became NaN or infinite)" if result.diverged else f"failed: {result.error}"
    return f"The run {why} after {count(result.steps_done, 'step')}; no weights saved, metrics in {out}/metrics.json."


def memorised(epochs: float) -> str:
    return f"[yellow]note:[/] the run saw {epochs:.1f} epochs of the training split: it may have memorised it."


# ---------------------------------------------------------------------------
# extrapolate: the context wall
# ---------------------------------------------------------------------------
def positions(cfg: ModelConfig) -> str:
    return "RoPE" if cfg.rope else "learned positions"


def extrapolate_info(checkpoint: Path, cfg: ModelConfig, results: list) -> dict:
    return {
        "checkpoint": str(checkpoint),
        "trained_context": cfg.context,
        "positions": positions(cfg),
        "results": [asdict(r) for r in results],
    }


def extrapolate_table(checkpoint: Path, cfg: ModelConfig, results: list) -> Table:
    """One row per context length (extrapolate.ContextResult), the lengths past the trained one marked."""
    title = f"{checkpoint}: {positions(cfg)}, trained at context {cfg.context}"
    table = Table(title=title, title_justify="left")
    for col in ("context", "val loss", "val bits/char", "ms/token", "windows", ""):
        table.add_column(col, justify="right" if col else "left")
    for r in results:
        if r.status == "ok":
            past = "past the trained context" if r.context > cfg.context else ""
            table.add_row(
                str(r.context), f"{r.val_loss:.4f}", f"{r.val_bpc:.4f}", f"{r.ms_per_token:.3f}", str(r.windows), past
            )
        else:
            table.add_row(str(r.context), r.status, "", "", "", r.note)
    return table


# ---------------------------------------------------------------------------
# explain: a real model's config.json
# ---------------------------------------------------------------------------
def explain_table(info: dict, source) -> Table:
    """One row per field explain knows: its value, its component and what it means."""
    table = Table(title=f"{source}: {info['family']}", title_justify="left", show_lines=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_column("component")
    table.add_column("meaning")
    for f in info["fields"]:
        table.add_row(f["field"], json.dumps(f["value"]), f["component"] or "", f["meaning"])
    return table


def _bias_sentence(biases: dict) -> str:
    """'on q, k, v; none on o, MLP' with every projection named once; unknown ones said as such."""
    groups = {
        "on ": [n for n, on in biases.items() if on],
        "none on ": [n for n, on in biases.items() if on is False],
        "cannot tell for ": [n for n, on in biases.items() if on is None],
    }
    if not groups["on "] and not groups["cannot tell for "]:
        return "none"
    if groups["on "] and not groups["none on "] and not groups["cannot tell for "]:
        return "on every projection and norm (" + ", ".join(groups["on "]) + ")"
    return "; ".join(k + ", ".join(v) for k, v in groups.items() if v)


def explain_lines(info: dict) -> list[str]:
    """What follows the table: unknown fields, components, biases, notes, the price and the closest variant."""
    lines = []
    if info["unknown"]:
        lines.append("unknown (not explained, not guessed): " + ", ".join(info["unknown"]))
    found = ", ".join(info["components"]) or ("none (classic GPT-2)" if not info["cannot_tell"] else "none told")
    lines.append(
        f"components: {found}" + (f"; cannot tell: {', '.join(info['cannot_tell'])}" if info["cannot_tell"] else "")
    )
    lines.append(f"biases: {_bias_sentence(info['biases'])}")
    lines += [f"note: {note}" for note in info["notes"]]
    if info["params"] is None:
        lines.append(f"parameters: not counted ({info['params_not_counted']})")
    else:
        part = f" (not counted: {info['params_not_counted']})" if info["params_not_counted"] else ""
        lines.append(f"parameters: {info['params']:,}{part}")
    if info["kv_cache_bytes_per_token"] is not None:
        lines.append(f"KV cache: {info['kv_cache_bytes_per_token']:,} bytes per token at {info['dtype']}")
    if info["flags"] is None:  # flags that `params` would refuse are not printed
        lines.append(f"closest modern-gpt variant: none that modern-gpt params accepts ({info['flags_problem']})")
    else:
        lines.append(f"closest modern-gpt variant: modern-gpt {shlex.join(['params', *info['flags']])}")
    return lines


# ---------------------------------------------------------------------------
# ablate, duel, power and report: a results folder's table
# ---------------------------------------------------------------------------
def interrupted(finished: int, total: int, folder: Path, resume: str) -> str:
    """resume: the command line that finishes the folder (planning.Spec.resume_command)."""
    return f"modern-gpt: interrupted; {finished} of {total} runs finished and kept in {folder}.\nResume with: {resume}"


def results_line(folder: Path, lrs) -> str:
    lr = "; lr.png: val loss against learning rate" if lrs else ""
    return f"results: {folder} (curves.png: validation loss against step{lr})"


def duel_table(d: dict) -> Table:
    """The duel's two architectures side by side (report.duel). Every component on is a Qwen3: Llama's pieces
    and QK-norm."""
    return _cells_table(*duel_cells(d))


def _cells_table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    """A table of plain cells (duel_cells, power_cells): the blank header's column of labels left, the rest right."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for h in headers:
        table.add_column(h, justify="right" if h else "left")
    for row in rows:
        table.add_row(*row)
    return table


def duel_cells(d: dict) -> tuple[str, list[str], list[list[str]]]:
    """The duel's table as plain cells: its title, headers and rows. The terminal and the share page show them."""
    rows = [
        ("params", lambda x: f"{x['params']:,}"),
        ("val loss (test half)" if d.get("test_half") else "val loss", lambda x: _num(x["val_loss"], ".4f")),
        (
            best_label(d.get("windows"), "mean step", d.get("test_half")),
            lambda x: f"{_num(x['best_val_loss'], '.4f')} ({_num(x['best_step'], '.0f')})",
        ),
        ("val bits/char", lambda x: _num(x["val_bpc"], ".4f")),
        ("perplexity", lambda x: _num(x["perplexity"], ".3f")),
    ]
    cells = [[what, *(cell(x) for x in d["sides"].values())] for what, cell in rows]
    for name in (d.get("bpb") or {}).get("change", {}):  # with --eval-data: bits per byte on val and each set
        cells.append([f"{name} bits/byte", *(_num(d["bpb"]["sides"][side][name], ".4f") for side in d["sides"])])
    return "classic (GPT-2) against modern (Qwen3-style)", ["", *d["sides"]], cells


def best_label(windows: dict | None, step: str, all_said: bool = False) -> str:
    """The best val loss's row label. That loss comes from the curve, evaluated on --eval-batches batches of
    the final loss's windows. The label says so when they are fewer than all of them."""
    every, curve = (windows or {}).get("all"), (windows or {}).get("curve")
    if every and curve == every:
        return f"best val loss ({step}, all windows)" if all_said else f"best val loss ({step})"
    if every and curve:
        return f"best val loss ({step}; curve: {curve:,} of {every:,} windows)"
    return f"best val loss ({step}; the curve's --eval-batches windows)"


def duel_sentence(d: dict) -> str:
    sooner = d["best_step_sooner"]
    when = f"{abs(sooner):.0f} steps {'sooner' if sooner >= 0 else 'later'}" if not math.isnan(sooner) else "—"
    said = f"modern vs classic: perplexity {100 * d['perplexity_change']:+.1f}%, best point reached {when}"
    if d.get("bpb"):  # each set's relative change in bits per byte, from the means over the seeds both finished
        changes = ", ".join(f"{name} {_pct(x)}" for name, x in d["bpb"]["change"].items())
        said += f"; bits per byte {changes}"
    return said + "."


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{100 * x:+.1f}%"


def power_table(info: dict) -> Table:
    return _cells_table(*power_cells(info))


def power_cells(info: dict) -> tuple[str, list[str], list[list[str]]]:
    """power's mde table as plain cells: its title, headers and rows. The terminal and the share page show them."""
    n = info["table_rows"]
    headers = ["seeds", f"one comparison (α {info['alpha']:g})", "over the sd's 95% CI"]
    headers += [f"a row of a {n}-row table (α/{n})", "over the sd's 95% CI"]
    rows = []
    for r in info["mde"]:
        cells = [str(r["seeds"])]
        for key in ("one_comparison", "table_row"):
            x = r[key]
            cells += [_num(x["mde"], ".4f"), f"{_num(x['low'], '.4f')}–{_num(x['high'], '.4f')}"]
        rows.append(cells)
    return "mde: the smallest |Δ val| detected with 80% power (nats/token)", headers, rows


def power_sentences(info: dict) -> list[str]:
    p, seeds, planned = info["placebo"], info["seeds"], info["planned"]
    of = f" of the {planned} planned" if seeds < planned else ""
    if not info["mde"]:  # too few pairs: no sd, and no placebo check, worth a number
        return [
            f"{info['variant']}: {seeds}{of} seeds trained, and {info['pairs']} pair{'s' if info['pairs'] != 1 else ''} "
            "with the placebo init: too few "
            f"to measure a paired sd (at least {info['min_pairs']} pairs, {POWER_SEEDS} advised), so no mde and "
            "no placebo check are given; the notes below say which runs are missing, diverged or left out."
        ]
    check = (
        "inconclusive, as it should be: initialisation alone is not called an effect"
        if p["verdict"] == INCONCLUSIVE
        else f"{p['verdict']}: initialisation alone was called an effect, which happens in {info['alpha']:g} of "
        "measurements by chance; if it recurs, the runs are not reproducible"
    )
    return [
        f"{info['variant']}: val loss {_num(info['val_loss'], '.4f')} over {seeds}{of} seeds (spread "
        f"{_num(info['spread'], '.4f')}); paired sd between two weight inits on the same batches and evaluation "
        f"tokens: {_num(info['paired_sd'], '.4f')} nats (95% CI {_num(info['sd_ci'][0], '.4f')}–"
        f"{_num(info['sd_ci'][1], '.4f')} from {info['pairs']} pairs: the mde columns' ranges).",
        f"Placebo check: Δ {_num(p['delta_val'], '+.4f')} (95% CI [{_num(p['ci_low'], '+.4f')}, "
        f"{_num(p['ci_high'], '+.4f')}], p {_p(p['p'])}): {check}.",
        "Read: a component whose true effect is below a row's number is likely to come out inconclusive at that "
        "many seeds.",
        "Warning: rows that change the architecture can be several times noisier than two inits of one (on "
        "tinyshakespeare, SwiGLU on RoPE had a paired sd of 0.039 against 0.0083 for two inits); plan on the "
        "noisiest row you will ablate by measuring it: modern-gpt power --variant with that architecture (e.g. "
        "--variant rmsnorm+rope+swiglu), and read the ablation's own mde column.",
    ]


def _num(x, spec: str) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def cell(row: SummaryRow, name: str, fmt: str | None = None) -> str:
    """One cell of the table as printed. fmt is the column's (SummaryRow's metadata) unless given. It is a
    format spec, or a named cell that reads more than its own column."""
    fmt = fmt or next(f.metadata["fmt"] for f in fields(SummaryRow) if f.name == name)
    x = getattr(row, name)
    if fmt in ("variant", "verdict"):
        return x
    if fmt == "params":
        return f"{x:,}"
    if fmt == "mlp":
        return str(x)
    if fmt == "stable":
        return f"{row.stable}/{row.lrs}"
    if fmt == "val":
        val = _num(x, ".4f")
        return _val_cell(val, row)
    if fmt == "ci":
        return "" if math.isnan(row.ci_low) else f"[{row.ci_low:+.4f}, {row.ci_high:+.4f}]"
    if fmt == "pm":  # the compact table's Δ with its CI's half-width; an interval not centred on it, as it is
        low, high = row.ci_low, row.ci_high
        if math.isnan(low):
            return _num(x, "+.4f")
        if abs((low + high) / 2 - x) > 1e-9 * max(1.0, abs(x)):
            return f"{x:+.4f} [{low:+.4f}, {high:+.4f}]"
        return f"{x:+.4f} ± {(high - low) / 2:.4f}"
    if fmt == "p":
        return _p(x)
    if fmt == "need":
        return f">{MAX_PAIRS:,}" if x == math.inf else _num(x, ".0f")
    return _num(x, fmt)


def _columns(rep: Report) -> list:
    """The table's columns: SummaryRow's fields that have one. mlp with --match-params; lr and stable over a grid."""
    return table_columns(rep.spec.match_params, bool(rep.spec.lrs))


def _p(p: float) -> str:
    return "" if math.isnan(p) else "<0.0001" if p < 1e-4 else f"{p:.4f}"


VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "same": "bold blue", "inconclusive": "dim"}


def rich_table(rep: Report, compact: tuple[str, ...] = ()) -> Table:
    """The folder's table: every column, or compact. Compact leaves the columns named to summary.csv, the CI as ±."""
    from ..ablation.report import title  # here: it loads pandas, which `params` never needs

    table = Table(title=title(rep), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    columns = [f for f in _columns(rep) if f.name not in compact]
    headers = [(compact and COMPACT_HEADERS.get(f.name)) or f.metadata["header"] for f in columns]
    fmts = [(compact and COMPACT_FMTS.get(f.name)) or f.metadata["fmt"] for f in columns]
    for h in headers:
        table.add_column(h, justify="left" if h in ("variant", "verdict") else "right")
    if compact:
        left = [f.metadata["header"] for f in _columns(rep) if f.name in compact and f.name != "ci_low"]
        table.caption, table.caption_justify = f"{', '.join(left)}: in summary.csv, or a wider terminal", "left"
    plain = [[cell(row, f.name, fmt) for f, fmt in zip(columns, fmts, strict=True)] for row in rep.summary]
    for cells in plain:
        table.add_row(*(_styled(c) if f.name == "verdict" else c for f, c in zip(columns, cells, strict=True)))
    return unbreakable(table, headers, plain, text=("variant",))


# A terminal narrower than the full table gets a compact one: these columns are left to the files (summary.csv
# holds every column), and the Δ carries its 95% CI as ± (the paired t interval is symmetric about it); where
# that is still too wide (80 columns), params too.
COMPACT_LEAVES = (("train_loss", "spread", "ci_low", "secs", "seeds_needed"), ("params",))
COMPACT_HEADERS = {"delta_val": "Δ val ± 95% CI"}
COMPACT_FMTS = {"delta_val": "pm"}


def folder_table(console: Console, rep: Report) -> Table:
    """The table a terminal shows: the full one where it fits, else the compact one. A file, a pipe or a log
    always gets the full one."""
    table, leaves = rich_table(rep), ()
    if not console.is_terminal:
        return table
    for more in COMPACT_LEAVES:
        if _fits(console, table):
            break
        leaves += more
        table = rich_table(rep, compact=leaves)
    return table


def _fits(console: Console, table: Table) -> bool:
    """The table fits the terminal with its names folded as far as fit() folds them."""
    return _natural_width(console, table) - sum(c.width - c.min_width for c in table.columns) <= console.width


def _natural_width(console: Console, table: Table) -> int:
    return Measurement.get(console, console.options.update_width(10**5), table).maximum


def unbreakable(table: Table, headers: list[str], plain: list[list[str]], text: tuple[str, ...]) -> Table:
    """A table whose numbers are never cut. Each number column is as wide as its widest cell, never wrapped.
    Text columns (names: the first column of each header in text) fold where the terminal is narrow, down to
    10 characters or their own width. Widths are terminal cells: a CJK character or an emoji takes two. Widths
    are fixed here and by fit(). rich's own shrinking of a too-wide table dropped whole columns, names first,
    leaving numbers that belonged to no row. Print it with print_table."""
    names = {headers.index(h) for h in text if h in headers}  # a metric named "vs" is a number column
    for i, column in enumerate(table.columns):
        widest = max([cell_len(headers[i]), *(cell_len(r[i]) for r in plain)])
        column.width, column.min_width, column.no_wrap = widest, widest, True
        if i in names:  # min_width: how far fit() may fold it
            column.min_width, column.overflow, column.no_wrap = min(widest, 10), "fold", False
    return table


def fit(console: Console, table: Table) -> int:
    """The width to print an unbreakable table at. It is the terminal's where the name columns can fold to fit,
    the widest first, a cell at a time. Else it is the table's own, unfolded, as folding would not make it fit.
    crop=False then lets the terminal wrap the lines, and no column is lost."""

    def width() -> int:
        return Measurement.get(console, console.options.update_width(10**5), table).maximum

    full = width()
    if full - sum(c.width - c.min_width for c in table.columns) > console.width:
        return full  # too wide even with every name folded
    over = full - console.width
    text = [c for c in table.columns if c.min_width < c.width]
    while over > 0 and text:
        widest = max(text, key=lambda c: c.width)
        widest.width -= 1
        over -= 1
        text = [c for c in text if c.min_width < c.width]
    return max(console.width, width())


def print_table(console: Console, table: Table) -> None:
    """An unbreakable table at fit()'s width. The console is made that wide while it prints, then follows the
    terminal again. print's own width= is capped at the console's."""
    width, before = fit(console, table), console.__dict__.get("_width")
    console.width = width
    try:
        console.print(table, crop=False)
    finally:
        console._width = before  # None: the terminal's width, read again at each print


def print_notes(console: Console, notes: list[str]) -> None:
    """Footnotes as "- " items wrapped at the terminal's width, never inside a word. A path stays whole, to copy."""
    for note in notes:
        lines = textwrap.wrap(note, max(console.width - 2, 20), break_long_words=False, break_on_hyphens=False)
        console.print("- " + "\n  ".join(lines), highlight=False, markup=False, soft_wrap=True)


def _styled(verdict: str) -> str:
    return f"[{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]" if verdict else ""


def markdown(rep: Report) -> str:
    from ..ablation.report import title

    headers, cells = folder_cells(rep)
    lines = [
        f"**{title(rep)}**",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(" --- " for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    if rep.duel:
        lines += ["", duel_sentence(rep.duel)]
    if rep.metrics is not None:
        lines += ["", _metric_markdown(rep.metrics, report_metric_titles(rep.metrics, rep.design), skip=1).rstrip("\n")]
    return "\n".join(lines + [""] + [f"- {n}" for n in rep.notes]) + "\n"


def folder_cells(rep: Report) -> tuple[list[str], list[list[str]]]:
    """The full table's headers and plain cells, which the Markdown table and the share page show."""
    columns = _columns(rep)
    cells = [[cell(row, f.name, f.metadata["fmt"]) for f in columns] for row in rep.summary]
    return [f.metadata["header"] for f in columns], cells


def csv_text(summary: list[SummaryRow]) -> str:

    buf = io.StringIO()
    summary_frame(summary).to_csv(buf, index=False)
    return buf.getvalue()


def json_text(rep: Report) -> str:
    from ..ablation.report import title

    names = [r.variant for r in rep.summary]  # each row's reference by name, as summary.csv and judge give it
    rows = [
        {**r.to_dict(), "reference": None if math.isnan(r.reference) else names[int(r.reference)]} for r in rep.summary
    ]
    doc = {"title": title(rep), "rows": rows, "footnotes": rep.notes}
    if rep.duel:
        doc["duel"] = rep.duel
    if rep.metrics is not None:  # every metric judged as one family (--eval-data): the long form
        doc["metrics"] = {
            "names": list(rep.metrics.metrics),
            "alpha_shares": {"primary": rep.metrics.val_alpha, "others": rep.metrics.other_alpha},
            "rows": metrics_rows(rep.metrics),
            "signal_to_noise": [asdict(r) for r in rep.metrics.snr],
        }
    return to_json(doc)


# ---------------------------------------------------------------------------
# judge: the verdict table of runs modern-gpt did not train (judge.py)
# ---------------------------------------------------------------------------
def _val_cell(val: str, row) -> str:
    """A row's val cell: its mean, and how many of its runs diverged and how many failed (killed, an error).
    A resume treats them differently: a diverged run would diverge again; a failed one can be trained again."""
    errored = getattr(row, "errored", 0)
    diverged = row.diverged - errored
    kinds = [f"{n} {what}" for n, what in ((diverged, "diverged"), (errored, "failed")) if n]
    if not kinds:
        return val
    if not row.seeds:
        return " and ".join(what for n, what in ((diverged, "diverged"), (errored, "failed")) if n)
    return f"{val} ({', '.join(kinds)})"


def judge_cells(metric: str, rows: list[dict]) -> tuple[list[str], list[list[str]], dict[str, str]]:
    """judge's table as plain cells: its headers, each row's cells, and the number formats they share. The
    terminal, Markdown and the share page show them."""
    formats = _judge_formats(rows)
    return _judge_headers(metric), [_judge_cells(row, formats) for row in rows], formats


def _judge_headers(metric: str) -> list[str]:
    return [
        "variant",
        "vs",
        metric,
        f"Δ {metric}",
        "spread",
        "95% CI",
        "p",
        "p_adj",
        "verdict",
        "mde",
        "need",
        "pairs",
    ]


JUDGE_NUMBERS = {
    "mean": ("mean",),
    "delta": ("delta",),
    "spread": ("spread",),
    "ci": ("ci_low", "ci_high"),
    "mde": ("mde",),
}


def _judge_formats(rows: list[dict]) -> dict[str, str]:
    """Each number column's format, from its own values: a metric can be of any scale. The digits show its
    finest step to two significant digits. A mean's step is the smallest difference between two rows' means.
    A difference's (Δ, the CI's ends, spread, mde) is its smallest size. At least report's 4 decimals below 1,
    2 above. A step below 1e-7 is printed in powers of ten, in that column alone, with the digits that show it
    beside the column's largest number. Eight decimals printed an error rate of 3e-9 as 0.00000000. A step or
    size below ROUND_OFF of the means it comes from (not the table's largest) is float64's rounding, as
    0.1 + 0.2 + 0.3 against 0.3 + 0.2 + 0.1. It is no digit of the data, and chooses no format."""

    def scale(r: dict) -> float:
        m = r["mean"]
        return abs(m) if isinstance(m, float) and math.isfinite(m) else 0.0

    return {
        name: _format_of([(r[k], scale(r)) for k in keys for r in rows], name == "mean")
        for name, keys in JUDGE_NUMBERS.items()
    }


ROUND_OFF = 1e-12  # float64 holds about 16 digits; a mean of a few runs and a difference of two lose a few


def _format_of(values: list[tuple], differences: bool) -> str:
    """values: (a number, the size of the mean it comes from) pairs. differences: the steps between them count."""
    finite = sorted((x, sc) for x, sc in values if isinstance(x, float) and math.isfinite(x))
    sizes = [abs(x) for x, sc in finite if abs(x) > ROUND_OFF * sc]
    steps = (
        [b - a for (a, sa), (b, sb) in zip(finite, finite[1:], strict=False) if b - a > ROUND_OFF * max(sa, sb)]
        if differences
        else []
    )
    step = min(steps or sizes or [0.5])  # nothing but zeros (or round-off): report's 4 decimals
    if step >= 1e-7:
        return f".{max(4, 1 - math.floor(math.log10(step))) if step < 1 else 2}f"
    top = max(sizes, default=step)
    return f".{max(1, min(16, math.floor(math.log10(top)) - math.floor(math.log10(step)) + 1))}e"


def _judge_cells(row: dict, f: dict[str, str]) -> list[str]:
    mean = _num(row["mean"], f["mean"])
    if row["failed"]:
        mean = "failed" if not row["seeds"] else f"{mean} ({row['failed']} failed)"
    d = f["ci"]
    ci = "" if math.isnan(row["ci_low"]) else f"[{row['ci_low']:+{d}}, {row['ci_high']:+{d}}]"
    need = row["seeds_needed"]
    return [
        row["variant"] + (" (placebo)" if row["placebo"] and "placebo" not in row["variant"] else ""),
        row["reference"] or "",
        mean,
        _num(row["delta"], f"+{f['delta']}"),
        _num(row["spread"], f["spread"]),
        ci,
        _p(row["p"]),
        _p(row["p_adj"]),
        row["verdict"],
        _num(row["mde"], f["mde"]),
        f">{MAX_PAIRS:,}" if need == math.inf else _num(need, ".0f"),
        str(row["pairs"]) if row["reference"] else "",
    ]


def judge_table(design: Design, s: JudgeSettings, rows: list[dict], compact: tuple[str, ...] = ()) -> Table:
    """judge's table: every column, or compact as a folder's. Compact leaves the columns named to --format csv,
    the CI as ±."""
    from rich.markup import escape

    from ..verdict.judge import title as judge_title

    # names and the file's come from the user: "[" is text, never rich markup
    table = Table(title=escape(judge_title(design, s)), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    headers, plain, formats = judge_cells(s.metric, rows)
    if compact:
        left = [s.metric if h == "mean" else h for h in compact]
        headers, plain = _judge_compact(headers, plain, rows, formats, s.metric, left)
        table.caption, table.caption_justify = f"{', '.join(left)}: in --format csv, or a wider terminal", "left"
    for h in headers:
        table.add_column(escape(h), justify="left" if h in ("variant", "vs", "verdict") else "right")
    at = headers.index("verdict")
    for row, cells in zip(rows, plain, strict=True):
        cells = [escape(c) for c in cells]
        cells[at] = f"[{VERDICT_STYLE.get(row['verdict'], '')}]{row['verdict']}[/]" if row["verdict"] else ""
        table.add_row(*cells)
    return unbreakable(table, headers, plain, text=("variant", "vs"))


# As COMPACT_LEAVES, for judge's table ("mean": the metric's column); the CI is carried by the Δ as ±
JUDGE_LEAVES = (("spread", "p", "need", "pairs"), ("mean", "mde"))


def _judge_compact(headers, plain, rows, formats, metric, left):
    """The compact table's headers and cells. The columns left out and the CI go; the Δ has the CI's half-width."""
    keep = [i for i, h in enumerate(headers) if h not in (*left, "95% CI")]
    delta = headers.index(f"Δ {metric}")
    out = []
    for row, cells in zip(rows, plain, strict=True):
        cells = list(cells)
        low, high, d = row["ci_low"], row["ci_high"], formats["ci"]
        if not math.isnan(low) and abs((low + high) / 2 - row["delta"]) <= 1e-9 * max(1.0, abs(row["delta"])):
            cells[delta] = f"{cells[delta]} ± {(high - low) / 2:{d}}"
        elif not math.isnan(low):
            cells[delta] = f"{cells[delta]} {cells[headers.index('95% CI')]}"
        out.append([cells[i] for i in keep])
    headers = [f"Δ {metric} ± 95% CI" if i == delta else headers[i] for i in keep]
    return headers, out


def judged_table(console: Console, design: Design, s: JudgeSettings, rows: list[dict]) -> Table:
    """judge's table in a terminal: full where it fits, else compact. Every file or pipe gets the full one."""
    table, leaves = judge_table(design, s, rows), ()
    for more in JUDGE_LEAVES if console.is_terminal else ():
        if _fits(console, table):
            break
        leaves += more
        table = judge_table(design, s, rows, compact=leaves)
    return table


def judge_markdown(design: Design, s: JudgeSettings, rows: list[dict], notes: list[str]) -> str:
    from ..verdict.judge import title as judge_title

    headers, plain, _ = judge_cells(s.metric, rows)
    lines = [
        f"**{judge_title(design, s)}**",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(" --- " for _ in headers) + "|",
    ]
    # a name's "|" would end its cell: escaped, as Markdown tables allow
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in plain]
    return "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"


# ---------------------------------------------------------------------------
# judge with several --metric columns: a compact block per metric, the long form in the files
# ---------------------------------------------------------------------------
def metrics_rows(result) -> list[dict]:
    """The long form: one row per (variant, metric), as judge_metrics gives it."""
    return result.table.to_dict("records")


def _metric_blocks(result) -> list[tuple[str, list[dict]]]:
    rows = metrics_rows(result)
    return [(m, [dict(r, spread=math.nan) for r in rows if r["metric"] == m]) for m in result.metrics]


def _metric_title(design: Design, s: JudgeSettings, result, k: int, metric: str) -> str:
    from ..verdict.judge import title as judge_title

    share = result.val_alpha if k == 0 else result.other_alpha
    what = "primary" if k == 0 else f"metric {k + 1} of {len(result.metrics)}"
    return f"{judge_title(design, replace(s, metric=metric))}; {what}, alpha share {share:.3g}"


def _metric_cells(row: dict, f: dict[str, str]) -> list[str]:
    d = f["ci"]
    delta = _num(row["delta"], f"+{f['delta']}")
    low, high = row["ci_low"], row["ci_high"]
    if not math.isnan(low):
        centred = abs((low + high) / 2 - row["delta"]) <= 1e-9 * max(1.0, abs(row["delta"]))
        delta += f" ± {(high - low) / 2:{d}}" if centred else f" [{low:+{d}}, {high:+{d}}]"
    return [
        row["variant"] + (" (placebo)" if row["placebo"] and "placebo" not in row["variant"] else ""),
        row["reference"] or "",
        _num(row["mean"], f["mean"]),
        delta,
        _p(row["p_adj"]),
        row["verdict"],
        _num(row["mde"], f["mde"]),
        str(row["pairs"]) if row["reference"] and row["pairs"] else "",
    ]


def _metric_headers(metric: str) -> list[str]:
    return ["variant", "vs", metric, f"Δ {metric} ± 95% CI", "p_adj", "verdict", "mde", "pairs"]


def metrics_tables(design: Design, s: JudgeSettings, result) -> list[Table]:
    """A compact table per metric. The long form's p, p_same and sd are in --format csv and json."""
    titles = [_metric_title(design, s, result, k, m) for k, m in enumerate(result.metrics)]
    return _metric_tables(result, titles)


def report_metric_titles(result, design: Design) -> list[str]:
    """Each metric's title, for a results folder's metric blocks after its verdict table (val_loss's). It gives
    the metric's alpha share: all of alpha where val's share passed on (verdict/metrics.py decides)."""
    share = f"{design.alpha:g} (val's passed on)" if result.passed_on else f"{result.other_alpha:.3g}"
    n = len(result.metrics)
    return [
        f"{m}, metric {k + 1} of {n}: paired Δ against each row's reference; alpha share {share}"
        for k, m in enumerate(result.metrics)
    ][1:]


def report_metric_tables(result, design: Design) -> list[Table]:
    """The further metrics of a folder judged with --eval-data sets. A compact table each, after val's."""
    return _metric_tables(result, report_metric_titles(result, design), skip=1)


def metric_plain(result, skip: int = 0) -> list[tuple[list[dict], list[str], list[list[str]]]]:
    """Each metric's block after the first `skip`: its rows, headers and plain cells. The terminal's and the
    share page's tables are both drawn from these."""
    out = []
    for metric, rows in _metric_blocks(result)[skip:]:
        formats = _judge_formats(rows)
        out.append((rows, _metric_headers(metric), [_metric_cells(row, formats) for row in rows]))
    return out


def _metric_tables(result, titles: list[str], skip: int = 0) -> list[Table]:
    from rich.markup import escape

    tables = []
    for title, (rows, headers, plain) in zip(titles, metric_plain(result, skip), strict=True):
        title = escape(title)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for h in headers:
            table.add_column(escape(h), justify="left" if h in ("variant", "vs", "verdict") else "right")
        for row, cells in zip(rows, plain, strict=True):
            cells = [escape(c) for c in cells]
            style = VERDICT_STYLE.get(row["verdict"])  # "not tested" has none
            cells[5] = f"[{style}]{row['verdict']}[/]" if style else escape(row["verdict"])
            table.add_row(*cells)
        tables.append(unbreakable(table, headers, plain, text=("variant", "vs")))
    return tables


def metrics_markdown(design: Design, s: JudgeSettings, result, notes: list[str]) -> str:
    titles = [_metric_title(design, s, result, k, m) for k, m in enumerate(result.metrics)]
    return _metric_markdown(result, titles) + "\n".join(f"- {n}" for n in notes) + "\n"


def _metric_markdown(result, titles: list[str], skip: int = 0) -> str:
    lines = []
    for title, (metric, rows) in zip(titles, _metric_blocks(result)[skip:], strict=True):
        headers, formats = _metric_headers(metric), _judge_formats(rows)
        lines += [f"**{title}**", ""]
        lines += ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _metric_cells(r, formats)) + " |" for r in rows]
        lines.append("")
    return "\n".join(lines) + "\n"


def metrics_json(design: Design, s: JudgeSettings, result, notes: list[str]) -> str:
    from ..verdict.judge import title as judge_title

    doc = {
        "title": judge_title(design, s),
        "metrics": list(result.metrics),
        "alpha_shares": {"primary": result.val_alpha, "others": result.other_alpha},
        "rows": metrics_rows(result),
        "signal_to_noise": [asdict(r) for r in result.snr],
        "footnotes": notes,
    }
    return to_json(doc)


def judge_csv(rows: list[dict]) -> str:
    import pandas as pd

    buf = io.StringIO()
    pd.DataFrame(rows).to_csv(buf, index=False)
    return buf.getvalue()


def judge_json(design: Design, s: JudgeSettings, rows: list[dict], notes: list[str]) -> str:
    from ..verdict.judge import title as judge_title

    doc = {"title": judge_title(design, s), "metric": s.metric, "higher_is_better": s.higher_is_better}
    return to_json({**doc, "rows": rows, "footnotes": notes})


# ---------------------------------------------------------------------------
# The scale table (modern-gpt scale, report of a ladder folder, judge --compute-col)
# ---------------------------------------------------------------------------
def _k(k: float, low: float, high: float) -> str:
    """k with its CI, in as many digits as the interval's width needs. Never cut: the table wraps instead."""
    if not math.isfinite(k):
        return ""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{k:.3g}"
    if not all(1e-3 <= abs(x) < 1e4 for x in (k, low, high) if x != 0):  # far from 1 (an extrapolation): powers of ten
        return f"{k:.3g} ({low:.3g}–{high:.3g})"
    digits = 2 if high - low >= 0.1 else 3
    return f"{k:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def _flops(x: float) -> str:
    return f"{x:.2g}" if math.isfinite(x) else ""


def _crossover(row) -> str:
    if not math.isfinite(row.crossover):
        return ""
    ends = f" ({_flops(row.crossover_low)}–{_flops(row.crossover_high)})" if math.isfinite(row.crossover_low) else ""
    return f"{_flops(row.crossover)}{ends}"


def ladder_headers(rep) -> list[str]:
    rungs = [f"k at {name}" for name in rep.design.rungs]
    target = [f"k at {rep.design.target:.2g}"] if rep.design.target is not None else []
    return ["variant", "vs", *rungs, "k (ladder)", "verdict", "k ×/10× C", "trend", "crossover C", *target]


def ladder_cells(rep) -> list[list[str]]:
    out = []
    for row in rep.rows:
        rungs = [_k(r["k"], r["k_low"], r["k_high"]) for r in row.rungs]
        target = [_k(row.k_target, row.k_target_low, row.k_target_high)] if rep.design.target is not None else []
        out.append(
            [
                row.variant,
                row.reference,
                *rungs,
                _k(row.k, row.k_low, row.k_high),
                row.verdict,
                _k(row.trend_per_10x, row.trend_low, row.trend_high),
                row.trend,
                _crossover(row),
                *target,
            ]
        )
    return out


def ladder_title(rep) -> str:
    """The scale table's title; judge --size-col's k is in units of that column, not compute."""
    d, size = rep.design, getattr(rep, "size_col", None)
    n, axis = len(d.seeds), "compute" if size is None else size
    return (
        f"{'compute' if size is None else 'size'} multiplier k on {d.source or 'the runs'}: {len(d.rungs)} rungs "
        f"({', '.join(d.rungs)}), {n} seed{'s' if n != 1 else ''}; k > 1: the reference needs k times the {axis} "
        "to reach the row's loss"
    )


def ladder_table(rep, compact: tuple[str, ...] = ()) -> Table:
    """The scale table: every column, or compact. Compact leaves the columns named to the CSV ("k at": each rung's)."""
    table = Table(title=ladder_title(rep), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    headers, plain = ladder_headers(rep), ladder_cells(rep)
    if compact:
        keep = [
            i for i, h in enumerate(headers) if h not in compact and not ("k at" in compact and h.startswith("k at "))
        ]
        headers, plain = [headers[i] for i in keep], [[cells[i] for i in keep] for cells in plain]
        left = ", ".join("k at each rung" if h == "k at" else h for h in compact)
        table.caption, table.caption_justify = f"{left}: in --format csv, or a wider terminal", "left"
    for h in headers:
        table.add_column(h, justify="left" if h in ("variant", "vs", "verdict", "trend") else "right")
    styled = {
        "better": "[green]better[/]",
        "worse": "[red]worse[/]",
        "grows": "[green]grows[/]",
        "shrinks": "[red]shrinks[/]",
    }
    for cells in plain:
        table.add_row(
            *(styled.get(c, c) if h in ("verdict", "trend") else c for h, c in zip(headers, cells, strict=True))
        )
    return unbreakable(table, headers, plain, text=())  # nothing folds: wider than the terminal, the lines wrap


def scale_table(console: Console, rep) -> Table:
    """The scale table in a terminal: full where it fits, else compact. Every file or pipe gets the full one."""
    table, leaves = ladder_table(rep), ()
    for more in LADDER_LEAVES if console.is_terminal else ():
        if _fits(console, table):
            break
        leaves += more
        table = ladder_table(rep, compact=leaves)
    return table


LADDER_LEAVES = (("k at", "crossover C"), ("k ×/10× C",))  # as COMPACT_LEAVES, for the scale table


def ladder_markdown(rep) -> str:
    headers, rows = ladder_headers(rep), ladder_cells(rep)
    lines = [f"**{ladder_title(rep)}**", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join([*lines, "", *(f"- {n}" for n in rep.notes)]) + "\n"


def ladder_rows(rep) -> list[dict]:
    return [{**row.cells(), "placebo": row.placebo, "rungs": row.rungs} for row in rep.rows]


def ladder_json(rep) -> str:
    d = rep.design
    doc = {
        "title": ladder_title(rep),
        "rungs": list(d.rungs),
        "seeds": list(d.seeds),
        "alpha": d.alpha,
        "rows": ladder_rows(rep),
        "footnotes": rep.notes,
    }
    if getattr(rep, "metrics", ()):  # with --eval-data: k per further metric, descriptive (no verdict)
        doc["metrics"] = list(rep.metrics)
    return to_json(doc)


def ladder_csv(rep) -> str:
    import pandas as pd

    return pd.DataFrame([row.cells() for row in rep.rows]).to_csv(index=False)


# ---------------------------------------------------------------------------
# judge on published runs: logs, unpaired runs, threshold claims (verdict/unpaired.py)
# ---------------------------------------------------------------------------
PUBLISHED_SHOWN = (  # (row key, header, format); a column shows where some row has it
    ("variant", "variant", "s"),
    ("runs", "runs", "d"),
    ("steps", "steps", "g"),
    ("mean", "mean", ".4f"),
    ("sd", "sd", ".4f"),
    ("vs", "vs", "s"),
    ("delta", "Δ", "+.4f"),
    ("ci", "95% CI", "ci"),
    ("p_adj", "p_adj", ".4f"),
    ("verdict", "verdict", "s"),
    ("mde", "mde", ".4f"),
    ("need", "need", "g"),
    ("p_target_adj", "p_target_adj", ".4f"),
    ("claim", "claim", "s"),
    ("power", "power", ".2f"),
    ("runs_needed", "runs needed", "g"),
)


def _published_cell(row: dict, key: str, fmt: str) -> str:
    if key == "ci":
        lo, hi = row.get("ci_low"), row.get("ci_high")
        return f"[{lo:+.4f}, {hi:+.4f}]" if lo is not None and math.isfinite(lo) else ""
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if fmt == "s":
        return str(v)
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    return format(int(v) if fmt in ("d", "g") and float(v).is_integer() else v, fmt)


def _published_columns(rows: list[dict]) -> list[tuple[str, str, str]]:
    """The columns some row has a value in. A table of threshold claims alone shows no Δ."""
    return [c for c in PUBLISHED_SHOWN if any(_published_cell(r, c[0], c[2]) for r in rows)]


def published_table(title: str, rows: list[dict]) -> Table:
    from rich.markup import escape

    cols = _published_columns(rows)
    table = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for _, header, fmt in cols:
        table.add_column(escape(header), justify="left" if fmt == "s" else "right")
    plain = [[_published_cell(r, k, f) for k, _, f in cols] for r in rows]
    for cells in plain:
        shown = [escape(c) for c in cells]
        for i, (k, _, _) in enumerate(cols):
            if k in ("verdict", "claim") and cells[i]:
                style = {**VERDICT_STYLE, "holds": "bold green", "not shown": "dim"}.get(cells[i], "")
                shown[i] = f"[{style}]{escape(cells[i])}[/]"
        table.add_row(*shown)
    return unbreakable(table, [h for _, h, _ in cols], plain, text=("variant", "vs"))


def published_markdown(title: str, rows: list[dict], notes: list[str]) -> str:
    cols = _published_columns(rows)
    lines = [
        f"**{title}**",
        "",
        "| " + " | ".join(h for _, h, _ in cols) + " |",
        "|" + "|".join(" --- " for _ in cols) + "|",
    ]
    lines += ["| " + " | ".join(_published_cell(r, k, f).replace("|", "\\|") for k, _, f in cols) + " |" for r in rows]
    return "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"
