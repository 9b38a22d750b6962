"""From a results folder's runs to the table a researcher reads: summary rows, footnotes, and renderings.

Everything here is computed from meta.json and runs.csv alone, so `modern-gpt report DIR`
shows exactly what `modern-gpt ablate` showed.
"""

from __future__ import annotations

import io
import json
import math

import pandas as pd
from rich import box
from rich.table import Table

from .results import SUMMARY_COLUMNS, ResultsDir, failed
from .stats import holm, mean, paired, spread, verdict

FORMATS = ("table", "markdown", "csv", "json")
PARAM_MISMATCH = 0.02  # a row whose parameters differ from the first row's by more than this is flagged
MEMORISED_VAL = 0.1  # nats/token: a val loss this low on text means it was learnt by heart
MEMORISED_GAP = 0.5  # nats: val - train beyond this means the training split was memorised
VERDICT_RULE = (
    "verdict: better/worse only when every seed's paired difference has the same sign, its mean exceeds the "
    "reference row's seed spread, and the 95% CI excludes 0; otherwise noise."
)


def summarize(meta: dict, runs: pd.DataFrame) -> list[dict]:
    """One dict per table row (the columns of summary.csv)."""
    variants = meta["variants"]
    good = {i: {} for i in range(len(variants))}  # row -> {seed: run} for runs that finished well
    failures = {i: 0 for i in range(len(variants))}
    for (_, r), bad in zip(runs.iterrows(), failed(runs), strict=True):
        if bad:
            failures[int(r["row"])] += 1
        else:
            good[int(r["row"])][int(r["seed"])] = r
    rows, p_values = [], []
    for i, v in enumerate(variants):
        mine = good[i]
        vals = [r["val_loss"] for r in mine.values()]
        row = {
            "variant": v["name"],
            "params": v["params"],
            "train_loss": mean([r["train_loss"] for r in mine.values()]),
            "val_loss": mean(vals),
            "delta_val": math.nan,
            "spread": spread(vals),
            "ci_low": math.nan,
            "ci_high": math.nan,
            "verdict": "",
            "secs": mean([r["secs"] for r in mine.values()]),
            "val_bpc": mean([r["val_bpc"] for r in mine.values()]),
            "tokens_per_s": mean([r["tokens_per_s"] for r in mine.values()]),
            "kv_cache_bytes_per_token": v["kv_cache_bytes_per_token"],
            "p_holm": math.nan,
            "row": i,
            "components": "+".join(v["components"]),
            "reference": v["reference"] if v["reference"] is not None else math.nan,
            "mlp_hidden": v["hidden"],
            "seeds": len(mine),
            "diverged": failures[i],
            "epochs": mean([r["epochs"] for r in mine.values()]),
        }
        p = math.nan
        ref = v["reference"]
        if ref is not None:
            theirs = good[ref]
            common = sorted(set(mine) & set(theirs))
            deltas = [mine[s]["val_loss"] - theirs[s]["val_loss"] for s in common]
            if deltas:
                st = paired(deltas)
                ref_spread = spread([r["val_loss"] for r in theirs.values()])
                row.update(delta_val=st.delta, ci_low=st.ci_low, ci_high=st.ci_high)
                row["verdict"] = verdict(deltas, ref_spread, st)
                p = st.p_value
        p_values.append(p)
        rows.append(row)
    for row, p in zip(rows, holm(p_values), strict=True):
        row["p_holm"] = p
    return rows


