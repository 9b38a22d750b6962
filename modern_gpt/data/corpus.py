"""Text in, token ids out: reading corpora, tokenizers, the train/val split, the token cache and batches.

Fairness lives here: the batch order is a function of a seed and the data alone, and
the evaluation windows of the data alone, never of the model, so every variant sees
the same batches for a seed and every run is measured on the same tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from ..core.config import TOKENIZERS, DataConfig, built_in
from ..core.errors import UserError
from ..core.files import not_regular, write_json

# The kind of each file a --data folder is read from, by its suffix in any case (data.JSONL is JSON lines).
FORMATS = {
    ".txt": "text",
    ".jsonl": "json lines",
    ".ndjson": "json lines",
    ".json": "json lines",
    ".parquet": "parquet",
}
SUFFIXES = tuple(FORMATS)
FILE_KINDS = ".txt, .jsonl (.ndjson, .json) or .parquet"  # as the messages name them
# Bump when the cached files change meaning (2: ids of gapped pretrained vocabularies no longer wrap). It is part
# of every results folder's data_key too, so a bump makes every earlier folder refuse --resume: a change that
# concerns a few entries keys those alone (see cache_key), and a count added later is computed on load.
CACHE_FORMAT = 2
SMOKE = "smoke"  # the name of the built-in smoke corpus: the built-in text's first 300 KB, to a line end
SMOKE_BYTES = 299_868
BUILT_IN_FILE = "tinyshakespeare.txt"  # the package's copy of the public-domain text (--data tinyshakespeare)


class DataError(UserError):
    """The corpus cannot be read or is unusable."""


class EncodeError(DataError):
    """A tokenizer that raised on a text: an unknown word and no unknown token, say."""

    def __init__(self, who: str, what: str, why: str):
        self.why = why
        super().__init__(
            f"{who} cannot encode {what} ({why}); give a tokenizer that covers every character, "
            "such as a byte-level BPE or one with an unknown token."
        )


# ---------------------------------------------------------------------------
# Reading text
# ---------------------------------------------------------------------------
def file_format(name: str) -> str:
    """How a corpus file is read: 'text', 'json lines' or 'parquet', from its suffix in any case; a file given
    alone with another suffix (or none) is text."""
    return FORMATS.get(Path(name).suffix.lower(), "text")


def corpus_files(path: str) -> list[Path]:
    """The files a --data path stands for: the file itself, or a folder's corpus files (FORMATS) in sorted order."""
    p = Path(path).expanduser()
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
    """A folder's corpus files (regular files with a suffix of FORMATS, in any case, in subfolders too) in sorted
    order, and what it skips, each with the reason, relative to the folder."""
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
        if f.suffix.lower() not in FORMATS:
            skipped.append(f"{name} (not {FILE_KINDS})")
        elif what:  # a pipe is never opened: it could block for ever
            skipped.append(f"{name} ({what})")
        elif f.suffix.lower() == ".json" and _one_document(f):  # dataset_info.json beside a dataset's files
            skipped.append(f"{name} (one JSON document, not JSON lines)")
        else:
            files.append(f)
    return files, skipped


