"""Bad data: a missing, empty, binary, mis-encoded, too short or non-regular corpus or tokenizer file is one
sentence that names it and its real cause, exit 2."""

import os

import pandas as pd

from tests.errhelp import TINY, assert_user_error, write


def test_missing_data_path(run, tmp_path):
    assert_user_error(run("train", *TINY, "--data", tmp_path / "nope.txt"), "nope.txt does not exist")


def test_empty_file(run, tmp_path):
    assert_user_error(run("train", *TINY, "--data", write(tmp_path / "e.txt", b"")), "e.txt is empty")


def test_binary_file(run, tmp_path):
    path = write(tmp_path / "b.txt", b"PK\x03\x04\x00\x00binary")
    assert_user_error(run("train", *TINY, "--data", path), "b.txt looks binary", "byte offset 4")


def test_non_utf8_file(run, tmp_path):
    path = write(tmp_path / "latin1.txt", "café au lait ".encode("latin-1") * 10)
    assert_user_error(run("train", *TINY, "--data", path), "latin1.txt is not valid UTF-8 (byte offset 3)")


def test_folder_without_txt_files(run, tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "notes.md").write_text("no")
    assert_user_error(
        run("train", *TINY, "--data", tmp_path / "corpus"),
        "holds no .txt, .jsonl (.ndjson, .json), .parquet, .csv, .tsv, .arrow (maybe compressed) or token (.bin, .npy) files",
    )


def test_corpus_too_short_for_the_context(run, tmp_path):
    path = write(tmp_path / "short.txt", b"a short text of a few dozen characters, no more." * 3)
    assert_user_error(
        run("train", *TINY, "--data", path, "--context", "64"),
        "too short for context 64",
        "has 15 tokens and needs at least 65",
    )


def test_non_regular_data_paths_are_refused(run, made, tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        assert_user_error(run("train", *TINY, "--data", path), f"{path} is not a regular file")
    ckpt = made("ckpt", tmp_path / "ckpt")  # a copy of the session's tiny checkpoint
    assert_user_error(run("extrapolate", ckpt, "--contexts", "16", "--data", fifo), "is not a regular file")


def test_misleading_messages_name_the_real_cause(run, tmp_path):
    utf16 = write(
        tmp_path / "u16.txt", "a plain English sentence, saved by an editor as UTF-16.\n".encode("utf-16") * 20
    )
    assert_user_error(run("train", *TINY, "--data", utf16), "u16.txt is UTF-16LE text", "iconv -f UTF-16LE -t UTF-8")
    (tmp_path / "conf").mkdir()
    assert_user_error(run("train", "--config", tmp_path / "conf"), "conf is a folder")
    assert_user_error(run("train", *TINY, "--val-fraction", "0.999999"), "training split has", "--val-fraction")


def test_data_messages_and_the_token_cache(run, tmp_path, monkeypatch):
    from modern_gpt.core.config import DataConfig
    from modern_gpt.data.corpus import load_corpus

    fifo = tmp_path / "tok.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        assert_user_error(run("train", *TINY, "--tokenizer", path), f"{path} is not a regular file")
    assert_user_error(
        run("train", *TINY, "--data", tmp_path / "nope"),
        "give a .txt, .jsonl (.ndjson, .json), .parquet, .csv, .tsv, .arrow (maybe compressed) or token (.bin, .npy) file",
    )
    pd.DataFrame({"text": [b"\x01" * 5000]}).to_parquet(tmp_path / "b.parquet")
    code, out, err = run("train", *TINY, "--data", tmp_path / "b.parquet")
    assert_user_error((code, out, err), "row 1", "not a string", "...")
    assert len(err) < 300  # the 5000 bytes are cut short
    old = os.umask(0o022)
    try:
        load_corpus(DataConfig(cache_dir=str(tmp_path / "cache")))
    finally:
        os.umask(old)
    (entry,) = [p for p in (tmp_path / "cache").iterdir() if p.name != "index"]  # index: stream.index_path
    assert oct(entry.stat().st_mode & 0o777) == "0o755"
