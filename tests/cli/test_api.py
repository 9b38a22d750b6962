"""The Python API (docs/python.md): modern_gpt.ablate, report, duel and power take the flags' options as
keywords, return the table the command line prints (as DataFrames), and raise UserError with its sentences."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest

import modern_gpt
from modern_gpt.ablation.session import Interrupted, request_of, run_ablation, settings_of
from tests.clihelp import invoke, tiny

TWO = dict(plan="custom", variants=["classic", "rope"], seeds=2, jobs=1)


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
        text = ["verdict", "components", "reference"]  # "" reads back as NaN
        assert frame.drop(columns=text).equals(
            result.summary.drop(columns=text).astype(frame.drop(columns=text).dtypes)
        )
        for column in text:
            assert list(frame[column].fillna("")) == list(result.summary[column])
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
    with pytest.raises(modern_gpt.UserError, match=r"modern_gpt.ablate\(\): steps= must be an integer, got 'ten'"):
        modern_gpt.ablate(smoke=True, steps="ten", out=tmp_path / "x")  # a TypeError traceback before
    with pytest.raises(
        modern_gpt.UserError, match="modern_gpt.ablate\\(\\): match_params= must be true or false, got 'yes'"
    ):
        modern_gpt.ablate(smoke=True, match_params="yes", out=tmp_path / "x")
    with pytest.raises(modern_gpt.UserError, match="power has no option 'plan'"):
        modern_gpt.power(smoke=True, plan="single")
    assert not (tmp_path / "x").exists()


def invoke_error(*args) -> str:
    """The command line's stderr for a user error (exit code 2)."""
    from tests.clihelp import cli

    done = cli(*args)
    assert done.returncode == 2, done
    return done.stderr


def test_settings_of_reads_keywords_as_the_flags_and_the_config_file_below_them():
    settings, options = settings_of(
        "ablate", {"steps": 7, "seeds": "auto", "match_params": True}, ("seeds", "match_params"), smoke=True
    )
    assert settings.train.steps == 7 and settings.train.batch_size == 12  # the keyword, then smoke.toml's
    stats = options.statistics
    assert stats.seeds == "auto" and stats.match_params and stats.given == ("seeds", "match_params")
    assert request_of("ablate", options).seeds == "auto"


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
    request = request_of("ablate", options, plan="custom", variants="classic;rope")
    with pytest.raises(Interrupted) as caught:
        run_ablation(settings, options, request, tmp_path / "i", display=_StopAfter(2))
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


def test_data_is_the_keyword_of_data_and_the_signature_lists_every_option(tmp_path):
    import inspect
    import typing

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400, encoding="utf-8")
    done = modern_gpt.train(out=tmp_path / "c", data=str(corpus), **_flags())  # refused before
    assert modern_gpt.train(out=tmp_path / "d", path=str(corpus), **_flags()).settings.data.path == str(
        corpus
    )  # the old one
    assert done.settings.data.path == str(corpus) and done.corpus.name == "corpus.txt"
    for command in (modern_gpt.ablate, modern_gpt.scale, modern_gpt.duel, modern_gpt.power, modern_gpt.train):
        keywords = inspect.signature(command).parameters
        assert {"data", "steps", "dim", "tokenizer"} <= set(keywords) and "path" not in keywords, command
        assert all(p.kind is p.KEYWORD_ONLY for p in keywords.values())  # no **flags: an unknown one is refused
    assert {"seeds", "jobs", "alpha", "plan", "variants"} <= set(inspect.signature(modern_gpt.ablate).parameters)
    assert "rope" in inspect.signature(modern_gpt.train).parameters  # a one-model command's switches
    hints = typing.get_type_hints(modern_gpt.Result, localns={"pd": pd})  # pandas is imported for type checkers only
    assert hints["summary"] is pd.DataFrame and hints["runs"] is pd.DataFrame
    assert (Path(modern_gpt.__file__).parent / "py.typed").is_file()


def _as_main(monkeypatch, tmp_path, code: str):
    """Run code as a plain script's __main__ would: from its own file, with __name__ '__main__'."""
    import sys
    import types

    script = tmp_path / "sweep.py"
    script.write_text(code, encoding="utf-8")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(compile(code, str(script), "exec"), vars(main))


