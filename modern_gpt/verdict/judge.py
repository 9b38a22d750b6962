"""`modern-gpt judge FILE` and `modern_gpt.judge(df)`: the verdict table for runs that modern-gpt did not train.

A long table, one row per run (variant, seed, metric), becomes what a results folder gives report.py: a meta
dict (alpha, margin, the rows and their references) and a runs frame. report.summarize and report.footnotes
then compute the table exactly as for `modern-gpt report`, so that judge follows every change to the
statistics. What is judge's own is the input: it is checked cell by cell, and nothing is guessed.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import UserError
from ..core.files import not_regular
from .design import ALPHA, Design, Row, SummaryRow, check_statistics, judge_columns

SUFFIXES = (".csv", ".jsonl", ".parquet")
# Optional columns that mark a failed run, as modern-gpt's runs.csv does: left out of the means and pairs.
DIVERGED, ERROR = "diverged", "error"
# ASCII digits, no '_': what a CSV writer writes ('1_000' and '٣' are numbers to Python, not to a reader)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE | re.ASCII)
# The sizes the statistics compute with in float64: a square of a difference of two values stays a normal number
# (a paired sd of 1e-200 squares to 0, and a sum of 1e200s overflows: a wrong p, or no table at all).
SMALLEST, LARGEST = 1e-100, 1e100


@dataclass(frozen=True)
class JudgeSettings:
    """What judge is asked: which columns, which order and references, and the statistics' settings."""

    variant_col: str = "variant"
    seed_col: str = "seed"
    metric: str = "val_loss"
    higher_is_better: bool = False
    order: tuple[str, ...] | None = None  # the rows' order; None: as the variants first appear
    reference: str | None = None  # every row against this one; None: against the row above
    placebo: str | None = None  # a repeat of the first row with only its seeds' randomness changed
    alpha: float = ALPHA
    margin: float | None = None  # in the metric's units: `same` when an equivalence test shows |Δ| < margin


@dataclass
class Source:
    """A table read from a file or a DataFrame: its name, columns and records, each with where it is."""

    name: str
    columns: list[str]
    records: list[tuple[str, dict]]  # ("line 5", {column: value}); where names the line, row or index
    header: str  # where the column names are


