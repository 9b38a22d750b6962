"""One training run: (ModelConfig, corpus, TrainConfig, seed) -> RunResult.

Everything random comes from the seed through separate streams (weight init,
batch order, dropout), so that two variants trained with the same seed differ
only in their architecture, and the same run twice on a CPU gives bitwise
identical losses. The evaluation windows come from the data alone: every run,
whatever its seed, is measured on the same tokens.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from .config import DEVICES, ModelConfig, TrainConfig, param_counts  # noqa: F401 (TrainConfig re-exported)
from .data import BatchStream, Corpus, bits_per_char, check_length, eval_offsets, subset, windows
from .errors import UserError
from .model import GPT

# "placebo" is a second weight-init stream: the placebo row is its first row again with only this changed.
STREAMS = ("init", "batches", "dropout", "placebo")
EVAL_CHUNK = 64  # windows per forward pass when evaluating
# On CUDA the loss stays on the GPU and is read back every SYNC_EVERY steps and at every evaluation: reading it
# (loss.item()) stalls the host until the GPU has caught up, once per step, which for a small model costs more
# than the step. A run whose loss turns NaN or infinite is still caught within SYNC_EVERY steps, and its record
# names the last step whose loss was finite, as on a CPU. Off CUDA the loss is read, and checked, every step.
SYNC_EVERY = 25
ADAMW_EPS = 1e-8
SPIKE = 1.0  # nats: a training loss this far above its running minimum, after warm-up, is a loss spike


class Spikes:
    """Counts loss spikes: after warm-up, each time the training loss goes from within SPIKE nats of its
    running minimum to more than SPIKE above it. A run that spikes and recovers still trains to a loss; the
    spike says its learning rate is at the edge of stable."""

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
    curve: list[dict] = field(default_factory=list)  # {step, train_loss, val_loss} per evaluation

    def to_dict(self) -> dict:
        return asdict(self)


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
    """The memory a run on this device can have at most: the machine's RAM, or the GPU's; None when unknown."""
    try:
        if device == "cuda":
            return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        if device == "cpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError, RuntimeError):
        pass
    return None


def check_memory(model_cfg: ModelConfig, cfg: TrainConfig, device: str) -> None:
    """Refuse, naming the flags, a run whose model or one training step cannot fit in the device's memory at all.
    A rough lower bound (float32 weights, gradients, AdamW's moments, logits and activations): what passes may
    still run out of memory, and is then recorded as a failed run."""
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
    """Linear warmup to the peak, then cosine decay to min_lr_ratio of it at the last step."""
    warmup = min(cfg.warmup_steps, cfg.steps)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


class AdamW:
    """Adam with decoupled weight decay, computed as torch.optim.AdamW computes it.

    Used on the CPU, because the first use of torch.optim imports torch's compiler stack
    (torch._dynamo, about 800 modules): in a fresh process on this project's 2-core CPU
    machine (torch 2.13.0 CPU build, measured while another job loaded it), constructing a
    torch.optim.AdamW and taking its first step took 0.8-1.4 s (median 1.3 s over 5
    processes; constructing alone, 1.8-1.9 s in 3 earlier ones), against 1-2 ms for this
    class, while a smoke run trains in about a second. tests/test_train.py checks it against
    torch.optim.AdamW (plain, foreach and fused). On CUDA make_optimizer uses torch's fused
    AdamW instead.
    """

    def __init__(self, groups: list[dict], lr: float, betas: tuple[float, float], eps: float = 1e-8):
        self.param_groups = [{"lr": lr, **g, "params": list(g["params"])} for g in groups]
        self.betas, self.eps, self.t = betas, eps, 0
        self.exp_avg = [[torch.zeros_like(p) for p in g["params"]] for g in self.param_groups]
        self.exp_avg_sq = [[torch.zeros_like(p) for p in g["params"]] for g in self.param_groups]

    @torch.no_grad()
    def step(self) -> None:
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


def param_groups(model: GPT, cfg: TrainConfig) -> list[dict]:
    """Weight decay on matrices only: not on biases, norms or gains."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": matrices, "weight_decay": cfg.weight_decay}, {"params": others, "weight_decay": 0.0}]


def torch_adamw(groups: list[dict], cfg: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """torch's AdamW with the settings of the hand-written one: fused (one kernel for every parameter) or foreach."""
    kind = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=ADAMW_EPS, **kind)


