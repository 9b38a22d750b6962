"""The streamed token cache gives the tokens the whole-text path gives (join_text, split_text, encode), block
boundaries anywhere (a CRLF, a multi-byte character or a JSON line cut in two); later starts read no corpus, and
a changed file is caught and named."""

import json
import os

import numpy as np
import pytest

from modern_gpt.core.config import DataConfig
from modern_gpt.data import cache as stream
from modern_gpt.data.corpus import (
    DataError,
    cache_key,
    join_text,
    load_corpus,
    read_raw,
    split_text,
    train_tokenizer,
)

TEXT = "Grüße aus Köln — 日本語 🙂\r\nline two\rline three\n\n  tabs\tand spaces " * 40


def corpus_folder(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"\xef\xbb\xbf" + TEXT.encode())
    (folder / "b.jsonl").write_text("".join(json.dumps({"text": TEXT[i : i + 90]}) + "\n" for i in range(0, 3000, 90)))
    (folder / "c.txt").write_text("no line end at the end")
    return folder


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
@pytest.mark.parametrize("block", [7, 1 << 23])
def test_streamed_tokens_equal_the_whole_text_path(tmp_path, monkeypatch, kind, block):
    monkeypatch.setattr(stream, "BLOCK", block)
    cfg = DataConfig(path=str(corpus_folder(tmp_path)), tokenizer=kind, vocab_size=300, cache_dir=str(tmp_path / "c"))
    train_text, val_text = split_text(join_text(read_raw(cfg)[1]), cfg.val_fraction)
    tok = train_tokenizer(kind, train_text, 300)
    corpus = load_corpus(cfg)
    assert corpus.key == cache_key(cfg, read_raw(cfg)[1])  # the same entry as before streaming
    assert corpus.tokenizer.to_json() == tok.to_json()
    assert np.array_equal(corpus.train[:], tok.encode(train_text))
    assert np.array_equal(corpus.val[:], tok.encode(val_text))
    assert corpus.val_chars == len(val_text)


def test_a_one_line_file_is_cut_into_bounded_chunks():
    line = "word " * 300_000
    chunks = list(stream.chunked(iter([line[:700_000], line[700_000:]])))
    assert "".join(chunks) == line and max(map(len, chunks)) <= 16 * (1 << 16)
    assert all(c.endswith("word") for c in chunks[:-1])  # cut before a space, as GPT-2's pre-tokenizer would


def test_the_smallest_dtype_holds_the_vocabulary(tmp_path):
    (tmp_path / "c.txt").write_text("abc def\n" * 500)
    corpus = load_corpus(DataConfig(path=str(tmp_path / "c.txt"), tokenizer="byte", cache_dir=str(tmp_path / "c")))
    assert corpus.train.dtype == np.uint8
    assert stream.smallest_dtype(257) == np.uint16 and stream.smallest_dtype(70_000) == np.uint32


def test_a_second_start_reads_no_corpus_and_a_changed_file_is_read_again(tmp_path, monkeypatch):
    path = tmp_path / "c.txt"
    path.write_text("hello there general kenobi\n" * 2_000)
    cfg = DataConfig(path=str(path), cache_dir=str(tmp_path / "c"))
    first = load_corpus(cfg)
    read = []
    monkeypatch.setattr(stream, "digests", lambda *a: read.append(a) or pytest.fail("the corpus was hashed"))
    again = load_corpus(cfg)  # identified by (path, size, mtime) and sampled blocks
    assert again.key == first.key and not read
    monkeypatch.undo()
    path.write_text("hello there general grievous\n" * 2_000)
    assert load_corpus(cfg).key != first.key


def test_bpe_trains_on_a_bounded_sample_recorded_in_meta(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "BPE_SAMPLE", 5_000)
    path = tmp_path / "c.txt"
    path.write_text("the cat sat on the mat. " * 400 + "zebra quokka " * 400)
    cfg = DataConfig(path=str(path), tokenizer="bpe", vocab_size=300, cache_dir=str(tmp_path / "c"))
    corpus = load_corpus(cfg)
    meta = json.loads((tmp_path / "c" / corpus.key / "meta.json").read_text())
    assert meta["bpe_sample_chars"] == 5_000
    assert "zebra" not in corpus.tokenizer.tok.get_vocab() and "Ġcat" in corpus.tokenizer.tok.get_vocab()
    assert corpus.tokenizer.decode(corpus.train[:]) + corpus.tokenizer.decode(corpus.val[:]) == path.read_text()


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"ok text\n" * 3 + b"\xff bad", "is not valid UTF-8 (byte offset 24)"),
        (b"ok text\n" * 3 + b"\x00", "a NUL byte at byte offset 24"),
    ],
)
def test_errors_in_a_later_block_name_the_byte_offset_in_the_file(tmp_path, monkeypatch, raw, message):
    monkeypatch.setattr(stream, "BLOCK", 5)
    (tmp_path / "c.txt").write_bytes(raw)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_corpus(DataConfig(path=str(tmp_path / "c.txt"), cache_dir=str(tmp_path / "c")))


def test_resume_names_the_shard_that_changed(run, tmp_path):
    from tests.clihelp import CLASSIC_ROPE, tiny

    folder = tmp_path / "d"
    folder.mkdir()
    for name in ("train-0.txt", "train-1.txt", "validation.txt"):
        (folder / name).write_text("the quick brown fox jumps over the lazy dog\n" * 300)
    code, out, err = run(
        "ablate", *tiny(steps=2), "--jobs", "1", "--seeds", "2", *CLASSIC_ROPE, "--data", folder, "--out", "res"
    )
    assert code == 0, err
    (folder / "train-1.txt").write_text("the quick brown fox jumps over the lazy cat\n" * 300)
    os.utime(folder / "train-1.txt", (1, 1))
    code, out, err = run("ablate", "--resume", "res")
    assert code == 2 and f"the data ({folder / 'train-1.txt'}) changed since the ablation started" in err, err
