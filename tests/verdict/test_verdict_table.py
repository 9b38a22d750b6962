"""The verdict engine on hand-built tables, without training anything: summarize's means, paired Δ, CI and p
against SciPy, Hommel over the component rows with the placebo tested alone, TOST, need and mde against SciPy's
noncentral t, the footnotes, and --seeds auto's recorded looks. Each table is a Design and a runs frame with
only the columns a table reads."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from scipy import stats as scipy_stats

from modern_gpt.verdict.design import Design, Row
from modern_gpt.verdict.stats import boundary, mde, sd_bound
from modern_gpt.verdict.table import footnotes, summarize
from modern_gpt.views import render
from tests.verdict.test_verdict_rules import closed_simes


# ---------------------------------------------------------------------------
# the summary, from known per-seed values
# ---------------------------------------------------------------------------
def _design(
    vals: list[list[float]],
    seeds: list[int],
    refs: dict | None = None,
    placebo: int | None = None,
    planned: list[int] | None = None,
    **settings,
) -> tuple[Design, pd.DataFrame]:
    """A table by hand: rows base, a, b, ... each compared with the row above (refs: other references by row;
    placebo: the row that is the placebo), the runs' val losses one list per row at `seeds`; planned: the
    design's seeds (by default `seeds`); settings: its other fields (margin, min_seeds). Each run has what a
    table reads, and a train loss, epochs and steps for the footnotes that read them."""
    names = ["base", "a", "b", "c", "d", "e"][: len(vals)]
    refs = {i: i - 1 if i else None for i in range(len(names))} | (refs or {})
    rows = [Row(n, refs[i], placebo=i == placebo, params=1000, mlp_width=4) for i, n in enumerate(names)]
    design = Design(rows, seeds if planned is None else planned, resume="modern-gpt ablate --resume DIR", **settings)
    runs = [
        {
            "row": i,
            "variant": names[i],
            "seed": s,
            "train_loss": v - 0.05,
            "val_loss": v,
            "epochs": 0.5,
            "diverged": False,
            "error": "",
            "steps_done": 10,
        }
        for i, row in enumerate(vals)
        for s, v in zip(seeds, row, strict=True)
    ]
    return design, pd.DataFrame(runs)


def test_known_values_give_the_documented_verdicts_and_hommel_p_values():
    vals = [[2.00, 2.02, 2.01], [1.90, 1.91, 1.89], [2.10, 2.12, 2.11], [2.11, 2.115, 2.13]]
    design, runs = _design(vals, [0, 1, 2])
    summary = summarize(design, runs)
    assert [r.verdict for r in summary] == ["", "better", "worse", "inconclusive"]
    assert summary[1].delta_val == pytest.approx(-0.11) and [r.pairs for r in summary] == [0, 3, 3, 3]
    assert summary[0].spread == pytest.approx(0.02)
    # by hand: paired t-tests from SciPy, then Hommel over the three comparisons by its definition, the closed
    # test of Simes' tests with every intersection enumerated
    p = [
        scipy_stats.ttest_1samp([x - y for x, y in zip(vals[i], vals[i - 1], strict=True)], 0).pvalue for i in (1, 2, 3)
    ]
    assert math.isnan(summary[0].p_adj)
    assert [r.p for r in summary[1:]] == pytest.approx(p, rel=1e-9)
    assert [r.p_adj for r in summary[1:]] == pytest.approx(list(closed_simes(np.array(p))), rel=1e-9)
    # the inconclusive row's mde, checked with SciPy's noncentral t at the first step's level (0.05 / 3), at the
    # 80% upper confidence bound on its paired sd (chi-square, from SciPy)
    row = summary[3]
    deltas = [x - y for x, y in zip(vals[3], vals[2], strict=True)]
    level = 0.05 / 3
    assert row.sd == pytest.approx(np.std(deltas, ddof=1), rel=1e-12)
    sd = np.std(deltas, ddof=1) * math.sqrt(2 / scipy_stats.chi2.ppf(0.2, 2))
    assert scipy_power(row.mde / sd, 3, level) == pytest.approx(0.8, abs=1e-4), (row, sd, level)
    assert math.isnan(summary[1].seeds_needed)  # decided rows need nothing more
    assert math.isnan(row.seeds_needed)  # |t| 1.15 at 3 seeds: smaller than one null row in ten shows


def scipy_power(effect: float, n: int, level: float) -> float:
    """The power of a two-sided paired t-test at `level` with n pairs, for an effect in paired sds, from SciPy."""
    crit, nc = scipy_stats.t.ppf(1 - level / 2, n - 1), effect * math.sqrt(n)
    return scipy_stats.nct.sf(crit, n - 1, nc) + scipy_stats.nct.sf(crit, n - 1, -nc)  # the lower tail by symmetry


def scipy_bound(t: float, n: int, level: float, confidence: float) -> float:
    """The noncentrality at which |t| is the `confidence` quantile of |T| below the critical value, from SciPy."""
    crit = scipy_stats.t.ppf(1 - level / 2, n - 1)

    def below(x, lam):
        return scipy_stats.nct.sf(-x, n - 1, lam) - scipy_stats.nct.sf(x, n - 1, lam)

    def gap(lam):
        return below(t, lam) / below(crit, lam) - confidence

    return optimize.brentq(gap, 0.0, 15.0) if gap(0.0) > 0 else 0.0


def test_need_plans_on_the_lower_bound_of_an_inconclusive_rows_effect():
    """need by hand from SciPy: the 90% conditional lower bound on the row's noncentrality (given that it missed
    the critical t) must be above zero to show it, and the pairs are the fewest with 80% power at the 80% bound."""
    vals = [[2.00, 2.02, 2.01, 2.03, 2.00], [1.99, 2.00, 2.00, 2.03, 1.985], [1.99, 2.00, 2.00, 2.03, 1.985]]
    design, runs = _design(vals, [0, 1, 2, 3, 4])
    row = summarize(design, runs)[1]
    assert row.verdict == "inconclusive"
    level, n = 0.05 / 2, 5
    t = abs(row.delta_val) / (row.sd / math.sqrt(n))
    assert scipy_bound(t, n, level, 0.9) > 0
    effect = scipy_bound(t, n, level, 0.8) / math.sqrt(n)
    need = int(row.seeds_needed)
    assert scipy_power(effect, need, level) >= 0.8 > scipy_power(effect, need - 1, level), (t, effect, need)


def test_need_is_left_blank_for_a_row_like_noise_and_the_placebo_is_tested_alone():
    """A row whose |t| a null row would show in more than one table in ten gets no need (it would be post-hoc
    power on noise); the placebo row is not in the components' family (its p_adj is its own p) and its mde is
    at alpha, not alpha / rows."""
    vals = [[2.00, 2.02, 2.01], [2.03, 2.00, 2.02], [1.90, 1.91, 1.89], [1.91, 1.90, 1.90]]
    design, runs = _design(vals, [0, 1, 2], refs={1: 0, 2: 0}, placebo=1)
    summary = summarize(design, runs)
    placebo, clear, noise = summary[1], summary[2], summary[3]
    assert placebo.p_adj == placebo.p and placebo.mde == pytest.approx(mde(placebo.sd * sd_bound(3), 3, 0.05))
    assert [clear.p_adj, noise.p_adj] == pytest.approx(list(closed_simes(np.array([clear.p, noise.p]))))
    assert abs(noise.delta_val) < noise.sd / math.sqrt(3) and math.isnan(noise.seeds_needed)
    design, runs = _design(
        vals, [0, 1, 2], refs={1: 0, 2: 0}, placebo=1, margin=0.01
    )  # need asked of every inconclusive row
    assert not math.isnan(summarize(design, runs)[3].seeds_needed)


def test_few_seeds_in_a_big_table_are_footnoted_with_what_they_can_see():
    design, runs = _design([[2.0, 2.1, 2.05]] * 4, [0, 1, 2])
    summary = summarize(design, runs)
    assert not any(n.startswith("Few seeds") for n in footnotes(design, runs, summary))  # 3 rows: quiet
    vals = [[2.0 + 0.01 * i, 2.1 - 0.02 * i, 2.05 + 0.003 * i] for i in range(6)]
    design, runs = _design(vals, [0, 1, 2])
    summary = summarize(design, runs)
    note = next(n for n in footnotes(design, runs, summary) if n.startswith("Few seeds"))
    assert f"at least {mde(1.0, 3, 0.05 / 5):.1f} paired sds" in note and "5 seeds need" in note


def test_a_margin_adds_same_and_the_equivalence_p_values():
    vals = [[2.00, 2.02, 2.01, 2.03, 2.00], [2.001, 2.019, 2.011, 2.029, 2.0015]]
    design, runs = _design(vals, [0, 1, 2, 3, 4], margin=0.01)
    row = summarize(design, runs)[1]
    deltas = [x - y for x, y in zip(vals[1], vals[0], strict=True)]
    lower = scipy_stats.ttest_1samp(deltas, -0.01, alternative="greater").pvalue
    upper = scipy_stats.ttest_1samp(deltas, 0.01, alternative="less").pvalue
    assert row.p_same == pytest.approx(max(lower, upper), rel=1e-9) and row.verdict == "same"
    assert "an equivalence test (TOST, |Δ| < 0.01)" in footnotes(design, runs, [row, row])[-1]
    assert "Shaffer's restriction" in footnotes(design, runs, [row, row])[-1]


def test_one_seed_is_always_inconclusive_and_says_why():
    design, runs = _design([[2.0], [1.0]], [0])
    summary = summarize(design, runs)
    assert summary[1].verdict == "inconclusive" and math.isnan(summary[1].ci_low)
    assert any(n.startswith("One seed: every verdict is inconclusive") for n in footnotes(design, runs, summary))


def test_pairs_counts_complete_pairs_when_the_reference_diverged():
    design, runs = _design([[2.0, 2.1, 2.2], [1.0, 1.1, 1.25]], [0, 1, 2])
    runs.loc[(runs.row == 0) & (runs.seed == 1), ["diverged", "val_loss"]] = [True, math.nan]
    row = summarize(design, runs)[1]
    assert row.seeds == 3 and row.pairs == 2  # its own runs, and the pairs actually compared
    assert row.delta_val == pytest.approx(-0.975)  # seeds 0 and 2: (-1.0 - 0.95) / 2


def test_diverged_runs_are_left_out_of_the_means_and_named():
    design, runs = _design([[2.0, 2.1, 2.2], [1.0, 1.1, 1.2]], [0, 1, 2])
    runs.loc[(runs.row == 1) & (runs.seed == 2), ["diverged", "val_loss"]] = [True, math.nan]
    summary = summarize(design, runs)
    assert summary[1].val_loss == pytest.approx(1.05) and summary[1].diverged == 1 and summary[1].seeds == 2
    assert summary[1].delta_val == pytest.approx(-1.0)  # paired over the seeds both rows finished
    notes = footnotes(design, runs, summary)
    assert any(n.startswith("a, seed 2: diverged") for n in notes)
    assert render.cell(summary[1], "val_loss") == "1.0500 (1 diverged)"


def test_a_failed_run_is_counted_apart_from_a_diverged_one():
    """A killed or errored run can be trained again, a diverged one would diverge again: the val cell names each
    kind with its own count, and summary.csv's errored column counts the failed ones."""
    design, runs = _design([[2.0, 2.1, 2.2, 2.3], [1.0, 1.1, 1.2, 1.3]], [0, 1, 2, 3])
    runs.loc[(runs.row == 1) & (runs.seed == 2), ["diverged", "val_loss"]] = [True, math.nan]
    runs.loc[(runs.row == 1) & (runs.seed == 3), ["error", "val_loss"]] = ["killed by signal 9", math.nan]
    runs.loc[runs.row == 0, ["error", "val_loss"]] = ["out of memory", math.nan]
    summary = summarize(design, runs)
    assert (summary[1].diverged, summary[1].errored, summary[1].seeds) == (2, 1, 2)
    assert render.cell(summary[1], "val_loss") == "1.0500 (1 diverged, 1 failed)"
    assert render.cell(summary[0], "val_loss") == "failed"


