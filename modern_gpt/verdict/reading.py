"""What judge reads: a file or DataFrame of anyone's runs (CSV, JSON lines, Parquet), checked cell by cell. And
judge's settings: which columns, the rows' order and references. judge.py (one size) and ladder_judge.py (a
ladder of sizes) build their tables on these readers. Nothing here computes a statistic.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shlex
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import UserError
from ..core.files import not_regular
from .design import ALPHA, check_statistics

SUFFIXES = (".csv", ".jsonl", ".parquet")

# A tracker's export: MLflow's search_runs names each run's values tags.KEY, params.KEY and metrics.KEY, which judge
# reads as KEY (tags first: modern-gpt logs a run's variant, seed, row, reference and placebo as tags).
EXPORT_PREFIXES = ("tags.", "params.", "metrics.")

# The CSV MLflow's UI downloads from its runs table: these columns, then params, metrics and tags by bare key; it
# writes a cell beginning with = + - @ (a variant '+rope', a Δ -0.02) with a ' before it, so that a spreadsheet
# does not read it as a formula.
MLFLOW_UI_HEADER = ["Start Time", "Duration", "Run ID", "Name", "Source Type", "Source Name", "User", "Status"]


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
    """A table read from a file or a DataFrame, by column: each column's cells in the runs' order, and where each
    run is. A list per column, not a dict per run: a million runs as dicts took 2.3 GB."""

    name: str
    columns: list[str]
    cells: dict[str, list]  # column -> its cell of every run; _MISSING where a JSON line has no such key
    header: str  # where the column names are
    places: Callable[[int], str]  # run i -> "line 5", "row 3 (index 'z')": said only in a sentence
    size: int
    index_names: tuple[str, ...] = ()  # a DataFrame's named index levels (df.set_index("variant")): not columns
    frame: bool = False  # a DataFrame given to modern_gpt.judge (a sentence then names the pandas call that helps)

    def where(self, i: int) -> str:
        return self.places(int(i))

    def column(self, col: str) -> list:
        return self.cells[col] if col in self.cells else [_MISSING] * self.size

    def real(self, col: str, flag: str | None = None) -> str:
        """The column that holds `col`: itself, else the one of tags.COL, params.COL and metrics.COL it has. Those
        are a tracker's export: MLflow's search_runs frame, and the CSV pandas writes of it. `col` when none.
        Two of them that differ are one sentence. flag: how the setting that names the column is written, as in
        "--seed-col {}", to name one of them."""
        if col in self.cells:
            return col
        found = [f"{prefix}{col}" for prefix in EXPORT_PREFIXES if f"{prefix}{col}" in self.cells]
        for other in found[1:]:
            pairs = zip(self.cells[found[0]], self.cells[other], strict=True)
            i = next((i for i, (a, b) in enumerate(pairs) if _as_text(a) != _as_text(b)), None)
            if i is not None:
                fix = f"name the one to read, as in {flag.format(found[0])}" if flag else "leave one of them out"
                raise UserError(
                    f"{self.name}, {self.where(i)}: columns {found[0]} and {other} both hold {col}, and differ "
                    f"({_shown(self.cells[found[0]][i])} and {_shown(self.cells[other][i])}); {fix}."
                )
        return found[0] if found else col

    def has(self, col: str) -> bool:
        return self.real(col) in self.cells

    def subset(self, keep: list[int]) -> Source:
        """The runs at these positions, each still named where it is in the file or frame."""
        places = self.places
        cells = {c: [v[i] for i in keep] for c, v in self.cells.items()}
        return replace(self, cells=cells, places=lambda i: places(keep[i]), size=len(keep))

    @cached_property
    def records(self) -> list[tuple[str, dict]]:
        """("line 5", {column: value}) per run, for ladder_judge's reader. A JSON line's absent keys stay absent."""
        cols = [(c, self.cells[c]) for c in self.columns]
        return [(self.where(i), {c: v[i] for c, v in cols if v[i] is not _MISSING}) for i in range(self.size)]


# ---------------------------------------------------------------------------
# Reading: CSV, JSONL, Parquet, or a DataFrame
# ---------------------------------------------------------------------------
def read_file(path) -> Source:
    """FILE as a Source. Its suffix, in any case, says the format. Anything unreadable is one sentence."""
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
    return _mlflow_ui(_csv(path, _text(path, data))) if suffix == ".csv" else _jsonl(path, _text(path, data))


# A compressed file named .csv or .jsonl (a download saved as data.csv): its first bytes say what it is.
COMPRESSED = {  # its first bytes, its name, the command that decompresses it to stdout
    b"\x1f\x8b": ("gzip", "gunzip -c"),
    b"BZh": ("bzip2", "bunzip2 -c"),  # and a digit, then the block's magic (_compressed)
    b"PK\x03\x04": ("zip", "unzip -p"),
    b"\xfd7zXZ\x00": ("xz", "unxz -c"),
    b"\x28\xb5\x2f\xfd": ("zstd", "zstd -dc"),
}


def _compressed(data: bytes):
    """The COMPRESSED entry a file's first bytes match, or None; "xlsx" for a zip that is an Excel workbook. A
    bzip2 stream is BZh, a block size digit and the block magic 1AY&SY. So a CSV whose header starts BZh is text."""
    for magic, kind in COMPRESSED.items():
        if data.startswith(magic):
            if kind[0] == "bzip2" and not re.match(rb"BZh[1-9]1AY&SY", data):
                continue
            if kind[0] == "zip" and (b"[Content_Types].xml" in data[:4096] or b"xl/" in data[:4096]):
                return "xlsx"
            return kind
    return None


def _text(path: Path, data: bytes) -> str:
    """The file as UTF-8 text. UTF-16 (Excel's "Unicode text") and a compressed file are named with their fix,
    not as a bad byte."""
    packed = _compressed(data)
    if packed == "xlsx":
        raise UserError(
            f"{path} is an Excel workbook (.xlsx), not {path.suffix.lower()[1:].upper()} text; save it from Excel as "
            '"CSV UTF-8 (Comma delimited)", or convert it: pd.read_excel(FILE).to_csv(NEW, index=False).'
        )
    if packed:
        suffix = path.suffix.lower()
        raise UserError(
            f"{path} is a {packed[0]}-compressed file, not {suffix[1:].upper()} text; decompress it "
            f"({packed[1]} {shlex.quote(str(path))} > NEW{suffix}) and judge that."
        )
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or data[:200].count(b"\x00") > len(data[:200]) // 4:
        raise UserError(
            f'{path} is UTF-16 text (Excel saves "Unicode text" so), where judge reads UTF-8 with commas; save it '
            'from Excel as "CSV UTF-8 (Comma delimited)" instead, or convert it: iconv -f UTF-16 -t UTF-8 FILE | tr '
            "'\\t' , > NEW.csv."
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}, line {line}: not UTF-8 text (byte {data[e.start]:#04x}).") from None


def _csv(path: Path, text: str) -> Source:
    _not_excels(path, text)
    plain = text.replace("\r\n", "\n")
    if '"' in plain or "\r" in plain or "\0" in plain or plain.startswith("\n"):
        return _quoted_csv(path, text)  # what only the csv module reads as it reads it
    lines = plain.split("\n")
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    if max(map(len, lines)) > csv.field_size_limit():  # a field over the csv module's limit: its error
        return _quoted_csv(path, text)
    return _plain_csv(path, lines)


def _plain_csv(path: Path, lines: list[str]) -> Source:
    """A CSV without quotes or lone carriage returns, split by column. The csv module's records and lines
    exactly, at the cost of str.split: a field per comma, a record per non-blank line."""
    header = lines[0].split(",")
    _no_repeats(path, header, "line 1 (the header)")
    body = lines[1:]
    numbers = np.flatnonzero(np.fromiter(map(len, body), np.int64, len(body))) + 2  # blank lines are no record
    kept = [body[n - 2] for n in numbers.tolist()] if len(numbers) < len(body) else body
    counts = np.fromiter((x.count(",") for x in kept), np.int64, len(kept))
    wrong = np.flatnonzero(counts != len(header) - 1)
    if len(wrong):
        n = wrong[0]
        raise UserError(f"{path}, line {numbers[n]}: {counts[n] + 1} fields where the header has {len(header)}.")
    if not kept:
        raise UserError(f"{path} has a header but no rows; give one row per run.")
    fields = ",".join(kept).split(",")
    cells = {c: fields[j :: len(header)] for j, c in enumerate(header)}
    return Source(str(path), header, cells, "line 1 (the header)", lambda i: f"line {numbers[i]}", len(kept))


def _quoted_csv(path: Path, text: str) -> Source:
    """Any CSV the csv module reads, record by record: quotes, a field across lines, lone carriage returns."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows, starts, end = [], [], 0
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
            rows.append(fields)
            starts.append(start)
    except csv.Error as e:
        raise UserError(f"{path}, line {reader.line_num}: not valid CSV ({e}).") from None
    if not rows:
        raise UserError(f"{path} has a header but no rows; give one row per run.")
    cells = {c: list(v) for c, v in zip(header, zip(*rows, strict=True), strict=True)}
    return Source(str(path), header, cells, "line 1 (the header)", lambda i: f"line {starts[i]}", len(rows))


def _not_excels(path: Path, text: str) -> None:
    """Excel's CSVs that are not comma-separated, each named with its fix. A `sep=` first line, and columns
    separated by ';' (where the decimal separator is a comma) or tabs."""
    first = text.split("\n", 1)[0].rstrip("\r")
    if re.fullmatch(r"sep=.?", first, re.IGNORECASE):
        raise UserError(
            f"{path}, line 1: {first!r} is Excel's separator line, not a header; delete that line"
            + ("" if first[4:] == "," else f" and save the file with commas between columns (it uses {first[4:]!r})")
            + "."
        )
    for sep in (";", "\t"):
        if sep in first and "," not in first:
            commas = re.search(r"\d,\d", text) is not None
            raise UserError(
                f"{path}, line 1 (the header): the columns are separated by {sep!r}, not commas"
                + (
                    ", with decimal commas in the numbers (as Excel saves CSV where a comma is the decimal point)"
                    if commas
                    else ""
                )
                + f"; save it with commas between columns and points in numbers, or convert it with pandas: "
                f"pd.read_csv(FILE, sep={sep!r}" + (", decimal=','" if commas else "") + ").to_csv(NEW, index=False)."
            )


def _json_float(text: str):
    """A JSON number as a float, or as its text where float64 cannot hold it; 1e400 is not infinity. The cell's
    check then names it as it names the CSV's digits."""
    x = float(text)
    return x if math.isfinite(x) else text


def _jsonl(path: Path, text: str) -> Source:
    records, columns, lines = [], {}, []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_once, parse_float=_json_float)
        except _Twice as e:
            raise UserError(f"{path}, line {n}: the key {e.args[0]!r} is given twice; give each column once.") from None
        except ValueError as e:
            raise UserError(f"{path}, line {n}: not JSON ({str(e).splitlines()[0]}).") from None
        except RecursionError:  # json.loads recurses once per [ or {
            raise UserError(f"{path}, line {n}: JSON nested too deeply to read; a run is one flat object.") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}, line {n}: a JSON {type(record).__name__}, where each line must be an object.")
        columns.update(dict.fromkeys(record))
        records.append(record)
        lines.append(n)
    cells = {c: [r.get(c, _MISSING) for r in records] for c in columns}
    return Source(str(path), list(columns), cells, "any line", lambda i: f"line {lines[i]}", len(records))


