"""Pure statistics for paired, multi-seed comparisons: no I/O, no torch, numbers in and numbers out.

The verdict rule is stated once, in docs/statistics.md ("The verdict rule"). Here it is code: paired t-tests,
and TOST with a margin. `adjust` adjusts them across the component rows: Hommel's procedure, or Holm-Shaffer's
step-down with a margin. `decide` decides. With --seeds auto, rows are stepped down against `boundary`.

The functions take numpy arrays as well as scalars. So the simulation tests run the very rule the report
uses, on tens of thousands of tables at once.
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
    try:
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    except OverflowError:  # a hand-edited loss of 1e308: no finite sd, and a table rather than a traceback
        return math.inf


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
    """The q-quantile (q > 0.5) of Student's t. Newton's method from the Cornish-Fisher expansion takes three or
    four tail evaluations; bisection takes over when that does not settle. The two-sided tail is convex in t > 0.
    So once Newton's steps are below the root, they approach it without overshooting."""
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


def _erfc(a: np.ndarray) -> np.ndarray:
    """math.erfc elementwise. Mapping over a list takes about 0.7x np.vectorize's time, with the same values."""
    return np.fromiter(map(math.erfc, a.ravel().tolist()), float, a.size).reshape(a.shape)


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
    """Two one-sided tests of |mean delta| < margin. A small p says the difference is smaller than the margin."""
    n = len(deltas)
    if n < 2 or not margin > 0:
        return math.nan
    d, sd = mean(deltas), sample_sd(deltas)
    if sd == 0.0:
        return 0.0 if abs(d) < margin else 1.0
    se = sd / math.sqrt(n)
    return max(t_sf((d + margin) / se, n - 1), t_sf((margin - d) / se, n - 1))


def holm(p_values) -> np.ndarray | list[float]:
    """Holm-Bonferroni adjusted p-values along the last axis, in the input order. NaN entries, rows without a
    test, are left out of the count and stay NaN. A list in, a list out. Holm-Shaffer's step-down (shaffer)
    with no equivalence tests is exactly Holm's, so this calls it."""
    p = np.asarray(p_values, dtype=float)
    adjusted = shaffer(p, np.full(p.shape, np.nan))[0]
    return adjusted.tolist() if isinstance(p_values, list | tuple) else adjusted


def hommel(p_values) -> np.ndarray | list[float]:
    """Hommel's adjusted p-values along the last axis, in the input order. NaN entries, rows without a test, are
    left out and stay NaN. A list in, a list out.

    Hommel's procedure is the closed test of Simes' intersection tests. It rejects every hypothesis Holm
    rejects, and more when several p-values are moderately small. Simes' test needs the rows' tests to be
    positively dependent or nearly independent. tests/verdict/test_verdict_rules.py measures its error rate in
    the plans' own correlations; the chained plan's neighbours correlate -0.5."""
    p = np.asarray(p_values, dtype=float)
    if p.size == 0 or p.ndim == 0:  # no rows, or one p: its own
        return (
            p_values
            if p.ndim == 0 and isinstance(p_values, float)
            else (p.tolist() if isinstance(p_values, list | tuple) else p.copy())
        )
    out = np.full(p.shape, np.nan)
    present = ~np.isnan(p)
    flat_p, flat_present = p.reshape(-1, p.shape[-1]), present.reshape(-1, p.shape[-1])
    flat_out = out.reshape(-1, p.shape[-1])
    patterns, which = np.unique(flat_present, axis=0, return_inverse=True)
    for k, pattern in enumerate(patterns):  # one pass per pattern of missing tests (one, in a simulation)
        if pattern.any():
            rows = np.flatnonzero(which.ravel() == k)
            flat_out[np.ix_(rows, np.flatnonzero(pattern))] = _hommel(flat_p[np.ix_(rows, np.flatnonzero(pattern))])
    out = flat_out.reshape(p.shape)
    return out.tolist() if isinstance(p_values, list | tuple) else (out if out.ndim else float(out))