# ---------------------------------------------------------------------------
# Reading: CSV, JSONL, Parquet, or a DataFrame
# ---------------------------------------------------------------------------
def read_file(path) -> Source:
    """FILE as a Source: its suffix (any case) says the format; anything unreadable is one sentence."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_dir() and not path.is_symlink() and (path / "runs.csv").is_file():  # a results folder
        raise UserError(
            f"{path} is a results folder; judge reads its runs: modern-gpt judge {path / 'runs.csv'} (or modern-gpt "
            f"report {path}, its own table)."
        )
    if suffix not in SUFFIXES:
        raise UserError(
            f"{path}: judge reads a .csv, .jsonl or .parquet file (its suffix says which), not "
            f"{repr(path.suffix) if path.suffix else 'a name without a suffix'}."
        )
    what = not_regular(path)  # a pipe is never opened: reading it could wait forever
    if what:
        raise UserError(f"{path} is {what}, not a file; give a {suffix} file with one row per run.")
    if not path.exists():
        raise UserError(f"{path} does not exist.")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}.") from None
    if not data.strip():
        raise UserError(f"{path} is empty; give a table with one row per run.")
    if suffix == ".parquet":
        return _parquet(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}, line {line}: not UTF-8 text (byte {data[e.start]:#04x}).") from None
    return _csv(path, text) if suffix == ".csv" else _jsonl(path, text)


def _csv(path: Path, text: str) -> Source:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records, end = [], 0
    try:
        header = next(reader)
        _no_repeats(path, header, "line 1 (the header)")
        end = reader.line_num
        for fields in reader:
            start, end = end + 1, reader.line_num  # a quoted field can span lines: the record starts here
            if not fields:  # a blank line
                continue
            if len(fields) != len(header):
                raise UserError(f"{path}, line {start}: {len(fields)} fields where the header has {len(header)}.")
            records.append((f"line {start}", dict(zip(header, fields, strict=True))))
    except csv.Error as e:
        raise UserError(f"{path}, line {reader.line_num}: not valid CSV ({e}).") from None
    if not records:
        raise UserError(f"{path} has a header but no rows; give one row per run.")
    return Source(str(path), header, records, "line 1 (the header)")


def _jsonl(path: Path, text: str) -> Source:
    records, columns = [], {}
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_once)
        except _Twice as e:
            raise UserError(f"{path}, line {n}: the key {e.args[0]!r} is given twice; give each column once.") from None
        except ValueError as e:
            raise UserError(f"{path}, line {n}: not JSON ({str(e).splitlines()[0]}).") from None
        except RecursionError:  # json.loads recurses once per [ or {
            raise UserError(f"{path}, line {n}: JSON nested too deeply to read; a run is one flat object.") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}, line {n}: a JSON {type(record).__name__}, where each line must be an object.")
        columns.update(dict.fromkeys(record))
        records.append((f"line {n}", record))
    return Source(str(path), list(columns), records, "any line")


class _Twice(Exception):
    """A JSON object with a key twice: json.loads would keep the last value without a word."""


def _once(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Twice(k)
        out[k] = v
    return out


def _parquet(path: Path) -> Source:
    import pyarrow

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, pyarrow.ArrowException) as e:
        raise UserError(f"{path} cannot be read as Parquet ({(str(e).splitlines() or ['unknown'])[0]}).") from None
    if any(n is not None for n in frame.index.names):  # pandas wrote df.set_index("variant"): a column in the file
        frame = frame.reset_index(allow_duplicates=True)
    return from_frame(frame, str(path), first=1)


def from_frame(frame, name: str = "the DataFrame", first: int = 0) -> Source:
    """A DataFrame as a Source, its records named by position (row 0, 1, ... or from `first`), and by index
    label when the index is not the default one."""
    if not isinstance(frame, pd.DataFrame):
        raise UserError(f"verdict takes a pandas DataFrame with one row per run, not a {type(frame).__name__}.")
    columns = [str(c) for c in frame.columns]
    _no_repeats(name, columns, "its columns")
    plain = isinstance(frame.index, pd.RangeIndex) and frame.index.start == 0 and frame.index.step == 1
    records = [
        (f"row {first + pos}" + ("" if plain else f" (index {label!r})"), {str(k): v for k, v in r.items()})
        for pos, (label, r) in enumerate(zip(frame.index, frame.to_dict("records"), strict=True))
    ]
    if not records:
        raise UserError(f"{name} has no rows; give one row per run.")
    return Source(name, columns, records, "its columns")


def _no_repeats(name, columns: list[str], where: str) -> None:
    twice = next((c for i, c in enumerate(columns) if c in columns[:i]), None)
    if twice is not None:
        raise UserError(f"{name}, {where}: the column {twice!r} is named twice.")


# ---------------------------------------------------------------------------
# Cells: each checked, each problem a phrase for the one sentence
# ---------------------------------------------------------------------------
_MISSING = object()


def _empty(v) -> bool:
    return v is _MISSING or v is None or v is pd.NA or (isinstance(v, str) and not v.strip())


def _number(v) -> float:
    """A number as written (NaN and infinity included: the caller decides); ValueError with the reason."""
    if _empty(v):
        raise ValueError("is empty")
    if isinstance(v, bool | np.bool_):
        raise ValueError(f"is {v}, not a number")
    if isinstance(v, int | float | np.integer | np.floating | Decimal):  # Decimal: a Parquet decimal column
        try:
            return float(v)
        except OverflowError:  # a JSON integer of 400 digits: no float holds it
            raise ValueError(f"{_shown(v)} is too large for a float64; rescale the column") from None
    if isinstance(v, str) and _NUMBER.fullmatch(v.strip()):
        x = float(v.strip())
        if math.isinf(x) and "inf" not in v.lower():  # digits that overflow a float read as inf: say what they are
            raise ValueError(f"{_shown(v.strip())} is too large for a float64; rescale the column")
        return x
    raise ValueError(f"{_shown(v)} is not a number")


def _metric(v) -> float:
    """A run's metric: a number of a size the statistics hold (NaN and infinity: the caller decides)."""
    x = _number(v)
    if math.isfinite(x) and x != 0 and not SMALLEST <= abs(x) <= LARGEST:
        raise ValueError(
            f"{_shown(v)} is {'too small' if abs(x) < SMALLEST else 'too large'} for the statistics in float64 (a "
            f"nonzero value must be {SMALLEST:g} to {LARGEST:g} in size); rescale the column"
        )
    return x


