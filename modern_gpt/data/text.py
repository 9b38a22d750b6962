"""Reading corpora: each file's text by its format, a folder's files, and the joined text's train/val split.
The formats: text, JSON lines, parquet, CSV/TSV, Arrow, compressed. Token files are tokens.py's."""

from __future__ import annotations

import json
import os
import sys
from importlib import resources
from pathlib import Path

from ..core.config import DataConfig, built_in
from ..core.files import not_regular
from . import formats, tokens
from .errors import DataError
from .formats import COMPRESSED

# The kind of each file a --data folder is read from, by its suffix in any case (data.JSONL is JSON lines).
FORMATS = {
    ".txt": "text",
    ".jsonl": "json lines",
    ".ndjson": "json lines",
    ".json": "json lines",
    ".parquet": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
    ".arrow": "arrow",
    ".bin": "tokens",  # token ids (tokens.py): nanoGPT's headerless uint16, llm.c's headered shards
    ".npy": "tokens",
}
SUFFIXES = tuple(FORMATS)
FILE_KINDS = ".txt, .jsonl (.ndjson, .json), .parquet, .csv, .tsv, .arrow (maybe compressed) or token (.bin, .npy)"
SMOKE = "smoke"  # the name of the built-in corpus


# ---------------------------------------------------------------------------
# Reading text
# ---------------------------------------------------------------------------
def file_format(name: str) -> str:
    """How a corpus file is read: 'text', 'json lines', 'parquet', 'csv', 'tsv', 'arrow' or 'tokens'. It goes by
    the suffix in any case, under a compression suffix (corpus.jsonl.gz is JSON lines). A file given alone with
    another suffix, or none, is text."""
    inner = formats.inner_name(name)
    form = FORMATS.get(Path(inner).suffix.lower(), "text")
    return "text" if form == "tokens" and inner != name else form  # a compressed .bin is not read in place


def corpus_files(path: str) -> list[Path]:
    """The files a --data path stands for. The file itself, or a folder's corpus files (FORMATS) in sorted order."""
    p = Path(path).expanduser()
    if not p.exists() and any(c in path for c in "*?["):  # a glob of shards: fineweb_train_*.bin
        import glob

        found = sorted(Path(f) for f in glob.glob(str(p), recursive=True) if Path(f).is_file())
        if not found:
            raise DataError(f"data path {path} matches no file; give a {FILE_KINDS} file, a folder or a glob of them.")
        return found
    if not p.exists():  # exists() is False for a link loop too: named as what it is
        what = "does not exist" if not os.path.islink(p) else f"is {not_regular(p) or 'a dangling symbolic link'}"
        raise DataError(f"data path {path} {what}; give a {FILE_KINDS} file, or a folder of them.")
    if p.is_dir():
        files, skipped = folder_files(p)
        if not files:
            also = f" (it holds {_listed(skipped)})" if skipped else ""
            raise DataError(
                f"folder {path} holds no {FILE_KINDS} files{also}; put the corpus in files with those endings."
            )
        if skipped:  # said, not silent: a file the user meant to train on may have another ending
            print(f"modern-gpt: note: {path}: skipped {_listed(skipped)}.", file=sys.stderr, flush=True)
        return files
    what = not_regular(p)
    if what:  # a FIFO, a device such as /dev/zero, a socket: it could block or never end
        raise DataError(
            f"data path {path} is not a regular file but {what}; give a {FILE_KINDS} file, or a folder of them."
        )
    return [p]