def _hommel(p: np.ndarray) -> np.ndarray:
    """Hommel's adjusted p-values of (tables, n) p-values with none missing. The algorithm of R's p.adjust."""
    n = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    s = np.take_along_axis(p, order, axis=-1)
    i = np.arange(1, n + 1)
    q = np.repeat(np.min(n * s / i, axis=-1, keepdims=True), n, axis=-1)
    pa = q.copy()
    for m in range(n - 1, 1, -1):
        # within a subset of m hypotheses, Simes' test of the m - 1 largest and each smaller one
        q1 = np.min(m * s[..., n - m + 1 :] / np.arange(2, m + 1), axis=-1, keepdims=True)
        q = np.concatenate(
            [
                np.minimum(m * s[..., : n - m + 1], q1),
                np.repeat(np.minimum(m * s[..., n - m : n - m + 1], q1), m - 1, axis=-1),
            ],
            axis=-1,
        )
        pa = np.maximum(pa, q)
    adjusted = np.minimum(1.0, np.maximum(pa, s))
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def shaffer(p_values, p_same_values) -> tuple[np.ndarray, np.ndarray]:
    """One step-down over both kinds of test of a table with --margin. Each row has a t-test (null: no
    difference) and an equivalence test (null: a difference of at least the margin). This is Holm's step-down
    with Shaffer's restriction (Shaffer 1986, JASA 81:826).

    The two nulls of a row cannot both be true. So at each step the divisor is the number of rows that still
    have a test not rejected, not the number of tests. The first step is alpha / rows, as for either kind
    alone. The chance of any wrong better, worse or same in the table is at most alpha, whatever the dependence
    between tests.

    Returns adjusted p-values along the last axis, for the t-tests and the equivalence tests, in the input
    order. NaN entries (no test) are left out and stay NaN. Without equivalence tests (all NaN) it is Holm's
    procedure."""
    p, q = np.broadcast_arrays(np.asarray(p_values, dtype=float), np.asarray(p_same_values, dtype=float))
    rows = p.shape[-1]
    both = np.concatenate([p, q], axis=-1)
    present = ~np.isnan(both)
    filled = np.where(present, both, np.inf)
    order = np.argsort(filled, axis=-1, kind="stable")
    ranked = np.take_along_axis(filled, order, axis=-1)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(2 * rows), axis=-1)
    # a row is still open at step j while one of its tests sits at position j or later
    last = np.max(np.where(present, position, -1).reshape(*p.shape[:-1], 2, rows), axis=-2)
    open_rows = np.sum(last[..., :, None] >= np.arange(2 * rows), axis=-2)
    with np.errstate(invalid="ignore"):
        scaled = np.where(np.isinf(ranked), 0.0, open_rows * ranked)
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(scaled, axis=-1))
    adjusted = np.empty_like(adjusted_sorted)
    np.put_along_axis(adjusted, order, adjusted_sorted, axis=-1)
    adjusted = np.where(present, adjusted, np.nan)
    return adjusted[..., :rows], adjusted[..., rows:]


HOMMEL, SHAFFER, SEQUENTIAL = "hommel", "holm-shaffer", "sequential"  # the rules a fixed or --seeds auto table uses


def adjust(p_values, p_same_values=None) -> tuple[np.ndarray, np.ndarray, str]:
    """The fixed rule's adjusted p-values of a family of rows, and the rule's name: (p_adj, p_same_adj, rule).
    Hommel's over the t-tests. With equivalence tests (--margin), Holm-Shaffer's one step-down over both kinds:
    no Simes-type procedure is known to be valid there."""
    p = np.asarray(p_values, dtype=float)
    q = np.full(p.shape, np.nan) if p_same_values is None else np.asarray(p_same_values, dtype=float)
    if np.isnan(q).all():
        return hommel(p), q, HOMMEL
    p_adj, q_adj = shaffer(p, q)
    return p_adj, q_adj, SHAFFER