class _Twice(Exception):
    """A JSON object with a key twice. json.loads would keep the last value without a word."""


def _once(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Twice(k)
        out[k] = v
    return out


def _parquet(path: Path) -> Source:
    import pyarrow
    import pyarrow.parquet

    try:
        _no_repeats(path, pyarrow.parquet.read_schema(path).names, "its columns")  # pyarrow's own words otherwise
        frame = pd.read_parquet(path)
    except (OSError, ValueError, pyarrow.ArrowException) as e:
        raise UserError(f"{path} cannot be read as Parquet ({(str(e).splitlines() or ['unknown'])[0]}).") from None
    if any(n is not None for n in frame.index.names):  # pandas wrote df.set_index("variant"): a column in the file
        frame = frame.reset_index(allow_duplicates=True)
    return from_frame(frame, str(path), first=1, given=False)


def from_frame(frame, name: str = "the DataFrame", first: int = 0, given: bool = True) -> Source:
    """A DataFrame as a Source. Its records are named by position (row 0, 1, ... or from `first`), and by index
    label when the index is not the default one. given: handed to modern_gpt.judge, not read from a file."""
    if isinstance(frame, pd.Series) and any(n is not None for n in frame.index.names):
        raise UserError(
            "judge takes a pandas DataFrame with one row per run, not a Series; series.reset_index() makes one, "
            f"with its index ({_listed([n for n in frame.index.names if n is not None])}) as columns."
        )
    if not isinstance(frame, pd.DataFrame):
        raise UserError(
            "judge takes a pandas DataFrame with one row per run, or the path of a .csv, .jsonl or .parquet file of "
            f"them, not a {type(frame).__name__}."
        )
    if isinstance(frame.columns, pd.MultiIndex):  # a pivot's wide table: a column per (metric, variant)
        level = frame.columns.names[-1]
        raise UserError(
            f"{name} has a MultiIndex of columns (levels {_listed(frame.columns.names)}): a wide table, where judge "
            f"reads a long one, one row per run; make it long with df.stack({-1 if level is None else repr(level)})"
            ".reset_index()."
        )
    columns = [str(c) for c in frame.columns]
    _no_repeats(name, columns, "its columns")
    if not len(frame):
        raise UserError(f"{name} has no rows; give one row per run.")
    plain = isinstance(frame.index, pd.RangeIndex) and frame.index.start == 0 and frame.index.step == 1
    labels = frame.index

    def place(i: int) -> str:
        label = labels[i].item() if hasattr(labels[i], "item") else labels[i]  # 0, not np.int64(0)
        return f"row {first + i}" + ("" if plain else f" (index {label!r})")

    cells = {c: _cells(frame.iloc[:, j]) for j, c in enumerate(columns)}
    index = tuple(str(n) for n in frame.index.names if n is not None)
    return Source(name, columns, cells, "its columns", place, len(frame), index, frame=given)


def _cells(column: pd.Series) -> list:
    """A column's cells as DataFrame.to_dict("records") gives them, the values every sentence has shown. Python
    scalars of a NumPy column, and an object column's values boxed the same way."""
    if column.dtype == object:
        from pandas.core.dtypes.cast import maybe_box_native  # to_dict's own boxing

        return list(map(maybe_box_native, column))
    return column.tolist() if isinstance(column.dtype, np.dtype) else list(column)


def _no_repeats(name, columns: list[str], where: str) -> None:
    twice = next((c for i, c in enumerate(columns) if c in columns[:i]), None)
    if twice is not None and columns[: len(MLFLOW_UI_HEADER)] == MLFLOW_UI_HEADER:
        raise UserError(
            f"{name}, {where}: the column {twice!r} is named twice, as MLflow's UI names a param and a tag of one key "
            f"(modern-gpt before issue 30 logged seed, variant and lr as both); read the runs with "
            f"mlflow.search_runs(...), whose columns are params.{twice} and tags.{twice}, or delete one of the two "
            "columns."
        )
    if twice is not None:
        raise UserError(f"{name}, {where}: the column {twice!r} is named twice.")


def _mlflow_ui(source: Source) -> Source:
    """The CSV of MLflow's UI with its cells as logged. A ' that MLflow put before = + - @ is taken off again."""
    if source.columns[: len(MLFLOW_UI_HEADER)] != MLFLOW_UI_HEADER:
        return source
    for values in source.cells.values():
        for i, v in enumerate(values):
            if type(v) is str and len(v) > 1 and v[0] == "'" and v[1] in "=+-@\r\t":
                values[i] = v[1:]
    return source


def _as_text(v) -> str:
    """A cell as text, to compare two columns that hold one key. "" for an empty one."""
    if _empty(v) or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).strip()