def _one_document(path: Path) -> bool:
    """Whether a .json file in a folder holds one JSON document (its first line is not a whole JSON object),
    such as the metadata a dataset folder keeps beside its data, rather than JSON lines. Given alone as --data,
    such a file is refused in one sentence instead (file_text)."""
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
    """UTF-8 bytes to text: a byte-order mark dropped, CR and CRLF read as LF."""
    utf16 = _utf16(raw)
    if utf16:  # converted in its place, under its own suffix: a .jsonl file must stay JSON lines
        p = Path(name)
        tmp = p.with_name(f"{p.stem}-utf8{p.suffix}")
        raise DataError(
            f"{name} is {utf16} text, not UTF-8; convert it in its place first, e.g. "
            f"iconv -f {utf16} -t UTF-8 {name} > {tmp} && mv {tmp} {name}."
        )
    nul = raw.find(b"\x00")
    if nul >= 0 and raw[:4] == b"PAR1":
        raise DataError(f"{name} is a parquet file; give it the .parquet suffix, or convert it to text.")
    if nul >= 0:
        raise DataError(f"{name} looks binary (a NUL byte at byte offset {nul}); give a UTF-8 text file.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{name} is not valid UTF-8 (byte offset {e.start}); convert it to UTF-8 first.") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _utf16(raw: bytes) -> str:
    """'UTF-16LE' or 'UTF-16BE' when the bytes look like UTF-16 text (a byte-order mark, or every other byte
    zero as in mostly-ASCII UTF-16), else ''."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16LE" if raw[:2] == b"\xff\xfe" else "UTF-16BE"
    head = raw[:4096]
    if len(head) >= 8:
        pairs = len(head) // 2
        even, odd = head[0 : 2 * pairs : 2], head[1 : 2 * pairs : 2]
        if odd.count(0) > 0.9 * pairs and even.count(0) < 0.1 * pairs:
            return "UTF-16LE"
        if even.count(0) > 0.9 * pairs and odd.count(0) < 0.1 * pairs:
            return "UTF-16BE"
    return ""


def read_raw(cfg: DataConfig) -> tuple[str, list[tuple[str, bytes]]]:
    """The corpus's display name and its files' raw bytes."""
    if not cfg.path or built_in(cfg.path):
        text = resources.files("modern_gpt").joinpath(BUILT_IN_FILE).read_bytes()
        return (cfg.path, [(cfg.path, text)]) if cfg.path else (SMOKE, [(SMOKE, text[:SMOKE_BYTES])])
    files = corpus_files(cfg.path)
    parts = []
    for f in files:
        try:
            parts.append((str(f), f.read_bytes()))
        except OSError as e:
            raise DataError(f"cannot read {f}: {e.strerror}.") from None
    return Path(cfg.path).name, parts


def file_text(name: str, raw: bytes, text_field: str = "text") -> str:
    """One file's text: a .txt file (or one of another suffix) as it is; the text_field of every object of a
    .jsonl (.ndjson, .json) file, or of every row of a .parquet file, one document after another, each ending
    in a line end."""
    form = file_format(name)
    if form == "parquet":
        return _join_documents(_parquet_documents(name, raw, text_field))
    text = decode_text(raw, name)
    if form == "json lines":
        return _join_documents(_jsonl_documents(name, text, text_field))
    return text


def _join_documents(docs) -> str:
    # Documents, like files, are joined with a line end between them, so that no word runs across two.
    return "".join(d if d.endswith("\n") else d + "\n" for d in docs)


def _jsonl_documents(name: str, text: str, field: str):
    seen = False  # a record read before: a later bad line is a bad line, not a file of another format
    for n, line in enumerate(text.split("\n"), start=1):
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
    """A document's decoded text, held to the rule a .txt file is held to: UTF-8 text with no NUL character.

    JSON's escapes can spell what UTF-8 bytes cannot: a lone surrogate (\\ud800), which no tokenizer can encode,
    and NUL (\\u0000), which marks binary data in a .txt file.
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


def validation_text(cfg: DataConfig) -> str:
    """The validation split of a corpus, as text (for evaluating a trained model with its own tokenizer)."""
    return split_text(join_text(read_raw(cfg)[1], cfg.text_field), cfg.val_fraction)[1]


# ---------------------------------------------------------------------------
# Tokenizers: each turns text into an int array and back, and saves itself as JSON.
# ---------------------------------------------------------------------------
class CharTokenizer:
    """One id per character seen in the training split; id 0 stands for any character it never saw."""

    kind = "char"
    UNKNOWN = "\ufffd"

    def __init__(self, chars: str):
        self.chars = chars
        self._codes = np.array([ord(c) for c in chars], dtype=np.uint32)  # sorted
        self.vocab_size = len(chars) + 1

    @classmethod
    def train(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        at = np.searchsorted(self._codes, codes).clip(0, max(len(self._codes) - 1, 0))
        known = self._codes[at] == codes if len(self._codes) else np.zeros(len(codes), bool)
        return np.where(known, at + 1, 0).astype(np.int64)

    def decode(self, ids) -> str:
        return "".join(self.chars[i - 1] if 0 < i <= len(self.chars) else self.UNKNOWN for i in map(int, ids))

    def to_json(self) -> dict:
        return {"kind": self.kind, "chars": self.chars}


class ByteTokenizer:
    """The 256 byte values of UTF-8: no training, nothing unknown."""

    kind = "byte"
    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def to_json(self) -> dict:
        return {"kind": self.kind}


class BPETokenizer:
    """Byte-level BPE (as in GPT-2), trained on the training split with the `tokenizers` library."""

    kind = "bpe"

    def __init__(self, tok):
        # A tokenizer.json may ask to truncate or pad what it encodes (for a model's fixed input): applied to a
        # corpus, truncation keeps the first tokens of each chunk and padding fills it with pad tokens, so that
        # bits/char would be measured on another text. The corpus is encoded whole, so both are off.
        tok.no_truncation()
        tok.no_padding()
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        tok.train_from_iterator(_chunks(text), trainer=trainer)
        return cls(tok)

    def encode(self, text: str) -> np.ndarray:
        return self._encode(text, add_special_tokens=True)

    def _encode(self, text: str, add_special_tokens: bool) -> np.ndarray:
        try:
            encodings = self.tok.encode_batch(list(_chunks(text)), add_special_tokens=add_special_tokens)
        except BaseException as e:  # the library raises plain Exceptions, and a Rust panic as a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise EncodeError("the tokenizer", "the text", _first_line(e)) from None
        return np.array([i for enc in encodings for i in enc.ids], dtype=np.int64)

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids])

    def to_json(self) -> dict:
        return {"kind": self.kind, "tokenizers": json.loads(self.tok.to_str())}