def folder_files(folder: Path) -> tuple[list[Path], list[str]]:
    """A folder's corpus files in sorted order, and what it skips with each reason, relative to the folder.
    A corpus file is a regular file with a suffix of FORMATS, in any case, in subfolders too."""
    files, skipped = [], []
    for f in sorted(folder.rglob("*")):
        name = str(f.relative_to(folder))
        name = name if name.isprintable() else ascii(name)  # a line end in a name must not break the note
        hidden = [i for i, part in enumerate(f.relative_to(folder).parts) if part.startswith(".")]
        if hidden:  # .ipynb_checkpoints, .git, an editor's .swp: copies or tools' files, never the corpus
            if hidden[0] == len(f.relative_to(folder).parts) - 1:  # named once, not each file under it
                skipped.append(f"{name} (hidden{', a folder' if f.is_dir() else ''}, not read)")
            continue
        if f.is_dir():
            if f.is_symlink():  # rglob does not follow it (a link can make a loop): say so
                skipped.append(f"{name} (a symbolic link to a folder, not followed)")
            continue
        what = not_regular(f)
        if Path(formats.inner_name(f.name)).suffix.lower() not in FORMATS:
            skipped.append(f"{name} (not {FILE_KINDS})")
        elif what:  # a pipe is never opened: it could block for ever
            skipped.append(f"{name} ({what})")
        elif f.suffix.lower() == ".json" and _one_document(f):  # dataset_info.json beside a dataset's files
            skipped.append(f"{name} (one JSON document, not JSON lines)")
        elif f.name in formats.DATASETS_META:  # save_to_disk's, on one line: dataset_dict.json
            skipped.append(f"{name} (datasets metadata, not text)")
        else:
            files.append(f)
    return files, skipped


def _one_document(path: Path) -> bool:
    """Whether a .json file in a folder holds one JSON document rather than JSON lines. Its first line is not a
    whole JSON object. Such is the metadata a dataset folder keeps beside its data. Given alone as --data, such
    a file is refused in one sentence instead (file_text)."""
    try:
        with open(path, "rb") as f:
            for line in iter(lambda: f.readline(1 << 20), b""):
                if line.strip():
                    if len(line) >= 1 << 20 and not line.endswith(b"\n"):  # longer than is worth a look
                        return line.lstrip()[:1] == b"["
                    return not _is_object(line)
    except OSError:
        return False  # read with the others: the error names the file
    return False  # empty: read, and named as empty if it is all there is


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _listed(items: list[str], most: int = 5) -> str:
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return f"{len(items)} file{'s' * (len(items) != 1)}: " + ", ".join(items[:most]) + more


