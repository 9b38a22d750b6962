"""Simulated ladders with a known compute multiplier and trend, for tests/verdict/test_ladder.py and docs/statistics.md.

A ladder of K rungs, each 16x the compute of the one below (4x the parameters, 4x the tokens), whose reference
follows L = E + A C^-alpha, E = 1.0, alpha = 0.1 and L = 2.06 at the top rung, as the 5-seed tinyshakespeare
ablation's classic row (docs/measurements.md). Row i reaches the loss the reference reaches at k_i(C) times
its compute C, ln k_i(C) = ln k_i + slope_i (log10 C - the ladder's centre), against row 0. A seed adds one
shift shared by every row at a rung (sd 0.02: the batches it draws) and one per run, so that the paired sd is
0.0124 nats, the paired sd measured between two weight inits on tinyshakespeare. With curve="log" the reference
falls in a straight line in ln C instead (no curvature: the usual picture over a small span), with the power
law's slope at the top rung; span sets the compute from the bottom rung to the top.
"""

from __future__ import annotations

import numpy as np

E, ALPHA, TOP_LOSS, TOP_FLOPS, STEP = 1.0, 0.1, 2.06, 1e13, 16.0
PAIRED_SD, SEED_SD = 0.0124, 0.02


def ladder(
    rng,
    tables: int,
    seeds: int,
    ks,
    slopes,
    compute=None,
    rungs: int = 3,
    sd: float = PAIRED_SD,
    seed_sd: float = SEED_SD,
    curve: str = "power",
    span: float | None = None,
):
    """(tables, seeds, rows, rungs) of val losses, the rows' compute (rows, rungs), and the true ln k against row
    0 at each rung (rows, rungs). compute: each row's FLOPs as a share of the reference's (GQA's is below 1)."""
    step = STEP if span is None else span ** (1 / (rungs - 1))
    c = TOP_FLOPS * step ** (np.arange(rungs) - (rungs - 1))
    share = np.ones(len(ks)) if compute is None else np.asarray(compute, dtype=float)
    flops = c[None, :] * share[:, None]
    x = np.log10(flops)
    lnk = np.log(np.asarray(ks, dtype=float))[:, None] + np.asarray(slopes, dtype=float)[:, None] * (
        x - x.mean(-1, keepdims=True)
    )
    true = reference_loss(np.exp(lnk) * flops, curve)
    shared = rng.normal(0.0, seed_sd, (tables, seeds, 1, rungs))
    own = rng.normal(0.0, sd / np.sqrt(2.0), (tables, seeds, len(ks), rungs))
    return true[None, None] + shared + own, flops, lnk


def reference_loss(c, curve: str = "power"):
    """The reference's loss at compute c: the power law, or the straight line in ln C with its slope at the top."""
    if curve == "log":
        return TOP_LOSS - ALPHA * (TOP_LOSS - E) * np.log(c / TOP_FLOPS)
    return E + (TOP_LOSS - E) * (c / TOP_FLOPS) ** -ALPHA


def truth(lnk: np.ndarray, flops: np.ndarray, refs) -> tuple[np.ndarray, np.ndarray]:
    """Each row's true ln k over the ladder (the mean over rungs) and slope per decade, against its reference."""
    x = np.log10(flops)
    xc = x - x.mean(-1, keepdims=True)
    level, slope = [], []
    for i, ref in enumerate(refs):
        if ref is None:
            level.append(np.nan)
            slope.append(np.nan)
            continue
        d = lnk[i] - lnk[ref]  # exact when ref is row 0, or when k does not change with compute
        level.append(d.mean())
        slope.append((xc[i] * (d - d.mean())).sum() / (xc[i] ** 2).sum())
    return np.array(level), np.array(slope)
