"""The verdict engine on hand-built tables, without training anything: summarize's means, paired Δ, CI and p
against SciPy, Hommel over the component rows with the placebo tested alone, TOST, need and mde against SciPy's
noncentral t, the footnotes, and --seeds auto's recorded looks; then the same engine reached from a hand-built
results folder (meta.json read as report reads it), with lr_view over a learning-rate grid."""

import dataclasses
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from scipy import stats as scipy_stats

from modern_gpt.ablation.planning import Spec
from modern_gpt.ablation.report import design_of
from modern_gpt.ablation.results import RUN_COLUMNS
from modern_gpt.core.config import DataConfig, ModelConfig, TrainConfig
from modern_gpt.core.errors import UserError
from modern_gpt.verdict import table
from modern_gpt.verdict.design import Design, Row
from modern_gpt.verdict.stats import BETTER, INCONCLUSIVE, SAME, WORSE, boundary, honest_mde, mde, sd_bound
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


# ---------------------------------------------------------------------------
# The same engine reached from a results folder: meta.json built by hand and read as report reads it
# (ablation.report.design_of), with lr_view over a learning-rate grid and the folder's footnotes. Only the
# wrappers below know the engine's signatures.
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class Ablation:
    """What a results folder holds for its table: meta.json as the engine takes it (a Design), its runs as a
    DataFrame, and the folder's Spec."""

    meta: object
    runs: pd.DataFrame
    spec: Spec | None = None


def ablation(
    rows: list[tuple[str, str | None, int | None]],
    val_loss: list[list[float]],
    *,
    seeds: list[int] | None = None,
    lrs: list[float] | None = None,
    alpha: float = 0.05,
    margin: float | None = None,
    plan: str = "custom",
    tokenizer: str = "char",
    params: list[int] | None = None,
    corpus: dict | None = None,
    **columns: list[list],
) -> Ablation:
    """An ablation's folder built by hand.

    rows: the table's rows as (name, "+"-joined components or None for the placebo, reference row). val_loss:
    one list per run row (with lrs: table row b at learning rate j is run row b * len(lrs) + j, as planning lays
    them out), one loss per seed; NaN or None leaves that seed's run out of runs.csv (not finished). columns:
    other runs.csv columns, in the same shape (diverged, error, epochs, spikes, val_loss_tune, ...)."""
    seeds = list(range(len(val_loss[0]))) if seeds is None else seeds
    k = len(lrs) if lrs else 1
    variants = []
    for b, (name, components, reference) in enumerate(rows):
        placebo = components is None
        for j in range(k):
            variants.append(
                {
                    "name": name,
                    "components": [] if placebo or not components else components.split("+"),
                    "reference": None if reference is None else reference * k + j,
                    "mlp_hidden": None,
                    "placebo": placebo,
                    **({"lr": lrs[j]} if lrs else {}),
                    "params": (params or [5000] * len(rows))[b],
                    "hidden": 64,
                    "kv_cache_bytes_per_token": 64,
                }
            )
    assert len(val_loss) == len(variants), "one list of losses per run row"
    settings = {
        "model": dataclasses.asdict(ModelConfig(context=16)),
        "train": dataclasses.asdict(TrainConfig(lr=0.003)),
        "data": dataclasses.asdict(DataConfig(tokenizer=tokenizer)),
    }
    own = ("params", "hidden", "kv_cache_bytes_per_token")
    spec = {
        "settings": settings,
        "plan": plan,
        "variants": [{k: v for k, v in variant.items() if k not in own} for variant in variants],
        "seeds": seeds,
        "match_params": False,
        "data_key": "hand-built",
        "data_name": "hand-built",
        "alpha": alpha,
        "margin": margin,
        "min_seeds": None,
        **({"lrs": lrs} if lrs else {}),
    }
    meta = {"spec": spec, "variants": variants, "corpus": corpus or {"val_chars": 30_000, "val_lost_chars": 0}}
    records = []
    for row, variant in enumerate(variants):
        for s, seed in enumerate(seeds):
            loss = val_loss[row][s]
            given = {name: values[row][s] for name, values in columns.items()}
            if (loss is None or (isinstance(loss, float) and math.isnan(loss))) and not given.get("diverged"):
                continue  # not finished: no record
            loss = math.nan if loss is None else loss
            record = {
                "row": row,
                "variant": variant["name"],
                "components": "+".join(variant["components"]),
                "seed": seed,
                "lr": variant.get("lr", 0.003),
                "params": variant["params"],
                "mlp_width": 64,
                "train_loss": loss - 0.05,
                "val_loss": loss,
                "val_tokens": 8192,
                "val_loss_tune": loss,
                "val_loss_test": loss,
                "best_val_loss": loss,
                "best_step": 100,
                "val_bpc": loss / math.log(2),
                "lossless": True,
                "val_ppl": math.exp(loss),
                "steps_done": 100,
                "tokens_seen": 12_800,
                "epochs": 0.5,
                "tokens_per_s": 1000.0,
                "secs": 1.0,
                "threads": 1,
                "device": "cpu",
                "diverged": False,
                "spikes": 0,
                "error": "",
            }
            records.append({**record, **given})
    runs = pd.DataFrame(records, columns=RUN_COLUMNS)
    spec = Spec.from_dict(meta["spec"])
    return Ablation(design_of(meta, spec), runs, spec)


