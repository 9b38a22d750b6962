"""The scale verdict: a compute multiplier k per row of a ladder of model sizes, with seed noise in its CI.

k is how many times the reference's compute would reach the row's loss. k = 2 is worth doubling the
reference's training FLOPs. Each row is charged its own compute, since GQA and SwiGLU change the FLOPs per token.

The model, and what it assumes (docs/statistics.md, "The scale verdict", says it for users):
- Every row's mean val loss falls with its training compute C as L(C) = E + A_row * C^-alpha. One irreducible
  loss E and one exponent alpha are shared by every row; each row has its own scale A_row. `fit` finds them by
  least squares in loss. Separate fits per row are ill-conditioned with three rungs. Only the shape of the
  curve is read from the fit, never a row's own A.
- At each rung, the row's loss and its reference's are mapped through that curve to the compute each stands
  for: ln k = -(1/alpha) ln((L_row - E) / (L_ref - E)) + ln(C_ref / C_row). The reference's own fit residual
  cancels. Near one size this is the local form ln k = -delta / slope, the slope being -dL/d ln C.
- k over the ladder is the geometric mean of the rungs' k. The trend is the least-squares slope of ln k against
  log10 of the row's compute: k's factor per 10x compute. The crossover is where that line meets k = 1.
- Seed noise: a seed pairs the batches of every row at a rung, so the seeds are resampled jointly. The
  delete-one-seed jackknife reruns the whole computation, the fit included. Each interval is a t interval on
  the jackknife's standard error, with seeds - 1 degrees of freedom. For a mean of paired differences this is
  exactly the paired t interval. tests/verdict/test_ladder.py measures its coverage and error rates on
  simulated ladders.
- "k != 1" and "k changes" are two families, each Holm-corrected over the component rows at alpha. The
  placebo row is tested alone, as in every table.

Nothing here knows how a run was trained. The ablation's ladder (ablation/ladder.py) and judge --compute-col
both hand it a frame of runs (row, rung, seed, val_loss, flops) and a LadderDesign.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from ..core.errors import UserError
from .design import ALPHA, NAN, Row, statistics_problem
from .stats import holm, t_ppf, t_sf, t_sf2

GROWS, SHRINKS, STEADY, INCONCLUSIVE = "grows", "shrinks", "steady", "inconclusive"
BETTER, WORSE = "better", "worse"
MIN_RUNGS = 3  # a curved fit and a trend both need three sizes: with two, E cannot be told from the exponent
ROUND_OFF = 1e-9  # a standard error of ln k below this is round-off: seeds that agree exactly measure no noise
FAR = 10.0  # a --target-compute more than this many times the top rung's is marked an extrapolation
_GRID = np.linspace(math.log(1e-6), math.log(50.0), 41)  # ln(alpha * the ladder's span in ln C)
_GOLDEN = 45  # golden-section steps between grid neighbours: ln alpha to about 1e-9


class LadderError(UserError):
    """A ladder that cannot be fitted or judged, in one sentence. Its full stop is added here."""

    def __init__(self, message: str):
        super().__init__(message if message.endswith(".") else f"{message}.")


@dataclass(frozen=True, eq=False)
class LadderDesign:
    """What a ladder's table compares. Its rows, each with its reference, the placebo marked. Its rungs: labels,
    smallest first. The seeds and alpha. trend_margin: the trend's equivalence margin, a factor of k per 10x
    compute; `steady` when the trend is shown to be within it. target: the compute to extrapolate k to."""

    rows: tuple[Row, ...]
    rungs: tuple[str, ...]
    seeds: tuple[int, ...]
    alpha: float = ALPHA
    trend_margin: float | None = None
    target: float | None = None  # FLOPs
    source: str = ""
    lr_rule: str = ""  # how each rung's learning rate was chosen, as the footnote says it

    def __post_init__(self) -> None:
        why = self.problem()
        if why:
            raise LadderError(f"{why}.")

    def problem(self) -> str | None:
        if len(self.rungs) < MIN_RUNGS:
            return (
                f"a ladder needs at least {MIN_RUNGS} rungs (sizes), got {len(self.rungs)}: a curved loss-compute fit "
                "and a trend across sizes both need three"
            )
        if not self.rows:
            return "a ladder needs rows"
        why = statistics_problem(self.alpha, None)
        if why:
            return why
        return table_choices_problem(self.trend_margin, self.target)

    @property
    def tested(self) -> list[int]:
        """The component rows, Holm's family: those with a reference that are not the placebo."""
        return [i for i, r in enumerate(self.rows) if r.reference is not None and not r.placebo]


