"""The ablation harness: plans, the summary and its verdicts, the results folder, resume and --jobs."""

import json
import math
import signal
import time
from unittest.mock import ANY

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from typer.testing import CliRunner

from modern_gpt.ablation import planning, report
from modern_gpt.ablation.results import CURVE_COLUMNS, RUN_COLUMNS, ResultsDir
from modern_gpt.cli.commands import app
from modern_gpt.core.components import COMPONENTS
from modern_gpt.core.config import ModelConfig, non_embedding_params, param_counts
from modern_gpt.core.errors import UserError
from modern_gpt.core.settings import resolve
from modern_gpt.run.evaluation import PROBES
from modern_gpt.verdict.design import SUMMARY_COLUMNS
from modern_gpt.verdict.stats import boundary, mde
from tests.clihelp import CLASSIC_ROPE, TIMING, cli_process, flat, interrupt, invoke, run_values, tiny, user_error

runner = CliRunner()


# ---------------------------------------------------------------------------
# plans
# ---------------------------------------------------------------------------
def test_cumulative_plan_stacks_one_component_per_row():
    rows = planning.make_plan("cumulative")
    assert [r.name for r in rows] == ["classic"] + [f"+{c}" for c in COMPONENTS]
    assert rows[3].components == ("rmsnorm", "rope", "swiglu") and rows[3].reference == 2
    picked = planning.make_plan("cumulative", planning.parse_components("swiglu,rope"))
    assert [r.components for r in picked] == [(), ("swiglu",), ("swiglu", "rope")]


def test_single_and_leave_one_out_plans_compare_with_the_first_row():
    single = planning.make_plan("single")
    assert [r.components for r in single[1:]] == [(c,) for c in COMPONENTS]
    assert {r.reference for r in single[1:]} == {0}
    loo = planning.make_plan("leave-one-out")
    assert loo[0].components == COMPONENTS and loo[1].name == "-rmsnorm" and "rmsnorm" not in loo[1].components
    assert {r.reference for r in loo[1:]} == {0}


def test_custom_plan_compares_each_row_with_the_row_above():
    rows = planning.make_plan("custom", variants="classic; rope+rmsnorm ;modern")
    assert [r.components for r in rows] == [(), ("rmsnorm", "rope"), COMPONENTS]
    assert [r.reference for r in rows] == [None, 0, 1]


@pytest.mark.parametrize(
    "call,message",
    [
        (
            lambda: planning.make_plan("random"),
            "unknown plan 'random'; choose one of cumulative, single, leave-one-out, custom",
        ),
        (lambda: planning.make_plan("custom"), "--plan custom needs --variants"),
        (
            lambda: planning.make_plan("custom", variants="classic;rope+swiglu2"),
            "is not a variant: unknown component 'swiglu2'",
        ),
        (
            lambda: planning.parse_components("rmsnorm,flash"),
            "unknown component 'flash'; the components are rmsnorm, rope",
        ),
        (lambda: planning.seed_list(0, None), "--seeds must be between 1 and 10,000, got 0"),
        (lambda: planning.seed_list(10**9, None), "--seeds must be between 1 and 10,000"),
        (lambda: planning.seed_list(None, "1,x"), "--seed-list must be whole numbers"),
        (lambda: planning.seed_list(None, ""), "--seed-list needs distinct seeds"),  # not the default
        (lambda: planning.seed_list(None, "1,18446744073709551615"), "stored as 64-bit integers"),
    ],
)
def test_bad_plans_are_one_sentence(call, message):
    with pytest.raises(UserError, match=message.replace("+", r"\+")):
        call()


def test_the_placebo_row_sits_under_the_first_and_the_references_follow_the_plan():
    for plan in ("cumulative", "single", "leave-one-out"):
        plain = planning.make_plan(plan)
        rows = planning.add_placebo(plain)
        assert rows[1].name == f"{plain[0].name} (placebo)" and rows[1].placebo and rows[1].reference == 0
        assert rows[1].components == plain[0].components and not any(r.placebo for r in rows[2:])
        # every other row keeps the row it was compared with, now one further down (the first stays the first)
        for before, after in zip(plain[1:], rows[2:], strict=True):
            assert (after.name, after.components) == (before.name, before.components)
            assert rows[after.reference].name == plain[before.reference].name


