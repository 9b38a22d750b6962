"""`modern-gpt judge FILE` and `modern_gpt.judge(df)`: the verdict table for runs that modern-gpt did not train.

A long table, one row per run (variant, seed, metric), becomes what a results folder gives report.py. That is
a meta dict (alpha, margin, the rows and their references) and a runs frame. report.summarize and
report.footnotes then compute the table exactly as for `modern-gpt report`. So judge follows every change to
the statistics. What is judge's own is the input: it is checked cell by cell, and nothing is guessed.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import UserError, did_you_mean
from .design import ALPHA, Design, Row, SummaryRow, judge_columns
from .ladder_judge import LadderSettings, judge_ladder
from .reading import (
    API_FLAGS,
    CLI_FLAGS,
    DIVERGED,
    ERROR,
    NOT_FINITE,
    JudgeSettings,
    Source,
    _and,
    _as_text,
    _empty,
    _failed_value,
    _flag,
    _listed,
    _Marks,
    _message,
    _metric,
    _name,
    _number_or_empty,
    _order,
    _seed,
    _shown,
    check_settings,
    from_frame,
    names,
    numbers,
    out_of_range,
    parsed,
    read_file,
    refusal,
    unfinished_states,
)


def runs_from(source: Source, s: JudgeSettings) -> tuple[Design, pd.DataFrame]:
    """The Design and runs frame, from a checked table. The verdict engine (table.summarize, table.footnotes)
    reads them."""
    design, frame, _ = read_runs(source, s)
    return design, frame


def read_runs(
    source: Source, s: JudgeSettings, api: bool = False, extra: tuple[str, ...] = ()
) -> tuple[Design, pd.DataFrame, list[str]]:
    """runs_from's Design and runs, and judge's own footnotes on them. The footnotes say where the rows' order came
    from, and name a tracker's unfinished runs. Each column is parsed at once. The first refused cell, in the
    file's order, is the sentence the cell-by-cell reader gave.

    api: the settings are modern_gpt.judge's keywords, and a sentence names them so. extra: more metric columns,
    judged with the first as one family (metrics.py). In the frame they are extra_column(k). An empty cell there
    is a value that could not be measured (a wall)."""
    check_settings(s)
    flags = API_FLAGS if api else CLI_FLAGS
    s = replace(  # the columns as the file names them: MLflow's export holds variant as tags.variant
        s,
        variant_col=source.real(s.variant_col, flags["variant_col"]),
        seed_col=source.real(s.seed_col, flags["seed_col"]),
        metric=source.real(s.metric, flags["metric"]),
    )
    check_settings(s)
    for col, what in ((s.variant_col, "variant"), (s.seed_col, "seed"), (s.metric, "metric")):
        if col not in source.columns:
            raise UserError(_no_column(source, s, col, what))
    source = _without_summary(source, s)
    runs = _columns(source, s)
    _first_refusal(source, s, runs)
    values = [_extra_metric(source, s, m, flags["metric"]) for m in extra]
    found = list(dict.fromkeys(runs.variant))
    marks = _Marks.read(source, s, runs, found)
    rows = _order(source, s if s.order is not None or marks.order is None else replace(s, order=marks.order), found)
    _check_pairs(source, s, rows, runs)
    placebo, refs = marks.references(source, s, rows, flags)
    notes = marks.order_notes(source, s, rows, found, flags) + unfinished_states(
        source, s, runs.variant, runs.seed, runs.failed
    )
    frame = _runs_frame(s, rows, runs, values)
    return _design(source, s, rows, refs, runs, placebo), frame, notes


def extra_column(k: int) -> str:
    """The runs frame's name of judge's (k + 1)-th metric. Never one of the frame's own columns."""
    return f"metric {k + 1}"