# ---------------------------------------------------------------------------
# Cells: each checked, each problem a phrase for the one sentence
# ---------------------------------------------------------------------------
_MISSING = object()


def _empty(v) -> bool:
    return v is _MISSING or v is None or v is pd.NA or (isinstance(v, str) and not v.strip())


def _number(v) -> float:
    """A number as written, NaN and infinity included: the caller decides. ValueError with the reason."""
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
    """A run's metric: a number of a size the statistics hold. NaN and infinity: the caller decides."""
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
    """A whole number as written, exactly: '7', '7.0', '-2', '1e3'. pandas writes a seed column that had a gap
    as floats. None for anything else ('0.5', 'nan', 'x')."""
    if isinstance(v, str) and not _NUMBER.fullmatch(v.strip()):
        return None
    try:
        d = Decimal(v.strip()) if isinstance(v, str) else v
    except InvalidOperation:
        return None
    if not d.is_finite() or d != d.to_integral_value() or abs(d.adjusted()) > 100:  # 1e1000000 is no seed
        return None
    return int(d)


# Bidi controls (Unicode's explicit embeddings, overrides, isolates and marks): a name holding one prints
# reordered, 'left-b' after U+202E as 'b-tfel', so a row would read as another.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _name(v) -> str:
    if _empty(v):
        raise ValueError("is empty")
    if isinstance(v, str):
        if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in v):
            raise ValueError(f"{_shown(v)} holds a line break or another control character; a name is one line")
        bidi = next((c for c in v if c in _BIDI), None)
        if bidi is not None:
            raise ValueError(
                f"{_shown(v)} holds the bidi control U+{ord(bidi):04X}, which makes the table print the name "
                "reordered; give each variant a name without it"
            )
        return v
    if isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
        return str(v)
    raise ValueError(f"{_shown(v)} is not a variant's name")


