"""--compile auto | on | off: the rule (compiling.py), one choice per ablation recorded and resumed, older folders'
true and false, and (slow) bitwise determinism with compile on."""

import json
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from modern_gpt.ablation.results import ResultsDir, settings_hash
from modern_gpt.core import settings
from modern_gpt.core.config import ModelConfig, TrainConfig, compile_choice
from modern_gpt.core.errors import ConfigError
from modern_gpt.run import compiling
from tests.clihelp import invoke, tiny

SHAKESPEARE = ModelConfig(vocab_size=65, context=64, dim=128, heads=4, layers=4)
SIX = ("rmsnorm", "rope", "swiglu", "no_bias", "gqa", "qk_norm")


@pytest.mark.parametrize(
    ("given", "choice"), [(True, "on"), (False, "off"), ("auto", "auto"), (" On ", "on"), ("OFF", "off")]
)
def test_compile_takes_auto_on_off_and_an_older_true_or_false(given, choice):
    assert TrainConfig(compile=given).compile == compile_choice(given) == choice


def test_any_other_compile_value_is_one_sentence():
    with pytest.raises(ConfigError, match="^--compile must be auto, on or off, got 'yes'.$"):
        TrainConfig(compile="yes")
    assert settings.saved_settings_problem({"model": {}, "train": {"compile": 1}, "data": {}}).startswith(
        "invalid setting"
    )