def test_a_plain_script_without_a_main_guard_is_one_sentence_before_anything_starts(monkeypatch, tmp_path):
    # before: the workers ran the script again, and after 27 s multiprocessing's traceback and a BrokenPipeError
    call = f"modern_gpt.ablate(smoke=True, seeds=2, out={str(tmp_path / 'r')!r})"
    with pytest.raises(modern_gpt.UserError) as caught:
        _as_main(monkeypatch, tmp_path, f"import modern_gpt\n\n{call}\n")
    assert str(caught.value) == (
        f"modern_gpt.ablate() is called at the top level of {tmp_path / 'sweep.py'} (line 3), which the worker "
        "processes of jobs='auto' import again as they start; put the call under "
        '`if __name__ == "__main__":`, or give jobs=1.'
    )
    assert not (tmp_path / "r").exists()
    with pytest.raises(modern_gpt.UserError, match="scale\\(\\) is called at the top level"):
        _as_main(monkeypatch, tmp_path, "import modern_gpt\nmodern_gpt.scale(smoke=True, jobs=2)\n")
    # under the guard, or with jobs=1, the call goes on (here to its own refusal of the seeds)
    guarded = f'import modern_gpt\nif __name__ == "__main__":\n    {call[:-1]}, seed_list="x")\n'
    for code in (guarded, f"import modern_gpt\n{call[:-1]}, jobs=1, seed_list='x')\n"):
        with pytest.raises(modern_gpt.UserError, match="--seeds and --seed-list both choose the seeds"):
            _as_main(monkeypatch, tmp_path, code)


def test_lists_are_taken_where_a_list_is_natural(tmp_path):
    # each reaches the plan as its flag's text: the plan's own sentences prove it (an AttributeError before)
    cases = [
        (dict(components=["rope", "rope"]), "--components names a component twice: rope,rope."),
        (dict(lrs=[1e-3, 1e-3]), "--lrs names a learning rate twice"),
        (dict(plan="custom", variants=["rope", "rope"]), "--variants names 'rope' twice"),
        (dict(seeds=None, seed_list=[3, 3]), "--seed-list needs distinct seeds"),
    ]
    for keywords, sentence in cases:
        with pytest.raises(modern_gpt.UserError, match=sentence.replace("(", "\\(")):
            modern_gpt.ablate(smoke=True, out=tmp_path / "x", jobs=1, **keywords)
    with pytest.raises(modern_gpt.UserError, match=r"modern_gpt.ablate\(\): lrs must be a string or a list, got \{"):
        modern_gpt.ablate(smoke=True, lrs={1e-3}, jobs=1)
    assert not (tmp_path / "x").exists()


def test_a_wrong_source_for_share_judge_or_report_is_one_sentence_naming_the_api(tmp_path):
    missing = tmp_path / "missing.csv"
    cases = [
        (lambda: modern_gpt.share(12345), "share takes a results folder, a Result or LadderResult, or runs to judge"),
        (lambda: modern_gpt.share(str(missing)), f"{missing} does not exist; share takes a results folder"),
        (lambda: modern_gpt.judge(str(missing)), f"{missing} does not exist; judge takes a pandas DataFrame"),
        (lambda: modern_gpt.judge(12345), "judge takes a pandas DataFrame with one row per run, or the path"),
        (lambda: modern_gpt.report(12345), r"modern_gpt.report\(\) takes a results folder's path, not a int"),
    ]
    for call, sentence in cases:
        with pytest.raises(modern_gpt.UserError, match=sentence) as caught:
            call()
        assert len(str(caught.value).splitlines()) == 1 and "--" not in str(caught.value)


def test_judge_reads_a_file_of_runs_as_the_command_line_does(ablated, tmp_path):
    result, folder = ablated
    from_file = modern_gpt.judge(folder / "runs.csv")
    pd.testing.assert_frame_equal(from_file, modern_gpt.judge(pd.read_csv(folder / "runs.csv")))
    # one schema: each row's reference by name (a float row index before), judge's columns named as summary's
    assert list(result.summary.reference) == ["", "classic", "classic"]
    assert list(pd.read_csv(folder / "summary.csv").reference.fillna("")) == ["", "classic", "classic"]
    shared = ["variant", "val_loss", "delta_val", "ci_low", "ci_high", "p", "p_adj", "verdict", "mde", "pairs"]
    pd.testing.assert_frame_equal(from_file[shared], result.summary[shared], check_dtype=False)


def test_a_notebook_shows_the_table_and_progress_is_on_where_someone_watches(ablated, monkeypatch):
    import sys

    from modern_gpt.views.progress import display_of

    result, folder = ablated
    page = result._repr_html_()
    assert page.startswith(f"<h4>{result.title}</h4>") and "<table" in page and "delta_val" in page
    assert all(f"<td>{v}</td>" in page for v in ("classic", "rope")) and str(folder) in page
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert display_of(None) is None and display_of(True) is not None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert display_of(None) is not None and display_of(False) is None


