"""One training run: (ModelConfig, corpus, TrainConfig, seed) -> RunResult.

Everything random comes from the seed, through separate streams: weight init,
batch order, dropout. So two variants trained with the same seed differ only in
their architecture. The same run twice on a CPU gives bitwise identical losses.
The evaluation windows come from the data alone: every run, whatever its seed,
is measured on the same tokens (docs/statistics.md).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F

from ..core.config import DEVICES, SPIKE, ModelConfig, TrainConfig, param_counts
from ..core.errors import UserError
from ..data.corpus import BatchStream, Corpus, bits_per_char, check_length, eval_offsets, subset, windows
from ..model.gpt import GPT, ContextWall
from . import compiling, evaluation
from .compiling import step_flops
from .evaluation import LONG
from .peak import peak

# "placebo" is a second weight-init stream: the placebo row is its first row again with only this changed.
STREAMS = ("init", "batches", "dropout", "placebo")
# Tokens per forward pass when evaluating (eval_chunk). On one CPU thread, measured at the smoke and shakespeare
# shapes (docs/measurements.md), 1,024-4,096 tokens ran at the same rate and 16,384 up to 1.5x slower: the
# activations of a small chunk stay in cache. A GPU wants large chunks; both are capped so that the float32
# logits (and their log-softmax) of a chunk stay under EVAL_LOGITS_BYTES with a large vocabulary.
EVAL_CHUNK_TOKENS = {"cpu": 2048, "cuda": 65536}
EVAL_LOGITS_BYTES = 1 << 28
# Steps between reads of the loss on CUDA (LossReader). Reading it (loss.item()) stalls the host until the GPU
# has caught up; once per step, that costs a small model more than the step.
SYNC_EVERY = 25
ADAMW_EPS = 1e-8


class Spikes:
    """Counts loss spikes after warm-up. A spike: the training loss goes from within SPIKE nats of its running
    minimum to more than SPIKE above it. A run that spikes and recovers still trains to a loss. The spike says
    its learning rate is at the edge of stable."""

    def __init__(self, warmup: int):
        self.warmup, self.low, self.up, self.count = warmup, math.inf, False, 0

    def add(self, step: int, loss: float) -> None:
        high = loss > self.low + SPIKE
        after = step > self.warmup  # a loss already high when warm-up ends is a spike at its first step after
        if after and high and not self.up:
            self.count += 1
        self.up = high and after
        self.low = min(self.low, loss)


@dataclass
class RunResult:
    seed: int
    params: int
    train_loss: float  # nats per token, on the fixed training windows, at the end
    val_loss: float  # nats per token, on the fixed validation windows, at the end
    val_tokens: int  # how many validation tokens val_loss averages: the same for every run of a corpus
    # val_loss on two disjoint halves of those windows (alternate ones): with several learning rates, each
    # variant's best one is chosen on the tuning half and reported on the test half, so the choice flatters no one
    val_loss_tune: float
    val_loss_test: float
    val_bpc: float  # bits per character: comparable across tokenizers, when lossless
    val_ppl: float
    best_val_loss: float
    best_step: int
    steps_done: int
    tokens_seen: int
    epochs: float  # tokens seen / tokens in the training split
    tokens_per_s: float
    secs: float
    threads: int
    device: str
    diverged: bool = False
    lossless: bool = True  # the tokenizer gives back the validation text exactly (data.lost_chars)
    spikes: int = 0  # after warm-up, times the training loss rose more than SPIKE nats above its running minimum
    error: str = ""  # a fault that ended the run (out of memory, say)
    flops: float = math.nan  # training FLOPs: compiling.step_flops times the steps done (evaluation not counted)
    mfu: float = math.nan  # flops per second of training steps over peak_flops
    peak_flops: float = math.nan  # the peak MFU is measured against (run/peak.py), FLOP/s
    peak: str = ""  # which peak that is: measured in the process (CPU), or a data sheet's (GPU)
    curve: list[dict] = field(default_factory=list)  # {step, train_loss, val_loss} per evaluation
    # Where secs went (Outcome.clock): startup (model, optimizer, batches, windows), train_steps, curve_evals,
    # final_eval, other (the rest: progress updates), in seconds; started: the run's start as Unix time, so that
    # a reader can place runs against each other and the ablation's wall (bench/bench_limit.py)
    timing: dict = field(default_factory=dict)
    # The further metrics of the final evaluation (run/evaluation.py), each lower-is-better: val_bpb, ctx2x_loss,
    # icl_gain, and NAME_loss and NAME_bpb for each --eval-data set; NaN where a run cannot give one, and then
    # metric_notes says why under the metric's name (a learned position table's wall, a lossy set)
    metrics: dict = field(default_factory=dict)
    metric_notes: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def failed(cls, seed: int, params: int, threads: int, device: str, lossless: bool, error: str) -> RunResult:
        """A run that never finished training (its worker died, its plugin raised): NaN losses, no steps, the
        fault in error; val_tokens and timing unknown (None)."""
        losses = ("train_loss", "val_loss", "val_loss_tune", "val_loss_test", "val_bpc", "val_ppl", "best_val_loss")
        return cls(seed, params, val_tokens=None, best_step=0, steps_done=0, tokens_seen=0, epochs=0.0,
                   tokens_per_s=0.0, secs=0.0, threads=threads, device=device, lossless=lossless, error=error,
                   timing=None, **dict.fromkeys(losses, math.nan))  # fmt: skip


def stream_seed(seed: int, stream: str) -> int:
    """An independent seed for one random stream of a run."""
    return int(np.random.SeedSequence([seed, STREAMS.index(stream)]).generate_state(1)[0])


def resolve_device(name: str) -> str:
    if name not in DEVICES:
        raise UserError(f"unknown --device {name!r}; choose one of {', '.join(DEVICES)}.")
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but torch sees no CUDA GPU; use --device cpu or auto.")
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("--device mps was asked for, but torch sees no Apple GPU; use --device cpu or auto.")
    return name


def memory_bytes(device: str) -> int | None:
    """The most memory a run on this device can have: the machine's RAM, or the GPU's. None when unknown."""
    try:
        if device == "cuda":
            return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        if device == "cpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError, RuntimeError):
        pass
    return None


def check_memory(model_cfg: ModelConfig, cfg: TrainConfig, device: str) -> None:
    """Refuse a run whose model or one training step cannot fit in the device's memory at all, naming the
    flags. The estimate is a rough lower bound: float32 weights, gradients, AdamW's moments, logits
    and activations. What passes may still run out of memory, and is then recorded as a failed run."""
    total = memory_bytes(device)
    if total is None:
        return
    gb = 1 << 30
    counts = param_counts(model_cfg)
    weights = 16 * counts["total"]
    tokens = cfg.batch_size * model_cfg.context
    step = 4 * tokens * (3 * model_cfg.vocab_size + 16 * model_cfg.dim * model_cfg.layers)
    vocab = f"the tokenizer's {model_cfg.vocab_size:,}-token vocabulary"
    if weights > total:
        in_vocab = counts["token_embedding"] + counts["output_head"]
        fix = (  # a pretrained tokenizer's vocabulary, not the width, can be what does not fit
            f"{in_vocab:,} of them embed {vocab}; use a tokenizer with a smaller vocabulary, or a smaller --dim"
            if in_vocab > counts["total"] / 2
            else "use a smaller --dim, --layers or --context"
        )
        raise UserError(
            f"the model ({counts['total']:,} parameters) needs about {weights / gb:,.0f} GB to train, "
            f"more than the {total / gb:,.0f} GB of memory here; {fix}."
        )
    if weights + step > total:
        fix = (
            f"the logits over {vocab} take most of it; use a smaller --batch-size or a tokenizer with a smaller vocabulary"
            if 3 * model_cfg.vocab_size > 16 * model_cfg.dim * model_cfg.layers
            else "use a smaller --batch-size"
        )
        raise UserError(
            f"--batch-size {cfg.batch_size} with --context {model_cfg.context} needs about {(weights + step) / gb:,.0f} GB "
            f"for one training step, more than the {total / gb:,.0f} GB of memory here; {fix}."
        )


def default_threads(jobs: int = 1) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, jobs))


def sync_interval(device: str) -> int:
    """Steps between host reads of the training loss: SYNC_EVERY on CUDA, 1 elsewhere."""
    return SYNC_EVERY if device == "cuda" else 1


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to the peak, then cosine decay. It reaches min_lr_ratio of the peak at the last step."""
    warmup = min(cfg.warmup_steps, cfg.steps)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