# The only lines that know the engine's signatures: a table's rows, and the three calls.
def rows_of(a: Ablation) -> list[dict]:
    """The rows of the table (after lr_view: one per table row, with its lr, stable and lrs)."""
    return [dataclasses.asdict(r) for r in a.meta.rows]


def folder_summary(a: Ablation) -> list[dict]:
    return [r.to_dict() for r in table.summarize(a.meta, a.runs)]


def folder_lr_view(a: Ablation, at_lr: float | None = None) -> Ablation:
    return Ablation(*table.lr_view(a.meta, a.runs, at_lr), a.spec)


def folder_footnotes(a: Ablation, folder: str = "", verdicts: bool = True) -> list[str]:
    design = dataclasses.replace(a.meta, resume=a.spec.resume_command(folder)) if folder else a.meta
    return table.footnotes(design, a.runs, table.summarize(design, a.runs), verdicts)


# ---------------------------------------------------------------------------
# A five-seed cumulative table: classic, its placebo, +rope (clearly better), +rope+rmsnorm (noise)
# ---------------------------------------------------------------------------
CLASSIC = [3.00, 3.02, 2.98, 3.01, 2.99]
PLACEBO = [c + d for c, d in zip(CLASSIC, [0.004, -0.003, 0.002, -0.001, 0.001], strict=True)]
ROPE = [c + d for c, d in zip(CLASSIC, [-0.10, -0.11, -0.09, -0.10, -0.105], strict=True)]
RMSNORM = [r + d for r, d in zip(ROPE, [0.01, -0.02, 0.015, -0.005, 0.0], strict=True)]
ROWS = [("classic", "", None), ("classic (placebo)", None, 0), ("rope", "rope", 0), ("rope+rmsnorm", "rope+rmsnorm", 2)]


def cumulative(**kw) -> Ablation:
    return ablation(ROWS, [CLASSIC, PLACEBO, ROPE, RMSNORM], **kw)


def test_means_delta_ci_and_p_are_scipy_s():
    summary = folder_summary(cumulative())
    assert [r["variant"] for r in summary] == [name for name, _, _ in ROWS]
    for row, losses, ref in zip(
        summary, [CLASSIC, PLACEBO, ROPE, RMSNORM], [None, CLASSIC, CLASSIC, ROPE], strict=True
    ):
        assert row["val_loss"] == pytest.approx(np.mean(losses), rel=1e-12)
        assert row["train_loss"] == pytest.approx(np.mean(losses) - 0.05, rel=1e-12)
        assert row["spread"] == pytest.approx(max(losses) - min(losses), rel=1e-12)
        assert row["seeds"] == 5 and row["diverged"] == 0
        if ref is None:
            assert row["pairs"] == 0 and math.isnan(row["delta_val"]) and math.isnan(row["p"])
            assert row["verdict"] == "" and math.isnan(row["reference"])
            continue
        deltas = np.subtract(losses, ref)
        test = scipy_stats.ttest_rel(losses, ref)
        ci = test.confidence_interval(0.95)
        assert row["pairs"] == 5
        assert row["delta_val"] == pytest.approx(deltas.mean(), rel=1e-12)
        assert row["sd"] == pytest.approx(deltas.std(ddof=1), rel=1e-12)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-7)
        assert row["p"] == pytest.approx(test.pvalue, rel=1e-6)
    assert [r["reference"] for r in summary[1:]] == [0, 0, 2]
    assert [r["lr"] for r in summary] == [0.003] * 4 and [r["lrs"] for r in summary] == [1] * 4


