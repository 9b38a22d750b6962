"""The verdict's error rates on real runs: a null pool of one small model trained with several weight-init
streams on the same batches and evaluation tokens, then the table's family-wise false-positive rate (with an
interval), its power at injected shifts, and --seeds auto's error rate, power and seeds used.

    python bench/bench_verdict.py --data ../shared/data/tinyshakespeare.txt --seeds 60 --inits 7 --steps 40 \
        --save-pool bench/null-pool.csv
    python bench/bench_verdict.py --pool bench/null-pool.csv      # the figures again, from the shipped pool

bench/null-pool.csv is the pool docs/statistics.md's figures come from (60 seeds x 7 inits, 40 steps; the first
command regenerates it bit for bit on a CPU, in about 6 minutes on the 2-core machine), so that its claims can be
checked without training: tests/verdict/test_verdict_rules.py reads it.

For each seed it trains the same architecture once per init stream (init 0 is the run's own stream, the others
are further independent streams) with the project's own train_run, so every difference between two inits of
one seed is pure initialisation noise: a real null. A table is then the cumulative plan's shape: inits - 1
component rows, each init compared with the one above, judged by the fixed rule (Hommel's procedure; the
placebo is outside the family, so it is left out here). Tables of 3, 5 and 10 seeds are drawn from the pool
(random subsets, fixed RNG); their family-wise false-positive rate is a U-statistic of the pool, whose one-sided
95% upper bound comes from the delete-one jackknife over seeds (the tables overlap, so a binomial bound would be
far too tight). Power:
the same tables with one row's differences shifted by a known amount. --seeds auto: tables of 10 seeds in
random order, looks at 3..10, the rule of stats.sequential. The first two inits are also measured on windows
drawn from the seed, as the harness did before the one fixed evaluation set (docs/statistics.md's 'before').
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

import numpy as np

from modern_gpt.core.config import DataConfig, ModelConfig, TrainConfig
from modern_gpt.data.corpus import load_corpus, random_offsets
from modern_gpt.run import train as train_module
from modern_gpt.run.train import evaluate, train_run
from modern_gpt.verdict.stats import BETTER, INCONCLUSIVE, WORSE, adjust, boundary, decide, mde, sequential, t_sf2

SIZES = (3, 5, 10)  # seeds per table
SHIFTS = (1.0, 2.0, 3.0)  # injected into one row, in paired sds of the pool
TABLES = 4000  # random tables per figure (per jackknife replicate too)
_stream_seed = train_module.stream_seed


def stream_seed(seed: int, stream: str) -> int:
    """train.stream_seed, with more weight-init streams: init0 is 'init', initK a further independent stream."""
    if stream.startswith("init") and stream != "init":
        k = int(stream[4:])
        return (
            _stream_seed(seed, "init") if k == 0 else int(np.random.SeedSequence([seed, 100 + k]).generate_state(1)[0])
        )
    return _stream_seed(seed, stream)


def seed_windows(n_tokens: int, context: int, count: int, seed: int) -> np.ndarray:
    """The old way: evaluation windows drawn from the seed (as eval_windows did before the fixed set)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3]).generate_state(1)[0])
    return random_offsets(n_tokens, context, count, rng)


def fixed_rule(d: np.ndarray) -> np.ndarray:
    """Verdicts of the fixed rule (the table's: Hommel at 0.05) on (tables, rows, seeds) paired differences."""
    n = d.shape[-1]
    m, sd = d.mean(-1), d.std(-1, ddof=1)
    return decide(m, adjust(t_sf2(m / (sd / math.sqrt(n)), n - 1))[0], 0.05)


def tables_of(deltas: np.ndarray, n: int, tables: int, rng: np.random.Generator) -> np.ndarray:
    """(tables, rows, n) differences: n distinct seeds of the pool per table, in random order."""
    picks = np.argsort(rng.random((tables, deltas.shape[0])), axis=1)[:, :n]
    return np.swapaxes(deltas[picks], 1, 2)


