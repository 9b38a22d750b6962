"""Real corpora and tokenizers in: .jsonl and .parquet files, folders that mix them with .txt, pretrained tokenizer.json."""

import json
import math

import pandas as pd
import pytest

from modern_gpt.data import DataConfig, DataError, cache_key, join_text, load_corpus, read_raw, tokenizer_from_json

from .clihelp import run_main

DOCS = ["First document.\nIt has two lines.", "Second: héllo wörld 😀", "Third, with a CRLF\r\nline end.\n"]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def corpus_text(path, **kw) -> str:
    cfg = DataConfig(path=str(path), **kw)
    return join_text(read_raw(cfg)[1], cfg.text_field)


def test_jsonl_and_parquet_read_the_text_field_one_document_after_another(tmp_path):
    expected = "First document.\nIt has two lines.\nSecond: héllo wörld 😀\nThird, with a CRLF\nline end.\n"
    write_jsonl(tmp_path / "a.jsonl", [{"text": d, "id": i} for i, d in enumerate(DOCS)])
    assert corpus_text(tmp_path / "a.jsonl") == expected
    write_jsonl(tmp_path / "b.jsonl", [{"body": d} for d in DOCS])
    assert corpus_text(tmp_path / "b.jsonl", text_field="body") == expected
    pd.DataFrame({"body": DOCS, "n": [1, 2, 3]}).to_parquet(tmp_path / "c.parquet")
    assert corpus_text(tmp_path / "c.parquet", text_field="body") == expected


def test_a_folder_mixes_txt_jsonl_and_parquet_in_sorted_order(tmp_path):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text("from b.txt", encoding="utf-8")
    write_jsonl(folder / "a.jsonl", [{"text": "from a.jsonl"}])
    pd.DataFrame({"text": ["from c.parquet", "and its second row"]}).to_parquet(folder / "c.parquet")
    (folder / "sub" / "d.txt").write_text("from sub/d.txt\n", encoding="utf-8")
    (folder / "notes.md").write_text("not read", encoding="utf-8")
    assert corpus_text(folder) == "from a.jsonl\nfrom b.txt\nfrom c.parquet\nand its second row\nfrom sub/d.txt\n"


@pytest.mark.parametrize(
    "line,message",
    [
        ("{not json", r"line 2 is not JSON"),
        ('["a list"]', r"line 2 holds a JSON list, not an object with a 'text' field"),
        ('{"body": "x"}', r"line 2 has no field 'text' \(it has 'body'\); choose the field with --text-field"),
        ('{"text": 3}', r"line 2: the field 'text' is not a string"),
    ],
)
def test_a_bad_jsonl_line_is_an_error_naming_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n' + line + '\n\n{"text": "never read"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=f"{path} {message}" if message.startswith("line") else message):
        corpus_text(path)