def _flag(v) -> bool:
    """true or false. Also 1 and 0, and 1.0 and 0.0: MLflow's diverged metric is a float."""
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | float | np.integer | np.floating) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0", "1.0", "0.0"):
        return v.strip().lower() in ("true", "1", "1.0")
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


# ---------------------------------------------------------------------------
# Columns: every cell of one column parsed at once, refusals as a mask (the sentence comes from the parser again)
# ---------------------------------------------------------------------------
def parsed(values: list, parse) -> tuple[list, np.ndarray]:
    """Each cell through `parse`, a cell parser above. A text is parsed once per distinct value, since a seed or a
    variant repeats down a long column. The value None and True where `parse` refuses the cell."""
    out, bad, seen = [None] * len(values), np.zeros(len(values), bool), {}
    for i, v in enumerate(values):
        if type(v) is str and v in seen:  # only text: 1, 1.0 and True are one key of a dict, and not one cell
            out[i] = seen[v]
            continue
        try:
            out[i] = parse(v)
        except ValueError:
            bad[i] = True
            continue
        if type(v) is str:
            seen[v] = out[i]
    return out, bad


def numbers(values: list) -> tuple[np.ndarray, np.ndarray]:
    """_number of every cell as float64 (NaN where refused), and the mask of refused cells. Python's float() runs
    over the column when every cell is an ASCII number as written (the million-run case). Else cell by cell."""
    x = None
    if all(type(v) is str for v in values):
        joined = "\x1f".join(values)  # a separator float() refuses: one check of the whole column
        if joined.isascii() and "_" not in joined:  # float() reads '1_0' and non-ASCII digits; _NUMBER does not
            try:
                x = np.fromiter(map(float, values), np.float64, len(values))
            except ValueError:
                x = None
    elif all(type(v) is float for v in values):  # a DataFrame's float64 column
        x = np.array(values, np.float64)
    if x is not None:
        bad = np.zeros(len(values), bool)
        for i in np.flatnonzero(np.isinf(x)).tolist():  # digits that overflow read as inf: _number names them
            bad[i] = _refuses(_number, values[i])
        return np.where(bad, np.nan, x), bad
    out, bad = parsed(values, _number)
    return np.array([math.nan if b else v for v, b in zip(out, bad, strict=True)], np.float64), bad