def _extra_metric(source: Source, s: JudgeSettings, metric: str, flag: str) -> np.ndarray:
    """Another metric column's values: numbers, or NaN where empty. An empty cell is a row that cannot be measured
    there, as a learned position table past its context. Anything else is one sentence, as for the first metric."""
    col = source.real(metric, flag)
    if col not in source.columns:
        raise UserError(
            f"{source.name}, {source.header}: no metric column {col!r} (its columns: {_listed(source.columns)})."
        )
    cells = source.column(col)
    value, bad = numbers(cells)
    empty = np.array([_empty(c) for c in cells], bool)
    bad = (bad & ~empty) | out_of_range(value)
    infinite = ~bad & ~empty & np.isinf(value)
    if bad.any() or infinite.any():
        i = int(np.argmax(bad | infinite))
        why = refusal(_metric, cells[i]) if bad[i] else f"{float(value[i])} is not a finite number"
        raise UserError(f"{source.name}, {source.where(i)}, column {col}: {why}.")
    return np.where(empty, np.nan, value)


# MLflow's summary run of an ablation and its row runs (tags.kind summary or row, no variant): the one place that
# names them; trackers/mlflow.py tags its runs with these
KIND, SUMMARY, ROW_KIND = "kind", "summary", "row"


def _no_column(source: Source, s: JudgeSettings, col: str, what: str) -> str:
    """The sentence for a column judge needs and the file or frame lacks. It gives the pandas call that makes a
    DataFrame of it, where there is one: for a wide table (a column per variant), or an index that holds it."""
    name, needed = source.name, (s.variant_col, s.seed_col, s.metric)
    numeric = [
        c
        for c in source.columns
        if c != s.seed_col and all(isinstance(v, int | float) and not isinstance(v, bool) for v in source.cells[c])
    ]
    if source.frame and s.variant_col not in source.columns and s.metric not in source.columns and len(numeric) >= 2:
        melt = f"melt(id_vars={s.seed_col!r}, var_name={s.variant_col!r}, value_name={s.metric!r})"
        if s.seed_col in source.columns:
            call, seeds = f"df.{melt}", ""
        elif s.seed_col in source.index_names:
            call, seeds = f"df.reset_index().{melt}", ""
        else:
            call, seeds = f"df.rename_axis({s.seed_col!r}).reset_index().{melt}", " (its rows as the seeds)"
        return (
            f"{name} has no variant column {s.variant_col!r} and no metric column {s.metric!r}: it is a wide table, "
            f"a column per variant ({_listed(numeric, 6)}), where judge reads a long one, one row per run; make it "
            f"long with {call}{seeds}."
        )
    indexed = [c for c in needed if c in source.index_names and c not in source.columns]
    if indexed:
        them = "it a column" if len(indexed) == 1 else "them columns"
        return f"{name} holds {_and(indexed)} in its index, not in a column; pass df.reset_index(), which makes {them}."
    return f"{name}, {source.header}: no {what} column {col!r} (its columns: {_listed(source.columns)})."


HOLDERS = (SUMMARY, ROW_KIND)  # the kinds of modern-gpt's MLflow runs that hold figures, not a training run


def _without_summary(source: Source, s: JudgeSettings) -> Source:
    """The runs without an MLflow experiment's summary run and row runs from modern-gpt. Those have tags.kind
    summary or row, and no variant. They hold the table and a row's figures, not a run."""
    col = source.real(KIND)
    if col not in source.cells or col in (s.variant_col, s.seed_col, s.metric):
        return source
    kinds, variants = source.column(col), source.column(s.variant_col)
    keep = [i for i in range(source.size) if not (_as_text(kinds[i]).lower() in HOLDERS and not _as_text(variants[i]))]
    if len(keep) == source.size:
        return source
    if not keep:
        raise UserError(
            f"{source.name} holds only modern-gpt's summary run ({col} {SUMMARY}), which holds a table, not a run; "
            "give the runs of the experiment."
        )
    return source.subset(keep)


@dataclass
class _Runs:
    """Every run's parsed cells, a column each, and per column the cells refused. Checked in this order."""

    variant: list
    seed: list
    diverged: np.ndarray
    error: list[str]
    value: np.ndarray
    steps: np.ndarray
    refused: list[tuple[str, object, np.ndarray]]  # (column, its parser, the mask of refused cells)

    @property
    def failed(self) -> np.ndarray:
        return self.diverged | np.array([bool(e) for e in self.error], bool)