def test_hommel_runs_over_the_component_rows_and_the_placebo_is_tested_alone():
    summary = folder_summary(cumulative())
    placebo, rope, rmsnorm = summary[1:]
    # the family is rope and rope+rmsnorm: two tests, whatever the placebo does. Hommel over two by hand: the
    # larger p is its own (Simes over both is at most it), the smaller is min(2 p, the larger) and at least itself
    low, high = sorted([rope["p"], rmsnorm["p"]])
    adjusted = {low: max(low, min(1.0, 2 * low, high)), high: high}
    assert rope["p_adj"] == pytest.approx(adjusted[rope["p"]], rel=1e-12)
    assert rmsnorm["p_adj"] == pytest.approx(adjusted[rmsnorm["p"]], rel=1e-12)
    assert placebo["p_adj"] == pytest.approx(placebo["p"], rel=1e-12)  # a family of one
    assert rope["p_adj"] < 0.05 and rope["delta_val"] < 0 and rope["verdict"] == BETTER
    assert rmsnorm["verdict"] == INCONCLUSIVE and placebo["verdict"] == INCONCLUSIVE
    assert math.isnan(summary[0]["p_adj"])
    # mde at the first step: alpha / 2 for the two component rows, alpha for the placebo alone
    assert rmsnorm["mde"] == pytest.approx(honest_mde(rmsnorm["sd"], 5, 0.05 / 2), rel=1e-12)
    assert placebo["mde"] == pytest.approx(honest_mde(placebo["sd"], 5, 0.05), rel=1e-12)
    # the placebo row does not count in the rows the verdict rule names
    (rule,) = [n for n in folder_footnotes(cumulative()) if n.startswith("verdict:")]
    assert "Hommel-adjusted across the 2 component rows" in rule and "(0.05/2)" in rule


def test_a_worse_row_and_alpha():
    worse = [c + 0.1 + d for c, d in zip(CLASSIC, [0.0, 0.01, -0.01, 0.005, -0.005], strict=True)]
    a = ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, worse])
    (row,) = folder_summary(a)[1:]
    assert row["verdict"] == WORSE and row["p_adj"] == pytest.approx(row["p"], rel=1e-12)  # one row: p_adj is p
    strict = ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, worse], alpha=row["p"] / 2)
    assert folder_summary(strict)[1]["verdict"] == INCONCLUSIVE  # the folder's alpha is the level


def test_margin_gives_same_by_two_one_sided_tests():
    tiny = [c + d for c, d in zip(CLASSIC, [0.001, -0.002, 0.0015, -0.0005, 0.0], strict=True)]
    a = ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, tiny], margin=0.01)
    row = folder_summary(a)[1]
    deltas = np.subtract(tiny, CLASSIC)
    tost = max(
        scipy_stats.ttest_1samp(deltas, -0.01, alternative="greater").pvalue,
        scipy_stats.ttest_1samp(deltas, 0.01, alternative="less").pvalue,
    )
    assert row["p_same"] == pytest.approx(tost, rel=1e-6)
    assert row["p_same_adj"] == pytest.approx(tost, rel=1e-6) and row["verdict"] == SAME
    assert math.isnan(
        folder_summary(ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, tiny]))[1]["p_same"]
    )


def test_failed_runs_are_left_out_of_means_and_pairs():
    rope = list(ROPE)
    rope[1] = math.nan
    a = ablation(
        [("classic", "", None), ("rope", "rope", 0)],
        [CLASSIC, rope],
        diverged=[[False] * 5, [False, True, False, False, False]],
        error=[[""] * 5, ["", "", "out of memory at step 1: CUDA out of memory", "", ""]],
    )
    row = folder_summary(a)[1]
    kept = [0, 3, 4]
    assert row["seeds"] == 3 and row["diverged"] == 2 and row["pairs"] == 3
    assert row["val_loss"] == pytest.approx(np.mean([ROPE[s] for s in kept]), rel=1e-12)
    assert row["p"] == pytest.approx(
        scipy_stats.ttest_rel([ROPE[s] for s in kept], [CLASSIC[s] for s in kept]).pvalue, rel=1e-6
    )


