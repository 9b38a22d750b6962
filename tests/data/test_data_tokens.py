"""Token files as the field writes them (nanoGPT's headerless uint16 .bin, OLMo's headerless .npy, numpy's .npy,
llm.c / modded-nanogpt shards), read in place through memory maps; their vocabulary, their bad forms, the
sentence for a binary file given as text, and pickling by path (what a --jobs worker is sent)."""

import gzip
import json
import pickle

import numpy as np
import pytest

from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import DataError, IdsTokenizer, load_corpus, tokenizer_from_json
from modern_gpt.data.tokens import LLMC_MAGIC, TokenSpan, token_file
from tests.clihelp import tiny
from tests.errhelp import assert_ablation_error, assert_user_error

TINY = tiny(steps=2)


def ids(n: int, top: int = 500, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, top, n).astype(np.uint16)


def shard(path, tokens: np.ndarray, magic: int = LLMC_MAGIC, version: int = 1, count: int | None = None):
    """An llm.c / modded-nanogpt shard: 256 int32 (magic, version, token count), then uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = magic, version, len(tokens) if count is None else count
    path.write_bytes(header.tobytes() + tokens.astype("<u2").tobytes())
    return path


def cfg(path, tmp_path, **kw) -> DataConfig:
    return DataConfig(path=str(path), cache_dir=str(tmp_path / "cache"), vocab_size=kw.pop("vocab_size", 0), **kw)


def test_a_headerless_bin_is_read_in_place_with_its_vocabulary_from_the_largest_id(tmp_path, capsys):
    data = ids(20_000)
    data.tofile(tmp_path / "train.bin")
    corpus = load_corpus(cfg(tmp_path / "train.bin", tmp_path))
    assert isinstance(corpus.tokenizer, IdsTokenizer) and corpus.tokenizer.vocab_size == int(data.max()) + 1
    assert len(corpus.train) == 18_000 and len(corpus.val) == 2_000  # the last --val-fraction, contiguous
    assert np.array_equal(corpus.train[:], data[:18_000]) and np.array_equal(corpus.val[:], data[18_000:])
    assert isinstance(corpus.train[100:200], np.memmap)  # a view of the file, not a copy
    err = capsys.readouterr().err
    assert "from the largest id" in err and "nats per token" in err and "bits per token" in err
    assert corpus.val_tokens_per_char == 1.0  # the bits/char column holds bits per token, as the note says
    saved = tokenizer_from_json(corpus.tokenizer.to_json())  # as a checkpoint keeps it
    assert saved.vocab_size == corpus.tokenizer.vocab_size
    with pytest.raises(DataError, match="cannot read text"):
        saved.encode("hello")


def test_a_declared_vocabulary_is_kept_and_ids_past_it_are_refused(tmp_path):
    data = ids(5_000, top=900)
    data.tofile(tmp_path / "train.bin")
    assert load_corpus(cfg(tmp_path / "train.bin", tmp_path, vocab_size=50_304)).tokenizer.vocab_size == 50_304
    with pytest.raises(DataError, match=f"holds the token id {int(data.max())}, at or past the declared"):
        load_corpus(cfg(tmp_path / "train.bin", tmp_path, vocab_size=512))


def test_a_vocabulary_above_65536_reads_headerless_files_as_uint32(tmp_path):
    data = np.random.default_rng(1).integers(0, 100_000, 4_000).astype(np.uint32)
    data.tofile(tmp_path / "part-0.npy")  # OLMo: a headerless memmap named .npy
    corpus = load_corpus(cfg(tmp_path / "part-0.npy", tmp_path, vocab_size=100_352))
    assert np.array_equal(np.concatenate([corpus.train[:], corpus.val[:]]), data)


def test_a_numpy_npy_file_is_read_by_its_header(tmp_path):
    data = ids(3_000).astype(np.int32)
    np.save(tmp_path / "tokens.npy", data)
    tf = token_file(tmp_path / "tokens.npy")
    assert tf.kind.startswith("numpy") and tf.count == 3_000
    corpus = load_corpus(cfg(tmp_path / "tokens.npy", tmp_path))
    assert np.array_equal(corpus.train[:], data[:2_700])
    np.save(tmp_path / "grid.npy", np.zeros((4, 4), np.int32))
    with pytest.raises(DataError, match="not a flat array of integer token ids"):
        load_corpus(cfg(tmp_path / "grid.npy", tmp_path))


def test_llmc_shards_in_a_folder_train_on_train_and_evaluate_on_val(tmp_path, capsys):
    folder = tmp_path / "fineweb10B"
    folder.mkdir()
    parts = [ids(3_000, seed=s) for s in range(3)]
    for i, part in enumerate(parts[:2]):
        shard(folder / f"fineweb_train_{i + 1:06d}.bin", part)
    shard(folder / "fineweb_val_000000.bin", parts[2])
    corpus = load_corpus(cfg(folder, tmp_path))
    assert isinstance(corpus.train, TokenSpan)  # two shards: never joined into one copy
    assert np.array_equal(corpus.train[:], np.concatenate(parts[:2])) and np.array_equal(corpus.val[:], parts[2])
    assert np.array_equal(corpus.train[2_990:3_010], np.concatenate(parts[:2])[2_990:3_010])  # across two shards
    assert (
        "trained on its train split (2 files), evaluated on its validation split (1 files)" in capsys.readouterr().err
    )
    glob = load_corpus(cfg(folder / "fineweb_train_*.bin", tmp_path))  # a glob of shards
    assert len(glob.train) + len(glob.val) == 6_000


@pytest.mark.parametrize(
    "damage, message",
    [
        ({"magic": 20240521}, "the magic 20240521, not 20240520"),
        ({"count": 2_999}, "its header counts 2,999 tokens but the file holds 3,000"),
        ({"version": 7}, "version 7"),
    ],
)
def test_a_damaged_shard_is_one_sentence(tmp_path, damage, message):
    shard(tmp_path / "s.bin", ids(3_000), **damage)
    with pytest.raises(DataError, match=message):
        load_corpus(cfg(tmp_path / "s.bin", tmp_path))


def test_a_headerless_file_of_odd_size_is_refused(tmp_path):
    (tmp_path / "train.bin").write_bytes(b"\x01\x00" * 100 + b"\x01")
    with pytest.raises(DataError, match="not a whole number of uint16 token ids"):
        load_corpus(cfg(tmp_path / "train.bin", tmp_path))


def test_a_tokenizer_to_train_on_token_files_is_refused(tmp_path):
    ids(2_000).tofile(tmp_path / "train.bin")
    with pytest.raises(DataError, match="holds token ids already, so --tokenizer bpe would tokenize nothing"):
        load_corpus(cfg(tmp_path / "train.bin", tmp_path, tokenizer="bpe", vocab_size=512))


def test_token_files_and_text_are_not_mixed(tmp_path):
    ids(2_000).tofile(tmp_path / "train.bin")
    (tmp_path / "val.txt").write_text("some text\n" * 100)
    with pytest.raises(DataError, match="mixes token files"):
        load_corpus(cfg(tmp_path, tmp_path))


@pytest.mark.parametrize(
    "raw, what",
    [
        (gzip.compress(b"hello world\n" * 100, mtime=0), "it is a gzip-compressed stream; give it the .gz suffix"),
        (np.array([LLMC_MAGIC, 1, 4] + [0] * 253, "<i4").tobytes() + b"\x01\x00" * 4, "an llm.c"),
        # nanoGPT's shakespeare_char train.bin: uint16 ids under 65, read as UTF-16 text before
        (np.tile(np.arange(1, 65, dtype="<u2"), 64).tobytes(), "it may be token ids"),
    ],
)
def test_a_binary_file_given_as_text_is_named_for_what_it_looks_like(tmp_path, raw, what):
    (tmp_path / "corpus.dat").write_bytes(raw)
    with pytest.raises(DataError, match="looks binary") as e:
        load_corpus(DataConfig(path=str(tmp_path / "corpus.dat"), cache_dir=str(tmp_path / "cache")))
    assert what in str(e.value) and "UTF-16" not in str(e.value)


def test_a_span_pickles_as_its_files_not_its_tokens(tmp_path):
    data = ids(200_000)
    data.tofile(tmp_path / "train.bin")
    corpus = load_corpus(cfg(tmp_path / "train.bin", tmp_path))
    sent = pickle.dumps(corpus)
    assert len(sent) < 2_000 < data.nbytes  # what a --jobs worker is sent
    back = pickle.loads(sent)
    assert np.array_equal(back.train[5:50], data[5:50]) and np.array_equal(back.val[:], data[180_000:])


def test_a_text_corpus_from_the_cache_pickles_by_path_too(tmp_path):
    (tmp_path / "c.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 2_000)
    corpus = load_corpus(DataConfig(path=str(tmp_path / "c.txt"), cache_dir=str(tmp_path / "cache")))
    assert isinstance(corpus.train, np.memmap)  # as callers expect an array
    sent = pickle.dumps(corpus)
    assert len(sent) < 4_000 < len(corpus.train)
    back = pickle.loads(sent)
    assert isinstance(back.train, np.memmap) and np.array_equal(back.train[:100], corpus.train[:100])


def test_training_on_token_files_from_the_command_line(run, tmp_path):
    ids(6_000, top=200).tofile(tmp_path / "train.bin")
    ids(2_000, top=200, seed=3).tofile(tmp_path / "val.bin")
    code, out, err = run("train", *TINY, "--data", tmp_path, "--out", "ck")
    assert code == 0, err
    assert "trained on its train split" in err and "nats per token" in err
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(2):  # windows cross from one shard into the next
        shard(shards / f"fineweb_train_{i:06d}.bin", ids(3_000, top=200, seed=i))
    shard(shards / "fineweb_val_000000.bin", ids(2_000, top=200, seed=9))
    code, out, err = run("train", *TINY, "--data", shards, "--out", "ck3")
    assert code == 0, err
    code, out, err = run("train", *TINY, "--data", tmp_path / "train.bin", "--vocab-size", "100", "--out", "ck2")
    assert_user_error((code, out, err), "at or past the declared --vocab-size vocabulary of 100 ids")


def test_a_checkpoint_s_loss_on_a_pinned_val_set_equals_a_plain_torch_computation(run, tmp_path):
    """The speedrun's metric: the loss on the first N tokens of a fixed file. modern-gpt's val loss equals the
    mean next-token cross-entropy over the same whole windows, computed here in float64 apart from the code."""
    import json

    import torch

    from modern_gpt.run.checkpoint import load_checkpoint

    ids(8_000, top=120).tofile(tmp_path / "train.bin")
    shard(tmp_path / "fineweb_val_000000.bin", ids(3_000, top=120, seed=5))
    n, context = 1_617, 16  # not a whole number of windows: the tail that fills no window is left out
    code, out, err = run(
        "train", *TINY, "--data", tmp_path / "train.bin", "--val-data", f"{tmp_path / 'fineweb_val_000000.bin'}:{n}",
        "--vocab-size", "128", "--eval-tokens", str(n), "--out", "ck",
    )  # fmt: skip
    assert code == 0, err
    reported = json.loads((tmp_path / "ck" / "metrics.json").read_text())["val_loss"]
    model, _, _ = load_checkpoint(tmp_path / "ck")
    val = np.fromfile(tmp_path / "fineweb_val_000000.bin", dtype="<u2", offset=1024)[:n].astype(np.int64)
    windows = (n - 1) // context
    total = 0.0
    with torch.no_grad():
        for w in range(windows):
            x = torch.from_numpy(val[w * context : (w + 1) * context])[None]
            y = torch.from_numpy(val[w * context + 1 : (w + 1) * context + 1])
            logits = model(x)[0][0].double()
            total += float(-(logits.log_softmax(-1)[torch.arange(context), y]).sum())
    assert abs(reported - total / (windows * context)) < 1e-6, (reported, total / (windows * context))


def test_a_val_data_shorter_than_one_window_is_one_sentence_before_training(run, tmp_path):
    ids(6_000, top=200).tofile(tmp_path / "train.bin")
    ids(2_000, top=200).tofile(tmp_path / "val.bin")
    code, out, err = run("train", *TINY, "--data", tmp_path / "train.bin", "--val-data", f"{tmp_path / 'val.bin'}:10")
    assert_ablation_error(
        (code, out, err), "gives 10 validation tokens, fewer than one window of --context 16 needs (17)"
    )


def test_with_its_tokenizer_file_token_files_count_the_characters_they_decode_to(tmp_path, capsys):
    from modern_gpt.data.corpus import train_tokenizer

    text = "the quick brown fox jumps over the lazy dog, twice: héllo wörld\n" * 300
    bpe = train_tokenizer("bpe", text, 300)
    (tmp_path / "tok.json").write_text(json.dumps(bpe.to_json()["tokenizers"]))
    data = bpe.encode(text).astype(np.uint16)
    data.tofile(tmp_path / "train.bin")
    corpus = load_corpus(DataConfig(path=str(tmp_path / "train.bin"), tokenizer=str(tmp_path / "tok.json"),
                                    cache_dir=str(tmp_path / "cache")))  # fmt: skip
    assert corpus.tokenizer.vocab_size == bpe.vocab_size and "nats per token" not in capsys.readouterr().err
    assert corpus.val_chars == len(bpe.decode(corpus.val[:]))  # bits per character, as for the text itself


def test_a_damaged_shard_in_a_split_folder_is_the_one_line_on_stderr(run, tmp_path):
    shard(tmp_path / "fineweb_train_000001.bin", ids(3_000))
    shard(tmp_path / "fineweb_val_000000.bin", ids(3_000), count=2_999)
    code, out, err = run("train", *TINY, "--data", tmp_path, "--out", "ck")
    assert_user_error((code, out, err), "fineweb_val_000000.bin: its header counts 2,999 tokens")  # no note first
