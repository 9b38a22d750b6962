"""Small models on one CUDA GPU: step times against transformers, concurrent runs, ablation wall times.

    python bench/bench_gpu.py --out gpu.json              # all three parts; starts nothing past 290 s (--budget)
    python bench/bench_gpu.py --quick --out gpu.json      # 170 s: fewer steps, no compiled rows, no 7x3 ablation
    python bench/bench_gpu.py --parts b --levels 1,2,4,8  # one part

Order: (a) eager, (b), (c), then (a) compiled, so that what sets the defaults comes first. Not yet run on a
GPU: its time on an H100/H200 is a target, not a measurement.

(a) Training step time (ms/step, tokens/s) at the configs/mini.toml shape (dim 256, 8 layers, context 128,
    batch 32, 4096-token vocabulary, random tokens): modern-gpt classic and all-modern against transformers'
    GPT2LMHeadModel and LlamaForCausalLM built from the same shapes (random init, nothing downloaded), all in
    bf16 autocast with torch's fused AdamW and gradient clipping, eager and torch.compile. Also the whole
    training loop (train.train_run on a random-token corpus) with the loss read every step and every
    train.SYNC_EVERY steps, and classic with the hand-written AdamW.
(b) Total tokens/s of 1, 2, 4 and 8 concurrent shakespeare-config runs (train_run, 600 steps each, separate
    processes started together after a warm-up), with the GPU's busy percentage sampled meanwhile: the table
    that sets executors/local.py's RUNS_PER_GPU.
(c) Wall time of `modern-gpt ablate --seeds 3 --smoke --device cuda --jobs K` and of a 7 x 3 shakespeare-config
    ablation (--no-placebo), at --jobs 1 and at the best concurrency of (b) (or --best).

--data FILE gives (b) and (c) a corpus (default: the built-in tinyshakespeare excerpt). --budget caps the
whole script: a part that would start past it is skipped and named. Without a CUDA GPU the script prints one
line and exits with status 0. --cpu-dry-run runs every part at toy sizes on the CPU to test this script;
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from common import ablate_command

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # modern_gpt from this checkout, installed or not
T0 = time.perf_counter()
SHAKESPEARE_STEPS = 600  # configs/shakespeare.toml's steps: what one ablation run trains


def elapsed() -> float:
    return time.perf_counter() - T0


# ---------------------------------------------------------------------------
# (a) step times
# ---------------------------------------------------------------------------
def mini_config(components=()):
    from modern_gpt.core.settings import resolve

    s = resolve("mini", False, {})
    return replace(s.model, vocab_size=s.data.vocab_size).with_components(components), s.train


def hf_model(cfg):
    """The transformers class that holds cfg exactly, from the config.json that `modern-gpt export` writes."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from modern_gpt.hf.export import target_for

    target = target_for(cfg)
    d = target.config(cfg, target)
    for key in ("torch_dtype", "architectures"):
        d.pop(key)
    return target.name, AutoModelForCausalLM.from_config(AutoConfig.for_model(d.pop("model_type"), **d))