# ---------------------------------------------------------------------------
# lr_view: each row at its best learning rate, chosen on the tuning half
# ---------------------------------------------------------------------------
LRS = [0.001, 0.003, 0.01]


def swept(**columns) -> Ablation:
    """classic and rope at three learning rates, two seeds. Row b at lr j is run row 3b + j. On the tuning half
    classic is best at 0.003 and rope at 0.01; on the test half each is best somewhere else."""
    loss = [[3.0, 3.0], [2.9, 2.9], [2.95, 2.95], [2.9, 2.9], [2.85, 2.85], [2.8, 2.8]]
    tune = [[3.0, 3.02], [2.80, 2.82], [2.90, 2.92], [2.9, 2.92], [2.85, 2.87], [2.70, 2.72]]
    test = [[2.5, 2.52], [2.90, 2.92], [2.60, 2.62], [2.5, 2.52], [2.60, 2.62], [2.75, 2.77]]
    return ablation(
        [("classic", "", None), ("rope", "rope", 0)],
        loss,
        lrs=LRS,
        **{"val_loss_tune": tune, "val_loss_test": test, **columns},
    )


def test_lr_view_chooses_on_the_tuning_half_and_reports_the_test_half():
    a = swept()
    view = folder_lr_view(a)
    assert [v["lr"] for v in rows_of(view)] == [0.003, 0.01]
    assert [v["reference"] for v in rows_of(view)] == [None, 0]  # table rows, not run rows
    assert [v["lrs"] for v in rows_of(view)] == [3, 3]
    assert [v["stable"] for v in rows_of(view)] == [3, 3]
    assert list(view.runs["row"]) == [0, 0, 1, 1]
    assert list(view.runs["val_loss"]) == [2.90, 2.92, 2.75, 2.77]  # the chosen lrs' test halves
    chosen = a.runs[a.runs["row"].isin([1, 5])].reset_index(drop=True)
    expected_bpc = chosen["val_bpc"] * chosen["val_loss_test"] / chosen["val_loss"]
    assert np.allclose(view.runs["val_bpc"], expected_bpc, rtol=1e-12, atol=0)
    summary = folder_summary(view)
    assert summary[1]["delta_val"] == pytest.approx(np.mean([2.75 - 2.90, 2.77 - 2.92]), rel=1e-12)
    assert [r["lr"] for r in summary] == [0.003, 0.01]


def test_lr_view_prefers_the_lr_with_fewest_failed_runs_and_counts_stable_ones():
    # classic at 0.003, the best tuning loss, has one diverged seed: 0.01, with none, is chosen instead
    diverged = [[False, False], [False, True], [False, False], [False, False], [False, False], [False, False]]
    spikes = [[0, 0], [0, 0], [0, 0], [0, 0], [2, 0], [0, 0]]
    view = folder_lr_view(swept(diverged=diverged, spikes=spikes))
    assert [v["lr"] for v in rows_of(view)] == [0.01, 0.01]
    assert [v["stable"] for v in rows_of(view)] == [2, 2]  # classic: 0.003 diverged; rope: 0.003 spiked


def test_lr_view_at_one_learning_rate_and_its_refusals():
    view = folder_lr_view(swept(), at_lr=0.001)
    assert [v["lr"] for v in rows_of(view)] == [0.001, 0.001]
    assert list(view.runs["val_loss"]) == [2.5, 2.52, 2.5, 2.52]
    with pytest.raises(UserError, match="--at-lr 0.002 is not one of the learning rates tried: 0.001, 0.003, 0.01"):
        folder_lr_view(swept(), at_lr=0.002)
    plain = cumulative()
    with pytest.raises(UserError, match="--at-lr goes with an ablation trained at several learning rates"):
        folder_lr_view(plain, at_lr=0.003)
    unchanged = folder_lr_view(plain)
    assert unchanged.meta is plain.meta and unchanged.runs is plain.runs  # without --lrs: the folder as it is


