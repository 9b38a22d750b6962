"""The scale verdict's claims, proved: the fit against an independent reference (scipy), the jackknife against the
paired t interval it must equal for a linear statistic, k recovered exactly from noise-free ladders (with a
negative control that a wrong mapping fails), and on simulated ladders (tests/ladder_sim.py, fixed RNG): the 95%
CIs cover the true k and trend in 93-97% of tables, the familywise error of "k != 1" and of "k changes" is at most
alpha, and the power at 3 and 5 seeds is what docs/statistics.md states."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from modern_gpt.verdict import ladder as L
from modern_gpt.verdict.design import Row
from modern_gpt.verdict.stats import holm, t_ppf, t_sf2
from tests.ladder_sim import ladder, truth

scipy = pytest.importorskip("scipy")
from scipy import optimize, stats  # noqa: E402

TABLES = 6000  # Monte-Carlo error of a 5% rate: 0.28 points; of a 95% coverage: 0.28 points


def frame(runs: np.ndarray, flops: np.ndarray) -> pd.DataFrame:
    """One simulated table (seeds, rows, rungs) as the runs frame ladder_table reads."""
    seeds, rows, rungs = runs.shape
    recs = [
        dict(row=v, rung=r, seed=s, val_loss=float(runs[s, v, r]), flops=float(flops[v, r]), failed=False)
        for s in range(seeds)
        for v in range(rows)
        for r in range(rungs)
    ]
    return pd.DataFrame(recs)


def design(rows: list[Row], seeds: int, **kw) -> L.LadderDesign:
    return L.LadderDesign(tuple(rows), ("s", "m", "l"), tuple(range(seeds)), **kw)


# ---------------------------------------------------------------------------
# The fit and the estimator against independent references
# ---------------------------------------------------------------------------
def test_the_fit_equals_scipys_least_squares_on_realistic_ladders():
    rng = np.random.default_rng(0)
    runs, flops, _ = ladder(rng, 8, 5, [1.0, 1.3, 0.8], [0.0, 0.05, -0.05], compute=[1.0, 0.9, 1.1])
    for table in runs:
        mean = table.mean(0)
        e, alpha = L.fit(mean, flops)
        x = np.log(flops)

        def resid(p, mean=mean, x=x):
            return (mean - p[0] - np.exp(p[2:, None] - p[1] * x)).ravel()

        start = np.r_[0.5, 0.2, np.log(mean - 0.5).mean(-1) + 0.2 * x.mean(-1)]
        low, high = [0, 0, -np.inf, -np.inf, -np.inf], [mean.min(), 5, np.inf, np.inf, np.inf]
        ref = optimize.least_squares(resid, start, bounds=(low, high), xtol=1e-14, ftol=1e-14, gtol=1e-14)
        ours = np.r_[e, alpha, np.log(mean - e).mean(-1) + alpha * x.mean(-1)]
        ours = optimize.least_squares(lambda a, e=e, al=alpha: resid(np.r_[e, al, a]), ours[2:], xtol=1e-14).x
        sse = (resid(np.r_[e, alpha, ours]) ** 2).sum()
        assert sse <= (resid(ref.x) ** 2).sum() * (1 + 1e-6) + 1e-15  # as good a fit as scipy's
        assert e == pytest.approx(ref.x[0], rel=1e-4)
        assert alpha == pytest.approx(ref.x[1], rel=1e-4)


def test_noise_free_ladders_give_the_true_k_and_trend_and_a_wrong_mapping_does_not():
    rng = np.random.default_rng(1)
    runs, flops, _ = ladder(rng, 1, 1, [1.0, 1.3, 0.7], [0.0, 0.0, 0.0], [1.0, 0.8, 1.2], sd=0.0, seed_sd=0.0)
    est = L.estimate(runs[0, 0], flops, [None, 0, 0])
    assert math.exp(est.level[1]) == pytest.approx(1.3, rel=1e-6)
    assert math.exp(est.level[2]) == pytest.approx(0.7, rel=1e-6)
    assert est.slope[1:] == pytest.approx([0.0, 0.0], abs=1e-6)
    # negative control: leaving out each row's own compute (k without ln(C_ref / C_row)) is measurably wrong
    wrong = est.rungs[1] - np.log(flops[0] / flops[1])
    assert abs(math.exp(wrong.mean()) - 1.3) > 0.2
    # a trend of 1.1x per decade, against row 0, is recovered to within 0.5%: with a trend the rows' exponents
    # differ, and the fit's shared one is a compromise (a bias well inside the CI: see the coverage test)
    runs, flops, _ = ladder(rng, 1, 1, [1.0, 1.2], [0.0, math.log(1.1)], sd=0.0, seed_sd=0.0)
    est = L.estimate(runs[0, 0], flops, [None, 0])
    assert math.exp(est.slope[1]) == pytest.approx(1.1, rel=5e-3)


def test_the_jackknife_interval_of_a_mean_is_the_paired_t_interval():
    rng = np.random.default_rng(2)
    for n in (3, 5, 10):
        d = rng.normal(0.01, 0.02, n)
        left = (d.sum() - d) / (n - 1)
        se = math.sqrt(L.jack_var(left))
        q = t_ppf(0.975, n - 1)
        ci = stats.ttest_1samp(d, 0.0).confidence_interval()
        assert (d.mean() - q * se, d.mean() + q * se) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_ladder_table_reads_a_runs_frame_and_decides():
    rng = np.random.default_rng(3)
    runs, flops, _ = ladder(rng, 1, 5, [1.0, 1.0, 1.5], [0.0, 0.0, 0.0])
    rows = [Row("classic"), Row("classic (placebo)", 0, True), Row("+big", 0)]
    out, notes = L.ladder_table(design(rows, 5, target=1e15), frame(runs[0], flops))
    assert [r.verdict for r in out] == ["", "inconclusive", "better"]
    assert out[2].k_low < 1.5 < out[2].k_high
    assert out[2].rungs[2]["k_low"] < out[2].rungs[2]["k"] < out[2].rungs[2]["k_high"]
    assert any("100x past the top rung" in n for n in notes)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (5e13, "5x past the top rung."),
        (1e15, "100x past the top rung: far past what was measured; read it as a guess"),
        (1e12, "is within the ladder"),
        (1e-300, "is below the bottom rung (3.91e+10 FLOPs), where nothing was measured; read it as a guess"),
    ],
)
def test_a_target_compute_is_placed_against_the_ladder(target, says):
    """--target-compute below the ladder read '3.91e-315x past the top rung', and the bottom rung itself
    '0.00391x past': each place is now said as it is."""
    rng = np.random.default_rng(3)
    runs, flops, _ = ladder(rng, 1, 5, [1.0, 1.0, 1.5], [0.0, 0.0, 0.0])
    rows = [Row("classic"), Row("classic (placebo)", 0, True), Row("+big", 0)]
    _, notes = L.ladder_table(design(rows, 5, target=target), frame(runs[0], flops))
    assert sum(n.startswith(f"k at {target:.3g} FLOPs") for n in notes) == 1
    assert any(says in n for n in notes), notes


# ---------------------------------------------------------------------------
# Calibration on simulated ladders
# ---------------------------------------------------------------------------
def _jack(runs, flops, refs):
    full, left = L.jackknife(runs, np.broadcast_to(flops, (runs.shape[0], *flops.shape)), refs)
    se = np.sqrt(L.jack_var(np.moveaxis(left.level, 1, -1)))
    ses = np.sqrt(L.jack_var(np.moveaxis(left.slope, 1, -1)))
    return full, se, ses


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize(
    "ks, slopes, compute",
    [
        ([1.0, 1.0, 1.2, 1.5], [0.0, 0.0, 0.0, 0.0], None),
        ([1.0, 1.2, 1.5, 1.2], [0.0, math.log(1.1), -math.log(1.1), 0.0], [1.0, 1.0, 1.0, 0.85]),
    ],
)
def test_the_95_percent_intervals_cover_the_true_k_and_trend(seeds, ks, slopes, compute):
    rng = np.random.default_rng(100 + seeds)
    refs = [None, 0, 0, 0]
    runs, flops, lnk = ladder(rng, TABLES, seeds, ks, slopes, compute)
    full, se, ses = _jack(runs, flops, refs)
    level, slope = truth(lnk, flops, refs)
    q = t_ppf(0.975, seeds - 1)
    cover_k = (np.abs(full.level - level) <= q * se)[:, 1:].mean(0)
    cover_t = (np.abs(full.slope - slope) <= q * ses)[:, 1:].mean(0)
    assert ((0.93 <= cover_k) & (cover_k <= 0.97)).all(), cover_k
    assert ((0.93 <= cover_t) & (cover_t <= 0.97)).all(), cover_t


@pytest.mark.parametrize("seeds", [3, 5])
def test_the_familywise_error_of_k_and_of_the_trend_is_at_most_alpha(seeds):
    """Five rows chained as the cumulative plan chains them (each against the row above: neighbours correlate -0.5),
    no row with any effect: a wrong `better`/`worse` or `grows`/`shrinks` anywhere is a familywise error."""
    rng = np.random.default_rng(200 + seeds)
    refs = [None, 0, 1, 2, 3]
    runs, flops, _ = ladder(rng, TABLES, seeds, [1.0] * 5, [0.0] * 5)
    full, se, ses = _jack(runs, flops, refs)
    pk = t_sf2(full.level / se, seeds - 1)[:, 1:]
    pt = t_sf2(full.slope / ses, seeds - 1)[:, 1:]
    mc = math.sqrt(0.05 * 0.95 / TABLES)
    for p in (pk, pt):
        fwer = (holm(p) < 0.05).any(1).mean()
        assert fwer - 2.33 * mc <= 0.05, fwer  # not shown above alpha at 99% confidence
        assert fwer >= 0.03, fwer  # and not blind: Holm spends nearly all of it


# the power that docs/statistics.md states, measured on 6,000 tables of one row against the reference at alpha 0.05
POWER = {  # seeds: {k: power of "k != 1"}, {factor per 10x compute: power of "k changes"}
    3: ({1.1: 0.39, 1.2: 0.81, 1.5: 1.00}, {1.1: 0.32, 1.2: 0.74}),
    5: ({1.1: 0.82, 1.2: 1.00, 1.5: 1.00}, {1.1: 0.74, 1.2: 1.00}),
}


@pytest.mark.parametrize("seeds", [3, 5])
def test_the_power_the_docs_state(seeds):
    rng = np.random.default_rng(300 + seeds)
    k_power, trend_power = POWER[seeds]
    for k, want in k_power.items():
        runs, flops, _ = ladder(rng, TABLES, seeds, [1.0, k], [0.0, 0.0])
        full, se, _ = _jack(runs, flops, [None, 0])
        got = (t_sf2(full.level[:, 1] / se[:, 1], seeds - 1) < 0.05).mean()
        assert got == pytest.approx(want, abs=0.02), (k, got)
    for factor, want in trend_power.items():
        runs, flops, _ = ladder(rng, TABLES, seeds, [1.0, 1.2], [0.0, math.log(factor)])
        full, _, ses = _jack(runs, flops, [None, 0])
        got = (t_sf2(full.slope[:, 1] / ses[:, 1], seeds - 1) < 0.05).mean()
        assert got == pytest.approx(want, abs=0.02), (factor, got)


def test_one_seed_gives_k_without_a_ci_and_says_every_verdict_is_inconclusive():
    rng = np.random.default_rng(4)
    runs, flops, _ = ladder(rng, 1, 1, [1.0, 1.3], [0.0, 0.0])
    rows, notes = L.ladder_table(design([Row("a"), Row("b", 0)], 1), frame(runs[0], flops))
    assert rows[1].k == pytest.approx(1.3, rel=0.2) and math.isnan(rows[1].k_low)
    assert (rows[1].verdict, rows[1].trend) == ("inconclusive", "inconclusive")  # as the footnote says
    assert notes[0].startswith("1 seed trained at every rung")
