"""modern-gpt train -> checkpoint -> generate, in process."""

import json

import pytest

from .clihelp import invoke, tiny

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
