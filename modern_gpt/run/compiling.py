"""--compile auto | on | off: whether the training step runs through torch.compile, chosen once per ablation.

auto compiles when compiling saves more seconds of training steps than its compiles cost. compile_balance
weighs the two, a pure function of the measured constants below. running.start decides on the driver, before
any run, for every row at once. So a row's delta is never partly the compiler's. meta.json holds the choice
(spec.settings.train.compile, on or off, with compile.why). Each run file carries it, and --resume trains with
the recorded one. A lone `modern-gpt train` decides for its one run.

Inductor's on-disk cache is one folder per user (share_cache). Torch-free: the driver decides before torch is
needed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..core.config import ModelConfig, TrainConfig


@dataclass(frozen=True)
class Measured:
    """What the rule needs of a device. The eager step's speed, the share of it compile saves, its compile time."""

    gflops: float  # achieved GFLOP/s of an eager training step (step_flops / seconds): per thread on a CPU
    gain_classic: float  # 1 - compiled / eager step time, classic GPT-2
    gain_modern: float  # the same with all six components; fusing norms, RoPE, SwiGLU and QK-norm is the gain
    cold_s: float  # seconds to compile one model's step with an empty inductor cache
    warm_s: float  # the same graph again in a fresh process, the cache warm


# bench/bench_compile.py --config shakespeare --rounds 7 --steps 10, twice, on the 2-core machine (AMD EPYC, at a load
# of 1-2), one thread (as --jobs auto runs), torch 2.13.0+cpu, commit 163bf19, 2026-12-01: eager 60-72 GFLOP/s
# (73.7-81.4 ms a step); gains classic 7% and 2%, all six 16% and 18%; compile 20.4-31.7 s cold, 1.7-2.2 s warm
# (docs/measurements.md). Here their means. Shakespeare's 24 runs of 600 steps: off.
CPU = Measured(gflops=66.0, gain_classic=0.045, gain_modern=0.17, cold_s=24.0, warm_s=1.9)
# TODO: measure on a GPU with bench/bench_compile.py. Assumed, NOT measured: no GPU was at hand.
CUDA = Measured(gflops=20_000.0, gain_classic=0.2, gain_modern=0.4, cold_s=40.0, warm_s=10.0)
GAINERS = ("rmsnorm", "rope", "swiglu", "qk_norm")  # the components whose elementwise work compile fuses
STEP_OVERHEAD_S = 0.005  # an eager step's seconds beyond its FLOPs (smoke: about 8 ms a step, 3 of them FLOPs)


def forward_flops(cfg: ModelConfig, batch: int, T: int) -> int:
    """Matmul FLOPs of one forward pass over batch sequences of T tokens, 2 per multiply-add.

    It counts every linear layer, the LM head (tied or not), and attention's QK^T and AV. Attention counts the
    full T x T square, as the kernel computes it. This is the one count of a model's arithmetic:
    bench/bench_limit.py uses it too. tests/house/test_bench_limit.py checks it against torch's FlopCounterMode."""
    d, hd, H, Hkv = cfg.dim, cfg.head_dim, cfg.heads, cfg.n_kv_heads
    mlp = (3 if cfg.swiglu else 2) * d * cfg.mlp_width
    per_token = (d * (H + 2 * Hkv) * hd + d * d + mlp) * cfg.layers + d * cfg.vocab_size
    attention = 2 * H * T * T * hd * cfg.layers
    return 2 * (batch * T * per_token + batch * attention)


def step_flops(cfg: ModelConfig, batch: int, T: int | None = None) -> int:
    """Matmul FLOPs of one training step over batch sequences of T tokens (default: the model's context).
    The backward adds two products per forward one: input and weight gradients."""
    return 3 * forward_flops(cfg, batch, cfg.context if T is None else T)


def measured(device: str) -> Measured:
    """The device's measured constants: CPU's on a CPU, else CUDA's (assumed)."""
    return CPU if device == "cpu" else CUDA


def rate(device: str, threads: int) -> float:
    """FLOP/s of an eager training step at the measured rate: per thread on a CPU, per device on CUDA."""
    return 1e9 * measured(device).gflops * (threads if device == "cpu" else 1)


def run_seconds(cfg: ModelConfig, train: TrainConfig, device: str, threads: int, sets: int = 0) -> float:
    """A run's estimated seconds (a Slurm task's time limit): its steps and its evaluations' forward passes at the
    measured rate. The curve's points on both splits; the final pass on val, on train where it has more windows
    than the curve's, on each of `sets` --eval-data sets (at most as many), and ctx2x's at twice the context."""
    T, r = cfg.context, rate(device, threads)
    points, curve = math.ceil(train.steps / train.eval_every), train.eval_batches * train.batch_size
    windows = train.eval_tokens / T  # the final pass's on each split; ctx2x's are half as many, twice as long
    passes = 1 + sets + (windows > curve)
    flops = (2 * points * curve + passes * windows) * forward_flops(cfg, 1, T)
    flops += windows / 2 * forward_flops(cfg, 1, 2 * T)
    return train.steps * (step_flops(cfg, train.batch_size) / r + STEP_OVERHEAD_S) + flops / r


def gain(cfg: ModelConfig, m: Measured) -> float:
    """The share of an eager step's time that compile saves. It rises from classic's measured gain to all
    six's, with each component whose elementwise work it fuses. The steps between are interpolated, not
    measured per component."""
    k = sum(getattr(cfg, c) for c in GAINERS)
    return m.gain_classic + (m.gain_modern - m.gain_classic) * k / len(GAINERS)


def compile_balance(runs: list[tuple[float, float]], steps: int, graphs: int, m: Measured) -> tuple[float, float]:
    """(seconds saved, seconds spent) by compiling an ablation. runs: (eager seconds per step, gain) per run.
    graphs: its distinct models. Each compiles cold once, and every other run warm from the shared cache."""
    saved = sum(step_s * g for step_s, g in runs) * steps
    spent = graphs * m.cold_s + max(0, len(runs) - graphs) * m.warm_s
    return saved, spent


def decide(models: list[ModelConfig], train: TrainConfig, device: str, threads: int) -> tuple[str, str]:
    """--compile's choice for these runs, and why, in a phrase. models: one per run, repeats included."""
    if train.compile != "auto":
        return train.compile, f"--compile {train.compile}"
    if device not in ("cpu", "cuda"):
        return "off", f"auto: off on {device}, where compile's gain is not measured"
    m, r = measured(device), rate(device, threads)
    runs = [(step_flops(cfg, train.batch_size) / r, gain(cfg, m)) for cfg in models]
    graphs = len({repr(cfg) for cfg in models})
    saved, spent = compile_balance(runs, train.steps, graphs, m)
    choice = "on" if saved > spent else "off"
    return choice, f"auto: {choice}, compiling would save about {saved:.0f} s of steps for {spent:.0f} s of compiles"


def share_cache() -> None:
    """One inductor cache folder for every process of this user: beside the token cache, or
    TORCHINDUCTOR_CACHE_DIR. A graph compiled once then compiles warm in each later worker, seed and ablation.
    Set before torch first compiles."""
    from ..data.corpus import default_cache_dir

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(default_cache_dir() / "inductor"))