def decide(delta, p_holm, level: float, p_same_holm=np.nan):
    """The verdict from a row's mean difference and adjusted p-values (adjust's or --seeds auto's). Elementwise."""
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
@lru_cache(maxsize=4096)  # mde's bisections ask again for the same points: a report is summarised twice (write, print)
def power(effect: float, sd: float, n: int, level: float) -> float:
    """The chance that a two-sided paired t-test at `level` with n pairs detects a true mean difference
    `effect`, at per-pair sd `sd`. Exact, from the noncentral t distribution: the normal numerator is
    integrated over the chi-distributed denominator."""
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
    """The smallest |mean difference| that n pairs with this sd detect with probability `target`. Power depends
    on effect / sd alone, so this is sd times a unit sd's. A table of many rows with the same pairs searches
    once."""
    if n < 2 or not sd > 0:
        return math.nan
    return sd * _unit_mde(n, level, target)


@lru_cache(maxsize=4096)
def _unit_mde(n: int, level: float, target: float) -> float:
    sd = 1.0
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
    """The fewest pairs that detect a true difference `effect` with probability `target`, at per-pair sd `sd`.
    inf when more than MAX_PAIRS would be needed, NaN when unknown."""
    if not (sd > 0 and abs(effect) > 0) or math.isnan(sd) or math.isnan(effect):
        return math.nan
    # Start from the normal approximation, which the t-test needs a little more than: each power() costs a
    # t quantile at its own df, so a search from 2 up (about 20 of them at a thousand pairs) is slow.
    z = NormalDist()
    q = (z.inv_cdf(1.0 - level / 2.0) + z.inv_cdf(target)) * sd / abs(effect)
    guess = q * q  # not q ** 2, which raises OverflowError where a tiny effect (--margin 1e-160) makes it inf
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
# need: the pairs an inconclusive row would take, planned on a lower confidence bound of its effect
# ---------------------------------------------------------------------------
NEED_CONFIDENCE = 0.8  # need plans for this lower confidence bound on the row's standardised effect
NEED_SHOWN = 0.9  # and is shown only when this lower bound is above zero (a null row: about 1 in 10)
_NCT_POINTS = 200  # midpoints of the chi-distributed denominator: probabilities to about 1e-4


@lru_cache(maxsize=256)
def _chi_grid(df: float) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints and weights of s = sqrt(chi2_df / df), as in power()."""
    top = math.sqrt((df + 40.0 * math.sqrt(2.0 * df) + 100.0) / df)
    step = top / _NCT_POINTS
    s = (np.arange(_NCT_POINTS) + 0.5) * step
    log_density = (
        math.log(2.0) + (df / 2.0) * math.log(df / 2.0) - math.lgamma(df / 2.0) + (df - 1) * np.log(s) - df * s * s / 2
    )
    w = np.exp(log_density) * step
    return s, w / w.sum()


def nct_abs_cdf(x, noncentrality, df: float):
    """P(|T| <= x) for T of the noncentral t distribution with df degrees of freedom, elementwise. T = (Z + ncp) / s,
    integrated over s as power() does. Tested equal to SciPy's nct to about 1e-4."""
    s, w = _chi_grid(float(df))
    x, lam = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(noncentrality, dtype=float))
    xs = x[..., None] * s
    out = np.sum((_phi(xs - lam[..., None]) - _phi(-xs - lam[..., None])) * w, axis=-1)
    return out if out.ndim else float(out)


def _phi(x: np.ndarray) -> np.ndarray:
    """The normal cdf to 1e-7 absolute (Abramowitz & Stegun 7.1.26 for erf), vectorised. normal_cdf maps
    math.erfc over the elements: too slow for the hundreds of points per row that nct_abs_cdf integrates."""
    z = np.abs(x) / math.sqrt(2.0)
    k = 1.0 / (1.0 + 0.3275911 * z)
    poly = k * (0.254829592 + k * (-0.284496736 + k * (1.421413741 + k * (-1.453152027 + k * 1.061405429))))
    half_tail = 0.5 * poly * np.exp(-z * z)
    return np.where(x >= 0, 1.0 - half_tail, half_tail)


