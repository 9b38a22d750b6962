"""Data files and tokenizer files as users have them: file types by suffix in any case, what a folder skips
(hidden files and folders included), a --data path that is a link loop, pretrained tokenizers that truncate,
pad, cannot encode, lose characters, have no vocabulary or make the corpus one token, a parquet error's exit
code, and every path the CLI reads checked before it is opened (a pipe must never block a command)."""

import json
import os
import random

import pandas as pd
import pytest

from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import (
    DataError,
    check_length,
    corpus_files,
    folder_files,
    join_text,
    load_corpus,
    lost_chars,
    read_raw,
    train_tokenizer,
)
from tests.clihelp import cli_process, concurrently, flat, tiny

TINY = tiny(steps=2, eval_every=2)
DOCS = ["First document.\nIt has two lines.", "Second: héllo wörld", "Third.\n"]
JOINED = "First document.\nIt has two lines.\nSecond: héllo wörld\nThird.\n"


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def corpus_text(path, **kw) -> str:
    cfg = DataConfig(path=str(path), **kw)
    return join_text(read_raw(cfg)[1], cfg.text_field)


def assert_one_sentence(result, *parts):
    code, out, err = result
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (code, out, err)
    for part in parts:
        assert part in err, err


# ---------------------------------------------------------------------------
# File types: the suffix in any case; .json and .ndjson are JSON lines
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["data.JSONL", "data.json", "data.ndjson", "data.Json", "data.NDJSON"])
def test_json_lines_suffixes_in_any_case_read_the_text_field(tmp_path, name):
    (tmp_path / name).write_text(jsonl({"text": d, "n": i} for i, d in enumerate(DOCS)), encoding="utf-8")
    assert corpus_text(tmp_path / name) == JOINED  # never the raw JSON syntax


def test_parquet_and_txt_suffixes_in_any_case(tmp_path):
    pd.DataFrame({"text": DOCS}).to_parquet(tmp_path / "data.PARQUET")
    assert corpus_text(tmp_path / "data.PARQUET") == JOINED  # not "looks binary"
    (tmp_path / "plain.TXT").write_text('{"text": "stays as it is"}', encoding="utf-8")
    assert corpus_text(tmp_path / "plain.TXT") == '{"text": "stays as it is"}'


def test_a_folder_reads_every_suffix_in_any_case_and_names_what_it_skips(tmp_path, capsys):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.JSONL").write_text(jsonl([{"text": "from a.JSONL"}]), encoding="utf-8")
    pd.DataFrame({"text": ["from b.PARQUET"]}).to_parquet(folder / "b.PARQUET")
    (folder / "c.ndjson").write_text(jsonl([{"text": "from c.ndjson"}]), encoding="utf-8")
    (folder / "sub" / "d.Txt").write_text("from d.Txt\n", encoding="utf-8")
    (folder / "notes.md").write_text("not read", encoding="utf-8")
    os.mkfifo(folder / "pipe.txt")  # never opened: it would block
    assert corpus_text(folder) == "from a.JSONL\nfrom b.PARQUET\nfrom c.ndjson\nfrom d.Txt\n"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "skipped 2 files: " in err, err
    assert (
        "notes.md (not .txt, .jsonl (.ndjson, .json), .parquet, .csv, .tsv, .arrow (maybe compressed) or token (.bin, .npy))"
        in err
        and "pipe.txt (a pipe (FIFO))" in err
    )


def test_a_folder_reads_json_lines_and_skips_a_json_document_by_name(tmp_path, capsys):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"features": {"text": "string"}}, indent=2))
    (tmp_path / "one.json").write_text('{"text": "one record, no line end"}', encoding="utf-8")
    (tmp_path / "train.json").write_text(jsonl([{"text": "from train.json"}]), encoding="utf-8")
    assert corpus_text(tmp_path) == "one record, no line end\nfrom train.json\n"
    assert "skipped 1 file: dataset_info.json (one JSON document, not JSON lines)" in capsys.readouterr().err


