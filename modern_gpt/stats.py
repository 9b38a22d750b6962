"""Pure statistics for paired, multi-seed comparisons: no I/O, no torch, numbers in and numbers out.

The verdict rule (also in the README):
  * each row is compared with its reference by a two-sided paired t-test on the
    per-seed differences (complete pairs only);
  * the p-values of all the table's rows are Holm-corrected together, so that the
    chance of any wrong `better`/`worse` in the whole table is at most alpha;
  * `better` / `worse` when the Holm-adjusted p is below the level (alpha, or with
    `--seeds auto` the per-look level that keeps the whole sequential procedure at alpha);
  * with a margin M, `same` when a paired equivalence test (TOST) shows |delta| < M,
    Holm-corrected the same way;
  * otherwise `inconclusive`: absence of evidence, not evidence of no effect.

The functions take numpy arrays as well as scalars, so that the simulation tests
run the very rule the report uses on tens of thousands of tables at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

BETTER, WORSE, SAME, INCONCLUSIVE = "better", "worse", "same", "inconclusive"
POWER = 0.8  # the power at which `mde` and `seeds_needed` are quoted
MAX_PAIRS = 10_000  # seeds_needed beyond this is reported as not reachable


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if len(xs) else math.nan


def spread(xs: Sequence[float]) -> float:
    """max - min: how far seeds alone move a number."""
    return max(xs) - min(xs) if len(xs) else math.nan


def sample_sd(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return math.nan
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


# ---------------------------------------------------------------------------
# Student's t distribution, through the regularised incomplete beta function
# (Lentz's continued fraction, as in Numerical Recipes), vectorised with numpy so
# that no SciPy is needed and a simulation can evaluate millions of p-values.
# ---------------------------------------------------------------------------
_TINY, _EPS = 1e-300, 1e-15


def _fix(v: np.ndarray) -> np.ndarray:
    return np.where(np.abs(v) < _TINY, _TINY, v)


def _beta_cf(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    c = np.ones_like(x)
    d = 1.0 / _fix(1.0 - (a + b) * x / (a + 1.0))
    h = d.copy()
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 / _fix(1.0 + num * d)
            c = _fix(1.0 + num / c)
            h = h * d * c
        if np.all(np.abs(d * c - 1.0) < _EPS):
            break
    return h


_lgamma = np.vectorize(math.lgamma, otypes=[float])


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b), elementwise."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (a, b, x)))
    inside = (x > 0.0) & (x < 1.0)
    xs = np.where(inside, x, 0.5)
    direct = xs < (a + 1.0) / (a + b + 2.0)
    pa, pb, px = np.where(direct, a, b), np.where(direct, b, a), np.where(direct, xs, 1.0 - xs)
    # lgamma depends on the parameters alone: evaluate it once per distinct pair
    pairs, inverse = np.unique(np.stack([a.ravel(), b.ravel()]), axis=1, return_inverse=True)
    lg = (_lgamma(pairs.sum(0)) - _lgamma(pairs[0]) - _lgamma(pairs[1]))[inverse.ravel()].reshape(a.shape)
    front = np.exp(lg + a * np.log(xs) + b * np.log1p(-xs))
    part = front * _beta_cf(pa, pb, px) / pa
    out = np.where(direct, part, 1.0 - part)
    out = np.where(x <= 0.0, 0.0, np.where(x >= 1.0, 1.0, out))
    return out if out.ndim else float(out)


def t_sf2(t, df):
    """Two-sided tail probability P(|T| >= |t|) of Student's t with df degrees of freedom, elementwise."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=float), np.asarray(df, dtype=float))
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.where(np.isinf(t), 0.0, df / (df + t * t))
    out = np.where(np.isnan(t), np.nan, betainc(df / 2.0, 0.5, x))
    return out if out.ndim else float(out)


def t_sf(t, df):
    """One-sided upper tail P(T >= t), elementwise."""
    half = np.asarray(t_sf2(t, df)) / 2.0
    out = np.where(np.asarray(t) >= 0, half, 1.0 - half)
    return out if out.ndim else float(out)


@lru_cache(maxsize=4096)
def t_ppf(q: float, df: float) -> float:
    """The q-quantile (q > 0.5) of Student's t: Newton's method from the Cornish-Fisher expansion (three or
    four tail evaluations), by bisection when that does not settle. The two-sided tail is convex in t > 0, so
    Newton's steps approach the root from below without overshooting it once they are below it."""
    target = 2.0 * (1.0 - q)
    z = NormalDist().inv_cdf(q)
    t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(30):
        density = math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))
        step = (t_sf2(t, df) - target) / (2.0 * density)
        t_next = t + step if t + step > 0 else t / 2.0
        if abs(t_next - t) <= 1e-13 * t_next:
            return t_next
        t = t_next
    return _t_ppf_bisect(target, df)


