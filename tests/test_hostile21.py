"""Issue 21's closing hostile pass: the defects it found that the earlier commits left, each with its test.

Data: a --data path that is a symbolic link loop, hidden files and folders inside a --data folder, a tokenizer
file with an empty vocabulary, and one that turns the whole corpus into a single token id (bits/char 0.0)."""

import os

import pytest

from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import DataError, check_length, corpus_files, folder_files, load_corpus


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
    text = open(os.path.join(os.path.dirname(__file__), "..", "modern_gpt", "smoke.txt")).read()
    words = sorted(set(text.split()))[:50]
    path = _tokenizer_file(tmp_path / "tokenizer.json", {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}})
    corpus = load_corpus(DataConfig(tokenizer=str(path), cache_dir=str(tmp_path / "cache")))
    check_length(corpus, 16)
    assert not corpus.lossless


# ---------------------------------------------------------------------------
# explain: "num_key_value_heads": null is the head count where the class says so, refused where it is not
# ---------------------------------------------------------------------------
NULL_KV_BASE = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96, vocab_size=100)


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama", "olmo2", "arcee"])
def test_explain_reads_null_kv_heads_as_transformers_does(kind):
    # Qwen2/Qwen3 default to 32 K/V heads when the field is left out, but null means one per query head:
    # counted with 32 it printed 199,616 parameters for a model of 83,136, exit 0.
    from modern_gpt.hf.explain import explain_config

    from .test_explain import mismatches

    config = dict(model_type=kind, num_key_value_heads=None, **NULL_KV_BASE)
    info = explain_config(config)
    assert info["shape"]["kv_heads"] == 4
    assert mismatches(config, info) == []


@pytest.mark.parametrize("kind", ["mistral", "gemma", "gemma2", "starcoder2", "stablelm"])
def test_explain_refuses_null_kv_heads_where_the_class_does(kind):
    from modern_gpt.core.errors import UserError
    from modern_gpt.hf.explain import explain_config

    with pytest.raises(UserError, match="num_key_value_heads is null, which .* does not accept"):
        explain_config(dict(model_type=kind, num_key_value_heads=None, **NULL_KV_BASE))


# The coordinator's closing pass: what the hostile pass described in part A/B files, fixed after those landed.


def test_a_link_loop_as_data_or_out_is_one_sentence_not_a_traceback(run, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    code, out, err = run("train", "--smoke", "--steps", "2", "--data", tmp_path / "loop")
    assert code == 2 and err.startswith("modern-gpt: error: ") and err.count("\n") == 1, err
    assert "symbolic links" in err and "Traceback" not in out + err
    code, out, err = run("ablate", "--resume", tmp_path / "elsewhere", "--out", tmp_path / "loop")
    assert code == 2 and err.count("\n") == 1 and "leave out --out" in err, err


def test_vocab_size_without_bpe_is_refused_not_ignored(run):
    for tokenizer in ("char", "byte"):
        code, _, err = run("train", "--smoke", "--steps", "2", "--tokenizer", tokenizer, "--vocab-size", "300")
        assert code == 2 and f"the tokenizer is {tokenizer}; add --tokenizer bpe" in err, err
    code, _, err = run("ablate", "--smoke", "--seeds", "2", "--vocab-size", "300")
    assert code == 2 and "--vocab-size sizes the bpe tokenizer" in err, err


def test_one_diverged_step_is_singular(tmp_path):
    import json

    from modern_gpt.run.checkpoint import _failed_run

    for steps, words in ((1, "after 1 step"), (7, "after 7 steps")):
        (tmp_path / "metrics.json").write_text(json.dumps({"diverged": True, "steps_done": steps}))
        assert _failed_run(tmp_path).endswith(words)
    import pandas as pd

    from modern_gpt.verdict.table import _failure_notes

    runs = pd.DataFrame(
        {
            "row": [0],
            "seed": [0],
            "variant": ["classic"],
            "error": [""],
            "diverged": [True],
            "steps_done": [1],
            "val_loss": [float("nan")],
        }
    )
    assert "after 1 step;" in _failure_notes(runs)[0]
