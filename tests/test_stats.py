"""Statistics: compared with SciPy and with hand computations."""

import math

import pytest
from scipy import stats as scipy_stats

from modern_gpt.stats import BETTER, NOISE, WORSE, betainc, holm, paired, spread, t_ppf, t_sf2, verdict


@pytest.mark.parametrize("df", [1, 2, 3, 4, 9, 29, 200])
def test_t_distribution_matches_scipy(df):
    for t in (0.0, 0.3, 1.0, 2.5, 7.0, 40.0):
        assert t_sf2(t, df) == pytest.approx(2 * scipy_stats.t.sf(t, df), rel=1e-9, abs=1e-14)
    for q in (0.6, 0.9, 0.975, 0.995):
        assert t_ppf(q, df) == pytest.approx(scipy_stats.t.ppf(q, df), rel=1e-9)


def test_incomplete_beta_matches_scipy():
    from scipy.special import betainc as reference

    for a, b, x in [(0.5, 0.5, 0.2), (2.0, 3.0, 0.7), (10.0, 0.5, 0.95), (1.5, 0.5, 0.01)]:
        assert betainc(a, b, x) == pytest.approx(reference(a, b, x), rel=1e-10)


def test_paired_interval_and_p_value_match_scipy():
    deltas = [-0.031, -0.012, -0.044, -0.02]
    st = paired(deltas)
    ref = scipy_stats.ttest_1samp(deltas, 0.0)
    low, high = scipy_stats.t.interval(0.95, len(deltas) - 1, loc=st.delta, scale=scipy_stats.sem(deltas))
    assert st.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert (st.ci_low, st.ci_high) == pytest.approx((low, high), rel=1e-9)


def test_holm_by_hand():
    # sorted: 0.01*4=0.04, 0.03*3=0.09, 0.04*2=0.08 -> kept monotone at 0.09, 0.5*1=0.5
    assert holm([0.01, 0.04, 0.03, math.nan, 0.5]) == pytest.approx([0.04, 0.09, 0.09, math.nan, 0.5], nan_ok=True)
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])
    assert holm([0.9, 0.8, 0.7]) == pytest.approx([1.0, 1.0, 1.0])


@pytest.mark.parametrize(
    "deltas,ref_spread,expected",
    [
        ([-0.10, -0.12, -0.11], 0.05, BETTER),  # every seed lower, beyond the reference's spread
        ([0.10, 0.12, 0.11], 0.05, WORSE),
        ([-0.10, -0.12, -0.11], 0.20, NOISE),  # smaller than what seeds alone do
        ([-0.10, 0.02, -0.11], 0.01, NOISE),  # one seed disagrees
        ([-0.10], 0.0, NOISE),  # one seed is never a verdict
        ([0.0, 0.0, 0.0], 0.0, NOISE),
        ([-0.001, -0.3, -0.002], 0.0, NOISE),  # same sign and beyond the spread, but the CI includes 0
    ],
)
def test_verdict_rule(deltas, ref_spread, expected):
    assert verdict(deltas, ref_spread) == expected


def test_the_ci_of_a_constant_shift_is_a_point_and_one_seed_has_none():
    st = paired([0.5, 0.5, 0.5])
    assert (st.delta, st.ci_low, st.ci_high, st.p_value) == (0.5, 0.5, 0.5, 0.0)
    assert math.isnan(paired([0.2]).ci_low) and math.isnan(paired([0.2]).p_value)
    assert spread([3.0, 1.0, 2.5]) == 2.0
