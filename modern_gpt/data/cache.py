"""The token cache, built by streaming. The corpus is read in blocks, never whole. Its tokens are written to a
memory-mapped file of the smallest dtype that holds the vocabulary. Peak memory is a few blocks, the BPE
trainer's sample (BPE_SAMPLE characters) and the tokenizer's working set, whatever the corpus's size.

Later starts read no corpus. They know it by each file's (path, size, mtime) and a hash of sampled blocks
(tokens.identity). The full hash is taken once, when the entry is first looked up.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..core.config import DataConfig
from . import formats, tokenizing, tokens
from . import text as T
from .errors import DataError
from .formats import COMPRESSED

BLOCK = 1 << 23  # bytes read at a time (8 MiB)
BPE_SAMPLE = 1 << 26  # BPE learns its merges on the first 64 Mi characters of the training split
BATCH = 16  # BPE chunks (about 64 KiB each) encoded per call: about 1 MiB of text in flight


# Bump when the cached files change meaning (2: ids of gapped pretrained vocabularies no longer wrap). It is part
# of every results folder's data_key too, so a bump makes every earlier folder refuse --resume: a change that
# concerns a few entries keys those alone (see cache_key), and a count added later is computed on load.
CACHE_FORMAT = 2


def key_settings(cfg: DataConfig, names: list[str]) -> dict:
    """The settings that decide a cache entry's tokens, beside the text."""
    settings = {"format": CACHE_FORMAT, "tokenizer": cfg.tokenizer, "val_fraction": cfg.val_fraction}
    if cfg.tokenizer == "bpe":
        settings["vocab_size"] = cfg.vocab_size
    if cfg.tokenizer_file is not None:  # the file's contents, not its name: an edited file is a new entry
        raw = tokenizing.read_tokenizer_file(cfg.tokenizer_file)
        settings["tokenizer"] = "file " + hashlib.sha256(raw).hexdigest()
        if tokenizing._truncates_or_pads(raw):  # encoded whole since, unlike the entries such a file made before
            settings["whole"] = True
    if any(T.file_format(name) != "text" for name in names):
        settings["text_field"] = cfg.text_field
    return settings


# ---------------------------------------------------------------------------
# Reading: a file's text in pieces, as corpus.file_text gives it whole
# ---------------------------------------------------------------------------
def _byte_blocks(path: Path):
    kind = COMPRESSED.get(path.suffix.lower())
    if kind == "zstandard":  # not streamed: the package's reader is optional, and such files are rare
        yield formats.decompress(path)
        return
    import bz2
    import gzip
    import lzma
    import zlib

    opener = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}.get(kind, open)
    try:
        with opener(path, "rb") as f:
            while block := f.read(BLOCK):
                yield block
    except EOFError:
        raise DataError(
            f"{path} is a {kind} stream cut short (it ends before its end marker); copy or download it again."
        ) from None
    except (lzma.LZMAError, zlib.error, ValueError) as e:
        raise DataError(f"{path} is not a readable {kind} stream ({str(e)[:120]}).") from None
    except OSError as e:
        if kind:  # gzip's BadGzipFile
            raise DataError(f"{path} is not a readable {kind} stream ({str(e)[:120]}).") from None
        raise DataError(f"cannot read {path}: {e.strerror}.") from None