def make_optimizer(model: GPT, cfg: TrainConfig, device: str = "cpu") -> AdamW | torch.optim.AdamW:
    """AdamW: torch's fused one on CUDA, where its start-up cost is lost in the run's; the hand-written one elsewhere."""
    groups = param_groups(model, cfg)
    if device == "cuda":
        return torch_adamw(groups, cfg, fused=True)
    return AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=ADAMW_EPS)


def to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """A batch onto the device. On CUDA through pinned memory without blocking: a copy from pageable memory
    would wait for the GPU to finish its queue, a host sync every step."""
    if device == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _autocast(device: str):
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: GPT, ids: np.ndarray, offsets: np.ndarray, context: int, device: str) -> float:
    """Mean loss in nats per token over the windows starting at offsets (every window has context targets)."""
    model.eval()
    total = 0.0
    for start in range(0, len(offsets), EVAL_CHUNK):
        chunk = offsets[start : start + EVAL_CHUNK]
        x, y = windows(ids, chunk, context)
        with _autocast(device):
            _, loss = model(x.to(device), y.to(device))
        total += loss.item() * len(chunk)
    model.train()
    return total / len(offsets)


def is_oom(e: BaseException) -> bool:
    """Out of memory: CUDA's error, the CPU allocator's "can't allocate memory", numpy's MemoryError."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def curve_windows(cfg: TrainConfig, windows: int) -> int:
    """The validation windows of an intermediate evaluation (the curve, and so best_val_loss): --eval-batches
    batches of the final evaluation's `windows`, or all of them when they are fewer (data.subset)."""
    return min(cfg.eval_batches * cfg.batch_size, windows)


