"""Text in, token ids out: reading corpora, tokenizers, the train/val split, the token cache and batches.

Fairness lives here. The batch order is a function of a seed and the data alone, never
of the model. The evaluation windows are a function of the data alone. So every variant
sees the same batches for a seed, and every run is measured on the same tokens
(docs/statistics.md).
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
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from ..core.config import DataConfig, built_in
from ..core.errors import UserError
from ..core.files import not_regular, write_json
from . import cache, formats, tokens
from .cache import CACHE_FORMAT, key_settings
from .errors import DataError
from .evalsets import EvalSet, load_eval_sets
from .formats import Layout
from .text import (  # noqa: F401  (the names callers import from here)
    FILE_KINDS,
    FORMATS,
    SMOKE,
    SUFFIXES,
    corpus_files,
    decode_text,
    file_format,
    file_text,
    folder_files,
    join_text,
    read_files,
    read_raw,
    split_text,
)
from .tokenizing import (  # noqa: F401
    BPETokenizer,
    ByteTokenizer,
    CharTokenizer,
    EncodeError,
    IdsTokenizer,
    PretrainedTokenizer,
    _decoded_chars,
    lost_chars,
    read_tokenizer_file,
    token_bytes,
    tokenizer_from_json,
    train_tokenizer,
)
from .tokens import TokenSpan

BUILT_IN_FILE = "tinyshakespeare.txt"  # the package's copy of the public-domain text (--data tinyshakespeare)


def validation_text(cfg: DataConfig) -> str:
    """The validation split of a corpus, as text. For evaluating a trained model with its own tokenizer."""
    src = sources(cfg)
    if src.tokens:
        raise DataError(f"{src.name} holds token ids, not text; give a text corpus with --data.")
    parts = read_files(src.train) if src.train else read_raw(cfg)[1]
    return _split(cfg, parts, read_files(src.validation) if src.validation else None)[1]


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
    pinned: str = ""  # --val-data, when it fixes the validation split
    # Where train and val lie on disk (TokenSpans): a pickled corpus (a --jobs worker's) carries these in place of
    # the memory maps, and the worker opens the same files by path; no token crosses the pipe.
    spans: tuple | None = field(default=None, repr=False, compare=False)
    evals: tuple[EvalSet, ...] = ()  # --eval-data's sets: each a TokenSpan, sent by path as the spans are (locally)

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_bytes", None)  # token_bytes: recomputed where it is used
        if self.spans is not None:
            for name, span in zip(("train", "val"), self.spans, strict=True):
                if isinstance(state[name], (np.memmap, TokenSpan)):  # np.asarray(...) copies are sent as they are
                    state[name] = span
        return state

    def __setstate__(self, state):
        for name in ("train", "val"):
            if isinstance(state[name], TokenSpan):
                state[name] = mapped(state[name])
        self.__dict__.update(state)

    @property
    def val_tokens_per_char(self) -> float:
        return len(self.val) / self.val_chars

    @property
    def lossless(self) -> bool:
        """Whether the tokenizer gives back the validation text exactly. Only then do bits/char compare."""
        return self.val_lost == 0

    def in_memory(self) -> Corpus:
        """Every token in memory, the --eval-data sets' too, not spans of this machine's files: what a cluster's
        workers are sent (their machine may not have the token cache)."""
        evals = tuple(replace(s, ids=np.asarray(s.ids)) for s in self.evals)
        return replace(self, train=np.asarray(self.train), val=np.asarray(self.val), evals=evals)

    def token_bytes(self) -> np.ndarray | None:
        """Each token id's length in bytes (tokenizing.token_bytes), computed once per process."""
        if "_bytes" not in self.__dict__:
            self.__dict__["_bytes"] = token_bytes(self.tokenizer)
        return self.__dict__["_bytes"]

    def facts(self) -> dict:
        """What a results folder keeps of its corpus (meta.json's "corpus")."""
        sets = {"eval_sets": {s.name: s.facts() for s in self.evals}} if self.evals else {}
        return {"val_chars": self.val_chars, "val_lost_chars": self.val_lost, **self.hashes, **sets}


def bits_per_char(loss: float, tokens_per_char: float) -> float:
    """Nats per token to bits per character, which compare across tokenizers. The one place this is computed."""
    return loss * tokens_per_char / math.log(2)


