"""`modern-gpt judge FILE` and `modern_gpt.judge(df)`: the verdict table for runs that modern-gpt did not train.

A long table, one row per run (variant, seed, metric), becomes what a results folder gives report.py: a meta
dict (alpha, margin, the rows and their references) and a runs frame. report.summarize and report.footnotes
then compute the table exactly as for `modern-gpt report`, so that judge follows every change to the
statistics. What is judge's own is the input: it is checked cell by cell, and nothing is guessed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import UserError
from .design import ALPHA, Design, Row, SummaryRow, judge_columns
from .ladder_judge import LadderSettings, judge_ladder
from .reading import (
    _MISSING,
    DIVERGED,
    ERROR,
    JudgeSettings,
    Source,
    _failed_value,
    _flag,
    _listed,
    _message,
    _metric,
    _name,
    _number_or_empty,
    _order,
    _references,
    _seed,
    _shown,
    check_settings,
    from_frame,
    names,
    read_file,
)


def runs_from(source: Source, s: JudgeSettings) -> tuple[Design, pd.DataFrame]:
    """The Design and runs frame that the verdict engine (table.summarize, table.footnotes) reads, from a
    checked table."""
    check_settings(s)
    name = source.name
    for col, what in ((s.variant_col, "variant"), (s.seed_col, "seed"), (s.metric, "metric")):
        if col not in source.columns:
            raise UserError(
                f"{name}, {source.header}: no {what} column {col!r} (its columns: {_listed(source.columns)})."
            )
    markers = [c for c in (DIVERGED, ERROR) if c in source.columns and c not in (s.variant_col, s.seed_col, s.metric)]

    def cell(where, record, col, parse):
        try:
            return parse(record.get(col, _MISSING))
        except ValueError as e:
            why = "is missing" if col not in record else str(e)
            raise UserError(f"{name}, {where}, column {col}: {why}.") from None

    runs, first_seen, seen = [], {}, {}
    for where, record in source.records:
        variant = cell(where, record, s.variant_col, _name)
        seed = cell(where, record, s.seed_col, _seed)
        diverged = DIVERGED in markers and cell(where, record, DIVERGED, _flag)
        error = cell(where, record, ERROR, _message) if ERROR in markers else ""
        value = cell(where, record, s.metric, _metric if not (diverged or error) else _number_or_empty)
        if not math.isfinite(value) and not (diverged or error):
            raise UserError(
                f"{name}, {where}, column {s.metric}: {value} is not a finite number (a failed run is marked true in "
                f"a {DIVERGED} column, or has a message in an {ERROR} column)."
            )
        if (variant, seed) in seen:
            raise UserError(
                f"{name}, {where}, columns {s.variant_col} and {s.seed_col}: variant {variant!r}, seed {seed} is "
                f"already on {seen[variant, seed]}; give each run one row."
            )
        seen[variant, seed] = where
        first_seen.setdefault(variant, where)
        steps = _failed_value(record, "steps_done") if diverged and not error else math.nan
        if diverged and not error and not math.isfinite(steps):  # the footnote then says why it is left out
            error = f"marked diverged in column {DIVERGED}"
        runs.append(
            {"variant": variant, "seed": seed, "value": value, "diverged": diverged, "error": error, "steps": steps}
        )
    rows = _order(source, s, list(first_seen))
    _check_pairs(source, s, rows, runs)
    refs = _references(source, s, rows)
    return _design(source, s, rows, refs, runs), _runs_frame(s, rows, runs)


def _check_pairs(source: Source, s: JudgeSettings, rows: list[str], runs: list[dict]) -> None:
    """Every variant has a run (finished or failed) for every seed: pairs are never guessed."""
    seeds_of = {v: set() for v in rows}
    where_seed = {}
    for i, r in enumerate(runs):
        seeds_of[r["variant"]].add(r["seed"])
        where_seed.setdefault(r["seed"], (i, r["variant"]))
    wheres = [w for w, _ in source.records]
    for v in rows:
        for seed, (i, other) in where_seed.items():
            if seed not in seeds_of[v]:
                raise UserError(
                    f"{source.name}, {wheres[i]}, column {s.seed_col}: seed {seed} has a run of {other!r} and none "
                    f"of {v!r}; every variant needs a row for every seed (a failed run included), so that no pair "
                    "is guessed."
                )


def _design(source: Source, s: JudgeSettings, rows: list[str], refs: list, runs: list[dict]) -> Design:
    """The table's Design: the file's variants as rows (each with its reference, any other row, and the
    placebo marked), its seeds as labels that pair the runs, and judge's alpha and margin."""
    table = [Row(v, ref, placebo=v == s.placebo) for v, ref in zip(rows, refs, strict=True)]
    seeds = sorted({r["seed"] for r in runs})
    return Design(table, seeds, s.alpha, s.margin, any_reference=True, source=source.name)