def time_steps(model, logits_of, cfg, train, device, steps, warmup, optimizer="fused", compile_=False):
    """ms per training step (forward, backward, clipping, AdamW) on random tokens, and the warm-up seconds."""
    import torch
    import torch.nn.functional as F

    from modern_gpt.run.train import AdamW, _autocast, param_groups, torch_adamw

    model = model.to(device).train()
    groups = param_groups(model, train)
    if optimizer == "fused":
        opt = torch_adamw(groups, train, fused=True)
    else:
        opt = AdamW(groups, lr=train.lr, betas=(train.beta1, train.beta2))
    fn = torch.compile(model) if compile_ else model
    g = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (4, train.batch_size, cfg.context + 1), generator=g)
    batches = [(b[:, :-1].contiguous().to(device), b[:, 1:].contiguous().to(device)) for b in tokens]

    def step(i):
        x, y = batches[i % len(batches)]
        with _autocast(device):
            logits = logits_of(fn, x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        opt.step()
        opt.zero_grad()  # None grads: torch.optim's default, and the hand-written AdamW's only way
        return loss

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for i in range(warmup):
        step(i)
    sync()
    warm = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(steps):
        loss = step(i)
    sync()
    ms = (time.perf_counter() - t) / steps * 1e3
    assert torch.isfinite(loss).item(), "the loss is not finite"
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    return ms, warm, peak


def random_corpus(vocab_size: int, n_train: int, n_val: int):
    """A Corpus of uniformly random token ids: train_run at a given vocabulary without a tokenizer to train."""
    import numpy as np

    from modern_gpt.data.corpus import Corpus

    rng = np.random.default_rng(0)
    tokenizer = type("RandomTokenizer", (), {"vocab_size": vocab_size})()
    train, val = (rng.integers(0, vocab_size, n, dtype=np.int32) for n in (n_train, n_val))
    return Corpus("random tokens", "random", tokenizer, train, val, n_val)


def part_a(args, device, compiled: bool, rows: list, skipped: list) -> None:
    import torch

    steps, warmup = (50, 10) if args.quick else (100, 20)
    if args.cpu_dry_run:
        steps, warmup = 2, 1
    classic, modern, llama_shape, train = part_a_shapes(args.cpu_dry_run)
    mode = "compile" if compiled else "eager"
    for name, build, logits_of, cfg, optimizer in step_candidates(classic, modern, llama_shape, compiled):
        if compiled and args.budget - elapsed() < 60:
            skipped.append(f"(a) {name}, compile: the --budget was spent")
            continue
        torch.manual_seed(0)
        if compiled:
            torch._dynamo.reset()  # each model compiled from a clean cache
        model = build()
        params = sum(p.numel() for p in model.parameters())
        try:
            ms, warm, peak = time_steps(model, logits_of, cfg, train, device, steps, warmup, optimizer, compiled)
        except Exception as e:  # noqa: BLE001 - a row that fails is reported, the others still run
            rows.append(
                {"part": "a", "model": name, "mode": mode, "params": params, "error": f"{type(e).__name__}: {e}"[:300]}
            )
            print(f"(a) {name} {mode}: failed: {rows[-1]['error']}", flush=True)
            continue
        rows.append(
            {
                "part": "a",
                "model": name,
                "mode": mode,
                "params": params,
                "ms_per_step": ms,
                "tokens_per_s": train.batch_size * classic.context / ms * 1e3,
                "warmup_s": warm,
                "peak_mib": peak,
            }
        )
        print(f"(a) {name} {mode}: {ms:.2f} ms/step (warm-up {warm:.1f} s)", flush=True)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    if not compiled:
        time_loop(args, device, classic, train, rows)


def part_a_shapes(dry: bool):
    """(a)'s three model shapes (classic, all-modern, all-modern without QK-norm) and its training settings."""
    from modern_gpt.core.components import COMPONENTS

    classic, train = mini_config()
    modern, _ = mini_config(COMPONENTS)
    llama_shape, _ = mini_config(tuple(c for c in COMPONENTS if c != "qk_norm"))
    if dry:  # toy sizes
        classic, modern, llama_shape = (replace(c, dim=32, layers=1, heads=2) for c in (classic, modern, llama_shape))
        train = replace(train, batch_size=2)
    return classic, modern, llama_shape, train


def step_candidates(classic, modern, llama_shape, compiled: bool) -> list[tuple]:
    """(name, build the model, its logits, its shape, the optimizer) for each row of (a)."""
    from modern_gpt.model.gpt import GPT

    def ours(fn, x):
        return fn(x)[0]

    def theirs(fn, x):
        return fn(input_ids=x).logits

    def hf(cfg, name):
        built, model = hf_model(cfg)
        assert built == name, f"{cfg.components} exports as {built}, not {name}"
        return model

    candidates = [
        ("modern-gpt classic", lambda: GPT(classic), ours, classic, "fused"),
        ("modern-gpt all-modern", lambda: GPT(modern), ours, modern, "fused"),
        ("transformers GPT2LMHeadModel", lambda: hf(classic, "GPT2LMHeadModel"), theirs, classic, "fused"),
        (
            "transformers LlamaForCausalLM (no QK-norm)",
            lambda: hf(llama_shape, "LlamaForCausalLM"),
            theirs,
            llama_shape,
            "fused",
        ),
    ]
    if not compiled:
        candidates.insert(
            2, ("modern-gpt all-modern without QK-norm", lambda: GPT(llama_shape), ours, llama_shape, "fused")
        )
        candidates.insert(1, ("modern-gpt classic, hand-written AdamW", lambda: GPT(classic), ours, classic, "ours"))
    return candidates


def time_loop(args, device, classic, train, rows: list) -> None:
    """The whole loop: train_run, data from the host, the loss read every step or every SYNC_EVERY steps."""
    from modern_gpt.run.train import SYNC_EVERY, train_run

    tokens_per_step = train.batch_size * classic.context
    loop_steps = 20 if args.cpu_dry_run else (100 if args.quick else 200)
    corpus = random_corpus(classic.vocab_size, 400_000, 20_000)
    cfg = replace(train, device=device, steps=loop_steps, eval_every=loop_steps, eval_batches=1, eval_tokens=4096)
    best: dict[int, float] = {}
    try:
        train_run(classic, corpus, replace(cfg, steps=10, eval_every=10), seed=0)  # warm-up: CUDA context, allocator
        for every in (1, SYNC_EVERY) * 2:  # alternated, the faster of two each: no order effect
            result, _ = train_run(classic, corpus, cfg, seed=0, sync_every=every)
            best[every] = max(best.get(every, 0.0), result.tokens_per_s)
    except Exception as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"[:300]
        rows.append({"part": "a", "model": "train_run classic", "mode": "eager", "params": 0, "error": error})
        print(f"(a) train_run classic: failed: {rows[-1]['error']}", flush=True)
        return
    for every, label in ((1, "every step"), (SYNC_EVERY, f"every {SYNC_EVERY} steps (default)")):
        ms = tokens_per_step / best[every] * 1e3
        rows.append(
            {
                "part": "a",
                "model": f"train_run classic, loss read {label}",
                "mode": "eager",
                "params": result.params,
                "ms_per_step": ms,
                "tokens_per_s": best[every],
            }
        )
        print(f"(a) train_run classic, loss read {label}: {ms:.2f} ms/step", flush=True)


# ---------------------------------------------------------------------------
# (b) concurrent runs
# ---------------------------------------------------------------------------
def shakespeare_settings(data: str | None, device: str, dry: bool):
    from modern_gpt.core.settings import resolve

    overrides = {"data.path": data or None, "train.device": device}
    if dry:
        overrides.update({"model.dim": 32, "model.layers": 1, "train.eval_every": 5})
    return resolve("shakespeare", False, overrides)


def worker(spec: dict) -> None:
    """One run of (b): build, warm up, say ready, wait for go, train, report one JSON line."""
    import torch

    from modern_gpt.data.corpus import load_corpus
    from modern_gpt.run.train import train_run

    s = shakespeare_settings(spec["data"], spec["device"], spec["dry"])
    corpus = load_corpus(s.data)
    warm = replace(s.train, steps=20, eval_every=20, eval_tokens=2048)
    train_run(s.model, corpus, warm, seed=10_000 + spec["seed"], threads=spec["threads"])
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.time()
    result, _ = train_run(
        s.model, corpus, replace(s.train, steps=spec["steps"]), seed=spec["seed"], threads=spec["threads"]
    )
    end = time.time()
    peak = torch.cuda.max_memory_reserved() / 2**20 if spec["device"] == "cuda" else float("nan")
    print(
        json.dumps(
            {
                "start": start,
                "end": end,
                "tokens": result.tokens_seen,
                "tokens_per_s": result.tokens_per_s,
                "diverged": result.diverged,
                "error": result.error,
                "peak_reserved_mib": peak,
            }
        ),
        flush=True,
    )


class BusySampler:
    """The GPU's utilisation (percent of time a kernel ran), sampled every 0.25 s with nvidia-smi."""

    def __init__(self, device: str):
        self.samples: list[float] = []
        self.smi = shutil.which("nvidia-smi") if device == "cuda" else None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.25):
            try:
                out = subprocess.run(
                    [
                        self.smi,
                        "--query-gpu=utilization.gpu",
                        "--format=csv,noheader,nounits",
                        "--id=" + os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
                    ],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                self.samples.append(float(out.split()[0]))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return

    def __enter__(self):
        if self.smi:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else float("nan")


def readline(proc, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], max(0.0, timeout))
    if not ready:
        raise TimeoutError(f"no answer from a worker within {timeout:.0f} s")
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        proc.stderr_log.seek(0)
        raise RuntimeError(f"a worker ended: {proc.stderr_log.read()[-800:]}")
    return line.strip()


