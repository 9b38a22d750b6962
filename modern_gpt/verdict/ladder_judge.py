"""judge --compute-col (and modern_gpt.judge(df, compute_col=...)): the scale table of anyone's ladder of sizes.

A long table has one row per run: variant, seed, a loss, and each run's training compute or model size. At
three or more sizes, it becomes what a ladder folder gives ablation/ladder.py. That is a LadderDesign and a runs
frame (row, rung, seed, val_loss, flops, failed). verdict/ladder.py turns them into the table, exactly as for
`modern-gpt scale`. judge.py's readers check every cell, and nothing is guessed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from types import SimpleNamespace

import pandas as pd

from ..core.errors import UserError
from .design import Row
from .ladder import LadderDesign, LadderError, holdout_check, ladder_table
from .reading import (
    _MISSING,
    API_FLAGS,
    CLI_FLAGS,
    DIVERGED,
    ERROR,
    NOT_FINITE,
    JudgeSettings,
    Source,
    _empty,
    _flag,
    _listed,
    _Marks,
    _message,
    _metric,
    _name,
    _number,
    _number_or_empty,
    _order,
    _seed,
    _shown,
    check_settings,
    from_frame,
    read_file,
    unfinished_states,
)


# ---------------------------------------------------------------------------
# judge --compute-col: the scale table (verdict/ladder.py) of anyone's ladder of sizes
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LadderSettings:
    """What judge --compute-col (or --size-col) adds. The column of each run's training compute, or model size.
    The column naming its rung; None takes the file's `rung` column if it has one, else each variant's distinct
    computes, smallest first. The trend's equivalence margin, and the compute to extrapolate to."""

    compute_col: str | None = None
    size_col: str | None = None
    rung_col: str | None = None
    trend_margin: float | None = None
    target: float | None = None

    @property
    def axis(self) -> str:
        return self.compute_col or self.size_col


def _positive(v) -> float:
    x = _number(v)
    if not 0 < x < math.inf:
        raise ValueError(f"{_shown(v)} is not a positive finite number")
    return x


def _label(v) -> str:
    if _empty(v):
        raise ValueError("is empty")
    text = str(v).strip()
    if text.lower() in ("nan", "na", "n/a", "null", "none", "inf", "-inf"):  # pandas' missing value, not a name
        raise ValueError(f"{_shown(v)} names no rung (a missing value); give each run its rung")
    return text


def ladder_from(source: Source, s: JudgeSettings, ls: LadderSettings, api: bool = False):
    """A file of runs at several sizes, checked cell by cell as judge checks any file. Returns the LadderDesign,
    the runs frame (row, rung, seed, val_loss, flops, failed), and a footnote. It says where the rows' order and
    references came from. api: a sentence names modern_gpt.judge's keywords."""
    if (ls.compute_col is None) == (ls.size_col is None):
        raise UserError("give one of --compute-col (each run's training FLOPs) or --size-col (its model size).")
    check_settings(s, {"--compute-col": ls.compute_col, "--size-col": ls.size_col, "--rung-col": ls.rung_col})
    if s.higher_is_better:
        raise UserError(
            "--compute-col reads a loss that falls as compute grows; a higher-is-better metric has no compute "
            "multiplier here (give a loss as --metric)."
        )
    name, axis = source.name, ls.axis
    rung_col = ls.rung_col or ("rung" if "rung" in source.columns and axis != "rung" else None)
    axis_name = "compute" if ls.compute_col else "size"
    for col, what in ((s.variant_col, "variant"), (s.seed_col, "seed"), (s.metric, "metric"), (axis, axis_name)):
        if col not in source.columns:
            raise UserError(
                f"{name}, {source.header}: no {what} column {col!r} (its columns: {_listed(source.columns)})."
            )
    if rung_col is not None and rung_col not in source.columns:
        raise UserError(
            f"{name}, {source.header}: no rung column {rung_col!r} (its columns: {_listed(source.columns)})."
        )
    runs, first_seen = _ladder_records(source, s, axis, rung_col)
    found = list(first_seen)
    # the file's row, reference and placebo columns, as judge reads an ablation's runs.csv (a ladder's has them)
    marks = _Marks.read(source, s, SimpleNamespace(variant=[r["variant"] for r in runs]), found)
    rows = _order(source, s if s.order is not None or marks.order is None else replace(s, order=marks.order), found)
    flags = API_FLAGS if api else CLI_FLAGS
    placebo, refs = marks.references(source, s, rows, flags)
    labels = _rungs(name, rows, runs, rung_col)
    frame = pd.DataFrame(runs)
    frame["row"] = frame["variant"].map({v: i for i, v in enumerate(rows)})
    frame["rung"] = frame["rung"].map({r: i for i, r in enumerate(labels)}) if rung_col else _ranks(frame)
    table = tuple(Row(v, ref, placebo=v == placebo) for v, ref in zip(rows, refs, strict=True))
    shown = labels if rung_col else [f"{x:.3g}" for x in labels]
    design = LadderDesign(
        table, tuple(shown), tuple(sorted({r["seed"] for r in runs})), s.alpha, ls.trend_margin, ls.target, source=name
    )
    return design, frame, marks.order_notes(source, s, rows, found, flags)


