"""Extra evaluation sets (--eval-data NAME=PATH), read as --data reads. Each is tokenized with the corpus's
tokenizer and kept as token files in the token cache. Local workers get it by path (a TokenSpan).

A set is measured on fixed windows chosen from its length alone (corpus.eval_offsets). So every variant and
seed sees the same tokens, as on the validation split. Two kinds of set are refused before anything trains.
A set that is the corpus's own data would measure memorisation, not another domain. A set shorter than a
window is refused in corpus.check_length. A set the tokenizer does not give back whole is kept and flagged,
as bits/char is.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..core.config import DataConfig, built_in
from . import formats, tokens
from .cache import smallest_dtype
from .errors import DataError
from .text import corpus_files, file_format, join_text, read_files
from .tokenizing import _decoded_chars, lost_chars
from .tokens import TokenSpan

FORMAT = 1  # bump when a cached set's tokens change meaning


@dataclass
class EvalSet:
    """One extra evaluation set: its tokens, and what bits per byte and the lossy flag need. The tokens are a
    TokenSpan, which pickles as its file's path (an array in Corpus.in_memory)."""

    name: str
    path: str  # as given (absolute after settings.resolve)
    ids: TokenSpan | np.ndarray
    chars: int  # characters of its text; its tokens when they are ids with no tokenizer file
    lost: int = 0  # characters the tokenizer does not give back (tokenizing.lost_chars)
    sha256: str = ""  # its files' contents
    file_sha256: tuple = ()  # each token file's (tokens.scan's), for the check against the corpus's own files

    @property
    def lossless(self) -> bool:
        return self.lost == 0

    def facts(self) -> dict:
        """What a results folder keeps of the set (meta.json's corpus.eval_sets). A footnote and --resume read it."""
        return {"path": self.path, "tokens": len(self.ids), "chars": self.chars, "lost_chars": self.lost,
                "sha256": self.sha256}  # fmt: skip

    def lossy_note(self) -> str:
        pct = 100 * self.lost / max(self.chars, 1)
        share = f"{pct:.1f}%" if pct >= 0.1 else f"{pct:.2g}%"
        return (
            f"the tokenizer does not give back {self.lost:,} of the {self.chars:,} characters of the evaluation set "
            f"{self.name} ({share}): its {self.name}_bpb counts only what it keeps"
        )


def set_files(path: str) -> list[Path]:
    """The files an --eval-data PATH stands for, as --data's. Of a split layout, its validation files, else its
    training files. Its test files are never read."""
    if built_in(path):
        return [Path(str(resources.files("modern_gpt").joinpath("tinyshakespeare.txt")))]
    files = corpus_files(path)
    p = Path(path).expanduser()
    if p.is_dir():
        lay = formats.layout(p, files)
        return lay.validation or lay.train
    return files


def load_eval_sets(cfg: DataConfig, corpus, folder: Path) -> tuple[EvalSet, ...]:
    """Each --eval-data set, tokenized with the corpus's tokenizer and cached under folder/evalsets. Each is
    checked against the corpus's own files."""
    out = []
    for name, path in cfg.eval_sets:
        try:
            files = set_files(path)
        except DataError as e:  # the data path's own sentence, naming the set
            raise DataError(f"--eval-data {name}: {e}") from None
        kinds = {file_format(f.name) == "tokens" for f in files}
        if len(kinds) > 1:
            raise DataError(f"--eval-data {name}={path} mixes token files (.bin, .npy) with text; give one kind.")
        try:
            if kinds == {True}:
                got = _token_set(name, path, files, corpus, folder)
            else:
                got = _text_set(name, path, files, cfg, corpus, folder)
        except DataError as e:  # a reader's sentence ("X is empty") names the set, unless it already does
            if str(e).startswith(("--eval-data", "the evaluation set")):
                raise
            raise DataError(f"--eval-data {name}: {e}") from None
        _check_not_corpus(got, files, corpus)
        out.append(got)
    return tuple(out)


def _file_sha(f: Path) -> tuple[str, str]:
    """A file's sha256, alone and with its size first. The second is the corpus's text_sha256 of that file."""
    alone, sized = hashlib.sha256(), hashlib.sha256()
    sized.update(f.stat().st_size.to_bytes(8, "little"))
    with open(f, "rb") as fh:
        while block := fh.read(1 << 23):
            alone.update(block)
            sized.update(block)
    return alone.hexdigest(), sized.hexdigest()


