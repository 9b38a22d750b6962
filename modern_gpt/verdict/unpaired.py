"""Runs that share no seeds: Welch's two-sample t-test and a one-sample threshold test, Hommel across the rows.

The paired rule (stats.paired) needs each seed in both variants. Published runs rarely pair: 13 baseline runs
against 14 new ones, with independent seeds. Welch's test assumes neither equal counts nor equal sds
(Satterthwaite's degrees of freedom). A threshold claim is a one-sided one-sample t-test. The NanoGPT
speedrun's rule is one: "the mean is below 3.28 at p < 0.01". tests/verdict/test_judge_logs.py simulates both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.errors import UserError
from .design import ALPHA
from .stats import (
    BETTER,
    INCONCLUSIVE,
    MAX_PAIRS,
    NEED_CONFIDENCE,
    NEED_SHOWN,
    POWER,
    WORSE,
    _chi_grid,
    _phi,
    effect_bound,
    hommel,
    t_ppf,
    t_sf,
    t_sf2,
)

HOLDS, NOT_SHOWN = "holds", "not shown"  # a threshold claim's verdicts


@dataclass(frozen=True)
class Welch:
    n: int  # the row's runs
    n_ref: int  # the reference's runs
    delta: float  # mean(row) - mean(reference)
    se: float
    df: float  # Satterthwaite's
    ci_low: float
    ci_high: float
    p_value: float  # two-sided


def _moments(x) -> tuple[int, float, float]:
    x = np.asarray(x, dtype=float)
    return len(x), float(x.mean()) if len(x) else math.nan, float(x.std(ddof=1)) if len(x) > 1 else math.nan


def welch_arrays(mean, var, n, mean_ref, var_ref, n_ref):
    """Welch's Δ, standard error, Satterthwaite df and two-sided p, elementwise. The rule the table uses, in the
    form the simulation tests run on many tables at once."""
    va, vb = np.asarray(var, float) / n, np.asarray(var_ref, float) / n_ref
    delta, se = np.asarray(mean, float) - mean_ref, np.sqrt(va + vb)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / (va * va / (np.asarray(n) - 1) + vb * vb / (np.asarray(n_ref) - 1))
        p = t_sf2(delta / se, df)
    return delta, se, df, p


def welch(row, reference, confidence: float = 0.95) -> Welch:
    """Welch's t-test of mean(row) - mean(reference), two-sided, with its t-interval."""
    (n, m, s), (n_ref, m_ref, s_ref) = _moments(row), _moments(reference)
    if n < 2 or n_ref < 2:
        return Welch(n, n_ref, m - m_ref, math.nan, math.nan, math.nan, math.nan, math.nan)
    delta, se, df, p = (float(v) for v in welch_arrays(m, s * s, n, m_ref, s_ref * s_ref, n_ref))
    if se == 0.0:  # every run of both gave one number
        return Welch(n, n_ref, delta, 0.0, math.nan, delta, delta, 1.0 if delta == 0.0 else 0.0)
    half = t_ppf(1.0 - (1.0 - confidence) / 2.0, df) * se
    return Welch(n, n_ref, delta, se, df, delta - half, delta + half, p)


def _power_t(shift: float, df: float, level: float, sides: int = 2) -> float:
    """P(reject) of a t-test with df degrees of freedom, when the true mean difference is `shift` standard
    errors. The noncentral t, integrated over the chi-distributed denominator as stats.power does."""
    if not (df > 0 and math.isfinite(shift)):
        return math.nan
    s, w = _chi_grid(float(df))
    crit = t_ppf(1.0 - level / sides, df)
    reject = _phi(abs(shift) - crit * s) + (_phi(-abs(shift) - crit * s) if sides == 2 else 0.0)
    return float(np.sum(reject * w))


def _welch_df(sd: float, n: int, sd_ref: float, n_ref: int) -> tuple[float, float]:
    va, vb = sd * sd / n, sd_ref * sd_ref / n_ref
    return math.sqrt(va + vb), (va + vb) ** 2 / (va * va / (n - 1) + vb * vb / (n_ref - 1))


def welch_mde(sd: float, n: int, sd_ref: float, n_ref: int, level: float, target: float = POWER) -> float:
    """The smallest |mean difference| these runs detect with probability `target`, at their observed sds."""
    if n < 2 or n_ref < 2 or not (sd > 0 or sd_ref > 0):
        return math.nan
    se, df = _welch_df(sd, n, sd_ref, n_ref)
    lo, hi = 0.0, 1.0
    while _power_t(hi, df, level) < target:
        hi *= 2.0
    for _ in range(50):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _power_t(mid, df, level) < target else (lo, mid)
    return hi * se


