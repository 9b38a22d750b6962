"""The ablation harness: plans, the summary and its verdicts, the results folder, resume and --jobs."""

import math
import signal
import time

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from typer.testing import CliRunner

from modern_gpt import ablate as ab
from modern_gpt import report
from modern_gpt.cli import app
from modern_gpt.errors import UserError
from modern_gpt.model import COMPONENTS, ModelConfig, non_embedding_params, param_counts
from modern_gpt.results import CURVE_COLUMNS, RUN_COLUMNS, SUMMARY_COLUMNS, ResultsDir

from .clihelp import cli_process

runner = CliRunner()
TIMING = ["secs", "tokens_per_s"]  # the only columns allowed to differ between identical runs


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


# ---------------------------------------------------------------------------
# plans
# ---------------------------------------------------------------------------
def test_cumulative_plan_stacks_one_component_per_row():
    rows = ab.make_plan("cumulative")
    assert [r.name for r in rows] == ["classic"] + [f"+{c}" for c in COMPONENTS]
    assert rows[3].components == ("rmsnorm", "rope", "swiglu") and rows[3].reference == 2
    picked = ab.make_plan("cumulative", ab.parse_components("swiglu,rope"))
    assert [r.components for r in picked] == [(), ("swiglu",), ("swiglu", "rope")]


def test_single_and_leave_one_out_plans_compare_with_the_first_row():
    single = ab.make_plan("single")
    assert [r.components for r in single[1:]] == [(c,) for c in COMPONENTS]
    assert {r.reference for r in single[1:]} == {0}
    loo = ab.make_plan("leave-one-out")
    assert loo[0].components == COMPONENTS and loo[1].name == "-rmsnorm" and "rmsnorm" not in loo[1].components
    assert {r.reference for r in loo[1:]} == {0}


def test_custom_plan_compares_each_row_with_the_row_above():
    rows = ab.make_plan("custom", variants="classic; rope+rmsnorm ;modern")
    assert [r.components for r in rows] == [(), ("rmsnorm", "rope"), COMPONENTS]
    assert [r.reference for r in rows] == [None, 0, 1]


@pytest.mark.parametrize(
    "call,message",
    [
        (
            lambda: ab.make_plan("random"),
            "unknown plan 'random'; choose one of cumulative, single, leave-one-out, custom",
        ),
        (lambda: ab.make_plan("custom"), "--plan custom needs --variants"),
        (lambda: ab.make_plan("custom", variants="classic;rope+swiglu2"), "unknown variant part 'swiglu2'"),
        (lambda: ab.parse_components("rmsnorm,flash"), "unknown component 'flash'; the components are rmsnorm, rope"),
        (lambda: ab.seed_list(0, None), "--seeds must be at least 1"),
        (lambda: ab.seed_list(None, "1,x"), "--seed-list must be whole numbers"),
    ],
)
def test_bad_plans_are_one_sentence(call, message):
    with pytest.raises(UserError, match=message.replace("+", r"\+")):
        call()


def test_seed_lists():
    assert ab.seed_list(None, None) == [0, 1, 2]
    assert ab.seed_list(5, None) == [0, 1, 2, 3, 4]
    assert ab.seed_list(None, "3,7,11") == [3, 7, 11]


def test_match_params_brings_every_row_within_one_percent():
    base = ModelConfig(vocab_size=65, context=64, dim=128, heads=4, layers=4)
    rows = ab.match_params(ab.make_plan("cumulative"), base)
    target = non_embedding_params(param_counts(base))
    for row in rows[1:]:
        got = non_embedding_params(param_counts(ab.variant_config(base, row)))
        assert abs(got - target) <= 0.01 * target, row
    assert (
        rows[5].mlp_hidden > ab.variant_config(base, ab.make_plan("cumulative")[5]).hidden
    )  # gqa's savings go to the MLP


# ---------------------------------------------------------------------------
# the summary, from known per-seed values
# ---------------------------------------------------------------------------
def _meta(vals: list[list[float]], seeds: list[int]) -> tuple[dict, pd.DataFrame]:
    names = ["base", "a", "b", "c"][: len(vals)]
    variants = [
        {"name": n, "components": [], "reference": i - 1 if i else None, "params": 1000, "hidden": 4,
         "kv_cache_bytes_per_token": 8, "mlp_hidden": None}
        for i, n in enumerate(names)
    ]  # fmt: skip
    runs = [
        {"row": i, "variant": names[i], "components": "", "seed": s, "params": 1000, "train_loss": v - 0.05,
         "val_loss": v, "secs": 1.0, "val_bpc": v / math.log(2), "tokens_per_s": 10.0, "epochs": 0.5,
         "diverged": False, "error": "", "steps_done": 10}
        for i, row in enumerate(vals) for s, v in zip(seeds, row, strict=True)
    ]  # fmt: skip
    meta = {"variants": variants, "spec": {"seeds": seeds, "match_params": False}}
    return meta, pd.DataFrame(runs)