class AdamW:
    """Adam with decoupled weight decay, computed as torch.optim.AdamW computes it.

    Used on the CPU, where the first use of torch.optim imports torch's compiler stack
    (torch._dynamo, about 800 modules). On the 2-core machine, a fresh process took 0.8-1.4 s
    to construct a torch.optim.AdamW and take its first step. This class takes 1-2 ms, and a
    smoke run trains in about a second (docs/measurements.md). On CUDA make_optimizer uses
    torch's fused AdamW instead.

    Flat, when every parameter has one dtype and device. The parameters become views into one
    buffer, and each moment is one buffer. A step is then about ten operations on one tensor.
    On a CPU, torch's _foreach ops loop over the tensors one at a time. Each wraps its Python
    scalar in a tensor. At the smoke size (29 parameters), clipping and the step took 1.1 ms of
    a 6 ms training step; flat, 0.6 ms (docs/measurements.md). Every operation is elementwise,
    so the values are bitwise those of the per-tensor path. A step where a parameter has no
    gradient takes the per-tensor path, on views of the same buffers. release() gives each
    parameter its own storage back: safetensors refuses to save tensors that share one.

    tests/run/test_train.py checks it against torch.optim.AdamW (plain, foreach and fused), and
    the flat step against the per-tensor one.
    """

    def __init__(
        self, groups: list[dict], lr: float, betas: tuple[float, float], eps: float = 1e-8, order: list | None = None
    ):
        self.param_groups = [{"lr": lr, **g, "params": list(g["params"])} for g in groups]
        self.betas, self.eps, self.t = betas, eps, 0
        params = [p for g in self.param_groups for p in g["params"]]
        self.order = order or params  # clipping sums the gradients' norms in this order, as clip_grad_norm_ would
        one_kind = len({(p.dtype, p.device) for p in params}) == 1 and len({id(p) for p in params}) == len(params)
        self.flat = torch.cat([p.detach().reshape(-1) for p in params]) if one_kind else None
        self.spans, start = [], 0  # each group's slice of the flat buffers
        for g in self.param_groups:
            count = sum(p.numel() for p in g["params"])
            self.spans.append((start, start + count))
            start += count
        if self.flat is None:
            self.exp_avg = [[torch.zeros_like(p) for p in g["params"]] for g in self.param_groups]
            self.exp_avg_sq = [[torch.zeros_like(p) for p in g["params"]] for g in self.param_groups]
            return
        self.m, self.v = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.exp_avg, self.exp_avg_sq = self._views(self.m), self._views(self.v)
        for p, view in zip(params, (v for vs in self._views(self.flat) for v in vs), strict=True):
            p.data = view

    def _views(self, buffer: torch.Tensor) -> list[list[torch.Tensor]]:
        """buffer's slices shaped as each group's parameters."""
        views, start = [], 0
        for g in self.param_groups:
            views.append([])
            for p in g["params"]:
                views[-1].append(buffer[start : start + p.numel()].view_as(p))
                start += p.numel()
        return views

    def release(self) -> None:
        """Each parameter in its own storage again. The moments stay in theirs, and later steps are per tensor."""
        if self.flat is not None:
            for g in self.param_groups:
                for p in g["params"]:
                    p.data = p.data.clone()
            self.flat = None

    @torch.no_grad()
    def step(self, max_norm: float = 0.0) -> None:
        """One update. When max_norm > 0, the gradients are first clipped to it, as clip_grad_norm_ clips them."""
        grads = [p.grad for g in self.param_groups for p in g["params"]]
        if self.flat is None or any(g is None for g in grads):
            if max_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.order, max_norm)
            self._step_tensors()
            return
        flat_grad = torch.cat([g.reshape(-1) for g in grads])
        if max_norm > 0:
            flat_grad.mul_(clip_factor(self.order, max_norm))
        self.t += 1
        b1, b2 = self.betas
        bias1, bias2 = 1 - b1**self.t, 1 - b2**self.t
        for group, (a, b) in zip(self.param_groups, self.spans, strict=True):
            decay = 1 - group["lr"] * group["weight_decay"]
            if decay != 1.0:  # a product with 1.0 changes nothing
                self.flat[a:b].mul_(decay)  # decoupled weight decay
        self.m.lerp_(flat_grad, 1 - b1)  # first moment
        self.v.mul_(b2).addcmul_(flat_grad, flat_grad, value=1 - b2)  # second moment
        denom = self.v.sqrt().div_(math.sqrt(bias2)).add_(self.eps)
        for group, (a, b) in zip(self.param_groups, self.spans, strict=True):
            self.flat[a:b].addcdiv_(self.m[a:b], denom[a:b], value=-group["lr"] / bias1)

    def _step_tensors(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        bias1, bias2 = 1 - b1**self.t, 1 - b2**self.t
        for group, m, v in zip(self.param_groups, self.exp_avg, self.exp_avg_sq, strict=True):
            have = [i for i, p in enumerate(group["params"]) if p.grad is not None]
            if not have:
                continue
            params = [group["params"][i] for i in have]
            grads = [p.grad for p in params]
            m_, v_ = [m[i] for i in have], [v[i] for i in have]
            torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])  # decoupled weight decay
            torch._foreach_lerp_(m_, grads, 1 - b1)  # first moment
            torch._foreach_mul_(v_, b2)
            torch._foreach_addcmul_(v_, grads, grads, 1 - b2)  # second moment
            denom = torch._foreach_sqrt(v_)
            torch._foreach_div_(denom, math.sqrt(bias2))
            torch._foreach_add_(denom, self.eps)
            torch._foreach_addcdiv_(params, m_, denom, -group["lr"] / bias1)

    def zero_grad(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None


def release(opt: AdamW | torch.optim.AdamW) -> None:
    """The hand-written AdamW's parameters, each in its own storage again (AdamW.release). torch's holds none."""
    if isinstance(opt, AdamW):
        opt.release()


def clip_factor(params: list, max_norm: float) -> torch.Tensor:
    """The factor, at most 1, that brings the gradients' total norm to max_norm. It is computed as
    torch.nn.utils.clip_grad_norm_ computes it. The same operations in the same order give the same bits."""
    norms = torch._foreach_norm([p.grad for p in params if p.grad is not None])
    total = torch.linalg.vector_norm(torch.stack(norms))
    return torch.clamp(max_norm / (total + 1e-6), max=1.0)


def param_groups(model: GPT, cfg: TrainConfig) -> list[dict]:
    """Weight decay on matrices only: not on biases, norms or gains."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": matrices, "weight_decay": cfg.weight_decay}, {"params": others, "weight_decay": 0.0}]


def torch_adamw(groups: list[dict], cfg: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """torch's AdamW with the hand-written one's settings. Fused (one kernel for every parameter) or foreach."""
    kind = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=ADAMW_EPS, **kind)


def make_optimizer(model: GPT, cfg: TrainConfig, device: str = "cpu") -> AdamW | torch.optim.AdamW:
    """AdamW: torch's fused one on CUDA, its start-up cost lost in the run's. The hand-written one elsewhere."""
    groups = param_groups(model, cfg)
    if device == "cuda":
        return torch_adamw(groups, cfg, fused=True)
    return AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=ADAMW_EPS, order=list(model.parameters()))


def to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """A batch onto the device. On CUDA, through pinned memory without blocking. A copy from pageable memory
    would wait for the GPU to finish its queue: a host sync every step."""
    if device == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _autocast(device: str):
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def eval_chunk(context: int, vocab: int, device: str) -> int:
    """Windows per forward pass when evaluating. About EVAL_CHUNK_TOKENS tokens, fewer with a large vocabulary."""
    tokens = min(EVAL_CHUNK_TOKENS.get(device, EVAL_CHUNK_TOKENS["cpu"]), EVAL_LOGITS_BYTES // (8 * vocab))
    return max(1, tokens // context)


@torch.no_grad()
def window_losses(
    model: GPT, parts: list[tuple[np.ndarray, np.ndarray]], context: int, device: str, per_token: bool = False
):
    """Each window's summed loss (nats over its context targets, float64), for each (ids, offsets) part. One
    pass: every part's windows share the forward passes, of eval_chunk windows each. No host sync per chunk.
    per_token: also each part's per-token losses (windows x context, float32), for evaluation.py's metrics."""
    sizes = [len(offsets) for _, offsets in parts]
    pairs = [windows(ids, offsets, context) for ids, offsets in parts if len(offsets)]
    if not pairs:
        empty = [np.zeros(0) for _ in parts]
        return (empty, [np.zeros((0, context), dtype=np.float32) for _ in parts]) if per_token else empty
    x, y = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
    n = eval_chunk(context, model.config.vocab_size, device)
    model.eval()
    sums, rows = [], []
    try:
        for start in range(0, len(x), n):
            with _autocast(device):
                logits, _ = model(to_device(x[start : start + n], device))
            targets = to_device(y[start : start + n], device).reshape(-1)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets, reduction="none")  # as GPT.forward
            sums.append(loss.view(-1, context).double().sum(1))
            if per_token:
                rows.append(loss.view(-1, context))
    finally:
        model.train()
    cuts = np.cumsum(sizes)[:-1]
    split = np.split(torch.cat(sums).cpu().numpy(), cuts)
    return (split, np.split(torch.cat(rows).cpu().numpy(), cuts)) if per_token else split


def mean_loss(sums: np.ndarray, context: int) -> float:
    """Mean loss per token of windows, from their summed losses (window_losses). NaN for no window."""
    return float(sums.sum()) / (len(sums) * context) if len(sums) else math.nan


def evaluate(model: GPT, ids: np.ndarray, offsets: np.ndarray, context: int, device: str) -> float:
    """Mean loss in nats per token over the windows starting at offsets. Each window has context targets."""
    return mean_loss(window_losses(model, [(ids, offsets)], context, device)[0], context)


def is_oom(e: BaseException) -> bool:
    """Out of memory: CUDA's error, the CPU allocator's "can't allocate memory", numpy's MemoryError."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def curve_windows(cfg: TrainConfig, windows: int) -> int:
    """How many validation windows an intermediate evaluation uses (the curve, and so best_val_loss).
    --eval-batches batches of the final evaluation's `windows`, or all when fewer (data.subset)."""
    return min(cfg.eval_batches * cfg.batch_size, windows)


def update_overflowed(e: RuntimeError) -> bool:
    """torch's error for a step size or weight-decay factor past float32 (lr about 3.4e37 and up): the run diverged."""
    return "without overflow" in str(e)


class LossReader:
    """The training loss, from the device to the host. Off CUDA it is read, and checked, every step, before the
    update. On CUDA the losses stay on the GPU. They are read together every `every` steps (SYNC_EVERY) and at
    every evaluation. Spikes are counted over every step's loss, as they are read.

    A loss that is not finite ends the run as diverged; steps_done is then the steps before it. Read every step,
    it stops the run before its update. Read every N steps, up to N - 1 more steps run first. So a diverged
    run's model may hold non-finite weights; it is never evaluated."""

    def __init__(self, every: int, device: str, warmup: int):
        if every < 1:
            raise ValueError(f"sync_every must be at least 1, got {every}")
        self.every, self.pending, self.last = every, 0, math.nan  # pending: losses held, not yet read
        self.losses = torch.empty(every, device=device) if every > 1 else None
        self.spikes = Spikes(warmup)

    def keep(self, step: int, loss: torch.Tensor) -> bool:
        """Hold this step's loss, or read it now when reading every step. False when read and not finite."""
        if self.losses is not None:
            self.losses[self.pending] = loss.detach()
            self.pending += 1
            return True
        self.last = loss.item()
        if not math.isfinite(self.last):
            return False
        self.spikes.add(step, self.last)
        return True

    def due(self, step: int, evaluating: bool) -> bool:
        """Whether the losses held are read after this step."""
        return self.losses is None or evaluating or step % self.every == 0

    def read(self, step: int) -> int | None:
        """Read the losses held up to this step. None when all are finite. Else the steps before the first that
        is not (the run's steps_done). On CUDA the host waits here for the GPU, once per `every` steps."""
        if self.losses is None:
            return None
        values = self.losses[: self.pending].tolist()
        first, self.pending = step - len(values) + 1, 0
        bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
        if bad is not None:
            return first - 1 + bad
        for i, v in enumerate(values):
            self.spikes.add(first + i, v)
        self.last = values[-1]
        return None


class TrainClock:
    """Seconds spent in training steps, for tokens_per_s, evaluations left out. It runs from a step's start to
    the next loss read. On CUDA the steps queued before a read finish during it."""

    def __init__(self):
        self.secs, self.since = 0.0, None

    def start(self) -> None:
        if self.since is None:
            self.since = time.perf_counter()

    def stop(self) -> None:
        self.secs += time.perf_counter() - self.since
        self.since = None


@dataclass(frozen=True)
class EvalWindows:
    """Where a run is measured. The final evaluation: the same windows for every run (train_final, val_final).
    The intermediate ones, for the curve: a fixed, smaller subset of them (train, val)."""

    train_final: np.ndarray
    val_final: np.ndarray
    train: np.ndarray
    val: np.ndarray
    sets: tuple = ()  # each --eval-data set's windows, of context tokens (corpus.evals)
    long: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # ctx2x: val windows of 2 x context

    @classmethod
    def of(cls, corpus: Corpus, context: int, cfg: TrainConfig) -> EvalWindows:
        val_final = eval_offsets(len(corpus.val), context, cfg.eval_tokens)
        train_final = eval_offsets(len(corpus.train), context, cfg.eval_tokens)
        count = cfg.eval_batches * cfg.batch_size
        sets = tuple(eval_offsets(len(s.ids), context, cfg.eval_tokens) for s in corpus.evals)
        long = eval_offsets(len(corpus.val), LONG * context, cfg.eval_tokens)
        return cls(train_final, val_final, subset(train_final, count), subset(val_final, count), sets, long)


@dataclass(frozen=True)
class FinalLosses:
    """A run's losses at the end, on the full fixed sets. All NaN for a run that diverged or failed."""

    train_loss: float = math.nan
    val_loss: float = math.nan
    val_loss_tune: float = math.nan  # the two halves of val_loss's windows (RunResult)
    val_loss_test: float = math.nan
    metrics: dict = field(default_factory=dict)  # RunResult.metrics
    notes: dict = field(default_factory=dict)  # RunResult.metric_notes

    @property
    def finite(self) -> bool:
        return math.isfinite(self.train_loss) and math.isfinite(self.val_loss)


def set_lr(opt: AdamW | torch.optim.AdamW, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def update(model: GPT, opt: AdamW | torch.optim.AdamW, loss: torch.Tensor, grad_clip: float) -> bool:
    """Backward and one optimizer step. False when the update overflows float32, which ends the run as diverged."""
    loss.backward()
    try:
        if isinstance(opt, AdamW):
            opt.step(grad_clip)  # clips as below, in its flat buffer
        else:
            if grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            opt.step()
    except RuntimeError as e:  # a finite lr whose update overflows float32 (lr / (1 - beta1) > 3.4e38)
        if not update_overflowed(e):
            raise
        return False  # as a NaN loss would end it: the update is infinite
    opt.zero_grad()  # torch.optim.AdamW (CUDA) too: None grads by default
    return True


def curve_point(model: GPT, corpus: Corpus, windows: EvalWindows, context: int, step: int, device: str) -> dict:
    """An intermediate evaluation, on the smaller fixed subsets, both splits in one pass."""
    train, val = window_losses(model, [(corpus.train, windows.train), (corpus.val, windows.val)], context, device)
    return {"step": step, "train_loss": mean_loss(train, context), "val_loss": mean_loss(val, context)}


def final_losses(
    model: GPT, corpus: Corpus, windows: EvalWindows, context: int, last: dict, device: str
) -> FinalLosses:
    """The losses on the full fixed sets, in one pass. The train loss is the last curve point's when that used
    all of them. All NaN when one is not finite. val_loss averages the two halves' tokens: alternate windows,
    each evenly spread over the split."""
    full_train = len(windows.train_final) > len(windows.train)
    parts = [(corpus.val, windows.val_final)] + ([(corpus.train, windows.train_final)] if full_train else [])
    sets = [(s.ids, offsets) for s, offsets in zip(corpus.evals, windows.sets, strict=True)]
    sums, tokens = window_losses(model, parts + sets, context, device, per_token=True)  # the sets after, so that
    val = sums[0]  # val's and train's forward passes stay those of a run without them
    train_loss = mean_loss(sums[1], context) if full_train else last["train_loss"]
    tune, test = mean_loss(val[0::2], context), mean_loss(val[1::2], context)
    final = FinalLosses(train_loss, mean_loss(val, context), tune, test)
    if not final.finite:
        return FinalLosses()
    lengths = corpus.token_bytes()
    bpb = evaluation.bits_per_byte(tokens[0], evaluation.targets(corpus.val, windows.val_final, context), lengths)
    ctx2x, notes = long_loss(model, corpus, windows, context, device)
    metrics = {"val_bpb": bpb, "ctx2x_loss": ctx2x, "icl_gain": evaluation.icl_gain(tokens[0])}
    for s, offsets, total, losses in zip(
        corpus.evals, windows.sets, sums[len(parts) :], tokens[len(parts) :], strict=True
    ):
        metrics[f"{s.name}_loss"] = mean_loss(total, context)
        metrics[f"{s.name}_bpb"] = evaluation.bits_per_byte(
            losses, evaluation.targets(s.ids, offsets, context), lengths
        )
        if not s.lossless:
            notes[f"{s.name}_bpb"] = s.lossy_note()
    return replace(final, metrics=metrics, notes=notes)


def long_loss(model: GPT, corpus: Corpus, windows: EvalWindows, context: int, device: str) -> tuple[float, dict]:
    """ctx2x_loss: the loss on the validation split's windows of LONG x context. Where there is none, NaN and a
    note, not an error: a learned position table's wall, or a split too short."""
    long = LONG * context
    if model.pos_emb is not None:
        return math.nan, {"ctx2x_loss": f"wall: the learned position table has {context} rows, {long} needed"}
    if not len(windows.long):
        need = f"{long + 1} needed"
        return math.nan, {"ctx2x_loss": f"short: the validation split has {len(corpus.val)} tokens, {need}"}
    try:
        return mean_loss(window_losses(model, [(corpus.val, windows.long)], long, device)[0], long), {}
    except ContextWall as e:  # a plugin's position component with a wall of its own
        return math.nan, {"ctx2x_loss": f"wall: {e}"}


def oom_error(e: BaseException, step: int, device: str) -> str:
    """The record's error for a run that ran out of memory. It frees what CUDA's allocator holds, for the next
    run. Any other error is raised again: it is a defect, not a run's outcome."""
    if not is_oom(e):
        raise e
    if device == "cuda":
        torch.cuda.empty_cache()
    return f"out of memory at step {step}: {(str(e).splitlines() or [type(e).__name__])[0]}"


def finite(point: dict) -> bool:
    """Both losses of a curve point are finite."""
    return math.isfinite(point["train_loss"]) and math.isfinite(point["val_loss"])


@dataclass
class Outcome:
    """What a run's loop leaves. The steps it took, its curve, and its final losses or its error."""

    steps_done: int = 0
    curve: list[dict] = field(default_factory=list)
    final: FinalLosses = field(default_factory=FinalLosses)
    error: str = ""  # an out-of-memory error that ended the run
    spikes: int = 0
    train_secs: float = 0.0  # TrainClock
    timing: dict = field(default_factory=lambda: dict.fromkeys(("startup", "curve_evals", "final_eval"), 0.0))

    def timed(self, part: str, since: float) -> None:
        """Add the seconds since `since` (time.perf_counter) to timing[part]."""
        self.timing[part] += time.perf_counter() - since

    def measured(self, part: str, evaluate, *args):
        """evaluate(*args), its seconds added to timing[part]."""
        since = time.perf_counter()
        value = evaluate(*args)
        self.timed(part, since)
        return value

    def close(self, started: float, t0: float) -> float:
        """The run's seconds since t0 (time.perf_counter). Into timing go its training steps (train_secs), its
        start (Unix time) and what no part accounts for ("other")."""
        secs = time.perf_counter() - t0
        self.timing.update(train_steps=self.train_secs, started=started)
        parts = ("startup", "train_steps", "curve_evals", "final_eval")
        self.timing["other"] = secs - sum(self.timing[k] for k in parts)
        return secs

    @property
    def diverged(self) -> bool:
        """Neither failed nor ended with finite losses. A loss, an update or an evaluation was not finite."""
        return not (self.error or self.final.finite)


def check_run(model_cfg: ModelConfig, corpus: Corpus, cfg: TrainConfig) -> tuple[ModelConfig, str]:
    """The settings checked against the corpus and the device. Returns the model, with the tokenizer's
    vocabulary, and the device to train on."""
    cfg.validate()
    model_cfg = replace(model_cfg, vocab_size=corpus.tokenizer.vocab_size)
    check_length(corpus, model_cfg.context)
    device = resolve_device(cfg.device)
    check_memory(model_cfg, cfg, device)
    return model_cfg, device


def build(
    model_cfg: ModelConfig, cfg: TrainConfig, seed: int, init: str, device: str
) -> tuple[GPT, torch.nn.Module, AdamW | torch.optim.AdamW]:
    """The model from its weight-init stream, and the optimizer. Also the module each step calls, compiled or not."""
    torch.manual_seed(stream_seed(seed, init))
    model = GPT(model_cfg).to(device)
    torch.manual_seed(stream_seed(seed, "dropout"))  # from here on, torch's generator serves dropout alone
    step_fn = model
    if compiling.decide([model_cfg], cfg, device, torch.get_num_threads())[0] == "on":  # an ablation's: on or off
        compiling.share_cache()
        step_fn = torch.compile(model)
    return model, step_fn, make_optimizer(model, cfg, device)


def run_result(
    model_cfg: ModelConfig,
    corpus: Corpus,
    cfg: TrainConfig,
    windows: EvalWindows,
    out: Outcome,
    *,
    seed: int,
    threads: int,
    device: str,
    secs: float,
) -> RunResult:
    """The run's record."""
    tokens = out.steps_done * cfg.batch_size * model_cfg.context
    points = [c for c in out.curve if math.isfinite(c["val_loss"])]
    best = min(points, key=lambda c: c["val_loss"]) if points else {"val_loss": math.nan, "step": 0}
    val = out.final.val_loss
    flops = float(step_flops(model_cfg, cfg.batch_size) * out.steps_done)
    peak_rate, peak_name = peak(device, threads)
    rate = flops / out.train_secs if out.train_secs > 0 else math.nan
    names = evaluation.metric_names(s.name for s in corpus.evals)
    metrics = {name: out.final.metrics.get(name, math.nan) for name in names}  # NaN for a run that ended early
    return RunResult(
        metrics=metrics,
        metric_notes=out.final.notes,
        params=param_counts(model_cfg)["total"],
        train_loss=out.final.train_loss,
        val_loss=val,
        val_tokens=len(windows.val_final) * model_cfg.context,
        val_loss_tune=out.final.val_loss_tune,
        val_loss_test=out.final.val_loss_test,
        val_bpc=bits_per_char(val, corpus.val_tokens_per_char),
        val_ppl=math.exp(val) if math.isfinite(val) and val < 700 else math.nan,
        best_val_loss=best["val_loss"],
        best_step=best["step"],
        steps_done=out.steps_done,
        tokens_seen=tokens,
        epochs=tokens / len(corpus.train),
        tokens_per_s=tokens / out.train_secs if out.train_secs > 0 else 0.0,
        diverged=out.diverged,
        lossless=corpus.lossless,
        spikes=out.spikes,
        error=out.error,
        flops=flops,
        mfu=rate / peak_rate if math.isfinite(peak_rate) and peak_rate > 0 else math.nan,
        peak_flops=peak_rate,
        peak=peak_name,
        curve=out.curve,
        timing=out.timing,
        seed=seed,
        threads=threads,
        device=device,
        secs=secs,
    )


def pin_threads(cfg: TrainConfig, threads: int | None = None) -> int:
    """torch's threads for a run, pinned before it trains. CPU results depend on them."""
    threads = threads or cfg.threads or default_threads()
    torch.set_num_threads(threads)
    return threads


def train_run(
    model_cfg: ModelConfig,
    corpus: Corpus,
    cfg: TrainConfig,
    seed: int,
    progress=None,
    threads: int | None = None,
    init: str = "init",
    sync_every: int | None = None,
) -> tuple[RunResult, GPT]:
    """Train one model and evaluate it. progress(step, loss) is called after every step whose loss is read.
    init names the weight-init stream: "init", or "placebo" for the placebo row. sync_every: steps between
    host reads of the loss (LossReader); None is sync_interval(device). Any value gives the same losses.
    A loss, update or evaluation that is not finite ends the run as diverged. An out-of-memory error ends
    it with its message. Neither raises."""
    started, t0, out = time.time(), time.perf_counter(), Outcome()
    model_cfg, device = check_run(model_cfg, corpus, cfg)
    threads = pin_threads(cfg, threads)
    model, step_fn, opt = build(model_cfg, cfg, seed, init, device)
    reader = LossReader(sync_every or sync_interval(device), device, cfg.warmup_steps)
    context = model_cfg.context
    batches = BatchStream(corpus.train, context, cfg.batch_size, stream_seed(seed, "batches"))
    windows = EvalWindows.of(corpus, context, cfg)

    clock, step = TrainClock(), 0
    out.timed("startup", t0)
    try:
        for step in range(1, cfg.steps + 1):
            clock.start()
            set_lr(opt, lr_at(step - 1, cfg))
            x, y = batches.next()
            with _autocast(device):
                _, loss = step_fn(to_device(x, device), to_device(y, device))
            if not (reader.keep(step, loss) and update(model, opt, loss, cfg.grad_clip)):
                break
            out.steps_done = step
            evaluating = step % cfg.eval_every == 0 or step == cfg.steps
            if not reader.due(step, evaluating):
                continue
            first_bad = reader.read(step)
            clock.stop()
            if first_bad is not None:
                out.steps_done = first_bad  # the steps before the first loss that is not finite
                break
            if progress is not None:
                progress(step, reader.last)
            if evaluating:
                point = out.measured("curve_evals", curve_point, model, corpus, windows, context, step, device)
                out.curve.append(point)
                if not finite(point):
                    break
        else:  # no break: every loss, update and evaluation was finite
            out.final = out.measured("final_eval", final_losses, model, corpus, windows, context, out.curve[-1], device)
    except (RuntimeError, MemoryError) as e:
        out.error = oom_error(e, step, device)  # any other error is raised again
    release(opt)  # the model leaves with a storage per parameter (a checkpoint saves it)
    out.spikes, out.train_secs = reader.spikes.count, clock.secs
    secs = out.close(started, t0)
    return run_result(model_cfg, corpus, cfg, windows, out, seed=seed, threads=threads, device=device, secs=secs), model
