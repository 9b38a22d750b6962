"""Several learning rates (--lrs): every row at its own best one, chosen on one half of the evaluation windows and
reported on the other, with how many learning rates each row trained at without diverging or spiking."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from modern_gpt.ablation import planning, report
from modern_gpt.ablation.results import ResultsDir
from modern_gpt.cli.commands import app
from modern_gpt.core.config import DataConfig, ModelConfig, TrainConfig
from modern_gpt.core.errors import UserError
from modern_gpt.core.settings import resolve
from modern_gpt.data.corpus import eval_offsets, load_corpus
from modern_gpt.run.train import Spikes, evaluate, train_run
from modern_gpt.verdict.design import Design, Row
from modern_gpt.verdict.table import footnotes, lr_view, summarize
from modern_gpt.views.render import to_json
from tests.clihelp import TIMING, invoke, run_values

runner = CliRunner()
TINY = ["--smoke", "--steps", 12, "--eval-every", 12, "--eval-tokens", 1024, "--jobs", 1]


# ---------------------------------------------------------------------------
# the two halves of the evaluation windows
# ---------------------------------------------------------------------------
def test_the_tuning_and_test_halves_are_disjoint_and_val_loss_is_both(tmp_path):
    corpus = load_corpus(DataConfig(cache_dir=str(tmp_path)))
    model_cfg = ModelConfig(context=16, dim=32, heads=2, layers=1)
    cfg = TrainConfig(steps=6, batch_size=4, eval_every=6, eval_tokens=512, device="cpu", threads=1)
    result, model = train_run(model_cfg, corpus, cfg, seed=0)
    offsets = eval_offsets(len(corpus.val), 16, 512)
    tune, test = offsets[0::2], offsets[1::2]
    predicted = [{t for o in half for t in range(o + 1, o + 17)} for half in (tune, test)]  # the target tokens
    assert len(tune) == len(test) == 16 and not predicted[0] & predicted[1]
    assert result.val_loss_tune == evaluate(model, corpus.val, tune, 16, "cpu")
    assert result.val_loss_test == evaluate(model, corpus.val, test, 16, "cpu")
    assert result.val_loss_tune != result.val_loss_test
    assert result.val_loss == pytest.approx((result.val_loss_tune + result.val_loss_test) / 2, rel=1e-12)
    assert result.val_loss == pytest.approx(evaluate(model, corpus.val, offsets, 16, "cpu"), rel=1e-6)


def test_a_spike_is_a_loss_over_one_nat_above_its_running_minimum_after_warm_up():
    spikes = Spikes(warmup=3)
    for step, loss in enumerate([9.0, 5.0, 8.0, 3.0, 3.5, 4.2, 4.5, 3.1, 4.3, 2.0, 2.9], start=1):
        spikes.add(step, loss)
    # step 3 (8.0) is in warm-up; 4.2 at step 6 starts one spike (4.5 continues it); 4.3 at step 9 a second
    assert spikes.count == 2
    blown = Spikes(warmup=3)  # a loss that jumps up while the learning rate warms up, and stays up
    for step, loss in enumerate([4.0, 3.0, 6.0, 6.5, 7.0, 9.0], start=1):
        blown.add(step, loss)
    assert blown.count == 1  # counted at its first step after warm-up


# ---------------------------------------------------------------------------
# choosing the best learning rate: a hand computation from known per-run values
# ---------------------------------------------------------------------------
LRS = [1e-3, 1e-2, 1e-1]


def _sweep(tune: dict, test: dict, bad=(), spiky=()) -> tuple[Design, pd.DataFrame]:
    """Two table rows (a, b compared with a) at three learning rates and two seeds, from per-run losses keyed
    (row, lr index, seed); `bad` runs diverged, `spiky` ones spiked."""
    rows = [Row("ab"[b], None if b == 0 else j, lr=lr, params=100) for b in range(2) for j, lr in enumerate(LRS)]
    design = Design(rows, [0, 1], lrs=LRS, lr=3e-3)
    records = []
    for (b, j, seed), t in tune.items():
        diverged = (b, j, seed) in bad
        records.append(
            {
                "row": 3 * b + j,
                "seed": seed,
                "variant": "ab"[b],
                "lr": LRS[j],
                "val_loss": math.nan if diverged else (t + test[b, j, seed]) / 2,
                "val_loss_tune": math.nan if diverged else t,
                "val_loss_test": math.nan if diverged else test[b, j, seed],
                "val_bpc": 1.0,
                "diverged": diverged,
                "error": "",
                "spikes": int((b, j, seed) in spiky),
            }
        )
    return design, pd.DataFrame(records)


def test_each_row_gets_the_learning_rate_with_the_lowest_mean_tuning_loss_and_is_reported_on_the_test_half():
    # per-run losses keyed (row, lr index, seed), laid out as a grid
    tune = {
        (0, 0, 0): 2.0,
        (0, 0, 1): 2.2,
        (0, 1, 0): 1.5,
        (0, 1, 1): 1.7,
        (0, 2, 0): 1.0,
        (0, 2, 1): 1.2,
        (1, 0, 0): 1.9,
        (1, 0, 1): 2.1,
        (1, 1, 0): 1.6,
        (1, 1, 1): 1.6,
        (1, 2, 0): 1.4,
        (1, 2, 1): 1.7,
    }  # fmt: skip
    # on the test half row 1 would choose lr 0.01 (1.30 against 1.55), on the tuning half it chooses 0.1
    test = {(0, 0, 0): 2.1, (0, 0, 1): 2.3, (0, 1, 0): 1.4, (0, 1, 1): 1.6, (0, 2, 0): 1.1, (0, 2, 1): 1.0,
            (1, 0, 0): 1.9, (1, 0, 1): 2.0, (1, 1, 0): 1.2, (1, 1, 1): 1.4, (1, 2, 0): 1.5, (1, 2, 1): 1.6}  # fmt: skip
    # row 0's lr 0.1 has the lowest tuning loss, but seed 1 diverged there: never chosen, and it is not stable
    meta, runs = _sweep(tune, test, bad={(0, 2, 1)}, spiky={(1, 0, 0)})
    view_meta, view = lr_view(meta, runs)
    summary = summarize(view_meta, view)
    # by hand: row 0's mean tuning losses 2.1 / 1.6 / inf -> lr 0.01; row 1's 2.0 / 1.6 / 1.55 -> lr 0.1
    assert [r.lr for r in summary] == [1e-2, 1e-1]
    assert [r.stable for r in summary] == [2, 2] and [r.lrs for r in summary] == [3, 3]
    assert summary[0].val_loss == pytest.approx((1.4 + 1.6) / 2) and summary[1].val_loss == pytest.approx(1.55)
    assert summary[1].delta_val == pytest.approx(((1.5 - 1.4) + (1.6 - 1.6)) / 2)  # paired, each at its own best
    assert summary[1].pairs == 2 and summary[1].reference == 0
    notes = footnotes(view_meta, view, summary)
    assert any("At lr 0.1, of 4 runs 1 diverged or failed: a" in n for n in notes)
    assert any("At lr 0.001, of 4 runs 1 spiked: b" in n for n in notes)

    # --at-lr: everyone at one learning rate, still on the test half
    at = summarize(*lr_view(meta, runs, at_lr=1e-3))
    assert [r.lr for r in at] == [1e-3, 1e-3] and at[0].val_loss == pytest.approx(2.2)
    with pytest.raises(UserError, match="not one of the learning rates tried: 0.001, 0.01, 0.1"):
        lr_view(meta, runs, at_lr=3e-3)

    # every learning rate of row 0 with a failed run: the fewest failures win (lr 0.01: one of two; the others two)
    meta3, runs3 = _sweep(tune, test, bad={(0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 2, 0), (0, 2, 1)})
    few = summarize(*lr_view(meta3, runs3))
    assert few[0].lr == 1e-2 and few[0].seeds == 1 and few[0].stable == 0
    # nothing of row 0 trained at all: no best learning rate to show
    meta4, runs4 = _sweep(tune, test, bad={(0, j, s) for j in range(3) for s in range(2)})
    assert math.isnan(summarize(*lr_view(meta4, runs4))[0].lr)

    # a row whose tuning losses are ordered like its test losses would pick the same; here they differ on purpose
    flipped = summarize(*lr_view(*_sweep(test, tune, bad={(0, 2, 1)})))
    assert flipped[1].lr == 1e-2 and flipped[1].val_loss == pytest.approx(1.6)


# ---------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------
def test_lrs_and_lr_sweep_are_parsed_and_checked():
    assert planning.parse_lrs("1e-2, 1e-3,3e-3", None) == [1e-3, 3e-3, 1e-2]
    assert planning.parse_lrs(None, "1e-3:1e-1:3") == [1e-3, 1e-2, 1e-1]
    assert planning.parse_lrs(None, None) is None
    for lrs, sweep, message in [
        ("1e-3", "1e-3:1e-2:2", "give one of them"),
        ("1e-3,abc", None, "separated by commas"),
        ("1e-3,-1", None, "positive learning rates"),
        ("1e-3,0.001", None, "twice"),
        (None, "1e-2:1e-3:3", "LOW < HIGH"),
        (None, "1e-3:1e-2", "LOW:HIGH:N"),
        (None, "1e-3:1e-2:1", "N from 2"),
    ]:
        with pytest.raises(UserError, match=message):
            planning.parse_lrs(lrs, sweep)


def test_every_row_is_planned_at_every_learning_rate_against_its_reference_at_the_same_one():
    settings = resolve(None, True, {})
    spec = planning.plan_spec(
        settings, planning.Request("ablate", "cumulative", components="rmsnorm,rope", lrs="1e-3,1e-2")
    )
    assert (
        spec.lrs == [1e-3, 1e-2] and spec.design.tested_rows == 2
    )  # +rmsnorm, +rope (the placebo is tested alone): not one per lr
    assert [(v.name, v.lr, v.reference) for v in spec.variants] == [
        ("classic", 1e-3, None), ("classic", 1e-2, None),
        ("classic (placebo)", 1e-3, 0), ("classic (placebo)", 1e-2, 1),
        ("+rmsnorm", 1e-3, 0), ("+rmsnorm", 1e-2, 1),
        ("+rope", 1e-3, 4), ("+rope", 1e-2, 5),
    ]  # fmt: skip
    one = planning.plan_spec(settings, planning.Request("ablate", "cumulative", lrs="1e-2"))
    assert (
        one.lrs is None
        and one.settings.train.lr == 1e-2
        and one.variants == planning.plan_spec(settings, planning.Request("ablate", "cumulative")).variants
    )
    with pytest.raises(UserError, match="power measures seed noise at one learning rate"):
        planning.plan_spec(settings, planning.Request("power", lrs="1e-3,1e-2"))


# ---------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------
def test_one_learning_rate_in_lrs_is_exactly_a_plain_ablation(tmp_path):
    common = [*TINY, "--seeds", 2, "--no-placebo", "--plan", "custom", "--variants", "classic;rope"]
    invoke("ablate", *common, "--lr", 5e-3, "--out", tmp_path / "plain")
    invoke("ablate", *common, "--lrs", 5e-3, "--out", tmp_path / "lrs")
    pd.testing.assert_frame_equal(run_values(tmp_path / "plain"), run_values(tmp_path / "lrs"))
    plain, lrs = (
        pd.read_csv(tmp_path / f / "summary.csv").drop(columns=["secs", "tokens_per_s", "mfu"])
        for f in ("plain", "lrs")
    )
    pd.testing.assert_frame_equal(plain, lrs)


def test_a_diverging_learning_rate_is_recorded_counted_and_drawn_and_resume_finishes_every_lr(tmp_path):
    folder = tmp_path / "sweep"
    flags = ["--seeds", 2, "--no-placebo", "--plan", "custom", "--variants", "classic;rope", "--lrs", "3e-3,1e6"]
    out = invoke("ablate", *TINY, *flags, "--out", folder)
    runs = pd.read_csv(folder / "runs.csv")
    assert len(runs) == 2 * 2 * 2 and set(runs.lr) == {3e-3, 1e6}
    assert runs[runs.lr == 1e6].diverged.all() and not runs[runs.lr == 3e-3].diverged.any()
    summary = pd.read_csv(folder / "summary.csv")
    assert list(summary.lr) == [3e-3] * 2 and list(summary.stable) == [1, 1] and list(summary.lrs) == [2] * 2
    assert (folder / "lr.png").stat().st_size > 10_000 and (folder / "curves.png").is_file()
    assert "stable" in out and "1/2" in out and "At lr 1e+06, of 4 runs 4 diverged or failed" in out
    # the table's val is each row's test-half loss at its best learning rate
    best = runs[runs.lr == 3e-3].groupby("row").val_loss_test.mean()
    assert list(summary.val_loss) == pytest.approx(list(best.loc[[0, 2]]))
    md = invoke("report", folder, "--format", "markdown", "--at-lr", "1e6")
    assert "| variant | params | lr | stable |" in md and "diverged" in md

    # resume across learning rates: only the missing runs are trained again, the others are not touched
    results = ResultsDir(folder)
    lost = [results.run_file(1, 1), results.run_file(2, 0)]
    kept = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in results.runs_dir.iterdir() if f not in lost}
    for f in lost:
        f.unlink()
    meta = json.loads((folder / "meta.json").read_text())
    meta["status"] = "interrupted"
    (folder / "meta.json").write_text(json.dumps(meta))
    invoke("ablate", "--resume", folder)
    assert all((f.stat().st_mtime_ns, f.read_bytes()) == v for f, v in kept.items())
    pd.testing.assert_frame_equal(run_values(folder), runs.drop(columns=TIMING + ["threads"]))


def test_at_lr_and_a_damaged_sweep_are_one_sentence(tmp_path):
    result = runner.invoke(app, ["ablate", *map(str, TINY), "--at-lr", "1e-3", "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "--at-lr goes with an ablation trained at several learning rates" in str(
        result.exception
    )
    assert not (tmp_path / "x").exists()
    folder = tmp_path / "s"
    invoke(
        "ablate",
        *TINY,
        "--seeds",
        1,
        "--no-placebo",
        "--plan",
        "custom",
        "--variants",
        "classic",
        "--lr-sweep",
        "1e-3:1e-2:2",
        "--out",
        folder,
    )
    # runs.csv is written for the reader, never read back: edited or cut by hand, it changes no table (the
    # choice is made from runs/, whose tuning losses say otherwise than the edit)
    truth = to_json([[r.to_dict() for r in report.load(folder).summary], report.load(folder).notes])
    runs = pd.read_csv(folder / "runs.csv")
    edited = runs.assign(val_loss_tune=[9.9, 0.1])
    edited.to_csv(folder / "runs.csv", index=False)
    table = report.load(folder)
    assert table.summary[0].lr == runs.sort_values("val_loss_tune").lr.iloc[0]  # not the edited 0.1's
    assert to_json([[r.to_dict() for r in table.summary], table.notes]) == truth
    runs.drop(columns=["spikes"]).to_csv(folder / "runs.csv", index=False)
    again = report.load(folder)
    assert to_json([[r.to_dict() for r in again.summary], again.notes]) == truth
    meta = json.loads((folder / "meta.json").read_text())
    meta["spec"]["variants"][1]["lr"] = 0.5
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"spec.variants\[1\].lr is 0.5, not spec.lrs\[1\] 0.01"):
        ResultsDir(folder).read_meta()
    assert np.isclose(meta["spec"]["lrs"], [1e-3, 1e-2]).all()
