"""Several metrics, one verdict: every (row, metric) of a table judged in one family. Its chance of any wrong
better/worse (or same) is at most alpha.

The rule (docs/statistics.md, "Several metrics") is a weighted Bonferroni split between two families. Each is
judged by the rule a table already uses.

- The primary metric, val_loss, gets VAL_SHARE of alpha over its component rows. At fixed seeds that is
  Hommel's procedure, as a one-metric table is judged.
- The other metrics get the rest, over every (row, metric) with a test, by Holm's step-down. It is valid under
  any dependence between metrics. A domain's loss and val's correlate. The in-context gain may not, and its
  sign can flip from row to row, where Simes' test is not known to hold.
- At fixed seeds without --margin, a family whose every test is rejected passes its share on to the other.
  This is the graphical procedure of Bretz et al. 2009. It is a closed test: the intersection of val's
  hypotheses I and the others' J is tested by Simes(I) at share * alpha or Bonferroni(J) at
  (1 - share) * alpha. Each is at its whole alpha when the other is empty. Each intersection test is of level
  alpha (Simes' assumptions within val, as today). The shortcut rejects only what that closed test rejects.
  So the family-wise error is at most alpha.
- With --margin, each family is one Holm-Shaffer step-down at its share. Nothing is passed on: a row's second
  null is never rejected, so a family is never exhausted.
- With --seeds auto, each family is stepped down against its own boundary (stats.boundary at its share of
  alpha). Val's decides when the ablation stops. The others are read at every look up to that stop, as the
  placebo is. A group-sequential boundary allows that, whatever the stopping time.

A (row, metric) with no value is "not tested": a wall, as a learned position table past its context. It is
outside the family, and costs the others nothing. The placebo row is a diagnostic per metric, tested alone at
alpha. With only val_loss, the family is today's, exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from .design import ALPHA, Design
from .stats import (
    BETTER,
    BONFERRONI,
    INCONCLUSIVE,
    WORSE,
    boundary,
    chi2_ppf,
    decide,
    holm,
    hommel,
    honest_mde,
    paired,
    sequential,
    shaffer,
    tost_p,
)
from .table import failed, need

VAL = "val_loss"  # the primary metric
VAL_SHARE = 0.8  # of alpha, spent on val's rows; the rest on every other (row, metric)
NOT_TESTED = "not tested"  # a (row, metric) without values (a wall): outside the family
WEIGHTED = "weighted"  # the rule's name: val by the table's rule at its share, the others by Holm at theirs
LONG_COLUMNS = [
    "row",
    "variant",
    "reference",
    "placebo",
    "metric",
    "mean",
    "delta",
    "ci_low",
    "ci_high",
    "p",
    "p_adj",
    "p_same",
    "p_same_adj",
    "verdict",
    "mde",
    "pairs",
    "sd",
]


# ---------------------------------------------------------------------------
# The rule, vectorised: (..., metrics, rows) p-values in, adjusted p-values on alpha's scale out
# ---------------------------------------------------------------------------
def shares(p, share: float = VAL_SHARE) -> tuple[np.ndarray, np.ndarray]:
    """Each family's starting share of alpha, along (..., metrics, rows): val's `share`, the others' 1 - share.
    A family gets the whole of alpha where the other has no test."""
    p = np.asarray(p, dtype=float)
    has_v = np.any(~np.isnan(p[..., 0, :]), axis=-1)
    has_o = np.any(~np.isnan(p[..., 1:, :].reshape(*p.shape[:-2], -1)), axis=-1)
    return np.where(has_o, share, 1.0), np.where(has_v, 1.0 - share, 1.0)


def adjust_metrics(p, p_same=None, alpha: float = ALPHA, share: float = VAL_SHARE):
    """The fixed-seed rule over a table's metrics (axis -2, val first) and component rows (axis -1).

    Returns the adjusted p-values on alpha's scale, for the t-tests and for the equivalence tests. They are
    below alpha exactly when the test is rejected. Also each family's share of alpha as spent: (...) arrays
    for val and for the others."""
    p = np.asarray(p, dtype=float)
    q = np.full(p.shape, np.nan) if p_same is None else np.broadcast_to(np.asarray(p_same, dtype=float), p.shape)
    lead = p.shape[:-2]
    v, o = p[..., 0, :], p[..., 1:, :].reshape(*lead, -1)
    wv, wo = shares(p, share)
    if np.isnan(q).all():
        av, ao = np.asarray(hommel(v)), np.asarray(holm(o))
        qv, qo = np.full(v.shape, np.nan), np.full(o.shape, np.nan)
        for _ in range(2):  # each family passes its share on at most once
            all_v = np.all(np.isnan(av) | (av < (wv * alpha)[..., None]), axis=-1)
            all_o = np.all(np.isnan(ao) | (ao < (wo * alpha)[..., None]), axis=-1)
            wv, wo = np.where(all_o, 1.0, wv), np.where(all_v, 1.0, wo)
    else:
        av, qv = shaffer(v, q[..., 0, :])
        ao, qo = shaffer(o, q[..., 1:, :].reshape(*lead, -1))

    def scaled(x, w):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(np.isnan(x), np.nan, np.minimum(1.0, x / w[..., None]))

    p_adj = np.concatenate([scaled(av, wv)[..., None, :], scaled(ao, wo).reshape(*lead, -1, p.shape[-1])], axis=-2)
    q_adj = np.concatenate([scaled(qv, wv)[..., None, :], scaled(qo, wo).reshape(*lead, -1, p.shape[-1])], axis=-2)
    return p_adj, q_adj, wv, wo


@dataclass(frozen=True)
class Auto:
    """--seeds auto over several metrics: verdicts and p_adj (..., metrics, rows) where the rule stopped.
    stop: the look at which val's rows stopped the ablation. bounds: val's and the others' boundaries."""

    verdict: np.ndarray
    p_adj: np.ndarray
    p_same_adj: np.ndarray
    look: np.ndarray
    stop: np.ndarray
    bounds: tuple


