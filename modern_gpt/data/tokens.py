"""Token files as the field writes them, memory-mapped in place. nanoGPT's headerless .bin, OLMo's headerless
.npy, numpy's own .npy, and llm.c / modded-nanogpt shards. A shard is a 256 x int32 header, then uint16 tokens.

A TokenSpan is a run of tokens over one or more such files. Workers get it by path, never its tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError

LLMC_MAGIC = 20240520  # llm.c's data shard magic; version 1 holds uint16 tokens
LLMC_HEADER = 256  # int32 values, 1024 bytes
TOKEN_SUFFIXES = (".bin", ".npy")
NPY_MAGIC = b"\x93NUMPY"
SCAN_BLOCK = 1 << 24  # tokens read at a time when a file is scanned (32-64 MB)
SAMPLES = 16  # blocks hashed to recognise an unchanged file without reading it
SAMPLE_BYTES = 1 << 16


@dataclass(frozen=True)
class TokenFile:
    """The tokens of one file: where they start (bytes), their dtype and how many."""

    path: str
    offset: int
    dtype: str
    count: int
    kind: str  # "llm.c shard", "headerless uint16", "numpy .npy", ...

    def open(self) -> np.ndarray:
        if self.count == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset, shape=(self.count,))


def is_token_file(path: Path) -> bool:
    return path.suffix.lower() in TOKEN_SUFFIXES


def token_file(path: Path, wide: bool = False) -> TokenFile:
    """Read a token file's header, if any, and check its size. No token is read. wide: a headerless file holds
    uint32 ids (a declared vocabulary above 65,536). Else uint16, as nanoGPT and OLMo write them."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(LLMC_HEADER * 4)
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}.") from None
    ints = np.frombuffer(head[: len(head) // 4 * 4], dtype="<i4")
    if len(ints) and int(ints[0]) == LLMC_MAGIC:
        return _llmc(path, ints, size)
    if head[:6] == NPY_MAGIC:
        return _npy(path)
    if len(ints) == LLMC_HEADER and int(ints[1]) in (1, 2) and size == LLMC_HEADER * 4 + 2 * int(ints[2]):
        # an llm.c header (version, a token count that matches the size) under another magic: a damaged shard
        raise DataError(
            f"{path} has an llm.c shard's header with the magic {int(ints[0])}, not {LLMC_MAGIC}; it is damaged or "
            "of another format: write it again with llm.c's or modded-nanogpt's data script."
        )
    dtype = "<u4" if wide else "<u2"
    item = np.dtype(dtype).itemsize
    if size % item:
        raise DataError(
            f"{path} holds {size:,} bytes, not a whole number of {np.dtype(dtype).name} token ids; "
            "it is cut short or not a headerless token file."
        )
    return TokenFile(str(path), 0, dtype, size // item, f"headerless {np.dtype(dtype).name}")


def _llmc(path: Path, ints: np.ndarray, size: int) -> TokenFile:
    if len(ints) < LLMC_HEADER:
        raise DataError(f"{path} is an llm.c shard cut short inside its 1024-byte header.")
    version, count = int(ints[1]), int(ints[2])
    if version != 1:
        raise DataError(f"{path} is an llm.c shard of version {version}; modern-gpt reads version 1 (uint16 tokens).")
    body = size - LLMC_HEADER * 4
    if count < 0 or body != 2 * count:
        raise DataError(
            f"{path}: its header counts {count:,} tokens but the file holds {body // 2:,} "
            f"({body:,} bytes after the header); the shard is cut short or damaged: write it again."
        )
    return TokenFile(str(path), LLMC_HEADER * 4, "<u2", count, "llm.c shard")


def _npy(path: Path) -> TokenFile:
    try:
        arr = np.load(path, mmap_mode="r")
    except Exception as e:  # a damaged header: numpy raises ValueError, others for odd files
        raise DataError(f"{path} is not a readable .npy file ({str(e)[:120]}).") from None
    if arr.ndim != 1 or arr.dtype.kind not in "ui" or arr.dtype.itemsize > 8:
        raise DataError(
            f"{path} holds a {arr.dtype} array of shape {arr.shape}, not a flat array of integer token ids."
        )
    return TokenFile(str(path), int(arr.offset), arr.dtype.str, len(arr), f"numpy .npy {arr.dtype.name}")


class TokenSpan:
    """Tokens [start, stop) of files laid end to end. It reads through memory maps, opened when first used.

    Slicing gives a numpy array, a view where the slice lies in one file. len() and ids[i] work as on an array.
    Pickled, it is the files and the bounds alone. A worker reopens the maps; no token crosses the pipe.
    """

    def __init__(self, files: list[TokenFile], start: int = 0, stop: int | None = None):
        self.files = list(files)
        self._ends = np.cumsum([f.count for f in self.files], dtype=np.int64)
        total = int(self._ends[-1]) if len(self.files) else 0
        self.start, self.stop = start, total if stop is None else stop
        self._maps: list | None = None

    def __len__(self) -> int:
        return self.stop - self.start

    def __getstate__(self):
        return {"files": self.files, "start": self.start, "stop": self.stop}

    def __setstate__(self, state):
        self.__init__(state["files"], state["start"], state["stop"])

    def _open(self) -> list:
        if self._maps is None:
            self._maps = [f.open() for f in self.files]
        return self._maps

    @property
    def dtype(self):
        return np.dtype(self.files[0].dtype) if self.files else np.dtype(np.uint16)

    def span(self, start: int, stop: int) -> TokenSpan:
        """Tokens [start, stop) of this span, as a span: nothing is read."""
        return TokenSpan(self.files, self.start + start, self.start + stop)

    def read(self, a: int, b: int) -> np.ndarray:
        """Tokens [a, b) of this span (clipped to it), as an array."""
        a, b = max(0, a), min(len(self), b)
        if b <= a:
            return np.zeros(0, dtype=self.dtype)
        a, b = a + self.start, b + self.start
        maps, out = self._open(), []
        i = int(np.searchsorted(self._ends, a, side="right"))
        while a < b:
            base = int(self._ends[i - 1]) if i else 0
            end = min(b, int(self._ends[i]))
            out.append(maps[i][a - base : end - base])
            a, i = end, i + 1
        return out[0] if len(out) == 1 else np.concatenate(out)

    def __getitem__(self, key):
        if isinstance(key, slice):
            a, b, step = key.indices(len(self))
            got = self.read(a, b)
            return got if step == 1 else got[::step]
        i = int(key)
        i = i + len(self) if i < 0 else i
        if not 0 <= i < len(self):
            raise IndexError(f"token {key} of a span of {len(self)}")
        return self.read(i, i + 1)[0]

    def __array__(self, dtype=None, copy=None):
        got = self.read(0, len(self))
        return got if dtype is None else got.astype(dtype)

    def blocks(self, size: int = SCAN_BLOCK):
        for a in range(0, len(self), size):
            yield self.read(a, a + size)


def scan(tf: TokenFile, cache: Path | None) -> dict:
    """A token file's largest id and sha256, read once. Both are remembered by the file's identity().
    Later starts read SAMPLES small blocks, not the file."""
    ident = identity(Path(tf.path))
    record = None
    if cache is not None:
        record = (
            cache / "scans" / (hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32] + ".json")
        )
        try:
            got = json.loads(record.read_text())
            if got.get("identity") == ident and got.get("offset") == tf.offset and got.get("dtype") == tf.dtype:
                return got
        except (OSError, ValueError):
            pass
    h, top = hashlib.sha256(), -1
    with open(tf.path, "rb") as f:
        h.update(f.read(tf.offset))  # the header too: a shard whose header changed is another shard
    for block in TokenSpan([tf]).blocks():
        if len(block):
            top = max(top, int(block.max()))
            if int(block.min()) < 0:
                raise DataError(f"{tf.path} holds a negative token id ({int(block.min())}).")
        h.update(np.ascontiguousarray(block).tobytes())
    got = {"identity": ident, "offset": tf.offset, "dtype": tf.dtype, "max_id": top, "sha256": h.hexdigest()}
    if record is not None:
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            tmp = record.with_name(f".{record.name}-{os.getpid()}")
            tmp.write_text(json.dumps(got))
            os.replace(tmp, record)
        except OSError:
            pass  # scanned again next time
    return got


def identity(path: Path) -> dict:
    """What recognises an unchanged file without reading it. Its real path, size and mtime, and a hash of
    SAMPLES blocks spread over it. An edit in place that kept the mtime still shows, where it falls on one."""
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for at in np.linspace(0, max(0, st.st_size - SAMPLE_BYTES), SAMPLES).astype(np.int64):
            f.seek(int(at))
            h.update(f.read(SAMPLE_BYTES))
    return {
        "path": os.path.realpath(path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sample_sha256": h.hexdigest(),
    }


def binary_kind(raw: bytes) -> str:
    """What a binary file given as text looks like, and what to do. A sentence's middle, or '' if nothing is
    recognised."""
    ints = np.frombuffer(raw[:12][: len(raw[:12]) // 4 * 4], dtype="<i4")
    if len(ints) and int(ints[0]) == LLMC_MAGIC:
        return "it is an llm.c / modded-nanogpt token shard (its header's magic is 20240520); give it the .bin suffix"
    if raw[:6] == NPY_MAGIC:
        return "it is a numpy array; give it the .npy suffix to read it as token ids"
    for magic, what, suffix in (
        (b"\x1f\x8b", "a gzip", ".gz"),
        (b"BZh", "a bzip2", ".bz2"),
        (b"\xfd7zXZ\x00", "an xz", ".xz"),
        (b"\x28\xb5\x2f\xfd", "a zstandard", ".zst"),
    ):
        if raw.startswith(magic):
            return f"it is {what}-compressed stream; give it the {suffix} suffix (e.g. corpus.txt{suffix})"
    if raw[:6] == b"ARROW1" or raw[:4] == b"\xff\xff\xff\xff":
        return "it is an Arrow file; give it the .arrow suffix"
    if raw[:4] == b"PK\x03\x04":
        return "it is a zip archive; unpack it first"
    if len(raw) >= 64 and len(raw) % 2 == 0:  # NUL bytes in a file of whole uint16s: what token ids look like
        return (
            "it may be token ids; a file of token ids is read when named .bin (headerless uint16, or uint32 with "
            "--vocab-size above 65536) or .npy"
        )
    return ""


def holds_tokens(path: str) -> bool:
    """Whether a --data path is token files, from names alone. A .bin or .npy file, or a folder holding some."""
    p = Path(path).expanduser()
    if p.is_dir():
        return any(is_token_file(f) and not f.name.startswith(".") for f in p.rglob("*"))
    return is_token_file(p)