def part_b(args, device, env, tmp: Path, rows: list, skipped: list) -> None:
    from modern_gpt.run.train import default_threads

    steps = 40 if args.cpu_dry_run else (300 if args.quick else SHAKESPEARE_STEPS)
    for k in args.levels:
        left = args.budget - elapsed()
        if left < 30:
            skipped.append(f"(b) {k} concurrent runs: the --budget was spent")
            continue
        spec = {
            "data": args.data,
            "device": device,
            "dry": args.cpu_dry_run,
            "steps": steps,
            "threads": default_threads(k),
        }
        logs = [open(tmp / f"b-{k}-{i}.log", "w+") for i in range(k)]  # stderr: a full pipe would stall a worker
        procs = start_workers(spec, env, logs)
        try:
            rows.append(measure_workers(procs, device, time.perf_counter() + left, k, steps))
        except (TimeoutError, RuntimeError, ValueError) as e:
            rows.append({"part": "b", "runs": k, "steps": steps, "error": str(e)[:300]})
            print(f"(b) {k} concurrent runs: failed: {e}", flush=True)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
                for stream in (p.stdin, p.stdout):
                    stream.close()
            for log in logs:
                log.close()


def start_workers(spec: dict, env: dict, logs: list) -> list[subprocess.Popen]:
    """One worker process per log file, seeds 0, 1, ...; each says ready once warmed up."""
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps({**spec, "seed": i})],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
        )
        for i, log in enumerate(logs)
    ]
    for p, log in zip(procs, logs, strict=True):
        p.stderr_log = log
    return procs


