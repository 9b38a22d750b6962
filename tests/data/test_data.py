"""Reading corpora, tokenizers, the split, the token cache and the batches."""

import numpy as np
import pytest

import modern_gpt.data.corpus as data
from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import (
    BatchStream,
    ByteTokenizer,
    CharTokenizer,
    DataError,
    eval_offsets,
    load_corpus,
    tokenizer_from_json,
    train_tokenizer,
    windows,
)

UNICODE = "Grüße aus Köln — ünïcode ✓, 日本語, emoji 🙂.\n\n  Tabs\tand  spaces.\n"


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
def test_tokenizers_round_trip_non_ascii_text(kind):
    text = UNICODE * 20
    tok = train_tokenizer(kind, text, vocab_size=300)
    ids = tok.encode(UNICODE)
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < tok.vocab_size
    assert tok.decode(ids) == UNICODE
    again = tokenizer_from_json(tok.to_json())  # as saved in a checkpoint
    assert again.decode(again.encode(UNICODE)) == UNICODE
    assert again.vocab_size == tok.vocab_size


def test_char_tokenizer_maps_unseen_characters_to_one_reserved_id():
    tok = CharTokenizer.train("abcabc")
    assert tok.vocab_size == 4
    assert tok.encode("abz").tolist() == [1, 2, 0]
    assert tok.decode([1, 0, 3]) == "a\ufffdc"


def test_byte_tokenizer_has_256_ids():
    assert ByteTokenizer().encode("é").tolist() == [0xC3, 0xA9]


def test_bpe_learns_merges():
    text = "the cat sat on the mat with the hat " * 50
    tok = train_tokenizer("bpe", text, vocab_size=300)
    assert len(tok.encode(text)) < len(text.encode()) / 2


def test_bom_and_cr_line_ends_read_as_lf(tmp_path, cache_dir):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"\xef\xbb\xbf" + b"line one\r\nline two\rline three\n" * 30)
    text = data.join_text(data.read_raw(DataConfig(path=str(path)))[1])
    assert text.startswith("line one\nline two\nline three\n")
    assert "\r" not in text and "\ufeff" not in text
    corpus = load_corpus(DataConfig(path=str(path), cache_dir=cache_dir))
    assert corpus.tokenizer.decode(corpus.train[:9]) == "line one\n"


def test_a_folder_is_read_in_sorted_order(tmp_path, cache_dir):
    (tmp_path / "b.txt").write_text("second " * 40)
    (tmp_path / "a.txt").write_text("first " * 40)
    (tmp_path / "skip.md").write_text("not read")
    text = data.join_text(data.read_raw(DataConfig(path=str(tmp_path)))[1])
    assert text.startswith("first ") and text.index("second") > text.rindex("first") and "not read" not in text


@pytest.mark.parametrize(
    "content,message",
    [
        (b"good start \xff\xfe bad", r"not valid UTF-8 \(byte offset 11\)"),
        (b"text\x00\x01\x02", r"looks binary \(a NUL byte at byte offset 4\)"),
        (b"", "is empty"),
        (b"  \n\n ", "is empty"),
    ],
)
def test_unreadable_files_are_clear_errors(tmp_path, cache_dir, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as e:
        load_corpus(DataConfig(path=str(path), cache_dir=cache_dir))
    assert "bad.txt" in str(e.value)


def test_missing_paths_and_empty_folders_are_clear_errors(tmp_path, cache_dir):
    with pytest.raises(DataError, match="does not exist"):
        load_corpus(DataConfig(path=str(tmp_path / "nope.txt"), cache_dir=cache_dir))
    with pytest.raises(DataError, match=r"holds no .txt, .jsonl \(.ndjson, .json\), .parquet, .csv"):
        load_corpus(DataConfig(path=str(tmp_path), cache_dir=cache_dir))


def test_the_last_fraction_is_validation_and_never_overlaps_training(tmp_path, cache_dir):
    # training text uses only a-m, validation text only n-z: any overlap would show as a foreign letter
    train_part = "".join("abcdefghijklm"[i % 13] for i in range(9000))
    val_part = "".join("nopqrstuvwxyz"[i % 13] for i in range(1000))
    path = tmp_path / "split.txt"
    path.write_text(train_part + val_part)
    corpus = load_corpus(DataConfig(path=str(path), tokenizer="byte", cache_dir=cache_dir))
    assert len(corpus.train) == 9000 and len(corpus.val) == 1000
    for offsets in np.array_split(eval_offsets(len(corpus.val), 32, 10_000), 4):
        x, y = windows(corpus.val, offsets, 32)
        assert set(corpus.tokenizer.decode(x.flatten().tolist())) <= set("nopqrstuvwxyz")
        assert set(corpus.tokenizer.decode(y.flatten().tolist())) <= set("nopqrstuvwxyz")
    stream = BatchStream(corpus.train, 32, 8, seed=3)
    for _ in range(50):
        x, y = stream.next()
        assert set(corpus.tokenizer.decode(y.flatten().tolist())) <= set("abcdefghijklm")


def test_the_second_load_hits_the_token_cache(tmp_path, cache_dir, monkeypatch):
    path = tmp_path / "corpus.txt"
    path.write_text(UNICODE * 50)
    first = load_corpus(DataConfig(path=str(path), tokenizer="bpe", vocab_size=300, cache_dir=cache_dir))

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("the tokenizer was called on a cached corpus")

    monkeypatch.setattr(data, "train_tokenizer", no_tokenizing)
    monkeypatch.setattr(data.BPETokenizer, "encode", no_tokenizing)
    monkeypatch.setattr(data.BPETokenizer, "train", no_tokenizing)  # what the streamed build calls
    second = load_corpus(DataConfig(path=str(path), tokenizer="bpe", vocab_size=300, cache_dir=cache_dir))
    assert isinstance(second.train, np.memmap)
    assert np.array_equal(first.train, second.train) and np.array_equal(first.val, second.val)
    # other settings are another cache entry: the tokenizer runs again
    with pytest.raises(AssertionError, match="tokenizer was called"):
        load_corpus(DataConfig(path=str(path), tokenizer="bpe", vocab_size=301, cache_dir=cache_dir))


def test_the_built_in_smoke_corpus_is_a_tinyshakespeare_excerpt(cache_dir):
    corpus = load_corpus(DataConfig(cache_dir=cache_dir))
    assert corpus.name == "smoke"
    text = data.join_text(data.read_raw(DataConfig())[1])
    assert 250_000 < len(text) < 350_000  # a smoke run sees a tenth of an epoch
    assert corpus.tokenizer.vocab_size < 100
    assert corpus.tokenizer.decode(corpus.train[:14].tolist()) == "First Citizen:"


def test_batches_depend_on_the_seed_alone(corpus):
    a, b, c = (BatchStream(corpus.train, 16, 4, seed) for seed in (1, 1, 2))
    for _ in range(5):
        xa, xb, xc = a.next()[0], b.next()[0], c.next()[0]
        assert np.array_equal(xa, xb)
    assert not np.array_equal(xa, xc)


def test_a_corpus_shorter_than_the_context_is_a_clear_error(tmp_path, cache_dir):
    path = tmp_path / "short.txt"
    path.write_text("just a few words here, and then some more words to make a corpus.\n")
    corpus = load_corpus(DataConfig(path=str(path), cache_dir=cache_dir))
    with pytest.raises(
        DataError, match=r"too short for context 20: its validation split has 7 tokens and needs at least 21"
    ):
        data.check_length(corpus, 20)