def out_of_range(x: np.ndarray) -> np.ndarray:
    """Where _metric refuses a number that _number read: nonzero, outside the sizes float64 statistics hold."""
    with np.errstate(invalid="ignore"):
        size = np.abs(x)
        return np.isfinite(x) & (x != 0) & ((size < SMALLEST) | (size > LARGEST))


def _refuses(parse, v) -> bool:
    try:
        parse(v)
    except ValueError:
        return True
    return False


def refusal(parse, v) -> str:
    """What `parse` says of a cell it refuses, for the one sentence. A JSON line's absent key is missing."""
    if v is _MISSING:
        return "is missing"
    try:
        parse(v)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"{parse.__name__} takes {v!r}")


def _shown(v) -> str:
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------
# A Source and settings -> report.py's meta and runs
# ---------------------------------------------------------------------------
def names(text: str | list | tuple | None, what: str = "order") -> tuple[str, ...] | None:
    """--order A,B,C, or a list or tuple from Python, as a tuple of names. Anything else is refused. A set has no
    order: the rows, their references and verdicts would change from run to run (with PYTHONHASHSEED)."""
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


def check_settings(s: JudgeSettings, more: dict | None = None) -> None:
    """alpha, margin, and the columns each setting names, each its own. more: a ladder's columns, by flag."""
    check_statistics(s.alpha, None)
    if s.margin is not None and not 0 < s.margin < math.inf:
        raise UserError(f"--margin must be a positive number in the units of {s.metric}, got {s.margin}.")
    cols = {"--variant-col": s.variant_col, "--seed-col": s.seed_col, "--metric": s.metric}
    cols |= {flag: col for flag, col in (more or {}).items() if col is not None}
    for flag, col in cols.items():
        same = [f for f, c in cols.items() if c == col and f != flag]
        if same:
            raise UserError(f"{flag} and {same[0]} both name the column {col!r}; each needs its own column.")