def _tests(p: np.ndarray) -> int:
    """The most tests a family has at any look of any table: its boundary's rows."""
    return max(1, int(np.max(np.sum(~np.isnan(p), axis=-1), initial=0)))


def sequential_metrics(
    delta, sd, pairs, p, p_same, alpha: float, min_seeds: int, max_seeds: int, margin=None, share: float = VAL_SHARE
) -> Auto:
    """--seeds auto over a table's metrics: inputs (..., looks, metrics, rows). Val's rows are stepped down
    against the boundary of val's share of alpha. They decide when the ablation stops: every val row decided or
    futile. Every other (row, metric) is stepped down against the boundary of the rest, up to that stop."""
    arrays = [np.asarray(x, dtype=float) for x in (delta, sd, pairs, p, p_same)]
    lead, looks, metrics, rows = arrays[0].shape[:-3], *arrays[0].shape[-3:]
    has_o = metrics > 1 and not np.isnan(arrays[3][..., 1:, :]).all()
    wv = share if has_o else 1.0
    v_bound = boundary(wv * alpha, _tests(arrays[3][..., 0, :]), min_seeds, max_seeds)
    val = sequential(*(x[..., 0, :] for x in arrays), v_bound, margin)
    verdict = np.full((*lead, metrics, rows), INCONCLUSIVE, dtype=object)
    p_adj, q_adj = np.full(verdict.shape, np.nan), np.full(verdict.shape, np.nan)
    look = np.full(verdict.shape, -1)
    verdict[..., 0, :], look[..., 0, :] = val.verdict, val.look
    p_adj[..., 0, :], q_adj[..., 0, :] = np.minimum(1.0, val.p_adj / wv), np.minimum(1.0, val.p_same_adj / wv)
    bounds = (v_bound, None)
    if has_o:
        flat = [x[..., 1:, :].reshape(*lead, looks, -1) for x in arrays]
        o_bound = boundary((1.0 - share) * alpha, _tests(flat[3]), min_seeds, max_seeds)
        other = sequential(*flat, o_bound, margin, stop_at=val.stop)
        shape = (*lead, metrics - 1, rows)
        verdict[..., 1:, :], look[..., 1:, :] = other.verdict.reshape(shape), other.look.reshape(shape)
        p_adj[..., 1:, :] = np.minimum(1.0, other.p_adj / (1.0 - share)).reshape(shape)
        q_adj[..., 1:, :] = np.minimum(1.0, other.p_same_adj / (1.0 - share)).reshape(shape)
        bounds = (v_bound, o_bound)
    return Auto(verdict, p_adj, q_adj, look, val.stop, bounds)


