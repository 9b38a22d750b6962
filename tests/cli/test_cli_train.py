"""modern-gpt train -> checkpoint -> generate, in process."""

import json

import pytest

from tests.clihelp import invoke, tiny

TINY = tiny(steps=8, eval_every=4, dim=32)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    invoke("train", *TINY, "--out", root / "classic")
    invoke("train", *TINY, "--modern", "--out", root / "modern")
    return root


def test_train_writes_a_checkpoint_folder(checkpoints):
    folder = checkpoints / "modern"
    assert {p.name for p in folder.iterdir()} >= {"model.safetensors", "config.json", "tokenizer.json", "metrics.json"}
    config = json.loads((folder / "config.json").read_text())
    assert config["model"]["rmsnorm"] and config["model"]["qk_norm"] and config["model"]["dim"] == 32
    assert config["train"]["steps"] == 8 and config["data"]["tokenizer"] == "char"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["steps_done"] == 8 and metrics["val_bpc"] > 0 and len(metrics["curve"]) == 2


@pytest.mark.parametrize("variant", ["classic", "modern"])
def test_generate_gives_the_same_text_for_the_same_seed(checkpoints, variant):
    args = ["generate", checkpoints / variant, "--prompt", "The keeper", "--tokens", "40", "--seed"]
    first, again, other = invoke(*args, 1), invoke(*args, 1), invoke(*args, 2)
    assert first == again and first != other
    assert first.startswith("The keeper") and len(first.rstrip("\n")) == len("The keeper") + 40


def test_generate_needs_no_model_flags_and_runs_past_the_context(checkpoints):
    text = invoke("generate", checkpoints / "classic", "--tokens", "50", "--temperature", "0")  # 50 > context 16
    assert len(text.rstrip("\n")) == 50


def test_train_reports_the_run(tmp_path):
    out = invoke("train", *TINY, "--rope", "--out", tmp_path / "r")
    assert "val bits/char" in out and "checkpoint:" in out


# ---------------------------------------------------------------------------
# Sampling at its extremes: one sentence, or a well-defined limit
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.clihelp import invoke

    folder = tmp_path_factory.mktemp("sampling") / "ckpt"
    invoke("train", *tiny(4), "--out", folder)
    return folder


def _generate(run, checkpoint, *args) -> str:
    code, out, err = run("generate", checkpoint, "--prompt", "The ", "--tokens", "12", *args)
    assert code == 0 and "Traceback" not in err, err
    return out


@pytest.mark.parametrize("temperature", ["1e-300", "5e-324", "1e-40", "1e-8"])
def test_a_temperature_near_zero_tends_to_greedy(run, checkpoint, temperature):
    greedy = _generate(run, checkpoint, "--temperature", "0")
    assert _generate(run, checkpoint, "--temperature", temperature, "--top-k", "3") == greedy


@pytest.mark.parametrize("args", [["--temperature", "1e308"], ["--top-k", str(2**70)], ["--tokens", "0"]])
def test_huge_sampling_values_are_well_defined(run, checkpoint, args):
    first = _generate(run, checkpoint, *args, "--seed", "5")
    assert first.startswith("The ") and first == _generate(run, checkpoint, *args, "--seed", "5")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tokens", "-1"], "--tokens must be between 0 and 100,000, got -1."),
        (["--tokens", str(10**20)], "--tokens must be between 0 and 100,000"),
        (["--tokens", "nan"], "Invalid value for '--tokens'"),
        (["--temperature", "-1e-9"], "--temperature must be a finite number of 0 or more"),
        (["--temperature", "nan"], "--temperature must be a finite number of 0 or more"),
        (["--temperature", "-inf"], "--temperature must be a finite number of 0 or more"),
        (["--top-k", "0"], "--top-k must be at least 1, got 0."),
        (["--top-k", "-5"], "--top-k must be at least 1, got -5."),
        (["--top-k", "inf"], "Invalid value for '--top-k'"),
    ],
)
def test_impossible_sampling_values_are_one_sentence(run, checkpoint, args, said):
    code, out, err = run("generate", checkpoint, *args)
    assert code == 2 and said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_finite_weights_whose_logits_overflow_are_one_sentence(run, checkpoint, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    weights = load_file(broken / "model.safetensors")
    weights["norm_f.weight"].zero_()
    weights["norm_f.bias"].fill_(1.0)  # every feature 1 ...
    weights["lm_head.weight"].fill_(3e38)  # ... times the largest float32 times dim: +inf, from finite weights
    assert all(torch.isfinite(w).all() for w in weights.values())
    save_file(weights, broken / "model.safetensors")
    for temperature in ("0", "0.8"):
        code, _, err = run("generate", broken, "--temperature", temperature)
        assert code == 2 and "logits are not finite (NaN or infinite) at generated token 1" in err, err