def read_tokenizer_file(path: Path) -> bytes:
    what = not_regular(path)  # before any open: a pipe would block the read for ever
    if what or not path.exists():
        what = f"is not a regular file but {what}" if what else "does not exist"
        raise DataError(f"tokenizer file {path} {what}; give the path of a Hugging Face tokenizer.json.")
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read the tokenizer file {path}: {e.strerror or e}.") from None


class PretrainedTokenizer(BPETokenizer):
    """A pretrained Hugging Face tokenizer.json (GPT-2's, Llama's, ...), read from a file; nothing is downloaded.

    Text is encoded without added special tokens (no BOS per chunk), so that the token count of a
    text, and with it bits per character, depends on the text alone.
    """

    kind = "hf"
    MAX_ID = (1 << 22) - 1  # about 4 million: far above any real vocabulary, still an embedding one can build

    def __init__(self, tok):
        super().__init__(tok)
        # Ids index the embedding, so the vocabulary spans every id: max id + 1, not the number of entries,
        # which is smaller when the file's ids have a gap (the unused ids get rows that are never trained).
        vocab = tok.get_vocab(with_added_tokens=True)
        top = max(vocab.values(), default=-1)
        if top < 0:  # a model with no vocabulary (an untrained BPE saved as is): it can encode nothing
            raise DataError("the tokenizer has an empty vocabulary; give the tokenizer.json shipped with a model.")
        if top > self.MAX_ID:
            token = min((t for t, i in vocab.items() if i == top), key=len)
            raise DataError(
                f"the tokenizer gives the token {token!r} the id {top:,}, above the largest id modern-gpt builds an "
                f"embedding for ({self.MAX_ID:,}); give a tokenizer.json whose ids run from 0 with no large gap."
            )
        self.vocab_size = max(self.vocab_size, top + 1)

    @classmethod
    def from_file(cls, path: Path) -> PretrainedTokenizer:
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_str(read_tokenizer_file(path).decode("utf-8")))
        except DataError:
            raise
        except Exception as e:  # the tokenizers library raises plain Exceptions for a file it cannot parse
            raise DataError(
                f"{path} is not a Hugging Face tokenizer.json ({str(e).splitlines()[0][:120]}); "
                "give the tokenizer.json shipped with a model."
            ) from None

    def encode(self, text: str) -> np.ndarray:
        return self._encode(text, add_special_tokens=False)


