"""Real corpora and tokenizers in: .jsonl and .parquet files, folders that mix them with .txt, pretrained tokenizer.json."""

import json
import math

import pandas as pd
import pytest

from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import DataError, cache_key, join_text, load_corpus, read_raw, tokenizer_from_json
from tests.clihelp import tiny

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


TINY = tiny(steps=4, eval_every=2, dim=32, heads=4, layers=2)


def test_train_and_generate_with_jsonl_data_and_a_pretrained_tokenizer(run, tmp_path):
    write_jsonl(tmp_path / "corpus.jsonl", [{"body": line} for line in smoke_text().splitlines() if line])
    pretrained_tokenizer(tmp_path / "tokenizer.json", smoke_text())
    code, out, err = run(
        "train",
        *TINY,
        "--data",
        "corpus.jsonl",
        "--text-field",
        "body",
        "--tokenizer",
        "tokenizer.json",
        "--out",
        "ckpt",
    )
    assert code == 0, err
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())["data"]
    assert saved["tokenizer"] == str(tmp_path / "tokenizer.json") and saved["text_field"] == "body"
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["model"]["vocab_size"] == 300
    (tmp_path / "tokenizer.json").unlink()  # generate needs only the checkpoint
    code, out, err = run("generate", "ckpt", "--prompt", "The", "--tokens", "5")
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
def test_data_and_tokenizer_mistakes_are_one_sentence(run, tmp_path, args, message):
    (tmp_path / "notatokenizer.json").write_text('{"hello": 1}')
    write_jsonl(tmp_path / "bad.jsonl", [{"body": "x"}])
    code, out, err = run("train", *TINY, *args)
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith("modern-gpt: error: ") and message in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------------------
# Defects found in review: gapped vocabularies, jsonl escapes, and decoding a SentencePiece-style tokenizer.
# ---------------------------------------------------------------------------
GAP_TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(60))


def gapped_tokenizer(path, newline_id):
    """One token per character, ids 0.. with a gap: the line end's id is newline_id."""
    from tokenizers import Tokenizer, decoders, models

    chars = sorted(set(GAP_TEXT) - {"\n"})
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars + ["\n"])}, merges=[]))
    tok.decoder = decoders.Fuse()
    doc = json.loads(tok.to_str())
    doc["model"]["vocab"]["\n"] = newline_id  # written by hand: the library takes seconds to save a huge id
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "newline_id,dtype", [(100_000, "uint32"), (65_541, "uint32"), (40, "uint8")]
)  # the smallest dtype that holds the vocabulary
def test_a_gapped_vocabulary_spans_its_largest_id_and_no_id_wraps(tmp_path, cache_dir, newline_id, dtype):
    (tmp_path / "c.txt").write_text(GAP_TEXT, encoding="utf-8")
    tok = gapped_tokenizer(tmp_path / "tok.json", newline_id)
    corpus = load_corpus(DataConfig(path=str(tmp_path / "c.txt"), tokenizer=str(tok), cache_dir=cache_dir))
    assert corpus.tokenizer.vocab_size == max(newline_id, 26) + 1 and corpus.train.dtype == dtype
    assert newline_id in corpus.train.tolist()  # stored as it is: 65541 does not wrap round to 5
    assert corpus.tokenizer.decode(corpus.train) + corpus.tokenizer.decode(corpus.val) == GAP_TEXT


def test_a_tokenizer_id_too_large_for_an_embedding_is_refused_by_name(run, tmp_path):
    (tmp_path / "c.txt").write_text(GAP_TEXT, encoding="utf-8")
    gapped_tokenizer(tmp_path / "tok.json", 1 << 30)
    code, out, err = run("train", *TINY, "--data", "c.txt", "--tokenizer", "tok.json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "gives the token '\\n' the id 1,073,741,824, above the largest id" in err


def test_train_and_generate_with_a_gapped_vocabulary(run, tmp_path):
    (tmp_path / "c.txt").write_text(GAP_TEXT, encoding="utf-8")
    gapped_tokenizer(tmp_path / "tok.json", 65_541)
    code, out, err = run(
        "train", *TINY, "--dim", "8", "--heads", "2", "--data", "c.txt", "--tokenizer", "tok.json", "--out", "ckpt"
    )
    assert code == 0, err
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["model"]["vocab_size"] == 65_542
    code, out, err = run("generate", "ckpt", "--prompt", "the\n", "--tokens", "3")
    assert code == 0 and out.startswith("the\n"), err


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"text": "a\\ud800b"}', "the field 'text' holds a lone surrogate '\\ud800' at character 1"),
        ('{"text": "a\\u0000b"}', "the field 'text' holds a NUL character at character 1"),
        ("[" * 100_000 + "]" * 100_000, "nests JSON too deeply to read"),
        ('{"text": "x", "n": ' + "9" * 5001 + "}", "holds a JSON value that cannot be read"),
    ],
    ids=["surrogate", "nul", "deep", "long-int"],
)
def test_jsonl_escapes_and_limits_are_errors_naming_the_file_and_line(tmp_path, line, message):
    from modern_gpt.data.corpus import validation_text

    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n", encoding="utf-8")
    for read in (corpus_text, lambda p: validation_text(DataConfig(path=str(p)))):  # train's and extrapolate's
        with pytest.raises(DataError, match=f"^{path} line 2(:| )") as err:
            read(path)
        assert message in str(err.value)


def test_a_nul_in_a_parquet_string_is_an_error_naming_the_row(tmp_path):
    pd.DataFrame({"text": ["fine", "a\x00b"]}).to_parquet(tmp_path / "a.parquet")
    with pytest.raises(DataError, match=r"a.parquet row 2 \(counting from 1\): the column 'text' holds a NUL"):
        corpus_text(tmp_path / "a.parquet")


def test_a_lone_surrogate_in_jsonl_is_one_sentence_from_train(run, tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"text": "\\udfff"}\n', encoding="utf-8")
    code, out, err = run("train", *TINY, "--data", "bad.jsonl")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "bad.jsonl line 2: the field 'text'" in err, err


def sentencepiece_style_tokenizer():
    """A tokenizer.json as Llama's: a '▁' prepended and for every space, byte fallback, a decoder that strips one leading space."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    text = "ROMEO: there Romeo, wherefore art thou Romeo?\nJULIET: there, there.\n" * 3
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=90, show_progress=False))
    return tok


def test_generation_keeps_the_space_a_sentencepiece_style_decoder_strips_only_at_the_start():
    import torch

    from modern_gpt.data.corpus import PretrainedTokenizer
    from modern_gpt.run.checkpoint import generate_text

    tok = PretrainedTokenizer(sentencepiece_style_tokenizer())
    new = [tok.tok.token_to_id(t) for t in ("▁there", "▁Romeo")]
    assert None not in new and tok.decode(new) == "there Romeo"  # decoded alone, the first space is lost

    class Scripted(torch.nn.Module):  # generates the ids above, whatever the prompt
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def generate(self, idx, tokens, **kw):
            return torch.cat([idx, torch.tensor([new[:tokens]])], dim=1)

    assert generate_text(Scripted(), tok, "ROMEO:", 2, 0.0, None, 0) == "ROMEO: there Romeo"
    assert generate_text(Scripted(), tok, "", 2, 0.0, None, 0) == " there Romeo"  # no prompt: after a line start