def _seed(v) -> int:
    if _empty(v):
        raise ValueError("is empty")
    if isinstance(v, bool | np.bool_):
        raise ValueError(f"is {v}, not a whole number")
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating) and math.isfinite(v) and v == round(v):
        return int(v)
    if isinstance(v, str | Decimal) and (whole := _whole(v)) is not None:
        return whole
    raise ValueError(f"{_shown(v)} is not a whole number")


def _whole(v: str | Decimal) -> int | None:
    """A whole number as written, exactly ('7', '7.0', '-2', '1e3': pandas writes a seed column that had a gap as
    floats); None for anything else ('0.5', 'nan', 'x')."""
    if isinstance(v, str) and not _NUMBER.fullmatch(v.strip()):
        return None
    try:
        d = Decimal(v.strip()) if isinstance(v, str) else v
    except InvalidOperation:
        return None
    if not d.is_finite() or d != d.to_integral_value() or abs(d.adjusted()) > 100:  # 1e1000000 is no seed
        return None
    return int(d)


def _name(v) -> str:
    if _empty(v):
        raise ValueError("is empty")
    if isinstance(v, str):
        if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in v):
            raise ValueError(f"{_shown(v)} holds a line break or another control character; a name is one line")
        return v
    if isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
        return str(v)
    raise ValueError(f"{_shown(v)} is not a variant's name")


def _flag(v) -> bool:
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0"):
        return v.strip().lower() in ("true", "1")
    raise ValueError(f"{'is empty' if _empty(v) else _shown(v) + ' is not'} true or false (did the run diverge?)")


def _message(v) -> str:
    if _empty(v) or (isinstance(v, float | np.floating) and math.isnan(v)):  # a Parquet text column's null reads as NaN
        return ""
    if isinstance(v, str):
        try:
            _number(v)
        except ValueError:
            return v
    raise ValueError(
        f"{_shown(v)} is a number: judge reads an {ERROR} column as the message of a run that failed (as in "
        "modern-gpt's runs.csv); rename the column"
    )


def _shown(v) -> str:
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------
# A Source and settings -> report.py's meta and runs
# ---------------------------------------------------------------------------
def names(text: str | list | tuple | None, what: str = "order") -> tuple[str, ...] | None:
    """--order A,B,C (or a list or tuple, from Python) as a tuple of names. Anything else is refused: a set has no
    order, so the rows, their references and verdicts would change from run to run (with PYTHONHASHSEED)."""
    if text is None:
        return None
    if isinstance(text, str):
        return tuple(x.strip() for x in text.split(","))
    if isinstance(text, list | tuple):
        return tuple(str(x) for x in text)
    why = " (a set has no order, so the table's rows and references would change from run to run)"
    raise UserError(
        f"{what} must be a comma list or a list of variant names in the table's order, not {_shown(text)}"
        + (why if isinstance(text, set | frozenset | dict) else "")
        + "."
    )


def check_settings(s: JudgeSettings) -> None:
    check_statistics(s.alpha, None)
    if s.margin is not None and not 0 < s.margin < math.inf:
        raise UserError(f"--margin must be a positive number in the units of {s.metric}, got {s.margin}.")
    cols = {"--variant-col": s.variant_col, "--seed-col": s.seed_col, "--metric": s.metric}
    for flag, col in cols.items():
        same = [f for f, c in cols.items() if c == col and f != flag]
        if same:
            raise UserError(f"{flag} and {same[0]} both name the column {col!r}; each needs its own column.")


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