def _number_or_empty(v) -> float:
    """A failed run's metric: a number, or empty (NaN), as in modern-gpt's runs.csv. It is left out anyway."""
    return math.nan if _empty(v) else _number(v)


def _failed_value(record: dict, col: str) -> float:
    """A failed run's steps_done, for the footnote that names it. NaN when there is none."""
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
    """What a name looks like on screen: Unicode's compatibility form, without invisible characters or the
    spaces around it."""
    return "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf").strip()


def _no_look_alikes(source: Source, s: JudgeSettings, found: list[str]) -> None:
    """Two variants that print alike would read as one row twice. --reference or --order could pick either."""
    seen: dict[str, str] = {}
    for n in found:
        other = seen.setdefault(_look(n), n)
        if other != n:
            raise UserError(
                f"{source.name}, column {s.variant_col}: the variants {other!r} and {n!r} print alike (they differ "
                "only in spaces around them, invisible characters or Unicode normalisation); give each its own name."
            )


def _references(source: Source, s: JudgeSettings, rows: list[str]) -> list[int | None]:
    """Each row's reference: --reference, else the row above, never the placebo. The placebo's is the first row."""
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


# ---------------------------------------------------------------------------
# The file's own marks: its row, reference and placebo columns (judge.py and ladder_judge.py read them)
# ---------------------------------------------------------------------------
# How a sentence names each setting: the command's flags, or modern_gpt.judge's keywords.
CLI_FLAGS = {
    "variant_col": "--variant-col {}",
    "seed_col": "--seed-col {}",
    "metric": "--metric {}",
    "order": "--order A,B,C",
}
API_FLAGS = {
    "variant_col": "variant_col={!r}",
    "seed_col": "seed_col={!r}",
    "metric": "metric={!r}",
    "order": "order=[...]",
}

# The columns of modern-gpt's runs.csv (and tags of its MLflow runs) that say the table's rows, as its plan has them.
ROW, REFERENCE, PLACEBO = "row", "reference", "placebo"


def _and(items: list) -> str:
    """'a', 'a' and 'b', 'a', 'b' and 'c'."""
    shown = [repr(x) for x in items]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def _is_placebo(v) -> bool:
    try:
        return _flag(v)
    except ValueError:
        raise ValueError(
            f"{'is empty' if _empty(v) else _shown(v) + ' is not'} true or false (is the row the placebo?)"
        ) from None


