"""The layouts and formats researchers download: HF split folders (train on train, evaluate on validation, never
read test), a `datasets` save_to_disk folder and .arrow files, CSV/TSV through --text-field, compressed text and
JSON lines (a stream cut short refused), and --val-data PATH[:TOKENS]."""

import bz2
import csv
import gzip
import json
import lzma

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import DataError, load_corpus

TRAIN = "abcdefghijklm \n"  # letters of each split kept apart, so a split's text shows in the vocabulary
VALID = "nopqrstuvwxyz \n"
TEST = "0123456789!?; \n"


def text(letters: str, n: int = 3_000, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(list(letters), n))


def docs(letters: str, rows: int = 30, seed: int = 0) -> list[str]:
    return [text(letters, 100, seed + i) for i in range(rows)]


def load(path, tmp_path, **kw):
    return load_corpus(DataConfig(path=str(path), cache_dir=str(tmp_path / "cache"), **kw))


def chars(corpus) -> set[str]:
    """The characters of the training split (a char tokenizer's vocabulary) and those the validation split holds."""
    return set(corpus.tokenizer.chars), set(corpus.tokenizer.decode(corpus.val[:]))


def parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": rows, "id": list(range(len(rows)))}), path)


def test_an_hf_split_folder_trains_on_train_evaluates_on_validation_and_never_reads_test(tmp_path, capsys):
    data = tmp_path / "snapshot" / "data"
    parquet(data / "train-00000-of-00002.parquet", docs(TRAIN))
    parquet(data / "train-00001-of-00002.parquet", docs(TRAIN, seed=50))
    parquet(data / "validation-00000-of-00001.parquet", docs(VALID))
    (data / "test-00000-of-00001.parquet").write_bytes(b"PAR1 not a parquet file: reading it would fail")
    (tmp_path / "snapshot" / "README.md").write_text("# a dataset card\n")
    corpus = load(tmp_path / "snapshot", tmp_path)
    train, val = chars(corpus)
    assert train <= set(TRAIN) and val <= set(VALID) | {"\ufffd"}  # validation letters are unknown to training
    assert "\ufffd" in val and corpus.val_lost > corpus.val_chars / 2
    err = capsys.readouterr().err
    assert "trained on its train split (2 files), evaluated on its validation split (1 files)" in err
    assert "the test split (1 file) is never read" in err


def test_a_split_folder_of_json_lines_and_train_only_takes_the_val_fraction(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs(TRAIN)))
    (tmp_path / "d" / "test.jsonl").write_text("{not json")
    corpus = load(tmp_path / "d", tmp_path)
    assert chars(corpus)[0] <= set(TRAIN)
    assert "last --val-fraction of the train split" in capsys.readouterr().err


@pytest.mark.parametrize(
    "names, message",
    [
        (
            ["validation.jsonl", "test.jsonl"],
            "has splits but no train split (validation: validation.jsonl; test: test.jsonl)",
        ),
        (["train.jsonl", "notes.jsonl"], "ambiguous split layout (train: train.jsonl; no split: notes.jsonl)"),
        (["train.jsonl", "val.jsonl", "dev.jsonl"], "names its validation split 2 ways (dev, val)"),
        (["train_test.jsonl"], "ambiguous split layout"),
    ],
)
def test_a_layout_with_no_train_split_or_an_ambiguous_one_is_refused_listing_what_it_found(tmp_path, names, message):
    (tmp_path / "d").mkdir()
    for name in names:
        (tmp_path / "d" / name).write_text(json.dumps({"text": "hello there"}) + "\n")
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(tmp_path / "d", tmp_path)