def test_memorisation_and_parameter_mismatch_are_footnoted():
    design, runs = _design([[2.0, 2.1], [1.0, 1.1]], [0, 1])
    design = replace(design, rows=(design.rows[0], replace(design.rows[1], params=1100)))
    runs.loc[runs.row == 1, "epochs"] = 3.5
    summary = summarize(design, runs)
    notes = footnotes(design, runs, summary)
    assert any(n.startswith("Parameter mismatch: a has 1,100 parameters, +10.0%") for n in notes)
    assert any(n.startswith("Memorisation risk: a: its runs saw 3.5 epochs") for n in notes)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            (800, 800),
            "in its embeddings (a position table, say): its non-embedding parameters, which scaling laws "
            "count and --match-params matches, are +0.0% against base.",
        ),
        ((800, 900), "part of a delta may be size, not architecture; --match-params equalises them."),
        ((math.nan, math.nan), "part of a delta may be size, not architecture; --match-params equalises them."),
    ],
)
def test_a_parameter_gap_in_the_embeddings_alone_is_not_sent_to_match_params(body, says):
    """RoPE drops the position table: with --match-params on, the footnote said to turn it on. Where the rows'
    non-embedding parameters are known and within 2%, the gap is the embeddings'; unknown (an older folder,
    judge), the sentence is as before."""
    design, runs = _design([[2.0, 2.1], [1.0, 1.1]], [0, 1])
    rows = (replace(design.rows[0], body_params=body[0]), replace(design.rows[1], params=1100, body_params=body[1]))
    design = replace(design, rows=rows)
    notes = footnotes(design, runs, summarize(design, runs))
    said = next(n for n in notes if n.startswith("Parameter mismatch: a has 1,100 parameters, +10.0% against base"))
    assert said.endswith(says), said


