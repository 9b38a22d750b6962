"""judge on published runs: folders of logs, Welch's unpaired rule, threshold claims (verdict/logs.py, unpaired.py).

The fixtures are written here in the formats the field publishes (modded-nanogpt's lines carry over from its public
logs; the code around them does not). SciPy is the independent reference; the simulations run the rule itself.
"""

import json
import math
import os

import numpy as np
import pytest

from modern_gpt.core.errors import UserError
from modern_gpt.verdict import logs, unpaired
from modern_gpt.verdict.reading import JudgeSettings
from modern_gpt.verdict.stats import hommel

scipy_stats = pytest.importorskip("scipy.stats")

SCRIPT = """import os
def main():
    print0(f"step:{step}/{train_steps} val_loss:{val_loss:.4f} train_time:{t:.0f}ms", console=True)
    # an example line in the source: step:1390/1390 val_loss:9.9999 (code, not a run's loss)
"""


def modded_log(losses: list[float], total: int = 1390, every: int = 250, script: bool = True) -> str:
    """A modded-nanogpt log: the script's source, then evaluations every `every` steps and at the end."""
    steps = list(range(0, total, every)) + [total]
    lines = [SCRIPT] if script else []
    evals = list(np.linspace(10.8, losses[0] + 0.5, len(steps) - 1)) + [losses[0]]
    for step, loss in zip(steps, evals, strict=True):
        lines.append(f"step:{step}/{total} val_loss:{loss:.4f} train_time:{step * 58}ms step_avg:58.00ms")
    return "\n".join(lines) + "\npeak memory allocated: 30908 MiB\n"


def write_runs(folder, variant: str, finals: list[float], **kw) -> None:
    (folder / variant).mkdir(parents=True, exist_ok=True)
    for i, x in enumerate(finals):
        (folder / variant / f"run{i:02d}.txt").write_text(modded_log([x], **kw), encoding="utf-8")


BASE = [3.2817, 3.2796, 3.2778, 3.2802, 3.2775, 3.2767, 3.2758, 3.2821, 3.2780, 3.2768, 3.2769, 3.2775, 3.2766]
NEW = [3.2790, 3.2761, 3.2781, 3.2772, 3.2759, 3.2770, 3.2788, 3.2766, 3.2777, 3.2769, 3.2745, 3.2772, 3.2780, 3.2760]


@pytest.fixture
def record(tmp_path):
    folder = tmp_path / "2026-07-17_Record"
    write_runs(folder, "baseline", BASE)
    write_runs(folder, "this_pr", NEW)
    (folder / "README.md").write_text("# a record\nstep:1390/1390 val_loss:1.0000\n")
    (folder / "train_gpt.py").write_text(SCRIPT)
    return folder


