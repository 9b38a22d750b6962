"""Faults during a run: a diverged run, out of memory, a full disk, a run that fails to start, a corpus that
changes under the workers. Each is a recorded run or one sentence, and finished runs are kept."""

import errno
import json
import os

import pandas as pd
import pytest
import torch

import modern_gpt.model.gpt as model_module
from tests.clihelp import Quiet, flat
from tests.errhelp import ABLATE, TINY, assert_ablation_error, assert_user_error, write


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
    plan = "--jobs 1 --seeds 2 --steps 4 --plan custom --variants classic;rope;swiglu;rmsnorm".split()
    code, out, err = run("ablate", "--smoke", *plan, "--out", folder)
    assert code == 0, err
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    by_variant = runs.groupby("variant")
    assert list(by_variant.get_group("rope").diverged) == [True, True]
    assert all(
        e.startswith("out of memory at step 1: CUDA out of memory") for e in by_variant.get_group("swiglu").error
    )
    assert list(by_variant.get_group("rmsnorm").diverged) == [False, False]  # the ablation went on
    assert flat("rope, seed 0: diverged (loss NaN or infinite) after 0 steps; left out of the means.") in flat(out)
    assert flat("swiglu, seed 1: out of memory at step 1") in flat(out)
    assert out.count("diverged") >= 2


def _full_disk_after(monkeypatch, calls: int):
    """os.fsync (which every atomic write calls once) fails with ENOSPC from the call numbered `calls` on."""
    real, count = os.fsync, [0]

    def fsync(fd):
        count[0] += 1
        if count[0] > calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return lambda: monkeypatch.setattr(os, "fsync", real)


def test_a_full_disk_is_one_sentence_and_keeps_finished_runs(run, tmp_path, monkeypatch):
    folder = tmp_path / "r"
    # meta.json twice, the empty tables, then two runs of three files each: the third run cannot be written
    free = _full_disk_after(monkeypatch, 4 + 3 * 2)
    assert_ablation_error(run(*ABLATE, "--out", folder), "cannot write", "No space left on device", "free some space")
    free()
    kept = {f.name: f.read_bytes() for f in (folder / "runs").iterdir()}
    assert len(kept) == 2 and not list(folder.glob(".*.tmp"))
    code, out, err = run("ablate", "--resume", folder, "--jobs", "1")
    assert code == 0, err
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "finished"
    assert len(pd.read_csv(folder / "runs.csv")) == len(meta["variants"]) * 2
    assert all((folder / "runs" / name).read_bytes() == data for name, data in kept.items())  # nothing finished lost
    _full_disk_after(monkeypatch, 0)
    assert_user_error(run("report", folder, "--plot"), "cannot write curves.png in", "No space left on device")
    assert_user_error(run("train", *TINY, "--out", tmp_path / "ckpt"), "cannot write", "No space left on device")


def test_a_failure_during_the_ablation_marks_the_folder_failed(run, tmp_path, monkeypatch):
    import modern_gpt.ablation.running as running
    from modern_gpt.core.errors import UserError

    train_run = running.train_run

    def failing(cfg, *args, **kwargs):
        if cfg.rope:
            raise UserError("the rope run cannot start.")
        return train_run(cfg, *args, **kwargs)

    monkeypatch.setattr(running, "train_run", failing)
    folder = tmp_path / "r"
    assert_ablation_error(run(*ABLATE, "--out", folder), "the rope run cannot start")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["error"] == "the rope run cannot start."
    assert not (folder / ".lock").exists()
    code, out, err = run("report", folder)
    assert code == 0 and "The ablation failed: the rope run cannot start;" in out


def test_out_of_memory_on_the_cpu_is_a_recorded_run(run, tmp_path, monkeypatch):
    forward = model_module.GPT.forward

    def faulty(self, idx, targets=None, cache=None):
        if self.config.rope and self.training:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes."
            )
        if self.config.swiglu and self.training:
            raise MemoryError()
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", faulty)
    folder = tmp_path / "r"
    plan = "--jobs 1 --seeds 1 --plan custom --variants classic;rope;swiglu".split()
    code, out, err = run("ablate", *TINY, *plan, "--out", folder)
    assert code == 0, err
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False).set_index("variant")
    assert runs.loc["rope", "error"].startswith("out of memory at step 1: [enforce fail")
    assert runs.loc["swiglu", "error"] == "out of memory at step 1: MemoryError"
    assert runs.loc["classic", "error"] == ""


def test_safetensors_own_full_disk_error_is_one_sentence(run, tmp_path, monkeypatch, made):
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    monkeypatch.setattr(safetensors.torch, "serialize_file", full)
    assert_user_error(
        run("train", *TINY, "--out", tmp_path / "c"), "cannot write model.safetensors in", "No space left"
    )
    ckpt = made("ckpt", tmp_path / "ckpt")
    assert_user_error(run("export", ckpt, "--hf", tmp_path / "hf"), f"in {tmp_path / 'hf'}", "No space left on device")


@pytest.mark.slow
def test_workers_train_on_the_corpus_the_driver_hashed(tmp_path):
    from modern_gpt.ablation import planning, running
    from modern_gpt.core.config import AblationOptions, ExecutionOptions
    from modern_gpt.core.settings import resolve

    corpus = write(tmp_path / "corpus.txt", ("the quick brown fox jumps over the lazy dog. " * 200).encode())
    overrides = {
        "data.path": str(corpus),
        "train.steps": 2,
        "train.eval_every": 2,
        "train.threads": 1,
        "model.context": 16,
        "model.dim": 16,
        "model.heads": 2,
        "model.layers": 1,
    }
    settings = resolve(None, True, overrides)
    ablations = {}
    for jobs in (1, 2):
        spec = planning.plan_spec(
            settings, planning.Request("ablate", "custom", variants="classic;rope", seed_list="0,1")
        )
        ablations[jobs] = running.start(
            spec, tmp_path / f"jobs{jobs}", "test", AblationOptions(execution=ExecutionOptions(jobs=jobs))
        )
    ablations[1].run(Quiet())
    # the data file changes after the driver read and hashed it: the workers must not read it again
    corpus.write_bytes(("ZYXWVU 0123456789 other text altogether! " * 300).encode())
    ablations[2].run(Quiet())
    one, two = (pd.read_csv(tmp_path / f"jobs{j}" / "runs.csv") for j in (1, 2))
    assert len(one) == len(two) == len(ablations[1].spec.variants) * 2
    assert list(two["val_loss"]) == list(one["val_loss"])  # bitwise: the same tokens, one thread per run
