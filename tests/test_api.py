"""The Python API (docs/python.md): modern_gpt.ablate, report, duel and power take the flags' options as
keywords, return the table the command line prints (as DataFrames), and raise UserError with its sentences."""

import io
import json

import pandas as pd
import pytest

import modern_gpt
from modern_gpt.api import Interrupted, plan_choices, run_ablation, settings_of

from .clihelp import invoke, tiny

TWO = dict(plan="custom", variants="classic;rope", seeds=2, jobs=1)


def _flags(**kw) -> dict:
    """tiny()'s flags as keywords: smoke, and the model and steps of a tiny run."""
    args = tiny(6, dim=16)
    out = {"smoke": True}
    for flag, value in zip(args[1::2], args[2::2], strict=True):
        out[flag.removeprefix("--").replace("-", "_")] = int(value)
    return out | kw


@pytest.fixture(scope="module")
def ablated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api") / "a"
    return modern_gpt.ablate(out=folder, **_flags(**TWO)), folder


def test_ablate_returns_the_table_the_folder_and_the_command_line_hold(ablated):
    result, folder = ablated
    assert result.folder == folder and repr(result) == f"Result({str(folder)!r}: 3 rows, 6 runs)"
    on_disk = pd.read_csv(folder / "summary.csv")
    printed = pd.read_csv(io.StringIO(invoke("report", folder, "--format", "csv")))
    for frame in (on_disk, printed):
        assert list(frame.columns) == list(result.summary.columns)
        assert frame.drop(columns=["verdict", "components"]).equals(
            result.summary.drop(columns=["verdict", "components"]).astype(
                frame.drop(columns=["verdict", "components"]).dtypes
            )
        )
        assert list(frame.verdict.fillna("")) == list(result.summary.verdict)
    doc = json.loads(invoke("report", folder, "--format", "json"))
    assert result.footnotes == doc["footnotes"] and result.title == doc["title"]
    assert len(result.runs) == 6 and set(result.runs.variant) == {"classic", "classic (placebo)", "rope"}
    keys = list(zip(result.runs.row, result.runs.seed, strict=True))
    assert keys == sorted(keys)


def test_report_gives_the_same_result_from_the_folder_alone(ablated):
    result, folder = ablated
    again = modern_gpt.report(folder)
    pd.testing.assert_frame_equal(again.summary, result.summary)
    pd.testing.assert_frame_equal(again.runs, result.runs)
    assert again.footnotes == result.footnotes


def test_a_keyword_that_is_no_flag_and_a_bad_value_are_the_command_lines_sentences(tmp_path):
    with pytest.raises(modern_gpt.UserError, match="ablate has no option 'seedz'; did you mean seeds?"):
        modern_gpt.ablate(smoke=True, seedz=3, out=tmp_path / "x")
    with pytest.raises(modern_gpt.UserError, match="--seeds must be a whole number or auto, got 'x'.") as caught:
        modern_gpt.ablate(smoke=True, seeds="x", out=tmp_path / "x")
    code = invoke_error("ablate", "--smoke", "--seeds", "x", "--out", tmp_path / "y")
    assert code == f"modern-gpt: error: {caught.value}\n"
    with pytest.raises(modern_gpt.UserError, match=r"modern_gpt.ablate\(\): train.steps must be an integer, got 'ten'"):
        modern_gpt.ablate(smoke=True, steps="ten", out=tmp_path / "x")  # a TypeError traceback before
    with pytest.raises(modern_gpt.UserError, match="ablation.match_params must be true or false, got 'yes'"):
        modern_gpt.ablate(smoke=True, match_params="yes", out=tmp_path / "x")
    with pytest.raises(modern_gpt.UserError, match="power has no option 'plan'"):
        modern_gpt.power(smoke=True, plan="single")
    assert not (tmp_path / "x").exists()


def invoke_error(*args) -> str:
    """The command line's stderr for a user error (exit code 2)."""
    from .clihelp import cli

    done = cli(*args)
    assert done.returncode == 2, done
    return done.stderr


def test_settings_of_reads_keywords_as_the_flags_and_the_config_file_below_them():
    settings, options = settings_of(
        "ablate", {"steps": 7, "seeds": "auto", "match_params": True}, ("seeds", "match_params"), smoke=True
    )
    assert settings.train.steps == 7 and settings.train.batch_size == 12  # the keyword, then smoke.toml's
    assert options.seeds == "auto" and options.match_params and options.given == ("seeds", "match_params")
    assert plan_choices(options)["seeds"] == "auto"


class _StopAfter:
    """A display that presses Ctrl-C once `n` runs have finished."""

    def __init__(self, n: int):
        self.n, self.done = n, 0

    def __call__(self, ablation):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def finished(self, record) -> None:
        self.done += 1
        if self.done == self.n:
            raise KeyboardInterrupt

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def test_ctrl_c_keeps_every_finished_run_and_raises_interrupted_with_the_resume_command(tmp_path):
    flags = _flags(seeds=2, jobs=1)
    settings, options = settings_of("ablate", flags, ("seeds", "jobs"), smoke=flags.pop("smoke"))
    choices = plan_choices(options, plan="custom", variants="classic;rope")
    with pytest.raises(Interrupted) as caught:
        run_ablation("cumulative", settings, options, choices, tmp_path / "i", display=_StopAfter(2))
    e = caught.value
    assert (e.finished, e.total, e.folder) == (2, 6, tmp_path / "i")
    assert e.resume == f"modern-gpt ablate --resume {tmp_path / 'i'}"
    assert len(pd.read_csv(tmp_path / "i" / "summary.csv")) == 3  # the summary of what finished
    assert json.loads((tmp_path / "i" / "meta.json").read_text())["status"] == "interrupted"
    finished = modern_gpt.ablate(resume=tmp_path / "i")
    assert len(finished.runs) == 6 and isinstance(e, KeyboardInterrupt)


def test_train_writes_the_checkpoint_the_command_line_writes(tmp_path):
    done = modern_gpt.train(out=tmp_path / "c", rope=True, **_flags())
    assert done.folder == tmp_path / "c" and not done.failed and done.settings.model.components == ("rope",)
    assert (tmp_path / "c" / "model.safetensors").is_file() and done.result.steps_done == 6
    metrics = json.loads((tmp_path / "c" / "metrics.json").read_text())
    assert metrics["val_loss"] == done.result.val_loss and done.corpus.name == "smoke"
    with pytest.raises(modern_gpt.UserError, match="already"):
        modern_gpt.train(out=tmp_path / "c", **_flags())  # an existing checkpoint is kept without force