def _text_blocks(path: Path):
    """A text file's characters in blocks, held to decode_text's rules. UTF-8, a bad byte's offset named; no NUL;
    a byte-order mark dropped. CR and CRLF are read as LF; a CR that ends a block waits for the next."""
    name, offset, cr = str(path), 0, ""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for raw in _byte_blocks(path):
        T.check_bytes(raw, name, offset)
        try:
            text = decoder.decode(raw)
        except UnicodeDecodeError as e:
            at = offset - len(decoder.getstate()[0]) + e.start
            raise DataError(f"{name} is not valid UTF-8 (byte offset {at}); convert it to UTF-8 first.") from None
        if not offset and text.startswith("\ufeff"):
            text = text[1:]
        offset += len(raw)
        text = cr + text
        cr = "\r" if text.endswith("\r") else ""
        yield (text[:-1] if cr else text).replace("\r\n", "\n").replace("\r", "\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise DataError(f"{name} is not valid UTF-8 (byte offset {offset - 1}); convert it to UTF-8 first.") from None
    if cr:
        yield "\n"


def _jsonl_blocks(path: Path, field: str):
    rest, line = "", 1
    for text in _text_blocks(path):
        text = rest + text
        cut = text.rfind("\n") + 1
        whole, rest = text[:cut], text[cut:]
        if whole:
            yield T._join_documents(T._jsonl_documents(str(path), whole, field, start=line))
            line += whole.count("\n")
    if rest:
        yield T._join_documents(T._jsonl_documents(str(path), rest, field, start=line))


def file_pieces(path: Path, field: str):
    """One file's text, as file_text gives it, in pieces. Text and JSON lines are streamed. Parquet, CSV/TSV
    and Arrow files are read a whole file at a time. nanochat's shards are about 100 MB each."""
    form = T.file_format(path.name)
    if form == "text":
        yield from _text_blocks(path)
    elif form == "json lines":
        yield from _jsonl_blocks(path, field)
    else:
        yield T.file_text(str(path), b"".join(_byte_blocks(path)), field)


def pieces(files: list[Path], field: str):
    """The files' text in pieces, joined as join_text joins them. A line end goes between two files."""
    for i, f in enumerate(files):
        last = ""
        for piece in file_pieces(f, field):
            if piece:
                last = piece[-1]
                yield piece
        if i < len(files) - 1 and last != "\n":
            yield "\n"


def chunked(stream, size: int = 1 << 16):
    """The pieces of tokenizing._chunks over the joined stream: about `size` characters each, ending at a line
    end. A line longer than 16 * size (a one-line file) is cut before a space, or at that length. So no chunk
    is huge."""
    buf, pos = "", 0
    for piece in stream:
        buf, pos = buf[pos:] + piece, 0
        while len(buf) - pos > size:
            end = buf.find("\n", pos + size)
            if end < 0:
                if len(buf) - pos < 16 * size:
                    break
                space = buf.rfind(" ", pos + size, pos + 16 * size)
                end = (space if space >= 0 else pos + 16 * size) - 1
            yield buf[pos : end + 1]
            pos = end + 1
    if pos < len(buf):
        yield buf[pos:]


def split_at(stream, cut: int):
    """The pieces before character `cut`, then a marker None, then the rest."""
    seen, marked = 0, cut <= 0
    if marked:
        yield None
    for piece in stream:
        if not marked and seen + len(piece) >= cut:
            yield piece[: cut - seen]
            yield None
            marked = True
            if piece[cut - seen :]:
                yield piece[cut - seen :]
        else:
            yield piece
        seen += len(piece)
    if not marked:
        yield None


# ---------------------------------------------------------------------------
# Identity and hashes: once per corpus, then by the files' identities
# ---------------------------------------------------------------------------
def _stream_into(path: Path, hs) -> None:
    size = path.stat().st_size
    for h in hs[:-1]:  # the file's own hash takes its bytes alone
        h.update(size.to_bytes(8, "little"))
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            for h in hs:
                h.update(block)


def digests(cfg, train: list[Path], val: list[Path], val_tokens) -> tuple[str, dict]:
    """The cache key and the corpus's hashes, by one streamed read of its files. They are cache_key and
    data_hashes, over the files' bytes. A compressed file counts its compressed bytes. Validation files are
    read first, as the key's settings hold their hash."""
    per = {}
    h_val = hashlib.sha256()
    for f in val:
        per[str(f)] = hashlib.sha256()
        _stream_into(f, [h_val, per[str(f)]])
    settings = key_settings(cfg, [f.name for f in train + val])
    if val:
        settings.update(val_fraction=None, val_tokens=val_tokens, val=h_val.hexdigest())
    if cfg.tokenizer == "bpe" and sum(f.stat().st_size for f in train) > BPE_SAMPLE:  # trained on a sample
        settings["bpe_sample_chars"] = BPE_SAMPLE
    h_key, h_train = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()), hashlib.sha256()
    for f in train:
        per[str(f)] = hashlib.sha256()
        _stream_into(f, [h_key, h_train, per[str(f)]])
    text = h_train.hexdigest()
    if val:
        text = hashlib.sha256((text + h_val.hexdigest()).encode()).hexdigest()
    file = cfg.tokenizer_file
    return h_key.hexdigest()[:32], {
        "files": {k: h.hexdigest() for k, h in per.items()} if len(per) > 1 else None,
        "text_sha256": text,
        "tokenizer_sha256": None if file is None else hashlib.sha256(tokenizing.read_tokenizer_file(file)).hexdigest(),
    }


def index_path(folder: Path, cfg, files: list[Path]) -> Path:
    """Where the key of this corpus (its files' identities, the data settings) is remembered."""
    from dataclasses import asdict

    settings = {k: v for k, v in asdict(cfg).items() if k != "cache_dir"}
    if cfg.tokenizer_file is not None:  # its contents: small, and read anyway
        settings["tokenizer"] = hashlib.sha256(tokenizing.read_tokenizer_file(cfg.tokenizer_file)).hexdigest()
    ident = {"format": CACHE_FORMAT, "settings": settings, "files": [tokens.identity(f) for f in files]}
    name = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    return folder / "index" / f"{name}.json"