def _columns(source: Source, s: JudgeSettings) -> _Runs:
    """Each column parsed by its cell parser. A failed run (a diverged or error mark) may have an empty metric."""
    diverged_col, error_col = source.real(DIVERGED), source.real(ERROR)  # MLflow's metrics.diverged, tags.error
    markers = [
        c for c in (diverged_col, error_col) if c in source.cells and c not in (s.variant_col, s.seed_col, s.metric)
    ]
    n, none = source.size, np.zeros(source.size, bool)
    variant, v_bad = parsed(source.column(s.variant_col), _name)
    seed, s_bad = parsed(source.column(s.seed_col), _seed)
    flags, d_bad = parsed(source.column(diverged_col), _flag) if diverged_col in markers else ([False] * n, none)
    texts, e_bad = parsed(source.column(error_col), _message) if error_col in markers else ([""] * n, none)
    diverged, error = np.array([bool(x) for x in flags], bool), [x or "" for x in texts]
    cells = source.column(s.metric)
    value, m_bad = numbers(cells)
    failed = diverged | np.array([bool(e) for e in error], bool)
    for i in np.flatnonzero(m_bad & failed).tolist():  # a failed run's metric may be empty
        m_bad[i] = not _empty(cells[i])
    m_bad |= out_of_range(value) & ~failed
    steps = np.full(n, math.nan)
    marked = np.flatnonzero(diverged & ~np.array([bool(e) for e in error], bool)).tolist()
    for i in marked:  # a diverged run's steps_done, for the footnote that names it
        steps[i] = _failed_value({"steps_done": source.column(source.real("steps_done"))[i]}, "steps_done")
        if not math.isfinite(steps[i]):  # the footnote then says why it is left out
            error[i] = f"marked diverged in column {diverged_col}"
    metric = _Metric(failed)
    refused = [(s.variant_col, _name, v_bad), (s.seed_col, _seed, s_bad), (diverged_col, _flag, d_bad)]
    refused += [(error_col, _message, e_bad), (s.metric, metric, m_bad)]
    return _Runs(variant, seed, diverged, error, value, steps, refused)


class _Metric:
    """The metric's parser per run: _metric. For a failed run, _number_or_empty; its value is left out."""

    def __init__(self, failed: np.ndarray):
        self.failed = failed

    def at(self, i: int):
        return _number_or_empty if self.failed[i] else _metric


def _first_refusal(source: Source, s: JudgeSettings, runs: _Runs) -> None:
    """The sentence for the first run with a refused cell, a metric that is not finite, or a variant and seed
    already seen. The cells are checked in the cell-by-cell order: variant, seed, diverged, error, metric."""
    finished = ~runs.failed
    infinite = finished & ~runs.refused[-1][2] & ~np.isfinite(runs.value)
    ok = ~np.logical_or.reduce([bad for _, _, bad in runs.refused])
    twice = pd.DataFrame({"v": runs.variant, "s": runs.seed}).duplicated().to_numpy() & ok
    stop = ~ok | infinite | twice
    if not stop.any():
        return
    i = int(np.argmax(stop))
    where, cells = source.where(i), source.column
    for col, parse, bad in runs.refused:
        if bad[i]:
            parse = parse.at(i) if isinstance(parse, _Metric) else parse
            hint = ""
            if col == s.variant_col and _empty(cells(col)[i]) and "run_id" in source.cells:  # an MLflow export
                hint = (
                    f" (an MLflow run with no variant is not a seed's run: modern-gpt's summary and row runs say so "
                    f"in tags.{KIND}, which this export lacks; leave such runs out)"
                )
            raise UserError(f"{source.name}, {where}, column {col}: {refusal(parse, cells(col)[i])}{hint}.")
    if infinite[i]:
        raise UserError(
            f"{source.name}, {where}, column {s.metric}: {float(runs.value[i])} is not a finite number {NOT_FINITE}."
        )
    variant, seed = runs.variant[i], runs.seed[i]
    first = next(j for j in range(i) if runs.variant[j] == variant and runs.seed[j] == seed)
    raise UserError(
        f"{source.name}, {where}, columns {s.variant_col} and {s.seed_col}: variant {variant!r}, seed {seed} is "
        f"already on {source.where(first)}; give each run one row."
    )


