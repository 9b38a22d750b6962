"""k on the further metrics of a ladder (--eval-data sets): each set's loss and ctx2x_loss, read as val's k is.

The same fit, jackknife and CI as the scale table's (verdict/ladder.py), run on another loss column. The further
metrics' k are descriptive: each with its 95% CI, and no verdict. The scale table's verdicts are val's alone,
their error control unchanged. A verdict per further metric would need alpha shared across metrics. Then val's
share would shrink, and its table would change. icl_gain is a difference of two losses, not a loss that falls
with compute, so it is not read as k.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .ladder import LadderDesign, LadderError, ladder_table

NOT_K = ("icl_gain",)  # a difference of losses (late band minus early band): no loss-compute curve to read it on


def further_metrics(columns, sets: list[str]) -> list[str]:
    """The metrics read as k besides val that the runs hold: each set's loss, then ctx2x_loss."""
    wanted = [f"{name}_loss" for name in sets] + ["ctx2x_loss"]
    return [m for m in wanted if m in set(columns)] if sets else []


def metric_ks(design: LadderDesign, runs: pd.DataFrame, names: list[str]) -> tuple[list[dict], list[str]]:
    """Per metric: {metric, rows: [{variant, reference, k, k_low, k_high, rungs}]}, a row each compared row. Or
    the one footnote that says why no k is read. Then the footnotes: the rule once, then one per metric without k."""
    out, notes = [], []
    for name in names:
        why = _no_k(design, runs, name)
        if why is None:
            try:
                table, _ = ladder_table(design, runs.assign(val_loss=runs[name].astype(float)))
            except LadderError as e:
                why = f"no k is read: {str(e).rstrip('.').replace('val loss', name)}"
        if why is not None:
            notes.append(f"{name}: {why}.")
            continue
        rows = [
            {
                "variant": r.variant,
                "reference": r.reference,
                "k": r.k,
                "k_low": r.k_low,
                "k_high": r.k_high,
                "rungs": r.rungs,
            }
            for r in table
            if r.reference
        ]
        out.append({"metric": name, "rows": rows})
    if out:
        notes.insert(0, _rule(out))
    return out, notes


def _rule(blocks: list[dict]) -> str:
    lines = "; ".join(
        f"{b['metric']}: " + ", ".join(f"{r['variant']} vs {r['reference']} k {_k(r)}" for r in b["rows"])
        for b in blocks
    )
    return (
        f"k on the further metrics (--eval-data), descriptive: {lines}. Each is read as val's k is (same fit, "
        "jackknife and 95% CI), with no verdict: only val's k is judged, and the table's error control is val's "
        "alone; a CI that excludes 1 here is not a claim. icl_gain is a difference of losses, not read as k."
    )


def _k(r: dict) -> str:
    if not math.isfinite(r["k"]):
        return "—"
    ci = f" ({r['k_low']:.3g}–{r['k_high']:.3g})" if math.isfinite(r["k_low"]) and math.isfinite(r["k_high"]) else ""
    return f"{r['k']:.3g}{ci}"


def _no_k(design: LadderDesign, runs: pd.DataFrame, name: str) -> str | None:
    """Why the metric gives no k, or None. A row may have no value at some rung: ctx2x_loss at a learned position
    table's wall. Or a reference's mean may not fall as compute grows across the rungs."""
    ok = runs[~runs["failed"].astype(bool)]
    values = ok[name].astype(float)
    for i, row in enumerate(design.rows):
        for j, rung in enumerate(design.rungs):
            cell = values[(ok["row"] == i) & (ok["rung"] == j)]
            if not np.isfinite(cell).any():
                return f"{row.name} has no value at rung {rung} (runs.csv; a run file's metric_notes say why), so no k"
    for i in sorted({r.reference for r in design.rows if r.reference is not None}):
        means = [values[(ok["row"] == i) & (ok["rung"] == j)].mean() for j in range(len(design.rungs))]
        if not np.all(np.diff(means) < 0):
            shown = ", ".join(f"{x:.4g}" for x in means)
            return (
                f"{design.rows[i].name}'s mean does not fall as compute grows across the rungs ({shown}), so no "
                "loss-compute curve maps it to a compute and no k is read"
            )
    return None