# ---------------------------------------------------------------------------
# footnotes
# ---------------------------------------------------------------------------
def test_footnotes_name_diverged_and_failed_runs_and_the_placebo():
    rope = list(ROPE)
    rope[1] = math.nan
    a = ablation(
        ROWS,
        [CLASSIC, PLACEBO, rope, RMSNORM],
        diverged=[[False] * 5, [False] * 5, [False, True, False, False, False], [False] * 5],
        error=[[""] * 5, [""] * 5, ["", "", "out of memory at step 1: CUDA out of memory", "", ""], [""] * 5],
        steps_done=[[100] * 5, [100] * 5, [100, 37, 1, 100, 100], [100] * 5],
    )
    notes = folder_footnotes(a)
    assert "rope, seed 1: diverged (loss NaN or infinite) after 37 steps; left out of the means." in notes
    assert "rope, seed 2: out of memory at step 1: CUDA out of memory; left out of the means." in notes
    (placebo,) = [n for n in notes if n.startswith("Placebo: ")]
    assert "a diagnostic outside the component rows' family" in placebo
    assert "it is what initialisation alone does on this data and budget" in placebo
    assert notes[-1].startswith("verdict: ")
    quiet = folder_footnotes(a, verdicts=False)  # power's: every health note, no verdict rule and no placebo sentence
    assert not any(n.startswith(("verdict: ", "Placebo: ")) for n in quiet)
    assert "rope, seed 1: diverged (loss NaN or infinite) after 37 steps; left out of the means." in quiet


def test_footnotes_count_unfinished_runs_and_name_the_command_that_finishes_them():
    rope = list(ROPE)
    rope[3:] = [None, None]
    a = ablation(ROWS, [CLASSIC, PLACEBO, rope, RMSNORM])
    assert (
        "2 of 20 runs have not finished; finish them with: modern-gpt ablate --resume 'my results'"
        in folder_footnotes(a, folder="my results")
    )
    assert "2 of 20 runs have not finished; finish them with: modern-gpt ablate --resume DIR" in folder_footnotes(a)
    duel = ablation([("classic", "", None), ("modern", "rope", 0)], [CLASSIC, rope], plan="duel")
    assert "2 of 10 runs have not finished; finish them with: modern-gpt duel --resume r" in folder_footnotes(
        duel, folder="r"
    )
    assert not any("have not finished" in n for n in folder_footnotes(cumulative()))
    # with --lrs every run row counts: 3 learning rates x 2 rows x 2 seeds, one missing
    full = swept()
    short = Ablation(full.meta, full.runs[~((full.runs["row"] == 4) & (full.runs["seed"] == 1))].reset_index(drop=True))
    assert any(n.startswith("1 of 12 runs have not finished") for n in folder_footnotes(folder_lr_view(short)))


def test_footnotes_say_when_the_tokenizer_is_lossy():
    lossless = [[True] * 5, [True] * 5, [True] * 5, [False] * 5]
    a = cumulative(tokenizer="bpe", corpus={"val_chars": 30_000, "val_lost_chars": 12}, lossless=lossless)
    (note,) = [n for n in folder_footnotes(a) if n.startswith("Lossy tokenizer")]
    assert note.startswith("Lossy tokenizer: --tokenizer bpe does not give back the validation text")
    assert "in 12 of its 30,000 characters, 0.04%" in note
    assert not any(n.startswith("Lossy tokenizer") for n in folder_footnotes(cumulative()))


def test_footnotes_warn_of_one_seed_parameter_mismatch_and_memorisation():
    one = ablation([("classic", "", None), ("rope", "rope", 0)], [[3.0], [2.9]], params=[5000, 5250])
    notes = folder_footnotes(one)
    assert any(n.startswith("One seed: every verdict is inconclusive") for n in notes)
    assert any(n.startswith("Parameter mismatch: rope has 5,250 parameters, +5.0% against classic") for n in notes)
    epochs = [[0.5] * 5, [0.5] * 5, [2.0] * 5, [0.5] * 5]
    notes = folder_footnotes(cumulative(epochs=epochs))
    assert "Memorisation risk: rope: its runs saw 2.0 epochs of the training split. Use more text or fewer steps." in (
        notes
    )
    assert not any(
        n.startswith(("One seed", "Parameter mismatch", "Memorisation")) for n in folder_footnotes(cumulative())
    )
