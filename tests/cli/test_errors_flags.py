"""Bad flags, settings and config files: one sentence and exit 2, before anything is written; --debug adds
the traceback."""

import pytest

from modern_gpt.core.components import COMPONENTS
from tests.clihelp import cli_process, concurrently
from tests.errhelp import TINY, assert_user_error


@pytest.mark.parametrize(
    "args,fragments",
    [
        (
            ["--components", "rmsnorm,flash"],
            ["unknown component 'flash'", ", ".join(COMPONENTS)],
        ),
        (["--plan", "greedy"], ["unknown plan 'greedy'", "cumulative, single, leave-one-out, custom"]),
        (
            ["--plan", "custom", "--variants", "classic;fancy"],
            ["'fancy' is not a variant: unknown component 'fancy'", "classic, modern"],
        ),
        (["--seeds", "0"], ["--seeds must be between 1 and 10,000"]),
        (["--seeds", "-2"], ["--seeds must be between 1 and 10,000"]),
        (["--steps", "0"], ["steps must be at least 1, got 0"]),
        (["--batch-size", "-4"], ["batch_size must be at least 1, got -4"]),
        (["--lr", "0"], ["lr must be a positive number, got 0.0"]),
        (["--lr", "-0.001"], ["lr must be a positive number"]),
        (["--dim", "30", "--heads", "4"], ["dim 30 is not divisible by 4 heads"]),
        (["--jobs", "0"], ["--jobs must be at least 1"]),
        (["--format", "xml"], ["unknown format 'xml'; choose one of table, markdown, csv, json"]),
    ],
)
def test_bad_ablation_settings(run, args, fragments):
    assert_user_error(run("ablate", "--smoke", *args), *fragments)


def test_invalid_model_shapes(run):
    assert_user_error(
        run("params", "--heads", "8", "--dim", "64", "--gqa", "--kv-heads", "3"),
        "8 heads with 3 KV heads: 8 is not divisible by 3",
    )
    assert_user_error(run("params", "--dim", "12", "--heads", "4", "--rope"), "rope needs an even head dimension")


def test_unknown_or_mistyped_config_keys(run, tmp_path):
    bad_key = tmp_path / "typo.toml"
    bad_key.write_text("[model]\ndimm = 64\n")
    assert_user_error(
        run("train", "--config", bad_key), "typo.toml: unknown key 'dimm' in [model]; did you mean 'dim'?"
    )
    bad_type = tmp_path / "type.toml"
    bad_type.write_text('[train]\nsteps = "many"\n')
    assert_user_error(run("train", "--config", bad_type), "type.toml: train.steps must be an integer, got 'many'")
    bad_section = tmp_path / "section.toml"
    bad_section.write_text("[optimizer]\nlr = 1\n")
    assert_user_error(run("train", "--config", bad_section), "unknown section [optimizer]")
    broken = tmp_path / "broken.toml"
    broken.write_text("[model\n")
    assert_user_error(run("train", "--config", broken), "broken.toml is not valid TOML")
    assert_user_error(run("train", "--config", "nano"), "config file nano does not exist", "mini, shakespeare, smoke")


@pytest.mark.parametrize(
    "args,fragments",
    [
        (
            ["ablate", "--seeds", "2", "--batch-size", "abc"],
            ["Invalid value for '--batch-size'", "see modern-gpt ablate --help"],
        ),
        (["ablate", "--seedz", "3"], ["No such option: --seedz", "--seeds"]),
        (["generate"], ["Missing argument"]),
        (["fly"], ["No such command 'fly'"]),
    ],
)
def test_usage_errors_are_one_line(run, args, fragments):
    assert_user_error(run(*args), *fragments)


def test_generate_values_are_checked(run, tmp_path):
    assert_user_error(run("generate", tmp_path, "--temperature", "nan"), "--temperature must be a finite number")
    assert_user_error(run("generate", tmp_path, "--temperature", "inf"), "--temperature must be a finite number")
    assert_user_error(run("generate", tmp_path, "--seed", str(2**64)), "--seed must be between 0 and")
    assert_user_error(run("generate", tmp_path, "--seed", "-1"), "--seed must be between 0 and")


def test_empty_plans_and_ignored_flags_are_refused_before_anything_is_written(run, tmp_path):
    assert_user_error(run("ablate", *TINY, "--plan", "custom", "--variants", ";;"), "names no rows")
    assert_user_error(
        run("ablate", *TINY, "--plan", "custom", "--variants", "classic;rope", "--components", "rope"),
        "--components does not go with --plan custom",
    )
    assert_user_error(run("ablate", *TINY, "--out", ""), "--out is empty")
    assert_user_error(run("train", *TINY, "--out", ""), "--out is empty")
    assert_user_error(run("ablate", "--smoke", "--batch-size", "1000000000"), "--batch-size 1000000000", "GB")
    assert not (tmp_path / "results").exists() and not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_debug_shows_the_traceback():
    plain, debug = concurrently(
        lambda flags: cli_process(*flags, "train", "--data", "/nonexistent/corpus.txt"), [[], ["--debug"]]
    )  # the two at once: each is mostly its start-up
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert (
        plain.stderr
        == "modern-gpt: error: data path /nonexistent/corpus.txt does not exist; give a .txt, .jsonl (.ndjson, .json), .parquet, .csv, .tsv, .arrow (maybe compressed) or token (.bin, .npy) file, or a folder of them.\n"
    )
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "DataError" in debug.stderr


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


def test_eval_tokens_below_one_window_is_refused_not_rounded_up(run, tmp_path):
    """Issue 31: --eval-tokens 10 with --context 32 was one window of 32 tokens without a word."""
    said = "--eval-tokens 10 is below one window of --context 32 tokens"
    for command in ("ablate", "train", "scale"):
        assert_user_error(run(command, "--smoke", "--eval-tokens", "10", "--out", tmp_path / command), said)
        assert not (tmp_path / command).exists()
    config = tmp_path / "few.toml"
    config.write_text("[model]\ncontext = 64\n[train]\neval_tokens = 32\n")
    assert_user_error(run("train", "--config", config), "eval_tokens (in the config file) 32 is below one window")
