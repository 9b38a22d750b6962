"""Wall time of a real `modern-gpt ablate` against the limit its arithmetic sets on this CPU (issue 23, item 1).

    python bench/bench_limit.py --config smoke [--data FILE] [--plan cumulative] [--seeds 2] [--out limit.json]

1. Counts the FLOPs of every matmul of the ablation from the model's shapes (flops_forward): training is 3x the
   forward (forward + backward) per step taken; evaluation is forward only, over the windows train.py evaluates:
   every curve point (every eval_every steps and the last step, train and val subsets) and the final evaluation
   (the full fixed train windows when they are more than the curve's, and both halves of the val windows).
   Only matmuls are counted (linear layers, attention's QK^T and AV, the LM head); norms, softmax and the
   optimizer are not. A component plugin's own shapes are not known here and are counted as the built-in piece.
2. Measures this machine's fp32 matmul rate with one thread, in this process, at the shapes of one training
   step of each variant (forward, and the two backward products of each).
3. Runs `modern-gpt ablate` as a subprocess into a temporary folder, times it, and reads each run's secs.
4. Prints the limit, FLOPs / (rate x cores in use, the concurrent single-thread runs of --jobs auto), the
   measured wall, their ratio, and per run the FLOPs, secs and achieved GFLOP/s.
5. Prints where the wall went (breakdown), from each run's timing (train.RunResult.timing, timed inside the
   worker): per run its start-up (model, optimizer, batches, windows), training steps, intermediate (curve)
   evaluations, final evaluation and the rest; and for the ablation the driver's start before the first run
   (imports, corpus, the worker pool's start and its imports), the time between runs (core-seconds while runs
   were under way that no run used: a worker's start, a record's trip, the last runs' imbalance) and the tail
   after the last run (the table, the plot).

Speed is measured here, never asserted in a test (tests/house/test_bench_limit.py checks the FLOP count and the
breakdown's arithmetic only).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from common import cpu_model

from modern_gpt.ablation.executors.local import workers
from modern_gpt.ablation.planning import Spec, variant_config
from modern_gpt.core.config import ModelConfig
from modern_gpt.data.corpus import load_corpus
from modern_gpt.run import compiling
from modern_gpt.run.train import EvalWindows, curve_windows

# The one count of a model's arithmetic is compiling's (--compile auto prices a step with it): the forward pass,
# and a training step (forward and backward), of batch sequences of T tokens.
flops_forward = compiling.forward_flops
flops_train_step = compiling.step_flops


def eval_windows_count(cfg_train, windows: EvalWindows, steps_done: int) -> tuple[int, int]:
    """Windows evaluated (curve points, final evaluation) by a run of steps_done steps that finished, as train_run
    evaluates them."""
    points = sum(1 for s in range(1, steps_done + 1) if s % cfg_train.eval_every == 0 or s == cfg_train.steps)
    curve = points * (len(windows.train) + len(windows.val))
    final = len(windows.val_final) + (len(windows.train_final) if len(windows.train_final) > len(windows.train) else 0)
    return curve, final


def matmul_shapes(cfg: ModelConfig, batch: int, T: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The operand shapes of one training step's matmuls: each linear's forward and its two backward products,
    and attention's batched products (forward and backward)."""
    M, d, hd, H, Hkv = batch * T, cfg.dim, cfg.head_dim, cfg.heads, cfg.n_kv_heads
    mlp = [(d, cfg.mlp_width)] * (3 if cfg.swiglu else 2)
    mlp[-1] = (cfg.mlp_width, d)
    linears = ([(d, (H + 2 * Hkv) * hd), (d, d), *mlp]) * cfg.layers + [(d, cfg.vocab_size)]
    shapes = []
    for k, n in linears:
        shapes += [((M, k), (k, n)), ((M, n), (n, k)), ((k, M), (M, n))]
    bh = batch * H
    attn = [((bh, T, hd), (bh, hd, T)), ((bh, T, T), (bh, T, hd))] * 3  # forward's two, backward's four
    return shapes + attn * cfg.layers