def _chunks(text: str, size: int = 1 << 16):
    """Pieces of about `size` characters that end at a line end, for batched BPE training and encoding."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def lost_chars(tokenizer, text: str) -> int:
    """How many characters of text the tokenizer does not give back: 0 when decode(encode(text)) == text.

    Bits per character count the characters of the text; a tokenizer that drops or merges some (an unknown
    token, a normaliser that lowercases) predicts fewer of them, and its bits/char compare with no other
    tokenizer's. Compared chunk by chunk, as the text is encoded; a chunk that comes back different counts its
    characters missing or added, whichever is more.
    """
    if tokenizer.kind == "char":  # id 0: a character the training split never showed
        return int((tokenizer.encode(text) == 0).sum())
    if tokenizer.kind == "byte":  # UTF-8 bytes of valid text
        return 0
    lost = 0
    for chunk in _chunks(text):
        # special tokens kept: a "<|endoftext|>" in the text is one token that stands for those 13 characters
        back = tokenizer.tok.decode(tokenizer.encode(chunk).tolist(), skip_special_tokens=False)
        if back != chunk:
            a, b = Counter(chunk), Counter(back)
            lost += max(sum((a - b).values()), sum((b - a).values()), 1)
    return min(lost, len(text))


def train_tokenizer(kind: str, text: str, vocab_size: int):
    """A char, byte or bpe tokenizer for this text; any other kind is the path of a pretrained tokenizer.json."""
    if kind not in TOKENIZERS:
        return PretrainedTokenizer.from_file(Path(kind).expanduser())
    if kind == "char":
        return CharTokenizer.train(text)
    if kind == "byte":
        return ByteTokenizer()
    return BPETokenizer.train(text, vocab_size)


def tokenizer_from_json(d: dict):
    if d.get("kind") == "char":
        return CharTokenizer(d["chars"])
    if d.get("kind") == "byte":
        return ByteTokenizer()
    if d.get("kind") in ("bpe", "hf"):
        from tokenizers import Tokenizer

        cls = BPETokenizer if d["kind"] == "bpe" else PretrainedTokenizer
        return cls(Tokenizer.from_str(json.dumps(d["tokenizers"])))
    raise DataError(f"unknown tokenizer kind {d.get('kind')!r} in a saved tokenizer.")


# ---------------------------------------------------------------------------
# The corpus: tokenized once, cached, memory-mapped afterwards.
# ---------------------------------------------------------------------------
@dataclass
class Corpus:
    name: str
    key: str  # the cache key: a hash of the text and the tokenizer settings
    tokenizer: object
    train: np.ndarray  # token ids of the training split (possibly a memory map)
    val: np.ndarray  # token ids of the validation split: the text after the training split
    val_chars: int
    val_lost: int = 0  # characters of the validation text the tokenizer does not give back (lost_chars)
    # sha256 of the data files' contents and of the tokenizer file's (None for char, byte, bpe): what --resume
    # names when the key no longer matches
    hashes: dict = field(default_factory=dict)

    @property
    def val_tokens_per_char(self) -> float:
        return len(self.val) / self.val_chars

    @property
    def lossless(self) -> bool:
        """Whether the tokenizer gives back the validation text exactly: only then do bits/char compare."""
        return self.val_lost == 0

    def facts(self) -> dict:
        """What a results folder keeps of its corpus (meta.json's "corpus")."""
        return {"val_chars": self.val_chars, "val_lost_chars": self.val_lost, **self.hashes}


def bits_per_char(loss: float, tokens_per_char: float) -> float:
    """Nats per token to bits per character: comparable across tokenizers (the one place this is computed)."""
    return loss * tokens_per_char / math.log(2)


def default_cache_dir() -> Path:
    if os.environ.get("MODERN_GPT_CACHE"):
        return Path(os.environ["MODERN_GPT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modern-gpt"


def cache_key(cfg: DataConfig, parts: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    settings = {"format": CACHE_FORMAT, "tokenizer": cfg.tokenizer, "val_fraction": cfg.val_fraction}
    if cfg.tokenizer == "bpe":
        settings["vocab_size"] = cfg.vocab_size
    if cfg.tokenizer_file is not None:  # the file's contents, not its name: an edited file is a new entry
        raw = read_tokenizer_file(cfg.tokenizer_file)
        settings["tokenizer"] = "file " + hashlib.sha256(raw).hexdigest()
        if _truncates_or_pads(raw):  # encoded whole since, unlike the entries such a file made before
            settings["whole"] = True
    if any(file_format(name) != "text" for name, _ in parts):
        settings["text_field"] = cfg.text_field
    h.update(json.dumps(settings, sort_keys=True).encode())
    _contents(h, parts)
    return h.hexdigest()[:32]


def _contents(h, parts: list[tuple[str, bytes]]):
    for _, raw in parts:  # contents only, so that a moved or renamed file still hits the cache
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h


def data_hashes(cfg: DataConfig, parts: list[tuple[str, bytes]]) -> dict:
    """The data files' and the tokenizer file's contents, hashed apart: which of them changed."""
    file = cfg.tokenizer_file
    return {
        "text_sha256": _contents(hashlib.sha256(), parts).hexdigest(),
        "tokenizer_sha256": None if file is None else hashlib.sha256(read_tokenizer_file(file)).hexdigest(),
    }


def changed(cfg: DataConfig, was: dict | None, now: dict) -> str:
    """What changed, for a sentence: the data, the tokenizer file, or (an older folder, which kept no hashes)
    either."""
    data = f"the data ({cfg.path or SMOKE})"
    if cfg.tokenizer_file is None:
        return data
    tok = f"the tokenizer file {cfg.tokenizer}"
    if not was or "text_sha256" not in was:
        return f"{data} or {tok}"
    what = [w for w, k in ((data, "text_sha256"), (tok, "tokenizer_sha256")) if was.get(k) != now.get(k)]
    return " and ".join(what) or f"{data} or {tok}"


def _truncates_or_pads(raw: bytes) -> bool:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return False  # not JSON: reading it as a tokenizer says so
    return isinstance(doc, dict) and bool(doc.get("truncation") or doc.get("padding"))


def load_corpus(cfg: DataConfig) -> Corpus:
    """Read, split and tokenize the corpus, or memory-map it from the token cache when it was done before."""
    cfg.validate()
    name, parts = read_raw(cfg)
    key = cache_key(cfg, parts)
    folder = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    entry = folder / key
    hashes = data_hashes(cfg, parts)
    for attempt in range(2):
        if not (entry / "meta.json").exists():
            _build_cache_entry(cfg, parts, entry)
        try:
            if any(not_regular(entry / f) for f in ("meta.json", "tokens.npy", "tokenizer.json")):
                raise OSError("not a regular file")  # a pipe put in the cache would block the read for ever
            meta = json.loads((entry / "meta.json").read_text())
            tokens = np.load(entry / "tokens.npy", mmap_mode="r")
            tokenizer = tokenizer_from_json(json.loads((entry / "tokenizer.json").read_text()))
            n = meta["train_tokens"]
            if "val_lost_chars" not in meta:  # an entry written before the count was kept
                meta["val_lost_chars"] = lost_chars(
                    tokenizer, split_text(join_text(parts, cfg.text_field), cfg.val_fraction)[1]
                )
                with contextlib.suppress(UserError):  # a cache that cannot be written counts again next time
                    write_json(entry / "meta.json", meta)
            return Corpus(
                name, key, tokenizer, tokens[:n], tokens[n:], meta["val_chars"], meta["val_lost_chars"], hashes
            )
        except (OSError, ValueError, KeyError, DataError):
            if attempt:
                raise DataError(f"the token cache entry {entry} is damaged; delete it and run again.") from None
            shutil.rmtree(entry, ignore_errors=True)  # damaged by hand or by a full disk: build it again


def _build_cache_entry(cfg: DataConfig, parts: list[tuple[str, bytes]], entry: Path) -> None:
    train_text, val_text = split_text(join_text(parts, cfg.text_field), cfg.val_fraction)
    tokenizer = train_tokenizer(cfg.tokenizer, train_text, cfg.vocab_size)
    try:
        train_ids, val_ids = tokenizer.encode(train_text), tokenizer.encode(val_text)
        lost = lost_chars(tokenizer, val_text)
    except EncodeError as e:  # named: the tokenizer and the corpus
        raise EncodeError(f"--tokenizer {cfg.tokenizer}", cfg.path or "the smoke corpus", e.why) from None
    top = max([tokenizer.vocab_size - 1] + [int(ids.max()) for ids in (train_ids, val_ids) if len(ids)])
    if top >= tokenizer.vocab_size:  # no tokenizer should, but an id past the embedding must not reach training
        raise DataError(f"the tokenizer gave the id {top}, outside its vocabulary of {tokenizer.vocab_size} ids.")
    dtype = np.uint16 if top < 1 << 16 else np.uint32  # from the largest id, so that no id wraps round
    # train_chars is read by nothing now; it stays so that earlier versions sharing the cache can read the entry
    meta = {
        "train_tokens": len(train_ids),
        "train_chars": len(train_text),
        "val_chars": len(val_text),
        "val_lost_chars": lost,
        **asdict(cfg),
    }
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.parent / f".{entry.name}-{os.getpid()}-{secrets.token_hex(4)}"
        os.mkdir(tmp, 0o777)  # 0o777 less the umask, as any folder the user makes (mkdtemp's is 0700)
        np.save(tmp / "tokens.npy", np.concatenate([train_ids, val_ids]).astype(dtype))
        (tmp / "tokenizer.json").write_text(json.dumps(tokenizer.to_json()))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    except OSError as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(
            f"cannot write the token cache in {entry.parent}: {e.strerror or e}; set --cache-dir."
        ) from None
    try:
        os.rename(tmp, entry)  # atomic: a reader sees a whole entry or none
    except OSError:  # another process finished the same entry first
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------
# Batches.  Offsets come from a seeded generator and the data's length alone.
# ---------------------------------------------------------------------------
def check_length(corpus: Corpus, context: int) -> None:
    need = context + 1
    for split, ids, fix in (("training", corpus.train, "smaller"), ("validation", corpus.val, "larger")):
        # A tokenizer file can drop text that is there; a tokenizer trained here on a split too short has only
        # missed characters it never saw, and the split's length is the cause to name.
        pretrained = corpus.hashes.get("tokenizer_sha256") is not None
        if len(ids) < need and pretrained and corpus.val_lost > corpus.val_chars / 2:
            raise DataError(
                f"the tokenizer gives the corpus's {split} split only {len(ids)} tokens, too few for context "
                f"{context}: it drops {corpus.val_lost:,} of the {corpus.val_chars:,} validation characters "
                "(it has no token for them); give a tokenizer that covers the corpus."
            )
        if len(ids) < need:
            raise DataError(
                f"the corpus is too short for context {context}: its {split} split has {len(ids)} tokens "
                f"and needs at least {need}; use a longer text, a smaller --context or a {fix} --val-fraction."
            )
    ids = corpus.train
    if corpus.val_lost and corpus.hashes.get("tokenizer_sha256") is not None and bool((ids == ids[0]).all()):
        raise DataError(  # every word [UNK]: the loss falls to 0, and bits/char 0.0 would be printed
            f"the tokenizer turns the corpus's whole training split into one token (id {int(ids[0])}), so there is "
            f"nothing to predict: it gives back {corpus.val_chars - corpus.val_lost:,} of the {corpus.val_chars:,} "
            "validation characters; give a tokenizer that covers the corpus."
        )


def random_offsets(n_tokens: int, context: int, count: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, n_tokens - context, size=count)


def windows(ids: np.ndarray, offsets: np.ndarray, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets (B, context) for windows starting at offsets."""
    rows = np.stack([np.asarray(ids[o : o + context + 1], dtype=np.int64) for o in offsets])
    t = torch.from_numpy(rows)
    return t[:, :-1], t[:, 1:]


class BatchStream:
    """The training batches of one seed, in order: the same for every model."""

    def __init__(self, ids: np.ndarray, context: int, batch_size: int, seed: int):
        self.ids, self.context, self.batch_size = ids, context, batch_size
        self.rng = np.random.default_rng(seed)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        return windows(self.ids, random_offsets(len(self.ids), self.context, self.batch_size, self.rng), self.context)


def eval_offsets(n_tokens: int, context: int, max_tokens: int) -> np.ndarray:
    """The fixed evaluation windows of a split: a function of its length alone, never of a seed.

    Every whole, non-overlapping window of the split when they hold at most max_tokens
    predicted tokens; otherwise max_tokens // context of them, evenly spaced over the split.
    Every run (every variant, every seed) is measured on these same tokens, so the windows
    add no variance to a run's loss and none to a paired difference.
    """
    n_all = (n_tokens - 1) // context  # a window needs context + 1 tokens (its targets are shifted by one)
    keep = max(1, max_tokens // context)
    if n_all <= keep:
        return np.arange(n_all, dtype=np.int64) * context
    return np.unique(np.linspace(0, n_all - 1, keep).round().astype(np.int64)) * context


def subset(offsets: np.ndarray, count: int) -> np.ndarray:
    """count of the offsets, evenly spaced: the cheaper set that intermediate evaluations use."""
    if len(offsets) <= count:
        return offsets
    return offsets[np.unique(np.linspace(0, len(offsets) - 1, count).round().astype(np.int64))]