def test_known_values_give_the_documented_verdicts_and_holm_p_values():
    vals = [[2.00, 2.02, 2.01], [1.90, 1.91, 1.89], [2.10, 2.12, 2.11], [2.11, 2.10, 2.115]]
    meta, runs = _meta(vals, [0, 1, 2])
    summary = report.summarize(meta, runs)
    assert [r["verdict"] for r in summary] == ["", "better", "worse", "noise"]
    assert summary[1]["delta_val"] == pytest.approx(-0.11)
    assert summary[0]["spread"] == pytest.approx(0.02)
    # by hand: paired t-tests, then Holm over the three comparisons
    p = [
        scipy_stats.ttest_1samp([x - y for x, y in zip(vals[i], vals[i - 1], strict=True)], 0).pvalue for i in (1, 2, 3)
    ]
    order = sorted(range(3), key=lambda i: p[i])
    adjusted = [0.0] * 3
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * p[i]))
        adjusted[i] = running
    assert math.isnan(summary[0]["p_holm"])
    assert [r["p_holm"] for r in summary[1:]] == pytest.approx(adjusted, rel=1e-9)


def test_one_seed_is_always_noise_and_says_why():
    meta, runs = _meta([[2.0], [1.0]], [0])
    summary = report.summarize(meta, runs)
    assert summary[1]["verdict"] == "noise" and math.isnan(summary[1]["ci_low"])
    assert any(n.startswith("One seed: every verdict is noise") for n in report.footnotes(meta, runs, summary))


def test_diverged_runs_are_left_out_of_the_means_and_named():
    meta, runs = _meta([[2.0, 2.1, 2.2], [1.0, 1.1, 1.2]], [0, 1, 2])
    runs.loc[(runs.row == 1) & (runs.seed == 2), ["diverged", "val_loss"]] = [True, math.nan]
    summary = report.summarize(meta, runs)
    assert summary[1]["val_loss"] == pytest.approx(1.05) and summary[1]["diverged"] == 1 and summary[1]["seeds"] == 2
    assert summary[1]["delta_val"] == pytest.approx(-1.0)  # paired over the seeds both rows finished
    notes = report.footnotes(meta, runs, summary)
    assert any(n.startswith("a, seed 2: diverged") for n in notes)
    assert "(1 diverged)" in report.markdown(
        {**meta, "spec": {**meta["spec"], "plan": "custom", "data_name": "x", "settings": _SETTINGS}}, summary, notes
    )


def test_memorisation_and_parameter_mismatch_are_footnoted():
    meta, runs = _meta([[2.0, 2.1], [1.0, 1.1]], [0, 1])
    meta["variants"][1]["params"] = 1100
    runs.loc[runs.row == 1, "epochs"] = 3.5
    summary = report.summarize(meta, runs)
    notes = report.footnotes(meta, runs, summary)
    assert any(n.startswith("Parameter mismatch: a has 1,100 parameters, +10.0%") for n in notes)
    assert any(n.startswith("Memorisation risk: a: its runs saw 3.5 epochs") for n in notes)


_SETTINGS = {
    "train": {"steps": 10, "batch_size": 2},
    "model": {"context": 8, "dim": 16, "layers": 1},
    "data": {"tokenizer": "char"},
}


# ---------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke ablation, uninterrupted: 7 variants x 3 seeds."""
    folder = tmp_path_factory.mktemp("smoke") / "results"
    output = invoke("ablate", "--smoke", "--seeds", 3, "--out", folder)
    return folder, output