def _t_ppf_bisect(target: float, df: float) -> float:
    lo, hi = 0.0, 1.0
    while t_sf2(hi, df) > target:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if t_sf2(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2.0


def normal_cdf(x):
    out = 0.5 * _erfc(-np.asarray(x, dtype=float) / math.sqrt(2.0))
    return out if np.ndim(out) else float(out)


_erfc = np.vectorize(math.erfc, otypes=[float])


# ---------------------------------------------------------------------------
# Paired comparisons
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Paired:
    n: int  # complete pairs
    delta: float  # mean of the per-seed differences
    sd: float  # their sample standard deviation; NaN with fewer than two pairs
    ci_low: float  # 95% t-interval; NaN with fewer than two pairs
    ci_high: float
    p_value: float  # two-sided paired t-test; NaN with fewer than two pairs


def paired(deltas: Sequence[float], confidence: float = 0.95) -> Paired:
    n = len(deltas)
    d = mean(deltas)
    if n < 2:
        return Paired(n, d, math.nan, math.nan, math.nan, math.nan)
    sd = sample_sd(deltas)
    if sd == 0.0:  # every seed moved by exactly the same amount
        return Paired(n, d, 0.0, d, d, 1.0 if d == 0.0 else 0.0)
    se = sd / math.sqrt(n)
    half = t_ppf(1.0 - (1.0 - confidence) / 2.0, n - 1) * se
    return Paired(n, d, sd, d - half, d + half, t_sf2(d / se, n - 1))


def tost_p(deltas: Sequence[float], margin: float) -> float:
    """Two one-sided tests of |mean delta| < margin: a small p says the difference is smaller than the margin."""
    n = len(deltas)
    if n < 2 or not margin > 0:
        return math.nan
    d, sd = mean(deltas), sample_sd(deltas)
    if sd == 0.0:
        return 0.0 if abs(d) < margin else 1.0
    se = sd / math.sqrt(n)
    return max(t_sf((d + margin) / se, n - 1), t_sf((margin - d) / se, n - 1))


def holm(p_values) -> np.ndarray | list[float]:
    """Holm-Bonferroni adjusted p-values along the last axis, in the input order; NaN entries (rows
    without a test) are left out of the count and stay NaN. A list in, a list out."""
    p = np.asarray(p_values, dtype=float)
    present = ~np.isnan(p)
    m = present.sum(axis=-1, keepdims=True)
    filled = np.where(present, p, np.inf)  # NaNs sort last and take no rank among the tests
    order = np.argsort(filled, axis=-1, kind="stable")
    ranked = np.take_along_axis(filled, order, axis=-1)
    factor = m - np.arange(p.shape[-1])
    with np.errstate(invalid="ignore"):
        scaled = np.where(np.isinf(ranked), 0.0, factor * ranked)
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(scaled, axis=-1))
    adjusted = np.empty_like(adjusted_sorted)
    np.put_along_axis(adjusted, order, adjusted_sorted, axis=-1)
    adjusted = np.where(present, adjusted, np.nan)
    return adjusted.tolist() if isinstance(p_values, list | tuple) else adjusted


def decide(delta, p_holm, level: float, p_same_holm=np.nan):
    """The verdict from a row's mean difference and Holm-adjusted p-values, elementwise."""
    delta, p_holm, p_same = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (delta, p_holm, p_same_holm)))
    out = np.full(delta.shape, INCONCLUSIVE, dtype=object)
    with np.errstate(invalid="ignore"):
        out = np.where(p_same < level, SAME, out)
        out = np.where((p_holm < level) & (delta < 0), BETTER, out)
        out = np.where((p_holm < level) & (delta > 0), WORSE, out)
    return out if out.ndim else str(out)


# ---------------------------------------------------------------------------
# Power: what an inconclusive row would need
# ---------------------------------------------------------------------------
def power(effect: float, sd: float, n: int, level: float) -> float:
    """The probability that a two-sided paired t-test at `level` with n pairs detects a true mean difference
    `effect` when the per-pair sd is `sd`: exact, from the noncentral t distribution, by integrating the
    normal numerator over the chi-distributed denominator."""
    if n < 2 or not sd > 0:
        return math.nan
    df = n - 1
    crit = t_ppf(1.0 - level / 2.0, df)
    shift = abs(effect) * math.sqrt(n) / sd
    # s = sqrt(chi2_df / df); its density is  2 (df/2)^(df/2) / Gamma(df/2) * s^(df-1) * exp(-df s^2 / 2)
    top = math.sqrt((df + 40.0 * math.sqrt(2.0 * df) + 100.0) / df)
    step = top / 6000
    s = (np.arange(6000) + 0.5) * step  # the midpoint rule
    log_density = (
        math.log(2.0) + (df / 2.0) * math.log(df / 2.0) - math.lgamma(df / 2.0) + (df - 1) * np.log(s) - df * s * s / 2
    )
    reject = normal_cdf(shift - crit * s) + normal_cdf(-shift - crit * s)
    return float(np.sum(np.exp(log_density) * reject) * step)