def _ladder_records(source: Source, s: JudgeSettings, axis: str, rung_col: str | None) -> tuple[list[dict], dict]:
    """Each run of a ladder file, checked cell by cell: variant, seed, rung, metric, compute, whether it failed.
    And where each variant first appears."""
    name = source.name
    diverged_col, error_col = source.real(DIVERGED), source.real(ERROR)  # MLflow's metrics.diverged, tags.error
    markers = [c for c in (diverged_col, error_col) if c in source.columns]

    def cell(where, record, col, parse):
        try:
            return parse(record.get(col, _MISSING))
        except ValueError as e:
            raise UserError(f"{name}, {where}, column {col}: {'is missing' if col not in record else e}.") from None

    runs, first_seen, seen = [], {}, {}
    for where, record in source.records:
        variant = cell(where, record, s.variant_col, _name)
        seed = cell(where, record, s.seed_col, _seed)
        compute = cell(where, record, axis, _positive)
        rung = cell(where, record, rung_col, _label) if rung_col else compute
        failed = (diverged_col in markers and cell(where, record, diverged_col, _flag)) or (
            error_col in markers and bool(cell(where, record, error_col, _message))
        )
        value = cell(where, record, s.metric, _metric if not failed else _number_or_empty)
        if not failed and not math.isfinite(value):
            raise UserError(f"{name}, {where}, column {s.metric}: {value} is not a finite number {NOT_FINITE}.")
        if (variant, seed, rung) in seen:
            raise UserError(
                f"{name}, {where}: variant {variant!r}, seed {seed} at rung {rung!r} is already on "
                f"{seen[variant, seed, rung]}; give each run one row."
            )
        seen[variant, seed, rung] = where
        first_seen.setdefault(variant, where)
        runs.append(dict(variant=variant, seed=seed, rung=rung, val_loss=value, flops=compute, failed=failed))
    return runs, first_seen


def _rungs(name: str, rows: list[str], runs: list[dict], rung_col: str | None) -> list:
    """The rungs, smallest first. A rung column's labels, ordered by the first row's mean compute, or the first
    row's distinct computes. Every variant must have as many."""
    per = {v: {} for v in rows}
    for r in runs:
        per[r["variant"]].setdefault(r["rung"], []).append(r["flops"])
    counts = {v: len(x) for v, x in per.items()}
    if len(set(counts.values())) != 1:
        how = "its rung column" if rung_col else "its distinct computes (give --rung-col to name each run's rung)"
        raise UserError(
            f"{name}: the variants have different numbers of rungs by {how}: {_listed([f'{v}: {n}' for v, n in counts.items()], 6)}."
        )
    first = per[rows[0]]
    if rung_col:  # the same rungs by name for every variant: a rung named for one variant alone pairs nothing
        other = next((v for v in rows if set(per[v]) != set(first)), None)
        if other is not None:
            raise UserError(
                f"{name}, column {rung_col}: {other!r} has the rungs {_listed(sorted(per[other], key=str), 6)} and "
                f"{rows[0]!r} {_listed(sorted(first, key=str), 6)}; every variant needs the same rungs."
            )
    return sorted(first, key=lambda r: sum(first[r]) / len(first[r]))


def _ranks(frame: pd.DataFrame) -> pd.Series:
    """Each run's rung as the rank of its compute among its variant's distinct computes."""
    return frame.groupby("variant")["flops"].rank(method="dense").astype(int) - 1


UNEVEN = 1.01  # the seeds of one row at one rung train one model for one budget: computes apart by more are named


def _uneven_computes(runs: pd.DataFrame, axis: str) -> list[str]:
    """A footnote naming each row and rung whose seeds' computes differ; a rung column holds them together.
    Otherwise the table would average them (geometrically) without a word."""
    trained = runs[~runs["failed"]]  # a run that diverged early recorded the compute of the steps it did
    spread = trained.groupby(["variant", "rung"], sort=False)["flops"].agg(["min", "max"])
    uneven = spread[spread["max"] > UNEVEN * spread["min"]]
    if uneven.empty:
        return []
    named = [f"{v!r} at rung {r}: {lo:.3g} to {hi:.3g}" for (v, r), lo, hi in uneven.itertuples(name=None)]
    shown = "; ".join(named[:6]) + (f"; and {len(named) - 6} more" if len(named) > 6 else "")
    return [
        f"Column {axis} differs between the seeds of one row at one rung ({shown}); the table uses each rung's "
        "geometric mean, but the seeds of a row at a rung should train the same model for the same budget: check "
        "the rung column, or the compute each run recorded."
    ]


def judge_ladder(path_or_frame, s: JudgeSettings, ls: LadderSettings, api: bool = False):
    """The scale table of a file or DataFrame of runs at several sizes: (design, rows, notes). api: as
    modern_gpt.judge words it."""
    is_path = isinstance(path_or_frame, str | os.PathLike)
    source = read_file(path_or_frame) if is_path else from_frame(path_or_frame)  # from_frame refuses a non-frame
    design, runs, order = ladder_from(source, s, ls, api)
    try:
        rows, notes = ladder_table(design, runs)
    except LadderError as e:  # a file's rungs read from its computes: a seed's own compute is another rung
        if ls.rung_col is not None or "no seed trained every row" not in str(e):
            raise
        raise UserError(
            f"{source.name}: {str(e).rstrip('.')}; if a run's compute differs from seed to seed, give each run its "
            "rung in a --rung-col column."
        ) from None
    notes = order + notes
    notes += holdout_check(design, runs)[1]  # four rungs or more: the top rung predicted, then checked, as in scale
    named = runs.assign(rung=[design.rungs[r] for r in runs["rung"]])  # the rung as the table shows it
    notes += unfinished_states(source, s, *(named[c].tolist() for c in ("variant", "seed", "failed", "rung")))
    notes += _uneven_computes(named, ls.axis)
    if ls.size_col is not None:  # the footnotes speak of FLOPs: here the axis is the size column's
        notes = [n.replace(" FLOPs", f" (in {ls.size_col})") for n in notes]
        notes.insert(
            0,
            f"k is in units of {ls.size_col}, not compute: how many times the reference's {ls.size_col} reaches the row's loss.",
        )
    return design, rows, notes