# ---------------------------------------------------------------------------
# Signal-to-noise: which metric is worth reading (Heineman et al. 2025, arXiv 2508.13144)
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SignalToNoise:
    """A metric's signal-to-noise ratio over a table's rows: the spread of the rows' means over the seed noise.
    The spread is max - min, the paper's dispersion. The noise is the pooled sd of one row's runs over seeds,
    the paper's noise. The paper takes both relative to the same mean, which cancels.

    low, high: the 95% interval from the noise's chi-square interval alone; the spread is itself measured.
    floor: the average spread of as many rows with no difference between them, in the same units. rows and
    seeds: what it was measured on."""

    metric: str
    snr: float
    low: float
    high: float
    floor: float
    rows: int
    seeds: int


@lru_cache(maxsize=64)
def expected_range(k: int) -> float:
    """The expected range (max - min) of k independent standard normals. It is the integral of 1 - F^k - (1 - F)^k."""
    if k < 2:
        return 0.0
    x = np.linspace(-9.0, 9.0, 20_001)
    f = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return float(np.trapezoid(1.0 - f**k - (1.0 - f) ** k, x))


def signal_to_noise(metric: str, groups: list) -> SignalToNoise:
    """The signal-to-noise ratio of a metric from its runs' values: one array per table row, over seeds."""
    groups = [np.asarray(g, dtype=float) for g in groups]
    groups = [g[np.isfinite(g)] for g in groups]
    groups = [g for g in groups if len(g)]
    df = sum(len(g) - 1 for g in groups)
    seeds = max((len(g) for g in groups), default=0)
    if len(groups) < 2 or df < 1:
        return SignalToNoise(metric, math.nan, math.nan, math.nan, math.nan, len(groups), seeds)
    means = np.array([g.mean() for g in groups])
    noise = math.sqrt(sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / df)
    if not noise > 0:
        return SignalToNoise(metric, math.inf, math.inf, math.inf, 0.0, len(groups), seeds)
    snr = float(means.max() - means.min()) / noise
    low = snr * math.sqrt(chi2_ppf(0.025, df) / df)  # the noise at its 95% upper bound
    high = snr * math.sqrt(chi2_ppf(0.975, df) / df)
    per_mean = math.sqrt(np.mean([1.0 / len(g) for g in groups]))  # a row mean's sd, in units of the noise
    return SignalToNoise(metric, snr, low, high, expected_range(len(groups)) * per_mean, len(groups), seeds)


def snr_note(ratios: list[SignalToNoise]) -> str | None:
    """The footer line: each metric's signal-to-noise ratio, and the metrics from most to least decisive."""
    known = [r for r in ratios if math.isfinite(r.snr)]
    if len(known) < 2:
        return None
    ranked = sorted(known, key=lambda r: -r.snr)
    cells = ", ".join(f"{r.metric} {r.snr:.1f} [{r.low:.1f}, {r.high:.1f}]" for r in ranked)
    floor = max(r.floor for r in known)
    seeds = max(r.seeds for r in known)
    return (
        f"Signal-to-noise (the spread of the rows' means over the seed sd, Heineman et al. 2025; 95% interval from "
        f"the seed sd over {seeds} seeds and {max(r.rows for r in known)} rows; rows with no difference give about "
        f"{floor:.1f}): {cells}. From the most to the least decisive: {', '.join(r.metric for r in ranked)}."
    )