def update_overflowed(e: RuntimeError) -> bool:
    """torch's error for a step size or weight-decay factor beyond float32 (lr about 3.4e37 and up): the run diverged."""
    return "without overflow" in str(e)


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
    """Train one model and evaluate it. progress(step, loss) is called after every step whose loss is read:
    every step off CUDA, every sync_every steps and at evaluations on CUDA.
    init names the weight-init stream: "init", or "placebo" for the placebo row.
    sync_every: steps between host reads of the loss; None is sync_interval(device) (SYNC_EVERY on CUDA, 1
    elsewhere). Any value gives the same losses; it changes only when a diverged run is noticed.

    A loss that becomes NaN or infinite ends the run as diverged (steps_done: the steps before that loss), and
    an out-of-memory error ends it with its message; neither raises. Read every step, the loss stops the run
    before its update; read every N steps, up to N - 1 more steps run before the run stops, so a diverged run's
    model may hold non-finite weights (it is never evaluated).
    """
    cfg.validate()
    model_cfg = replace(model_cfg, vocab_size=corpus.tokenizer.vocab_size)
    check_length(corpus, model_cfg.context)
    device = resolve_device(cfg.device)
    check_memory(model_cfg, cfg, device)
    threads = threads or cfg.threads or default_threads()
    torch.set_num_threads(threads)  # pinned per run: CPU results depend on it
    t0 = time.perf_counter()

    torch.manual_seed(stream_seed(seed, init))
    model = GPT(model_cfg).to(device)
    torch.manual_seed(stream_seed(seed, "dropout"))  # from here on, torch's generator serves dropout alone
    step_fn = torch.compile(model) if cfg.compile else model
    opt = make_optimizer(model, cfg, device)
    every = sync_every or sync_interval(device)
    if every < 1:
        raise ValueError(f"sync_every must be at least 1, got {every}")
    losses = torch.empty(every, device=device) if every > 1 else None  # the losses not yet read, on the device
    context = model_cfg.context
    batches = BatchStream(corpus.train, context, cfg.batch_size, stream_seed(seed, "batches"))
    # The final evaluation: the same tokens for every run. Intermediate ones: a fixed, smaller subset of them.
    val_final = eval_offsets(len(corpus.val), context, cfg.eval_tokens)
    train_final = eval_offsets(len(corpus.train), context, cfg.eval_tokens)
    val_windows = subset(val_final, cfg.eval_batches * cfg.batch_size)
    train_windows = subset(train_final, cfg.eval_batches * cfg.batch_size)

    curve: list[dict] = []
    nan = float("nan")
    final = {"train_loss": nan, "val_loss": nan, "val_loss_tune": nan, "val_loss_test": nan}
    spikes = Spikes(cfg.warmup_steps)
    diverged, error, step, steps_done = False, "", 0, 0
    train_secs, ts, pending = 0.0, None, 0  # ts: when the steps not yet timed began; pending: losses not yet read
    try:
        for step in range(1, cfg.steps + 1):
            if ts is None:
                ts = time.perf_counter()
            for group in opt.param_groups:
                group["lr"] = lr_at(step - 1, cfg)
            x, y = batches.next()
            with _autocast(device):
                _, loss = step_fn(to_device(x, device), to_device(y, device))
            if losses is None:
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    diverged = True
                    break
                spikes.add(step, loss_value)
            else:
                losses[pending] = loss.detach()
                pending += 1
            loss.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            try:
                opt.step()
            except RuntimeError as e:  # a finite lr whose update overflows float32 (lr / (1 - beta1) > 3.4e38)
                if not update_overflowed(e):
                    raise
                diverged = True  # as a NaN loss would end it: the update is infinite
                break
            opt.zero_grad()  # torch.optim.AdamW (CUDA) too: None grads by default
            steps_done = step
            evaluating = step % cfg.eval_every == 0 or step == cfg.steps
            if losses is not None:
                if not (evaluating or step % every == 0):
                    continue
                read = losses[:pending].tolist()  # the host waits here for the GPU: once per `every` steps
                train_secs += time.perf_counter() - ts
                ts = None
                bad = next((i for i, v in enumerate(read) if not math.isfinite(v)), None)
                if bad is not None:
                    steps_done = step - pending + bad  # the steps before the first non-finite loss
                    diverged = True
                    break
                for i, v in enumerate(read):
                    spikes.add(step - pending + 1 + i, v)
                loss_value, pending = read[-1], 0
            else:
                train_secs += time.perf_counter() - ts
                ts = None
            if progress is not None:
                progress(step, loss_value)
            if evaluating:
                tl = evaluate(model, corpus.train, train_windows, context, device)
                vl = evaluate(model, corpus.val, val_windows, context, device)
                curve.append({"step": step, "train_loss": tl, "val_loss": vl})
                if not (math.isfinite(tl) and math.isfinite(vl)):
                    diverged = True
                    break
        if not diverged:  # the final losses, on the full fixed sets (the last curve point when that is all of them)
            last = curve[-1]
            final["train_loss"] = (
                evaluate(model, corpus.train, train_final, context, device)
                if len(train_final) > len(train_windows)
                else last["train_loss"]
            )
            # the two halves, alternate windows, each evenly spread over the split; val_loss is all of them
            tune, test = val_final[0::2], val_final[1::2]
            final["val_loss_tune"] = evaluate(model, corpus.val, tune, context, device)
            final["val_loss_test"] = evaluate(model, corpus.val, test, context, device) if len(test) else nan
            test_sum = final["val_loss_test"] * len(test) if len(test) else 0.0
            final["val_loss"] = (final["val_loss_tune"] * len(tune) + test_sum) / len(val_final)
            diverged = not (math.isfinite(final["train_loss"]) and math.isfinite(final["val_loss"]))
    except (RuntimeError, MemoryError) as e:
        if not is_oom(e):
            raise
        error = f"out of memory at step {step}: {(str(e).splitlines() or [type(e).__name__])[0]}"
        if device == "cuda":
            torch.cuda.empty_cache()

    tokens = steps_done * cfg.batch_size * context
    last = final if not (diverged or error) else dict.fromkeys(final, nan)
    finite = [c for c in curve if math.isfinite(c["val_loss"])]
    best = min(finite, key=lambda c: c["val_loss"]) if finite else {"val_loss": nan, "step": 0}
    val = last["val_loss"]
    result = RunResult(
        seed=seed,
        params=param_counts(model_cfg)["total"],
        train_loss=last["train_loss"],
        val_loss=val,
        val_tokens=len(val_final) * context,
        val_loss_tune=last["val_loss_tune"],
        val_loss_test=last["val_loss_test"],
        val_bpc=bits_per_char(val, corpus.val_tokens_per_char),
        val_ppl=math.exp(val) if math.isfinite(val) and val < 700 else nan,
        best_val_loss=best["val_loss"],
        best_step=best["step"],
        steps_done=steps_done,
        tokens_seen=tokens,
        epochs=tokens / len(corpus.train),
        tokens_per_s=tokens / train_secs if train_secs > 0 else 0.0,
        secs=time.perf_counter() - t0,
        threads=threads,
        device=device,
        diverged=diverged,
        lossless=corpus.lossless,
        spikes=spikes.count,
        error=error,
        curve=curve,
    )
    return result, model
