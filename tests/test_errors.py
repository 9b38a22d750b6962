"""Bad input, faults and interruption: one clear sentence for every mistake, nothing lost."""

import json
import os
import signal
import time

import pandas as pd
import pytest
import torch

import modern_gpt.model as model_module
from modern_gpt.results import ResultsDir

from .clihelp import cli, cli_process, run_main

TINY = "--smoke --steps 3 --eval-every 3 --context 16 --dim 16 --heads 2 --layers 1".split()


@pytest.fixture
def run(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # checkpoints/ and results/ land in the test's folder
    return lambda *args: run_main(capsys, monkeypatch, *args)


def assert_user_error(result, *fragments):
    code, out, err = result
    assert code == 2, (code, out, err)
    assert err.startswith("modern-gpt: error: ") and err.count("\n") == 1, err  # one sentence, one line
    assert "Traceback" not in err + out
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def write(path, data: bytes):
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
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
    assert_user_error(run("train", *TINY, "--data", tmp_path / "corpus"), "holds no .txt, .jsonl or .parquet files")


def test_corpus_too_short_for_the_context(run, tmp_path):
    path = write(tmp_path / "short.txt", b"a short text of a few dozen characters, no more." * 3)
    assert_user_error(
        run("train", *TINY, "--data", path, "--context", "64"),
        "too short for context 64", "has 15 tokens and needs at least 65",
    )  # fmt: skip


# ---------------------------------------------------------------------------
# names, shapes, settings
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,fragments",
    [
        (
            ["--components", "rmsnorm,flash"],
            ["unknown component 'flash'", "rmsnorm, rope, swiglu, no_bias, gqa, qk_norm"],
        ),
        (["--plan", "greedy"], ["unknown plan 'greedy'", "cumulative, single, leave-one-out, custom"]),
        (["--plan", "custom", "--variants", "classic;fancy"], ["unknown variant part 'fancy'", "classic, modern"]),
        (["--seeds", "0"], ["--seeds must be at least 1"]),
        (["--seeds", "-2"], ["--seeds must be at least 1"]),
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


def test_unwritable_results_and_checkpoint_folders(run, tmp_path):
    blocker = write(tmp_path / "a-file", b"x")
    assert_user_error(run("ablate", "--smoke", "--steps", "2", "--out", blocker / "results"), "cannot write results to")
    assert_user_error(run("train", *TINY, "--out", blocker / "ckpt"), "cannot write the checkpoint to")


def test_resume_on_a_folder_that_is_not_results(run, tmp_path):
    assert_user_error(run("ablate", "--resume", tmp_path), "is not a results folder")
    assert_user_error(run("report", tmp_path), "is not a results folder")


def test_generate_on_bad_checkpoints(run, tmp_path):
    assert_user_error(run("generate", tmp_path / "none"), "is not a checkpoint folder (it does not exist)")
    assert_user_error(
        run("generate", tmp_path), "is not a checkpoint folder: model.safetensors, config.json, tokenizer.json missing"
    )
    ckpt = tmp_path / "ckpt"
    assert run("train", *TINY, "--out", ckpt)[0] == 0
    weights = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    assert_user_error(run("generate", ckpt), "model.safetensors is damaged or truncated")
    (ckpt / "model.safetensors").write_bytes(weights)
    (ckpt / "config.json").write_text('{"model": {"dim": ')
    assert_user_error(run("generate", ckpt), "config.json or tokenizer.json is damaged")


def test_a_damaged_runs_csv_is_one_sentence_and_resume_rebuilds_it(run, tmp_path):
    folder = tmp_path / "r"
    assert (
        run(
            "ablate",
            "--smoke",
            "--seeds",
            "1",
            "--steps",
            "2",
            "--plan",
            "custom",
            "--variants",
            "classic;rope",
            "--out",
            folder,
        )[0]
        == 0
    )
    (folder / "runs.csv").write_text("garbage\n")
    assert_user_error(run("report", folder), "runs.csv is damaged")
    assert run("ablate", "--resume", folder)[0] == 0
    assert len(pd.read_csv(folder / "runs.csv")) == 2


def test_debug_shows_the_traceback():
    plain = cli("train", "--data", "/nonexistent/corpus.txt")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert (
        plain.stderr
        == "modern-gpt: error: data path /nonexistent/corpus.txt does not exist; give a UTF-8 text file or a folder of .txt files.\n"
    )
    debug = cli("--debug", "train", "--data", "/nonexistent/corpus.txt")
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "DataError" in debug.stderr


# ---------------------------------------------------------------------------
# runtime faults
# ---------------------------------------------------------------------------
def test_a_diverged_run_and_an_oom_are_recorded_and_the_ablation_goes_on(run, tmp_path, monkeypatch):
    forward = model_module.GPT.forward

    def faulty(self, idx, targets=None, cache=None):
        if self.config.swiglu and self.training:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        logits, loss = forward(self, idx, targets, cache)
        if self.config.rope and loss is not None:
            loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(model_module.GPT, "forward", faulty)
    folder = tmp_path / "faults"
    code, out, err = run("ablate", "--smoke", "--seeds", "2", "--steps", "4", "--plan", "custom",
                         "--variants", "classic;rope;swiglu;rmsnorm", "--out", folder)  # fmt: skip
    assert code == 0, err
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    by_variant = runs.groupby("variant")
    assert list(by_variant.get_group("rope").diverged) == [True, True]
    assert all(
        e.startswith("out of memory at step 1: CUDA out of memory") for e in by_variant.get_group("swiglu").error
    )
    assert list(by_variant.get_group("rmsnorm").diverged) == [False, False]  # the ablation went on
    assert "rope, seed 0: diverged (loss NaN or infinite) after 0 steps; left out of the means." in out
    assert "swiglu, seed 1: out of memory at step 1" in out
    assert out.count("diverged") >= 2


def _wait_for_runs(folder, n, proc, limit=120):
    deadline = time.time() + limit
    while len(list((folder / "runs").glob("*.json"))) < n:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGINT to the group, --jobs 2"])
def test_interrupts_stop_promptly_keep_finished_runs_and_say_how_to_resume(tmp_path, how):
    folder = tmp_path / "r"
    jobs = ["--jobs", "2"] if "jobs" in how else []
    proc = cli_process("ablate", "--smoke", "--seeds", "3", "--out", folder, *jobs, start_new_session=True)
    _wait_for_runs(folder, 3, proc)
    sent = time.time()
    if "group" in how:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    else:
        proc.send_signal(getattr(signal, how))
    out, err = proc.communicate(timeout=30)
    assert time.time() - sent < 10, "did not stop promptly"
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert f"Resume with: modern-gpt ablate --resume {folder}" in err
    kept = len(list((folder / "runs").glob("*.json")))
    assert kept >= 3 and f"{kept} of 21 runs finished and kept" in err
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    assert not (folder / ".lock").exists()
    if "group" not in how:
        return
    resumed = cli("ablate", "--resume", folder, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert len(pd.read_csv(folder / "runs.csv")) == 21


def test_a_live_writer_locks_the_folder_and_a_dead_ones_lock_is_taken_over(tmp_path):
    folder = tmp_path / "r"
    proc = cli_process("ablate", "--smoke", "--seeds", "3", "--out", folder)
    try:
        _wait_for_runs(folder, 1, proc)
        second = cli("ablate", "--resume", folder)
        assert second.returncode == 2
        assert f"is being written by another modern-gpt process (pid {proc.pid})" in second.stderr
    finally:
        proc.kill()
        proc.wait()
    assert (folder / ".lock").read_text() == str(proc.pid)  # SIGKILL left the lock behind
    results = ResultsDir(folder)
    results.lock()  # the owner is dead: taken over
    assert (folder / ".lock").read_text() == str(os.getpid())
    results.unlock()
    assert not (folder / ".lock").exists()