def test_bad_parquet_files_are_errors_naming_the_file(tmp_path):
    pd.DataFrame({"body": ["x"]}).to_parquet(tmp_path / "a.parquet")
    with pytest.raises(DataError, match=r"a.parquet has no column 'text' \(its columns: 'body'\)"):
        corpus_text(tmp_path / "a.parquet")
    pd.DataFrame({"text": ["x", None]}).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(
        DataError, match=r"b.parquet row 2 \(counting from 1\): the column 'text' holds null, not a string"
    ):
        corpus_text(tmp_path / "b.parquet")
    (tmp_path / "c.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="c.parquet is not a readable parquet file"):
        corpus_text(tmp_path / "c.parquet")


def pretrained_tokenizer(path, text, vocab_size=300, bos=True):
    """A tokenizer.json as models ship it: byte-level BPE, and a post-processor that adds a BOS token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>"], initial_alphabet=alphabet)
    tok.train_from_iterator([text], trainer=trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(path))
    return path


def smoke_text() -> str:
    return read_raw(DataConfig())[1][0][1].decode()


def test_a_pretrained_tokenizer_file_encodes_without_bos_and_bits_per_char_stay_comparable(tmp_path, cache_dir):
    path = pretrained_tokenizer(tmp_path / "tokenizer.json", smoke_text())
    hf = load_corpus(DataConfig(tokenizer=str(path), cache_dir=cache_dir))
    char = load_corpus(DataConfig(tokenizer="char", cache_dir=cache_dir))
    assert hf.tokenizer.kind == "hf" and hf.tokenizer.vocab_size == 300
    assert 0 not in hf.train.tolist()  # the file's BOS is not added to the corpus
    # the same characters are measured: bits per char = nats/token * tokens/char / ln 2 compares across tokenizers
    assert hf.val_chars == char.val_chars and len(hf.val) < len(char.val)
    val_text = char.tokenizer.decode(char.val)
    assert hf.tokenizer.decode(hf.val) == val_text  # lossless: every character is accounted for
    again = tokenizer_from_json(json.loads(json.dumps(hf.tokenizer.to_json())))  # as a checkpoint saves it
    assert again.kind == "hf" and again.encode(val_text).tolist() == hf.val.tolist()
    assert math.isclose(hf.val_tokens_per_char, len(hf.val) / len(val_text))


def test_the_cache_key_holds_the_tokenizer_files_contents_and_the_text_field(tmp_path):
    a = pretrained_tokenizer(tmp_path / "a.json", smoke_text(), vocab_size=300)
    b = tmp_path / "moved" / "tokenizer.json"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes())
    parts = read_raw(DataConfig())[1]
    key = cache_key(DataConfig(tokenizer=str(a)), parts)
    assert cache_key(DataConfig(tokenizer=str(b)), parts) == key  # moved: the same contents, the same entry
    pretrained_tokenizer(b, smoke_text(), vocab_size=320)
    assert cache_key(DataConfig(tokenizer=str(b)), parts) != key  # same path, other contents: a new entry
    jsonl = [("a.jsonl", b'{"text": "x", "body": "y"}\n')]
    assert cache_key(DataConfig(), jsonl) != cache_key(DataConfig(text_field="body"), jsonl)
    txt = [("a.txt", b"plain")]
    assert cache_key(DataConfig(), txt) == cache_key(DataConfig(text_field="body"), txt)


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_main(capsys, monkeypatch, *args)


TINY = "--smoke --steps 4 --eval-every 2 --context 16 --dim 32 --heads 4 --layers 2".split()


def test_train_and_generate_with_jsonl_data_and_a_pretrained_tokenizer(cli, tmp_path):
    write_jsonl(tmp_path / "corpus.jsonl", [{"body": line} for line in smoke_text().splitlines() if line])
    pretrained_tokenizer(tmp_path / "tokenizer.json", smoke_text())
    code, out, err = cli("train", *TINY, "--data", "corpus.jsonl", "--text-field", "body",
                         "--tokenizer", "tokenizer.json", "--out", "ckpt")  # fmt: skip
    assert code == 0, err
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())["data"]
    assert saved["tokenizer"] == str(tmp_path / "tokenizer.json") and saved["text_field"] == "body"
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["model"]["vocab_size"] == 300
    (tmp_path / "tokenizer.json").unlink()  # generate needs only the checkpoint
    code, out, err = cli("generate", "ckpt", "--prompt", "The", "--tokens", "5")
    assert code == 0 and out.startswith("The"), err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tokenizer", "missing/tokenizer.json"], "tokenizer file missing/tokenizer.json does not exist"),
        (
            ["--tokenizer", "wordpiece"],
            "unknown tokenizer 'wordpiece'; choose one of char, byte, bpe, or give the path",
        ),
        (["--tokenizer", "notatokenizer.json"], "notatokenizer.json is not a Hugging Face tokenizer.json"),
        (["--data", "bad.jsonl"], "bad.jsonl line 1 has no field 'text'"),
    ],
)
def test_data_and_tokenizer_mistakes_are_one_sentence(cli, tmp_path, args, message):
    (tmp_path / "notatokenizer.json").write_text('{"hello": 1}')
    write_jsonl(tmp_path / "bad.jsonl", [{"body": "x"}])
    code, out, err = cli("train", *TINY, *args)
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith("modern-gpt: error: ") and message in err and len(err.strip().splitlines()) == 1, err