@dataclass
class _Marks:
    """What the file says of its table's rows, as modern-gpt's runs.csv and its MLflow runs' tags say it. Each
    variant's row number (the order), its reference by name, and the placebo. None where the file does not say,
    or a setting does: --order, --reference, --placebo. `runs` holds each run's variant (.variant), in the
    source's order."""

    order: tuple[str, ...] | None = None
    row_col: str | None = None  # the row column, used or not
    refs: dict | None = None  # variant -> the variant it is compared with, or None
    ref_col: str | None = None
    placebo: str | None = None
    placebo_col: str | None = None

    @classmethod
    def read(cls, source: Source, s: JudgeSettings, runs, found: list[str]) -> _Marks:
        own = (s.variant_col, s.seed_col, s.metric)
        col = {c: source.real(c) for c in (ROW, REFERENCE, PLACEBO)}
        col = {c: x for c, x in col.items() if x in source.cells and x not in own}
        marks = cls(row_col=col.get(ROW), ref_col=col.get(REFERENCE), placebo_col=col.get(PLACEBO))
        if s.order is None and marks.row_col is not None:
            marks.order = _row_order(source, marks.row_col, runs, found)
        if s.reference is None and marks.ref_col is not None:
            marks.refs = _file_references(source, s, marks.ref_col, runs, found)
        if s.placebo is None and marks.placebo_col is not None:
            marks.placebo = _file_placebo(source, marks.placebo_col, runs, found)
        return marks

    def references(self, source: Source, s: JudgeSettings, rows: list[str], flags: dict) -> tuple[str | None, list]:
        """The placebo: --placebo, else the file's. Each row's reference: --reference, else the file's, else the
        row above."""
        placebo = s.placebo if s.placebo is not None else self.placebo
        if s.placebo is None and placebo is not None:  # the file's: its problems name its column
            col = self.placebo_col
            if placebo == rows[0]:
                raise UserError(
                    f"{source.name}, column {col}: the placebo {placebo!r} is the first row, which a placebo is "
                    f"compared with; put it lower with {flags['order']}."
                )
            if placebo == s.reference:
                raise UserError(
                    f"{source.name}, column {col} marks {placebo!r} as the placebo, which is compared with the first "
                    f"row, and --reference names it; give another reference."
                )
        if self.refs is None:
            return placebo, _references(source, replace(s, placebo=placebo), rows)
        at = {v: i for i, v in enumerate(rows)}
        refs = [None if self.refs[v] is None else at[self.refs[v]] for v in rows]
        if placebo is not None:
            i = at[placebo]
            if s.placebo is not None:
                if i == 0:
                    _references(source, s, rows)  # its sentence: the placebo is the first row
                refs[i] = 0  # --placebo: compared with the first row
            elif refs[i] != 0:
                guessed = s.order is None and self.order is None  # the order the variants first appear in
                raise UserError(
                    f"{source.name}, column {self.placebo_col}: the placebo {placebo!r} is compared with "
                    f"{'no row' if refs[i] is None else repr(rows[refs[i]])} in column {self.ref_col}, where a placebo "
                    f"is compared with the first row, {rows[0]!r}"
                    + (
                        f" (the first to appear in the file, which gives the rows no order: give it with "
                        f"{flags['order']}, every variant once; MLflow lists the newest run first)."
                        if guessed
                        else "."
                    )
                )
        return placebo, refs

    def order_notes(self, source: Source, s: JudgeSettings, rows: list[str], found: list[str], flags: dict) -> list:
        """Where the rows' order came from, when the file gave it. Its row column, when the variants appear in
        another order. Or the order they first appear in, where each row is compared with the row above."""
        if s.order is not None:
            return []
        if self.order is not None:
            if list(self.order) == found:
                return []
            return [
                f"The rows are in the order of column {self.row_col} (each variant's number there), not as the "
                f"variants first appear in {source.name}; {flags['order']} gives another."
            ]
        if s.reference is not None or self.refs is not None:  # every row against a named one: the order is shown
            return []
        why = (
            "" if self.row_col is None else f" (column {self.row_col} does not give each variant one number of its own)"
        )
        return [
            f"The rows are in the order the variants first appear in {source.name}{why}, and each is compared with "
            f"the row above it; if that is not the table's order, give it with {flags['order']} (every variant once)."
        ]


def _row_order(source: Source, col: str, runs, found: list[str]) -> tuple[str, ...] | None:
    """The variants in the order of their numbers in the row column, when it gives each variant one number of its
    own (runs.csv's plan row). None when it does not; another file's row column leaves the file's order."""
    numbers, bad = parsed(source.column(col), _seed)  # a whole number, as a seed is
    if bad.any():
        return None
    per: dict[str, set] = {}
    for v, n in zip(runs.variant, numbers, strict=True):
        per.setdefault(v, set()).add(n)
    if any(len(x) != 1 for x in per.values()) or len({min(x) for x in per.values()}) != len(per):
        return None
    return tuple(sorted(found, key=lambda v: min(per[v])))