def arrow_stream(path, rows, column="text"):
    """What `datasets` writes: an Arrow IPC stream, data-0000x-of-0000y.arrow."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({column: rows, "label": [0] * len(rows)})
    with ipc.new_stream(str(path), table.schema) as w:
        w.write_table(table)


def test_a_save_to_disk_dataset_dict_reads_its_text_field(tmp_path, capsys):
    root = tmp_path / "saved"
    for split, letters in (("train", TRAIN), ("validation", VALID), ("test", TEST)):
        arrow_stream(root / split / "data-00000-of-00001.arrow", docs(letters))
        (root / split / "dataset_info.json").write_text(json.dumps({"features": {"text": {}}}, indent=1))
        (root / split / "state.json").write_text(json.dumps({"_data_files": []}, indent=1))
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation", "test"]}))
    corpus = load(root, tmp_path)
    train, val = chars(corpus)
    assert train <= set(TRAIN) and not set(TEST) - set(" \n") & (train | val)
    assert "evaluated on its validation split" in capsys.readouterr().err


def test_an_arrow_file_alone_and_its_missing_column(tmp_path):
    arrow_stream(tmp_path / "data.arrow", docs(TRAIN))
    assert chars(load(tmp_path / "data.arrow", tmp_path))[0] <= set(TRAIN)
    table = pa.table({"text": docs(VALID)})  # the IPC file format (ARROW1) too
    with ipc.new_file(str(tmp_path / "file.arrow"), table.schema) as w:
        w.write_table(table)
    assert load(tmp_path / "file.arrow", tmp_path).val_chars > 0
    with pytest.raises(DataError, match=r"has no column 'body' \(its columns: 'text', 'label'\)"):
        load(tmp_path / "data.arrow", tmp_path, text_field="body")
    (tmp_path / "bad.arrow").write_bytes(b"not arrow at all" * 10)
    with pytest.raises(DataError, match="is not a readable Arrow file"):
        load(tmp_path / "bad.arrow", tmp_path)


@pytest.mark.parametrize("suffix, sep", [(".csv", ","), (".tsv", "\t")])
def test_a_lone_csv_is_read_through_its_text_column_never_as_raw_text(tmp_path, suffix, sep):
    rows = docs(TRAIN)
    with open(tmp_path / f"corpus{suffix}", "w", newline="") as f:
        w = csv.writer(f, delimiter=sep)
        w.writerow(["id", "text", "label"])
        w.writerows([i, r, "POSITIVE"] for i, r in enumerate(rows))
    corpus = load(tmp_path / f"corpus{suffix}", tmp_path)
    assert chars(corpus)[0] <= set(TRAIN)  # no header, id, separator or label
    with pytest.raises(DataError, match=r"has no column 'body' \(its header: 'id', 'text', 'label'\)"):
        load(tmp_path / f"corpus{suffix}", tmp_path, text_field="body")


def test_a_quoted_csv_field_holds_commas_and_line_ends(tmp_path):
    (tmp_path / "c.csv").write_text('text,n\n"one, two\nthree",1\n' * 200)
    corpus = load(tmp_path / "c.csv", tmp_path)
    assert corpus.tokenizer.decode(corpus.train[:15]) == "one, two\nthree\n"


OPENERS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


@pytest.mark.parametrize("suffix", list(OPENERS))
def test_compressed_text_and_json_lines_are_read_and_a_cut_short_stream_is_refused(tmp_path, suffix):
    body = text(TRAIN, 20_000)
    (tmp_path / f"c.txt{suffix}").write_bytes(OPENERS[suffix](body.encode()))
    assert chars(load(tmp_path / f"c.txt{suffix}", tmp_path))[0] <= set(TRAIN)
    lines = "".join(json.dumps({"text": d, "n": 1}) + "\n" for d in docs(VALID))
    (tmp_path / f"c.jsonl{suffix}").write_bytes(OPENERS[suffix](lines.encode()))
    assert chars(load(tmp_path / f"c.jsonl{suffix}", tmp_path))[0] <= set(VALID)  # the field, not raw JSON
    whole = (tmp_path / f"c.txt{suffix}").read_bytes()
    (tmp_path / f"cut.txt{suffix}").write_bytes(whole[: len(whole) * 2 // 3])
    with pytest.raises(DataError, match="cut short|not a readable"):
        load(tmp_path / f"cut.txt{suffix}", tmp_path)


def test_a_zstandard_file_names_its_extra_when_the_package_is_missing(tmp_path):
    try:
        import zstandard  # noqa: F401
    except ImportError:
        (tmp_path / "c.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 20)
        with pytest.raises(DataError, match=r"pip install 'modern-gpt\[zst\]'"):
            load(tmp_path / "c.txt.zst", tmp_path)
        return
    import zstandard

    (tmp_path / "c.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(text(TRAIN, 5_000).encode()))
    assert chars(load(tmp_path / "c.txt.zst", tmp_path))[0] <= set(TRAIN)


def test_val_data_pins_the_evaluation_set_text_or_tokens(tmp_path):
    (tmp_path / "train.txt").write_text(text(TRAIN, 5_000))
    (tmp_path / "eval.txt").write_text(text(TRAIN, 2_000, seed=7))
    corpus = load(tmp_path / "train.txt", tmp_path, val_data=f"{tmp_path / 'eval.txt'}:1500")
    assert len(corpus.train) == 5_000 and len(corpus.val) == 1_500  # all of --data trains; the first 1,500 tokens
    assert corpus.tokenizer.decode(corpus.val[:]) == text(TRAIN, 2_000, seed=7)[:1_500]
    with pytest.raises(DataError, match="asks for 9,999 tokens and its text holds 2,000"):
        load(tmp_path / "train.txt", tmp_path, val_data=f"{tmp_path / 'eval.txt'}:9999")
    ids = np.arange(4_000, dtype=np.uint16) % 300
    ids.tofile(tmp_path / "train.bin")
    ids[:1_000].tofile(tmp_path / "val.bin")
    corpus = load(tmp_path / "train.bin", tmp_path, val_data=f"{tmp_path / 'val.bin'}:600", vocab_size=0)
    assert len(corpus.train) == 4_000 and np.array_equal(corpus.val[:], ids[:600])
    with pytest.raises(DataError, match="asks for 1,001 tokens and the file holds 1,000"):
        load(tmp_path / "train.bin", tmp_path, val_data=f"{tmp_path / 'val.bin'}:1001", vocab_size=0)
    with pytest.raises(DataError, match="mixes token files"):
        load(tmp_path / "train.bin", tmp_path, val_data=str(tmp_path / "eval.txt"), vocab_size=0)