def _check_pairs(source: Source, s: JudgeSettings, rows: list[str], runs: _Runs) -> None:
    """Every variant has a run, finished or failed, for every seed. Pairs are never guessed."""
    per = Counter(runs.variant)  # no run is there twice: a variant's runs are its seeds
    every = len(set(runs.seed))
    short = next((v for v in rows if per[v] < every), None)
    if short is None:
        return
    have = {sd for v, sd in zip(runs.variant, runs.seed, strict=True) if v == short}
    first: dict = {}
    for i, sd in enumerate(runs.seed):
        first.setdefault(sd, i)
    seed, i = next((sd, i) for sd, i in first.items() if sd not in have)
    raise UserError(
        f"{source.name}, {source.where(i)}, column {s.seed_col}: seed {seed} has a run of {runs.variant[i]!r} and "
        f"none of {short!r}; every variant needs a row for every seed (a failed run included), so that no pair "
        "is guessed."
    )


def _design(source: Source, s: JudgeSettings, rows: list[str], refs: list, runs: _Runs, placebo: str | None) -> Design:
    """The table's Design. The file's variants are rows, each with its reference (any other row), the placebo
    marked. Its seeds are labels that pair the runs. alpha and margin are judge's."""
    table = [Row(v, ref, placebo=v == placebo) for v, ref in zip(rows, refs, strict=True)]
    seeds = sorted(set(runs.seed))
    return Design(table, seeds, s.alpha, s.margin, any_reference=True, source=source.name)


