"""bench/bench_limit.py's FLOP count against torch's own counter (FlopCounterMode) on one training step.

torch does not count its CPU attention kernel, so the reference replaces the model's causal_attention with the
same arithmetic written as plain matmuls, which it does count.
"""

from dataclasses import replace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from modern_gpt.core.config import ModelConfig
from modern_gpt.model import gpt as model_module
from modern_gpt.model.gpt import GPT
from tests.benchload import load

bench_limit = load("bench_limit")

BASE = ModelConfig(vocab_size=50, context=16, dim=32, heads=4, layers=2, tie_embeddings=False)
ALL_SIX = ("rmsnorm", "rope", "swiglu", "no_bias", "gqa", "qk_norm")


def matmul_attention(q, k, v, dropout_p=0.0):
    """Causal attention as explicit matmuls (so that FlopCounterMode sees QK^T and AV)."""
    if k.size(1) != q.size(1):
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    T = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) / q.size(-1) ** 0.5
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def reference_flops(cfg: ModelConfig, batch: int, monkeypatch) -> int:
    monkeypatch.setattr(model_module, "causal_attention", matmul_attention)
    torch.manual_seed(0)
    model = GPT(cfg)
    for p in model.parameters():  # perturbed weights: realistic values, not the init's
        p.data.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(0, cfg.vocab_size, (batch, cfg.context))
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(
    "components", [(), ALL_SIX, ("swiglu",), ("gqa",)], ids=["classic", "all_six", "swiglu", "gqa"]
)
def test_train_step_flops_match_torch_counter(components, monkeypatch):
    cfg = BASE.with_components(components)
    assert bench_limit.flops_train_step(cfg, 3, cfg.context) == reference_flops(cfg, 3, monkeypatch)


def test_without_the_lm_head_the_count_differs(monkeypatch):
    """Negative control: a count that leaves out the LM head is caught by the reference."""
    cfg = BASE.with_components(ALL_SIX)
    reference = reference_flops(cfg, 3, monkeypatch)
    head = 3 * 2 * 3 * cfg.context * cfg.dim * cfg.vocab_size  # fwd + bwd of (B*T, dim) x (dim, vocab)
    assert bench_limit.flops_train_step(cfg, 3, cfg.context) - head != reference
    # and a model with a different vocabulary differs by exactly its head's difference
    other = replace(cfg, vocab_size=2 * cfg.vocab_size)
    assert bench_limit.flops_train_step(other, 3, cfg.context) - reference == head


def test_matmul_shapes_carry_the_step_flops():
    """The rate is measured on the shapes whose FLOPs are counted: the two agree."""
    for components in [(), ALL_SIX]:
        cfg = BASE.with_components(components)
        shapes = bench_limit.matmul_shapes(cfg, 3, cfg.context)
        flops = sum(2 * torch.Size(a).numel() * b[-1] for a, b in shapes)
        assert flops == bench_limit.flops_train_step(cfg, 3, cfg.context)


def test_the_breakdown_places_runs_against_the_wall():
    """Two workers: runs of 1 s and 2 s from t=10 on one, a run of 1.5 s from t=10.5 on the other; launched at
    t=8, 6 s of wall. The parts sum over runs; lead, tail and the idle core-seconds follow from the times."""
    parts = {"startup": 0.1, "train_steps": 0.6, "curve_evals": 0.1, "final_eval": 0.15, "other": 0.05}
    runs = [(10.0, 1.0), (11.0, 2.0), (10.5, 1.5)]
    records = [{"secs": secs, "timing": {**parts, "started": start}} for start, secs in runs]
    records.append({"secs": 0.0, "timing": None})  # a failed run's record has no timing
    b = bench_limit.breakdown(records, launched=8.0, wall=6.0, cores=2)
    assert b["train_steps"] == pytest.approx(1.8) and b["startup"] == pytest.approx(0.3)
    assert b["lead"] == pytest.approx(2.0) and b["tail"] == pytest.approx(1.0)
    assert b["between"] == pytest.approx(2 * 3.0 - 4.5)