def _file_references(source: Source, s: JudgeSettings, col: str, runs, found: list[str]) -> dict:
    """Each variant's reference from the reference column: a variant of the file, by name, or empty for none. The
    same on every run of the variant."""
    name, cells, first = source.name, source.column(col), {}
    for i, v in enumerate(runs.variant):
        cell = cells[i]
        if _as_text(cell):
            try:
                ref = _name(cell)
            except ValueError as e:
                raise UserError(f"{name}, {source.where(i)}, column {col}: {e}.") from None
        else:
            ref = None
        if v in first and first[v][0] != ref:
            was, j = first[v]
            raise UserError(
                f"{name}, {source.where(i)}, column {col}: {v!r} is compared with {_named(ref)} here and with "
                f"{_named(was)} on {source.where(j)}; give each variant one reference."
            )
        first.setdefault(v, (ref, i))
    for v, (ref, i) in first.items():
        if ref is not None and ref not in found:
            raise UserError(
                f"{name}, {source.where(i)}, column {col}: {ref!r} is no variant of {name} (column {s.variant_col} "
                f"has: {_listed(found)}); judge reads column {col} as the variant each row is compared with, empty "
                "for none, as modern-gpt's runs.csv writes it: name a variant there, or rename the column."
            )
        if ref == v:
            raise UserError(
                f"{name}, {source.where(i)}, column {col}: {v!r} is compared with itself; name another variant, or "
                "leave the cell empty."
            )
    return {v: ref for v, (ref, _) in first.items()}


def _named(ref: str | None) -> str:
    return "no row" if ref is None else repr(ref)


def _file_placebo(source: Source, col: str, runs, found: list[str]) -> str | None:
    """The variant the placebo column marks true on every run, and false on every run of the others. Or None."""
    name, flags, bad = source.name, *parsed(source.column(col), _is_placebo)
    if bad.any():
        i = int(np.argmax(bad))
        raise UserError(f"{name}, {source.where(i)}, column {col}: {refusal(_is_placebo, source.column(col)[i])}.")
    first: dict[str, tuple[bool, int]] = {}
    for i, (v, mark) in enumerate(zip(runs.variant, flags, strict=True)):
        if v in first and first[v][0] != mark:
            raise UserError(
                f"{name}, {source.where(i)}, column {col}: {v!r} is marked {str(mark).lower()} here and "
                f"{str(first[v][0]).lower()} on {source.where(first[v][1])}; mark each variant once, on all its runs."
            )
        first.setdefault(v, (mark, i))
    marked = [v for v in found if first[v][0]]
    if len(marked) > 1:
        raise UserError(
            f"{name}, column {col}: {_and(marked)} are each marked as the placebo; a table has one placebo, the "
            "first row run again."
        )
    return marked[0] if marked else None


# A tracker's export (W&B's State, MLflow's status) says how each run ended; a run that did not finish would be
# averaged in like the others.
STATE_COLUMNS = ("state", "status")
FINISHED = frozenset(("", "finished", "complete", "completed", "done", "ok", "success", "succeeded", "successful"))
NOT_FINITE = f"(a failed run is marked true in a {DIVERGED} column, or has a message in an {ERROR} column)"


def unfinished_states(source: Source, s: JudgeSettings, variant: list, seed: list, failed, rung=None) -> list[str]:
    """A footnote per State/status column that says some counted run did not finish, naming those runs. Each
    run's variant, seed, failed mark and, in a ladder, rung: a list each, in the file's order."""
    notes = []
    for col in source.columns:
        if col.lower() not in STATE_COLUMNS or col in (s.variant_col, s.seed_col, s.metric):
            continue
        cells = source.column(col)
        named = [
            f"{variant[i]!r}, seed {seed[i]}{'' if rung is None else f', rung {rung[i]}'}: {cells[i]!r}"
            for i in range(source.size)
            if not failed[i] and str(cells[i]).strip().lower() not in FINISHED and not _empty(cells[i])
        ]
        if named:
            shown = "; ".join(named[:12]) + (f"; and {len(named) - 12} more" if len(named) > 12 else "")
            notes.append(
                f"Column {col} says {len(named)} run{'s' if len(named) != 1 else ''} did not finish ({shown}), yet "
                f"{'they are' if len(named) != 1 else 'it is'} averaged in like the others; mark a run that did "
                f"not finish in an {ERROR} column (with why), or leave it out of the file."
            )
    return notes
