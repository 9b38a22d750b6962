"""Tokenizers. Each turns text into an int array and back, and saves itself as JSON. The kinds: char, byte,
BPE trained here, a pretrained tokenizer.json, and the stand-in for token files with no tokenizer."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from ..core.config import TOKENIZERS
from ..core.files import not_regular
from .errors import DataError
from .text import _first_line


class EncodeError(DataError):
    """A tokenizer raised on a text. Say, an unknown word and no unknown token."""

    def __init__(self, who: str, what: str, why: str):
        self.why = why
        super().__init__(
            f"{who} cannot encode {what} ({why}); give a tokenizer that covers every character, "
            "such as a byte-level BPE or one with an unknown token."
        )


# ---------------------------------------------------------------------------
# The tokenizers
# ---------------------------------------------------------------------------
class CharTokenizer:
    """One id per character seen in the training split. Id 0 stands for any character it never saw."""

    kind = "char"
    UNKNOWN = "\ufffd"

    def __init__(self, chars: str):
        self.chars = chars
        self._codes = np.array([ord(c) for c in chars], dtype=np.uint32)  # sorted
        self._table = None
        self.vocab_size = len(chars) + 1

    @classmethod
    def train(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        if self._table is None:  # id by code point, one gather a character; past the largest: unknown (0)
            top = int(self._codes[-1]) + 1 if len(self._codes) else 0
            self._table = np.zeros(top + 1, dtype=np.int64)
            self._table[self._codes] = np.arange(1, len(self._codes) + 1)
        return self._table[np.minimum(codes, len(self._table) - 1)]

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
    """A pretrained Hugging Face tokenizer.json (GPT-2's, Llama's, ...), read from a file. Nothing is downloaded.

    Text is encoded without added special tokens: no BOS per chunk. So a text's token count,
    and with it bits per character, depends on the text alone.
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
    """Pieces of about `size` characters that end at a line end. For batched BPE training and encoding."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def lost_chars(tokenizer, text: str) -> int:
    """How many characters of text the tokenizer does not give back. 0 when decode(encode(text)) == text.

    Bits per character count the text's characters. A tokenizer that drops or merges some predicts fewer of
    them: an unknown token, say, or a normaliser that lowercases. Its bits/char then compare with no other
    tokenizer's. The text is compared chunk by chunk, as it is encoded. A chunk that comes back different
    counts its characters missing or added, whichever is more.
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
    """A char, byte or bpe tokenizer for this text. Any other kind is the path of a pretrained tokenizer.json."""
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
    if d.get("kind") == "ids":
        return IdsTokenizer(int(d["vocab_size"]))
    if d.get("kind") in ("bpe", "hf"):
        from tokenizers import Tokenizer

        cls = BPETokenizer if d["kind"] == "bpe" else PretrainedTokenizer
        return cls(Tokenizer.from_str(json.dumps(d["tokenizers"])))
    raise DataError(f"unknown tokenizer kind {d.get('kind')!r} in a saved tokenizer.")


class IdsTokenizer:
    """The stand-in tokenizer for token ids given with no tokenizer file. It knows the vocabulary's size and
    nothing of the text."""

    kind = "ids"

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def encode(self, text: str) -> np.ndarray:
        raise DataError(
            "this model was trained on token ids with no tokenizer file, so it cannot read text; train it with "
            "--tokenizer PATH/tokenizer.json to generate or evaluate text."
        )

    def decode(self, ids) -> str:
        return " ".join(f"<{int(i)}>" for i in ids)

    def to_json(self) -> dict:
        return {"kind": self.kind, "vocab_size": self.vocab_size}


def _truncates_or_pads(raw: bytes) -> bool:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return False  # not JSON: reading it as a tokenizer says so
    return isinstance(doc, dict) and bool(doc.get("truncation") or doc.get("padding"))


def _decoded_chars(tokenizer, ids, block: int = 1 << 20) -> int:
    """How many characters token ids decode to, a block at a time. Bits per character need them."""
    return sum(len(tokenizer.decode(ids[a : a + block])) for a in range(0, len(ids), block))


def _byte_level_chars() -> set[str]:
    """The 256 characters GPT-2's byte-level BPE spells bytes with (its bytes_to_unicode). Each is one byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {chr(b) for b in kept} | {chr(256 + i) for i in range(len(moved))}


def token_bytes(tokenizer) -> np.ndarray | None:
    """Each id's length in UTF-8 bytes, for bits per byte (run/evaluation.py). A special token is 0: bits per
    byte leave its loss out. None for ids with no tokenizer: no bytes are known. A char tokenizer's unknown id
    counts as U+FFFD (3 bytes). A byte-level BPE's tokens count their bytes exactly. Another pretrained
    tokenizer's tokens count the bytes each decodes to alone."""
    if tokenizer.kind == "ids":
        return None
    if tokenizer.kind == "byte":
        return np.ones(256, dtype=np.int64)
    if tokenizer.kind == "char":
        return np.array([3] + [len(c.encode("utf-8")) for c in tokenizer.chars], dtype=np.int64)
    tok = tokenizer.tok
    out = np.zeros(tokenizer.vocab_size, dtype=np.int64)
    decoder = json.loads(tok.to_str()).get("decoder") or {}
    byte_level = "ByteLevel" in json.dumps(decoder)
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    one = _byte_level_chars() if byte_level else set()
    for token, i in tok.get_vocab(with_added_tokens=True).items():
        if token in special:
            continue
        if byte_level:
            out[i] = sum(1 if ch in one else len(ch.encode("utf-8")) for ch in token)
        else:
            out[i] = len(tok.decode([i], skip_special_tokens=False).encode("utf-8"))
    return out