def _runs_frame(s: JudgeSettings, rows: list[str], runs: list[dict]) -> pd.DataFrame:
    """The verdict engine's runs: the metric as val_loss (negated when higher is better: summarize reads lower
    as better); a run has no training columns."""
    index = {v: i for i, v in enumerate(rows)}
    sign = -1.0 if s.higher_is_better else 1.0
    frame = pd.DataFrame(
        {
            "row": [index[r["variant"]] for r in runs],
            "variant": [r["variant"] for r in runs],
            "seed": [r["seed"] for r in runs],
            "val_loss": [sign * r["value"] for r in runs],
            "diverged": [bool(r["diverged"]) for r in runs],
            "error": [r["error"] for r in runs],
            "steps_done": [r["steps"] for r in runs],
        }
    )
    return frame.sort_values(["row", "seed"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------
# The table: report's statistics, shown in the metric's own direction
# ---------------------------------------------------------------------------
def _honest(row: SummaryRow, flip: bool) -> SummaryRow:
    """A summary row in the metric's direction: with higher-is-better the mean, Δ and CI were computed on the
    negated metric, so they are negated back (and the CI's ends swapped); p-values, sds and mde are unsigned."""
    if not flip:
        return row
    return row.with_(val_loss=-row.val_loss, delta_val=-row.delta_val, ci_low=-row.ci_high, ci_high=-row.ci_low)


def _in_units(note: str, metric: str) -> str:
    """report's footnotes speak of the val loss in nats, and of ablate's flags; judge's of the metric, in its own
    units, and of the file's seeds."""
    note = note.replace("use --seeds 3 or more, or --seeds auto", "give every variant 3 or more seeds")
    if metric == "val_loss":
        return note
    return (
        note.replace("the val loss", metric).replace("val loss", metric).replace(" nats/token", "").replace(" nats", "")
    )


def _unmarked_placebo(design: Design) -> str | None:
    """A row named as modern-gpt names its placebo ('classic (placebo)' under 'classic') that --placebo does not
    name: judged as a component, it is the row above the next one, which report compares with the first row."""
    names = [r.name for r in design.rows]
    twin = f"{names[0]} (placebo)"
    if twin not in names or any(r.placebo for r in design.rows):
        return None
    at = names.index(twin)
    under = [r.name for r in design.rows if r.reference == at]
    also = f", and {_listed(under)} {'is' if len(under) == 1 else 'are'} compared with it" if under else ""
    return (
        f"{twin!r} is judged as a component row, not as a placebo: it is in Holm's family{also}; for the table "
        f"modern-gpt report gives from a results folder's runs.csv, add --placebo {twin!r}."
    )


def judge(design: Design, s: JudgeSettings, runs: pd.DataFrame) -> tuple[list[dict], list[str]]:
    """The table's rows (judge's columns, in its order) and its footnotes, from runs_from's design and runs."""
    from .table import footnotes, summarize

    metric, flip = s.metric, s.higher_is_better
    summary = [_honest(row, flip) for row in summarize(design, runs)]
    # the training footnotes (memorisation, parameter mismatch) have nothing to read: no train loss, no params
    quiet = [row.with_(val_loss=math.nan, train_loss=math.nan) for row in summary]
    notes = [_in_units(n, metric) for n in footnotes(design, runs, quiet)]
    unmarked = _unmarked_placebo(design)
    if unmarked:
        notes.insert(0, unmarked)
    if flip:
        notes.insert(
            0,
            f"Higher {metric} is better: means, Δ and CIs are {metric} as measured (a positive Δ is a gain); better "
            f"means a higher {metric}.",
        )
    names = [r.name for r in design.rows]
    rows = []
    for row, r in zip(summary, design.rows, strict=True):
        values = {**vars(row), "reference": names[r.reference] if r.reference is not None else None}
        rows.append({shown: values[name] for name, shown in judge_columns()})
    return rows, notes


def title(design: Design, s: JudgeSettings) -> str:
    direction = "higher is better" if s.higher_is_better else "lower is better"
    n = len(design.seeds)
    return (
        f"{s.metric} ({direction}) from {design.source}: {len(design.rows)} variants, {n} seed{'s' if n != 1 else ''}"
    )


def judge_file(path, s: JudgeSettings) -> tuple[Design, list[dict], list[str]]:
    """The design, the table's rows and its footnotes, for `modern-gpt judge FILE`."""
    check_settings(s)  # before the file is read
    design, runs = runs_from(read_file(path), s)
    rows, notes = judge(design, s, runs)
    return design, rows, notes + _folder_note(Path(path))


def _folder_note(path: Path) -> list[str]:
    """A results folder's runs.csv from a --seeds auto ablation is judged here at the fixed level, not against
    the boundary its ablation stopped on: say so, and name the command whose table is the folder's own."""
    try:
        spec = json.loads((path.parent / "meta.json").read_text(encoding="utf-8")).get("spec", {})
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(spec, dict) or spec.get("min_seeds") is None:  # min_seeds: only --seeds auto has them
        return []
    return [
        f"{path.parent}/meta.json says this folder was a --seeds auto ablation: judge tests every row at the fixed "
        f"level, not against the boundary the ablation stopped on; modern-gpt report {path.parent} gives its table."
    ]


def verdict(
    df: pd.DataFrame,
    *,
    variant_col: str = "variant",
    seed_col: str = "seed",
    metric: str = "val_loss",
    higher_is_better: bool = False,
    order: str | list[str] | None = None,
    reference: str | None = None,
    placebo: str | None = None,
    alpha: float = ALPHA,
    margin: float | None = None,
    compute_col: str | None = None,
    size_col: str | None = None,
    rung_col: str | None = None,
    trend_margin: float | None = None,
    target_compute: float | None = None,
) -> pd.DataFrame:
    """modern-gpt's verdict table for a DataFrame of your own runs, one row per run (variant, seed, metric).

    With compute_col (each run's training FLOPs) or size_col, the runs are a ladder of sizes and the table is
    `modern-gpt scale`'s: each row's compute multiplier k (k, k_low, k_high, p_holm, verdict), its trend per 10x
    compute (trend_per_10x, trend_low, trend_high, trend), the crossover and per rung k_i (docs/scale.md).

    Each variant is compared with the row above (or with `reference`) by a paired t-test over the seeds they
    share, Holm-corrected across the table, exactly as `modern-gpt judge` and `modern-gpt report` do. Returns
    one row per variant: mean, delta, ci_low, ci_high, p, p_holm, verdict, mde, seeds_needed, pairs, ...;
    `.attrs["footnotes"]` holds the table's footnotes and `.attrs["title"]` its title. A problem with the
    input raises modern_gpt.errors.UserError with one sentence naming the row and the column.
    """
    if not isinstance(higher_is_better, bool | np.bool_):  # "no" would be truthy: the table turned upside down
        raise UserError(f"higher_is_better must be True or False, not {_shown(higher_is_better)}.")
    for key, x in (("alpha", alpha), ("margin", margin)):
        if (x is not None or key == "alpha") and (
            isinstance(x, bool | np.bool_) or not isinstance(x, int | float | np.integer | np.floating)
        ):
            raise UserError(f"{key} must be a number, not {_shown(x)}.")
    reference, placebo = (None if x is None else names([x])[0] for x in (reference, placebo))
    s = JudgeSettings(
        variant_col, seed_col, metric, bool(higher_is_better), names(order), reference, placebo, alpha, margin
    )
    check_settings(s)
    if compute_col is not None or size_col is not None or rung_col is not None:
        if margin is not None:
            raise UserError("margin is in the metric's units for one size; for a ladder give trend_margin.")
        ladder = LadderSettings(compute_col, size_col, rung_col, trend_margin, target_compute)
        design, rows, notes = judge_ladder(df, s, ladder)
        out = pd.DataFrame([r.cells() for r in rows])
        out.attrs.update(
            title=f"compute multiplier k of {len(rows)} variants at {len(design.rungs)} rungs", footnotes=notes
        )
        return out
    design, runs = runs_from(from_frame(df), s)
    rows, notes = judge(design, s, runs)
    out = pd.DataFrame(rows)
    out.attrs.update(title=title(design, s), footnotes=notes)
    return out