# ---------------------------------------------------------------------------
# A table's runs: judge_metrics
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricsVerdict:
    """judge_metrics' answer. The long frame: one row per table row and metric, LONG_COLUMNS. Each metric's
    signal-to-noise ratio. The alpha each family was given, val's and the others', before any passing on. With
    --seeds auto, the look (index) at which val's rows stopped the ablation."""

    table: pd.DataFrame
    snr: list[SignalToNoise]
    metrics: tuple[str, ...]
    val_alpha: float
    other_alpha: float
    stop: int | None = None
    other_method: str = ""  # --seeds auto: the others' boundary (stats.OBRIEN_FLEMING, or BONFERRONI when too small)
    passed_on: bool = False  # val's share went on to the others (every val test rejected; the fixed rule alone)

    def decisive(self) -> list[str]:
        """The metrics from the most to the least decisive: highest signal-to-noise first."""
        return [r.metric for r in sorted((r for r in self.snr if math.isfinite(r.snr)), key=lambda r: -r.snr)]

    def verdicts(self) -> pd.DataFrame:
        """The verdicts as a (variant x metric) frame, for a glance."""
        return self.table.pivot(index="variant", columns="metric", values="verdict").reindex(
            index=list(dict.fromkeys(self.table["variant"])), columns=list(self.metrics)
        )

    def rule_note(self, alpha: float, margin, sequential_: bool) -> str:
        """The footnote that states the rule over several metrics, once."""
        others = len(self.metrics) - 1
        pass_on = (
            "; a share whose every test is rejected passes on to the other" if not margin and not sequential_ else ""
        )
        how = (
            "stepped down against its own --seeds auto boundary, val's rows deciding when the ablation stops and the others read "
            "up to that stop"
            + (
                " (the others' share is too small to simulate: Bonferroni over the looks)"
                if self.other_method == BONFERRONI
                else ""
            )
            if sequential_
            else "by Holm-Shaffer's step-down with the equivalence tests"
            if margin
            else f"by Hommel's procedure for {self.metrics[0]}, Holm's step-down for the others (valid under any dependence)"
        )
        at = "against the one-row boundary" if sequential_ else f"at {alpha:g}"
        return (
            f"Several metrics, one family: the chance of any wrong verdict across all rows and all {others + 1} "
            f"metrics is at most {alpha:g}. {self.metrics[0]} is primary, with {self.val_alpha:.3g} of alpha over its rows, the "
            f"other {others} metric{'s' if others != 1 else ''} {self.other_alpha:.3g} over every (row, metric) with "
            f"a test, each share {how}{pass_on}; a metric a row cannot be measured on is not tested and costs the "
            f"others nothing; the placebo is a diagnostic, tested alone {at} on every metric; p_adj is on alpha's "
            f"scale (below {alpha:g} exactly when decided) and mde at its share's first step."
        )


def _values(design: Design, runs: pd.DataFrame, metrics, seeds=None) -> dict:
    """{metric: {row: {seed: value}}} over the runs that trained, finite values only."""
    ok = ~failed(runs)
    if seeds is not None:
        ok &= runs["seed"].isin(list(seeds))
    good = runs[ok]
    out = {}
    for m in metrics:
        column = pd.to_numeric(good[m], errors="coerce") if m in good else pd.Series(np.nan, index=good.index)
        out[m] = {i: {} for i in range(len(design.rows))}
        for row, seed, x in zip(good["row"], good["seed"], column, strict=True):
            if math.isfinite(x):
                out[m][int(row)][int(seed)] = float(x)
    return out


def _paired_stats(design: Design, values: dict, metrics, rows: list[int]) -> dict:
    """Per (metric, row): mean, delta, sd, pairs, ci, p and p_same, and whether the cell is a wall. Arrays
    (metrics, rows)."""
    shape = (len(metrics), len(rows))
    out = {k: np.full(shape, np.nan) for k in ("delta", "sd", "pairs", "p", "p_same", "ci_low", "ci_high")}
    out["wall"] = np.zeros(shape, bool)
    for a, m in enumerate(metrics):
        for b, i in enumerate(rows):
            mine, theirs = values[m][i], values[m][design.rows[i].reference]
            if not mine or not theirs:
                out["wall"][a, b] = True
                continue
            deltas = [mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))]
            st = paired(deltas)
            out["delta"][a, b], out["sd"][a, b], out["pairs"][a, b], out["p"][a, b] = st.delta, st.sd, st.n, st.p_value
            out["ci_low"][a, b], out["ci_high"][a, b] = st.ci_low, st.ci_high
            out["p_same"][a, b] = tost_p(deltas, design.margin) if design.margin else math.nan
    return out