def test_the_smoke_ablation_writes_the_four_files(smoke):
    folder, output = smoke
    for name in ("runs.csv", "curves.csv", "summary.csv", "meta.json"):
        assert (folder / name).is_file(), name
    runs, curves, summary = (pd.read_csv(folder / f) for f in ("runs.csv", "curves.csv", "summary.csv"))
    assert list(runs.columns) == RUN_COLUMNS and len(runs) == 21
    assert list(curves.columns) == CURVE_COLUMNS and set(curves.step) == {12, 24, 36}
    assert list(summary.columns) == SUMMARY_COLUMNS and list(summary.variant) == ["classic"] + [
        f"+{c}" for c in COMPONENTS
    ]
    assert set(summary.verdict.dropna()) <= {"better", "worse", "noise"}
    meta = ResultsDir(folder).read_meta()
    assert meta["status"] == "finished" and meta["spec"]["seeds"] == [0, 1, 2] and meta["packages"]["torch"]
    for variant in ["classic", "+rmsnorm", "+qk_norm"]:
        assert variant in output
    assert "95% CI" in output and "verdict" in output


def test_report_re_renders_exactly_what_ablate_wrote(smoke):
    folder, output = smoke
    assert invoke("report", folder, "--format", "csv") == (folder / "summary.csv").read_text()
    assert invoke("report", folder) == output[: output.rindex(f"results: {folder}")]


def test_report_prints_every_format(smoke):
    import json

    folder, _ = smoke
    md = invoke("report", folder, "--format", "markdown").splitlines()
    assert md[2] == "| variant | params | train | val | Δ val | spread | 95% CI | verdict | secs |"
    assert [line.split(" | ")[0] for line in md[4:11]] == ["| classic"] + [f"| +{c}" for c in COMPONENTS]
    doc = json.loads(invoke("report", folder, "--format", "json"))
    assert [r["variant"] for r in doc["rows"]] == ["classic"] + [f"+{c}" for c in COMPONENTS]
    assert doc["rows"][0]["delta_val"] is None and doc["footnotes"][-1].startswith("verdict:")


def test_the_same_variant_twice_is_a_delta_of_exactly_zero(tmp_path):
    invoke(
        "ablate",
        "--smoke",
        "--plan",
        "custom",
        "--variants",
        "classic;classic",
        "--seeds",
        3,
        "--steps",
        12,
        "--out",
        tmp_path / "r",
    )
    summary = pd.read_csv(tmp_path / "r" / "summary.csv")
    assert summary.delta_val[1] == 0.0 and summary.verdict[1] == "noise"


def _values(folder) -> pd.DataFrame:
    return pd.read_csv(folder / "runs.csv").drop(columns=TIMING + ["threads"])


def test_jobs_2_gives_the_same_runs_as_jobs_1(smoke, tmp_path):
    folder, _ = smoke
    invoke("ablate", "--smoke", "--seeds", 3, "--jobs", 2, "--out", tmp_path / "j2")
    pd.testing.assert_frame_equal(_values(folder), _values(tmp_path / "j2"))
    pd.testing.assert_frame_equal(pd.read_csv(folder / "curves.csv"), pd.read_csv(tmp_path / "j2" / "curves.csv"))


def test_a_killed_ablation_resumes_without_repeating_a_finished_run(smoke, tmp_path):
    folder = tmp_path / "killed"
    proc = cli_process("ablate", "--smoke", "--seeds", 3, "--out", folder)
    deadline = time.time() + 120
    while len(list((folder / "runs").glob("*.json"))) < 5 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in (folder / "runs").glob("*.json")}
    assert 5 <= len(before) < 21
    pd.read_csv(folder / "runs.csv")  # parseable after a SIGKILL
    assert ResultsDir(folder).read_meta()["command"] == f"modern-gpt ablate --smoke --seeds 3 --out {folder}"

    resumed = cli_process("ablate", "--resume", folder)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resuming: {len(before)} of 21 runs already finished" in err
    assert err.count("] ") == 21 - len(before)  # one plain line per run it trained
    for name, stamp in before.items():
        f = folder / "runs" / name
        assert (f.stat().st_mtime_ns, f.read_bytes()) == stamp, f"{name} was run again"
    expected = pd.read_csv(smoke[0] / "summary.csv").drop(columns=TIMING)
    pd.testing.assert_frame_equal(pd.read_csv(folder / "summary.csv").drop(columns=TIMING), expected)
    pd.testing.assert_frame_equal(_values(folder), _values(smoke[0]))


def test_resume_refuses_other_settings(smoke):
    folder, _ = smoke
    result = runner.invoke(app, ["ablate", "--smoke", "--seeds", "3", "--steps", "10", "--resume", str(folder)])
    assert isinstance(result.exception, UserError)
    assert "was made with other settings (settings.train.steps: 36 -> 10)" in str(result.exception)
    assert (
        invoke("ablate", "--smoke", "--seeds", 3, "--resume", folder).count("classic") >= 1
    )  # the same settings: nothing to do
