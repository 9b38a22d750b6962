"""The verdict's third edition, proven: Hommel's procedure for the fixed rule, one Holm-Shaffer step-down for
tables with --margin, need planned on a lower confidence bound, and --seeds auto's p_adj and placebo. Each rule
is compared with an independent reference (the closed test it shortcuts, SciPy) and its error rate and power are
measured by simulation (fixed RNG, enough tables for a tight Monte-Carlo error) in the plans' own shapes: the
chained (cumulative) plan, whose neighbouring rows correlate -0.5, and the single and leave-one-out plans, whose
rows share one reference and correlate +0.5, with unequal row sds."""

import itertools
import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as scipy_stats

from modern_gpt.verdict.stats import (
    BETTER,
    INCONCLUSIVE,
    NEED_CONFIDENCE,
    NEED_SHOWN,
    SAME,
    WORSE,
    adjust,
    boundary,
    decide,
    effect_bound,
    holm,
    hommel,
    mde,
    nct_abs_cdf,
    need_pairs,
    sequential,
    shaffer,
    t_ppf,
    t_sf,
    t_sf2,
)

TABLES = 20_000
ALPHA = 0.05
RUN_SDS = np.array([0.006, 0.006, 0.022, 0.025, 0.007, 0.014, 0.035])  # per run: paired sds 0.0085-0.04


def mc(rate: float, tables: int = TABLES) -> float:
    """Three Monte-Carlo standard errors of a rate measured over `tables` tables."""
    return 3 * math.sqrt(rate * (1 - rate) / tables)


# ---------------------------------------------------------------------------
# The procedures against the definitions they shortcut
# ---------------------------------------------------------------------------
def closed_simes(p: np.ndarray) -> np.ndarray:
    """Hommel by definition: the closed test of Simes' tests, every intersection enumerated."""
    out = np.zeros(len(p))
    for size in range(1, len(p) + 1):
        for subset in itertools.combinations(range(len(p)), size):
            ranked = np.sort(p[list(subset)])
            simes = min(1.0, float(np.min(size * ranked / np.arange(1, size + 1))))
            out[list(subset)] = np.maximum(out[list(subset)], simes)
    return out