def test_an_older_toml_file_and_folder_with_true_or_false_still_load(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("[train]\ncompile = true\n")
    assert settings.resolve_values(settings.read_toml(path), {}).train.compile == "on"
    saved = settings.Settings(ModelConfig(), TrainConfig(), settings.DataConfig()).to_dict()
    saved["train"]["compile"] = False  # as meta.json and checkpoints held it
    assert settings.saved_settings_problem(saved) is None
    assert settings.from_dict(saved).train.compile == "off"


def test_on_and_off_hash_as_the_true_and_false_older_run_files_carry():
    """Otherwise every run of an older folder would be foreign to it after this change."""
    d = settings.Settings(ModelConfig(), TrainConfig(compile="off"), settings.DataConfig()).to_dict()
    for new, old in (("off", False), ("on", True)):
        d_new, d_old = ({**d, "train": {**d["train"], "compile": v}} for v in (new, old))
        assert settings_hash(d_new, "k") == settings_hash(d_old, "k")
    on, off = ({**d, "train": {**d["train"], "compile": v}} for v in ("on", "off"))
    assert settings_hash(on, "k") != settings_hash(off, "k")  # control: the choice is part of the settings


def test_compile_balance_is_the_seconds_saved_against_the_seconds_compiling():
    m = compiling.Measured(gflops=1.0, gain_classic=0.0, gain_modern=0.5, cold_s=20.0, warm_s=5.0)
    # three runs of two models: 0.1 s steps at half saved, 0.2 s at nothing saved, 0.1 s at half again
    saved, spent = compiling.compile_balance([(0.1, 0.5), (0.2, 0.0), (0.1, 0.5)], 600, 2, m)
    assert saved == pytest.approx(60.0) and spent == 2 * 20.0 + 1 * 5.0


def test_gain_rises_from_classic_s_to_all_six_s_with_the_fused_components():
    m = compiling.CPU
    classic, six = SHAKESPEARE, SHAKESPEARE.with_components(SIX)
    assert compiling.gain(classic, m) == m.gain_classic and compiling.gain(six, m) == pytest.approx(m.gain_modern)
    assert m.gain_classic < compiling.gain(SHAKESPEARE.with_components(("rmsnorm",)), m) < m.gain_modern
    assert compiling.gain(SHAKESPEARE.with_components(("no_bias", "gqa")), m) == m.gain_classic


def test_auto_compiles_a_long_ablation_of_modern_rows_and_not_a_short_or_classic_one(monkeypatch):
    # constants of the test's own, with wide margins: a new measurement in compiling.CPU does not move them
    monkeypatch.setattr(compiling, "CPU", compiling.Measured(66.0, 0.02, 0.3, cold_s=20.0, warm_s=2.0))
    six = SHAKESPEARE.with_components(SIX)
    long, short = TrainConfig(steps=2000, batch_size=16), TrainConfig(steps=100, batch_size=16)
    assert compiling.decide([six] * 3, long, "cpu", 1)[0] == "on"
    assert compiling.decide([six] * 3, short, "cpu", 1)[0] == "off"
    assert compiling.decide([SHAKESPEARE] * 3, long, "cpu", 1)[0] == "off"  # classic: little to fuse
    assert compiling.decide([SHAKESPEARE] * 3, replace(long, steps=200_000), "cpu", 1)[0] == "on"  # but it adds up
    choice, why = compiling.decide([six] * 3, long, "mps", 1)
    assert choice == "off" and "mps" in why
    for given in ("on", "off"):  # given: kept, whatever the rule would say
        assert compiling.decide([six], replace(short, compile=given), "cpu", 1) == (given, f"--compile {given}")


def test_step_flops_counts_the_head_and_attention():
    cfg = ModelConfig(vocab_size=10, context=4, dim=8, heads=2, layers=1, tie_embeddings=False)
    linears = 8 * 3 * 8 + 8 * 8 + 2 * (8 * 32)  # qkv, the output projection, the MLP: matrices, not biases
    assert compiling.step_flops(cfg, 2) == 6 * 2 * 4 * (linears + 10 * 8) + 12 * 2 * 1 * 4 * 4 * 8


def test_a_run_s_estimate_counts_every_evaluation_pass_worked_by_hand():
    """A Slurm task's time limit reads it: 100 steps; 4 curve points (steps 30, 60, 90, 100) of 16 windows on both
    splits; the final pass on val and on train (64 windows each, more than the curve's 16), ctx2x's 32 windows of
    twice the context, and one window count per --eval-data set."""
    cfg = ModelConfig(context=64, dim=64, heads=4, layers=2, vocab_size=256)
    train = TrainConfig(steps=100, batch_size=8, eval_every=30, eval_batches=2, eval_tokens=64 * 64)
    r, f = compiling.rate("cpu", 1), compiling.forward_flops
    steps = 100 * (compiling.step_flops(cfg, 8) / r + compiling.STEP_OVERHEAD_S)
    evals = (4 * 16 * 2 * f(cfg, 1, 64) + 2 * 64 * f(cfg, 1, 64) + 32 * f(cfg, 1, 128)) / r
    assert compiling.run_seconds(cfg, train, "cpu", 1) == pytest.approx(steps + evals)
    with_set = compiling.run_seconds(cfg, train, "cpu", 1, sets=1)
    assert with_set - compiling.run_seconds(cfg, train, "cpu", 1) == pytest.approx(64 * f(cfg, 1, 64) / r)
    assert compiling.run_seconds(cfg, train, "cpu", 2) < compiling.run_seconds(cfg, train, "cpu", 1)


def test_cuda_s_rate_is_the_device_s_whatever_the_cpu_threads():
    """compile auto on CUDA: the assumed GPU rate, not multiplied by the driver's CPU threads. A GPT-2 medium of
    200 steps saves more than its compile costs; at 16 times the rate (the old rule's, on 16 threads) it would not."""
    cfg = ModelConfig(context=1024, dim=1024, heads=16, layers=24, vocab_size=50257)
    train = TrainConfig(steps=200, batch_size=32, compile="auto")
    assert compiling.rate("cuda", 1) == compiling.rate("cuda", 16) == compiling.CUDA.gflops * 1e9
    assert compiling.decide([cfg], train, "cuda", 1)[0] == compiling.decide([cfg], train, "cuda", 16)[0] == "on"
    assert compiling.rate("cpu", 2) == 2 * compiling.rate("cpu", 1)


def test_bench_limit_counts_with_compiling_s_formula():
    """One count of a model's arithmetic: the bench's limit (checked against FlopCounterMode in
    tests/house/test_bench_limit.py) and --compile auto's rule use the same functions, not two formulas held equal."""
    from tests.benchload import load

    bench_limit = load("bench_limit")
    assert bench_limit.flops_forward is compiling.forward_flops
    assert bench_limit.flops_train_step is compiling.step_flops
    cfg = SHAKESPEARE.with_components(SIX)
    assert (
        compiling.step_flops(cfg, 16)
        == compiling.step_flops(cfg, 16, cfg.context)
        == 3 * compiling.forward_flops(cfg, 16, cfg.context)
    )


def test_every_process_shares_one_inductor_cache_beside_the_token_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("MODERN_GPT_CACHE", str(tmp_path / "c"))
    compiling.share_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "c" / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))  # the user's own folder wins
    compiling.share_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")