def test_a_record_folder_equals_an_independent_parse_and_scipy(record):
    title, rows, notes = logs.judge_logs(record, JudgeSettings(alpha=0.01), threshold_at=3.28)
    by = {r["variant"]: r for r in rows}
    assert (by["baseline"]["runs"], by["this_pr"]["runs"]) == (13, 14)  # unequal counts, as published
    assert by["baseline"]["mean"] == pytest.approx(np.mean(BASE), abs=1e-12)
    assert by["this_pr"]["mean"] == pytest.approx(np.mean(NEW), abs=1e-12)
    ref = scipy_stats.ttest_ind(NEW, BASE, equal_var=False)
    assert by["this_pr"]["p"] == pytest.approx(ref.pvalue, rel=1e-6)
    ci = ref.confidence_interval(0.95)
    assert (by["this_pr"]["ci_low"], by["this_pr"]["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-6)
    for v, xs in (("baseline", BASE), ("this_pr", NEW)):
        one = scipy_stats.ttest_1samp(xs, 3.28, alternative="less").pvalue
        assert by[v]["p_target"] == pytest.approx(one, rel=1e-6)
    assert by["baseline"]["p_target"] == pytest.approx(0.0042976481, rel=1e-6)  # the record's own statistics.md
    assert "Welch" in notes[0] and "one-sided" in notes[1]


def test_code_lines_and_files_without_evaluations_are_not_runs(record, tmp_path):
    (record / "this_pr" / "crashed.txt").write_text(SCRIPT + "step:10/1390 train_time:580ms\n")
    _, rows, notes = logs.judge_logs(record, JudgeSettings())
    assert {r["variant"]: r["runs"] for r in rows} == {"baseline": 13, "this_pr": 14}
    assert any("No evaluation in this_pr/crashed.txt" in n for n in notes)
    assert all(r["mean"] < 4 for r in rows)  # the 9.9999 in the source's comment was never read


def test_a_run_cut_short_is_named_and_left_out(record):
    (record / "this_pr" / "short.txt").write_text(
        modded_log([3.30], total=1390).replace("step:1390/1390 val_loss:3.3000", "")
    )
    _, rows, notes = logs.judge_logs(record, JudgeSettings())
    assert {r["variant"]: r["runs"] for r in rows}["this_pr"] == 14
    assert any("Cut short" in n and "short.txt" in n for n in notes)


def test_same_seed_repeats_are_flagged(record):
    text = (record / "this_pr" / "run00.txt").read_text()
    (record / "this_pr" / "again.txt").write_text(text)
    _, _, notes = logs.judge_logs(record, JudgeSettings())
    assert any("Same-seed repeats" in n and "again.txt" in n and "run00.txt" in n for n in notes)


def test_at_step_reads_that_evaluation(record):
    _, rows, _ = logs.judge_logs(record, JudgeSettings(), at_step=1000)
    assert all(r["mean"] > 3.5 for r in rows)  # the evaluation at step 1000, not the last
    with pytest.raises(UserError, match="no run gives a number.*No evaluation at step 1001"):
        logs.judge_logs(record, JudgeSettings(), at_step=1001)  # no run has it: each left out, and said


def test_no_evaluation_anywhere_is_one_sentence(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text(SCRIPT)
    with pytest.raises(UserError, match="holds no log judge recognises"):
        logs.judge_logs(tmp_path, JudgeSettings())


def test_other_formats(tmp_path):
    for v, xs in (("base", [1.50, 1.52, 1.49]), ("new", [1.40, 1.42, 1.43])):
        for i, x in enumerate(xs):  # nanoGPT's train.py
            d = tmp_path / "nano" / v
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{i}.log").write_text(
                f"step 0: train loss 4.2, val loss 4.3\niter 0: loss 4.2\nstep 250: train loss 1.1, val loss {x}\n"
            )
            hf = tmp_path / "hf" / v / f"run{i}"  # an HF Trainer output folder, with a checkpoint's older state
            (hf / "checkpoint-100").mkdir(parents=True)
            state = {"max_steps": 200, "log_history": [{"loss": 2.0, "step": 100}, {"eval_loss": 9.0, "step": 100}]}
            (hf / "checkpoint-100" / "trainer_state.json").write_text(json.dumps(state))
            state["log_history"].append({"eval_loss": x, "step": 200})
            (hf / "trainer_state.json").write_text(json.dumps(state))
            lt = tmp_path / "lightning" / v / f"version_{i}"
            lt.mkdir(parents=True)
            (lt / "metrics.csv").write_text(f"epoch,step,train_loss,val_loss\n0,10,2.0,\n0,10,,3.0\n1,20,,{x}\n")
    for kind in ("nano", "hf", "lightning"):
        _, rows, _ = logs.judge_logs(tmp_path / kind, JudgeSettings(reference="base"))
        by = {r["variant"]: r for r in rows}
        assert by["new"]["mean"] == pytest.approx(np.mean([1.40, 1.42, 1.43])), kind
        assert by["new"]["p"] == pytest.approx(
            scipy_stats.ttest_ind([1.40, 1.42, 1.43], [1.50, 1.52, 1.49], equal_var=False).pvalue, rel=1e-6
        )


def test_log_pattern(tmp_path):
    for v, xs in (("a", [2.0, 2.1]), ("b", [1.0, 1.1])):
        (tmp_path / v).mkdir()
        for i, x in enumerate(xs):
            (tmp_path / v / f"{i}.txt").write_text(f"epoch 1 | valid ppl 9.0 | valid loss {x}\n")
    _, rows, _ = logs.judge_logs(tmp_path, JudgeSettings(), log_pattern=r"epoch \d+ .*valid loss (?P<loss>[\d.]+)")
    assert [r["mean"] for r in rows] == pytest.approx([2.05, 1.05])
    with pytest.raises(UserError, match=r"no named group loss"):
        logs.judge_logs(tmp_path, JudgeSettings(), log_pattern=r"valid loss ([\d.]+)")


def test_a_utf16_log_is_read_and_said(record):
    path = record / "this_pr" / "run00.txt"
    path.write_text(path.read_text(), encoding="utf-16")
    _, rows, notes = logs.judge_logs(record, JudgeSettings())
    assert {r["variant"]: r["runs"] for r in rows}["this_pr"] == 14
    assert any("Read as utf-16" in n for n in notes)


def test_a_long_log_is_streamed(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "CHUNK", 1000)  # many chunks: matches cut at a chunk's end are read whole
    (tmp_path / "a").mkdir()
    body = "".join(f"step:{s}/5000 val_loss:{4 - s / 5000:.4f} train_time:1ms\n" for s in range(0, 5001, 10))
    (tmp_path / "a" / "r.txt").write_text(body)
    run = logs.read_run(tmp_path / "a" / "r.txt", "a")
    assert len(run.losses) == 501 and run.losses[-1] == 3.0 and run.total == 5000


def test_one_run_variant_is_a_footnote(record):
    write_runs(record, "lonely", [3.27])
    _, rows, notes = logs.judge_logs(record, JudgeSettings())
    lonely = next(r for r in rows if r["variant"] == "lonely")
    assert lonely["runs"] == 1 and math.isnan(lonely["p"])
    assert any("One run only" in n and "lonely" in n for n in notes)


def test_steps_as_compute(tmp_path):
    write_runs(tmp_path, "baseline-s1430", [3.2848, 3.2861, 3.2882, 3.2859], total=1430)
    write_runs(tmp_path, "baseline-s1480", [3.2795, 3.2782, 3.2793, 3.2790], total=1480)
    write_runs(tmp_path, "this_pr", [3.2780, 3.2784, 3.2779], total=1415)
    _, rows, notes = logs.judge_logs(tmp_path, JudgeSettings())
    assert {r["variant"]: r["vs"] for r in rows}["this_pr"] == "baseline-s1480"  # the longest baseline
    rate = next(n for n in notes if n.startswith("Steps as compute"))
    slope = (np.mean([3.2795, 3.2782, 3.2793, 3.2790]) - np.mean([3.2848, 3.2861, 3.2882, 3.2859])) / 50
    assert f"{100 * slope:+.4f}" in rate and "two points" in rate


def test_a_table_without_seeds_is_judged_unpaired(tmp_path, run_ok):
    path = tmp_path / "runs.csv"
    path.write_text("variant,val_loss\n" + "".join(f"a,{x}\n" for x in BASE) + "".join(f"b,{x}\n" for x in NEW))
    out = run_ok("judge", str(path), "--format", "json")
    doc = json.loads(out)
    b = next(r for r in doc["rows"] if r["variant"] == "b")
    assert b["p"] == pytest.approx(scipy_stats.ttest_ind(NEW, BASE, equal_var=False).pvalue, rel=1e-6)
    assert "Welch" in doc["footnotes"][0]


def test_cli_on_a_folder(record, run_ok, run):
    out = run_ok("judge", str(record), "--threshold", "3.28", "--alpha", "0.01")
    assert "holds" in out and "this_pr" in out
    code, _, err = run("judge", str(record), "--log-pattern", "(")
    assert code == 2 and "not a regular expression" in err


# ---------------------------------------------------------------------------
# The rules' error rates, by simulation (fixed RNG; Monte-Carlo error stated)
# ---------------------------------------------------------------------------
TABLES = 20_000


def _welch_tables(rng, ns, sds, deltas):
    """TABLES tables of len(ns) - 1 rows, each against row 0: Welch's Δ, se, df and p, as the table computes them."""
    draws = [rng.normal(d, s, size=(TABLES, n)) for n, s, d in zip(ns, sds, deltas, strict=True)]
    m = [x.mean(1) for x in draws]
    v = [x.var(1, ddof=1) for x in draws]
    out = [unpaired.welch_arrays(m[i], v[i], ns[i], m[0], v[0], ns[0]) for i in range(1, len(ns))]
    return [np.stack(col, axis=1) for col in zip(*out, strict=True)]


@pytest.mark.parametrize(
    "ns, sds, limit",
    [
        ((10, 10, 10, 10), (1, 1, 1, 1), 0.05),
        # Welch's t is itself slightly liberal where the smaller group has the larger sd (5 runs at 3x the
        # reference's sd: 5.5% for that row alone at 200,000 tables; 4 runs: 6.0%): the stated limit, in
        # docs/statistics.md
        ((13, 5, 8, 20), (1, 3, 0.5, 2), 0.055),
        ((4, 14, 6, 3), (2.5, 1, 1, 0.4), 0.05),
    ],
)
def test_welch_fwer_and_coverage_with_unequal_n_and_sds(ns, sds, limit):
    rng = np.random.default_rng(45)
    delta, se, df, p = _welch_tables(rng, ns, sds, (0.0,) * len(ns))
    wrong = np.nanmin(hommel(p), axis=1) < 0.05  # any wrong better/worse in the table
    mc = 3 * math.sqrt(0.05 * 0.95 / TABLES)  # three Monte-Carlo standard errors
    assert wrong.mean() <= limit + mc, wrong.mean()
    assert wrong.mean() >= 0.03, wrong.mean()  # not blind: Hommel over three correlated rows spends most of alpha
    # each row's 95% CI covers the true Δ (0) exactly when the row's own p is at least 0.05
    cover = (p >= 0.05).mean(axis=0)
    assert ((cover >= 0.93) & (cover <= 0.97)).all(), cover


def test_welch_power_equals_the_reported_mde():
    """At a true Δ of the reported mde, a row is decided 80% of the time (its own level, one row)."""
    rng = np.random.default_rng(7)
    ns, sds = (6, 11), (1.0, 2.0)
    mde = unpaired.welch_mde(sds[1], ns[1], sds[0], ns[0], 0.05)
    delta, se, df, p = _welch_tables(rng, ns, sds, (0.0, mde))
    rate = (p[:, 0] < 0.05).mean()
    assert abs(rate - 0.8) < 0.02, rate  # Welch's df is itself estimated: the noncentral t is close, not exact


def test_welch_is_not_the_pooled_t():
    """The negative control: with unequal counts and sds, Student's pooled t (a wrong mapping) gives another p than
    Welch's on the same numbers, and ours is Welch's."""
    wide, tight = [0.1 * k for k in range(1, 11)], [0.50, 0.52, 0.49]
    w = unpaired.welch(wide, tight)
    pooled = scipy_stats.ttest_ind(wide, tight, equal_var=True).pvalue
    assert w.p_value == pytest.approx(scipy_stats.ttest_ind(wide, tight, equal_var=False).pvalue, rel=1e-6)
    assert abs(w.p_value - pooled) > 0.05


@pytest.mark.parametrize("variants", [1, 4])
def test_threshold_fwer_at_the_target(variants):
    """Every variant's true mean exactly at the target: a claim that holds is wrong; at most alpha of tables."""
    rng = np.random.default_rng(3 + variants)
    n, sd, target, alpha = 8, 0.0013, 3.28, 0.01
    x = rng.normal(target, sd, size=(TABLES, variants, n))
    t = (target - x.mean(-1)) / (x.std(-1, ddof=1) / math.sqrt(n))
    from modern_gpt.verdict.stats import t_sf

    p = np.asarray(t_sf(t, n - 1)).reshape(TABLES, variants)
    wrong = (hommel(p) < alpha).any(axis=1).mean()
    assert wrong <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / TABLES), wrong
    assert wrong >= 0.5 * alpha, wrong


def test_threshold_power_is_what_it_says():
    """The power reported for a set of runs is the chance that as many new runs, drawn at the observed mean and sd,
    show the claim."""
    rng = np.random.default_rng(11)
    n, sd, mean, target, alpha = 10, 0.0011, 3.2790, 3.28, 0.01
    said = unpaired.threshold(np.array([mean - sd, mean + sd] * 5) + 0.0, target, alpha)
    sample_sd = float(np.std([mean - sd, mean + sd] * 5, ddof=1))
    x = rng.normal(mean, sample_sd, size=(TABLES, n))
    t = (target - x.mean(1)) / (x.std(1, ddof=1) / math.sqrt(n))
    from modern_gpt.verdict.stats import t_sf

    rate = (np.asarray(t_sf(t, n - 1)) < alpha).mean()
    assert abs(rate - said.power) < 0.015, (rate, said.power)
    # and runs_needed is the first n whose expected t passes the critical value
    k = int(said.runs_needed)
    assert (target - mean) * math.sqrt(k) / sample_sd > scipy_stats.t.ppf(1 - alpha, k - 1)
    assert (target - mean) * math.sqrt(k - 1) / sample_sd <= scipy_stats.t.ppf(1 - alpha, k - 2)


def test_the_api_on_a_folder_and_a_frame(record):
    import pandas as pd

    import modern_gpt

    out = modern_gpt.judge(str(record), threshold=3.28, alpha=0.01)
    assert list(out["variant"]) == ["baseline", "this_pr"] and set(out["claim"]) == {"holds"}
    assert "Welch" in out.attrs["footnotes"][0]
    frame = pd.DataFrame(
        {"variant": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "val_loss": [1, 1.1, 1.2, 2, 2.1, 2.3]}
    )
    claims = modern_gpt.judge(frame, threshold=1.5)  # seeds pair these runs: the claims alone, and a footnote says so
    assert list(claims["claim"]) == ["holds", "not shown"] and "delta" not in claims
    assert "paired by seed" in claims.attrs["footnotes"][-1]
    with pytest.raises(modern_gpt.UserError, match="no named group loss"):
        modern_gpt.judge(str(record), log_pattern="x")


def test_mixed_formats_and_a_lone_variant_are_said(tmp_path):
    write_runs(tmp_path, "a", [3.30, 3.31])
    (tmp_path / "a" / "nano.log").write_text("step 250: train loss 1.1, val loss 3.32\n")
    _, rows, notes = logs.judge_logs(tmp_path, JudgeSettings())
    assert rows[0]["runs"] == 3
    assert any("2 formats (modded-nanogpt, nanoGPT)" in n for n in notes)
    assert notes[0].startswith("One variant: nothing to compare")


SPEEDRUN = os.environ.get("MODERN_GPT_SPEEDRUN")  # a modded-nanogpt checkout's records/track_1_short, if you have one


@pytest.mark.skipif(not SPEEDRUN, reason="set MODERN_GPT_SPEEDRUN to a modded-nanogpt records/track_1_short folder")
def test_the_real_record_equals_an_independent_parse(run_ok):
    """The speedrun's own logs, parsed here by a plain regex over each file's last evaluation line."""
    import re
    from pathlib import Path

    folder = Path(SPEEDRUN) / "2026-07-17_FP8DownProjection"
    doc = json.loads(run_ok("judge", str(folder), "--format", "json"))
    finals = {}
    for v in ("baseline", "this_pr"):
        for f in sorted((folder / v).glob("*.txt")):
            hits = re.findall(r"^step:(\d+)/(\d+) val_loss:([\d.]+)", f.read_text(errors="replace"), re.M)
            if hits and hits[-1][0] == hits[-1][1]:
                finals.setdefault(v, []).append(float(hits[-1][2]))
    by = {r["variant"]: r for r in doc["rows"]}
    for v, xs in finals.items():
        assert by[v]["runs"] == len(xs) and by[v]["mean"] == pytest.approx(np.mean(xs), abs=1e-12)
    ref = scipy_stats.ttest_ind(finals["this_pr"], finals["baseline"], equal_var=False)
    assert by["this_pr"]["p"] == pytest.approx(ref.pvalue, rel=1e-9)


def test_a_log_whose_loss_is_not_finite_is_named_and_left_out(record):
    """A diverged run's val_loss:nan or inf is named and left out, as runs.csv's diverged runs are: kept, it made
    the variant's mean NaN and its row blank with no word."""
    for name, value in (("nan.txt", "nan"), ("inf.txt", "inf")):
        (record / "this_pr" / name).write_text(SCRIPT + f"step:1390/1390 val_loss:{value} train_time:1ms\n")
    title, rows, notes = logs.judge_logs(record, JudgeSettings(alpha=0.01), threshold_at=3.28)
    this_pr = next(r for r in rows if r["variant"] == "this_pr")
    assert this_pr["runs"] == len(NEW) and this_pr["mean"] == pytest.approx(np.mean(NEW), abs=1e-12)
    said = [n for n in notes if n.startswith("Diverged")]
    assert said and "this_pr/nan.txt" in said[0] and "this_pr/inf.txt" in said[0]


@pytest.mark.parametrize("target", [math.nan, math.inf, -math.inf, "3.28", True])
def test_a_threshold_that_is_not_a_finite_number_is_one_sentence(record, target):
    """--threshold nan read 'mean loss < nan' and a table with no claim; inf said every claim holds; a string
    raised TypeError through the API."""
    import modern_gpt

    with pytest.raises(UserError, match="threshold must be a finite number"):
        logs.judge_logs(record, JudgeSettings(), threshold_at=target)
    with pytest.raises(modern_gpt.UserError, match=r"^threshold= must be a finite number"):
        modern_gpt.judge(str(record), threshold=target)


@pytest.mark.parametrize("metric", [[], (), {"val_loss", "prose_loss"}])
def test_the_api_refuses_a_metric_that_is_no_column_name(metric):
    import pandas as pd

    import modern_gpt

    frame = pd.DataFrame({"variant": ["a", "a", "b", "b"], "seed": [0, 1] * 2, "val_loss": [1, 1.1, 2, 2.1]})
    with pytest.raises(modern_gpt.UserError, match=r"^metric= is a column name or a list of them"):
        modern_gpt.judge(frame, metric=metric)


def test_a_metric_other_than_the_validation_loss_is_refused_on_a_folder(record, run):
    """judge DIR --metric prose_loss judged the validation loss and said so only in its title."""
    import modern_gpt

    code, _, err = run("judge", str(record), "--metric", "prose_loss")
    assert code == 2 and "--metric prose_loss" in err and "validation loss" in err, err
    with pytest.raises(modern_gpt.UserError, match="metric= prose_loss"):
        modern_gpt.judge(str(record), metric="prose_loss")