def _number_or_empty(v) -> float:
    """A failed run's metric: a number, or empty (NaN), as in modern-gpt's runs.csv; it is left out anyway."""
    return math.nan if _empty(v) else _number(v)


def _failed_value(record: dict, col: str) -> float:
    """A failed run's steps_done, for the footnote that names it (NaN when there is none)."""
    try:
        return _number(record.get(col, _MISSING))
    except ValueError:
        return math.nan


def _listed(items, limit: int = 12) -> str:
    items = [repr(x) for x in items]  # quoted: a name's spaces show
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _order(source: Source, s: JudgeSettings, found: list[str]) -> list[str]:
    """The table's rows: --order (every variant, each once), else as the variants first appear."""
    name, col = source.name, s.variant_col
    if len(found) < 2:
        raise UserError(
            f"{name}, column {col}: every row is variant {found[0]!r}; judge compares two or more variants."
        )
    _no_look_alikes(source, s, found)
    if s.order is None:
        rows = found
    else:
        rows = list(s.order)
        for n in rows:
            if n not in found:
                raise UserError(
                    f"--order names {n!r}, which no row of {name} has in column {col} (its variants: {_listed(found)})."
                )
        twice = next((n for i, n in enumerate(rows) if n in rows[:i]), None)
        if twice is not None:
            raise UserError(f"--order names {twice!r} twice; give each variant once.")
        left = [n for n in found if n not in rows]
        if left:
            raise UserError(
                f"--order leaves out {_listed(left)}, which {name} has in column {col}; name every variant, or "
                "give judge a file without it."
            )
    for flag, n in (("--reference", s.reference), ("--placebo", s.placebo)):
        if n is not None and n not in rows:
            raise UserError(f"{flag} {n!r} is not a variant of {name} (column {col} has: {_listed(rows)}).")
    return rows


def _look(name: str) -> str:
    """What a name looks like on screen: Unicode's compatibility form, without invisible characters or the spaces
    around it."""
    return "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf").strip()


def _no_look_alikes(source: Source, s: JudgeSettings, found: list[str]) -> None:
    """Two variants that print alike would read as one row twice, and --reference or --order could pick either."""
    seen: dict[str, str] = {}
    for n in found:
        other = seen.setdefault(_look(n), n)
        if other != n:
            raise UserError(
                f"{source.name}, column {s.variant_col}: the variants {other!r} and {n!r} print alike (they differ "
                "only in spaces around them, invisible characters or Unicode normalisation); give each its own name."
            )


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


def _references(source: Source, s: JudgeSettings, rows: list[str]) -> list[int | None]:
    """Each row's reference: --reference, else the row above (never the placebo); the placebo's is the first row."""
    if s.placebo is not None and s.placebo == rows[0]:
        raise UserError(
            f"--placebo {s.placebo!r} is the first row, which the placebo is compared with; put it lower with --order."
        )
    if s.placebo is not None and s.placebo == s.reference:
        raise UserError(
            f"--placebo and --reference both name {s.placebo!r}; the placebo is compared with the first row."
        )
    refs, above = [], None
    for i, v in enumerate(rows):
        if v == s.placebo:
            refs.append(0)
        elif s.reference is not None:
            refs.append(None if v == s.reference else rows.index(s.reference))
        else:
            refs.append(above)
            above = i
    return refs


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
        design, rows, notes = judge_ladder(
            df, s, LadderSettings(compute_col, size_col, rung_col, trend_margin, target_compute)
        )
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


# ---------------------------------------------------------------------------
# judge --compute-col: the scale table (verdict/ladder.py) of anyone's ladder of sizes
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LadderSettings:
    """What judge --compute-col (or --size-col) adds: the column of each run's training compute (or model size),
    the column naming its rung (None: the file's `rung` column if it has one, else each variant's distinct
    computes, smallest first), the trend's equivalence margin and the compute to extrapolate to."""

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
    return str(v).strip()