def effect_bound(t, df: float, ceiling: float, confidence: float):
    """A one-sided lower `confidence` bound on a row's noncentrality |delta| sqrt(n) / sigma. It comes from the
    row's |t| with df degrees of freedom, given that the row was inconclusive. `ceiling` is the critical value
    its |t| missed (inf for none). The bound is the noncentrality at which |t| is the `confidence` quantile of
    |T| truncated at the ceiling.

    Conditioning on the truncation corrects a winner's curse. A row reported because it was not decided has a
    |t| low for its effect. The bound is 0 where even no effect puts |t| below that quantile. Elementwise in t.
    It is read off the quantile's curve over the noncentrality, which increases in it. The curve is computed
    once per df, ceiling and level."""
    t = np.abs(np.asarray(t, dtype=float))
    top = float(np.max(np.where(np.isfinite(t), t, 0.0), initial=1.0))
    x, lam = _quantile_curve(float(df), float(ceiling), float(confidence), math.ceil(top) if ceiling == math.inf else 0)
    out = np.where(t <= x[0], 0.0, np.interp(t, x, lam))
    out = np.where(np.isnan(t), np.nan, out)
    return out if out.ndim else float(out)


@lru_cache(maxsize=256)
def _quantile_curve(df: float, ceiling: float, q: float, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """The q quantile of |T| given |T| <= ceiling: the curve effect_bound inverts. Noncentralities run from 0 up
    to where it is within 1e-6 of the ceiling. With no ceiling, they run past |t| = reach."""
    top_lam = (ceiling if math.isfinite(ceiling) else reach) * 1.5 + 12.0
    lam = np.concatenate([np.linspace(0.0, 4.0, 41)[:-1], np.geomspace(4.0, top_lam, 60)])
    within = nct_abs_cdf(np.full(lam.shape, ceiling), lam, df) if math.isfinite(ceiling) else np.ones(lam.shape)
    lo, hi = np.zeros(lam.shape), np.full(lam.shape, ceiling if math.isfinite(ceiling) else top_lam * 3.0 + 30.0)
    for _ in range(34):  # x with P(|T| <= x) = q P(|T| <= ceiling), by bisection
        mid = (lo + hi) / 2.0
        below = nct_abs_cdf(mid, lam, df) < q * within
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    x = np.maximum.accumulate((lo + hi) / 2.0)  # increasing in the noncentrality; guard the last digits
    return x, lam


def need_pairs(t: float, n: int, level: float) -> float:
    """The pairs that detect an inconclusive row's effect with 80% power at `level`. They are planned on the 80%
    lower confidence bound of its standardised effect: effect_bound, given that it missed the critical t at
    level. NaN when the 90% lower bound is zero, i.e. the row's |t| is no larger than one in ten null rows show.

    tests/verdict/test_verdict_rules.py simulates it. Run again with the same first seeds, the printed number
    decides the row about 80% of the time when its effect is one paired sd or more. On fresh seeds, as the table
    advises: 61-93% at 1 sd, from 3 to 10 seeds (tests/verdict/test_need_rerun.py). It is shown for about one
    null row in ten."""
    if n < 2 or math.isnan(t):
        return math.nan
    df = n - 1
    crit = t_ppf(1.0 - level / 2.0, df)
    ceiling = crit if abs(t) < crit else math.inf  # a row undecided with |t| past it (--seeds auto): no truncation
    if not effect_bound(t, df, ceiling, NEED_SHOWN) > 0:
        return math.nan  # no larger than one null row in ten: a number from it would be noise
    return pairs_needed(effect_bound(t, df, ceiling, NEED_CONFIDENCE) / math.sqrt(n), 1.0, level, POWER)


# ---------------------------------------------------------------------------
# The paired sd is itself an estimate: a chi-square confidence bound keeps mde's promise
# ---------------------------------------------------------------------------
SD_CONFIDENCE = 0.8  # mde and need use this one-sided upper confidence bound on a row's paired sd


def gamma_p(a: float, x: float) -> float:
    """The regularised lower incomplete gamma function P(a, x). Its series below a + 1, else Lentz's
    continued fraction for 1 - P (Numerical Recipes' gser and gcf)."""
    if x <= 0.0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        for k in range(1, 1000):
            term *= x / (a + k)
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return min(1.0, total * math.exp(log_front))
    b, c, d = x + 1.0 - a, 1.0 / _TINY, 1.0 / (x + 1.0 - a)
    h = d
    for k in range(1, 1000):
        an = -k * (k - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


@lru_cache(maxsize=1024)
def chi2_ppf(q: float, df: float) -> float:
    """The q-quantile of the chi-square distribution with df degrees of freedom, by bisection in log space."""
    lo, hi = 1e-300, max(1.0, 2.0 * df)
    while gamma_p(df / 2.0, hi / 2.0) < q:
        hi *= 2.0
    for _ in range(200):
        mid = math.sqrt(lo * hi) if hi / lo > 4.0 else (lo + hi) / 2.0
        lo, hi = (mid, hi) if gamma_p(df / 2.0, mid / 2.0) < q else (lo, mid)
        if hi - lo <= 1e-13 * hi:
            break
    return (lo + hi) / 2.0


def sd_bound(n: int, confidence: float = SD_CONFIDENCE) -> float:
    """The factor that turns the sample sd of n pairs into a one-sided upper `confidence` bound on the true sd.
    It is sqrt((n - 1) / chi2_{1 - confidence}(n - 1)), since (n - 1) s^2 / sigma^2 ~ chi-square(n - 1)."""
    return math.sqrt((n - 1) / chi2_ppf(1.0 - confidence, n - 1)) if n >= 2 else math.nan


def sd_interval(sd: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided `confidence` interval of the true sd from the sample sd of n pairs."""
    if n < 2 or not sd >= 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    return sd * math.sqrt((n - 1) / chi2_ppf(1.0 - tail, n - 1)), sd * math.sqrt((n - 1) / chi2_ppf(tail, n - 1))


def honest_mde(sd: float, n: int, level: float) -> float:
    """The smallest |mean difference| detected with 80% power, at the 80% upper confidence bound on the sd. The
    promise then holds in about 80% of tables. The sample sd itself keeps it in only 37-44%."""
    return mde(sd * sd_bound(n), n, level) if n >= 2 else math.nan


# ---------------------------------------------------------------------------
# Seeds until decided: a group-sequential design (--seeds auto)
# ---------------------------------------------------------------------------
SIMULATIONS = 400_000  # null paths simulated to calibrate a boundary
BOUNDARY_SEED = 20231  # fixed: the same boundary every time, so that --resume and report decide as the run did
MIN_CROSSINGS = 400  # fewer expected crossings than this and the simulation cannot resolve the level: Bonferroni
FUTILITY = 0.1  # an undecided row is not waited for when its conditional power at --max-seeds is below this
OBRIEN_FLEMING, BONFERRONI, FIXED = "obrien-fleming", "bonferroni", "fixed"


@dataclass(frozen=True)
class Boundary:
    """Per-row p-value thresholds of --seeds auto. levels[r - 1][k] is the threshold at look k (looks[k] pairs),
    when r rows with a test are still undecided. It is the alpha / r that Holm's step gives one row, spent over
    the looks. A verdict stands once a row crosses."""

    alpha: float
    looks: tuple[int, ...]
    levels: tuple[tuple[float, ...], ...]
    method: str  # OBRIEN_FLEMING (simulated), BONFERRONI (alpha too small to simulate) or FIXED (one look)

    def level(self, open_rows: int, look: int = -1) -> float:
        """A row's threshold at a look, the last by default, when open_rows rows are undecided."""
        return self.levels[max(1, open_rows) - 1][look]


def _t_to_z(df: int) -> tuple[np.ndarray, np.ndarray]:
    """A table of log|t| against the normal quantile of the same two-sided p, for np.interp."""
    t = np.geomspace(1e-6, 1e9, 3000)
    p = np.asarray(t_sf2(t, df))
    z = np.array([-NormalDist().inv_cdf(x / 2.0) if x > 0 else 40.0 for x in p])
    return np.log(t), np.minimum(z, 40.0)


@lru_cache(maxsize=64)
def boundary(alpha: float, rows: int, min_seeds: int, max_seeds: int) -> Boundary:
    """The thresholds of --seeds auto: looks after each round of seeds from min_seeds to max_seeds pairs.

    O'Brien-Fleming-shaped: at look k the z-scale threshold is C * sqrt(max_seeds / n_k). So early looks are
    strict, and most of alpha is left for the last one. For each r, C is calibrated by simulation (fixed seed).
    A single null row's paired t-test then crosses at some look with probability alpha / r, less two
    Monte-Carlo standard errors (conservative).

    Holm's step-down over these thresholds, with verdicts that stand, is a closed test of weighted-Bonferroni
    group-sequential tests (Maurer & Bretz 2013). So the chance of any wrong better/worse is at most alpha,
    whatever the dependence between rows. Stopping earlier (every row decided, or futile) only removes chances
    to be wrong. When alpha / rows is too small for the simulation to resolve, every look gets
    alpha / r / looks: Bonferroni over the looks.
    """
    looks = tuple(range(min_seeds, max_seeds + 1))
    rows = max(1, rows)
    if len(looks) == 1:
        return Boundary(alpha, looks, tuple((alpha / r,) for r in range(1, rows + 1)), FIXED)
    if alpha / rows * SIMULATIONS < MIN_CROSSINGS:
        levels = tuple(tuple(alpha / r / len(looks) for _ in looks) for r in range(1, rows + 1))
        return Boundary(alpha, looks, levels, BONFERRONI)
    n = np.array(looks, dtype=float)
    tables = [_t_to_z(k - 1) for k in looks]
    rng = np.random.default_rng(BOUNDARY_SEED)
    worst = np.empty(SIMULATIONS)  # per path: max over looks of sqrt(n_k / N) z_k, the C that just crosses
    for start in range(0, SIMULATIONS, 50_000):  # in chunks, to bound memory
        x = rng.standard_normal((min(50_000, SIMULATIONS - start), max_seeds))
        sums, squares = np.cumsum(x, axis=1)[:, n.astype(int) - 1], np.cumsum(x * x, axis=1)[:, n.astype(int) - 1]
        m = sums / n
        sd = np.sqrt(np.maximum(squares - n * m * m, 1e-300) / (n - 1))
        log_t = np.log(np.maximum(np.abs(m * np.sqrt(n) / sd), 1e-6))
        z = np.stack([np.interp(log_t[:, k], *tables[k]) for k in range(len(looks))], axis=1)
        worst[start : start + len(x)] = np.max(z * np.sqrt(n / max_seeds), axis=1)
    worst = np.sort(worst)[::-1]
    levels = []
    for r in range(1, rows + 1):
        expected = alpha / r * SIMULATIONS
        allowed = int(expected - 2.0 * math.sqrt(expected))  # crossings allowed: two standard errors fewer
        c = (worst[allowed - 1] + worst[allowed]) / 2.0  # exactly `allowed` simulated paths cross
        levels.append(tuple(math.erfc(c * math.sqrt(max_seeds / k) / math.sqrt(2.0)) for k in looks))
    return Boundary(alpha, looks, tuple(levels), OBRIEN_FLEMING)


def step_down(p, done, levels) -> np.ndarray:
    """Holm's step-down at one look, along the last axis. Returns the rejected mask. r is the number of rows
    with a test not rejected yet. A row not yet rejected whose p is below levels[r - 1] is rejected, again until
    none is. done: the rows rejected at earlier looks, whose verdicts stand. NaN p: no test, not counted."""
    p = np.asarray(p, dtype=float)
    return joint_step_down(p, np.full(p.shape, np.nan), done, np.zeros(p.shape, bool), levels)[0]


def joint_step_down(p, p_same, done, same_done, levels):
    """Holm-Shaffer's step-down at one look over both kinds of test, along the last axis. p holds the t-tests.
    p_same holds the equivalence tests with --margin, and is all NaN without.

    r is the number of rows with a test not rejected yet, since a row's two nulls cannot both be true. An open
    test with p below levels[r - 1] is rejected, again until none is. done, same_done: the tests rejected at
    earlier looks, whose verdicts stand. Returns the two rejected masks, and for each test the r it was held to
    at this look. That is the r at which it was rejected, else the last. So its p can be read on alpha's
    scale."""
    p, p_same = np.asarray(p, dtype=float), np.asarray(p_same, dtype=float)
    done, same_done = np.array(done, dtype=bool), np.array(same_done, dtype=bool)
    levels = np.asarray(levels, dtype=float)
    tested, same_tested = ~np.isnan(p), ~np.isnan(p_same)
    held, same_held = np.zeros(p.shape, int), np.zeros(p.shape, int)
    for _ in range(2 * p.shape[-1] + 1):
        r = np.sum((tested & ~done) | (same_tested & ~same_done), axis=-1)
        threshold = np.where(r > 0, levels[np.clip(r, 1, len(levels)) - 1], -1.0)[..., None]
        with np.errstate(invalid="ignore"):
            new = tested & ~done & (p < threshold)
            new_same = same_tested & ~same_done & (p_same < threshold)
        held = np.where(~done, r[..., None], held)
        same_held = np.where(~same_done, r[..., None], same_held)
        if not (new.any() or new_same.any()):
            break
        done, same_done = done | new, same_done | new_same
    return done, same_done, held, same_held


def conditional_power(delta, sd, n, final: int, level, margin=None):
    """The chance that a row still undecided after n pairs is decided at `final` pairs, if it goes on as it
    went. That is, the true difference is today's mean, and the sd is known. Decided by the t-test at `level`
    (normal approximation), or with a margin by the equivalence test as well. Elementwise."""
    delta, sd, n, level = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (delta, sd, n, level)))
    distinct, where = np.unique(level, return_inverse=True)  # a few levels: one t quantile each
    crit = np.array([t_ppf(1.0 - q / 2.0, final - 1) if q > 0 else math.inf for q in distinct])[where]
    crit = crit.reshape(level.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        spread_ = np.sqrt(np.maximum(1.0 - n / final, 1e-12))  # of the final z, given the pairs so far
        mu = np.abs(delta) * math.sqrt(final) / sd
        cp = np.asarray(normal_cdf((mu - crit) / spread_)) + np.asarray(normal_cdf((-mu - crit) / spread_))
        if margin:
            se_final, moves = sd / math.sqrt(final), sd * np.sqrt(np.maximum(final - n, 0.0)) / final
            room = margin - crit * se_final  # the final mean must be within +-room for the equivalence test
            inside = np.asarray(normal_cdf((room - delta) / moves)) - np.asarray(normal_cdf((-room - delta) / moves))
            cp = np.maximum(cp, np.where(room > 0, inside, 0.0))
    return np.where(np.isfinite(cp), cp, 0.0)


CODES = np.array([INCONCLUSIVE, BETTER, WORSE, SAME], dtype=object)


@dataclass(frozen=True)
class Looks:
    """What --seeds auto decided, look by look: arrays over tables, then looks or rows."""

    verdict: np.ndarray  # (..., rows): each row's verdict where the rule stopped
    look: np.ndarray  # (..., rows): the look (index) at which it was decided; -1 for none
    decided: np.ndarray  # (..., looks): rows with a verdict after each look
    futile: np.ndarray  # (..., looks): rows undecided and not worth waiting for at each look
    stop: np.ndarray  # (...): the look (index) at which the rule stops; -1 if not within the looks given
    # (..., rows): each row's p on alpha's scale, the least over the looks it was read at of its p times alpha over
    # the threshold it was held to: below alpha exactly when the test crossed (the verdict), capped at 1
    p_adj: np.ndarray = None
    p_same_adj: np.ndarray = None


def sequential(delta, sd, pairs, p, p_same, bound: Boundary, margin=None, stop_at=None) -> Looks:
    """The --seeds auto rule over a run of looks (axis -2, the first looks of bound) for each row (axis -1).

    At each look, joint_step_down steps down the t-tests against the boundary. With a margin it takes the
    equivalence tests too. A row's first crossing is its verdict, and stands. At the same look, better/worse
    comes before same.

    The rule stops at the first look where every row is decided or futile, else at the last look. A row is
    futile when its conditional power at the last look is below FUTILITY, or when it has no test. Given
    stop_at, the rule stops there instead. What crosses after the stop is not a verdict. Given fewer looks than the
    boundary's (an ablation still running), the rule may not have stopped yet. stop is then -1, and every look
    given counts."""
    delta, sd, pairs, p, p_same = (np.asarray(v, dtype=float) for v in (delta, sd, pairs, p, p_same))
    shape, looks = delta.shape, delta.shape[-2]
    rows_done = np.zeros(shape[:-2] + shape[-1:], dtype=bool)
    same_done = rows_done.copy()
    code = np.zeros(rows_done.shape, dtype=int)
    look = np.full(rows_done.shape, -1)
    decided = np.zeros(shape[:-1], dtype=int)
    futile = np.zeros(shape[:-1], dtype=int)
    stop = np.full(shape[:-2], -1 if stop_at is None else stop_at)
    last = len(bound.looks) - 1
    levels = np.asarray(bound.levels, dtype=float)
    scaled = np.full(rows_done.shape, np.inf)  # each test's p over its threshold, times alpha: min over the looks
    same_scaled = scaled.copy()
    for k in range(looks):
        at = levels[:, k]
        same_k = p_same[..., k, :] if margin else np.full(p.shape[:-2] + p.shape[-1:], np.nan)
        now, now_same, held, same_held = joint_step_down(p[..., k, :], same_k, rows_done, same_done, at)
        fresh = code == 0
        counts = (stop < 0) | (k <= stop)  # a look after the stop (stop_at) is not read
        with np.errstate(invalid="ignore"):
            on_scale = p[..., k, :] * bound.alpha / at[np.clip(held, 1, None) - 1]
            same_on_scale = same_k * bound.alpha / at[np.clip(same_held, 1, None) - 1]
        scaled = np.where(fresh & counts[..., None], np.fmin(scaled, on_scale), scaled)
        same_scaled = np.where(fresh & counts[..., None], np.fmin(same_scaled, same_on_scale), same_scaled)
        code = np.where(fresh & now & ~rows_done & (delta[..., k, :] < 0), 1, code)
        code = np.where(fresh & now & ~rows_done & (delta[..., k, :] > 0), 2, code)
        code = np.where((code == 0) & now_same & ~same_done, 3, code)
        look = np.where(fresh & (code != 0), k, look)
        rows_done, same_done = now, now_same
        open_ = code == 0
        open_tests = np.sum(open_ & ~np.isnan(p[..., k, :]), axis=-1)
        final_level = np.asarray(bound.levels, dtype=float)[np.clip(open_tests, 1, None) - 1, -1]
        cp = conditional_power(
            delta[..., k, :], sd[..., k, :], pairs[..., k, :], bound.looks[-1], final_level[..., None], margin
        )
        hopeless = open_ & ((cp < FUTILITY) | np.isnan(p[..., k, :]))
        decided[..., k], futile[..., k] = np.sum(~open_, axis=-1), np.sum(hopeless, axis=-1)
        if stop_at is None:
            done = np.all(~open_ | hopeless, axis=-1) | (k >= last)
            stop = np.where((stop < 0) & done, k, stop)
    counted = np.where(stop < 0, looks - 1, stop)
    code = np.where(look <= counted[..., None], code, 0)
    look = np.where(code != 0, look, -1)
    nan = ~np.isfinite(scaled) & np.all(np.isnan(p), axis=-2)
    scaled = np.where(nan, np.nan, np.minimum(scaled, 1.0))
    same_scaled = np.where(~np.isfinite(same_scaled), np.nan, np.minimum(same_scaled, 1.0))
    return Looks(CODES[code], look, decided, futile, stop, scaled, same_scaled)