def measure_workers(procs: list, device: str, deadline: float, k: int, steps: int) -> dict:
    """Every worker ready, then all told to go at once: (b)'s row of their total tokens/s and the GPU's busy share."""
    for p in procs:
        if readline(p, deadline - time.perf_counter()) != "ready":
            raise RuntimeError("a worker said something other than ready")
    with BusySampler(device) as busy:
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        done = [json.loads(readline(p, deadline - time.perf_counter())) for p in procs]
    span = max(d["end"] for d in done) - min(d["start"] for d in done)
    total = sum(d["tokens"] for d in done) / span
    print(f"(b) {k} concurrent runs: {total:,.0f} tokens/s in all, GPU busy {busy.mean:.0f}%", flush=True)
    return {
        "part": "b",
        "runs": k,
        "steps": steps,
        "total_tokens_per_s": total,
        "mean_run_tokens_per_s": sum(d["tokens_per_s"] for d in done) / k,
        "span_s": span,
        "gpu_busy_pct": busy.mean,
        "peak_reserved_mib_per_run": max(d["peak_reserved_mib"] for d in done),
        "failed": sum(bool(d["diverged"] or d["error"]) for d in done),
    }


def best_level(rows: list) -> int | None:
    measured = [r for r in rows if r["part"] == "b" and "total_tokens_per_s" in r and not r["failed"]]
    return max(measured, key=lambda r: r["total_tokens_per_s"])["runs"] if measured else None