def fwer(deltas: np.ndarray, n: int, rng: np.random.Generator, tables: int = TABLES) -> float:
    return float(np.mean(np.any(fixed_rule(tables_of(deltas, n, tables, rng)) != INCONCLUSIVE, axis=1)))


def jackknife(deltas: np.ndarray, n: int, seed: int, tables: int = TABLES) -> tuple[float, float]:
    """The rate over the pool and its one-sided 95% upper bound from the delete-one jackknife over seeds."""
    full = fwer(deltas, n, np.random.default_rng(seed), tables)
    reps = [fwer(np.delete(deltas, i, axis=0), n, np.random.default_rng(seed), tables) for i in range(len(deltas))]
    k = len(deltas)
    se = math.sqrt((k - 1) / k * np.sum((np.array(reps) - np.mean(reps)) ** 2))
    return full, full + 1.645 * se


def read_pool(path: str) -> np.ndarray:
    """(seeds, inits) val losses from a pool CSV: a header `seed,init0,init1,...`, one line per seed."""
    return np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)[:, 1:]


def write_pool(path: str, pool: np.ndarray) -> None:
    header = "seed," + ",".join(f"init{k}" for k in range(pool.shape[1]))
    rows = [f"{s}," + ",".join(repr(float(x)) for x in row) for s, row in enumerate(pool)]
    with open(path, "w") as f:
        f.write("\n".join([header, *rows]) + "\n")


def seeds_auto(deltas: np.ndarray, shift: float, rng: np.random.Generator) -> tuple[float, float, float]:
    """--seeds auto on tables of 10 pool seeds (looks at 3..10): (FWER of the unshifted rows, power of the
    shifted row 0, mean seeds used)."""
    d = tables_of(deltas, 10, TABLES, rng)
    d[:, 0, :] -= shift
    n = np.arange(3, 11)
    m = np.cumsum(d, axis=-1)[..., n - 1] / n
    sd = np.sqrt(np.maximum(np.cumsum(d * d, axis=-1)[..., n - 1] - n * m * m, 0.0) / (n - 1))
    p = t_sf2(m / (sd / np.sqrt(n)), n - 1)
    swap = [np.swapaxes(x, -1, -2) for x in (m, sd, np.broadcast_to(n, m.shape).astype(float), p, np.nan * p)]
    bound = boundary(0.05, d.shape[1], 3, 10)
    looks = sequential(*swap, bound)
    v = looks.verdict
    rows = slice(1, None) if shift else slice(None)
    wrong = np.mean(np.any((v[:, rows] == BETTER) | (v[:, rows] == WORSE), axis=1))
    return float(wrong), float(np.mean(v[:, 0] == BETTER)), float(np.array(bound.looks)[looks.stop].mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="", help="corpus (default: the built-in smoke corpus)")
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--inits", type=int, default=7, help="weight-init streams per seed: inits - 1 table rows")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--out", default="", help="also write the figures and the pool as JSON here")
    ap.add_argument("--pool", default="", help="read the pool from this CSV (bench/null-pool.csv) instead of training")
    ap.add_argument("--save-pool", default="", help="write the trained pool to this CSV")
    args = ap.parse_args()
    train_module.stream_seed = stream_seed  # train_run looks it up at call time

    t0 = time.perf_counter()
    if args.pool:
        pool, before = read_pool(args.pool), None
        args.seeds, args.inits = pool.shape
        print(f"pool: {args.pool}, {args.seeds} seeds x {args.inits} inits")
    else:
        pool, before, val_tokens = train_pool(args)
        if args.save_pool:
            write_pool(args.save_pool, pool)
    secs = time.perf_counter() - t0
    deltas = np.diff(pool, axis=1)  # init k - init k-1: the cumulative plan's rows, all null
    sd = float(np.std(deltas, ddof=1))
    print()
    if not args.pool:
        print(
            f"{args.seeds} seeds x {args.inits} inits, {args.steps} steps of 8x32 tokens, dim 64, 2 layers, "
            f"val {val_tokens:,} tokens; {secs:.0f} s on {platform.processor() or platform.machine()}"
        )
    print(
        f"paired sd of two inits: {sd:.4f} nats (per row: " + ", ".join(f"{x:.4f}" for x in deltas.std(0, ddof=1)) + ")"
    )
    doc = {"seeds": args.seeds, "inits": args.inits, "steps": args.steps, "secs": secs, "paired_sd": sd}
    doc["fixed"] = report_fixed(deltas, sd, args)
    if args.seeds >= 10:
        doc["auto"] = report_auto(deltas, sd)
    if before is not None:
        report_before_after(pool, before)
    if args.out:
        doc.update(machine=platform.processor() or platform.machine(), pool=pool.tolist())
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