def closed_bonferroni_restricted(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The closed test of Bonferroni tests over the intersections that can be true when each row's two nulls
    (no difference; a difference of at least the margin) exclude each other: at most one per row."""
    rows = len(p)
    both = np.concatenate([p, q])
    out = np.zeros(2 * rows)
    for pick in itertools.product((None, 0, 1), repeat=rows):  # per row: neither, its t-test, its equivalence test
        chosen = [i + rows * k for i, k in enumerate(pick) if k is not None]
        if chosen:
            bonferroni = min(1.0, len(chosen) * float(np.min(both[chosen])))
            out[chosen] = np.maximum(out[chosen], bonferroni)
    return out


def test_hommel_is_the_closed_test_of_simes_and_skips_missing_tests():
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = rng.uniform(0, 0.2, rng.integers(1, 8)) ** rng.uniform(0.5, 3)
        assert np.allclose(hommel(p), closed_simes(p), rtol=1e-12, atol=0)
    assert hommel([0.01, 0.02, 0.03, math.nan, 0.04]) == pytest.approx([0.04] * 3 + [math.nan, 0.04], nan_ok=True)
    many = rng.uniform(0, 0.1, (50, 6))
    many[::7, 2] = np.nan  # two patterns of missing tests in one stack
    stacked = hommel(many)
    for got, row in zip(stacked, many, strict=True):
        keep = ~np.isnan(row)
        assert np.allclose(got[keep], closed_simes(row[keep])) and np.isnan(got[~keep]).all()
    # never less than Holm rejects, sometimes more: (0.03, 0.04) at 0.05 is two rejections for Hommel, none for Holm
    tested = ~np.isnan(many)
    assert np.all(stacked[tested] <= np.asarray(holm(many))[tested] + 1e-15)
    assert hommel([0.03, 0.04]) == pytest.approx([0.04, 0.04]) and min(holm([0.03, 0.04])) == pytest.approx(0.06)


def test_holm_shaffer_never_rejects_what_its_closed_test_does_not_and_is_holm_without_a_margin():
    rng = np.random.default_rng(1)
    for _ in range(200):
        rows = int(rng.integers(1, 6))
        p, q = rng.uniform(0, 0.1, rows) ** 1.5, rng.uniform(0, 0.1, rows) ** 1.5
        p_adj, q_adj = shaffer(p, q)
        closed = closed_bonferroni_restricted(p, q)
        assert np.all(np.concatenate([p_adj, q_adj]) >= closed - 1e-15)  # valid: its rejections are the closed test's
    # the divisor counts rows, not tests: the first step is alpha / rows, as for one kind of test alone
    assert shaffer([0.001, 0.02, 0.5], [0.9, 0.01, 0.03])[0] == pytest.approx([0.003, 0.06, 1.0])
    assert shaffer([0.001, 0.02, 0.5], [0.9, 0.01, 0.03])[1] == pytest.approx([1.0, 0.03, 0.06])
    p = rng.uniform(0, 0.1, (40, 6))
    assert np.allclose(shaffer(p, np.full(p.shape, np.nan))[0], holm(p))
    assert adjust([0.01, 0.02])[2] == "hommel" and adjust([0.01, 0.02], [0.5, 0.01])[2] == "holm-shaffer"


def test_the_noncentral_t_and_the_effect_bound_match_scipy():
    def cdf(x, df, lam):  # P(|T| <= x), from the survival functions (SciPy's cdf is NaN far in the tail)
        return scipy_stats.nct.sf(-x, df, lam) - scipy_stats.nct.sf(x, df, lam)

    for df in (2, 4, 9, 29):
        for lam in (0.0, 0.5, 2.0, 5.0, 9.0):
            for x in (0.3, 1.0, 2.5, 4.0, 12.0):
                assert nct_abs_cdf(x, lam, df) == pytest.approx(cdf(x, df, lam), abs=1.5e-3)
        crit = t_ppf(1 - ALPHA / 12, df)
        for t in np.linspace(0.5, 0.98 * crit, 8):

            def gap(lam, t=t, df=df, crit=crit):
                return cdf(t, df, lam) / cdf(crit, df, lam) - 0.8

            hi = 1.0
            while gap(hi) > 0 and hi < 30:
                hi *= 1.5
            if gap(hi) > 0:  # past SciPy's precision in the far tail
                continue
            expected = optimize.brentq(gap, 0, hi) if gap(0) > 0 else 0.0
            assert effect_bound(t, df, crit, 0.8) == pytest.approx(expected, rel=0.01, abs=0.01)


# ---------------------------------------------------------------------------
# Tables in the plans' shapes: runs with their own noise, rows compared as the plan compares them
# ---------------------------------------------------------------------------
def plan_deltas(rng, plan: str, seeds: int, effects=0.0, tables: int = TABLES) -> np.ndarray:
    """(tables, 6, seeds) paired differences of a plan's six component rows. Each run's loss is its row's mean
    plus its own noise (RUN_SDS, unequal; a seed's shared batch effect cancels in every pair); `effects` are the
    rows' true Δs in units of each row's paired sd. chained: row i against row i - 1 (neighbours correlate
    -0.5); single, leave-one-out: every row against row 0 (rows correlate +0.5)."""
    noise = rng.standard_normal((tables, 7, seeds)) * RUN_SDS[:, None]
    reference = np.arange(6) if plan == "chained" else np.zeros(6, int)
    sd = np.sqrt(RUN_SDS[1:] ** 2 + RUN_SDS[reference] ** 2)
    return noise[:, 1:] - noise[:, reference] + (np.broadcast_to(effects, (6,)) * sd)[:, None]


def t_tests(d: np.ndarray):
    n = d.shape[-1]
    m, sd = d.mean(-1), d.std(-1, ddof=1)
    return m, sd, t_sf2(m / (sd / math.sqrt(n)), n - 1)


def verdicts(d: np.ndarray, rule=hommel) -> np.ndarray:
    m, _, p = t_tests(d)
    return decide(m, rule(p), ALPHA)


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_hommel_keeps_the_family_wise_error_at_alpha_in_every_plan(seeds):
    """No real effect anywhere: Hommel's table is wrong somewhere in at most alpha of tables in the chained plan
    (negative correlation, where Simes' test is least safe) and in the single and leave-one-out plans, and it is
    not blind (it spends nearly all of alpha)."""
    rng = np.random.default_rng(seeds)
    for plan in ("chained", "single"):
        fwer = np.mean(np.any(verdicts(plan_deltas(rng, plan, seeds)) != INCONCLUSIVE, axis=1))
        assert 0.035 < fwer <= ALPHA + mc(ALPHA), (plan, seeds, fwer)


def test_hommel_keeps_alpha_with_some_real_effects_and_finds_more_of_them_than_holm():
    """Three real effects and three null rows (the hard case for a step-up rule: the effects lower the bar for the
    nulls), and the issue's power cases: every row of the chained plan at 2 paired sds, and rows c2-c6 at 1.5 sds,
    at 5 seeds (measured there as 72.3% -> 84.3% and 41.0% -> 50.5%)."""
    rng = np.random.default_rng(20)
    for plan in ("chained", "single"):
        d = plan_deltas(rng, plan, 5, np.array([-3.0, -3.0, -3.0, 0.0, 0.0, 0.0]))
        wrong = np.mean(np.any(verdicts(d)[:, 3:] != INCONCLUSIVE, axis=1))
        assert wrong <= ALPHA + mc(ALPHA), (plan, wrong)
    for effects, gain in ((np.full(6, -2.0), 0.08), (np.array([0.0, -1.5, -1.5, -1.5, -1.5, -1.5]), 0.05)):
        d = plan_deltas(rng, "chained", 5, effects)
        real = effects < 0
        found = {rule.__name__: np.mean(verdicts(d, rule)[:, real] == BETTER) for rule in (hommel, holm)}
        assert found["hommel"] > found["holm"] + gain, found


# ---------------------------------------------------------------------------
# --margin: one error rate for the whole table
# ---------------------------------------------------------------------------
MARGIN = 0.02


def margin_table(rng, seeds: int = 10):
    """Six rows: three with no effect and paired sd 0.0085 (a wrong verdict is better or worse), three exactly at
    the margin with sds 0.015-0.02 (a wrong verdict is same; with smaller sds their t-tests call them worse or
    better, which is right, before the equivalence test can err), where both kinds of error are at their largest."""
    sds = np.array([0.0085, 0.0085, 0.0085, 0.015, 0.02, 0.02])
    d = rng.standard_normal((TABLES, 6, seeds)) * sds[:, None]
    d[:, 3:] += np.array([MARGIN, -MARGIN, MARGIN])[:, None]
    m, sd, p = t_tests(d)
    se = sd / math.sqrt(seeds)
    p_same = np.maximum(t_sf((m + MARGIN) / se, seeds - 1), t_sf((MARGIN - m) / se, seeds - 1))
    return m, p, p_same


def any_wrong(v: np.ndarray) -> np.ndarray:
    return np.any((v[:, :3] == BETTER) | (v[:, :3] == WORSE), axis=1) | np.any(v[:, 3:] == SAME, axis=1)


def test_one_step_down_over_both_tests_keeps_the_chance_of_any_wrong_verdict_at_alpha():
    """With --margin the table is wrong somewhere (better, worse or same) in at most alpha of tables; two Holm
    families, each at alpha (the second edition), were wrong in 7.2-7.9% (the negative control: above alpha)."""
    rng = np.random.default_rng(30)
    m, p, p_same = margin_table(rng)
    p_adj, q_adj = shaffer(p, p_same)
    joint = np.mean(any_wrong(decide(m, p_adj, ALPHA, q_adj)))
    apart = np.mean(any_wrong(decide(m, holm(p), ALPHA, holm(p_same))))
    assert 0.03 < joint <= ALPHA + mc(ALPHA), joint
    assert apart > ALPHA + mc(ALPHA), apart
    # what it costs: one step-down spends alpha over rows, not over tests, so a row's t-test waits for fewer of
    # the others' rejections. Rows at -0.03 and -0.015 nats (paired sd 0.01, 10 seeds), two with no effect and two
    # at +-0.012, inside the margin: the near-margin effect is found 88.4% of the time against 92.7% with two
    # families, the clear one always, and same is reached at least as often
    d = rng.standard_normal((TABLES, 6, 10)) * 0.01
    d += np.array([-0.03, -0.015, 0.0, 0.0, 0.012, -0.012])[:, None]
    m, sd, p = t_tests(d)
    se = sd / math.sqrt(10)
    p_same = np.maximum(t_sf((m + MARGIN) / se, 9), t_sf((MARGIN - m) / se, 9))
    p_adj, q_adj = shaffer(p, p_same)
    now, before = decide(m, p_adj, ALPHA, q_adj), decide(m, holm(p), ALPHA, holm(p_same))
    found_now, found_before = np.mean(now[:, :2] == BETTER, axis=0), np.mean(before[:, :2] == BETTER, axis=0)
    assert found_now[0] > 0.99 and found_before[1] - 0.06 < found_now[1] < found_before[1], (found_now, found_before)
    assert np.all(np.mean(now[:, 2:] == SAME, axis=0) >= np.mean(before[:, 2:] == SAME, axis=0) - mc(0.5))


# ---------------------------------------------------------------------------
# need: the printed pairs decide the row about 80% of the time, and null rows rarely show one
# ---------------------------------------------------------------------------
NEED_TABLES = 4000
LEVEL = ALPHA / 6  # the first-step level of a six-row table, which need promises


def rerun_decides(rng, effect: float, n: int, d: np.ndarray, s: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Whether the row is decided when the ablation is run again with `total` seeds: its first n pairs are those
    it had (seeds 0..n-1 train the same runs again), the rest are new; tested at LEVEL."""
    extra = total - n
    new_mean = effect + rng.standard_normal(len(total)) / np.sqrt(extra)
    new_squares = np.where(extra > 1, rng.chisquare(np.maximum(extra - 1, 1)), 0.0)
    mean_all = (n * d + extra * new_mean) / total
    squares = (n - 1) * s**2 + new_squares + n * extra / total * (d - new_mean) ** 2
    t = mean_all / np.sqrt(squares / (total - 1) / total)
    crit = np.array([t_ppf(1 - LEVEL / 2, k - 1) for k in total])
    return np.abs(t) > crit


def vectorised_need(t: np.ndarray, n: int) -> np.ndarray:
    """stats.need_pairs over many rows at once: the same bounds, and the fewest pairs whose unit mde is at most the
    planned effect (power grows with the pairs), from one table of mdes instead of a search per row."""
    crit = t_ppf(1 - LEVEL / 2, n - 1)
    shown = effect_bound(t, n - 1, crit, NEED_SHOWN) > 0
    effect = effect_bound(t, n - 1, crit, NEED_CONFIDENCE) / math.sqrt(n)
    pairs = np.arange(2, 250)
    unit = np.array([mde(1.0, int(k), LEVEL) for k in pairs])
    found = np.searchsorted(-unit, -effect, side="left")  # the first pairs whose mde is at most the effect
    out = np.where(found < len(pairs), pairs[np.minimum(found, len(pairs) - 1)], np.inf)
    return np.where(shown, out, np.nan)


def test_the_vectorised_need_of_these_tests_is_need_pairs():
    t = np.array([0.5, 1.9, 2.8, 3.0, 4.2, 6.0, 9.5, 10.5])
    for n in (3, 5):
        expected = [need_pairs(float(v), n, LEVEL) for v in t if abs(v) < t_ppf(1 - LEVEL / 2, n - 1)]
        assert vectorised_need(t[: len(expected)], n) == pytest.approx(expected, nan_ok=True)
    assert np.isfinite(expected).sum() >= 3  # the comparison covers shown needs, not only blanks


def need_hits(n: int, effect: float, seed: int = 0) -> tuple[float, float, float]:
    """For one row of unit paired sd and true effect `effect` at n seeds: how often an inconclusive row shows a
    need, how often running that many pairs decides it, and the median need."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((NEED_TABLES, n)) + effect
    d, s = x.mean(1), x.std(1, ddof=1)
    t = d / (s / math.sqrt(n))
    inconclusive = np.abs(t) < t_ppf(1 - LEVEL / 2, n - 1)
    needs = vectorised_need(t[inconclusive], n)
    shown = np.isfinite(needs) & (needs > n)
    where = np.flatnonzero(inconclusive)[shown]
    hits = rerun_decides(rng, effect, n, d[where], s[where], needs[shown].astype(int))
    return float(np.mean(shown)), float(np.mean(hits)) if len(hits) else math.nan, float(np.median(needs[shown]))


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_need_keeps_its_promise_and_rarely_shows_for_a_null_row(seeds):
    """Rows with an effect of 1-3 paired sds: the printed need decides them 75-100% of the time (the second
    edition's need asked about twice what was needed, deciding 91-100%); at 0.5 sd a row is rarely shown and is
    then less often decided (the effect is too small for these seeds to size). A null row shows a need in about
    one table in ten of those where it is inconclusive (the second edition: 36-42%)."""
    shown, _, _ = need_hits(seeds, 0.0, seed=seeds)
    assert shown <= 0.1 + mc(0.1, NEED_TABLES), shown
    for effect in (1.0, 2.0, 3.0):
        if seeds == 10 and effect == 3.0:
            continue  # decided in nearly every table: too few inconclusive rows to measure
        _, hit, median = need_hits(seeds, effect, seed=seeds)
        assert 0.75 <= hit <= 1.0, (seeds, effect, hit)
        if (seeds, effect) == (3, 1.0):  # the case: the second edition asked a median 32 pairs, 16 do it
            assert median <= 16, median


# ---------------------------------------------------------------------------
# --seeds auto: p_adj agrees with the verdicts, the placebo's real false-alarm rate, "at any stopping point"
# ---------------------------------------------------------------------------
AUTO_TABLES = 10_000


def auto_tables(rng, effects, margin=None):
    """Six component rows (paired sds 0.0085-0.05) and a placebo (sd 0.0085, no effect) at looks 3..10, judged as
    the table judges them: the components against their boundary, the placebo alone against the one-row boundary
    up to the look where the components stopped."""
    from tests.verdict.test_stats import SDS, look_stats

    d = rng.standard_normal((AUTO_TABLES, 7, 10)) * np.append(SDS, 0.0085)[:, None]
    d[:, :6] += np.asarray(effects)[:, None] * SDS[:, None]
    stats_ = look_stats(d, 3, margin)
    components = sequential(*[x[..., :6] for x in stats_], boundary(ALPHA, 6, 3, 10), margin)
    placebo = sequential(*[x[..., 6:] for x in stats_], boundary(ALPHA, 1, 3, 10), margin, stop_at=components.stop)
    return components, placebo


def test_seeds_auto_p_adj_is_below_alpha_exactly_when_a_row_was_decided():
    """The second edition showed the fixed-sample Holm p in a --seeds auto table, which contradicted its verdicts
    in 0.7-4.1% of tables; p_adj is the row's p on alpha's scale at the boundary it was held to."""
    rng = np.random.default_rng(40)
    for margin, effects in ((None, [0, 0, 0, -1.5, -3, 2]), (0.02, [0, 0, 0, -1.5, -3, 2])):
        looks, placebo = auto_tables(rng, effects, margin)
        for rule in (looks, placebo):
            moved = (rule.verdict == BETTER) | (rule.verdict == WORSE)
            assert np.array_equal(rule.p_adj < ALPHA, moved)
            if margin:
                same = rule.verdict == SAME
                assert np.all(rule.p_same_adj[same] < ALPHA)
        assert moved.any() and (~moved).any()


def test_seeds_auto_states_the_placebos_false_alarms_and_what_any_stopping_point_means():
    """The placebo is tested against the one-row boundary, but only up to where the components stop: its false
    alarms are at most alpha, fewer the earlier the table stops: 1.1% when no row has an effect (the footnote's
    table.PLACEBO_AUTO), about alpha when weak effects keep every table going to --max-seeds. The family-wise
    error is at most alpha averaged over the tables whichever look they stop at; the tables that run to
    --max-seeds because a row kept them going are the ones most likely to hold a wrong verdict (37% of null
    tables that ran to 10 seeds), which is allowed, and docs/statistics.md says so."""
    from modern_gpt.verdict.table import PLACEBO_AUTO

    rng = np.random.default_rng(41)
    components, placebo = auto_tables(rng, [0.0] * 6)
    alarm = np.mean(placebo.verdict[:, 0] != INCONCLUSIVE)
    assert abs(alarm - PLACEBO_AUTO) <= mc(PLACEBO_AUTO, AUTO_TABLES), alarm
    wrong = np.any(components.verdict != INCONCLUSIVE, axis=1)
    assert 0.03 < np.mean(wrong) <= ALPHA + mc(ALPHA, AUTO_TABLES)
    to_the_end = components.stop == 7
    assert 0.25 < np.mean(wrong[to_the_end]) < 0.5 and np.mean(to_the_end) < 0.1
    _, placebo = auto_tables(rng, [-1.0] * 6)  # weak effects: most tables run to 10 seeds
    alarm = np.mean(placebo.verdict[:, 0] != INCONCLUSIVE)
    assert 0.03 < alarm <= ALPHA + mc(ALPHA, AUTO_TABLES), alarm


# ---------------------------------------------------------------------------
# The real null pool that docs/statistics.md's real-run figures come from, shipped so that they can be checked
# ---------------------------------------------------------------------------
def test_the_shipped_null_pool_gives_the_documented_error_rate_and_its_upper_bound():
    """bench/null-pool.csv: 60 seeds x 7 weight inits of one small model on tinyshakespeare (bench_verdict.py,
    40 steps), every difference between two inits of a seed pure initialisation noise. At 5 seeds the fixed
    rule's family-wise error over random tables is 4.0%, with a one-sided 95% upper bound of 7.0% from the
    delete-one-seed jackknife: the real runs are consistent with alpha but cannot by themselves show it below
    5%, which the simulations do."""
    from tests.benchload import BENCH, load

    bench = load("bench_verdict")
    pool = bench.read_pool(str(BENCH / "null-pool.csv"))
    assert pool.shape == (60, 7) and np.all((pool > 2.5) & (pool < 3.5))
    rate, upper = bench.jackknife(np.diff(pool, axis=1), 5, 5)
    assert (round(100 * rate, 1), round(100 * upper, 1)) == (4.0, 7.0)


def test_the_side_figures_docs_statistics_states():
    """The figures docs/statistics.md quotes along the way: testing every look of --seeds auto at alpha, with no
    boundary, is wrong 13-17% of the time (one null row, looks 3..10); the 95% interval of an sd from 3 pairs spans
    x0.52 to x6.3; a row of a six-row table at 3, 5 and 10 seeds is found 80% of the time at 8.0, 2.8 and 1.4
    paired sds, one comparison at 5 seeds at 1.7."""
    from modern_gpt.verdict.stats import sd_interval

    rng = np.random.default_rng(50)
    x = rng.standard_normal((TABLES, 10))
    n = np.arange(3, 11)
    m = np.cumsum(x, axis=1)[:, n - 1] / n
    sd = np.sqrt((np.cumsum(x * x, axis=1)[:, n - 1] - n * m * m) / (n - 1))
    naive = np.mean(np.any(t_sf2(m / (sd / np.sqrt(n)), n - 1) < ALPHA, axis=1))
    assert 0.13 <= naive <= 0.17, naive
    assert [round(v, 2) for v in sd_interval(1.0, 3)] == [0.52, 6.28]
    assert [round(mde(1.0, k, ALPHA / 6), 1) for k in (3, 5, 10)] == [8.0, 2.8, 1.4]
    assert round(mde(1.0, 5, ALPHA), 1) == 1.7


# ---------------------------------------------------------------------------
# The figures docs/statistics.md states, by seeds (issue 40: several held at one number of seeds only)
# ---------------------------------------------------------------------------
def test_the_documented_gains_and_costs_depend_on_the_seeds_as_stated():
    """Hommel's gain over Holm is a 5-seed figure (3 seeds: 0.6 and 3.1 points; 10 seeds: 0.4 and 0); two Holm
    families at alpha each are wrong in 4.2% at 3 seeds and 6.0% at 5 (7.5% at 10); at 5 seeds the joint
    step-down reaches `same` for null rows less often than two families (51.1% against 55.4%)."""
    rng = np.random.default_rng(20)
    for seeds, most in ((3, 0.045), (10, 0.01)):
        for effects in (np.full(6, -2.0), np.array([0.0, -1.5, -1.5, -1.5, -1.5, -1.5])):
            d, real = plan_deltas(rng, "chained", seeds, effects, tables=5000), effects < 0
            found = {rule.__name__: np.mean(verdicts(d, rule)[:, real] == BETTER) for rule in (hommel, holm)}
            assert -mc(0.5, 5000) < found["hommel"] - found["holm"] < most, (seeds, found)
    rng = np.random.default_rng(30)
    apart = {}
    for seeds in (3, 5):
        m, p, p_same = margin_table(rng, seeds)
        apart[seeds] = np.mean(any_wrong(decide(m, holm(p), ALPHA, holm(p_same))))
    assert apart[3] <= ALPHA and apart[5] > ALPHA + mc(ALPHA), apart
    d = rng.standard_normal((TABLES, 6, 5)) * 0.01 + np.array([-0.03, -0.015, 0.0, 0.0, 0.012, -0.012])[:, None]
    m, sd, p = t_tests(d)
    se = sd / math.sqrt(5)
    p_same = np.maximum(t_sf((m + MARGIN) / se, 4), t_sf((MARGIN - m) / se, 4))
    joint = np.mean(decide(m, *shaffer(p, p_same)[:1], ALPHA, shaffer(p, p_same)[1])[:, 2:4] == SAME)
    apart_same = np.mean(decide(m, holm(p), ALPHA, holm(p_same))[:, 2:4] == SAME)
    assert joint < apart_same - 0.02, (joint, apart_same)


def test_a_percentile_bootstrap_of_a_mean_over_3_and_5_seeds_covers_75_and_83_percent():
    """docs/statistics.md's reason for the ladder's jackknife t interval: the plain percentile bootstrap of a
    mean, the simplest statistic, covers 75% at 3 seeds and 83% at 5 where it promises 95%."""
    rng = np.random.default_rng(40)
    for n, low, high in ((3, 0.72, 0.78), (5, 0.80, 0.86)):
        x = rng.standard_normal((4000, n))
        means = np.take_along_axis(x[:, None, :], rng.integers(0, n, (4000, 500, n)), 2).mean(2)
        lo, hi = np.percentile(means, [2.5, 97.5], axis=1)
        assert low < np.mean((lo < 0) & (hi > 0)) < high, n