def test_a_sequential_folder_is_judged_by_its_looks_alone():
    """--seeds auto killed during its first round: meta.json has no looks yet, so no verdict has been reached,
    however clear the runs look; once a look is recorded, the verdict is the boundary's at that look."""
    design, runs = _design([[2.0, 2.1, 2.05], [1.0, 1.1, 1.05]], [0, 1, 2], min_seeds=3, planned=list(range(10)))
    design = replace(design, looks={"min_seeds": 3, "max_seeds": 10, "looks": []})
    assert summarize(design, runs)[1].verdict == "inconclusive"
    assert design.family_boundary() == boundary(0.05, 1, 3, 10)
    design.looks["looks"] = [{"seeds": 3, "decided": 1, "rows": 1, "futile": 0}]
    assert summarize(design, runs)[1].verdict == "better"  # every seed moved by exactly -1: p is 0


def test_a_placebo_within_the_margin_is_not_a_warning():
    design, runs = _design(
        [[2.0, 2.02, 2.01, 2.03], [2.001, 2.019, 2.011, 2.029]], [0, 1, 2, 3], placebo=1, margin=0.01
    )
    summary = summarize(design, runs)
    assert summary[1].verdict == "same"
    note = next(n for n in footnotes(design, runs, summary) if n.startswith("Placebo"))
    assert "what initialisation alone does" in note and "within --margin" in note and "read the other" not in note