def train_pool(args) -> tuple[np.ndarray, np.ndarray, int]:
    """(seeds, inits) validation losses, the first two inits' losses on windows drawn from the seed, and the
    validation tokens of one run."""
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
    pool = np.zeros((args.seeds, args.inits))
    before = np.zeros((args.seeds, 2))
    for seed in range(args.seeds):
        offsets = seed_windows(len(corpus.val), model.context, old_count, seed)
        for k in range(args.inits):
            result, net = train_run(model, corpus, train, seed, init=f"init{k}")
            pool[seed, k] = result.val_loss
            if k < 2:
                before[seed, k] = evaluate(net, corpus.val, offsets, model.context, "cpu")
        print(f"seed {seed}: " + " ".join(f"{x:.4f}" for x in pool[seed]), flush=True)
    return pool, before, result.val_tokens


def report_fixed(deltas: np.ndarray, sd: float, args) -> dict:
    """The fixed rule's family-wise false-positive rate with its interval, and its power, per table size."""
    print(f"\nfixed rule, {args.inits - 1} null rows, Hommel at 0.05 ({TABLES} random tables per figure):")
    print(f"{'seeds':>5} {'FWER':>6}  {'95% upper (jackknife)':>21}  " + "  ".join(f"power@{s:g}sd" for s in SHIFTS))
    out = {}
    for n in SIZES:
        if n > args.seeds // 2:
            continue
        rate, high = jackknife(deltas, n, n)
        rng = np.random.default_rng(1000 + n)
        found = []
        for s in SHIFTS:
            d = tables_of(deltas, n, TABLES, rng)
            d[:, 0, :] -= s * sd
            found.append(float(np.mean(fixed_rule(d)[:, 0] == BETTER)))
        print(f"{n:5d} {100 * rate:5.1f}%  {100 * high:20.1f}%   " + "  ".join(f"{x:9.3f}" for x in found))
        out[n] = {"fwer": rate, "upper": high, "power": dict(zip(SHIFTS, found, strict=True))}
    return out


def report_auto(deltas: np.ndarray, sd: float) -> dict:
    """--seeds auto's false-positive rate, power and seeds used, per injected shift."""
    print("\n--seeds auto, looks at 3..10 seeds (tables of 10 pool seeds in random order):")
    print(f"{'shift':>8} {'FWER':>6} {'power':>6} {'mean seeds':>10}")
    out = {}
    for s in (0.0, *SHIFTS):
        wrong, found, used = seeds_auto(deltas, s * sd, np.random.default_rng(7))
        print(f"{s:6.1f}sd {100 * wrong:5.1f}% {found if s else math.nan:6.3f} {used:10.2f}")
        out[s] = {"fwer": wrong, "power": found if s else None, "seeds": used}
    return out


def report_before_after(pool: np.ndarray, before: np.ndarray) -> None:
    """The first two inits' spread on windows drawn per seed (before) and on the one fixed set (after)."""
    for name, vals in (("before: windows per seed", before), ("after: one fixed set", pool[:, :2])):
        d = vals[:, 1] - vals[:, 0]
        print(
            f"{name:26} val sd {np.std(vals[:, 0], ddof=1):.4f}, paired sd {np.std(d, ddof=1):.4f}, "
            f"mde@5 {mde(float(np.std(d, ddof=1)), 5, 0.05):.4f}"
        )


if __name__ == "__main__":
    main()
