"""The verdict's error rates on real runs: the placebo's false-positive rate and the minimum detectable
effect at 3, 5 and 10 seeds, with the evaluation windows drawn per seed (before) and with the one fixed
evaluation set (after).

    python bench/bench_verdict.py --data ../shared/data/tinyshakespeare.txt --seeds 60

For each seed it trains the first row and its placebo (the same architecture, batches and evaluation
tokens, another weight init) with the project's own train_run, and measures every model twice: on the
fixed evaluation set that every run now uses, and on windows drawn from the seed as the harness did
before (eval_batches x batch_size windows per seed). Then, for tables of 3, 5 and 10 seeds taken from
the seeds trained (random subsets, fixed RNG), it counts how often the paired t-test at 0.05 calls the
placebo an effect (it should be about 5%), and computes the mde from the paired sd.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

import numpy as np

from modern_gpt.data import DataConfig, load_corpus, random_offsets
from modern_gpt.model import ModelConfig
from modern_gpt.stats import mde, t_sf2
from modern_gpt.train import TrainConfig, evaluate, train_run

SIZES = (3, 5, 10)  # seeds per table


def seed_windows(n_tokens: int, context: int, count: int, seed: int) -> np.ndarray:
    """The old way: evaluation windows drawn from the seed (as eval_windows did before the fixed set)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3]).generate_state(1)[0])
    return random_offsets(n_tokens, context, count, rng)


def false_positive_rate(deltas: np.ndarray, n: int, tables: int, rng: np.random.Generator) -> float:
    """The share of random n-seed subsets in which the paired t-test at 0.05 calls the placebo an effect."""
    picks = np.argsort(rng.random((tables, len(deltas))), axis=1)[:, :n]  # n distinct seeds per table
    d = deltas[picks]
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    return float(np.mean(t_sf2(t, n - 1) < 0.05))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="", help="corpus (default: the built-in smoke corpus)")
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--out", default="", help="also write the figures as JSON here")
    args = ap.parse_args()

    corpus = load_corpus(DataConfig(path=args.data))
    model = ModelConfig(context=32, dim=64, heads=4, layers=2, tie_embeddings=False)
    train = TrainConfig(
        steps=args.steps,
        batch_size=8,
        lr=3e-3,
        warmup_steps=5,
        eval_every=args.steps,
        eval_batches=4,
        eval_tokens=32_768,
        threads=1,
        device="cpu",
    )
    old_count = train.eval_batches * train.batch_size
    t0 = time.perf_counter()
    after = np.zeros((args.seeds, 2))
    before = np.zeros((args.seeds, 2))
    for seed in range(args.seeds):
        offsets = seed_windows(len(corpus.val), model.context, old_count, seed)
        for col, init in enumerate(("init", "placebo")):
            result, net = train_run(model, corpus, train, seed, init=init)
            after[seed, col] = result.val_loss
            before[seed, col] = evaluate(net, corpus.val, offsets, model.context, "cpu")
        print(
            f"seed {seed}: fixed {after[seed, 0]:.4f} {after[seed, 1]:.4f}   per-seed windows "
            f"{before[seed, 0]:.4f} {before[seed, 1]:.4f}",
            flush=True,
        )
    secs = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    rows = {}
    for name, vals in (("before: windows per seed", before), ("after: one fixed set", after)):
        deltas = vals[:, 1] - vals[:, 0]
        sd = float(np.std(deltas, ddof=1))
        rows[name] = {
            "val_sd": float(np.std(vals[:, 0], ddof=1)),
            "paired_sd": sd,
            "fp": {n: false_positive_rate(deltas, n, 20_000, rng) if n < args.seeds else math.nan for n in SIZES},
            "mde": {n: mde(sd, n, 0.05) for n in SIZES},
        }
    print()
    print(
        f"{args.seeds} seeds x 2 runs, {args.steps} steps of 8x32 tokens, dim 64, 2 layers, "
        f"val {result.val_tokens:,} tokens (fixed) or {old_count * model.context:,} (per seed); {secs:.0f} s"
    )
    print(
        f"{'':26} {'val sd':>7} {'paired sd':>9} {'FP@3':>6} {'FP@5':>6} {'FP@10':>6} "
        f"{'mde@3':>7} {'mde@5':>7} {'mde@10':>7}"
    )
    for name, r in rows.items():
        print(
            f"{name:26} {r['val_sd']:7.4f} {r['paired_sd']:9.4f} "
            + " ".join(f"{100 * r['fp'][n]:5.1f}%" for n in SIZES)
            + " "
            + " ".join(f"{r['mde'][n]:7.4f}" for n in SIZES)
        )
    print(
        "FP: share of random 3-, 5- and 10-seed subsets in which a paired t-test at 0.05 calls the placebo an "
        "effect (about 5% when calibrated); mde: smallest |delta| detected with 80% power by one comparison."
    )
    if args.out:
        doc = {"machine": platform.processor() or platform.machine(), "seeds": args.seeds, "secs": secs, **rows}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