def mde(sd: float, n: int, level: float, target: float = POWER) -> float:
    """The smallest |mean difference| that n pairs with this sd detect with probability `target`."""
    if n < 2 or not sd > 0:
        return math.nan
    lo, hi = 0.0, sd
    while power(hi, sd, n, level) < target:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if power(mid, sd, n, level) < target else (lo, mid)
        if hi - lo < 1e-6 * hi:
            break
    return hi


def pairs_needed(effect: float, sd: float, level: float, target: float = POWER) -> float:
    """The fewest pairs with which a true difference `effect` is detected with probability `target`
    (at per-pair sd `sd`); inf when more than MAX_PAIRS would be needed, NaN when unknown."""
    if not (sd > 0 and abs(effect) > 0) or math.isnan(sd) or math.isnan(effect):
        return math.nan
    # Start from the normal approximation, which the t-test needs a little more than: each power() costs a
    # t quantile at its own df, so a search from 2 up (about 20 of them at a thousand pairs) is slow.
    z = NormalDist()
    guess = ((z.inv_cdf(1.0 - level / 2.0) + z.inv_cdf(target)) * sd / abs(effect)) ** 2
    if guess > MAX_PAIRS:
        return math.inf
    n = max(2, math.ceil(guess))
    if power(effect, sd, n, level) >= target:  # rarely: search down from the guess for the first n short of it
        lo, hi, step = n, n, 1
        while hi > 2:
            below = max(2, hi - step)
            if power(effect, sd, below, level) < target:
                lo = below + 1
                break
            lo = hi = below
            step *= 2
    else:  # up from the guess, in growing steps, until one is enough
        lo, step = n + 1, max(1, n // 8)
        hi = min(n + step, MAX_PAIRS)
        while power(effect, sd, hi, level) < target:
            if hi == MAX_PAIRS:
                return math.inf
            lo, step = hi + 1, step * 2
            hi = min(hi + step, MAX_PAIRS)
    while lo < hi:  # the smallest n in [lo, hi] with enough power
        mid = (lo + hi) // 2
        if power(effect, sd, mid, level) >= target:
            hi = mid
        else:
            lo = mid + 1
    return float(hi)


# ---------------------------------------------------------------------------
# Seeds until decided: a group-sequential design
# ---------------------------------------------------------------------------
SIMULATIONS = 400_000  # null tables simulated to calibrate a boundary; Monte-Carlo error about 2% of alpha/rows
BOUNDARY_SEED = 20231  # fixed: the same boundary every time, so that --resume decides as the first run did


def table_level(alpha: float, rows: int, min_seeds: int | None, max_seeds: int) -> float:
    """What a table's Holm-adjusted p-values are compared with: alpha for a fixed number of seeds, or with
    --seeds auto (looks from min_seeds to max_seeds) the per-look level of look_level."""
    return alpha if min_seeds is None else look_level(alpha, max(1, rows), min_seeds, max_seeds)


@lru_cache(maxsize=64)
def look_level(alpha: float, rows: int, min_seeds: int, max_seeds: int) -> float:
    """The level at which Holm-adjusted p-values are compared at every look of `--seeds auto`
    (a look after each complete round of seeds, from min_seeds to max_seeds pairs), such that the
    chance of any wrong better/worse, at whichever look the ablation stops, is at most alpha.

    A Pocock-style constant boundary, calibrated by simulation. For one row, b is the per-look
    p threshold with P(some look has p <= b) = alpha/rows under no effect. Holm can reject a
    true-null row only when its p <= level/m0 (m0: the true-null rows), so comparing Holm-adjusted
    p-values with rows * b keeps the family-wise error at or below alpha for any m0 <= rows,
    whatever the dependence between rows (see the README for the references).
    """
    if max_seeds <= min_seeds:
        return alpha
    gamma = alpha / rows
    rng = np.random.default_rng(BOUNDARY_SEED)
    looks = np.arange(min_seeds, max_seeds + 1)
    t = np.empty((SIMULATIONS, len(looks)))
    for chunk in range(0, SIMULATIONS, 50_000):  # in chunks, to bound memory
        x = rng.standard_normal((min(50_000, SIMULATIONS - chunk), max_seeds))
        sums, squares = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
        k = looks - 1
        n = looks.astype(float)
        m = sums[:, k] / n
        sd = np.sqrt((squares[:, k] - n * m * m) / (n - 1))
        t[chunk : chunk + len(x)] = np.abs(m * np.sqrt(n) / sd)

    def crossing(b: float) -> float:
        crit = np.array([t_ppf(1.0 - b / 2.0, n - 1) for n in looks])
        return float(np.mean(np.any(t >= crit, axis=1)))

    lo, hi = gamma / len(looks), gamma  # Bonferroni over the looks, and no correction at all
    for _ in range(40):  # bisection in log space
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if crossing(mid) <= gamma else (lo, mid)
        if hi / lo < 1.001:
            break
    return rows * lo