# ---------------------------------------------------------------------------
# (c) ablations
# ---------------------------------------------------------------------------
def part_c(args, device, env, best: int, tmp: Path, rows: list, skipped: list) -> None:
    dry = ["--steps", "4", "--eval-every", "2", "--eval-tokens", "1024"] if args.cpu_dry_run else []
    data = ["--data", args.data] if args.data else []
    plans = [("smoke", ["--smoke"] + dry)]
    if not args.quick:
        plans.append(("shakespeare 7x3", ["--config", "shakespeare", "--no-placebo"] + data + dry))
    levels = sorted({1, best}, reverse=True)  # the best first: the part that sets a default
    for name, flags in plans:
        for jobs in levels:
            left = args.budget - elapsed()
            if left < 20:
                skipped.append(f"(c) {name} --jobs {jobs}: the --budget was spent")
                continue
            out = tmp / f"c-{name.split()[0]}-{jobs}"
            cmd = ablate_command(out, "--device", device, "--jobs", jobs, *flags)
            t = time.perf_counter()
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left)
            except subprocess.TimeoutExpired:
                rows.append({"part": "c", "ablation": name, "jobs": jobs, "error": f"past the --budget ({left:.0f} s)"})
                print(f"(c) {name} --jobs {jobs}: stopped at the --budget", flush=True)
                continue
            wall = time.perf_counter() - t
            if proc.returncode != 0:
                rows.append({"part": "c", "ablation": name, "jobs": jobs, "error": proc.stderr[-300:]})
                print(f"(c) {name} --jobs {jobs}: failed:\n{proc.stderr[-800:]}", flush=True)
                continue
            with open(out / "runs.csv", newline="") as f:
                done = list(csv.DictReader(f))
            rows.append(
                {
                    "part": "c",
                    "ablation": name,
                    "jobs": jobs,
                    "runs": len(done),
                    "wall_s": wall,
                    "mean_run_s": sum(float(r["secs"]) for r in done) / len(done),
                    "failed": sum(r["diverged"] == "True" or bool(r["error"]) for r in done),
                }
            )
            print(f"(c) {name} --jobs {jobs}: {len(done)} runs in {wall:.1f} s", flush=True)
    for name, _ in plans:
        one = [r for r in rows if r["part"] == "c" and r["ablation"] == name and r.get("jobs") == 1 and "wall_s" in r]
        for r in rows:
            if r["part"] == "c" and r["ablation"] == name and "wall_s" in r and one:
                r["speedup_vs_jobs_1"] = one[0]["wall_s"] / r["wall_s"]


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------
def fmt(x, spec: str) -> str:
    return "" if x is None or x != x else format(x, spec)