# ---------------------------------------------------------------------------
# Every ```python block of the README and docs/ runs, so that a documented call cannot break unseen
# ---------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = "doc-test: skip"  # in a comment of a block needing a cluster, a GPU or a tracker server, or a sketch
# Each documented call trains as written, but tiny and in this process: the test checks the calls, keywords,
# attributes and columns the pages show, not their numbers (tests/views/test_golden.py holds those).
TINY = dict(dim=32, heads=2, layers=1, context=16, steps=3, warmup_steps=1, eval_every=3, batch_size=4)
TINY.update(eval_batches=1, eval_tokens=64)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """A page's ```python blocks with the line each starts on."""
    import re

    text = page.read_text(encoding="utf-8")
    return [
        (text[: m.start()].count("\n") + 2, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)
    ]


@pytest.fixture
def tiny_calls(monkeypatch):
    """modern_gpt's training calls made tiny: every keyword as the page gives it, then TINY's sizes; no figures."""
    import modern_gpt.ablation.report as report
    import modern_gpt.api as api

    given = api.settings_of

    def small(command, flags, options=(), **kw):
        extra = {**TINY, **({"jobs": 1} if "jobs" in options else {})}
        extra.update(vocab_size=300) if flags.get("tokenizer") == "bpe" else None  # a small vocabulary trains fast
        if isinstance(flags.get("seeds"), int):
            extra["seeds"] = min(flags["seeds"], 3 if command == "power" else 2)
        return given(command, {**flags, **extra}, options, **kw)

    monkeypatch.setattr(api, "settings_of", small)
    monkeypatch.setattr(report, "plot", lambda folder, *args, **kw: [])


@pytest.mark.parametrize("page", [p for p in DOC_PAGES if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_of_the_docs_runs(page, tiny_calls, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text((ROOT / "modern_gpt" / "smoke.txt").read_text()[:60_000])
    (tmp_path / "runs.csv").write_text((ROOT / "tests" / "golden" / "folders" / "ablate" / "runs.csv").read_text())
    namespace = {"__name__": "__main__"}  # a page's blocks share one namespace, as a notebook's cells do
    for line, code in python_blocks(page):
        if SKIP not in code:
            exec(compile(code, f"{page.name}:{line}", "exec"), namespace)


def test_power_info_is_a_frame_of_the_figures_power_prints():
    from modern_gpt.ablation.report import power_info

    result = modern_gpt.report(ROOT / "tests" / "golden" / "folders" / "power")
    frame, info = modern_gpt.power_info(result), power_info(result.table.spec, result.table.summary)
    assert isinstance(frame, pd.DataFrame) and list(frame.seeds) == [r["seeds"] for r in info["mde"]]
    assert list(frame.table_row_high) == [r["table_row"]["high"] for r in info["mde"]]
    assert frame.attrs["paired_sd"] == info["paired_sd"] and frame.attrs["sd_high"] == info["sd_ci"][1]
    assert frame.attrs["placebo_verdict"] == info["placebo"]["verdict"]


def test_a_ladder_shows_its_scale_table_in_a_notebook_with_every_name_escaped(tmp_path):
    summary = pd.DataFrame(
        {
            "variant": ["classic", "<b>rope</b>"],
            "k": [float("nan"), 2.4],
            "k_low": [None, 2.1],
            "verdict": ["", "better"],
        }
    )
    ladder = modern_gpt.LadderResult(tmp_path, summary, summary.iloc[:0], ["k > 1: <less> compute"], [], None)
    page = ladder._repr_html_()
    assert "<h4>compute multiplier k of 2 rows at 0 rungs</h4>" in page and "<td>better</td>" in page
    assert "&lt;b&gt;rope&lt;/b&gt;" in page and "<b>" not in page and "&lt;less&gt;" in page


def test_a_wrong_type_names_the_keyword_and_power_info_takes_a_power_result(ablated):
    with pytest.raises(modern_gpt.UserError, match=r"^modern_gpt.train\(\): data= must be a string, got 5.$"):
        modern_gpt.train(smoke=True, data=5)
    with pytest.raises(modern_gpt.UserError, match="power_info takes the Result of modern_gpt.power"):
        modern_gpt.power_info(ablated[0])  # an ablation's Result: an AttributeError or a KeyError before


@pytest.mark.slow
def test_importing_modern_gpt_loads_neither_torch_nor_the_live_display():
    """A notebook's `import modern_gpt` and `modern_gpt.ablate` are cheap: torch, pandas and rich's live display
    load when a call needs them."""
    import subprocess
    import sys

    probe = "import sys, modern_gpt; modern_gpt.ablate; print(sorted(m for m in ('torch', 'pandas', 'rich.progress') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