def test_one_diverged_step_is_singular(tmp_path):
    import json

    from modern_gpt.run.checkpoint import _failed_run

    for steps, words in ((1, "after 1 step"), (7, "after 7 steps")):
        (tmp_path / "metrics.json").write_text(json.dumps({"diverged": True, "steps_done": steps}))
        assert _failed_run(tmp_path).endswith(words)
    import pandas as pd

    from modern_gpt.verdict.table import failure_notes

    runs = pd.DataFrame(
        {
            "row": [0],
            "seed": [0],
            "variant": ["classic"],
            "error": [""],
            "diverged": [True],
            "steps_done": [1],
            "val_loss": [float("nan")],
        }
    )
    assert "after 1 step;" in failure_notes(runs)[0]


def test_a_failed_runs_footnote_has_one_stop():
    """A plugin's error ends with a full stop: the footnote read '...train in.; left out of the means.'"""
    from modern_gpt.verdict.table import failure_notes

    design, runs = _design([[2.0, 2.1], [1.0, 1.1]], [0, 1])
    runs = runs.copy()
    runs["diverged"], runs["error"] = False, ""
    runs.loc[runs.index[-1], "error"] = "the plugin p.py set torch's threads while training."
    assert failure_notes(runs) == [
        "a, seed 1: the plugin p.py set torch's threads while training; left out of the means."
    ]