def _check_not_corpus(got: EvalSet, files: list[Path], corpus) -> None:
    """Refuse a set whose file is one of the corpus's own files. The same bytes count, wherever the file lies."""
    known = set((corpus.hashes.get("files") or {}).values()) | {corpus.hashes.get("text_sha256")}
    for f in files:
        if file_format(f.name) == "tokens":  # token files are known by their scan's sha256
            same = bool(set(got.file_sha256) & known)
        else:
            same = bool(set(_file_sha(f)) & known)
        if same:
            raise DataError(
                f"--eval-data {got.name}={got.path}: {f} is the same as the corpus's own data (--data), so the set "
                "would measure memorisation, not another domain; give a set the runs do not train on."
            )


def _text_set(name: str, path: str, files: list[Path], cfg: DataConfig, corpus, folder: Path) -> EvalSet:
    if corpus.tokenizer.kind == "ids":
        raise DataError(
            f"--eval-data {name}={path} is text, and the corpus is token ids with no tokenizer file to read it "
            "with; give the set as token files of the same vocabulary, or --tokenizer PATH/tokenizer.json."
        )
    parts = read_files(files)
    h = hashlib.sha256()
    for _, raw in parts:
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    digest = h.hexdigest()
    ident = {"format": FORMAT, "corpus": corpus.key, "set": digest, "text_field": cfg.text_field}
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    npy, meta = folder / "evalsets" / f"{key}.npy", folder / "evalsets" / f"{key}.json"
    try:
        facts = json.loads(meta.read_text())
        span = TokenSpan([tokens.token_file(npy)])
    except (OSError, ValueError, KeyError, DataError):
        text = join_text(parts, cfg.text_field)
        ids = corpus.tokenizer.encode(text)
        facts = {"chars": len(text), "lost": lost_chars(corpus.tokenizer, text)}
        _write(npy, meta, ids.astype(smallest_dtype(corpus.tokenizer.vocab_size)), facts)
        span = TokenSpan([tokens.token_file(npy)])
    return EvalSet(name, path, span, facts["chars"], facts["lost"], digest)


def _write(npy: Path, meta: Path, ids: np.ndarray, facts: dict) -> None:
    """Write the set's tokens and facts, each to a temporary name, then rename it. A reader sees a whole file."""
    try:
        npy.parent.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{secrets.token_hex(4)}"
        tmp = npy.with_name(f".{npy.name}-{tag}.npy")
        np.save(tmp, ids)
        os.replace(tmp, npy)
        tmp = meta.with_name(f".{meta.name}-{tag}")
        tmp.write_text(json.dumps(facts))
        os.replace(tmp, meta)
    except OSError as e:
        raise DataError(f"cannot write the token cache in {npy.parent}: {e.strerror or e}; set --cache-dir.") from None


def _token_set(name: str, path: str, files: list[Path], corpus, folder: Path) -> EvalSet:
    """Token files, read in place: every id must lie in the corpus's vocabulary."""
    vocab = corpus.tokenizer.vocab_size
    if corpus.tokenizer.kind not in ("ids", "hf"):
        raise DataError(
            f"--eval-data {name}={path} holds token ids, and the corpus is text tokenized here "
            f"(--tokenizer {corpus.tokenizer.kind}), whose ids no file can hold; give the set as text."
        )
    found = [tokens.token_file(f, vocab > 1 << 16) for f in files]
    scans = [tokens.scan(tf, folder) for tf in found]
    top = max(s["max_id"] for s in scans)
    if top >= vocab:
        raise DataError(
            f"--eval-data {name}={path} holds the token id {top:,}, at or past the corpus's vocabulary of "
            f"{vocab:,} ids; give a set written with the same tokenizer."
        )
    span = TokenSpan(found)
    chars = len(span) if corpus.tokenizer.kind == "ids" else _decoded_chars(corpus.tokenizer, span)
    each = tuple(s["sha256"] for s in scans)
    digest = each[0] if len(each) == 1 else hashlib.sha256("".join(each).encode()).hexdigest()
    return EvalSet(name, path, span, chars, 0, digest, each)