def default_cache_dir() -> Path:
    if os.environ.get("MODERN_GPT_CACHE"):
        return Path(os.environ["MODERN_GPT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modern-gpt"


def cache_key(cfg: DataConfig, parts: list[tuple[str, bytes]], val_parts=None, val_tokens=None) -> str:
    """The token cache's key of a corpus held in memory. cache.digests computes the same from files."""
    h = hashlib.sha256()
    settings = key_settings(cfg, [name for name, _ in parts + (val_parts or [])])
    if val_parts:  # a validation split of its own (a split layout, --val-data): its contents, not a fraction
        settings.update(
            val_fraction=None, val_tokens=val_tokens, val=_contents(hashlib.sha256(), val_parts).hexdigest()
        )
    h.update(json.dumps(settings, sort_keys=True).encode())
    _contents(h, parts)
    return h.hexdigest()[:32]


def _contents(h, parts: list[tuple[str, bytes]]):
    for _, raw in parts:  # contents only, so that a moved or renamed file still hits the cache
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h


def data_hashes(cfg: DataConfig, parts: list[tuple[str, bytes]]) -> dict:
    """The data files' and the tokenizer file's contents, hashed apart. They tell which of them changed."""
    file = cfg.tokenizer_file
    return {
        "files": {name: hashlib.sha256(raw).hexdigest() for name, raw in parts} if len(parts) > 1 else None,
        "text_sha256": _contents(hashlib.sha256(), parts).hexdigest(),
        "tokenizer_sha256": None if file is None else hashlib.sha256(read_tokenizer_file(file)).hexdigest(),
    }


def changed(cfg: DataConfig, was: dict | None, now: dict) -> str:
    """What changed, for a sentence: the data or the tokenizer file. An older folder kept no hashes: then
    either."""
    data = f"the data ({_files_changed(was, now) or cfg.path or SMOKE})"
    if cfg.tokenizer_file is None:
        return data
    tok = f"the tokenizer file {cfg.tokenizer}"
    if not was or "text_sha256" not in was:
        return f"{data} or {tok}"
    what = [w for w, k in ((data, "text_sha256"), (tok, "tokenizer_sha256")) if was.get(k) != now.get(k)]
    return " and ".join(what) or f"{data} or {tok}"


def _files_changed(was: dict | None, now: dict) -> str:
    """The token files whose contents changed, gone or added, by name. For a folder of shards: which shard."""
    a, b = (was or {}).get("files"), now.get("files")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return ""
    names = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def load_corpus(cfg: DataConfig) -> Corpus:
    """Read, split and tokenize the corpus, or memory-map it from the token cache when that was done before.
    Token files are memory-mapped where they lie. --eval-data's sets come with it, tokenized by its tokenizer."""
    cfg.validate()
    folder = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    corpus = _load_corpus(cfg, folder)
    if cfg.eval_data:
        corpus.evals = load_eval_sets(cfg, corpus, folder)
        for s in corpus.evals:
            if not s.lossless:
                _notes(s.lossy_note() + ".")
    return corpus


def _load_corpus(cfg: DataConfig, folder: Path) -> Corpus:
    src = sources(cfg)
    if src.tokens:
        return _token_corpus(cfg, src, folder)
    name = src.name
    train_files = src.train or [Path(str(resources.files("modern_gpt").joinpath("smoke.txt")))]
    index = cache.index_path(folder, cfg, train_files + src.validation)
    known = cache.read_index(index)
    if known is None or not (folder / known[0] / "meta.json").exists():  # the one full read of the corpus's bytes
        known = cache.digests(cfg, train_files, src.validation, src.val_tokens)
    key, hashes = known
    entry = folder / key
    for attempt in range(2):
        if not (entry / "meta.json").exists():
            _build_cache_entry(cfg, train_files, src, entry)
        try:
            if any(not_regular(entry / f) for f in ("meta.json", "tokens.npy", "tokenizer.json")):
                raise OSError("not a regular file")  # a pipe put in the cache would block the read for ever
            meta = json.loads((entry / "meta.json").read_text())
            all_ids = TokenSpan([tokens.token_file(entry / "tokens.npy")])
            tokenizer = tokenizer_from_json(json.loads((entry / "tokenizer.json").read_text()))
            n = meta["train_tokens"]
            if "val_lost_chars" not in meta:  # an entry written before the count was kept
                parts, val_parts = read_files(train_files), read_files(src.validation) or None
                meta["val_lost_chars"] = lost_chars(tokenizer, _split(cfg, parts, val_parts)[1])
                with contextlib.suppress(UserError):  # a cache that cannot be written counts again next time
                    write_json(entry / "meta.json", meta)
            train, val = all_ids.span(0, n), all_ids.span(n, len(all_ids))
            lost = meta["val_lost_chars"]
            cache.write_index(index, key, hashes)
            _notes(src.note)
            return Corpus(
                name,
                key,
                tokenizer,
                mapped(train),
                mapped(val),
                meta["val_chars"],
                lost,
                hashes,
                src.pinned,
                (train, val),
            )
        except (OSError, ValueError, KeyError, DataError):
            if attempt:
                raise DataError(f"the token cache entry {entry} is damaged; delete it and run again.") from None
            shutil.rmtree(entry, ignore_errors=True)  # damaged by hand or by a full disk: build it again


@dataclass
class Sources:
    """What a corpus is read from: training files and validation files (a split layout's, or --val-data's).
    val_tokens: how many tokens --val-data's :TOKENS keeps."""

    name: str
    train: list  # no files: the smoke corpus
    validation: list
    tokens: bool = False
    val_tokens: int | None = None
    pinned: str = ""  # --val-data's path, for the sentences
    note: str = ""


def parse_val_data(spec: str) -> tuple[Path, int | None]:
    """--val-data PATH[:TOKENS]: the path, and how many tokens from its start (None: all)."""
    head, sep, tail = spec.rpartition(":")
    if sep and head and tail.replace("_", "").isdigit():
        n = int(tail.replace("_", ""))
        if n < 1:
            raise DataError(f"--val-data {spec}: the token count must be 1 or more.")
        return Path(head).expanduser(), n
    return Path(spec).expanduser(), None


def sources(cfg: DataConfig) -> Sources:
    if not cfg.path:
        src = Sources(SMOKE, [], [])
    elif built_in(cfg.path):  # --data tinyshakespeare: the whole text the package ships
        src = Sources(cfg.path, [Path(str(resources.files("modern_gpt").joinpath(BUILT_IN_FILE)))], [])
    else:
        files = corpus_files(cfg.path)
        p = Path(cfg.path).expanduser()
        lay = formats.layout(p, files) if p.is_dir() else Layout(train=files)
        src = Sources(p.name, lay.train, lay.validation, note=lay.footnote(cfg.path))
    if cfg.val_data:
        path, n = parse_val_data(cfg.val_data)
        if src.validation:
            src.note = (src.note[:-1] + "; --val-data replaces its validation split.") if src.note else ""
        src.validation, src.val_tokens, src.pinned = corpus_files(str(path)), n, cfg.val_data
    kinds = {file_format(f.name) == "tokens" for f in src.train + src.validation}
    if not src.train and src.validation and True in kinds:
        raise DataError(
            f"--val-data {cfg.val_data} holds token ids and --data is the smoke corpus's text; give --data token "
            "files of the same vocabulary, or a text --val-data."
        )
    if len(kinds) > 1:
        raise DataError(
            "the corpus mixes token files (.bin, .npy) with text"
            + (f" (--val-data {cfg.val_data})" if cfg.val_data else "")
            + "; give token files for both --data and --val-data, or text for both."
        )
    src.tokens = kinds == {True}
    return src


def _token_corpus(cfg: DataConfig, src: Sources, folder: Path) -> Corpus:
    """Token files, memory-mapped where they lie. The vocabulary comes from the tokenizer file, a declared
    --vocab-size (nonzero), or the largest id. Every id is checked against it once, remembered by the file's
    identity."""
    if cfg.tokenizer in ("byte", "bpe"):  # char is the default, and means nothing here
        raise DataError(
            f"{src.name} holds token ids already, so --tokenizer {cfg.tokenizer} would tokenize nothing; leave it "
            "out, or give --tokenizer PATH/tokenizer.json (the ids' own tokenizer) for bits per character."
        )
    tokenizer = PretrainedTokenizer.from_file(cfg.tokenizer_file) if cfg.tokenizer_file is not None else None
    declared = tokenizer.vocab_size if tokenizer else cfg.vocab_size if cfg.vocab_size > 0 else None
    wide = declared is not None and declared > 1 << 16
    train_files = [tokens.token_file(f, wide) for f in src.train]
    val_files = [tokens.token_file(f, wide) for f in src.validation]
    scans = {tf.path: tokens.scan(tf, folder) for tf in train_files + val_files}
    vocab, notes = _token_vocabulary(src.name, scans, declared, tokenizer is not None)
    train = TokenSpan(train_files)
    if val_files:
        val = TokenSpan(val_files)
        if src.val_tokens is not None:
            if src.val_tokens > len(val):
                raise DataError(
                    f"--val-data {src.pinned} asks for {src.val_tokens:,} tokens and the file holds "
                    f"{len(val):,}; give at most {len(val):,}."
                )
            val = val.span(0, src.val_tokens)
    else:
        cut = int(len(train) * (1 - cfg.val_fraction))  # the last part is validation, contiguous
        train, val = train.span(0, cut), train.span(cut, len(train))
    ident = {
        "format": CACHE_FORMAT,
        "tokens": True,
        "vocab": vocab,
        "train": [scans[f.path]["sha256"] for f in train_files],
        "val": [scans[f.path]["sha256"] for f in val_files],
        "val_tokens": src.val_tokens,
        "val_fraction": None if val_files else cfg.val_fraction,
    }
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    hashes = {
        "text_sha256": hashlib.sha256(json.dumps(ident["train"] + ident["val"]).encode()).hexdigest(),
        "tokenizer_sha256": None
        if tokenizer is None
        else hashlib.sha256(read_tokenizer_file(cfg.tokenizer_file)).hexdigest(),
        "files": {p: s["sha256"] for p, s in scans.items()},
    }
    val_chars = len(val) if tokenizer is None else _decoded_chars(tokenizer, val)
    tokenizer = tokenizer or IdsTokenizer(vocab)
    _notes(src.note, f"{src.name}: {'; '.join(notes)}." if notes else "")  # once nothing is refused
    return Corpus(src.name, key, tokenizer, mapped(train), mapped(val), val_chars, 0, hashes, src.pinned, (train, val))


def _notes(*notes: str) -> None:
    for note in notes:
        if note:
            print(f"modern-gpt: note: {note}", file=sys.stderr, flush=True)


def mapped(span: TokenSpan):
    """A span in one file as a numpy memory map: a view, as every caller of an array expects. A span across
    files stays a span, since joining them would copy every token."""
    return span[:] if len({f.path for f in span.files}) <= 1 else span


def _token_vocabulary(name: str, scans: dict, declared: int | None, has_tokenizer: bool) -> tuple[int, list]:
    """The vocabulary of token files, and the notes to print. The vocabulary is the declared one, which every
    id must lie under, or else the largest id's."""
    top = max((s["max_id"] for s in scans.values()), default=-1)
    vocab = declared if declared is not None else top + 1
    if top >= vocab:
        path = next(p for p, s in scans.items() if s["max_id"] == top)
        given = "the tokenizer file's" if has_tokenizer else "the declared --vocab-size"
        raise DataError(
            f"{path} holds the token id {top:,}, at or past {given} vocabulary of {vocab:,} ids; give the "
            "vocabulary these ids were written with (--vocab-size, or --tokenizer PATH/tokenizer.json)."
        )
    notes = []
    if declared is None:
        notes.append(f"the vocabulary is {vocab:,} ids, from the largest id in the files; declare it with --vocab-size")
    if not has_tokenizer:
        notes.append(
            "with no tokenizer file the losses are nats per token and the bits/char column holds bits per token; "
            "give --tokenizer PATH/tokenizer.json for bits per character"
        )
    return vocab, notes


def _split(cfg: DataConfig, parts, val_parts) -> tuple[str, str]:
    """Training and validation text. Validation is the validation files' text if any, else the last --val-fraction."""
    if val_parts:
        return join_text(parts, cfg.text_field), join_text(val_parts, cfg.text_field)
    return split_text(join_text(parts, cfg.text_field), cfg.val_fraction)


def _build_cache_entry(cfg: DataConfig, train_files: list[Path], src: Sources, entry: Path) -> None:
    """Tokenize the corpus into a new cache entry, streaming (cache.build). Then put it in place atomically."""
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.parent / f".{entry.name}-{os.getpid()}-{secrets.token_hex(4)}"
        os.mkdir(tmp, 0o777)  # 0o777 less the umask, as any folder the user makes (mkdtemp's is 0700)
        # train_chars is read by nothing now; it stays so that earlier versions sharing the cache can read the entry
        meta = {**cache.build(cfg, train_files, src.validation, src.val_tokens, tmp), **asdict(cfg)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    except OSError as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(
            f"cannot write the token cache in {entry.parent}: {e.strerror or e}; set --cache-dir."
        ) from None
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
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
        if len(ids) < need and split == "validation" and corpus.pinned:
            raise DataError(
                f"--val-data {corpus.pinned} gives {len(ids)} validation tokens, fewer than one window of --context "
                f"{context} needs ({need}); give a longer evaluation set or a smaller --context."
            )
        if len(ids) < need:
            raise DataError(
                f"the corpus is too short for context {context}: its {split} split has {len(ids)} tokens "
                f"and needs at least {need}; use a longer text, a smaller --context or a {fix} --val-fraction."
            )
    for s in corpus.evals:
        if len(s.ids) < need:
            raise DataError(
                f"the evaluation set {s.name} ({s.path}) gives {len(s.ids)} tokens, fewer than one window of "
                f"--context {context} needs ({need}); give a longer set or a smaller --context."
            )
    ids = corpus.train[:]  # an array (a memory map's view), not a span
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
    """The fixed evaluation windows of a split. They depend on its length alone, never on a seed.

    Every whole, non-overlapping window of the split, if they hold at most max_tokens predicted
    tokens. Otherwise max_tokens // context of them, evenly spaced over the split. Every run
    (every variant, every seed) is measured on these same tokens. So the windows add no
    variance to a run's loss, and none to a paired difference.
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
