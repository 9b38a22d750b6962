"""The formats and layouts beyond plain text and JSON lines. Compressed files, CSV/TSV, Arrow (a `datasets`
save_to_disk folder), and split layouts (train*, validation*/val*/dev*, test*). The test split is never read."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DataError

DATASETS_META = ("dataset_dict.json", "dataset_info.json", "state.json")  # save_to_disk's, never text
COMPRESSED = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstandard"}
SPLITS = {  # the word in a file's or folder's name, and the split it names
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
}
ORDER = ("train", "validation", "test", "?", None)  # how a layout's sentence lists what it found
_WORDS = re.compile(r"[-_.\s/]+")


def inner_name(name: str) -> str:
    """The name without a compression suffix: corpus.jsonl.gz -> corpus.jsonl."""
    p = Path(name)
    return str(p.with_suffix("")) if p.suffix.lower() in COMPRESSED else name


def decompress(path: Path) -> bytes:
    """A compressed file's bytes, whole. A stream cut short is refused by name."""
    kind = COMPRESSED[path.suffix.lower()]
    if kind == "zstandard":
        try:
            import zstandard
        except ImportError:
            raise DataError(
                f"{path} is zstandard-compressed, which needs the zstandard package: "
                "pip install 'modern-gpt[zst]' (or zstd -d it first)."
            ) from None
        try:
            with open(path, "rb") as f:
                reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
                out = reader.read()
                return out
        except zstandard.ZstdError as e:
            raise DataError(f"{path} is not a readable zstandard stream ({str(e)[:120]}).") from None
    import bz2
    import gzip
    import lzma
    import zlib

    opener = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}[kind]
    try:
        with opener(path, "rb") as f:
            return f.read()
    except EOFError:
        raise DataError(
            f"{path} is a {kind} stream cut short (it ends before its end marker); copy or download it again."
        ) from None
    except (OSError, lzma.LZMAError, ValueError, zlib.error) as e:
        raise DataError(f"{path} is not a readable {kind} stream ({str(e)[:120]}).") from None


def csv_documents(name: str, text: str, column: str, delimiter: str):
    """The `column` of every row of a CSV (or TSV) file with a header line. One document a row."""
    import csv
    import io
    import sys

    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a document can be long
    rows = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(rows, None)
        if header is None:
            return
        if column not in header:
            has = ", ".join(map(repr, header[:6])) or "none"
            kind = "TSV" if delimiter == "\t" else "CSV"
            raise DataError(
                f"{name} has no column {column!r} (its header: {has}); a {kind} file is read through one column: "
                "choose it with --text-field."
            )
        at = header.index(column)
        for n, row in enumerate(rows, start=2):
            if not row:
                continue
            if at >= len(row):
                raise DataError(f"{name} line {n} has {len(row)} fields and no {column!r} column.")
            yield row[at]
    except csv.Error as e:
        raise DataError(f"{name} is not readable CSV ({e}).") from None


def arrow_documents(name: str, raw: bytes, column: str):
    """The `column` of an Arrow file. It may be the IPC stream `datasets` writes, or the IPC file format."""
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
    except ImportError as e:
        raise DataError(f"reading {name} needs pyarrow ({e}); pip install pyarrow.") from None
    try:
        buf = pa.BufferReader(raw)
        table = (ipc.open_file(buf) if raw[:6] == b"ARROW1" else ipc.open_stream(buf)).read_all()
    except Exception as e:  # pyarrow's errors share no base class
        raise DataError(f"{name} is not a readable Arrow file ({str(e).splitlines()[0][:120]}).") from None
    if column not in table.column_names:
        has = ", ".join(map(repr, table.column_names[:6])) or "none"
        raise DataError(f"{name} has no column {column!r} (its columns: {has}); choose it with --text-field.")
    yield from table.column(column).to_pylist()


@dataclass
class Layout:
    """A folder's files by split. Unsplit: `train` holds every file and `validation` is empty."""

    train: list = field(default_factory=list)
    validation: list = field(default_factory=list)
    test: list = field(default_factory=list)
    split: bool = False

    def footnote(self, folder: str) -> str:
        if not self.split:
            return ""
        test = (
            f"; the test split ({len(self.test)} file{'s' * (len(self.test) != 1)}) is never read" if self.test else ""
        )
        val = (
            f"evaluated on its validation split ({len(self.validation)} files)"
            if self.validation
            else "evaluated on the last --val-fraction of the train split, as the folder has no validation split"
        )
        return f"{folder}: trained on its train split ({len(self.train)} files), {val}{test}."


def split_of(relative: Path) -> str | None:
    """The split a file's path names, or None. A word of its name or of a folder above it counts."""
    found = set()
    for part in relative.parts:
        words = _WORDS.split(Path(part).stem.lower() if part == relative.name else part.lower())
        found |= {SPLITS[w] for w in words if w in SPLITS}
    return found.pop() if len(found) == 1 else ("?" if found else None)


def layout(folder: Path, files: list[Path]) -> Layout:
    """The files of a folder by split. A layout that is half split, names no train split, or spells validation
    two ways is refused. The error lists what was found."""
    by: dict[str | None, list[Path]] = {}
    spelled: set[str] = set()
    for f in files:
        rel = f.relative_to(folder)
        s = split_of(rel)
        by.setdefault(s, []).append(f)
        if s == "validation":
            spelled |= {w for part in rel.parts for w in _WORDS.split(part.lower()) if SPLITS.get(w) == "validation"}
    named = {k: v for k, v in by.items() if k is not None}
    if not named:
        return Layout(train=files)

    def listed() -> str:
        parts = []
        for k, v in sorted(by.items(), key=lambda kv: ORDER.index(kv[0])):
            names = ", ".join(str(f.relative_to(folder)) for f in v[:3]) + (
                f" and {len(v) - 3} more" if len(v) > 3 else ""
            )
            parts.append(f"{'no split' if k is None else 'several splits' if k == '?' else k}: {names}")
        return "; ".join(parts)

    if "?" in by or None in by:
        raise DataError(
            f"folder {folder} is an ambiguous split layout ({listed()}); give a folder whose every file names one "
            "split (train, validation, test), or none."
        )
    if "train" not in by:
        raise DataError(
            f"folder {folder} has splits but no train split ({listed()}); give the folder that holds train files, "
            "or one file with --data."
        )
    if len(spelled) > 1:
        raise DataError(
            f"folder {folder} names its validation split {len(spelled)} ways ({', '.join(sorted(spelled))}): "
            f"{listed()}; keep one, or pin the evaluation set with --val-data."
        )
    return Layout(by["train"], by.get("validation", []), by.get("test", []), split=True)