def _meta(folder):
    return json.loads((folder / "meta.json").read_text())


def test_an_ablation_records_one_choice_for_every_run_and_resume_keeps_it(tmp_path, run):
    flags = [*tiny(4), "--plan", "custom", "--variants", "classic;rope", "--seeds", 2, "--jobs", 1]
    invoke("ablate", *flags, "--out", tmp_path / "r")
    meta = _meta(tmp_path / "r")
    assert meta["compile"]["choice"] == meta["spec"]["settings"]["train"]["compile"] == "off"
    assert meta["compile"]["why"].startswith("auto: off, compiling would save about")
    runs = [json.loads(f.read_text()) for f in (tmp_path / "r" / "runs").glob("*.json")]
    assert len(runs) == 6 and {r["compile"] for r in runs} == {"off"}
    # --compile auto given again with --resume is the folder's own choice; on is another setting, refused
    invoke("ablate", "--resume", tmp_path / "r", "--compile", "auto")
    assert ResultsDir(tmp_path / "r").spec.settings.train.compile == "off"
    code, _, err = run("ablate", "--resume", tmp_path / "r", "--compile", "on")
    assert code == 2 and "(settings.train.compile: 'off' -> 'on')" in err and "Traceback" not in err, err


def test_help_explains_compile():
    text = " ".join(invoke("ablate", "--help").replace("│", " ").split())
    assert "auto | on | off: torch.compile the training step" in text


@pytest.mark.slow
def test_compile_on_is_bitwise_deterministic_and_jobs_auto_equals_jobs_1(tmp_path):
    """Compiled runs: the same seed twice gives the same values bitwise, in one process and in a pool of workers
    that share the inductor cache. Tiny, so that compiling stays short on two cores."""
    flags = [*tiny(3), "--plan", "custom", "--variants", "rmsnorm", "--seeds", 2]  # one graph: the row and its placebo
    # in this process first: it compiles cold and fills the shared cache, from which both workers then compile
    # warm (started first, the two would each compile cold, at once)
    invoke("ablate", *flags, "--compile", "on", "--jobs", "1", "--out", tmp_path / "one")
    invoke("ablate", *flags, "--compile", "on", "--jobs", "auto", "--out", tmp_path / "auto")
    invoke("ablate", *flags, "--compile", "off", "--jobs", "1", "--out", tmp_path / "eager")
    values = [
        pd.read_csv(tmp_path / f / "runs.csv").drop(columns=["secs", "tokens_per_s", "mfu", "threads"])
        for f in ("auto", "one", "eager")
    ]
    pd.testing.assert_frame_equal(values[0], values[1])
    assert _meta(tmp_path / "one")["compile"] == {"choice": "on", "why": "--compile on"}
    assert any((Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])).iterdir())  # the shared cache was written
    # control: compiled and eager runs are not bitwise alike (fused kernels round differently), yet close
    assert not values[1]["val_loss"].equals(values[2]["val_loss"])
    pd.testing.assert_series_equal(values[1]["val_loss"], values[2]["val_loss"], rtol=1e-3)