def test_seeds_auto_and_the_statistics_flags_are_checked():
    settings = resolve(None, True, {})
    spec = planning.plan_spec(settings, planning.Request("ablate", "cumulative", seeds="auto", max_seeds=6))
    assert spec.seeds == list(range(6)) and spec.min_seeds == 3 and spec.variants[1].placebo
    assert spec.design.tested_rows == len(COMPONENTS)  # the placebo is tested alone, outside Holm's family
    assert spec.boundary() == boundary(0.05, len(COMPONENTS), 3, 6)
    assert (
        planning.plan_spec(settings, planning.Request("ablate", "cumulative", seeds="4", placebo=False)).boundary()
        is None
    )
    for kwargs, message in [
        ({"seeds": "auto", "min_seeds": 1}, "--min-seeds must be at least 2"),
        ({"seeds": "auto", "min_seeds": 5, "max_seeds": 4}, "--max-seeds .4. must be at least --min-seeds .5."),
        ({"seeds": "3", "max_seeds": 4}, "--min-seeds and --max-seeds go with --seeds auto"),
        ({"seeds": "many"}, "--seeds must be a whole number or auto"),
        ({"alpha": 1.5}, "--alpha must be between 0 and 1"),
        ({"margin": -0.1}, "--margin must be a positive number"),
    ]:
        with pytest.raises(UserError, match=message):
            planning.plan_spec(settings, planning.Request("ablate", "cumulative", **kwargs))


def test_seed_lists():
    assert planning.seed_list(None, None) == [0, 1, 2, 3, 4]  # 5 by default: 3 sees only huge effects
    assert planning.seed_list(5, None) == [0, 1, 2, 3, 4]
    assert planning.seed_list(None, "3,7,11") == [3, 7, 11]


def test_match_params_brings_every_row_within_one_percent():
    base = ModelConfig(vocab_size=65, context=64, dim=128, heads=4, layers=4)
    rows = planning.match_params(planning.make_plan("cumulative"), base)
    target = non_embedding_params(param_counts(base))
    for row in rows[1:]:
        got = non_embedding_params(param_counts(planning.variant_config(base, row)))
        assert abs(got - target) <= 0.01 * target, row
    assert (
        rows[5].mlp_hidden > planning.variant_config(base, planning.make_plan("cumulative")[5]).mlp_width
    )  # gqa's savings go to the MLP


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
    at = RUN_COLUMNS.index("val_ppl") + 1  # the further metrics (run/evaluation.py) come after val_ppl
    assert list(runs.columns) == RUN_COLUMNS[:at] + list(PROBES) + RUN_COLUMNS[at:]
    assert len(runs) == 3 * (len(COMPONENTS) + 2)
    assert list(curves.columns) == CURVE_COLUMNS and set(curves.step) == {30, 60}
    assert list(summary.columns) == SUMMARY_COLUMNS and list(summary.variant) == ["classic", "classic (placebo)"] + [
        f"+{c}" for c in COMPONENTS
    ]
    assert set(summary.verdict.dropna()) <= {"better", "worse", "inconclusive"}
    assert runs.val_tokens.nunique() == 1  # every run measured on the same validation tokens
    meta = ResultsDir(folder).read_meta()
    assert meta["status"] == "finished" and meta["spec"]["seeds"] == [0, 1, 2] and meta["packages"]["torch"]
    for variant in ["classic", "+rmsnorm", "+qk_norm"]:
        assert variant in output
    assert "95% CI" in output and "verdict" in output


def test_the_smoke_table_decides_a_row_and_its_placebo_stays_inconclusive(smoke):
    """The demonstration make smoke promises: RoPE's gain over learned positions is decided at 3 seeds,
    while the placebo (classic with another init) is not called an effect."""
    summary = pd.read_csv(smoke[0] / "summary.csv").set_index("variant")
    assert summary.loc["+rope", "verdict"] == "better" and summary.loc["+rope", "p_adj"] < 0.05
    assert summary.loc["classic (placebo)", "verdict"] == "inconclusive"
    assert (
        summary.loc["classic (placebo)", "reference"] == "classic" and summary.loc["+rmsnorm", "reference"] == "classic"
    )
    assert summary.loc["+rope", "reference"] == "+rmsnorm"  # the row above in the plan, not the placebo