def judge_metrics(design: Design, runs: pd.DataFrame, metrics, share: float = VAL_SHARE) -> MetricsVerdict:
    """Every (table row, metric) of a table judged in one family, by the module's rule. metrics are runs
    columns, each lower-is-better; the first is the primary val_loss. A learning-rate grid is read as lr_view
    gives it."""
    metrics = tuple(metrics)
    if not metrics or metrics[0] != VAL or len(set(metrics)) < len(metrics):
        raise ValueError(f"metrics must be distinct and begin with {VAL!r}, got {metrics!r}")
    tested = [i for i, r in enumerate(design.rows) if r.reference is not None]
    components = [i for i in tested if not design.rows[i].placebo]
    placebos = [i for i in tested if design.rows[i].placebo]
    alpha = design.alpha
    values = _values(design, runs, metrics)
    now = _paired_stats(design, values, metrics, tested)
    comp = [tested.index(i) for i in components]
    plac = [tested.index(i) for i in placebos]
    verdict = np.full(now["p"].shape, INCONCLUSIVE, dtype=object)
    p_adj, q_adj = np.full(now["p"].shape, np.nan), np.full(now["p"].shape, np.nan)
    levels = np.full(now["p"].shape, np.nan)  # the first-step level of each test's family, for mde
    stop, method, passed_on = None, "", False
    wv, wo = shares(now["p"][:, comp], share) if comp else (1.0, 1.0)
    wv, wo = float(wv), float(wo)
    if not design.sequential:
        if comp:
            pa, qa, _, spent = adjust_metrics(now["p"][:, comp], now["p_same"][:, comp], alpha, share)
            passed_on = float(spent) > wo
            p_adj[:, comp], q_adj[:, comp] = pa, qa
            verdict[:, comp] = decide(now["delta"][:, comp], pa, alpha, qa)
            levels[:, comp] = _first_steps(now["p"][:, comp], wv * alpha, wo * alpha)
        if plac:  # each metric's placebo tested alone, at alpha
            p_adj[:, plac], q_adj[:, plac] = now["p"][:, plac], now["p_same"][:, plac]
            verdict[:, plac] = decide(now["delta"][:, plac], now["p"][:, plac], alpha, now["p_same"][:, plac])
            levels[:, plac] = alpha
    else:
        stop, method = _auto(design, runs, metrics, tested, comp, plac, share, verdict, p_adj, q_adj, levels)
    verdict = np.where(now["wall"], NOT_TESTED, verdict)
    table = _long(design, values, metrics, tested, now, verdict, p_adj, q_adj, levels)
    ratios = [_snr(design, values[m], m) for m in metrics]
    return MetricsVerdict(table, ratios, metrics, wv * alpha, wo * alpha, stop, method, passed_on)


def _first_steps(p: np.ndarray, val_alpha: float, other_alpha: float) -> np.ndarray:
    """Each test's first-step level, which every test is sure to meet: its family's alpha over its tests."""
    out = np.full(p.shape, np.nan)
    n_v, n_o = int(np.sum(~np.isnan(p[0]))), int(np.sum(~np.isnan(p[1:])))
    out[0] = val_alpha / max(1, n_v)
    out[1:] = other_alpha / max(1, n_o)
    return out


def _auto(design, runs, metrics, tested, comp, plac, share, verdict, p_adj, q_adj, levels) -> tuple[int, str]:
    """--seeds auto replayed over every metric: the looks the design records, each on its first seeds."""
    seeds = [look["seeds"] for look in (design.looks or {}).get("looks", [])] or [len(design.seeds)]
    per_look = [_paired_stats(design, _values(design, runs, metrics, design.seeds[:n]), metrics, tested) for n in seeds]
    keys = ("delta", "sd", "pairs", "p", "p_same")
    stacked = {k: np.stack([look[k] for look in per_look]) for k in keys}  # (looks, metrics, rows)
    first, last = design.min_seeds, len(design.seeds)
    stop, method = -1, ""
    if comp:
        auto = sequential_metrics(
            *(stacked[k][..., comp] for k in keys), design.alpha, first, last, design.margin, share
        )
        verdict[:, comp], p_adj[:, comp], q_adj[:, comp] = auto.verdict, auto.p_adj, auto.p_same_adj
        stop = int(auto.stop)
        v_bound, o_bound = auto.bounds
        levels[0, comp] = v_bound.level(_tests(stacked["p"][-1][0, comp]))
        if o_bound is not None:
            method = o_bound.method
            levels[1:, comp] = o_bound.level(_tests(stacked["p"][-1][1:, comp].ravel()))
    if plac:
        bound = design.family_boundary(placebo=True)
        for a in range(len(metrics)):
            one = sequential(*(stacked[k][:, a, plac] for k in keys), bound, design.margin, stop_at=stop)
            verdict[a, plac], p_adj[a, plac], q_adj[a, plac] = one.verdict, one.p_adj, one.p_same_adj
            levels[a, plac] = bound.level(1)
    return stop, method