def footnotes(meta: dict, runs: pd.DataFrame, summary: list[dict], folder: str = "") -> list[str]:
    """The warnings a careful reader needs: one seed, parameter mismatch, memorisation, diverged or missing runs."""
    notes = []
    seeds = meta["spec"]["seeds"]
    if len(seeds) == 1:
        notes.append(
            "One seed: every verdict is noise, because a difference cannot be told from seed noise without several seeds; use --seeds 3 or more."
        )
    base = summary[0]
    for row in summary[1:]:
        gap = (row["params"] - base["params"]) / base["params"]
        if abs(gap) > PARAM_MISMATCH:
            ref = summary[int(row["reference"])]
            against_ref = (row["params"] - ref["params"]) / ref["params"]
            also = f" ({100 * against_ref:+.1f}% against its reference {ref['variant']})" if ref is not base else ""
            notes.append(
                f"Parameter mismatch: {row['variant']} has {row['params']:,} parameters, {100 * gap:+.1f}% against "
                f"{base['variant']}{also}: part of a delta may be size, not architecture; --match-params equalises them."
            )
    for row in summary:
        mine = runs[runs["row"] == row["row"]]
        reasons = []
        if len(mine) and mine["epochs"].max() > 1:
            reasons.append(f"its runs saw {mine['epochs'].max():.1f} epochs of the training split")
        if row["val_loss"] < MEMORISED_VAL:
            reasons.append(f"its val loss is {row['val_loss']:.3f} nats/token")
        if row["val_loss"] - row["train_loss"] > MEMORISED_GAP:
            reasons.append(f"val - train is {row['val_loss'] - row['train_loss']:.2f} nats")
        if reasons:
            notes.append(f"Memorisation risk: {row['variant']}: {'; '.join(reasons)}. Use more text or fewer steps.")
    ordered = runs.sort_values(["row", "seed"])
    for _, r in ordered[failed(ordered)].iterrows():
        what = r["error"] or f"diverged (loss NaN or infinite) after {int(r['steps_done'])} steps"
        notes.append(f"{r['variant']}, seed {int(r['seed'])}: {what}; left out of the means.")
    expected = len(summary) * len(seeds)
    if len(runs) < expected:
        where = f" {folder}" if folder else " DIR"
        notes.append(
            f"{expected - len(runs)} of {expected} runs have not finished; finish them with: modern-gpt ablate --resume{where}"
        )
    notes.append(VERDICT_RULE)
    return notes


def load(folder) -> tuple[dict, list[dict], list[str], dict | None]:
    """meta.json, the summary rows, the footnotes and (for a duel) its figures, from the folder's files alone."""
    results = ResultsDir(folder)
    meta = results.read_meta()
    runs = results.runs()
    summary = summarize(meta, runs)
    duel_info = duel(meta, runs) if meta["spec"]["plan"] == "duel" else None
    return meta, summary, footnotes(meta, runs, summary, str(folder)), duel_info


def write(folder, draw: bool = True) -> None:
    """summary.csv (and, with draw, curves.png) from the runs the folder holds."""
    results = ResultsDir(folder)
    meta = results.read_meta()
    results.write_summary(summarize(meta, results.runs()))
    if draw:
        plot(folder)


def plot(folder):
    """Draw curves.png from the folder's files; returns its path."""
    from .plot import plot_curves

    results = ResultsDir(folder)
    return plot_curves(results.read_meta(), results.runs(), results.curves(), results.path / "curves.png")


# ---------------------------------------------------------------------------
# The duel: all classic against all modern
# ---------------------------------------------------------------------------
def duel(meta: dict, runs: pd.DataFrame) -> dict:
    """Per architecture: params, best val loss and its step, val bits/char, perplexity; and the relative
    perplexity change exp(mean paired delta) - 1, which is perplexity(modern) / perplexity(classic) - 1."""
    good = runs[~failed(runs)]
    sides = {}
    for row, v in enumerate(meta["variants"]):
        mine = good[good["row"] == row]
        sides[v["name"]] = {
            "params": v["params"],
            "val_loss": mean(list(mine["val_loss"])),
            "best_val_loss": mean(list(mine["best_val_loss"])),
            "best_step": mean(list(mine["best_step"])),
            "val_bpc": mean(list(mine["val_bpc"])),
            "perplexity": math.exp(mean(list(mine["val_loss"]))) if len(mine) else math.nan,
        }
    classic = good[good["row"] == 0].set_index("seed")["val_loss"]
    modern = good[good["row"] == 1].set_index("seed")["val_loss"]
    deltas = list((modern - classic).dropna())
    return {
        "sides": sides,
        "perplexity_change": math.exp(mean(deltas)) - 1 if deltas else math.nan,
        "best_step_sooner": sides["classic"]["best_step"] - sides["modern"]["best_step"],
    }