# ---------------------------------------------------------------------------
# Building an entry
# ---------------------------------------------------------------------------
class NpyWriter:
    """A 1-D .npy file written as its tokens come. Its fixed 128-byte header is rewritten with the count at the end."""

    HEADER = 128

    def __init__(self, path: Path, dtype):
        self.path, self.dtype, self.count = path, np.dtype(dtype), 0
        self.f = open(path, "wb")
        self.f.write(b"\0" * self.HEADER)

    def write(self, ids: np.ndarray) -> None:
        self.f.write(np.ascontiguousarray(ids, dtype=self.dtype).tobytes())
        self.count += len(ids)

    def close(self, count: int | None = None) -> None:
        count = self.count if count is None else count
        if count < self.count:
            self.f.truncate(self.HEADER + count * self.dtype.itemsize)
        head = f"{{'descr': '{self.dtype.str}', 'fortran_order': False, 'shape': ({count},), }}"
        head = head.ljust(self.HEADER - 10 - 1) + "\n"
        self.f.seek(0)
        self.f.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode("latin1"))
        self.f.close()


def smallest_dtype(vocab_size: int):
    return np.uint8 if vocab_size <= 1 << 8 else np.uint16 if vocab_size <= 1 << 16 else np.uint32


class Progress:
    """Plain lines on stderr, about every 10% of a large corpus. Each says how far, and the time left."""

    def __init__(self, what: str, total: int):
        self.what, self.total, self.done, self.next = what, total, 0, 0.1
        self.start = time.monotonic()
        self.on = total >= 1 << 25  # 32 Mi characters: below that it takes seconds

    def add(self, n: int) -> None:
        self.done += n
        if self.on and self.done >= self.next * self.total:
            spent = time.monotonic() - self.start
            left = spent * (self.total - self.done) / max(self.done, 1)
            print(
                f"modern-gpt: {self.what}: {self.done / self.total:.0%} of {self.total:,} characters, "
                f"about {left:.0f} s left",
                file=sys.stderr,
                flush=True,
            )
            self.next += 0.1


def survey(cfg, train_files, val_files) -> dict:
    """The first pass. It finds how many characters, the cut between training and validation, the training
    split's characters (char) and BPE's sample."""
    total, chars_at = 0, []
    sample: list[str] = []
    kept = 0
    nonblank = False
    for piece in pieces(train_files, cfg.text_field):
        if cfg.tokenizer == "char":
            codes = np.flatnonzero(np.bincount(np.frombuffer(piece.encode("utf-32-le"), "<u4")))
            chars_at.append((total, len(piece), {int(c): piece.find(chr(c)) for c in codes}))
        if cfg.tokenizer == "bpe" and kept < BPE_SAMPLE:
            sample.append(piece[: BPE_SAMPLE - kept])
            kept += len(sample[-1])
        nonblank = nonblank or bool(piece.strip())
        total += len(piece)
    if not nonblank:
        what = train_files[0] if len(train_files) == 1 else f"every one of the {len(train_files)} files"
        raise DataError(f"{what} is empty; give a corpus with text in it.")
    cut = total if val_files else int(total * (1 - cfg.val_fraction))
    return {"total": total, "cut": cut, "chars_at": chars_at, "sample": "".join(sample)[:cut]}


def _char_vocab(chars_at, cut: int) -> str:
    """The training split's characters: those whose first place in a piece lies before the cut."""
    seen = {c for at, n, first in chars_at for c, i in first.items() if at + i < cut}
    return "".join(map(chr, sorted(seen)))