def welch_need(delta: float, sd: float, sd_ref: float, level: float, target: float = POWER) -> float:
    """Runs per variant, as many of each, that detect `delta` with probability `target` at these sds. inf past
    MAX_PAIRS, NaN when unknown. Like stats.need_pairs, it answers for the effect as observed. An honest plan
    takes it as a guess, not a promise."""
    if not (abs(delta) > 0 and (sd > 0 or sd_ref > 0)) or math.isnan(delta):
        return math.nan

    def enough(k: int) -> bool:
        se, df = _welch_df(sd, k, sd_ref, k)
        return _power_t(delta / se, df, level) >= target

    hi = 2
    while not enough(hi):
        if hi >= MAX_PAIRS:
            return math.inf
        hi = min(hi * 2, MAX_PAIRS)
    lo = max(2, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return float(hi)


@dataclass(frozen=True)
class Threshold:
    n: int
    mean: float
    sd: float
    p_value: float  # one-sided: that the mean is past the target (the claim is false)
    power: float  # of a new set of n runs at the observed mean and sd
    runs_needed: float  # the fewest runs whose expected t reaches the critical value at the observed mean and sd


def threshold(x, target: float, level: float, higher_is_better: bool = False) -> Threshold:
    """The one-sample one-sided t-test of the claim mean < target; mean > target when higher is better."""
    n, m, s = _moments(x)
    if n < 2:
        return Threshold(n, m, s, math.nan, math.nan, math.nan)
    gap = (m - target) if higher_is_better else (target - m)  # > 0 when the runs are on the claim's side
    if s == 0.0:
        return Threshold(n, m, s, 0.0 if gap > 0 else 1.0, math.nan, math.nan)
    t = gap / (s / math.sqrt(n))
    p = float(t_sf(t, n - 1))
    power = _power_t(t, n - 1, level, sides=1) if gap > 0 else 0.0
    return Threshold(n, m, s, p, power, _runs_needed(gap, s, level))


def _runs_needed(gap: float, sd: float, level: float) -> float:
    """The fewest runs n with gap sqrt(n) / sd past the one-sided critical t, at n - 1 degrees of freedom."""
    if not gap > 0:
        return math.inf
    n = 2
    while gap * math.sqrt(n) / sd <= t_ppf(1.0 - level, n - 1):
        if n >= MAX_PAIRS:
            return math.inf
        n = n + 1 if n < 64 else int(n * 1.1)
    return float(n)


def verdicts(delta, p_adj, level: float) -> list[str]:
    """better / worse where the adjusted p is below level (lower is better), else inconclusive."""
    out = []
    for d, p in zip(delta, p_adj, strict=True):
        out.append(INCONCLUSIVE if not p < level else (BETTER if d < 0 else WORSE))
    return out


def claims(p_adj, level: float) -> list[str]:
    return [HOLDS if p < level else NOT_SHOWN for p in p_adj]


def adjusted(p_values) -> list[float]:
    """Hommel across the table's rows, as the paired table adjusts. NaN rows, with no test, are left out."""
    return list(hommel([float(p) for p in p_values])) if len(p_values) else []


# ---------------------------------------------------------------------------
# The table: each variant against its reference by Welch's t, and each against a threshold
# ---------------------------------------------------------------------------
def default_references(variants: list[str], steps: dict[str, float], reference: str | None) -> dict:
    """Each variant's reference: `reference` for all, else the baseline, else the first variant. The baseline is
    a variant whose name holds 'baseline'. Of several, it is the one trained longest, the record's schedule."""
    if reference is not None:
        if reference not in variants:
            raise UserError(f"--reference {reference!r} is not a variant; the variants are {', '.join(variants)}.")
        base = reference
    else:
        baselines = [v for v in variants if "baseline" in v.lower()]
        base = max(baselines, key=lambda v: (steps.get(v, 0), v)) if baselines else variants[0]
    return {v: (None if v == base else base) for v in variants}


def need_runs(w: Welch, sd: float, sd_ref: float, level: float) -> float:
    """Runs per variant that decide an inconclusive row 80% of the time. Planned on its effect's lower bound
    (stats.effect_bound), and shown, as stats.need_pairs does for the paired table."""
    if not (w.se > 0 and math.isfinite(w.df)):
        return math.nan
    t, crit = w.delta / w.se, t_ppf(1.0 - level / 2.0, w.df)
    if abs(t) >= crit:
        return math.nan
    if not effect_bound(t, w.df, crit, NEED_SHOWN) > 0:
        return math.nan
    return welch_need(effect_bound(t, w.df, crit, NEED_CONFIDENCE) * w.se, sd, sd_ref, level)


def table(
    frame: pd.DataFrame,
    metric: str = "loss",
    alpha: float = ALPHA,
    reference: str | None = None,
    threshold_at: float | None = None,
    higher_is_better: bool = False,
    order: list[str] | None = None,
) -> tuple[list[dict], list[str]]:
    """The rows, one per variant, and footnotes for runs that do not pair. frame has columns variant and metric,
    and optionally steps."""
    if threshold_at is not None and not (_is_number(threshold_at) and math.isfinite(threshold_at)):
        raise UserError(f"--threshold must be a finite number, got {threshold_at!r}.")
    variants = list(order) if order else list(dict.fromkeys(frame["variant"]))
    values = {v: frame.loc[frame["variant"] == v, metric].to_numpy(float) for v in variants}
    steps = {v: float(frame.loc[frame["variant"] == v, "steps"].max()) for v in variants} if "steps" in frame else {}
    refs = default_references(variants, steps, reference)
    sign = -1.0 if higher_is_better else 1.0  # the tests read lower as better
    rows, p = [], []
    for v in variants:
        x = values[v]
        n, m, s = _moments(x)
        row = {"variant": v, "runs": n, "steps": steps.get(v, math.nan), "mean": m, "sd": s, "vs": refs[v]}
        if refs[v] is not None:
            ref = values[refs[v]]
            w = welch(sign * x, sign * ref)
            sd_ref = _moments(ref)[2]
            row.update(
                delta=sign * w.delta,
                ci_low=min(sign * w.ci_low, sign * w.ci_high),
                ci_high=max(sign * w.ci_low, sign * w.ci_high),
                p=w.p_value,
                mde=welch_mde(s, n, sd_ref, len(ref), alpha),
                need=need_runs(w, s, sd_ref, alpha),
            )
            p.append(w.p_value)
        rows.append(row)
    compared = [r for r in rows if r["vs"] is not None]
    for r, q in zip(compared, adjusted(p), strict=True):
        r["p_adj"] = q
        r["verdict"] = verdicts([sign * r["delta"]], [q], alpha)[0]
        if r["verdict"] != INCONCLUSIVE:
            r["need"] = math.nan
    notes = _welch_notes(rows, alpha) if compared else []
    if threshold_at is not None:
        notes += _threshold(rows, values, threshold_at, alpha, higher_is_better, metric)
    return rows, notes


def _is_number(x) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def _welch_notes(rows: list[dict], alpha: float) -> list[str]:
    counts = sorted({r["runs"] for r in rows})
    return [
        "The runs share no seeds, so nothing pairs them: each row is compared with its reference (vs) by Welch's "
        "t-test (unequal variances, Satterthwaite's degrees of freedom), and the rows' p-values are adjusted together "
        f"(Hommel; p_adj), so that the chance of any wrong better or worse among them is at most {alpha:g}. "
        f"Runs per variant: {', '.join(map(str, counts))}. mde is the smallest |Δ| these runs detect 80% of the time "
        "at their sds; need: the runs per variant that would decide the row 80% of the time (docs/statistics.md)."
    ]


def _threshold(rows, values, target: float, alpha: float, higher_is_better: bool, metric: str) -> list[str]:
    tests = [threshold(values[r["variant"]], target, alpha, higher_is_better) for r in rows]
    for r, t, q in zip(rows, tests, adjusted([t.p_value for t in tests]), strict=True):
        r.update(p_target=t.p_value, p_target_adj=q, claim=claims([q], alpha)[0] if q == q else "")
        r.update(power=t.power, runs_needed=t.runs_needed)
    side = ">" if higher_is_better else "<"
    return [
        f"claim: each variant's mean {metric} {side} {target:g}, by a one-sided one-sample t-test (p_target), adjusted "
        f"across the {len(rows)} variants (Hommel; p_target_adj): holds where p_target_adj < {alpha:g}, a family of "
        "its own beside the comparisons. power: the chance that as many new runs would show it, were the true mean "
        "and sd those observed; runs_needed: the runs at which the observed mean and sd would reach p < "
        f"{alpha:g} (unadjusted)."
    ]


def exchange_rate(steps: np.ndarray, losses: np.ndarray, groups: np.ndarray):
    """The slope of mean loss over steps across groups of runs, one step count each, with a 95% t-interval.
    Weighted by each mean's variance. (slope, low, high, points), or None with fewer than two step counts. With
    two points the slope is their difference over the steps between them, and its CI is Welch's."""
    keys = list(dict.fromkeys(groups))
    x = np.array([steps[groups == g].mean() for g in keys])
    m = np.array([losses[groups == g].mean() for g in keys])
    n = np.array([(groups == g).sum() for g in keys])
    sd = np.array([losses[groups == g].std(ddof=1) if (groups == g).sum() > 1 else np.nan for g in keys])
    if len(set(x)) < 2 or np.isnan(sd).any():
        return None
    if len(keys) == 2:
        lo, hi = np.argsort(x)
        g_lo, g_hi = losses[groups == keys[lo]], losses[groups == keys[hi]]
        w = welch(g_hi, g_lo)
        span = x[hi] - x[lo]
        return w.delta / span, w.ci_low / span, w.ci_high / span, 2
    var = sd**2 / n
    wts = 1.0 / var
    xm = np.sum(wts * x) / wts.sum()
    slope = np.sum(wts * (x - xm) * m) / np.sum(wts * (x - xm) ** 2)
    resid = m - (np.sum(wts * m) / wts.sum() + slope * (x - xm))
    dof = len(keys) - 2
    scale = max(1.0, float(np.sum(wts * resid**2)) / dof) if dof > 0 else 1.0  # the points' own scatter, if larger
    se = math.sqrt(scale / np.sum(wts * (x - xm) ** 2))
    half = t_ppf(0.975, max(dof, 1)) * se if dof > 0 else 1.96 * se
    return float(slope), float(slope - half), float(slope + half), len(keys)


def judge_table_file(path, s, threshold_at: float | None) -> tuple[str, list[dict], list[str]]:
    """judge FILE without a seed column, or with --threshold: the unpaired table of its variant and metric columns."""
    from .reading import read_file

    return _judge_source(read_file(path), s, threshold_at)


def judge_frame(df, s, threshold_at: float | None) -> tuple[str, list[dict], list[str]]:
    """modern_gpt.judge(df, threshold=...): as judge_table_file."""
    from .reading import from_frame

    return _judge_source(from_frame(df), s, threshold_at)


def _judge_source(source, s, threshold_at: float | None) -> tuple[str, list[dict], list[str]]:
    """The unpaired table of a source's variant and metric columns. With seeds, only the threshold claims are
    tested here; the paired table is judge FILE's own."""
    variant_col, metric = source.real(s.variant_col), source.real(s.metric)
    for col, flag in ((variant_col, "--variant-col"), (metric, "--metric")):
        if col not in source.columns:
            raise UserError(f"{source.name} has no column {col!r}: name it with {flag}.")
    rows = []
    for i, (v, x) in enumerate(zip(source.column(variant_col), source.column(metric), strict=True)):
        try:
            number = float(x)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number) or str(v).strip() in ("", "nan", "None"):
            raise UserError(f"{source.name}, {source.where(i)}: a run needs a variant and a finite {metric}.")
        rows.append({"variant": str(v), "loss": number})
    frame = pd.DataFrame(rows)
    out, notes = table(frame, "loss", s.alpha, s.reference, threshold_at, s.higher_is_better, _order(s))
    if source.has(s.seed_col):
        out = [{k: v for k, v in r.items() if k in THRESHOLD_ONLY} for r in out]
        notes = [n for n in notes if n.startswith("claim")] + [
            f"{source.name} pairs its runs by {s.seed_col}: judge it without a threshold to compare the variants "
            "paired by seed."
        ]
    title = f"{s.metric} of {len(frame)} runs in {frame['variant'].nunique()} variants, from {source.name}"
    return title, out, notes


THRESHOLD_ONLY = ("variant", "runs", "mean", "sd", "p_target", "p_target_adj", "claim", "power", "runs_needed")


def _order(s):
    return list(s.order) if s.order else None