def duel_table(meta: dict, d: dict) -> Table:
    table = Table(
        title="classic (GPT-2) against modern (Llama-style)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    table.add_column("")
    for name in d["sides"]:
        table.add_column(name, justify="right")
    rows = [
        ("params", lambda x: f"{x['params']:,}"),
        ("val loss", lambda x: _num(x["val_loss"], ".4f")),
        ("best val loss (mean step)", lambda x: f"{_num(x['best_val_loss'], '.4f')} ({_num(x['best_step'], '.0f')})"),
        ("val bits/char", lambda x: _num(x["val_bpc"], ".4f")),
        ("perplexity", lambda x: _num(x["perplexity"], ".3f")),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(x) for x in d["sides"].values()))
    return table


def duel_sentence(d: dict) -> str:
    sooner = d["best_step_sooner"]
    when = f"{abs(sooner):.0f} steps {'sooner' if sooner >= 0 else 'later'}" if not math.isnan(sooner) else "—"
    return f"modern vs classic: perplexity {100 * d['perplexity_change']:+.1f}%, best point reached {when}."


def title(meta: dict) -> str:
    spec, s = meta["spec"], meta["spec"]["settings"]
    seeds = spec["seeds"]
    t = s["train"]
    what = "classic-vs-modern duel" if spec["plan"] == "duel" else f"{spec['plan']} ablation"
    return (
        f"{what} on {spec['data_name']} ({s['data']['tokenizer']} tokens): {len(seeds)} seed"
        f"{'s' if len(seeds) != 1 else ''}, {t['steps']} steps of {t['batch_size']}x{s['model']['context']} tokens, "
        f"dim {s['model']['dim']}, {s['model']['layers']} layers"
    )


# ---------------------------------------------------------------------------
# Renderings
# ---------------------------------------------------------------------------
def _num(x, spec: str) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _cells(row: dict, show_mlp: bool) -> list[str]:
    val = _num(row["val_loss"], ".4f")
    if row["diverged"]:
        val = "diverged" if not row["seeds"] else f"{val} ({row['diverged']} diverged)"
    ci = "" if math.isnan(row["ci_low"]) else f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"
    cells = [row["variant"], f"{row['params']:,}"]
    if show_mlp:
        cells.append(str(row["mlp_hidden"]))
    return cells + [
        _num(row["train_loss"], ".4f"),
        val,
        _num(row["delta_val"], "+.4f"),
        _num(row["spread"], ".4f"),
        ci,
        row["verdict"],
        _num(row["secs"], ".1f"),
    ]


def _headers(show_mlp: bool) -> list[str]:
    cols = ["variant", "params"] + (["mlp"] if show_mlp else [])
    return cols + ["train", "val", "Δ val", "spread", "95% CI", "verdict", "secs"]


VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "noise": "dim"}


def rich_table(meta: dict, summary: list[dict]) -> Table:
    show_mlp = meta["spec"]["match_params"]
    table = Table(title=title(meta), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for h in _headers(show_mlp):
        table.add_column(h, justify="left" if h in ("variant", "verdict") else "right")
    for row in summary:
        cells = _cells(row, show_mlp)
        cells[-2] = f"[{VERDICT_STYLE.get(row['verdict'], '')}]{row['verdict']}[/]" if row["verdict"] else ""
        table.add_row(*cells)
    return table


def markdown(meta: dict, summary: list[dict], notes: list[str], duel_info: dict | None = None) -> str:
    show_mlp = meta["spec"]["match_params"]
    headers = _headers(show_mlp)
    lines = [
        f"**{title(meta)}**",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(" --- " for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(_cells(row, show_mlp)) + " |" for row in summary]
    if duel_info:
        lines += ["", duel_sentence(duel_info)]
    return "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"


def csv_text(summary: list[dict]) -> str:
    buf = io.StringIO()
    pd.DataFrame(summary, columns=SUMMARY_COLUMNS).to_csv(buf, index=False)
    return buf.getvalue()


def _clean(x):
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    return None if isinstance(x, float) and math.isnan(x) else x


def json_text(meta: dict, summary: list[dict], notes: list[str], duel_info: dict | None = None) -> str:
    doc = {"title": title(meta), "rows": [_clean(row) for row in summary], "footnotes": notes}
    if duel_info:
        doc["duel"] = _clean(duel_info)
    return json.dumps(doc, indent=2)