def ladder_from(source: Source, s: JudgeSettings, ls: LadderSettings):
    """The LadderDesign and runs frame (row, rung, seed, val_loss, flops, failed) of a file of runs at several
    sizes, checked cell by cell as judge checks any file."""
    from .ladder import LadderDesign

    check_settings(s)
    if (ls.compute_col is None) == (ls.size_col is None):
        raise UserError("give one of --compute-col (each run's training FLOPs) or --size-col (its model size).")
    if s.higher_is_better:
        raise UserError(
            "--compute-col reads a loss that falls as compute grows; a higher-is-better metric has no compute "
            "multiplier here (give a loss as --metric)."
        )
    name, axis = source.name, ls.axis
    rung_col = ls.rung_col or ("rung" if "rung" in source.columns and axis != "rung" else None)
    for col, what in ((s.variant_col, "variant"), (s.seed_col, "seed"), (s.metric, "metric"), (axis, "compute")):
        if col not in source.columns:
            raise UserError(
                f"{name}, {source.header}: no {what} column {col!r} (its columns: {_listed(source.columns)})."
            )
    if rung_col is not None and rung_col not in source.columns:
        raise UserError(
            f"{name}, {source.header}: no rung column {rung_col!r} (its columns: {_listed(source.columns)})."
        )
    runs, first_seen = _ladder_records(source, s, axis, rung_col)
    rows = _order(source, s, list(first_seen))
    refs = _references(source, s, rows)
    labels = _rungs(name, rows, runs, rung_col)
    frame = pd.DataFrame(runs)
    frame["row"] = frame["variant"].map({v: i for i, v in enumerate(rows)})
    frame["rung"] = frame["rung"].map({r: i for i, r in enumerate(labels)}) if rung_col else _ranks(frame)
    table = tuple(Row(v, ref, placebo=v == s.placebo) for v, ref in zip(rows, refs, strict=True))
    shown = labels if rung_col else [f"{x:.3g}" for x in labels]
    design = LadderDesign(
        table, tuple(shown), tuple(sorted({r["seed"] for r in runs})), s.alpha, ls.trend_margin, ls.target, source=name
    )
    return design, frame


def _ladder_records(source: Source, s: JudgeSettings, axis: str, rung_col: str | None) -> tuple[list[dict], dict]:
    """Each run of a ladder file, checked cell by cell: variant, seed, rung, metric, compute and whether it failed;
    and where each variant first appears."""
    name = source.name
    markers = [c for c in (DIVERGED, ERROR) if c in source.columns]

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
        failed = (DIVERGED in markers and cell(where, record, DIVERGED, _flag)) or (
            ERROR in markers and bool(cell(where, record, ERROR, _message))
        )
        value = cell(where, record, s.metric, _metric if not failed else _number_or_empty)
        if not failed and not math.isfinite(value):
            raise UserError(f"{name}, {where}, column {s.metric}: {value} is not a finite number.")
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
    """The rungs, smallest first: a rung column's labels ordered by the first row's mean compute, or the first
    row's distinct computes; every variant must have as many."""
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
    return sorted(first, key=lambda r: sum(first[r]) / len(first[r]))


def _ranks(frame: pd.DataFrame) -> pd.Series:
    """Each run's rung as the rank of its compute among its variant's distinct computes."""
    return frame.groupby("variant")["flops"].rank(method="dense").astype(int) - 1


def judge_ladder(path_or_frame, s: JudgeSettings, ls: LadderSettings):
    """The scale table of a file (or a DataFrame) of runs at several sizes: (design, rows, notes)."""
    from .ladder import ladder_table

    source = read_file(path_or_frame) if not isinstance(path_or_frame, pd.DataFrame) else from_frame(path_or_frame)
    design, runs = ladder_from(source, s, ls)
    rows, notes = ladder_table(design, runs)
    if ls.size_col is not None:
        notes.insert(
            0,
            f"k is in units of {ls.size_col}, not compute: how many times the reference's {ls.size_col} reaches the row's loss.",
        )
    return design, rows, notes