def table_choices_problem(trend_margin, target) -> str | None:
    """Why --trend-margin or --target-compute cannot be a table's, or None. The one check, for scale, --resume
    and judge."""
    for name, x in (("trend margin", trend_margin), ("target compute", target)):
        if x is not None and (isinstance(x, bool) or not isinstance(x, int | float)):
            return f"the {name} must be a number, not {x!r}"
    if trend_margin is not None and not 1.0 < trend_margin < math.inf:
        return f"--trend-margin is a factor of k per 10x compute above 1 (such as 1.1), got {trend_margin!r}"
    if target is not None and not 0.0 < target < math.inf:
        got = "a number too large for a float" if target == math.inf else repr(target)
        return f"--target-compute must be a positive number of FLOPs below 1e308 (such as 1e21), got {got}"
    return None


# ---------------------------------------------------------------------------
# The fit: shared E and alpha, a scale per row; batched over any leading axes
# ---------------------------------------------------------------------------
def _profile(loss: np.ndarray, u: np.ndarray, alpha: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a fixed alpha (shape (...)) the model is linear in E and each row's A. Returns the least-squares E,
    at most m, and the squared error, each row's A projected out. loss, u (ln C, centred): (..., rows, rungs)."""
    a = alpha[..., None, None]
    g = np.exp(-a * u)
    h = np.expm1(-a * u) / a  # 1 = g - alpha h: h keeps E's column exact as alpha -> 0 (the log-linear limit)

    def perp(v):  # v less its projection on each row's own g
        return v - g * (g * v).sum(-1, keepdims=True) / (g * g).sum(-1, keepdims=True)

    pl, ph = perp(loss), perp(h)
    lh, hh = (pl * ph).sum((-1, -2)), (ph * ph).sum((-1, -2))
    e = -lh / (alpha * hh)  # the residual is pl + E alpha ph: least squares in E
    sse = (pl * pl).sum((-1, -2)) - lh * lh / hh
    over = ~(e < m)  # above the bound (or undefined): E = m, the best there as the error is convex in E
    at_m = ((pl + (m * alpha)[..., None, None] * ph) ** 2).sum((-1, -2))
    return np.where(over, m, e), np.where(over, at_m, sse)


def fit(loss: np.ndarray, flops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E, alpha) of L = E + A_row C^-alpha, by least squares in loss. loss, flops: (..., rows, rungs).

    E is at most the smallest mean loss, and unbounded below. So a curve straight in ln C fits as its
    log-linear limit (alpha -> 0, E -> -inf), not bent at E = 0. alpha is found by a grid and golden section.
    For each alpha, E and each A are exact."""
    x = np.log(flops)
    u = x - x.mean((-1, -2), keepdims=True)
    span = u.max((-1, -2)) - u.min((-1, -2))
    m = loss.min((-1, -2))

    def sse(t):  # t = ln(alpha * span)
        return np.nan_to_num(_profile(loss, u, np.exp(t) / span, m)[1], nan=np.inf)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        grid = np.stack([sse(np.full(m.shape, t)) for t in _GRID], -1)
        best = grid.argmin(-1)
        lo, hi = _GRID[np.maximum(best - 1, 0)], _GRID[np.minimum(best + 1, len(_GRID) - 1)]
        ratio = (math.sqrt(5) - 1) / 2
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        fa, fb = sse(a), sse(b)
        for _ in range(_GOLDEN):  # golden section between the best grid point's neighbours, one new point a step
            left = fa <= fb
            lo, hi = np.where(left, lo, a), np.where(left, b, hi)
            keep, f_keep = np.where(left, a, b), np.where(left, fa, fb)
            new = np.where(left, hi - ratio * (hi - lo), lo + ratio * (hi - lo))
            f_new = sse(new)
            a, fa = np.where(left, new, keep), np.where(left, f_new, f_keep)
            b, fb = np.where(left, keep, new), np.where(left, f_keep, f_new)
        alpha = np.exp(np.where(fa <= fb, a, b)) / span
        return _profile(loss, u, alpha, m)[0], alpha


def log_k(loss: np.ndarray, flops: np.ndarray, refs: list[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """ln k of each row at each rung against its reference, NaN for a row without one, and the fit's alpha.
    Shapes (..., rows, rungs) and (...)."""
    e, alpha = fit(loss, flops)
    out = np.full(loss.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, ref in enumerate(refs):
            if ref is None:
                continue
            gap = np.log1p((loss[..., i, :] - loss[..., ref, :]) / (loss[..., ref, :] - e[..., None]))
            out[..., i, :] = -gap / alpha[..., None] + np.log(flops[..., ref, :] / flops[..., i, :])
    return out, alpha


@dataclass
class Estimates:
    """What is estimated from one set of mean losses, per row: ln k at each rung, and its mean over the rungs.
    That mean is ln k over the ladder, at the rungs' mean log10 compute. Then its slope per decade of compute."""

    rungs: np.ndarray  # (..., rows, rungs)
    level: np.ndarray  # (..., rows)
    slope: np.ndarray  # (..., rows)
    alpha: np.ndarray  # (...)


def estimate(loss: np.ndarray, flops: np.ndarray, refs: list[int | None]) -> Estimates:
    k, alpha = log_k(loss, flops, refs)
    x = np.log10(flops)
    xc = x - x.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        slope = (xc * (k - k.mean(-1, keepdims=True))).sum(-1) / (xc * xc).sum(-1)
    return Estimates(k, k.mean(-1), slope, alpha)


def jackknife(runs: np.ndarray, flops: np.ndarray, refs: list[int | None]) -> tuple[Estimates, Estimates]:
    """The estimates from every seed, and the delete-one-seed estimates on a leading axis of seeds.
    runs: (..., seeds, rows, rungs) of final val losses. flops: (..., rows, rungs)."""
    n = runs.shape[-3]
    total = runs.sum(-3)
    full = estimate(total / n, flops, refs)
    left_out = (total[..., None, :, :] - runs) / (n - 1)
    return full, estimate(left_out, flops[..., None, :, :], refs)


def jack_var(left: np.ndarray, other: np.ndarray | None = None) -> np.ndarray:
    """The jackknife (co)variance from the delete-one values along the seeds axis; the caller moves it to -1.
    It is (n - 1) / n times the sum of products of deviations."""
    n = left.shape[-1]
    with np.errstate(invalid="ignore"):  # a delete-one fit at E's bound gives an infinite ln k: NaN, inconclusive
        d = left - left.mean(-1, keepdims=True)
        o = d if other is None else other - other.mean(-1, keepdims=True)
        return (n - 1) / n * (d * o).sum(-1)


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------
def lcol(default=NAN, *, help: str, csv: bool = True):
    return field(default=default, metadata={"help": help, "csv": csv})


@dataclass
class LadderRow:
    """One row of the scale table. Field order is the ladder summary.csv's column order."""

    variant: str = lcol("", help="the row's name")
    reference: str = lcol("", help="the row it is compared with (empty: none)")
    k: float = lcol(help="the compute multiplier over the ladder: the reference's compute that reaches this row's loss")
    k_low: float = lcol(help="k's 95% confidence interval, low end (seed noise and the fit)")
    k_high: float = lcol(help="k's 95% confidence interval, high end")
    p: float = lcol(help="the test of k = 1 (the jackknife t test)")
    p_adj: float = lcol(help="p, Holm-adjusted over the component rows (p_holm before issue 40)")
    verdict: str = lcol("", help="better (k > 1), worse (k < 1) or inconclusive")
    trend_per_10x: float = lcol(help="k's factor per 10x compute (1: k steady)")
    trend_low: float = lcol(help="its 95% confidence interval, low end")
    trend_high: float = lcol(help="its 95% confidence interval, high end")
    p_trend: float = lcol(help="the test of no trend")
    p_trend_adj: float = lcol(help="p_trend, Holm-adjusted over the component rows")
    p_steady_adj: float = lcol(help="with --trend-margin: the equivalence test's p, Holm-adjusted")
    trend: str = lcol("", help="grows, shrinks, steady (with --trend-margin) or inconclusive")
    crossover: float = lcol(help="the compute (FLOPs) where the trend line meets k = 1 (with a decided trend)")
    crossover_low: float = lcol(help="its 95% confidence interval (Fieller's), low end; empty: unbounded")
    crossover_high: float = lcol(help="its 95% confidence interval, high end")
    target: float = lcol(help="--target-compute, in FLOPs")
    k_target: float = lcol(help="k extrapolated along the trend line to --target-compute")
    k_target_low: float = lcol(help="its 95% interval, low end (seed noise; not the trend line's own doubt)")
    k_target_high: float = lcol(help="its 95% interval, high end")
    pairs: int = lcol(0, help="the seeds at which every row trained at every rung")
    placebo: bool = lcol(False, help="the placebo row", csv=False)
    rungs: list = lcol(None, help="per rung: {rung, flops, k, k_low, k_high}", csv=False)

    def cells(self) -> dict:
        """The summary.csv row: its own columns, then per rung its compute and k with CI."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["csv"]}
        for i, r in enumerate(self.rungs or []):
            out.update(
                {f"flops_{i}": r["flops"], f"k_{i}": r["k"], f"k_{i}_low": r["k_low"], f"k_{i}_high": r["k_high"]}
            )
        return out


def ladder_table(design: LadderDesign, runs) -> tuple[list[LadderRow], list[str]]:
    """The scale table's rows and footnotes from a frame of runs. Its columns are row, rung (0 = smallest), seed,
    val_loss, flops and failed (a run that diverged or errored)."""
    loss, flops, seeds, notes = _arrays(design, runs)
    refs = [r.reference for r in design.rows]
    rows = [
        LadderRow(r.name, design.rows[r.reference].name if r.reference is not None else "", placebo=r.placebo)
        for r in design.rows
    ]
    for row in rows:
        row.pairs = len(seeds)
        row.target = design.target if design.target is not None else NAN
    if len(seeds) < 2:
        notes.append(
            f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} trained at every rung: k needs two or more for a CI; "
            "every verdict is inconclusive."
        )
        _fill_points(rows, estimate(loss.mean(0), flops, refs), flops, design)
        for row, r in zip(rows, design.rows, strict=True):  # as the footnote says: no CI, so nothing decided
            if r.reference is not None:
                row.verdict = row.trend = INCONCLUSIVE
        return rows, notes
    full, left = jackknife(loss, flops, refs)
    _fill_points(rows, full, flops, design)
    silent = _fill_intervals(rows, design, full, left, flops, len(seeds))
    if silent:
        notes.append(
            f"The seeds of {', '.join(silent[:6])} agree to round-off, so there is no seed noise to test against: a "
            "CI with no width is not evidence, and nothing of theirs is decided (do the seeds draw different batches "
            "and inits?)."
        )
    return rows, notes + ladder_notes(design, rows, flops)


def _arrays(design: LadderDesign, runs) -> tuple[np.ndarray, np.ndarray, list[int], list[str]]:
    """(seeds, rows, rungs) of val losses, over the seeds at which every row trained at every rung. Then the
    rows' compute at each rung (the mean over those runs), those seeds, and a footnote on the seeds left out."""
    nrows, nrungs = len(design.rows), len(design.rungs)
    ok = runs[~runs["failed"].astype(bool) & np.isfinite(runs["val_loss"].astype(float))]
    flops = ok["flops"].astype(float)
    if not (np.isfinite(flops) & (flops > 0)).all():
        bad = ok[~(np.isfinite(flops) & (flops > 0))].iloc[0]
        raise LadderError(
            f"the run of {design.rows[int(bad['row'])].name}, seed {int(bad['seed'])} at rung "
            f"{design.rungs[int(bad['rung'])]} has a training compute of {float(bad['flops'])!r}, not a positive number of "
            "FLOPs; k reads every run's compute"
        )
    counts = ok.groupby("seed").size()
    seeds = sorted(s for s in design.seeds if counts.get(s, 0) == nrows * nrungs)
    left_out = [s for s in design.seeds if s not in seeds]
    if not seeds:
        raise LadderError(
            "no seed trained every row at every rung, so no seed pairs the ladder; finish or retry the missing runs"
        )
    loss = np.full((len(seeds), nrows, nrungs), np.nan)
    compute = np.zeros((nrows, nrungs))
    index = {s: i for i, s in enumerate(seeds)}
    mine = ok[ok["seed"].isin(seeds)]
    for r in mine.itertuples(index=False):
        loss[index[r.seed], r.row, r.rung] = r.val_loss
    for (row, rung), f in mine.groupby(["row", "rung"])["flops"]:
        compute[row, rung] = math.exp(np.log(f.astype(float)).mean())
    if not (np.isfinite(compute) & (compute > 0)).all():
        raise LadderError("every run needs a positive, finite training compute (flops) for k")
    notes = []
    if left_out:
        notes.append(
            f"Seeds {', '.join(map(str, left_out[:8]))} left out: a run of theirs is missing or failed, and a seed "
            "pairs every row at every rung, so k uses only the seeds complete everywhere."
        )
    _check_falls(design, loss.mean(0), compute)
    _check_floor(design, loss.mean(0), compute)
    return loss, compute, seeds, notes


def _check_falls(design: LadderDesign, loss: np.ndarray, flops: np.ndarray) -> None:
    """Every row's compute must grow from rung to rung, and its loss fall as it does. Else no curve maps a loss
    to a compute."""
    for i, r in enumerate(design.rows):
        if not np.all(np.diff(flops[i]) > 0):
            shown = ", ".join(f"{x:.3g}" for x in flops[i])
            raise LadderError(
                f"{r.name}'s training compute does not grow from rung to rung ({shown} FLOPs): each rung must be "
                "larger than the one below"
            )
        order = np.argsort(flops[i])
        if not np.all(np.diff(loss[i][order]) < 0):
            shown = ", ".join(f"{x:.4g}" for x in loss[i][order])
            raise LadderError(
                f"{r.name}'s mean val loss does not fall as its compute grows across the rungs ({shown}), so no "
                "loss-compute curve maps a loss to a compute; give more tokens or steps per rung, or rungs further "
                "apart"
            )


def _check_floor(design: LadderDesign, loss: np.ndarray, flops: np.ndarray) -> None:
    """The fit's E must stay below every mean loss. At its bound the curve flattens onto the smallest one. That
    loss then stands for unbounded compute, and no k can be read there."""
    e, _ = fit(loss, flops)
    if e < loss.min():
        return
    i, j = np.unravel_index(loss.argmin(), loss.shape)
    raise LadderError(
        f"the loss-compute curve fitted to the ladder flattens onto {design.rows[i].name}'s mean val loss at rung "
        f"{design.rungs[j]} ({loss[i, j]:.4g}), its floor E, so that loss stands for unbounded compute and k cannot be "
        "read; the rows' losses stop falling faster than any power law allows: give the rungs more tokens or steps"
    )


def _fill_points(rows: list[LadderRow], est: Estimates, flops: np.ndarray, design: LadderDesign) -> None:
    for i, row in enumerate(rows):
        if design.rows[i].reference is None:
            row.rungs = [
                dict(rung=n, flops=float(flops[i, j]), k=NAN, k_low=NAN, k_high=NAN) for j, n in enumerate(design.rungs)
            ]
            continue
        row.k = math.exp(est.level[i])
        row.trend_per_10x = math.exp(est.slope[i])
        row.rungs = [
            dict(rung=n, flops=float(flops[i, j]), k=math.exp(est.rungs[i, j]), k_low=NAN, k_high=NAN)
            for j, n in enumerate(design.rungs)
        ]


def _fill_intervals(
    rows: list[LadderRow], design: LadderDesign, full: Estimates, left: Estimates, flops: np.ndarray, n: int
) -> list[str]:
    """CIs, tests, Holm and verdicts from the jackknife; the crossover and the extrapolation from the line.
    Returns the rows whose seeds agree to round-off; their tests are left undone."""
    q = t_ppf(0.975, n - 1)
    lv, ls = np.moveaxis(left.level, 0, -1), np.moveaxis(left.slope, 0, -1)  # (rows, seeds)
    with np.errstate(invalid="ignore"):
        se_level, se_slope = np.sqrt(jack_var(lv)), np.sqrt(jack_var(ls))
        cov = jack_var(lv, ls)
    silent = ~(se_level > ROUND_OFF) | ~(se_slope > ROUND_OFF)
    se_level, se_slope = np.where(silent, np.nan, se_level), np.where(silent, np.nan, se_slope)
    se_rungs = np.sqrt(jack_var(np.moveaxis(left.rungs, 0, -1)))
    with np.errstate(divide="ignore", invalid="ignore"):
        p_k = t_sf2(full.level / se_level, n - 1)
        p_t = t_sf2(full.slope / se_slope, n - 1)
        if design.trend_margin is not None:
            m = math.log(design.trend_margin)
            p_s = np.maximum(t_sf((full.slope + m) / se_slope, n - 1), t_sf((m - full.slope) / se_slope, n - 1))
        else:
            p_s = np.full(len(rows), np.nan)
    tested = design.tested
    holm_k, holm_t, holm_s = (_holm(p, tested) for p in (p_k, p_t, p_s))
    x = np.log10(flops)
    for i, row in enumerate(rows):
        if design.rows[i].reference is None:
            continue
        a, b = full.level[i], full.slope[i]
        row.k_low, row.k_high = math.exp(a - q * se_level[i]), math.exp(a + q * se_level[i])
        row.trend_low, row.trend_high = math.exp(b - q * se_slope[i]), math.exp(b + q * se_slope[i])
        row.p, row.p_trend = float(p_k[i]), float(p_t[i])
        row.p_adj, row.p_trend_adj, row.p_steady_adj = (
            (float(p_k[i]), float(p_t[i]), float(p_s[i])) if row.placebo else (holm_k[i], holm_t[i], holm_s[i])
        )
        row.verdict = _verdict(a, row.p_adj, design.alpha)
        row.trend = _trend(b, row.p_trend_adj, row.p_steady_adj, design.alpha)
        for j, r in enumerate(row.rungs):
            r["k_low"] = math.exp(full.rungs[i, j] - q * se_rungs[i, j])
            r["k_high"] = math.exp(full.rungs[i, j] + q * se_rungs[i, j])
        centre = x[i].mean()
        if row.trend in (GROWS, SHRINKS):
            row.crossover, row.crossover_low, row.crossover_high = _crossover(
                a, b, se_level[i] ** 2, se_slope[i] ** 2, cov[i], q, centre
            )
        if design.target is not None:
            u = math.log10(design.target) - centre
            var = se_level[i] ** 2 + 2 * u * cov[i] + u * u * se_slope[i] ** 2
            se = math.sqrt(max(0.0, var)) if math.isfinite(var) else NAN
            mid = a + b * u
            row.k_target, row.k_target_low, row.k_target_high = (
                math.exp(mid),
                math.exp(mid - q * se),
                math.exp(mid + q * se),
            )
    return [r.variant for i, r in enumerate(rows) if design.rows[i].reference is not None and silent[i]]


def _holm(p: np.ndarray, tested: list[int]) -> list[float]:
    out = [math.nan] * len(p)
    if tested:
        for i, v in zip(tested, holm([float(p[i]) for i in tested]), strict=True):
            out[i] = v
    return out


def _verdict(level: float, p_holm: float, alpha: float) -> str:
    if not p_holm < alpha:
        return INCONCLUSIVE
    return BETTER if level > 0 else WORSE


def _trend(slope: float, p_holm: float, p_steady: float, alpha: float) -> str:
    if p_holm < alpha:
        return GROWS if slope > 0 else SHRINKS
    return STEADY if p_steady < alpha else INCONCLUSIVE


def _crossover(a, b, va, vb, cab, q, centre) -> tuple[float, float, float]:
    """Where a + b u = 0 in FLOPs (u: log10 compute from the centre), with Fieller's interval. That interval is
    the u at which the line's t interval holds 0. It is unbounded, NaN ends, when the slope's own interval does."""
    at = centre - a / b if b != 0 else NAN
    if not abs(at) < 300:  # 0 or infinite FLOPs is never an answer
        return NAN, NAN, NAN
    point = 10.0**at
    qa, qb, qc = b * b - q * q * vb, 2 * (a * b - q * q * cab), a * a - q * q * va
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return point, NAN, NAN
    r1, r2 = sorted(((-qb - math.sqrt(disc)) / (2 * qa), (-qb + math.sqrt(disc)) / (2 * qa)))
    low, high = (10.0 ** (centre + r) if abs(centre + r) < 300 else NAN for r in (r1, r2))
    return point, low, high


def ladder_notes(design: LadderDesign, rows: list[LadderRow], flops: np.ndarray) -> list[str]:
    """What the numbers cannot say: the learning-rate rule, the extrapolation, and the range measured."""
    notes = []
    top, bottom = float(flops.max()), float(flops.min())
    notes.append(
        f"k compares compute on one curve L = E + A C^-alpha fitted to every row at once (shared E and alpha) over "
        f"{len(design.rungs)} rungs from {bottom:.3g} to {top:.3g} FLOPs; a crossover outside that range is "
        "extrapolation."
    )
    if len(design.rungs) == MIN_RUNGS:
        notes.append(
            f"{MIN_RUNGS} rungs, the fewest a trend can be read from: each row's trend line has one rung to spare, so "
            "a curve in k against compute would not show; a fourth rung would."
        )
    if design.lr_rule:
        notes.append(
            f"Learning rate per rung: {design.lr_rule}. A learning rate wrong at the top rung looks exactly like a "
            "component that stops helping."
        )
    if design.target is not None:
        notes.append(_target_note(design.target, bottom, top))
    decided = [r.variant for r in rows if r.trend in (GROWS, SHRINKS)]
    if decided:
        notes.append(
            f"The trend of {', '.join(decided[:6])} is read through the one exponent all rows share, which a row whose "
            "k changes pulls toward its own, so a trend's size is underestimated: without noise 1.5x per 10x compute "
            "reads 1.43x and 2x reads 1.82x, and at 5 seeds the CI of a 1.5x trend covers it in 78% of ladders, not "
            "95%. Read its size, crossover and top-rung k as the least the change may be."
        )
    outside = [r.variant for r in rows if math.isfinite(r.crossover) and not bottom <= r.crossover <= top]
    if outside:
        notes.append(f"The crossover of {', '.join(outside[:6])} is beyond the measured range: extrapolated.")
    return notes


def _target_note(target: float, bottom: float, top: float) -> str:
    """Where --target-compute lies against the ladder. Past its top; far past is a guess. Within it, the trend
    line is read between rungs, where each rung's own k is measured. Below its bottom rung is a guess too."""
    at = f"k at {target:.3g} FLOPs"
    if target > top:
        far = target > FAR * top
        return f"{at} extends each row's trend line {target / top:.3g}x past the top rung" + (
            ": far past what was measured; read it as a guess, not a measurement." if far else "."
        )
    if target >= bottom:
        return (
            f"{at} is within the ladder ({bottom:.3g} to {top:.3g} FLOPs): the trend line read there, beside the "
            "rungs' own k, which are measured."
        )
    return (
        f"{at} is below the bottom rung ({bottom:.3g} FLOPs), where nothing was measured; "
        "read it as a guess, not a measurement (--target-compute is meant for a size past the top rung)."
    )


def fitted_curves(design: LadderDesign, runs) -> dict:
    """What the figure draws. Per row and rung, the mean, min and max val loss over the complete seeds, and the
    row's compute. And the shared fit: E, alpha, each row's ln A."""
    loss, flops, _, _ = _arrays(design, runs)
    mean = loss.mean(0)
    e, alpha = fit(mean, flops)
    x = np.log(flops)
    g = np.exp(-alpha * (x - x.mean()))  # each row's A by least squares at the fit's E and alpha
    log_a = np.log((g * (mean - e)).sum(-1) / (g * g).sum(-1)) + alpha * x.mean()
    return dict(mean=mean, low=loss.min(0), high=loss.max(0), flops=flops, e=float(e), alpha=float(alpha), log_a=log_a)


# ---------------------------------------------------------------------------
# Predict, then verify: the lower rungs predict the top rung's delta
# ---------------------------------------------------------------------------
PREDICTION = 0.90  # the prediction interval's level


def predict_delta(loss: np.ndarray, flops: np.ndarray, top: np.ndarray, refs: list[int | None]) -> np.ndarray:
    """Each row's delta against its reference at the compute top (rows,), from mean losses at lower rungs
    (..., rows, rungs). k there is read along the row's trend line, and mapped through the reference's curve."""
    est = estimate(loss, flops, refs)
    e, alpha = fit(loss, flops)
    x = np.log(flops)
    centre = x.mean((-1, -2), keepdims=True)
    g = np.exp(-alpha[..., None, None] * (x - centre))
    scale = (g * (loss - e[..., None, None])).sum(-1) / (g * g).sum(-1)  # each row's A, at the centre's compute
    out = np.full(loss.shape[:-1], np.nan)
    lx = np.log10(flops)
    for i, ref in enumerate(refs):
        if ref is None:
            continue
        lnk = est.level[..., i] + est.slope[..., i] * (math.log10(top[i]) - lx[..., i, :].mean(-1))
        at_ref = np.exp(-alpha * (math.log(top[ref]) - centre[..., 0, 0]))
        shift = lnk + math.log(top[i] / top[ref])  # ln of the compute the row stands for over the reference's
        out[..., i] = scale[..., ref] * at_ref * np.expm1(-alpha * shift)
    return out


def predict_top(
    runs: np.ndarray, flops: np.ndarray, refs: list[int | None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top rung's predicted delta per row from the rungs below it, with a standard error and its degrees of
    freedom. runs: (..., seeds, rows, rungs); flops: (rows, rungs).

    The error is that of a prediction of the top rung's mean delta over the seeds. It adds the fit's, by the
    delete-one-seed jackknife of the lower rungs, and the top rung's own seed noise, independent of it. The
    degrees of freedom are Welch-Satterthwaite's, for two variances of seeds - 1 each."""
    n = runs.shape[-3]
    lower, top = runs[..., :-1], flops[:, -1]
    total = lower.sum(-3)
    point = predict_delta(total / n, flops[:, :-1], top, refs)
    left = predict_delta((total[..., None, :, :] - lower) / (n - 1), flops[:, :-1], top, refs)
    fit_var = jack_var(np.moveaxis(left, -2, -1))
    seed_var = np.full(point.shape, np.nan)
    for i, ref in enumerate(refs):
        if ref is not None:
            seed_var[..., i] = np.var(runs[..., i, -1] - runs[..., ref, -1], axis=-1, ddof=1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (n - 1) * (fit_var + seed_var) ** 2 / (fit_var**2 + seed_var**2)
    return point, np.sqrt(fit_var + seed_var), df


@dataclass
class HeldOut:
    """One row's check at the top rung: the delta the rungs below predicted, with its 90% prediction interval.
    And the delta observed there, with its 95% CI. inside: the interval holds it. sign_right: for a row decided
    there (its CI excludes 0), the sign was right. Both are None where the row gets no prediction."""

    variant: str
    reference: str
    predicted: float = NAN
    predicted_low: float = NAN
    predicted_high: float = NAN
    observed: float = NAN
    observed_low: float = NAN
    observed_high: float = NAN
    inside: bool | None = None
    decided: bool = False
    sign_right: bool | None = None


def holdout_check(design: LadderDesign, runs, skip: tuple[int, ...] = ()) -> tuple[list[HeldOut], list[str]]:
    """Predict, then verify. Fit k and its trend on every rung but the top one, and predict each row's delta at
    the top rung. Then compare with what the top rung measured. skip: rows given no prediction, as for a best
    learning rate at its grid's edge. Needs four rungs (three below the top) and two seeds."""
    loss, flops, seeds, _ = _arrays(design, runs)
    refs = [r.reference for r in design.rows]
    n = len(seeds)
    if len(design.rungs) <= MIN_RUNGS or n < 2:
        return [], []
    with np.errstate(divide="ignore", invalid="ignore"):
        point, se, df = predict_top(loss, flops, refs)
    out = []
    for i, r in enumerate(design.rows):
        if r.reference is None:
            continue
        row = HeldOut(r.name, design.rows[r.reference].name)
        d = loss[:, i, -1] - loss[:, r.reference, -1]
        half = t_ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n)
        row.observed, row.observed_low, row.observed_high = d.mean(), d.mean() - half, d.mean() + half
        row.decided = bool(row.observed_low > 0 or row.observed_high < 0)
        if i not in skip and np.isfinite(point[i]) and se[i] > 0 and df[i] > 0:
            width = t_ppf(0.5 + PREDICTION / 2, float(df[i])) * se[i]
            row.predicted, row.predicted_low, row.predicted_high = point[i], point[i] - width, point[i] + width
            row.inside = bool(row.predicted_low <= row.observed <= row.predicted_high)
            row.sign_right = bool(np.sign(row.predicted) == np.sign(row.observed)) if row.decided else None
        out.append(row)
    return out, _holdout_notes(design, out, skip)


def _holdout_notes(design: LadderDesign, rows: list[HeldOut], skip: tuple[int, ...]) -> list[str]:
    """The one line under the table, each row's check, and the rows given no prediction."""
    top = design.rungs[-1]
    made = [r for r in rows if r.inside is not None]
    signed = [r for r in made if r.sign_right is not None]
    line = (
        f"Held out: the lower rungs predicted {sum(r.inside for r in made)} of {len(made)} rows' Δ at the top rung "
        f"{top} within the {PREDICTION:.0%} interval; the sign was right for {sum(r.sign_right for r in signed)} of "
        f"{len(signed)} rows decided there."
    )
    each = "; ".join(
        f"{r.variant}: predicted {r.predicted:+.4f} [{r.predicted_low:+.4f}, {r.predicted_high:+.4f}], observed "
        f"{r.observed:+.4f} [{r.observed_low:+.4f}, {r.observed_high:+.4f}], {'inside' if r.inside else 'outside'}"
        for r in made
    )
    notes = [line, f"Top rung {top}, predicted from the rungs below it against observed: {each}."] if made else [line]
    if skip:
        names = ", ".join(design.rows[i].name for i in skip if design.rows[i].reference is not None)
        notes.append(
            f"No prediction for {names}: its best learning rate sits at the edge of its grid at some rung, so its "
            "curve may be the grid's, not the component's; widen --lrs."
        )
    return notes