def build(cfg, train_files: list[Path], val_files: list[Path], val_tokens, tmp: Path) -> dict:
    """Write tokens.npy, tokenizer.json and meta.json of an entry into tmp, streaming; returns meta."""
    info = survey(cfg, train_files, val_files)
    cut, total = info["cut"], info["total"]
    if cfg.tokenizer == "char":
        tokenizer = tokenizing.CharTokenizer(_char_vocab(info["chars_at"], cut))
    elif cfg.tokenizer == "bpe":
        tokenizer = tokenizing.BPETokenizer.train(info["sample"], cfg.vocab_size)
    else:
        tokenizer = tokenizing.train_tokenizer(cfg.tokenizer, "", cfg.vocab_size)
    del info
    out = NpyWriter(tmp / "tokens.npy", smallest_dtype(tokenizer.vocab_size))
    if val_files:
        stream = _concat(train_files, val_files, cfg)
    else:
        stream = split_at(pieces(train_files, cfg.text_field), cut)
    progress = Progress(f"tokenizing {cfg.path or 'the corpus'}", total)
    n_train, n_val, lost, val_chars = _encode_all(cfg, tokenizer, stream, out, progress)
    kept = n_val if val_tokens is None else val_tokens
    if val_tokens is not None and val_tokens > n_val:
        out.close()
        raise DataError(
            f"--val-data {cfg.val_data} asks for {val_tokens:,} tokens and its text holds {n_val:,} "
            f"with --tokenizer {cfg.tokenizer}; give at most {n_val:,}."
        )
    out.close(n_train + kept)
    if val_tokens is not None:
        ids = np.load(tmp / "tokens.npy", mmap_mode="r")[n_train:]
        val_chars = tokenizing._decoded_chars(tokenizer, ids)
    (tmp / "tokenizer.json").write_text(json.dumps(tokenizer.to_json()))
    meta = {"train_tokens": n_train, "train_chars": cut, "val_chars": val_chars, "val_lost_chars": lost}
    if cfg.tokenizer == "bpe":
        meta["bpe_sample_chars"] = min(cut, BPE_SAMPLE)
    return meta


def _concat(train_files, val_files, cfg):
    yield from pieces(train_files, cfg.text_field)
    yield None
    yield from pieces(val_files, cfg.text_field)


def _until_marker(it):
    for piece in it:
        if piece is None:
            return
        yield piece


def _batches(source, size: int):
    batch: list[str] = []
    for piece in source:
        batch.append(piece)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _encode_all(cfg, tokenizer, stream, out: NpyWriter, progress: Progress):
    """Encode the training pieces, then the validation pieces after the marker None, into out. Returns both
    token counts, the validation characters the tokenizer loses, and the validation characters."""
    n, lost, val_chars = [0, 0], 0, 0
    it = iter(stream)
    whole = tokenizer.kind in ("char", "byte")  # vectorised over a whole piece; BPE takes chunks in batches
    for split in (0, 1):
        source = _until_marker(it) if whole else chunked(_until_marker(it))
        for batch in _batches(source, 1 if whole else BATCH):
            ids = _encode_batch(cfg, tokenizer, batch)
            if split:
                val_chars += sum(map(len, batch))
                lost += _lost(tokenizer, batch, ids)
            out.write(np.concatenate(ids) if len(ids) > 1 else ids[0])
            n[split] += sum(map(len, ids))
            progress.add(sum(map(len, batch)))
    return n[0], n[1], min(lost, val_chars), val_chars


def _encode_batch(cfg, tokenizer, batch: list[str]) -> list[np.ndarray]:
    try:
        if tokenizer.kind in ("char", "byte"):
            return [tokenizer.encode(p) for p in batch]  # ids below the vocabulary by construction
        special = tokenizer.kind == "bpe"
        encodings = tokenizer.tok.encode_batch(batch, add_special_tokens=special)
    except BaseException as e:  # the library raises plain Exceptions, and a Rust panic as a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise tokenizing.EncodeError(
            f"--tokenizer {cfg.tokenizer}", cfg.path or "the smoke corpus", T._first_line(e)
        ) from None
    ids = [np.array(enc.ids, dtype=np.int64) for enc in encodings]
    top = max((int(i.max()) for i in ids if len(i)), default=-1)
    if top >= tokenizer.vocab_size:  # no tokenizer should, but an id past the embedding must not reach training
        raise DataError(f"the tokenizer gave the id {top}, outside its vocabulary of {tokenizer.vocab_size} ids.")
    return ids


def _lost(tokenizer, batch: list[str], ids: list[np.ndarray]) -> int:
    """lost_chars over a batch of the validation text, from the ids already made."""
    if tokenizer.kind == "char":
        return int(sum(int((i == 0).sum()) for i in ids))
    if tokenizer.kind == "byte":
        return 0
    lost = 0
    for chunk, got in zip(batch, ids, strict=True):
        back = tokenizer.tok.decode(got.tolist(), skip_special_tokens=False)
        if back != chunk:
            a, b = Counter(chunk), Counter(back)
            lost += max(sum((a - b).values()), sum((b - a).values()), 1)
    return lost


def write_index(path: Path, key: str, hashes: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}-{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "hashes": hashes}))
        os.replace(tmp, path)
    except OSError:
        pass  # hashed again next time


def read_index(path: Path) -> tuple[str, dict] | None:
    try:
        got = json.loads(path.read_text())
        return str(got["key"]), dict(got["hashes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
