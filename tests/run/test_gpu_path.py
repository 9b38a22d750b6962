"""The CUDA path of a training run: torch's fused AdamW, the loss read every SYNC_EVERY steps, no host sync per step.

Tests marked `cuda` need a CUDA GPU and are skipped without one (`pytest -m cuda` runs them alone). The CPU
halves of these checks (the same numbers with the loss read every N steps, a diverged run caught within N
steps, the hand-written AdamW against torch's plain, foreach and fused ones) are in tests/run/test_train.py.
"""

import math
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import modern_gpt.model.gpt as model_module
from modern_gpt.ablation.executors import local
from modern_gpt.core.components import COMPONENTS
from modern_gpt.core.config import ModelConfig, TrainConfig
from modern_gpt.model.gpt import GPT
from modern_gpt.run.train import SYNC_EVERY, AdamW, make_optimizer, train_run

ROOT = Path(__file__).resolve().parents[2]
MODEL = ModelConfig(context=32, dim=64, heads=4, layers=2)
TRAIN = TrainConfig(
    steps=60, batch_size=8, lr=3e-3, warmup_steps=5, eval_every=20, eval_batches=2, eval_tokens=4096, device="cuda"
)


def needs_cuda(test):
    return pytest.mark.cuda(pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")(test))


def test_jobs_auto_on_cuda_runs_runs_per_gpu_at_once(monkeypatch):
    monkeypatch.setattr(local, "RUNS_PER_GPU", 4)
    assert local.workers("auto", "cuda", 10) == 4
    assert local.workers("auto", "cuda", 3) == 3  # never more than the runs to do
    assert local.workers("auto", "mps", 10) == 1 and local.workers(2, "cuda", 10) == 2


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here")
def test_bench_gpu_says_one_line_without_a_gpu():
    bench = ROOT / "bench" / "bench_gpu.py"
    done = subprocess.run([sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.count("\n") == 1 and "no CUDA GPU" in done.stdout


@needs_cuda
@pytest.mark.parametrize("components", [(), COMPONENTS], ids=["classic", "modern"])
def test_a_short_cuda_run_reads_the_loss_at_evaluations_and_every_sync_every_steps(corpus, components):
    read = []
    cfg = MODEL.with_components(components)
    result, model = train_run(cfg, corpus, TRAIN, seed=0, progress=lambda s, v: read.append((s, v)))
    assert result.device == "cuda" and not result.diverged and result.error == ""
    assert result.steps_done == TRAIN.steps and result.tokens_per_s > 0 and next(model.parameters()).is_cuda
    assert [c["step"] for c in result.curve] == [20, 40, 60]
    assert all(math.isfinite(c["val_loss"]) for c in result.curve)
    assert result.val_loss < math.log(corpus.tokenizer.vocab_size)  # it learned something
    expected = [s for s in range(1, TRAIN.steps + 1) if s % TRAIN.eval_every == 0 or s % SYNC_EVERY == 0]
    assert [s for s, _ in read] == expected and all(math.isfinite(v) for _, v in read)


@needs_cuda
def test_on_cuda_reading_every_n_steps_matches_reading_every_step(corpus):
    """Not bitwise (some CUDA kernels add in a varying order), but the same run within float noise."""
    every_step, _ = train_run(MODEL, corpus, TRAIN, seed=1, sync_every=1)
    default, _ = train_run(MODEL, corpus, TRAIN, seed=1)
    assert default.steps_done == every_step.steps_done == TRAIN.steps
    assert default.val_loss == pytest.approx(every_step.val_loss, abs=0.02)
    for a, b in zip(default.curve, every_step.curve, strict=True):
        assert a["step"] == b["step"] and a["val_loss"] == pytest.approx(b["val_loss"], abs=0.02)


@needs_cuda
def test_on_cuda_a_diverged_run_is_caught_within_sync_every_steps(corpus, monkeypatch):
    forwards = []
    forward = GPT.forward

    def counting(self, idx, targets=None, cache=None):
        forwards.append(self.training)
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", counting)
    cfg = replace(TRAIN, steps=4 * SYNC_EVERY, eval_every=1000, lr=1e6, warmup_steps=0)
    result, _ = train_run(MODEL, corpus, cfg, seed=0)
    assert result.diverged and math.isnan(result.val_loss) and result.curve == []
    assert all(forwards)  # training steps only: the weights after the NaN were never evaluated
    trained = len(forwards)  # stopped at the first read after the first non-finite loss (step steps_done + 1)
    assert trained % SYNC_EVERY == 0 and 0 <= trained - (result.steps_done + 1) < SYNC_EVERY


@needs_cuda
def test_on_cuda_the_steps_between_reads_never_wait_for_the_gpu(corpus):
    """torch's sync debug mode warns at every host sync. Twice the steps (no evaluation in between) must add
    one read of the loss per SYNC_EVERY steps, not one sync per step."""

    def syncs(steps: int) -> int:
        cfg = replace(TRAIN, steps=steps, eval_every=10_000)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                train_run(MODEL, corpus, cfg, seed=0)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in seen)

    train_run(MODEL, corpus, replace(TRAIN, steps=5), seed=0)  # warm-up: first-use allocations
    short, long = syncs(2 * SYNC_EVERY), syncs(4 * SYNC_EVERY)
    assert long - short <= 2 + 1, (short, long)  # two more reads (and one spare); a read per step would add 50


@needs_cuda
def test_on_cuda_torchs_fused_adamw_equals_the_hand_written_one():
    torch.manual_seed(0)
    ours, reference = GPT(MODEL).cuda(), GPT(MODEL).cuda()
    reference.load_state_dict(ours.state_dict())
    start = [p.clone() for p in ours.parameters()]
    opt_ours = make_optimizer(ours, TRAIN, "cpu")  # the hand-written one, here on CUDA tensors
    fused = make_optimizer(reference, TRAIN, "cuda")
    assert isinstance(opt_ours, AdamW) and isinstance(fused, torch.optim.AdamW) and fused.defaults["fused"]
    for step in range(20):
        x = torch.randint(0, MODEL.vocab_size, (8, 32), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = ours(x, x)
        loss.backward()
        for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
            b.grad = a.grad.clone()  # the same gradients: the comparison is of the updates alone
        for opt in (opt_ours, fused):
            for group in opt.param_groups:
                group["lr"] = TRAIN.lr * (1 + step) / 20  # a changing learning rate; weight decay 0.1 on matrices
            opt.step()
            opt.zero_grad()
    for a, b, s in zip(ours.parameters(), reference.parameters(), start, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0) and not torch.equal(a, s)