def table(rows: list, machine: dict, skipped: list) -> str:
    lines = [
        f"{machine['gpu']}, torch {machine['torch']} (CUDA {machine['cuda']}), transformers "
        f"{machine['transformers']}, {machine['cpus']} CPUs, python {machine['python']}",
        "",
    ]
    a = [r for r in rows if r["part"] == "a"]
    if a:
        lines.append("(a) training step at the mini shape (bf16 autocast, fused AdamW, batch 32 x 128 tokens)")
        lines.append(
            f"  {'model':<56} {'mode':<8} {'params':>10} {'ms/step':>8} {'tokens/s':>10} {'warm-up s':>9} {'peak MiB':>8}"
        )
        for r in a:
            if "error" in r:
                lines.append(f"  {r['model']:<56} {r['mode']:<8} failed: {r['error'][:60]}")
                continue
            lines.append(
                f"  {r['model']:<56} {r['mode']:<8} {r['params']:>10,} {r['ms_per_step']:>8.2f} "
                f"{r['tokens_per_s']:>10,.0f} {fmt(r.get('warmup_s'), '.1f'):>9} {fmt(r.get('peak_mib'), ',.0f'):>8}"
            )
        lines.append("")
    b = [r for r in rows if r["part"] == "b"]
    if b:
        lines.append("(b) concurrent shakespeare-config runs on one GPU (separate processes)")
        lines.append(
            f"  {'runs':>4} {'steps':>5} {'tokens/s, all':>14} {'per run':>9} {'x one run':>9} {'GPU busy %':>10} {'MiB/run':>8}"
        )
        one = next((r for r in b if r["runs"] == 1 and "total_tokens_per_s" in r), None)
        for r in b:
            if "error" in r:
                lines.append(f"  {r['runs']:>4} {r['steps']:>5} failed: {r['error'][:70]}")
                continue
            gain = r["total_tokens_per_s"] / one["total_tokens_per_s"] if one else None
            lines.append(
                f"  {r['runs']:>4} {r['steps']:>5} {r['total_tokens_per_s']:>14,.0f} {r['mean_run_tokens_per_s']:>9,.0f} "
                f"{fmt(gain, '.2f'):>9} {fmt(r['gpu_busy_pct'], '.0f'):>10} {fmt(r['peak_reserved_mib_per_run'], ',.0f'):>8}"
                + (f"  ({r['failed']} failed)" if r["failed"] else "")
            )
        best = best_level(rows)
        if best:
            lines.append(f"  best: {best} runs at once (executors/local.py's RUNS_PER_GPU)")
        lines.append("")
    c = [r for r in rows if r["part"] == "c"]
    if c:
        lines.append(f"(c) modern-gpt ablate --seeds 3 --device {machine['device']}, wall time")
        lines.append(f"  {'ablation':<16} {'--jobs':>6} {'runs':>5} {'wall s':>8} {'s/run':>6} {'speed-up':>8}")
        for r in c:
            if "error" in r:
                lines.append(f"  {r['ablation']:<16} {r['jobs']:>6} failed: {r['error'][:70]}")
                continue
            lines.append(
                f"  {r['ablation']:<16} {r['jobs']:>6} {r['runs']:>5} {r['wall_s']:>8.1f} {r['mean_run_s']:>6.2f} "
                f"{fmt(r.get('speedup_vs_jobs_1'), '.2f'):>8}" + (f"  ({r['failed']} failed)" if r["failed"] else "")
            )
        lines.append("")
    for s in skipped:
        lines.append(f"skipped: {s}")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the rows and the machine as JSON here")
    parser.add_argument(
        "--quick", action="store_true", help="under 3 minutes: fewer steps, no compile rows, no 7x3 ablation"
    )
    parser.add_argument("--parts", default="a,b,c", help="which parts: a, b, c (default a,b,c)")
    parser.add_argument("--no-compile", action="store_true", help="(a) without the torch.compile rows")
    parser.add_argument("--levels", default="1,2,4,8", help="(b) the numbers of concurrent runs")
    parser.add_argument("--best", type=int, help="(c) the concurrency to use instead of (b)'s best")
    parser.add_argument("--data", help="(b) and (c): a corpus file (default: the built-in excerpt)")
    parser.add_argument("--budget", type=float, help="seconds for the whole script (default 290, --quick 170)")
    parser.add_argument("--cpu-dry-run", action="store_true", help="toy sizes on the CPU: tests this script only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args()


def machine_of(device: str, dry: bool) -> dict:
    import torch
    import transformers

    return {
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "no GPU (--cpu-dry-run)",
        "gpu_mib": torch.cuda.get_device_properties(0).total_memory // 2**20 if device == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "device": device,
        "dry_run": dry,
    }


def run_parts(args, device: str, rows: list, skipped: list) -> None:
    """The parts asked for, in the order that sets the defaults first: (a) eager, (b), (c), (a) compiled."""
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "MODERN_GPT_CACHE": str(Path(tmp) / "cache"), "PYTHONPATH": path}
        os.environ["MODERN_GPT_CACHE"] = env["MODERN_GPT_CACHE"]  # every token cache the bench builds goes in tmp
        if "b" in args.parts or "c" in args.parts:  # the corpus cached once, before the subprocesses read it
            from modern_gpt.core.settings import resolve
            from modern_gpt.data.corpus import load_corpus

            load_corpus(shakespeare_settings(args.data, device, args.cpu_dry_run).data)
            load_corpus(resolve(None, True, {}).data)
        if "a" in args.parts:
            part_a(args, device, False, rows, skipped)
        if "b" in args.parts:
            part_b(args, device, env, Path(tmp), rows, skipped)
        if "c" in args.parts:
            part_c(args, device, env, args.best or best_level(rows) or 1, Path(tmp), rows, skipped)
        if "a" in args.parts and not (args.quick or args.no_compile):
            part_a(args, device, True, rows, skipped)


def main() -> int:
    args = parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    import torch

    if not torch.cuda.is_available() and not args.cpu_dry_run:
        print(f"bench_gpu: no CUDA GPU here (torch {torch.__version__} sees none); nothing measured.")
        return 0
    args.parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    args.levels = [int(k) for k in args.levels.split(",")]
    if args.cpu_dry_run:
        args.levels = [k for k in args.levels if k <= 2] or [1]
    args.budget = args.budget or (170.0 if args.quick else 290.0)
    args.data = str(Path(args.data).resolve()) if args.data else None
    device = "cpu" if args.cpu_dry_run else "cuda"
    machine = machine_of(device, args.cpu_dry_run)
    rows: list[dict] = []
    skipped: list[str] = []
    run_parts(args, device, rows, skipped)
    rows.sort(key=lambda r: r["part"])  # stable: (a)'s compile rows after its eager ones
    text = table(rows, machine, skipped)
    print("\n" + text + f"\n\n{elapsed():.0f} s in all")
    if args.out:
        clean = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows]  # NaN: null
        report = {"machine": machine, "rows": clean, "skipped": skipped, "seconds": elapsed(), "table": text}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