def test_report_re_renders_exactly_what_ablate_wrote(smoke):
    folder, output = smoke
    assert invoke("report", folder, "--format", "csv") == (folder / "summary.csv").read_text()
    assert invoke("report", folder) == output[: output.rindex(f"results: {folder}")]


def test_report_prints_every_format(smoke):
    import json

    folder, _ = smoke
    md = invoke("report", folder, "--format", "markdown").splitlines()
    assert md[2] == "| variant | params | train | val | Δ val | spread | 95% CI | p_adj | verdict | mde | need | secs |"
    rows = ["classic", "classic (placebo)"] + [f"+{c}" for c in COMPONENTS]
    assert [line.split(" | ")[0] for line in md[4 : 4 + len(rows)]] == [f"| {r}" for r in rows]
    doc = json.loads(invoke("report", folder, "--format", "json"))
    assert [r["variant"] for r in doc["rows"]] == rows
    assert doc["rows"][0]["delta_val"] is None and doc["footnotes"][-1].startswith("verdict:")


@pytest.mark.parametrize(
    "variants, named",
    [
        ("rope;rope", "'rope' twice (rope)"),
        ("classic;classic", "'classic' twice (classic)"),
        ("rope+rmsnorm;rmsnorm+rope", "'rope+rmsnorm' and 'rmsnorm+rope', the same model (rmsnorm+rope)"),
        ("modern;rmsnorm+rope+swiglu+no_bias+gqa+qk_norm", "'modern' and 'rmsnorm+rope+swiglu+no_bias+gqa+qk_norm'"),
    ],
)
def test_a_plan_naming_one_model_twice_is_refused_before_training_naming_both_spellings(run, tmp_path, variants, named):
    # trained, the repeat added a zero row to the table's family of tests and left a folder judge refused
    err = user_error(run, "ablate", "--smoke", "--plan", "custom", "--variants", variants, "--out", tmp_path / "r")
    assert f"--variants names {named}" in err and "placebo" in err
    assert not (tmp_path / "r").exists()


def test_jobs_auto_gives_the_same_runs_as_jobs_1(tmp_path):
    flags = [*TINY_AUTO, "--variants", "classic;rope", "--seeds", 2]  # the smoke config, fewer steps
    invoke("ablate", *flags, "--jobs", "auto", "--out", tmp_path / "auto")  # a pool of single-thread processes
    invoke("ablate", *flags, "--out", tmp_path / "one")  # TINY_AUTO's --jobs 1
    pd.testing.assert_frame_equal(run_values(tmp_path / "auto"), run_values(tmp_path / "one"))
    auto, one = (pd.read_csv(tmp_path / f / "curves.csv") for f in ("auto", "one"))
    pd.testing.assert_frame_equal(auto, one)


# A third of the smoke ablation's rows and steps: nine runs, each long enough that a SIGKILL after the fifth
# lands before the last.
KILLED = ["--smoke", "--seeds", "3", "--steps", "30", "--eval-every", "30", "--plan", "custom", "--variants"]


