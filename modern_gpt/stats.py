"""Pure statistics for paired, multi-seed comparisons: no I/O, no torch, numbers in and numbers out.

The verdict rule (also in the README): a row is `better` or `worse` than its
reference only when
  1. the paired per-seed difference has the same sign for every seed,
  2. its mean magnitude exceeds the spread (max - min over seeds) of the reference row, and
  3. the 95% t-interval of the paired differences excludes 0.
Otherwise it is `noise`. With one seed it is always `noise`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

BETTER, WORSE, NOISE = "better", "worse", "noise"


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def spread(xs: Sequence[float]) -> float:
    """max - min: how far seeds alone move a number."""
    return max(xs) - min(xs) if xs else math.nan


def sample_sd(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return math.nan
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


# ---------------------------------------------------------------------------
# Student's t distribution, through the regularised incomplete beta function
# (continued fraction, as in Numerical Recipes), so that no SciPy is needed.
# ---------------------------------------------------------------------------
def _beta_cf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_ppf(q: float, df: float) -> float:
    """The q-quantile (q > 0.5) of Student's t, by bisection on the two-sided tail."""
    target = 2.0 * (1.0 - q)
    lo, hi = 0.0, 1.0
    while t_sf2(hi, df) > target:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf2(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


# ---------------------------------------------------------------------------
# Paired comparisons
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Paired:
    n: int
    delta: float  # mean of the per-seed differences
    ci_low: float  # 95% t-interval; NaN with fewer than two pairs
    ci_high: float
    p_value: float  # two-sided paired t-test; NaN with fewer than two pairs


def paired(deltas: Sequence[float], confidence: float = 0.95) -> Paired:
    n = len(deltas)
    d = mean(deltas)
    if n < 2:
        return Paired(n, d, math.nan, math.nan, math.nan)
    sd = sample_sd(deltas)
    if sd == 0.0:  # every seed moved by exactly the same amount
        return Paired(n, d, d, d, 1.0 if d == 0.0 else 0.0)
    se = sd / math.sqrt(n)
    half = t_ppf(1.0 - (1.0 - confidence) / 2.0, n - 1) * se
    return Paired(n, d, d - half, d + half, t_sf2(d / se, n - 1))


def verdict(deltas: Sequence[float], reference_spread: float, stats: Paired | None = None) -> str:
    """`better` (lower loss), `worse` or `noise`, by the rule in this module's docstring."""
    stats = stats or paired(deltas)
    if len(deltas) < 2:
        return NOISE
    same_sign = all(x < 0 for x in deltas) or all(x > 0 for x in deltas)
    beats_noise = abs(stats.delta) > reference_spread
    ci_excludes_zero = stats.ci_high < 0 or stats.ci_low > 0
    if same_sign and beats_noise and ci_excludes_zero:
        return BETTER if stats.delta < 0 else WORSE
    return NOISE


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order; NaN entries are left out and stay NaN."""
    present = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(present)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted
