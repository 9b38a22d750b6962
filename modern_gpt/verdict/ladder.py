"""The scale verdict: a compute multiplier k per row of a ladder of model sizes, with seed noise in its CI.

k is how many times the reference's compute would reach the row's loss: k = 2 is worth doubling the
reference's training FLOPs. Each row is charged its own compute (GQA and SwiGLU change the FLOPs per token).

The model, and what it assumes (docs/statistics.md, "The scale verdict", says it for users):
- Every row's mean val loss falls with its training compute C as L(C) = E + A_row * C^-alpha: one irreducible
  loss E and one exponent alpha shared by every row, one scale A_row per row (fit). Separate fits per row are
  ill-conditioned with three rungs; only the shape of the curve is read from the fit, never a row's own A.
- At each rung, the row's loss and its reference's are mapped through that curve to the compute each stands for:
  ln k = -(1/alpha) ln((L_row - E) / (L_ref - E)) + ln(C_ref / C_row). The reference's own fit residual cancels,
  and near one size this is the local form ln k = -delta / slope, the slope being -dL/d ln C.
- k over the ladder is the geometric mean of the rungs' k; the trend is the least-squares slope of ln k against
  log10 of the row's compute (k's factor per 10x compute), and the crossover is where that line meets k = 1.
- Seed noise: a seed pairs the batches of every row at a rung, so the seeds are resampled jointly, by the
  delete-one-seed jackknife of the whole computation, the fit included; each interval is a t interval on the
  jackknife's standard error with (seeds - 1) degrees of freedom. For a mean of paired differences this is
  exactly the paired t interval; tests/test_ladder.py measures its coverage and error rates on simulated ladders.
- "k != 1" and "k changes" are two families, each Holm-corrected over the component rows at alpha; the placebo
  row is tested alone, as in every table.
Nothing here knows how a run was trained: the ablation's ladder (ablation/ladder.py) and judge --compute-col
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
FAR = 10.0  # a --target-compute more than this many times the top rung's is marked an extrapolation
_GRID = np.linspace(0.0, 5.0, 26)  # E = m (1 - 10^-t): from 0 to within 1e-5 of the smallest mean loss m
_GOLDEN = 40  # golden-section steps between grid neighbours: t to about 1e-9


class LadderError(UserError):
    """A ladder that cannot be fitted or judged, in one sentence (its full stop added here)."""

    def __init__(self, message: str):
        super().__init__(message if message.endswith(".") else f"{message}.")


@dataclass(frozen=True, eq=False)
class LadderDesign:
    """What a ladder's table compares: its rows (each with its reference, the placebo marked), its rungs (labels,
    smallest first), the seeds, alpha, the trend's equivalence margin (a factor of k per 10x compute: `steady`
    when the trend is shown to be within it) and the compute to extrapolate k to."""

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
        """The component rows: those with a reference that are not the placebo (Holm's family)."""
        return [i for i, r in enumerate(self.rows) if r.reference is not None and not r.placebo]


def table_choices_problem(trend_margin, target) -> str | None:
    """Why --trend-margin or --target-compute cannot be a table's (the one check: scale, --resume, judge), or
    None."""
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
def _inner(loss: np.ndarray, x: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a given E (shape (...)), the shared alpha and each row's ln A by least squares of ln(L - E) on ln C
    with a row intercept, and the squared error in loss. loss, x: (..., rows, rungs)."""
    y = np.log(loss - e[..., None, None])
    xc = x - x.mean(-1, keepdims=True)
    yc = y - y.mean(-1, keepdims=True)
    alpha = -(xc * yc).sum((-1, -2)) / (xc * xc).sum((-1, -2))
    log_a = y.mean(-1) + alpha[..., None] * x.mean(-1)
    pred = e[..., None, None] + np.exp(log_a[..., None] - alpha[..., None, None] * x)
    return ((loss - pred) ** 2).sum((-1, -2)), alpha


def fit(loss: np.ndarray, flops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E, alpha) of L = E + A_row C^-alpha, least squares in loss, E from 0 to just under the smallest mean loss
    (a profile over E: for each E the rest is a linear fit). loss, flops: (..., rows, rungs)."""
    x = np.log(flops)
    m = loss.min((-1, -2))
    with np.errstate(divide="ignore", invalid="ignore"):
        sse = np.stack([_inner(loss, x, m * (1 - 10.0**-t))[0] for t in _GRID], -1)
        sse = np.where(np.isfinite(sse), sse, np.inf)
        best = sse.argmin(-1)
        lo, hi = _GRID[np.maximum(best - 1, 0)], _GRID[np.minimum(best + 1, len(_GRID) - 1)]
        ratio = (math.sqrt(5) - 1) / 2
        for _ in range(_GOLDEN):  # golden section between the best grid point's neighbours
            a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            fa, fb = (_inner(loss, x, m * (1 - 10.0**-t))[0] for t in (a, b))
            left = np.nan_to_num(fa, nan=np.inf) <= np.nan_to_num(fb, nan=np.inf)
            lo, hi = np.where(left, lo, a), np.where(left, b, hi)
        e = m * (1 - 10.0 ** -((lo + hi) / 2))
        alpha = _inner(loss, x, e)[1]
        return _refine(loss, x, e, alpha, m)


def _refine(loss: np.ndarray, x: np.ndarray, e, alpha, m, steps: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Least squares in loss itself, from the profile's start (whose inner fit is in log(L - E)): damped
    Gauss-Newton steps on (E, alpha, ln A_row), keeping E in [0, m). A step that does not lower the error is not
    taken."""
    log_a = (np.log(loss - e[..., None, None]) + alpha[..., None, None] * x).mean(-1)
    p = np.concatenate([e[..., None], alpha[..., None], log_a], -1)
    rows = loss.shape[-2]

    def residual(p):
        return loss - p[..., :1, None] - np.exp(p[..., 2:, None] - p[..., 1:2, None] * x)

    r = residual(p)
    sse = (r**2).sum((-1, -2))
    for _ in range(steps):
        g = np.exp(p[..., 2:, None] - p[..., 1:2, None] * x)  # (..., rows, rungs)
        jac = np.concatenate(
            [
                np.ones(g.shape + (1,)),
                (-x * g)[..., None],
                g[..., None] * np.eye(rows)[:, None, :],
            ],
            -1,
        ).reshape(*g.shape[:-2], -1, rows + 2)
        jtj = np.swapaxes(jac, -1, -2) @ jac
        jtj = jtj + 1e-9 * np.eye(rows + 2) * np.trace(jtj, axis1=-2, axis2=-1)[..., None, None]
        step = np.linalg.solve(jtj, (np.swapaxes(jac, -1, -2) @ r.reshape(*r.shape[:-2], -1, 1)))[..., 0]
        q = p + step
        q[..., 0] = np.clip(q[..., 0], 0.0, m * (1 - 1e-9))
        rq = residual(q)
        sq = (rq**2).sum((-1, -2))
        better = np.isfinite(sq) & (sq < sse) & (q[..., 1] > 0)
        p = np.where(better[..., None], q, p)
        r = np.where(better[..., None, None], rq, r)
        sse = np.where(better, sq, sse)
    return p[..., 0], p[..., 1]


def log_k(loss: np.ndarray, flops: np.ndarray, refs: list[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """ln k of each row at each rung against its reference (NaN for a row without one), and the fit's alpha:
    shape (..., rows, rungs) and (...)."""
    e, alpha = fit(loss, flops)
    out = np.full(loss.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, ref in enumerate(refs):
            if ref is None:
                continue
            gap = np.log((loss[..., i, :] - e[..., None]) / (loss[..., ref, :] - e[..., None]))
            out[..., i, :] = -gap / alpha[..., None] + np.log(flops[..., ref, :] / flops[..., i, :])
    return out, alpha


@dataclass
class Estimates:
    """What is estimated from one set of mean losses, per row: ln k at each rung, its mean over the rungs (ln k
    over the ladder, at the rungs' mean log10 compute) and its slope per decade of compute."""

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
    """The estimates from every seed, and the delete-one-seed estimates (a leading axis of seeds). runs: (...,
    seeds, rows, rungs) of final val losses; flops: (..., rows, rungs)."""
    n = runs.shape[-3]
    total = runs.sum(-3)
    full = estimate(total / n, flops, refs)
    left_out = (total[..., None, :, :] - runs) / (n - 1)
    return full, estimate(left_out, flops[..., None, :, :], refs)


def jack_var(left: np.ndarray, other: np.ndarray | None = None) -> np.ndarray:
    """The jackknife (co)variance from the delete-one values along the seeds axis (-1 here, moved there by the
    caller): (n - 1) / n times the sum of products of deviations."""
    n = left.shape[-1]
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
    """The scale table's rows and footnotes from a frame of runs with columns row, rung (0 = smallest), seed,
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
    _fill_intervals(rows, design, full, left, flops, len(seeds))
    return rows, notes + ladder_notes(design, rows, flops)


def _arrays(design: LadderDesign, runs) -> tuple[np.ndarray, np.ndarray, list[int], list[str]]:
    """(seeds, rows, rungs) of val losses over the seeds at which every row trained at every rung, the rows'
    compute at each rung (the mean over those runs), those seeds, and a footnote for the seeds left out."""
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
    return loss, compute, seeds, notes


def _check_falls(design: LadderDesign, loss: np.ndarray, flops: np.ndarray) -> None:
    """Every row's compute must grow from rung to rung, and its loss fall as it does; else no curve maps a loss to
    a compute."""
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
) -> None:
    """CIs, tests, Holm and verdicts from the jackknife; the crossover and the extrapolation from the line."""
    q = t_ppf(0.975, n - 1)
    lv, ls = np.moveaxis(left.level, 0, -1), np.moveaxis(left.slope, 0, -1)  # (rows, seeds)
    se_level, se_slope = np.sqrt(jack_var(lv)), np.sqrt(jack_var(ls))
    cov = jack_var(lv, ls)
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
            se = math.sqrt(max(0.0, se_level[i] ** 2 + 2 * u * cov[i] + u * u * se_slope[i] ** 2))
            mid = a + b * u
            row.k_target, row.k_target_low, row.k_target_high = (
                math.exp(mid),
                math.exp(mid - q * se),
                math.exp(mid + q * se),
            )


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
    """Where a + b u = 0 (u: log10 compute from the centre), in FLOPs, with Fieller's interval: the u at which the
    line's t interval holds 0 (unbounded, NaN ends, when the slope's own interval does)."""
    point = 10.0 ** (centre - a / b) if b != 0 else NAN
    qa, qb, qc = b * b - q * q * vb, 2 * (a * b - q * q * cab), a * a - q * q * va
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return point, NAN, NAN
    r1, r2 = sorted(((-qb - math.sqrt(disc)) / (2 * qa), (-qb + math.sqrt(disc)) / (2 * qa)))
    return point, 10.0 ** (centre + r1), 10.0 ** (centre + r2)


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
    outside = [r.variant for r in rows if math.isfinite(r.crossover) and not bottom <= r.crossover <= top]
    if outside:
        notes.append(f"The crossover of {', '.join(outside[:6])} is beyond the measured range: extrapolated.")
    return notes


def _target_note(target: float, bottom: float, top: float) -> str:
    """Where --target-compute lies against the ladder: past its top (far past: a guess), within it (the trend
    line read between rungs, where each rung's own k is measured), or below its bottom rung (a guess too)."""
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
    """What the figure draws: per row and rung the mean, min and max val loss over the complete seeds and the
    row's compute, and the shared fit (E, alpha, each row's ln A)."""
    loss, flops, _, _ = _arrays(design, runs)
    mean = loss.mean(0)
    e, alpha = fit(mean, flops)
    log_a = (np.log(mean - e) + alpha * np.log(flops)).mean(-1)
    return dict(mean=mean, low=loss.min(0), high=loss.max(0), flops=flops, e=float(e), alpha=float(alpha), log_a=log_a)