def _runs_frame(s: JudgeSettings, rows: list[str], runs: _Runs, extra=()) -> pd.DataFrame:
    """The verdict engine's runs. The metric is val_loss, negated when higher is better, since summarize reads
    lower as better. Any other metric is extra_column(k). A run has no training columns."""
    index = {v: i for i, v in enumerate(rows)}
    sign = -1.0 if s.higher_is_better else 1.0
    frame = pd.DataFrame(
        {
            "row": [index[v] for v in runs.variant],
            "variant": runs.variant,
            "seed": runs.seed,
            "val_loss": sign * runs.value,
            "diverged": runs.diverged,
            "error": runs.error,
            "steps_done": runs.steps,
            **{extra_column(k): values for k, values in enumerate(extra)},
        }
    )
    return frame.sort_values(["row", "seed"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------
# The table: report's statistics, shown in the metric's own direction
# ---------------------------------------------------------------------------
def _honest(row: SummaryRow, flip: bool) -> SummaryRow:
    """A summary row in the metric's direction. With higher-is-better, the mean, Δ and CI were computed on the
    negated metric. So they are negated back, and the CI's ends swapped. p-values, sds and mde are unsigned."""
    if not flip:
        return row
    return row.with_(val_loss=-row.val_loss, delta_val=-row.delta_val, ci_low=-row.ci_high, ci_high=-row.ci_low)


def _in_units(note: str, metric: str) -> str:
    """report's footnotes speak of the val loss in nats, and of ablate's flags. judge's speak of the metric in its
    own units, and of the file's seeds."""
    note = note.replace("use --seeds 3 or more, or --seeds auto", "give every variant 3 or more seeds")
    if metric == "val_loss":
        return note
    return (
        note.replace("the val loss", metric).replace("val loss", metric).replace(" nats/token", "").replace(" nats", "")
    )


def _unmarked_placebo(design: Design) -> str | None:
    """A row named as modern-gpt names its placebo ('classic (placebo)' under 'classic') that --placebo does not
    name. Judged as a component, it is the row above the next one. report compares that one with the first row."""
    names = [r.name for r in design.rows]
    twin = f"{names[0]} (placebo)"
    if twin not in names or any(r.placebo for r in design.rows):
        return None
    at = names.index(twin)
    under = [r.name for r in design.rows if r.reference == at]
    also = f", and {_listed(under)} {'is' if len(under) == 1 else 'are'} compared with it" if under else ""
    return (
        f"{twin!r} is judged as a component row, not as a placebo: it is in the family the rule corrects{also}; for the table "
        f"modern-gpt report gives from a results folder's runs.csv, add --placebo {twin!r}."
    )


# report's placebo is the first row with another weight init; in anyone's runs it is the first row run again.
THEIR_PLACEBO = {
    "with only its weight init changed, a diagnostic": "run again, with nothing else changed, a diagnostic",
    "it is what initialisation alone does on this data and budget": "it is what a rerun alone does in these runs",
    "initialisation alone moved the val loss": "a rerun alone moved the val loss",
    "may be initialisation rather than the component": "may be a rerun's noise rather than the component",
    "(the first row again with another weight init)": "(the first row run again)",
}


def _their_runs(note: str) -> str:
    for mine, theirs in THEIR_PLACEBO.items():
        note = note.replace(mine, theirs)
    return note


def judge(
    design: Design, s: JudgeSettings, runs: pd.DataFrame, own: bool = False, first: tuple | list = ()
) -> tuple[list[dict], list[str]]:
    """The table's rows (judge's columns, in its order) and its footnotes, from runs_from's design and runs.
    `own`: the runs are a modern-gpt results folder's, whose placebo is a weight init. `first`: read_runs'
    footnotes."""
    from .table import footnotes, summarize

    metric, flip = s.metric, s.higher_is_better
    summary = [_honest(row, flip) for row in summarize(design, runs)]
    # the training footnotes (memorisation, parameter mismatch) have nothing to read: no train loss, no params
    quiet = [row.with_(val_loss=math.nan, train_loss=math.nan) for row in summary]
    notes = [_in_units(n if own else _their_runs(n), metric) for n in footnotes(design, runs, quiet)]
    notes[:0] = first
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


def named_columns(rows: list[dict], metric: str) -> list[dict]:
    """judge's rows with summary.csv's names for the metric's mean and Δ: val_loss and delta_val. Another metric
    keeps its own name and delta_<metric>. The table and Markdown headers name them already."""
    names = {"mean": "val_loss", "delta": "delta_val"} if metric == "val_loss" else {"delta": f"delta_{metric}"}
    names.setdefault("mean", metric)
    return [{names.get(k, k): v for k, v in row.items()} for row in rows]


def title(design: Design, s: JudgeSettings) -> str:
    direction = "higher is better" if s.higher_is_better else "lower is better"
    n = len(design.seeds)
    return (
        f"{s.metric} ({direction}) from {design.source}: {len(design.rows)} variants, {n} seed{'s' if n != 1 else ''}"
    )


def judge_file(path, s: JudgeSettings) -> tuple[Design, list[dict], list[str]]:
    """The design, the table's rows and its footnotes, for `modern-gpt judge FILE`."""
    design, _, rows, notes = judge_file_runs(path, s)
    return design, rows, notes


def judge_file_runs(path, s: JudgeSettings) -> tuple[Design, pd.DataFrame, list[dict], list[str]]:
    """judge_file's design, rows and footnotes, and between them the runs the table read (read_runs')."""
    check_settings(s)  # before the file is read
    design, runs, first = read_runs(read_file(path), s)
    rows, notes = judge(design, s, runs, own=_folder_spec(Path(path)) is not None, first=first)
    return design, runs, rows, notes + _folder_note(Path(path))


def judge_file_metrics(path, s: JudgeSettings, metrics: tuple[str, ...]):
    """judge FILE with several --metric columns: the design, the runs, the verdict and the footnotes. The
    verdict is over every (row, metric) as one family (metrics.judge_metrics), by the file's metric names."""
    check_settings(s)
    check_metrics(metrics, s.higher_is_better)
    source = read_file(path)
    design, runs, first = read_runs(source, replace(s, metric=metrics[0]), extra=tuple(metrics[1:]))
    own = _folder_spec(Path(path)) is not None
    result, notes = judge_several(design, replace(s, metric=metrics[0]), runs, metrics, own, first)
    return design, runs, result, notes + _folder_note(Path(path))


def check_metrics(metrics, higher_is_better: bool) -> None:
    """Several --metric columns: distinct, and each lower-is-better. One family, one direction."""
    twice = next((m for m in metrics if list(metrics).count(m) > 1), None)
    if twice is not None:
        raise UserError(f"--metric {twice} is given twice; give each metric column once.")
    if len(metrics) > 1 and higher_is_better:
        raise UserError(
            "--higher-is-better goes with one --metric; with several, every metric is lower-is-better (negate an "
            "accuracy-like column, or judge it alone)."
        )


def judge_several(design: Design, s: JudgeSettings, runs: pd.DataFrame, metrics, own: bool = False, first=()):
    """The verdict over several metrics, the first primary, and the footnotes. They are judge's own on the first
    metric's runs. The one-metric rule's sentence gives way to the rule over all of them and the signal-to-noise
    line."""
    from .metrics import judge_metrics, snr_note

    _, notes = judge(design, s, runs, own=own, first=first)
    inner = ["val_loss", *(extra_column(k) for k in range(len(metrics) - 1))]
    result = judge_metrics(design, runs, inner)
    shown = dict(zip(inner, metrics, strict=True))
    table = result.table.assign(metric=result.table["metric"].map(shown))
    ratios = [replace(r, metric=shown[r.metric]) for r in result.snr]
    result = replace(result, table=table, snr=ratios, metrics=tuple(metrics))
    rule = result.rule_note(design.alpha, design.margin, design.sequential)
    notes = [n for n in notes if not n.startswith("verdict:")] + [rule]
    snr = snr_note(ratios)
    return result, notes + _empty_cells(runs, inner[1:], metrics[1:]) + ([snr] if snr else [])


def _empty_cells(runs: pd.DataFrame, columns, metrics) -> list[str]:
    """Runs that trained with no value in a further metric are left out of its pairs. Judged alone, that
    metric's empty cell is refused by its line. Here it may be a wall, a metric a row cannot give: so it is said."""
    from .table import failed

    trained = runs[~failed(runs)]
    notes = []
    for column, metric in zip(columns, metrics, strict=True):
        empty = trained[~np.isfinite(pd.to_numeric(trained[column], errors="coerce").astype(float))]
        if len(empty):
            which = [f"{v} seed {s}" for v, s in zip(empty["variant"], empty["seed"], strict=True)]
            more = f" and {len(which) - 4} more" if len(which) > 4 else ""
            notes.append(
                f"No {metric} in {len(empty)} of the {len(trained)} runs that trained ({', '.join(which[:4])}{more}): "
                "left out of its pairs; a row with none is not tested."
            )
    return notes


def _folder_spec(path: Path) -> dict | None:
    """The spec in the meta.json beside FILE. The file is then a modern-gpt results folder's runs."""
    try:
        spec = json.loads((path.parent / "meta.json").read_text(encoding="utf-8")).get("spec", {})
    except (OSError, ValueError, AttributeError):
        return None
    return spec if isinstance(spec, dict) else None


def _folder_note(path: Path) -> list[str]:
    """A --seeds auto ablation's runs.csv is judged here at the fixed level, not at the boundary it stopped on.
    The note says so, and names the command whose table is the folder's own."""
    spec = _folder_spec(path)
    if spec is None or spec.get("min_seeds") is None:  # min_seeds: only --seeds auto has them
        return []
    return [
        f"{path.parent}/meta.json says this folder was a --seeds auto ablation: judge tests every row at the fixed "
        f"level, not against the boundary the ablation stopped on; modern-gpt report {path.parent} gives its table."
    ]


def api_settings(
    variant_col: str = "variant",
    seed_col: str = "seed",
    metric: str = "val_loss",
    higher_is_better: bool = False,
    order: str | list[str] | None = None,
    reference: str | None = None,
    placebo: str | None = None,
    alpha: float = ALPHA,
    margin: float | None = None,
) -> JudgeSettings:
    """modern_gpt.judge's keywords as judge's settings, each checked. A sentence names the keyword."""
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
    return s


def verdict(
    df: pd.DataFrame | str | os.PathLike,
    *,
    variant_col: str = "variant",
    seed_col: str = "seed",
    metric: str | list[str] = "val_loss",
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
    threshold: float | None = None,
    at_step: int | None = None,
    log_pattern: str | None = None,
    **unknown,
) -> pd.DataFrame:
    """modern-gpt's verdict table for your own runs. df is a DataFrame with one row per run (variant, seed,
    metric). Or it is the path of a .csv, .jsonl or .parquet file of them, read as `modern-gpt judge FILE` does.

    Each variant is compared with the row above, or with `reference`, by a paired t-test over their shared
    seeds. The verdict rule is docs/statistics.md's, as `modern-gpt judge` and `modern-gpt report` apply it.
    A frame with modern-gpt's row, reference and placebo columns gives report's table with no keyword. Such a
    frame is a results folder's runs.csv read by pandas, or Result.runs. Or it is mlflow.search_runs of its
    MLflow runs: tags.variant, metrics.val_loss, ... are read as variant, val_loss, ..., the summary run left out.

    Returns one row per variant: mean, delta, ci_low, ci_high, p, p_adj, verdict, mde, seeds_needed, pairs, ...
    `.attrs["footnotes"]` holds the table's footnotes and `.attrs["title"]` its title. A problem with the input
    raises modern_gpt.UserError, one sentence naming the row and the column, and each setting as its keyword.

    With compute_col (each run's training FLOPs) or size_col, the runs are a ladder of sizes. The table is then
    `modern-gpt scale`'s (docs/scale.md). Each row has its compute multiplier k (k, k_low, k_high, p_adj,
    verdict) and its trend per 10x compute (trend_per_10x, trend_low, trend_high, trend). It has the crossover,
    and k_i per rung.

    df may also be a folder of training logs, one subfolder per variant and one file per run. They are judged
    by Welch's t-test, as runs that share no seeds. threshold= tests each variant's claim against a target.
    at_step= and log_pattern= read the logs (docs/statistics.md, "Published runs"). A list of metric columns is
    judged as one family, the long form (docs/statistics.md, "Several metrics").
    """
    if unknown:  # a misspelt keyword is a UserError naming the closest, as the other API functions give
        _no_keyword(next(iter(unknown)))
    try:
        if not isinstance(metric, str) and not (isinstance(metric, list | tuple) and metric):
            raise UserError(f"metric= is a column name or a list of them, got {_shown(metric)}.")
        metrics = tuple(metric) if isinstance(metric, list | tuple) else (metric,)
        s = api_settings(variant_col, seed_col, metrics[0], higher_is_better, order, reference, placebo, alpha, margin)
        if len(metrics) > 1:
            return _several(df, s, metrics, compute_col, size_col, rung_col, threshold, at_step, log_pattern)
        if isinstance(df, str | Path) and Path(df).is_dir() or threshold is not None:
            return _published(df, s, threshold, at_step, log_pattern)
        return _verdict(df, s, margin, LadderSettings(compute_col, size_col, rung_col, trend_margin, target_compute))
    except UserError as e:
        e.args = (as_keywords(str(e)), *e.args[1:])  # the same error, of its own class
        raise


# a flag as a sentence names it: not inside a name ('--margin' as a variant, a column my--metric)
JUDGE_FLAGS = re.compile(
    r"(?<![\w'\"-])--(variant-col|seed-col|metric|higher-is-better|order|reference|placebo|alpha|margin|"
    r"compute-col|size-col|rung-col|trend-margin|target-compute|threshold)(?![\w'\"-])"
)


def as_keywords(sentence: str) -> str:
    """A judge sentence as modern_gpt.judge says it: each flag as its keyword, --order as order=."""
    return JUDGE_FLAGS.sub(lambda m: m.group(1).replace("-", "_") + "=", sentence)


def _verdict(df, s: JudgeSettings, margin, ladder: LadderSettings) -> pd.DataFrame:
    """verdict's table: the scale table for a ladder (a compute, size or rung column), else judge's."""
    if ladder.compute_col is not None or ladder.size_col is not None or ladder.rung_col is not None:
        if margin is not None:
            raise UserError("margin is in the metric's units for one size; for a ladder give trend_margin.")
        design, rows, notes = judge_ladder(df, s, ladder, api=True)
        out = pd.DataFrame([r.cells() for r in rows])
        out.attrs.update(
            title=f"{'compute' if ladder.size_col is None else 'size'} multiplier k of {len(rows)} variants at "
            f"{len(design.rungs)} rungs",
            footnotes=notes,
        )
        return out
    if isinstance(df, str | os.PathLike):  # a file of runs, as `modern-gpt judge FILE` reads it
        if not Path(df).exists():
            raise UserError(
                f"{df} does not exist; judge takes a pandas DataFrame of runs, or the path of a .csv, .jsonl or "
                ".parquet file of them."
            )
        design, _, rows, notes = judge_file_runs(Path(df), s)
    else:
        design, runs, first = read_runs(from_frame(df), s, api=True)
        rows, notes = judge(design, s, runs, first=first)
    out = pd.DataFrame(named_columns(rows, s.metric))
    out.attrs.update(title=title(design, s), footnotes=notes)
    return out


def _several(df, s: JudgeSettings, metrics: tuple, *one_metric) -> pd.DataFrame:
    """verdict with several metrics: the long form of metrics.judge_metrics, its footnotes and signal-to-noise."""
    from dataclasses import asdict

    if any(x is not None for x in one_metric) or isinstance(df, str | Path) and Path(df).is_dir():
        raise UserError(
            "several metrics are judged as one table of runs paired by seed; a folder of logs, a ladder (compute_col, "
            "size_col, rung_col) and threshold go with one metric."
        )
    check_metrics(tuple(str(m) for m in metrics), s.higher_is_better)
    if isinstance(df, str | os.PathLike):
        design, _, result, notes = judge_file_metrics(Path(df), s, metrics)
    else:
        design, runs, first = read_runs(from_frame(df), s, api=True, extra=metrics[1:])
        result, notes = judge_several(design, s, runs, metrics, first=first)
    out = result.table.copy()
    out.attrs.update(
        title=title(design, s), footnotes=notes, signal_to_noise=[asdict(r) for r in result.snr], metrics=list(metrics)
    )
    return out


def _published(df, s: JudgeSettings, threshold, at_step, log_pattern) -> pd.DataFrame:
    """verdict on a folder of logs, or with a threshold: unpaired.table's rows as a frame."""
    from .logs import is_log_folder, judge_logs
    from .unpaired import judge_frame

    if isinstance(df, str | Path) and is_log_folder(Path(df)):
        title_, rows, notes = judge_logs(Path(df), s, threshold, at_step, log_pattern)
    elif isinstance(df, pd.DataFrame):
        title_, rows, notes = judge_frame(df, s, threshold)
    else:
        raise UserError(f"threshold= reads a DataFrame or a folder of logs, not {_shown(df)}.")
    out = pd.DataFrame(rows)
    out.attrs.update(title=title_, footnotes=notes)
    return out


def _no_keyword(name: str) -> None:
    import inspect

    known = [p for p in inspect.signature(verdict).parameters if p not in ("df", "unknown")]
    hint = did_you_mean(name, known, f"; it takes {', '.join(known)}")
    raise UserError(f"modern_gpt.judge() has no option {name!r}{hint}")
