"""The verdict engine on hand-built ablation folders, without training anything: table.summarize (means, paired
Δ, CI and p against scipy, Hommel over the component rows with the placebo tested alone, TOST), table.lr_view (each
row's learning rate chosen on the tuning half, reported on the test half) and table.footnotes (diverged, failed,
unfinished and lossy runs, the placebo, the verdict rule). Each test takes well under a second, nearly all of it
in stats.mde's numerical integral (the mde column).

Every test builds its input (a folder's meta.json and runs) through `ablation`, and reaches the engine through the
wrappers below it (and a table's rows through `rows_of`): when the engine's signatures change, only they change.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from modern_gpt.ablation.planning import Spec
from modern_gpt.ablation.report import design_of
from modern_gpt.ablation.results import RUN_COLUMNS
from modern_gpt.core.config import DataConfig, ModelConfig, TrainConfig
from modern_gpt.core.errors import UserError
from modern_gpt.verdict import table
from modern_gpt.verdict.stats import BETTER, INCONCLUSIVE, SAME, WORSE, honest_mde


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


def summarize(a: Ablation) -> list[dict]:
    return [r.to_dict() for r in table.summarize(a.meta, a.runs)]


def lr_view(a: Ablation, at_lr: float | None = None) -> Ablation:
    return Ablation(*table.lr_view(a.meta, a.runs, at_lr), a.spec)


def footnotes(a: Ablation, folder: str = "", verdicts: bool = True) -> list[str]:
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
    summary = summarize(cumulative())
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
    summary = summarize(cumulative())
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
    (rule,) = [n for n in footnotes(cumulative()) if n.startswith("verdict:")]
    assert "Hommel-adjusted across the 2 component rows" in rule and "(0.05/2)" in rule


def test_a_worse_row_and_alpha():
    worse = [c + 0.1 + d for c, d in zip(CLASSIC, [0.0, 0.01, -0.01, 0.005, -0.005], strict=True)]
    a = ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, worse])
    (row,) = summarize(a)[1:]
    assert row["verdict"] == WORSE and row["p_adj"] == pytest.approx(row["p"], rel=1e-12)  # one row: p_adj is p
    strict = ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, worse], alpha=row["p"] / 2)
    assert summarize(strict)[1]["verdict"] == INCONCLUSIVE  # the folder's alpha is the level


def test_margin_gives_same_by_two_one_sided_tests():
    tiny = [c + d for c, d in zip(CLASSIC, [0.001, -0.002, 0.0015, -0.0005, 0.0], strict=True)]
    a = ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, tiny], margin=0.01)
    row = summarize(a)[1]
    deltas = np.subtract(tiny, CLASSIC)
    tost = max(
        scipy_stats.ttest_1samp(deltas, -0.01, alternative="greater").pvalue,
        scipy_stats.ttest_1samp(deltas, 0.01, alternative="less").pvalue,
    )
    assert row["p_same"] == pytest.approx(tost, rel=1e-6)
    assert row["p_same_adj"] == pytest.approx(tost, rel=1e-6) and row["verdict"] == SAME
    assert math.isnan(summarize(ablation([("classic", "", None), ("rope", "rope", 0)], [CLASSIC, tiny]))[1]["p_same"])


def test_failed_runs_are_left_out_of_means_and_pairs():
    rope = list(ROPE)
    rope[1] = math.nan
    a = ablation(
        [("classic", "", None), ("rope", "rope", 0)],
        [CLASSIC, rope],
        diverged=[[False] * 5, [False, True, False, False, False]],
        error=[[""] * 5, ["", "", "out of memory at step 1: CUDA out of memory", "", ""]],
    )
    row = summarize(a)[1]
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
    view = lr_view(a)
    assert [v["lr"] for v in rows_of(view)] == [0.003, 0.01]
    assert [v["reference"] for v in rows_of(view)] == [None, 0]  # table rows, not run rows
    assert [v["lrs"] for v in rows_of(view)] == [3, 3]
    assert [v["stable"] for v in rows_of(view)] == [3, 3]
    assert list(view.runs["row"]) == [0, 0, 1, 1]
    assert list(view.runs["val_loss"]) == [2.90, 2.92, 2.75, 2.77]  # the chosen lrs' test halves
    chosen = a.runs[a.runs["row"].isin([1, 5])].reset_index(drop=True)
    expected_bpc = chosen["val_bpc"] * chosen["val_loss_test"] / chosen["val_loss"]
    assert np.allclose(view.runs["val_bpc"], expected_bpc, rtol=1e-12, atol=0)
    summary = summarize(view)
    assert summary[1]["delta_val"] == pytest.approx(np.mean([2.75 - 2.90, 2.77 - 2.92]), rel=1e-12)
    assert [r["lr"] for r in summary] == [0.003, 0.01]


def test_lr_view_prefers_the_lr_with_fewest_failed_runs_and_counts_stable_ones():
    # classic at 0.003, the best tuning loss, has one diverged seed: 0.01, with none, is chosen instead
    diverged = [[False, False], [False, True], [False, False], [False, False], [False, False], [False, False]]
    spikes = [[0, 0], [0, 0], [0, 0], [0, 0], [2, 0], [0, 0]]
    view = lr_view(swept(diverged=diverged, spikes=spikes))
    assert [v["lr"] for v in rows_of(view)] == [0.01, 0.01]
    assert [v["stable"] for v in rows_of(view)] == [2, 2]  # classic: 0.003 diverged; rope: 0.003 spiked


def test_lr_view_at_one_learning_rate_and_its_refusals():
    view = lr_view(swept(), at_lr=0.001)
    assert [v["lr"] for v in rows_of(view)] == [0.001, 0.001]
    assert list(view.runs["val_loss"]) == [2.5, 2.52, 2.5, 2.52]
    with pytest.raises(UserError, match="--at-lr 0.002 is not one of the learning rates tried: 0.001, 0.003, 0.01"):
        lr_view(swept(), at_lr=0.002)
    plain = cumulative()
    with pytest.raises(UserError, match="--at-lr goes with an ablation trained at several learning rates"):
        lr_view(plain, at_lr=0.003)
    unchanged = lr_view(plain)
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
    notes = footnotes(a)
    assert "rope, seed 1: diverged (loss NaN or infinite) after 37 steps; left out of the means." in notes
    assert "rope, seed 2: out of memory at step 1: CUDA out of memory; left out of the means." in notes
    (placebo,) = [n for n in notes if n.startswith("Placebo: ")]
    assert "a diagnostic outside the component rows' family" in placebo
    assert "it is what initialisation alone does on this data and budget" in placebo
    assert notes[-1].startswith("verdict: ")
    quiet = footnotes(a, verdicts=False)  # power's: every health note, no verdict rule and no placebo sentence
    assert not any(n.startswith(("verdict: ", "Placebo: ")) for n in quiet)
    assert "rope, seed 1: diverged (loss NaN or infinite) after 37 steps; left out of the means." in quiet


def test_footnotes_count_unfinished_runs_and_name_the_command_that_finishes_them():
    rope = list(ROPE)
    rope[3:] = [None, None]
    a = ablation(ROWS, [CLASSIC, PLACEBO, rope, RMSNORM])
    assert "2 of 20 runs have not finished; finish them with: modern-gpt ablate --resume 'my results'" in footnotes(
        a, folder="my results"
    )
    assert "2 of 20 runs have not finished; finish them with: modern-gpt ablate --resume DIR" in footnotes(a)
    duel = ablation([("classic", "", None), ("modern", "rope", 0)], [CLASSIC, rope], plan="duel")
    assert "2 of 10 runs have not finished; finish them with: modern-gpt duel --resume r" in footnotes(duel, folder="r")
    assert not any("have not finished" in n for n in footnotes(cumulative()))
    # with --lrs every run row counts: 3 learning rates x 2 rows x 2 seeds, one missing
    full = swept()
    short = Ablation(full.meta, full.runs[~((full.runs["row"] == 4) & (full.runs["seed"] == 1))].reset_index(drop=True))
    assert any(n.startswith("1 of 12 runs have not finished") for n in footnotes(lr_view(short)))


def test_footnotes_say_when_the_tokenizer_is_lossy():
    lossless = [[True] * 5, [True] * 5, [True] * 5, [False] * 5]
    a = cumulative(tokenizer="bpe", corpus={"val_chars": 30_000, "val_lost_chars": 12}, lossless=lossless)
    (note,) = [n for n in footnotes(a) if n.startswith("Lossy tokenizer")]
    assert note.startswith("Lossy tokenizer: --tokenizer bpe does not give back the validation text")
    assert "in 12 of its 30,000 characters, 0.04%" in note
    assert not any(n.startswith("Lossy tokenizer") for n in footnotes(cumulative()))


def test_footnotes_warn_of_one_seed_parameter_mismatch_and_memorisation():
    one = ablation([("classic", "", None), ("rope", "rope", 0)], [[3.0], [2.9]], params=[5000, 5250])
    notes = footnotes(one)
    assert any(n.startswith("One seed: every verdict is inconclusive") for n in notes)
    assert any(n.startswith("Parameter mismatch: rope has 5,250 parameters, +5.0% against classic") for n in notes)
    epochs = [[0.5] * 5, [0.5] * 5, [2.0] * 5, [0.5] * 5]
    notes = footnotes(cumulative(epochs=epochs))
    assert "Memorisation risk: rope: its runs saw 2.0 epochs of the training split. Use more text or fewer steps." in (
        notes
    )
    assert not any(n.startswith(("One seed", "Parameter mismatch", "Memorisation")) for n in footnotes(cumulative()))
