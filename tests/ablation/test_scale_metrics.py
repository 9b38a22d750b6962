"""A ladder with --eval-data sets (issue 46): k per further metric, descriptive.

Each set's loss and ctx2x_loss are read as val's k is (verdict/ladder_metrics.py): the ladder's k on a metric
must equal judge --compute-col on the ladder's own runs.csv with that metric as --metric; a metric with no value
at a rung (classic's ctx2x_loss, past its learned position table) or whose reference's mean does not fall with
compute gets one footnote instead of a k; val's table is unchanged by the sets.
"""

from __future__ import annotations

import json
from importlib import resources
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import modern_gpt
from modern_gpt.verdict.design import Row
from modern_gpt.verdict.ladder import LadderDesign
from modern_gpt.verdict.ladder_metrics import metric_ks

SETS = Path(str(resources.files("modern_gpt").joinpath("evalsets")))
LADDER = dict(smoke=True, plan="custom", variants="classic;rope", seeds=2, steps=12, eval_every=12, jobs=1)
SETS_FLAGS = dict(eval_data=[f"code={SETS / 'code.txt'}", f"prose={SETS / 'prose.txt'}"])


@pytest.fixture(scope="module")
def ladders(tmp_path_factory):
    base = tmp_path_factory.mktemp("ladders")
    with_sets = modern_gpt.scale(out=base / "sets", **LADDER, **SETS_FLAGS)
    plain = modern_gpt.scale(out=base / "plain", **LADDER)
    return with_sets, plain


def test_val_s_table_is_the_same_with_or_without_sets(ladders):
    a, b = (pd.read_csv(r.folder / "summary.csv") for r in ladders)
    pd.testing.assert_frame_equal(a, b)
    assert "code_loss" in pd.read_csv(ladders[0].folder / "runs.csv")
    assert "code_loss" not in pd.read_csv(ladders[1].folder / "runs.csv")


def test_k_per_metric_equals_judge_on_the_ladder_s_runs_with_that_metric(ladders, run_ok, run):
    folder = ladders[0].folder
    doc = json.loads(run_ok("report", str(folder), "--format", "json"))
    plain = json.loads(run_ok("report", str(ladders[1].folder), "--format", "json"))
    assert "metrics" not in plain
    notes = " ".join(doc["footnotes"])
    assert "icl_gain is a difference of losses, not read as k" in notes
    assert "ctx2x_loss: classic has no value at rung" in notes  # the wall: a footnote, no k
    read = {b["metric"]: b for b in doc["metrics"]}
    assert "ctx2x_loss" not in read and "icl_gain" not in read
    for name in ("code_loss", "prose_loss"):
        if name not in read:  # the tiny ladder's set loss may not fall: then one footnote says so
            assert f"{name}: classic's mean does not fall" in notes
            continue
        code, out, err = run(
            "judge", folder / "runs.csv", "--compute-col", "flops", "--metric", name, "--format", "csv"
        )
        assert code == 0, err
        judged = pd.read_csv(StringIO(out)).set_index("variant")
        for r in read[name]["rows"]:
            for key in ("k", "k_low", "k_high"):
                assert r[key] == pytest.approx(judged.loc[r["variant"], key], rel=1e-9)
            assert "verdict" not in r  # descriptive: no verdict
    assert read, "neither set's loss gave a k on the tiny ladder"
    assert "descriptive" in notes and "only val's k is judged" in notes


def test_a_metric_whose_reference_does_not_fall_gets_one_footnote_and_no_k():
    design = LadderDesign((Row("classic"), Row("rope", 0)), ("a", "b", "c"), (0, 1))
    rng = np.random.default_rng(0)
    records = []
    for row in range(2):
        for rung in range(3):
            for seed in range(2):
                falls = 3.0 - 0.3 * rung + 0.01 * rng.standard_normal()
                records.append(
                    dict(
                        row=row,
                        rung=rung,
                        seed=seed,
                        flops=10.0 ** (rung + 12),
                        failed=False,
                        val_loss=falls,
                        up_loss=falls + 0.5 * rung,
                        down_loss=falls - 0.05 * row,
                    )  # fmt: skip
                )
    blocks, notes = metric_ks(design, pd.DataFrame(records), ["up_loss", "down_loss"])
    assert [b["metric"] for b in blocks] == ["down_loss"] and blocks[0]["rows"][0]["k"] > 1
    assert sum("up_loss" in n for n in notes) == 1  # its own footnote; the rule lists only the metrics with k
    assert any(n.startswith("up_loss: classic's mean does not fall") for n in notes)