def test_a_linked_folder_and_an_odd_name_are_named_on_one_line(tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.txt").write_text("not read", encoding="utf-8")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "b.txt").write_text("read", encoding="utf-8")
    (tmp_path / "corpus" / "linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "corpus" / "odd\nname.md").write_text("x", encoding="utf-8")
    assert corpus_text(tmp_path / "corpus") == "read"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "linked (a symbolic link to a folder, not followed)" in err
    assert "'odd\\nname.md' (not " in err, err


def test_a_folder_of_nothing_readable_names_what_it_holds(tmp_path):
    (tmp_path / "notes.md").write_text("x", encoding="utf-8")
    with pytest.raises(DataError, match=r"holds no .* files \(it holds 1 file: notes.md \(not "):
        corpus_text(tmp_path)


def test_a_folder_reading_everything_says_nothing(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("only text", encoding="utf-8")
    assert corpus_text(tmp_path) == "only text"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "name,doc",
    [("data.json", [{"text": "a"}, {"text": "b"}]), ("data.jsonl", {"text": "a", "more": [1, 2]})],
    ids=["array", "pretty-object"],
)
def test_one_json_document_is_refused_with_a_conversion_that_keeps_the_file(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    with pytest.raises(DataError) as e:
        corpus_text(path)
    message = str(e.value)
    assert "line 1 is not JSON" in message and "looks like one JSON document" in message
    assert f"jq -c '.[]' {path} > {tmp_path / 'data-lines.jsonl'}" in message  # never > the file itself


def test_a_bad_line_after_good_ones_is_a_bad_line(tmp_path):
    path = tmp_path / "data.json"
    path.write_text('{"text": "a"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2 is not JSON .*; each line of a JSON lines file is one JSON object"):
        corpus_text(path)


def test_utf16_advice_keeps_the_files_format(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(jsonl([{"text": "hello"}]).encode("utf-16"))
    with pytest.raises(DataError) as e:
        corpus_text(path)
    fixed = tmp_path / "data-utf8.jsonl"
    assert f"iconv -f UTF-16LE -t UTF-8 {path} > {fixed} && mv {fixed} {path}" in str(e.value)
    assert "corpus.txt" not in str(e.value)


def test_a_parquet_file_without_its_suffix_is_named(tmp_path):
    pd.DataFrame({"text": DOCS}).to_parquet(tmp_path / "data")
    with pytest.raises(DataError, match="data is a parquet file; give it the .parquet suffix"):
        corpus_text(tmp_path / "data")


# ---------------------------------------------------------------------------
# A parquet error always exits 2
# ---------------------------------------------------------------------------
def damaged_parquet(path):
    """Many snappy-compressed row groups, bytes flipped in the data pages (the footer intact): the read fails
    part-way through, which made pandas.read_parquet leave Arrow I/O threads behind."""
    rng = random.Random(1)
    table = pd.DataFrame({"text": [f"row {i} " + "x" * rng.randint(1, 500) for i in range(20_000)]})
    table.to_parquet(path, row_group_size=1000, compression="snappy")
    raw = bytearray(path.read_bytes())
    for _ in range(50):
        raw[rng.randint(100, len(raw) // 2)] ^= 0xFF
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.slow
def test_a_damaged_parquet_file_always_exits_2(tmp_path):
    # Before the fix, 18 of 25 such runs aborted (2 of 6 in another try) with exit 134 ("terminate called without an active exception").
    path = damaged_parquet(tmp_path / "damaged.parquet")
    # two at a time: each is a fresh process (the abort came as it exited), whose start-up is most of its time
    for result in concurrently(lambda _: cli_process("train", *TINY, "--data", path), range(8)):
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"modern-gpt: error: {path}: cannot read the column 'text' (Corrupt snappy compressed data.)."
        ]


# ---------------------------------------------------------------------------
# Pretrained tokenizers: truncation and padding off, one that cannot encode, one that loses characters
# ---------------------------------------------------------------------------
def smoke_text() -> str:
    return read_raw(DataConfig())[1][0][1].decode()


def byte_level(path=None, text=None, normalizer=None, special=()):
    """A byte-level BPE tokenizer.json, as GPT-2's: it encodes any text and gives it back."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=alphabet, special_tokens=list(special), show_progress=False
    )
    tok.train_from_iterator([text or smoke_text()], trainer=trainer)
    if path is not None:
        tok.save(str(path))
    return tok


def letters_only(path=None):
    """A tokenizer of lower-case letters, line ends and spaces, with no unknown token and no byte fallback: the
    tokenizers library drops every other character without a word."""
    from tokenizers import Tokenizer, decoders, models

    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz \n")}, merges=[]))
    tok.decoder = decoders.Fuse()
    if path is not None:
        tok.save(str(path))
    return tok


def test_truncation_and_padding_in_a_tokenizer_file_are_turned_off(tmp_path, cache_dir):
    plain = byte_level(tmp_path / "plain.json")
    rewriting = byte_level()
    rewriting.enable_truncation(max_length=16)
    rewriting.enable_padding(length=1024, pad_id=0, pad_token="!")
    rewriting.save(str(tmp_path / "rewriting.json"))
    assert json.loads((tmp_path / "rewriting.json").read_text())["truncation"]["max_length"] == 16
    whole = load_corpus(DataConfig(tokenizer=str(tmp_path / "plain.json"), cache_dir=cache_dir))
    corpus = load_corpus(DataConfig(tokenizer=str(tmp_path / "rewriting.json"), cache_dir=cache_dir))
    assert corpus.key != whole.key and corpus.lossless
    assert corpus.train.tolist() == whole.train.tolist() and corpus.val.tolist() == whole.val.tolist()
    assert corpus.tokenizer.decode(corpus.train) + corpus.tokenizer.decode(corpus.val) == smoke_text()
    assert len(corpus.val) == len(plain.encode(smoke_text()[-corpus.val_chars :]).ids)  # not 16, and no padding


def test_a_tokenizer_that_cannot_encode_the_corpus_is_one_sentence(run, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"the": 0, "and": 1}))  # no unknown token: any other word is an error
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "words.json"))
    assert_one_sentence(
        run("train", *TINY, "--tokenizer", "words.json"),
        f"--tokenizer {tmp_path / 'words.json'} cannot encode the smoke corpus (WordLevel error: Missing [UNK] token",
        "give a tokenizer that covers every character",
    )


def test_lost_characters_are_counted_for_every_kind_of_tokenizer():
    from tokenizers import normalizers

    from modern_gpt.data.corpus import PretrainedTokenizer

    assert lost_chars(PretrainedTokenizer(letters_only()), "hello world\n") == 0
    assert lost_chars(PretrainedTokenizer(letters_only()), "Hello, World!\n") == 4  # H , W ! dropped
    lowercased = PretrainedTokenizer(byte_level(normalizer=normalizers.Lowercase()))
    assert lost_chars(lowercased, "ABC abc") == 3  # A, B, C come back as a, b, c
    eot = PretrainedTokenizer(byte_level(special=["<|endoftext|>"]))
    assert lost_chars(eot, "one<|endoftext|>two") == 0  # a special token stands for its own characters
    char = train_tokenizer("char", "abc", 0)
    assert lost_chars(char, "abd!") == 2  # d and ! were never seen: id 0
    for kind in ("byte", "bpe"):
        assert lost_chars(train_tokenizer(kind, smoke_text()[:20_000], 300), smoke_text()[-5000:]) == 0


def test_a_lossy_tokenizer_is_named_by_train_with_its_share(run, tmp_path):
    letters_only(tmp_path / "letters.json")
    code, out, err = run("train", *TINY, "--tokenizer", "letters.json", "--out", "ckpt")
    assert code == 0, err
    val = smoke_text()[int(len(smoke_text()) * 0.9) :]
    lost = sum(c not in "abcdefghijklmnopqrstuvwxyz \n" for c in val)
    assert 0 < lost < len(val)
    note = (
        f"Lossy tokenizer: --tokenizer {tmp_path / 'letters.json'} does not give back the validation text (decode(encode(text)) "
        f"differs in {lost:,} of its {len(val):,} characters, {100 * lost / len(val):.1f}%)"
    )
    assert flat(note) in flat(out), out
    assert json.loads((tmp_path / "ckpt" / "metrics.json").read_text())["lossless"] is False
    byte_level(tmp_path / "bytes.json")  # the negative control: lossless, no note
    code, out, err = run("train", *TINY, "--tokenizer", "bytes.json", "--out", "ckpt2")
    assert code == 0 and "Lossy" not in out, (out, err)
    assert json.loads((tmp_path / "ckpt2" / "metrics.json").read_text())["lossless"] is True


ABLATE = ["ablate", *TINY, "--seeds", "2", "--plan", "custom", "--variants", "classic", "--jobs", "1"]


def test_runs_csv_has_a_lossless_column_and_report_a_footnote_for_a_lossy_tokenizer(run, tmp_path):
    letters_only(tmp_path / "letters.json")
    for tokenizer, folder in (("letters.json", "lossy"), ("char", "lossless")):
        code, out, err = run(*ABLATE, "--tokenizer", tokenizer, "--out", folder)
        assert code == 0, err
        runs = pd.read_csv(tmp_path / folder / "runs.csv")
        assert runs["lossless"].tolist() == [folder == "lossless"] * len(runs) and len(runs) == 4
        code, out, err = run("report", folder)
        assert code == 0, err
        lossy = flat(f"Lossy tokenizer: --tokenizer {tmp_path / 'letters.json'} does not give back") in flat(out)
        assert lossy == (folder == "lossy"), out


def test_an_old_cache_entry_gets_its_lost_count_on_load(tmp_path, cache_dir):
    letters_only(tmp_path / "letters.json")
    cfg = DataConfig(tokenizer=str(tmp_path / "letters.json"), cache_dir=cache_dir)
    first = load_corpus(cfg)
    meta_path = tmp_path / "cache" / first.key / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["val_lost_chars"]  # as an earlier version wrote it
    meta_path.write_text(json.dumps(meta))
    again = load_corpus(cfg)
    assert again.val_lost == first.val_lost > 0 and not again.lossless
    assert json.loads(meta_path.read_text())["val_lost_chars"] == first.val_lost


def test_resume_names_the_tokenizer_file_or_the_data_that_changed(run, tmp_path):
    (tmp_path / "corpus.txt").write_text(smoke_text()[:60_000], encoding="utf-8")
    byte_level(tmp_path / "tok.json")
    original = (tmp_path / "tok.json").read_bytes()
    code, out, err = run(*ABLATE, "--data", "corpus.txt", "--tokenizer", "tok.json", "--out", "res")
    assert code == 0, err
    byte_level(tmp_path / "tok.json", text=smoke_text()[:30_000])  # edited: another vocabulary
    code, out, err = run("ablate", "--resume", "res")
    assert_one_sentence(
        (code, out, err), f"res: the tokenizer file {tmp_path / 'tok.json'} changed since the ablation started"
    )
    assert "the data" not in err
    (tmp_path / "tok.json").write_bytes(original)
    (tmp_path / "corpus.txt").write_text(smoke_text()[:50_000], encoding="utf-8")
    code, out, err = run("ablate", "--resume", "res")
    assert_one_sentence(
        (code, out, err), f"res: the data ({tmp_path / 'corpus.txt'}) changed since the ablation started"
    )
    assert "tokenizer" not in err
    meta = json.loads((tmp_path / "res" / "meta.json").read_text())
    del meta["corpus"]  # a folder from before the hashes were kept
    (tmp_path / "res" / "meta.json").write_text(json.dumps(meta))
    code, out, err = run("ablate", "--resume", "res")
    assert_one_sentence(
        (code, out, err),
        f"res: the data ({tmp_path / 'corpus.txt'}) or the tokenizer file {tmp_path / 'tok.json'} changed",
    )


def test_a_huge_vocabulary_is_named_not_the_width(monkeypatch):
    from modern_gpt.core.config import ModelConfig, TrainConfig
    from modern_gpt.core.errors import UserError
    from modern_gpt.run import train

    monkeypatch.setattr(train, "memory_bytes", lambda device: 1 << 30)  # a machine of 1 GiB
    small = dict(dim=64, heads=2, layers=2, context=16)
    with pytest.raises(UserError) as e:
        train.check_memory(ModelConfig(**small, vocab_size=4_000_000), TrainConfig(batch_size=1), "cpu")
    assert "embed the tokenizer's 4,000,000-token vocabulary; use a tokenizer with a smaller vocabulary" in str(e.value)
    with pytest.raises(UserError) as e:
        train.check_memory(ModelConfig(**small, vocab_size=200_000), TrainConfig(batch_size=512), "cpu")
    assert "the logits over the tokenizer's 200,000-token vocabulary take most of it" in str(e.value)
    wide = dict(dim=8192, heads=64, layers=4, context=16)  # the negative control: the width is what does not fit
    with pytest.raises(UserError, match=r"use a smaller --dim, --layers or --context\.$"):
        train.check_memory(ModelConfig(**wide, vocab_size=256), TrainConfig(batch_size=1), "cpu")


# ---------------------------------------------------------------------------
# Every path the CLI reads is checked before it is opened: a pipe (FIFO) would block the read for ever
# ---------------------------------------------------------------------------
def fifo_in_place_of(path):
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


@pytest.mark.timeout(120)  # a regression would wait on a pipe: fail it instead of hanging the suite
def test_a_pipe_in_place_of_any_file_the_cli_reads_is_named_never_opened(run, tmp_path):
    import shutil

    from modern_gpt.run.checkpoint import FILES

    assert run("train", *TINY, "--out", "ckpt")[0] == 0
    for name in FILES:
        folder = f"ckpt-{name.split('.')[0]}"
        shutil.copytree(tmp_path / "ckpt", tmp_path / folder)
        fifo_in_place_of(tmp_path / folder / name)
        for command in (["generate", folder, "--tokens", "2"], ["export", folder, "--hf", "hf"]):
            assert_one_sentence(run(*command), f"{folder}/{name} is a pipe (FIFO), not a file")
    fifo_in_place_of(tmp_path / "config.json")
    assert_one_sentence(run("explain", "config.json"), "config.json is a pipe (FIFO), not a file")
    fifo_in_place_of(tmp_path / "c.toml")
    assert_one_sentence(run("train", *TINY[1:], "--config", "c.toml"), "config c.toml is not a regular file")
    fifo_in_place_of(tmp_path / "tok.json")
    assert_one_sentence(run("train", *TINY, "--tokenizer", "tok.json"), "is not a regular file but a pipe (FIFO)")
    fifo_in_place_of(tmp_path / "corpus.txt")
    assert_one_sentence(run("train", *TINY, "--data", "corpus.txt"), "is not a regular file but a pipe (FIFO)")

    assert run(*ABLATE, "--out", "res")[0] == 0
    for i, (name, command) in enumerate([("meta.json", "report {}"), ("meta.json", "ablate --resume {}")]):
        shutil.copytree(tmp_path / "res", tmp_path / f"res{i}")
        fifo_in_place_of(tmp_path / f"res{i}" / name)
        assert_one_sentence(run(*command.format(f"res{i}").split()), f"res{i}/{name} is a pipe (FIFO), not a file")
    # runs.csv and curves.csv are written for the reader and never read (runs/ is the truth): report draws and
    # prints the same table as ever, and never opens them
    truth = run("report", "res", "--format", "json")
    for name in ("runs.csv", "curves.csv"):
        fifo_in_place_of(tmp_path / "res" / name)
    assert run("report", "res", "--format", "json", "--plot") == (0, truth[1], "wrote res/curves.png\n")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["meta.json", "tokens.npy", "tokenizer.json"])
def test_a_pipe_in_the_token_cache_is_rebuilt_never_opened(tmp_path, cache_dir, name):
    cfg = DataConfig(cache_dir=cache_dir)
    first = load_corpus(cfg)
    fifo_in_place_of(tmp_path / "cache" / first.key / name)
    again = load_corpus(cfg)
    assert again.train.tolist() == first.train.tolist() and (tmp_path / "cache" / first.key / name).is_file()


def test_a_tokenizer_that_drops_nearly_everything_is_named_not_the_corpus_length(run, tmp_path):
    from tokenizers import Tokenizer, decoders, models

    tok = Tokenizer(models.BPE(vocab={"q": 0}, merges=[]))  # one token: every other character is dropped
    tok.decoder = decoders.Fuse()
    tok.save(str(tmp_path / "q.json"))
    assert_one_sentence(
        run("train", *TINY, "--context", "64", "--tokenizer", "q.json"),  # 29 tokens are left
        "the tokenizer gives the corpus's validation split only 29 tokens, too few for context 64: it drops",
        "(it has no token for them); give a tokenizer that covers the corpus",
    )


def test_extrapolate_names_characters_the_checkpoints_tokenizer_never_saw(run, tmp_path):
    assert run("train", *TINY, "--out", "ckpt")[0] == 0
    code, out, err = run("extrapolate", "ckpt", "--contexts", "16")
    assert code == 0 and "Lossy" not in out + err, (out, err)  # its own data: every character seen
    (tmp_path / "other.txt").write_text(smoke_text()[:20_000] + "жжж\n" * 1000, encoding="utf-8")
    code, out, err = run("extrapolate", "ckpt", "--contexts", "16", "--data", "other.txt")
    assert code == 0, err
    assert "Lossy tokenizer: --tokenizer char does not give back the validation text" in " ".join(out.split())
    assert "differs in 1,800 of its 2,400 characters, 75.0%" in " ".join(out.split())  # the last 600 lines of жжж


# ---------------------------------------------------------------------------
# Link loops, hidden files, tokenizers with no vocabulary or one token for everything
# ---------------------------------------------------------------------------
def _tokenizer_file(path, vocab, unk="[UNK]"):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def test_a_data_path_that_is_a_link_loop_is_named_as_one(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(DataError, match="is unreadable .*symbolic links"):
        corpus_files(str(tmp_path / "a"))
    (tmp_path / "gone").symlink_to(tmp_path / "nothing")
    with pytest.raises(DataError, match="gone is a dangling symbolic link"):
        corpus_files(str(tmp_path / "gone"))
    with pytest.raises(DataError, match="nothing does not exist"):  # a plain missing path keeps its sentence
        corpus_files(str(tmp_path / "nothing"))


def test_hidden_files_and_folders_in_a_data_folder_are_skipped_and_named_once(tmp_path):
    (tmp_path / ".ipynb_checkpoints" / "deep").mkdir(parents=True)
    (tmp_path / ".ipynb_checkpoints" / "a-checkpoint.txt").write_text("a stale copy")
    (tmp_path / ".ipynb_checkpoints" / "deep" / "b.txt").write_text("another")
    (tmp_path / ".a.txt.swp").write_text("an editor's file")
    (tmp_path / ".notes.txt").write_text("hidden text")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("the corpus")
    files, skipped = folder_files(tmp_path)
    assert files == [tmp_path / "sub" / "a.txt"]  # the stale copies would leak text into both splits
    assert sorted(skipped) == [
        ".a.txt.swp (hidden, not read)",
        ".ipynb_checkpoints (hidden, a folder, not read)",
        ".notes.txt (hidden, not read)",
    ]


def test_a_data_folder_inside_a_hidden_folder_is_read(tmp_path):
    folder = tmp_path / ".cache" / "corpus"  # only what lies under the folder given counts as hidden
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("the corpus")
    assert folder_files(folder) == ([folder / "a.txt"], [])


def test_a_tokenizer_file_with_an_empty_vocabulary_is_named(tmp_path):
    from tokenizers import Tokenizer, models

    Tokenizer(models.BPE()).save(str(tmp_path / "tokenizer.json"))
    cfg = DataConfig(tokenizer=str(tmp_path / "tokenizer.json"), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError, match="empty vocabulary"):  # it said 'vocab_size must be at least 1, got 0'
        load_corpus(cfg)


def test_a_tokenizer_that_makes_the_corpus_one_token_is_refused(tmp_path):
    # Every word unknown: the corpus is [UNK] repeated, the loss falls to 0 and bits/char printed 0.0, exit 0.
    path = _tokenizer_file(tmp_path / "tokenizer.json", {"[UNK]": 0, "zzzz": 1})
    corpus = load_corpus(DataConfig(tokenizer=str(path), cache_dir=str(tmp_path / "cache")))
    with pytest.raises(DataError, match="whole training split into one token .id 0., so there is nothing to predict"):
        check_length(corpus, 16)


def test_a_lossy_tokenizer_with_several_ids_still_trains(tmp_path):
    # The negative control: most words unknown, but not all: lossy (noted), not refused.
    text = read_raw(DataConfig())[1][0][1].decode()  # the smoke corpus
    words = sorted(set(text.split()))[:50]
    path = _tokenizer_file(tmp_path / "tokenizer.json", {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}})
    corpus = load_corpus(DataConfig(tokenizer=str(path), cache_dir=str(tmp_path / "cache")))
    check_length(corpus, 16)
    assert not corpus.lossless