@pytest.mark.slow
def test_a_killed_ablation_resumes_without_repeating_a_finished_run(tmp_path):
    folder = tmp_path / "killed"
    proc = cli_process("ablate", *KILLED, "classic;rope", "--out", folder)
    deadline = time.time() + 120
    while len(list((folder / "runs").glob("*.json"))) < 5 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in (folder / "runs").glob("*.json")}
    total = 3 * 3  # classic, its placebo and +rope
    assert 5 <= len(before) < total
    pd.read_csv(folder / "runs.csv")  # parseable after a SIGKILL
    command = f"modern-gpt ablate {' '.join(KILLED)} 'classic;rope' --out {folder}"
    assert ResultsDir(folder).read_meta()["command"] == command

    resumed = cli_process("ablate", "--resume", folder)
    reference = tmp_path / "uninterrupted"
    invoke("ablate", *KILLED, "classic;rope", "--out", reference)  # in this process, while the resume runs
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resuming: {len(before)} of {total} runs already finished" in err
    assert err.count("] ") == total - len(before)  # one plain line per run it trained
    for name, stamp in before.items():
        f = folder / "runs" / name
        assert (f.stat().st_mtime_ns, f.read_bytes()) == stamp, f"{name} was run again"
    expected = pd.read_csv(reference / "summary.csv").drop(columns=TIMING)
    pd.testing.assert_frame_equal(pd.read_csv(folder / "summary.csv").drop(columns=TIMING), expected)
    pd.testing.assert_frame_equal(run_values(folder), run_values(reference))


def test_resume_refuses_other_settings(smoke):
    folder, _ = smoke

    def stamps() -> dict:  # every file of every finished run: its modification time and its bytes
        return {str(f): (f.stat().st_mtime_ns, f.read_bytes()) for f in (folder / "runs").rglob("*") if f.is_file()}

    before = stamps()
    assert before
    result = runner.invoke(app, ["ablate", "--smoke", "--seeds", "3", "--steps", "10", "--resume", str(folder)])
    assert isinstance(result.exception, UserError)
    steps = resolve(None, True, {}).train.steps  # configs/smoke.toml's
    assert f"was made with other settings (settings.train.steps: {steps} -> 10)" in str(result.exception)
    assert stamps() == before  # refused before any finished run was touched
    assert (
        invoke("ablate", "--smoke", "--seeds", 3, "--resume", folder).count("classic") >= 1
    )  # the same settings: nothing to do


# a short custom ablation of the smoke config, in this process (--jobs 1: no pool of processes to start)
TINY_AUTO = ["--smoke", "--steps", 20, "--eval-every", 20, "--eval-tokens", 1024, "--plan", "custom", "--jobs", 1]


def test_seeds_auto_stops_when_every_row_is_decided_and_resume_decides_alike(tmp_path):
    """Two architectures far apart (classic against RoPE at 20 steps), with the placebo: every round of
    seeds is a look, recorded in meta.json; a resume of the finished folder changes nothing."""
    folder = tmp_path / "auto"
    invoke("ablate", *TINY_AUTO, "--variants", "classic;rope", "--seeds", "auto", "--max-seeds", 4, "--out", folder)
    meta = ResultsDir(folder).read_meta()
    seq = meta["sequential"]
    assert seq["min_seeds"] == 3 and seq["max_seeds"] == 4 and seq["stopped"]
    assert [look["seeds"] for look in seq["looks"]] == list(range(3, 3 + len(seq["looks"])))
    runs = pd.read_csv(folder / "runs.csv")
    used = seq["looks"][-1]["seeds"]
    assert sorted(set(runs.seed)) == list(range(used)) and len(runs) == 3 * used
    summary = pd.read_csv(folder / "summary.csv")
    asked = summary[summary.reference.notna() & ~summary.variant.str.endswith("(placebo)")]
    decided = (asked.verdict != "inconclusive").sum()
    last = seq["looks"][-1]
    assert decided == last["decided"] and last["rows"] == 1  # the placebo asks nothing
    assert used == 4 or last["decided"] + last["futile"] == 1  # it stopped early only with every row decided or futile
    assert seq["method"] == "obrien-fleming" and seq["levels"] == list(boundary(0.05, 1, 3, 4).levels[-1])
    before = {f.name: f.stat().st_mtime_ns for f in (folder / "runs").glob("*.json")}
    invoke("ablate", "--resume", folder)
    assert {f.name: f.stat().st_mtime_ns for f in (folder / "runs").glob("*.json")} == before
    assert ResultsDir(folder).read_meta()["sequential"]["looks"][-1] == {**seq["looks"][-1], "at": ANY}
    # report recomputes the boundary and the looks; a meta.json that says otherwise is refused, naming the key
    import json
    import shutil

    for key, edit in [
        ("sequential.levels", lambda s: s.update(levels=[0.9] * len(s["levels"]))),
        ("sequential.method", lambda s: s.update(method="pocock")),
        ("sequential.levels", lambda s: s.update(levels=s["levels"][:1])),  # another number of looks
        ("].seeds is 99, not", lambda s: s["looks"][-1].update(seeds=99)),
        ("sequential.looks[0].decided", lambda s: s["looks"][0].update(decided=s["looks"][0]["decided"] + 1)),
    ]:
        edited = shutil.copytree(folder, tmp_path / f"edited{len(list(tmp_path.iterdir()))}")
        doc = json.loads((edited / "meta.json").read_text())
        edit(doc["sequential"])
        (edited / "meta.json").write_text(json.dumps(doc))
        result = runner.invoke(app, ["report", str(edited)])
        assert isinstance(result.exception, UserError) and key in str(result.exception), result.output