def _long(design, values, metrics, tested, now, verdict, p_adj, q_adj, levels) -> pd.DataFrame:
    """The long frame: one row per (table row, metric). The first row, with no reference, has its mean alone."""
    records = []
    names = [r.name for r in design.rows]
    for a, m in enumerate(metrics):
        for i, r in enumerate(design.rows):
            mine = list(values[m][i].values())
            rec = dict.fromkeys(LONG_COLUMNS, math.nan)
            rec.update(
                row=i,
                variant=r.name,
                reference=names[r.reference] if r.reference is not None else "",
                placebo=r.placebo,
                metric=m,
                mean=float(np.mean(mine)) if mine else math.nan,
                verdict="",
                pairs=0,
            )
            if i in tested:
                b = tested.index(i)
                for k in ("delta", "ci_low", "ci_high", "p", "p_same", "sd"):
                    rec[k] = float(now[k][a, b])
                rec.update(
                    p_adj=float(p_adj[a, b]),
                    p_same_adj=float(q_adj[a, b]),
                    verdict=str(verdict[a, b]),
                    pairs=int(0 if math.isnan(now["pairs"][a, b]) else now["pairs"][a, b]),
                )
                n = rec["pairs"]
                rec["mde"] = honest_mde(rec["sd"], n, float(levels[a, b])) if n >= 2 else math.nan
            records.append(rec)
    return pd.DataFrame(records, columns=LONG_COLUMNS)


def _snr(design: Design, by_row: dict, metric: str) -> SignalToNoise:
    """A metric's signal-to-noise over the table's rows. The placebo, a copy of the first row, is left out."""
    groups = [list(by_row[i].values()) for i, r in enumerate(design.rows) if not r.placebo]
    return signal_to_noise(metric, groups)


def wrong_verdicts(verdict: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Which verdicts are wrong better/worse, given the true deltas: the simulations' count. Wrong is better or
    worse where the truth is 0, or of the opposite sign."""
    truth = np.broadcast_to(truth, verdict.shape)
    return ((verdict == BETTER) & (truth >= 0)) | ((verdict == WORSE) & (truth <= 0))


def judged_metrics(columns, sets: list[str]) -> list[str]:
    """The metrics a results folder's table judges: val_loss alone, or more with further sets (--eval-data).
    Then it is val_loss, then each set's loss, ctx2x_loss and icl_gain, those the runs hold. Bits per byte are
    shown, not tested: within one table they are a fixed multiple of the loss."""
    if not sets:
        return [VAL]
    wanted = [f"{name}_loss" for name in sets] + ["ctx2x_loss", "icl_gain"]
    return [VAL, *(m for m in wanted if m in set(columns))]


def with_family(design: Design, summary: list, result: MetricsVerdict) -> list:
    """The summary rows with val's verdicts, p_adj and mde from the family over every metric. Placebo rows are
    tested alone, as in a one-metric table, so theirs stay. need is planned at val's share's first step."""
    val = result.table[result.table["metric"] == VAL].set_index("row")
    tested = [i for i, r in enumerate(design.rows) if r.reference is not None and not r.placebo]
    level = result.val_alpha / max(1, len(tested))
    out = []
    for i, row in enumerate(summary):
        if i not in tested or i not in val.index:
            out.append(row)
            continue
        got = val.loc[i]
        row = row.with_(
            p_adj=float(got["p_adj"]),
            p_same_adj=float(got["p_same_adj"]),
            verdict=str(got["verdict"]),
            mde=float(got["mde"]),
        )
        needed = need(row, design.margin, level) if row.verdict == INCONCLUSIVE else math.nan
        out.append(row.with_(seeds_needed=needed if not design.sequential else row.seeds_needed))
    return out