def decode_text(raw: bytes, name: str) -> str:
    """UTF-8 bytes to text. A byte-order mark is dropped; CR and CRLF are read as LF."""
    check_bytes(raw, name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{name} is not valid UTF-8 (byte offset {e.start}); convert it to UTF-8 first.") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def check_bytes(raw: bytes, name: str, offset: int = 0) -> None:
    """Refuse bytes that are no UTF-8 text, by what they look like: UTF-16, parquet, NUL bytes (binary of some
    kind). offset: where raw starts in the file. A later block of a streamed file is checked for NUL alone."""
    utf16 = _utf16(raw) if not offset and not tokens.binary_kind(raw[:12]) else ""  # compressed is never UTF-16
    if utf16:  # converted in its place, under its own suffix: a .jsonl file must stay JSON lines
        p = Path(name)
        tmp = p.with_name(f"{p.stem}-utf8{p.suffix}")
        raise DataError(
            f"{name} is {utf16} text, not UTF-8; convert it in its place first, e.g. "
            f"iconv -f {utf16} -t UTF-8 {name} > {tmp} && mv {tmp} {name}."
        )
    nul = raw.find(b"\x00")
    if nul >= 0 and raw[:4] == b"PAR1" and not offset:
        raise DataError(f"{name} is a parquet file; give it the .parquet suffix, or convert it to text.")
    if nul >= 0:
        what = (tokens.binary_kind(raw) if not offset else "") or "give a UTF-8 text file"
        raise DataError(f"{name} looks binary (a NUL byte at byte offset {offset + nul}): {what}.")


def _utf16(raw: bytes) -> str:
    """'UTF-16LE' or 'UTF-16BE' when the bytes look like UTF-16 text, else ''. The signs: a byte-order mark, or
    every other byte zero as in mostly-ASCII UTF-16."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16LE" if raw[:2] == b"\xff\xfe" else "UTF-16BE"
    head = raw[:4096]
    if len(head) >= 8:
        pairs = len(head) // 2
        even, odd = head[0 : 2 * pairs : 2], head[1 : 2 * pairs : 2]
        # text's even bytes are mostly letters, spaces and line ends; uint16 token ids under 256 are not
        texty = sum(32 <= b < 127 or b in (9, 10, 13) for b in even) > 0.8 * pairs and even.count(32) > 0.03 * pairs
        if odd.count(0) > 0.9 * pairs and even.count(0) < 0.1 * pairs and texty:
            return "UTF-16LE"
        if even.count(0) > 0.9 * pairs and odd.count(0) < 0.1 * pairs:
            return "UTF-16BE"
    return ""


def read_raw(cfg: DataConfig) -> tuple[str, list[tuple[str, bytes]]]:
    """The corpus's display name and its files' raw bytes."""
    if not cfg.path:
        return SMOKE, [(SMOKE, resources.files("modern_gpt").joinpath("smoke.txt").read_bytes())]
    if built_in(cfg.path):
        return cfg.path, [(cfg.path, resources.files("modern_gpt").joinpath("tinyshakespeare.txt").read_bytes())]
    return Path(cfg.path).name, read_files(corpus_files(cfg.path))


def read_files(files: list[Path]) -> list[tuple[str, bytes]]:
    """Each file's name and bytes (a compressed file's decompressed)."""
    parts = []
    for f in files:
        try:
            parts.append((str(f), formats.decompress(f) if f.suffix.lower() in COMPRESSED else f.read_bytes()))
        except OSError as e:
            raise DataError(f"cannot read {f}: {e.strerror}.") from None
    return parts


def file_text(name: str, raw: bytes, text_field: str = "text") -> str:
    """One file's text. A .txt file (or one of another suffix) is taken as it is. Of a .jsonl (.ndjson, .json)
    file, the text_field of every object; of a table (parquet, CSV/TSV, Arrow), of every row. The documents
    follow one another, each ending in a line end."""
    form = file_format(name)
    if form == "parquet":
        return _join_documents(_parquet_documents(name, raw, text_field))
    if form == "arrow":
        return _join_documents(_strings(formats.arrow_documents(name, raw, text_field), name, text_field))
    text = decode_text(raw, name)
    if form == "json lines":
        return _join_documents(_jsonl_documents(name, text, text_field))
    if form in ("csv", "tsv"):
        rows = formats.csv_documents(name, text, text_field, "\t" if form == "tsv" else ",")
        return _join_documents(d for d in rows if d.strip())
    return text


def _strings(values, name: str, field: str):
    for n, value in enumerate(values, start=1):
        if not isinstance(value, str):
            shown = "null" if value is None else repr(value)[:80]
            raise DataError(f"{name} row {n} (counting from 1): the column {field!r} holds {shown}, not a string.")
        if value.strip():
            yield _checked(value, f"{name} row {n} (counting from 1)", f"the column {field!r}")


def _join_documents(docs) -> str:
    # Documents, like files, are joined with a line end between them, so that no word runs across two.
    return "".join(d if d.endswith("\n") else d + "\n" for d in docs)


def _jsonl_documents(name: str, text: str, field: str, start: int = 1):
    seen = start > 1  # a record read before: a later bad line is a bad line, not a file of another format
    for n, line in enumerate(text.split("\n"), start=start):
        if not line.strip():
            continue  # blank lines (a trailing one included) hold no record
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            why = f"{name} line {n} is not JSON ({e.msg} at column {e.colno})"
            if line.lstrip()[:1] in ("[", "{") and not seen:  # one JSON document (an array, a pretty-printed object)
                p = Path(name)
                lines = p.with_name(f"{p.stem}-lines.jsonl")  # never the file itself: > would empty it first
                raise DataError(
                    f"{why}; a {p.suffix} file is read as JSON lines, one object a line, and this looks like one "
                    f"JSON document: write one object a line first (an array: jq -c '.[]' {name} > {lines})."
                ) from None
            raise DataError(f"{why}; each line of a JSON lines file is one JSON object.") from None
        except RecursionError:
            raise DataError(
                f"{name} line {n} nests JSON too deeply to read; each line must be one flat JSON object."
            ) from None
        except ValueError as e:  # e.g. an integer literal longer than Python converts (4300 digits)
            why = (str(e).splitlines() or [""])[0][:80]
            raise DataError(f"{name} line {n} holds a JSON value that cannot be read ({why}).") from None
        if not isinstance(record, dict):
            raise DataError(
                f"{name} line {n} holds a JSON {type(record).__name__}, not an object with a {field!r} field."
            )
        if field not in record:
            has = ", ".join(map(repr, list(record)[:5])) or "no fields"
            raise DataError(
                f"{name} line {n} has no field {field!r} (it has {has}); choose the field with --text-field."
            )
        value = record[field]
        if not isinstance(value, str):
            raise DataError(f"{name} line {n}: the field {field!r} is not a string but {json.dumps(value)[:40]}.")
        seen = True
        yield _checked(value, f"{name} line {n}", f"the field {field!r}")


def _parquet_documents(name: str, raw: bytes, field: str):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise DataError(f"reading {name} needs pyarrow ({e}); pip install pyarrow.") from None
    # Arrow's own buffer, one thread, nothing read ahead: a damaged file then fails with no Arrow thread left
    # behind. pandas.read_parquet on a Python file object read ahead on Arrow's I/O threads, which call back into
    # Python; after a read that failed part-way, one could still be alive at interpreter exit, and the process
    # aborted ("terminate called without an active exception", exit 134) instead of exiting 2.
    try:
        parquet = pq.ParquetFile(pa.BufferReader(raw), pre_buffer=False)
        columns = parquet.schema_arrow.names
    except Exception as e:  # pyarrow's errors (a damaged footer, not parquet at all) share no base class
        raise DataError(f"{name} is not a readable parquet file ({_first_line(e)}).") from None
    if field not in columns:
        has = ", ".join(map(repr, columns[:5])) or "none"
        raise DataError(f"{name} has no column {field!r} (its columns: {has}); choose it with --text-field.")
    try:
        column = parquet.read(columns=[field], use_threads=False).column(field).to_pylist()
    except Exception as e:  # a damaged page, a column of another type
        raise DataError(f"{name}: cannot read the column {field!r} ({_first_line(e)}).") from None
    for n, value in enumerate(column, start=1):
        if not isinstance(value, str):
            shown = "null" if value is None or value != value else repr(value)  # a null, or a float NaN
            shown = shown if len(shown) <= 80 else shown[:77] + "..."  # a row of bytes can be megabytes
            raise DataError(f"{name} row {n} (counting from 1): the column {field!r} holds {shown}, not a string.")
        yield _checked(value, f"{name} row {n} (counting from 1)", f"the column {field!r}")


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def _checked(value: str, where: str, what: str) -> str:
    """A document's decoded text, held to a .txt file's rule: UTF-8 text with no NUL character.

    JSON's escapes can spell what UTF-8 bytes cannot. No tokenizer can encode a lone surrogate (\\ud800).
    NUL (\\u0000) marks binary data in a .txt file.
    """
    nul = value.find("\x00")
    if nul >= 0:
        raise DataError(f"{where}: {what} holds a NUL character at character {nul}; give text, not binary data.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DataError(
            f"{where}: {what} holds a lone surrogate {value[e.start]!a} at character {e.start}, "
            "which is not a character; fix the escape."
        ) from None
    return value.replace("\r\n", "\n").replace("\r", "\n")


def join_text(parts: list[tuple[str, bytes]], text_field: str = "text") -> str:
    texts = [file_text(name, raw, text_field) for name, raw in parts]
    # Files are joined with a line end between them, so that no word runs across two files.
    text = "".join(t if t.endswith("\n") else t + "\n" for t in texts[:-1]) + texts[-1]
    if not text.strip():
        what = parts[0][0] if len(parts) == 1 else f"every one of the {len(parts)} files"
        raise DataError(f"{what} is empty; give a corpus with text in it.")
    return text


def split_text(text: str, val_fraction: float) -> tuple[str, str]:
    """Training text, then validation text: the last val_fraction of the characters, contiguous."""
    cut = int(len(text) * (1 - val_fraction))
    return text[:cut], text[cut:]