def test_power_prints_the_mde_table_and_checks_the_placebo(tmp_path):
    out = invoke(
        "power", "--smoke", "--steps", 20, "--eval-every", 20, "--seeds", 4, "--jobs", 1, "--out", tmp_path / "p"
    )
    assert "Placebo check" in out and flat("paired sd between two weight inits") in flat(out)
    for n in ("3", "5", "10", "20"):
        assert any(line.split()[:1] == [n] for line in out.splitlines())
    import json

    summary = pd.read_csv(tmp_path / "p" / "summary.csv")
    assert list(summary.variant) == ["classic", "classic (placebo)"]
    doc = json.loads(invoke("report", tmp_path / "p", "--format", "json"))  # report shows what power printed
    sd = summary.sd[1]
    assert doc["paired_sd"] == pytest.approx(sd, rel=1e-12) and doc["placebo"]["verdict"] == summary.verdict[1]
    assert "Placebo check" in invoke("report", tmp_path / "p")
    folder = report.load(tmp_path / "p")
    info = report.power_info(folder.spec, folder.summary)
    assert info["mde"][1]["one_comparison"]["mde"] == pytest.approx(mde(sd, 5, 0.05))
    assert info["mde"][0]["table_row"]["mde"] == pytest.approx(mde(sd, 3, 0.05 / len(COMPONENTS)))
    assert (
        info["mde"][0]["table_row"]["mde"]
        > info["mde"][0]["one_comparison"]["mde"]
        > info["mde"][3]["one_comparison"]["mde"]
    )
    low, high = info["sd_ci"]  # the sd's 95% interval from 4 pairs, and the mde over it
    assert (low, high) == pytest.approx(
        (sd * math.sqrt(3 / scipy_stats.chi2.ppf(0.975, 3)), sd * math.sqrt(3 / scipy_stats.chi2.ppf(0.025, 3)))
    )
    assert info["mde"][2]["one_comparison"]["high"] == pytest.approx(mde(high, 10, 0.05))
    assert flat("several times noisier than two inits") in flat(out) and "--variant" in out


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A finished two-row, two-seed ablation of the smoke config (20 steps), for tests that damage a copy."""
    folder = tmp_path_factory.mktemp("tiny") / "r"
    invoke("ablate", *TINY_AUTO, "--variants", "classic;rope", "--seeds", 2, "--no-placebo", "--out", folder)
    return folder


@pytest.mark.parametrize(
    "spec_edit,message",
    [
        ({"alpha": "x"}, "spec.alpha must be a number"),
        ({"alpha": 2.0}, "spec.alpha must be between 0 and 1"),
        ({"margin": "x"}, "spec.margin must be a number or null"),
        ({"margin": -1}, "spec.margin must be a positive number"),
        ({"min_seeds": 99}, "spec.min_seeds must be between 2 and the 2 seeds"),
        ({"seeds": [0, 2**70]}, "above the largest seed"),
    ],
)
def test_damaged_statistics_settings_in_meta_json_are_one_sentence(tiny_folder, tmp_path, spec_edit, message):
    """report and --resume read alpha, margin and the looks back: a hand edit is named, never a traceback
    (and a min_seeds above the seeds used to resume forever)."""
    import json
    import shutil

    folder = shutil.copytree(tiny_folder, tmp_path / "r")
    meta = json.loads((folder / "meta.json").read_text())
    meta["spec"].update(spec_edit)
    (folder / "meta.json").write_text(json.dumps(meta))
    for args in (["report", str(folder)], ["ablate", "--resume", str(folder)]):
        result = runner.invoke(app, args)
        assert isinstance(result.exception, UserError), result.output
        assert "meta.json" in str(result.exception) and message in str(result.exception)


def test_seeds_auto_and_power_refuse_what_they_cannot_do():
    settings = resolve(None, True, {})
    with pytest.raises(UserError, match="--max-seeds must be at most 30"):
        planning.plan_spec(settings, planning.Request("ablate", "cumulative", seeds="auto", max_seeds=10_000))
    with pytest.raises(UserError, match="leave out --seed-list"):
        planning.plan_spec(settings, planning.Request("ablate", "cumulative", seeds="auto", seed_list=""))
    with pytest.raises(UserError, match="power needs at least 3 seeds"):
        planning.plan_spec(settings, planning.Request("power", seeds=2))


def test_every_run_diverged_is_a_finished_table_not_an_error(tmp_path):
    out = invoke("ablate", *TINY_AUTO, "--variants", "classic;rope", "--seeds", 2, "--lr", 1e6, "--out", tmp_path / "d")
    assert out.count("diverged") >= 3
    summary = pd.read_csv(tmp_path / "d" / "summary.csv")
    assert set(summary.verdict.dropna()) == {"inconclusive"} and (summary.diverged == 2).all()
    assert ResultsDir(tmp_path / "d").read_meta()["status"] == "finished"


# ---------------------------------------------------------------------------
# the figure's import, warmed while the last runs train
# ---------------------------------------------------------------------------
def test_the_display_calls_last_runs_once_when_fewer_runs_are_left_than_train_at_once():
    import io

    from rich.console import Console

    from modern_gpt.views.progress import AblationDisplay

    quiet = Console(file=io.StringIO())
    record = {"row": 0, "seed": 0, "error": "", "diverged": False, "secs": 1.0, "val_loss": 2.0, "train_loss": 2.0}

    def calls_at(at_once: int, total: int) -> list[int]:
        """The runs done each time last_runs is called, over an ablation of `total` runs."""
        calls = []
        display = AblationDisplay(quiet, quiet, ["a"], 10, live=False, last_runs=lambda: calls.append(display.done))
        display.at_once = at_once  # as running.Ablation sets it
        display.start(total, 0)
        for _ in range(total):
            display.finished(record)
        return calls

    assert calls_at(2, 5) == [4] and calls_at(3, 5) == [3] and calls_at(2, 2) == [1]
    assert calls_at(1, 5) == []  # one at a time: no core is ever free


def test_plot_warm_imports_pyplot_with_agg_once_in_a_background_thread(monkeypatch):
    import sys

    from modern_gpt.ablation import plot

    monkeypatch.setattr(plot, "_warming", [])
    plot.warm()
    plot.warm()
    assert len(plot._warming) == 1 and plot._warming[0].daemon
    plot._warming[0].join(60)
    assert not plot._warming[0].is_alive()
    assert sys.modules["matplotlib"].get_backend().lower() == "agg" and "matplotlib.pyplot" in sys.modules


# ---------------------------------------------------------------------------
# Item 4: a power folder's report shows what every folder's does: unfinished, diverged and left-out runs
# ---------------------------------------------------------------------------
POWER = ["power", *tiny(3), "--jobs", "1"]


def test_an_interrupted_power_folder_gives_no_mde_from_too_few_pairs(run_ok, tmp_path):
    run_ok(*POWER, "--seeds", "4", "--out", "p")
    interrupt(tmp_path / "p", keep=3)  # seed 0's pair and seed 1's first run: one pair
    out = " ".join(run_ok("report", "p").split())
    assert "classic: 2 of the 4 planned seeds trained, and 1 pair with the placebo init: too few" in out
    assert "mde:" not in out and "as it should be" not in out and "Placebo check" not in out
    assert "5 of 8 runs have not finished; finish them with: modern-gpt power --resume p" in out
    doc = json.loads(run_ok("report", "p", "--format", "json"))
    assert doc["mde"] == [] and doc["pairs"] == 1 and doc["seeds"] == 2 and doc["planned"] == 4
    assert any("modern-gpt power --resume p" in n for n in doc["footnotes"])


def test_a_power_folder_counts_the_architectures_seeds_and_names_what_is_missing(run_ok, tmp_path):
    run_ok(*POWER, "--seeds", "5", "--out", "p")
    interrupt(tmp_path / "p", keep=8)  # four whole pairs
    placebo = tmp_path / "p" / "runs" / "row01-seed3.json"  # one placebo run diverged: 4 seeds, 3 pairs
    record = json.loads(placebo.read_text())
    record.update(diverged=True, val_loss=float("nan"))
    placebo.write_text(json.dumps(record))
    (tmp_path / "p" / "runs" / "row00-seed9.json").write_text("{}")  # a file that is no run of this folder
    out = " ".join(run_ok("report", "p").split())  # the console wraps long lines
    assert "classic: val loss" in out and "over 4 of the 5 planned seeds" in out and "from 3 pairs" in out
    notes = "\n".join(json.loads(run_ok("report", "p", "--format", "json"))["footnotes"])
    for said in (
        "classic (placebo), seed 3: diverged",
        "runs/row00-seed9.json (row is missing) is left out of the table",
        "2 of 10 runs have not finished; finish them with: modern-gpt power --resume p",
    ):
        assert said in notes and said in out, said
    assert "verdict:" not in notes and "Placebo: " not in notes  # the verdict table's notes: power has its own


def test_a_power_folder_whose_runs_all_diverged_says_so(run_ok):
    out = run_ok(*POWER, "--seeds", "3", "--lr", "1e300", "--warmup-steps", "0", "--out", "p")
    report = " ".join(run_ok("report", "p").split())
    assert " ".join(out.split()).startswith(report)  # what power printed, then the results line
    assert "classic: 0 of the 3 planned seeds trained, and 0 pairs with the placebo init: too few" in report
    assert "as it should be" not in report and "mde:" not in report
    assert report.count("diverged (loss NaN or infinite) after 0 steps") == 6


def test_the_looks_advice_names_the_folders_own_command(run, run_ok, tmp_path):
    run_ok("duel", *tiny(2), "--seeds", "auto", "--max-seeds", "3", "--jobs", "1", "--out", "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    meta["sequential"]["looks"][0]["decided"] = 9
    (tmp_path / "d" / "meta.json").write_text(json.dumps(meta))
    assert "modern-gpt duel --resume d recomputes the looks" in user_error(run, "report", "d")
    run_ok("duel", "--resume", "d", "--jobs", "1")  # and it does
    run_ok("report", "d")


@pytest.mark.parametrize("resume", [False, True])
def test_jobs_with_ray_is_refused_not_ignored(run, run_ok, resume):
    if resume:
        run_ok("ablate", *tiny(1), *CLASSIC_ROPE, "--jobs", "1", "--out", "f")
    args = ["--resume", "f"] if resume else [*tiny(1), *CLASSIC_ROPE]
    err = user_error(run, "ablate", *args, "--executor", "ray", "--jobs", "2")
    assert "--jobs 2 goes with --executor local; on Ray every run is a task" in err


def test_a_folder_that_is_no_results_folder_names_every_command(run, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "give a folder written by modern-gpt ablate, duel, power or scale" in user_error(run, "report", "empty")


def test_a_variant_may_start_from_classic_as_it_may_from_modern():
    """'classic+rope' said "unknown component 'classic'" while 'modern+...' worked."""
    assert planning.parse_variant("classic+rope") == ("rope",) == planning.parse_variant("rope")
    assert planning.parse_variant("classic+rmsnorm+rope") == ("rmsnorm", "rope")
    with pytest.raises(UserError, match="unknown component 'classic'"):
        planning.parse_variant("rope+classic")  # classic is where a variant starts, not a component
