"""One training run: reproducible, paired across variants, and honest about divergence."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

import modern_gpt.model.gpt as model_module
from modern_gpt.ablation.results import ResultsDir
from modern_gpt.core.components import COMPONENTS
from modern_gpt.core.config import ModelConfig, TrainConfig
from modern_gpt.data.corpus import eval_offsets
from modern_gpt.model.gpt import GPT
from modern_gpt.run.train import (
    STREAMS,
    SYNC_EVERY,
    AdamW,
    evaluate,
    lr_at,
    make_optimizer,
    param_groups,
    stream_seed,
    torch_adamw,
    train_run,
)
from tests.clihelp import TIMING, interrupt, tiny

MODEL = ModelConfig(context=16, dim=32, heads=2, layers=2)
TRAIN = TrainConfig(steps=12, batch_size=4, lr=3e-3, warmup_steps=3, eval_every=4, eval_batches=2, threads=1)


def test_the_same_seed_twice_is_bitwise_identical(corpus):
    a, _ = train_run(MODEL, corpus, TRAIN, seed=5)
    b, _ = train_run(MODEL, corpus, TRAIN, seed=5)
    c, _ = train_run(MODEL, corpus, TRAIN, seed=6)
    assert a.curve == b.curve and a.val_loss == b.val_loss and a.train_loss == b.train_loss
    assert a.val_loss != c.val_loss and a.curve != c.curve


def test_variants_with_the_same_seed_see_the_same_batches_and_windows(corpus, monkeypatch):
    seen = []
    forward = GPT.forward

    def recording_forward(self, idx, targets=None, cache=None):
        seen.append((self.training, idx.clone()))
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", recording_forward)
    runs = {}
    for components in [(), COMPONENTS, ("rope", "swiglu")]:
        seen.clear()
        train_run(MODEL.with_components(components), corpus, TRAIN, seed=2)
        runs[components] = list(seen)
    # ctx2x_loss's windows of twice the context: the RoPE rows alone run there, on the same tokens
    long = {k: [x for _, x in v if x.shape[1] == 2 * MODEL.context] for k, v in runs.items()}
    runs = {k: [(t, x) for t, x in v if x.shape[1] <= MODEL.context] for k, v in runs.items()}
    assert not long[()] and long[COMPONENTS]
    assert all(torch.equal(a, b) for a, b in zip(long[COMPONENTS], long[("rope", "swiglu")], strict=True))
    first, *others = runs.values()
    n_train = sum(1 for training, _ in first if training)
    assert n_train == TRAIN.steps
    for other in others:
        assert len(other) == len(first)
        for (mode_a, x_a), (mode_b, x_b) in zip(first, other, strict=True):
            assert mode_a == mode_b and torch.equal(x_a, x_b)
    seen.clear()
    train_run(MODEL, corpus, TRAIN, seed=3)
    assert not torch.equal(seen[0][1], first[0][1])  # another seed, other batches
    # ... but the very same evaluation tokens: every seed is measured on the same windows
    evals_2 = [x for training, x in first if not training]
    evals_3 = [x for training, x in seen if not training]
    assert len(evals_2) == len(evals_3) > 3 * 2  # 3 evaluations of 2 splits, then the final full sets
    assert all(torch.equal(a, b) for a, b in zip(evals_2, evals_3, strict=True))


def test_two_seeds_and_the_placebo_are_measured_on_identical_val_tokens(corpus):
    """The final val loss of every run averages the same tokens: a function of the data, not of the seed."""
    offsets = eval_offsets(len(corpus.val), MODEL.context, TRAIN.eval_tokens)
    results = [train_run(MODEL, corpus, TRAIN, seed=s, init=i) for s, i in ((0, "init"), (1, "init"), (0, "placebo"))]
    for result, model in results:
        assert result.val_tokens == len(offsets) * MODEL.context
        # recomputed: the two halves exactly, and val_loss their token-weighted mean, all the windows
        halves = [evaluate(model, corpus.val, half, MODEL.context, "cpu") for half in (offsets[0::2], offsets[1::2])]
        assert [result.val_loss_tune, result.val_loss_test] == halves
        assert result.val_loss == pytest.approx(evaluate(model, corpus.val, offsets, MODEL.context, "cpu"), rel=1e-6)
    assert len({r.val_loss for r, _ in results}) == 3  # different models, same tokens


def test_the_placebo_changes_the_init_stream_only(corpus, monkeypatch):
    seen = []
    forward = GPT.forward

    def recording_forward(self, idx, targets=None, cache=None):
        seen.append(idx.clone())
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", recording_forward)
    a, model_a = train_run(MODEL, corpus, TRAIN, seed=4)
    inputs_a = list(seen)
    seen.clear()
    b, model_b = train_run(MODEL, corpus, TRAIN, seed=4, init="placebo")
    # the same batches in the same order and the same evaluation windows, from other initial weights
    assert len(seen) == len(inputs_a) and all(torch.equal(x, y) for x, y in zip(seen, inputs_a, strict=True))
    assert a.val_loss != b.val_loss and a.val_tokens == b.val_tokens
    first_a, first_b = next(iter(model_a.parameters())), next(iter(model_b.parameters()))
    assert not torch.equal(first_a, first_b)


def test_a_small_eval_budget_takes_evenly_spaced_windows_of_the_data_alone():
    offsets = eval_offsets(100_001, 100, 10_000)
    assert (
        len(offsets) == 100 and offsets[0] == 0 and offsets[-1] == 99_900
    )  # spans the split: the last window ends at token 100,000
    assert np.all(np.diff(offsets) >= 100)  # whole windows, none overlapping
    whole = eval_offsets(1_000, 100, 10_000)
    assert list(whole) == [i * 100 for i in range(9)]  # all of a short split: 9 windows need 901 tokens


def test_a_run_records_what_a_researcher_needs(corpus):
    result, _ = train_run(MODEL, corpus, TRAIN, seed=0)
    assert result.steps_done == 12 and result.tokens_seen == 12 * 4 * 16
    assert result.epochs == pytest.approx(result.tokens_seen / len(corpus.train))
    assert [c["step"] for c in result.curve] == [4, 8, 12]
    assert result.val_tokens == len(eval_offsets(len(corpus.val), 16, TRAIN.eval_tokens)) * 16
    assert result.best_val_loss == min(c["val_loss"] for c in result.curve)
    assert result.val_bpc == pytest.approx(result.val_loss * len(corpus.val) / corpus.val_chars / math.log(2))
    assert result.val_ppl == pytest.approx(math.exp(result.val_loss))
    assert result.threads == 1 and result.device == "cpu" and result.tokens_per_s > 0
    model = GPT(replace(MODEL, vocab_size=corpus.tokenizer.vocab_size))
    assert result.params == sum(p.numel() for p in model.parameters())
    assert not result.diverged and result.error == ""


def test_a_run_records_its_training_flops_and_mfu_against_a_measured_peak(corpus):
    from modern_gpt.run.compiling import step_flops
    from modern_gpt.run.peak import gpu_peak

    result, model = train_run(MODEL, corpus, TRAIN, seed=0)
    assert result.flops == step_flops(model.config, TRAIN.batch_size) * result.steps_done
    assert result.peak_flops > 1e8 and "measured" in result.peak  # the matmul rate of this process
    rate = result.flops / result.timing["train_steps"]
    assert result.mfu == pytest.approx(rate / result.peak_flops)
    assert 0 < result.mfu < 2  # a tiny model's steps are mostly overhead: far below the matmul rate
    # each variant is charged its own arithmetic: GQA's fewer KV heads are fewer FLOPs
    gqa = replace(model.config, gqa=True, kv_heads=1)
    assert step_flops(gqa, 4) < step_flops(model.config, 4)
    assert gpu_peak("NVIDIA H100 PCIe") == 756e12 and gpu_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert math.isnan(gpu_peak("Some Future GPU"))


def test_an_absurd_learning_rate_ends_as_diverged_not_as_a_crash(corpus):
    result, _ = train_run(MODEL, corpus, TrainConfig(**{**vars(TRAIN), "lr": 1e6, "warmup_steps": 0}), seed=0)
    assert result.diverged
    assert result.steps_done < TRAIN.steps
    assert math.isnan(result.val_loss)


def test_an_out_of_memory_error_is_recorded(corpus, monkeypatch):
    def oom(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(model_module.GPT, "forward", oom)
    result, _ = train_run(MODEL, corpus, TRAIN, seed=0)
    assert result.error.startswith("out of memory at step 1: CUDA out of memory")
    assert not result.diverged and result.steps_done == 0


def test_warmup_then_cosine_to_a_tenth():
    cfg = TrainConfig(steps=110, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.55)
    assert lr_at(110, cfg) == pytest.approx(0.1)
    steps = [lr_at(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False))


def test_weight_decay_applies_to_matrices_only():
    model = GPT(MODEL)
    decay, no_decay = make_optimizer(model, TRAIN).param_groups
    assert decay["weight_decay"] == TRAIN.weight_decay and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize("kind", ["plain", "foreach", "fused"])
def test_adamw_equals_torch_adamw(kind):
    """The hand-written AdamW (the CPU's) against torch's: plain, foreach, and fused (CUDA's, here on the CPU),
    built by the same torch_adamw that make_optimizer uses on CUDA."""
    torch.manual_seed(0)
    ours, reference = GPT(MODEL), GPT(MODEL)
    reference.load_state_dict(ours.state_dict())
    start = [p.clone() for p in ours.parameters()]
    opt_ours = make_optimizer(ours, TRAIN)
    assert isinstance(opt_ours, AdamW)
    groups = param_groups(reference, TRAIN)
    if kind == "plain":
        opt_ref = torch.optim.AdamW(groups, lr=TRAIN.lr, betas=(TRAIN.beta1, TRAIN.beta2), foreach=False)
    else:
        opt_ref = torch_adamw(groups, TRAIN, fused=kind == "fused")
    assert TRAIN.weight_decay > 0 and opt_ref.param_groups[0]["weight_decay"] == TRAIN.weight_decay
    for step in range(15):
        x = torch.randint(0, MODEL.vocab_size, (4, 16))
        _, loss = ours(x, x)
        loss.backward()
        for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
            b.grad = a.grad.clone()  # the same gradients: fused rounds differently, and a loss amplifies that
        for opt in (opt_ours, opt_ref):
            for group in opt.param_groups:
                group["lr"] = TRAIN.lr * (1 + step) / 15  # a changing learning rate, as in a schedule
            opt.step()
            opt.zero_grad()
        for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
            assert torch.allclose(a, b, atol=1e-7, rtol=0), step  # fused: within 6e-8 after 15 steps
    assert all(not torch.equal(a, b) for a, b in zip(ours.parameters(), start, strict=True))  # every one moved


@pytest.mark.parametrize("threads", [1, 2])
def test_the_flat_adamw_is_bitwise_the_per_tensor_one(threads, tmp_path):
    """The flat step (parameters as views into one buffer) against the per-tensor one, gradients clipped inside it
    as clip_grad_norm_ clips them: equal bits, on odd-sized tensors (the kernels' scalar tails), on steps where
    the clip binds and where it does not, and on steps where a parameter has no gradient. release() keeps the
    values and gives each parameter its own storage again, which safetensors needs to save the model."""
    from safetensors.torch import save_model

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cfg = ModelConfig(context=16, dim=24, heads=2, layers=1, vocab_size=67)  # 67 x 24: not a multiple of 8
        torch.manual_seed(0)
        ours, reference = GPT(cfg), GPT(cfg)
        reference.load_state_dict(ours.state_dict())
        flat, per_tensor = make_optimizer(ours, TRAIN), make_optimizer(reference, TRAIN)
        per_tensor.release()
        assert flat.flat is not None and per_tensor.flat is None
        clipped = []
        for step in range(12):
            x = torch.randint(0, cfg.vocab_size, (4, 16))
            _, loss = ours(x, x)
            loss.backward()
            if step % 4 == 3:
                ours.lm_head.weight.grad = None  # a parameter without a gradient: the per-tensor path, on views
            for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
                b.grad = None if a.grad is None else a.grad.clone()
            max_norm = 0.05 if step % 2 else 0.0 if step == 4 else 1e3
            clipped.append(
                max_norm > 0
                and torch.nn.utils.get_total_norm([p.grad for p in ours.parameters() if p.grad is not None]) > max_norm
            )
            for opt in (flat, per_tensor):
                opt.step(max_norm)
                opt.zero_grad()
            assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), reference.parameters(), strict=True)), step
        assert any(clipped) and not all(clipped)
        values = [p.detach().clone() for p in ours.parameters()]
        assert len({p.untyped_storage().data_ptr() for p in ours.parameters()}) == 1
        flat.release()
        assert len({p.untyped_storage().data_ptr() for p in ours.parameters()}) == len(values)
        assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), values, strict=True))
        save_model(ours, str(tmp_path / "model.safetensors"))
    finally:
        torch.set_num_threads(before)


def test_cuda_gets_torchs_fused_adamw_with_the_same_groups():
    model = GPT(MODEL)
    fused, ours = make_optimizer(model, TRAIN, "cuda"), make_optimizer(model, TRAIN, "cpu")
    assert isinstance(fused, torch.optim.AdamW) and fused.defaults["fused"]
    assert fused.defaults["betas"] == (TRAIN.beta1, TRAIN.beta2) and fused.defaults["eps"] == ours.eps
    for g, h in zip(fused.param_groups, ours.param_groups, strict=True):
        assert g["weight_decay"] == h["weight_decay"] and g["lr"] == h["lr"] == TRAIN.lr
        assert [id(p) for p in g["params"]] == [id(p) for p in h["params"]]


def _recorded_run(corpus, monkeypatch, cfg, nan_from: int | None = None, **kwargs):
    """A run that records its forward passes ("train" or "eval") and every progress call; with nan_from,
    the training loss is NaN from that training step on."""
    calls, progress = [], []
    forward = GPT.forward

    def patched(self, idx, targets=None, cache=None):
        calls.append("train" if self.training else "eval")
        logits, loss = forward(self, idx, targets, cache)
        if nan_from is not None and self.training and calls.count("train") >= nan_from:
            loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(model_module.GPT, "forward", patched)
    result, model = train_run(MODEL, corpus, cfg, seed=0, progress=lambda s, v: progress.append((s, v)), **kwargs)
    monkeypatch.setattr(model_module.GPT, "forward", forward)
    return result, calls, progress


def test_reading_the_loss_every_n_steps_changes_no_number(corpus, monkeypatch):
    """The CUDA path (the loss read every N steps) run on the CPU: every loss, the curve and the final losses are
    bitwise those of reading it every step (the CPU default); only the progress calls are fewer."""
    every_step, _, progress_1 = _recorded_run(corpus, monkeypatch, TRAIN, sync_every=1)
    default, _, progress_default = _recorded_run(corpus, monkeypatch, TRAIN)
    buffered, _, progress_7 = _recorded_run(corpus, monkeypatch, TRAIN, sync_every=7)
    for r in (default, buffered):
        assert r.curve == every_step.curve and r.val_loss == every_step.val_loss
        assert r.train_loss == every_step.train_loss and r.best_val_loss == every_step.best_val_loss
        assert r.steps_done == every_step.steps_done == TRAIN.steps and r.tokens_seen == every_step.tokens_seen
    assert progress_default == progress_1 and [s for s, _ in progress_1] == list(range(1, TRAIN.steps + 1))
    # read at the evaluations (every 4 steps) and every 7 steps: the losses are those of the same steps
    assert [s for s, _ in progress_7] == [4, 7, 8, 12]
    assert all(v == dict(progress_1)[s] for s, v in progress_7)


def test_read_every_n_steps_a_diverged_run_is_caught_within_n_steps(corpus, monkeypatch):
    """NaN from step 9: read every step, the run stops before step 9's update; read every 5 steps (and at the
    evaluations, every 4), it stops at the read of step 10, records the same steps_done, and never evaluates
    the weights after the NaN."""
    cfg = replace(TRAIN, steps=20)
    every_step, calls_1, _ = _recorded_run(corpus, monkeypatch, cfg, nan_from=9, sync_every=1)
    buffered, calls_5, _ = _recorded_run(corpus, monkeypatch, cfg, nan_from=9, sync_every=5)
    for r in (every_step, buffered):
        assert r.diverged and r.error == "" and math.isnan(r.val_loss) and math.isnan(r.train_loss)
        assert r.steps_done == 8 and r.tokens_seen == 8 * TRAIN.batch_size * MODEL.context
        assert [c["step"] for c in r.curve] == [4, 8] and r.curve == every_step.curve
    assert calls_1.count("train") == 9 and calls_5.count("train") == 10
    nan_at = [i for i, c in enumerate(calls_5) if c == "train"][8]  # step 9's forward pass
    assert "eval" not in calls_5[nan_at:]  # nothing evaluated after the NaN


def test_an_absurd_learning_rate_is_caught_within_sync_every_steps(corpus, monkeypatch):
    """The CUDA default, SYNC_EVERY, on the CPU with no evaluation before it: lr 1e6 gives a NaN loss at step 2,
    noticed at the read of step SYNC_EVERY at the latest."""
    cfg = replace(TRAIN, steps=3 * SYNC_EVERY, eval_every=1000, lr=1e6, warmup_steps=0)
    reference, _, _ = _recorded_run(corpus, monkeypatch, cfg, sync_every=1)
    result, calls, progress = _recorded_run(corpus, monkeypatch, cfg, sync_every=SYNC_EVERY)
    assert result.diverged and reference.diverged and result.steps_done == reference.steps_done < SYNC_EVERY
    assert calls == ["train"] * SYNC_EVERY and progress == [] and result.curve == []


def test_random_streams_are_independent():
    seeds = {stream_seed(0, s) for s in STREAMS}
    assert len(seeds) == len(STREAMS) == 4
    assert stream_seed(0, "init") != stream_seed(1, "init")


@pytest.mark.parametrize("field,value", [("steps", 0), ("batch_size", -1), ("lr", 0.0), ("lr", -1e-3)])
def test_nonsense_training_settings_are_refused(corpus, field, value):
    from modern_gpt.core.errors import UserError

    with pytest.raises(UserError, match=field):
        train_run(MODEL, corpus, TrainConfig(**{**vars(TRAIN), field: value}), seed=0)


# ---------------------------------------------------------------------------
# A finite learning rate whose update overflows float32: a diverged run, never a traceback
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(("lr", "weight_decay"), [(1e300, 0.1), (3.5e38, 0.0), (1e-3, 1e300)])
def test_an_update_beyond_float32_is_a_diverged_run(corpus, lr, weight_decay):
    from modern_gpt.core.config import ModelConfig, TrainConfig
    from modern_gpt.run.train import train_run

    cfg = TrainConfig(steps=3, eval_every=3, lr=lr, weight_decay=weight_decay, warmup_steps=0, device="cpu")
    result, _ = train_run(ModelConfig(context=16, dim=16, heads=2, layers=1), corpus, cfg, seed=0)
    assert result.diverged and result.error == "" and result.steps_done <= 1


def test_train_at_an_overflowing_lr_says_it_diverged(run):
    code, out, err = run("train", *tiny(3), "--lr", "1e300", "--warmup-steps", "0", "--out", "ckpt")
    assert code == 0 and "Traceback" not in err, err
    assert "diverged (the loss or an update became NaN or infinite) after 0 steps" in out
    code, _, err = run("generate", "ckpt")
    assert code == 2 and "holds a run that diverged" in err


def test_an_overflowing_lr_is_recorded_fresh_and_on_resume(run_ok, tmp_path):
    """--lrs with an absurd rate: its runs are diverged, the table chooses the other rate; a folder interrupted
    before those runs resumes and records them too (every resume used to crash on the same run)."""
    args = ["ablate", *tiny(3), "--plan", "custom", "--variants", "classic;rope", "--seeds", "2", "--no-placebo"]
    args += ["--lrs", "1e-3,1e300", "--warmup-steps", "0", "--eval-tokens", "64", "--jobs", "1"]
    out = run_ok(*args, "--out", "fresh")
    runs = pd.read_csv(tmp_path / "fresh" / "runs.csv")
    assert len(runs) == 8 and runs[runs.lr == 1e300].diverged.all() and not runs[runs.lr == 1e-3].diverged.any()
    assert "At lr 1e+300, of 4 runs 4 diverged or failed" in out
    interrupt(tmp_path / "fresh", keep=1)  # the first run: lr 1e-3; every lr 1e300 run is still to do
    run_ok("ablate", "--resume", "fresh", "--jobs", "1")
    resumed = pd.read_csv(tmp_path / "fresh" / "runs.csv")
    pd.testing.assert_frame_equal(resumed.drop(columns=TIMING), runs.drop(columns=TIMING))
    assert ResultsDir(tmp_path / "fresh").read_meta()["status"] == "finished"


# ---------------------------------------------------------------------------
# Item 8: best val loss comes from the curve's windows, and its label says how many
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(("eval_tokens", "eval_batches", "batch_size"), [(8192, 4, 8), (256, 4, 8), (4096, 1, 3)])
def test_curve_windows_counts_what_the_curve_evaluates(corpus, eval_tokens, eval_batches, batch_size):
    from modern_gpt.core.config import TrainConfig
    from modern_gpt.data.corpus import eval_offsets, subset
    from modern_gpt.run.train import curve_windows

    final = eval_offsets(len(corpus.val), 16, eval_tokens)
    cfg = TrainConfig(eval_tokens=eval_tokens, eval_batches=eval_batches, batch_size=batch_size)
    assert curve_windows(cfg, len(final)) == len(subset(final, eval_batches * batch_size))


def _best_row(out: str) -> str:
    return next(line for line in out.splitlines() if "best val loss" in line)


def test_the_duel_labels_its_best_val_loss_truthfully(run_ok):
    duel = ["duel", *tiny(4), "--batch-size", "8", "--seeds", "2", "--no-placebo", "--jobs", "1", "--lrs", "1e-3,3e-3"]
    # 1 batch of 8 windows on the curve; the final loss on the 256 of --eval-tokens 4096 at context 16
    row = _best_row(run_ok(*duel, "--eval-batches", "1", "--eval-tokens", "4096", "--out", "part"))
    assert "curve: 8 of 256 windows" in row and "all windows" not in row
    row = _best_row(run_ok(*duel, "--eval-tokens", "128", "--out", "whole"))  # 8 windows: the curve has them all
    assert "best val loss (mean step, all windows)" in row


def test_train_labels_its_best_val_loss_truthfully(run_ok):
    out = run_ok(
        "train", *tiny(4), "--batch-size", "8", "--eval-batches", "1", "--eval-tokens", "4096", "--out", "ckpt"
    )
    assert "best val loss (step; curve: 8 of 256 windows)" in _best_row(out)