def matmul_rate(configs: list[ModelConfig], batch: int, T: int, seconds: float = 2.0) -> float:
    """FLOP/s of fp32 matmuls on one thread at these models' training-step shapes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        pairs = [
            (torch.randn(a, generator=gen), torch.randn(b, generator=gen))
            for cfg in configs
            for a, b in matmul_shapes(cfg, batch, T)
        ]
        flops = sum(2 * a.numel() * b.shape[-1] for a, b in pairs)
        for a, b in pairs:  # warm-up
            torch.matmul(a, b)
        done, t0 = 0, time.perf_counter()
        while done == 0 or time.perf_counter() - t0 < seconds:
            for a, b in pairs:
                torch.matmul(a, b)
            done += 1
        return flops * done / (time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)


PARTS = ("startup", "train_steps", "curve_evals", "final_eval", "other")  # train.RunResult.timing's seconds


def breakdown(records: list[dict], launched: float, wall: float, cores: int) -> dict:
    """Where an ablation's wall went, in seconds, from its runs' timing (Unix times, launched: the command's start):
    each of PARTS summed over the runs; lead, the command's start to its first run's; tail, its last run's end to
    the command's end; between, the core-seconds from the first run's start to the last one's end that no run
    used (cores x that span - the runs' secs)."""
    timed = [r for r in records if r.get("timing")]
    parts = {k: sum(r["timing"][k] for r in timed) for k in PARTS}
    if not timed:
        return {**parts, "lead": 0.0, "tail": 0.0, "between": 0.0}
    first = min(r["timing"]["started"] for r in timed)
    last = max(r["timing"]["started"] + r["secs"] for r in timed)
    between = cores * (last - first) - sum(r["secs"] for r in timed)
    return {**parts, "lead": first - launched, "tail": launched + wall - last, "between": between}


def ablate(args, out: Path) -> tuple[float, float]:
    """The Unix time `modern-gpt ablate` into out started, and its wall seconds."""
    cmd = [sys.executable, "-m", "modern_gpt", "ablate", "--config", args.config, "--seeds", str(args.seeds)]
    cmd += ["--plan", args.plan, "--jobs", args.jobs, "--out", str(out), "--format", "csv"]
    cmd += ["--data", args.data] if args.data else []
    launched, t0 = time.time(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"modern-gpt ablate failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return launched, wall


def measure(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ablation"
        launched, wall = ablate(args, out)
        meta = json.loads((out / "meta.json").read_text())
        records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
    spec = Spec.from_dict(meta["spec"])
    cfg_train, corpus = spec.settings.train, load_corpus(spec.settings.data)
    base = spec.settings.model
    configs = [variant_config(base, v) for v in spec.variants]
    configs = [replace(c, vocab_size=corpus.tokenizer.vocab_size) for c in configs]  # as check_run does
    T, B = base.context, cfg_train.batch_size
    windows = EvalWindows.of(corpus, T, cfg_train)
    assert len(windows.train) == curve_windows(cfg_train, len(windows.train_final))
    rate = matmul_rate(configs, B, T)
    cores = workers(args.jobs if args.jobs == "auto" else int(args.jobs), "cpu", len(records))
    runs = []
    for r in records:
        cfg, steps = configs[r["row"]], r["steps_done"]
        curve, final = eval_windows_count(cfg_train, windows, steps)
        final = 0 if r["error"] or r["diverged"] else final  # such a run has no final evaluation
        train_flops = steps * flops_train_step(cfg, B, T)
        eval_flops = flops_forward(cfg, curve + final, T)
        total = train_flops + eval_flops
        runs.append(
            {
                "variant": r["variant"],
                "seed": r["seed"],
                "train_flops": train_flops,
                "eval_flops": eval_flops,
                "flops": total,
                "secs": r["secs"],
                **{k: (r.get("timing") or {}).get(k, 0.0) for k in PARTS},
                "gflops_per_s": total / r["secs"] / 1e9 if r["secs"] > 0 else 0.0,
            }
        )
    flops = sum(r["flops"] for r in runs)
    limit = flops / (rate * cores)
    return {
        "command": " ".join(sys.argv),
        "config": args.config,
        "plan": args.plan,
        "seeds": args.seeds,
        "runs": runs,
        "flops": flops,
        "matmul_gflops_per_s_one_thread": rate / 1e9,
        "cores_in_use": cores,
        "limit_s": limit,
        "wall_s": wall,
        "ratio": wall / limit,
        "sum_run_secs": sum(r["secs"] for r in runs),
        "breakdown": breakdown(records, launched, wall, cores),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "load_average_end": os.getloadavg()[0],
        },
    }


HEADS = {"startup": "start-up", "train_steps": "steps", "curve_evals": "curve", "final_eval": "final", "other": "other"}


def show(result: dict) -> None:
    parts = "".join(f" {HEADS[k]:>8}" for k in PARTS)
    print(f"{'variant':<22} {'seed':>4} {'GFLOP':>9} {'of it eval':>10} {'secs':>7}{parts} {'GFLOP/s':>8}")
    for r in result["runs"]:
        gflop, share = r["flops"] / 1e9, r["eval_flops"] / r["flops"] if r["flops"] else 0.0
        cells = "".join(f" {r[k]:>8.3f}" for k in PARTS)
        print(
            f"{r['variant']:<22} {r['seed']:>4} {gflop:>9.2f} {share:>10.0%} {r['secs']:>7.2f}{cells} "
            f"{r['gflops_per_s']:>8.1f}"
        )
    m = result["machine"]
    print(
        f"{result['flops'] / 1e12:.3f} TFLOP in {len(result['runs'])} runs; matmul rate "
        f"{result['matmul_gflops_per_s_one_thread']:.1f} GFLOP/s per thread x {result['cores_in_use']} cores in use"
    )
    print(
        f"limit {result['limit_s']:.1f} s, wall {result['wall_s']:.1f} s: {result['ratio']:.1f}x the limit "
        f"(runs' own secs sum to {result['sum_run_secs']:.1f} s)"
    )
    b, cores = result["breakdown"], result["cores_in_use"]
    runs = ", ".join(f"{HEADS[k]} {b[k]:.1f}" for k in PARTS)
    print(f"runs' secs by part (summed over runs): {runs}")
    print(
        f"wall {result['wall_s']:.1f} s = driver start {b['lead']:.1f} + runs {result['wall_s'] - b['lead'] - b['tail']:.1f} "
        f"+ tail (table, plot) {b['tail']:.1f}; between runs {b['between']:.1f} core-s of {cores} cores not in a run"
    )
    print(f"{m['cpu']}, {m['cores']} CPUs, torch {m['torch']}, {m['date']}, load average {m['load_average_end']:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="smoke", help="smoke, shakespeare, mini, or a TOML path")
    parser.add_argument("--data", default="", help="the corpus (--data of modern-gpt ablate)")
    parser.add_argument("--plan", default="cumulative")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", default="auto")
    parser.add_argument("--out", default="", help="write the result as JSON here")
    args = parser.parse_args()
    result = measure(args)
    show(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
