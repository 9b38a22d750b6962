"""The ablation's options (config.AblationOptions: its statistics, execution and tracking parts) have one source:
their fields. The flags of ablate, duel and
power, their help, the [ablation] section of a config file and docs/settings.md's options table derive from them,
the options check their values when they are made, and the commands hand them to planning and running."""

import dataclasses
import inspect
import json
import re
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modern_gpt.ablation import planning
from modern_gpt.cli import commands as cli
from modern_gpt.core import settings
from modern_gpt.core.config import AblationOptions, ExecutionOptions, StatisticsOptions
from modern_gpt.core.errors import ConfigError, UserError

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
START, END = "<!-- ablation options table start", "<!-- ablation options table end -->"
FIELDS = [f for part in AblationOptions.parts().values() for f in dataclasses.fields(part) if f.name != "given"]


def _options(command) -> dict[str, typing.Any]:
    """The typer.Option of every flag of a command, by its parameter's name."""
    return {
        p.name: typing.get_args(p.annotation)[1]
        for p in inspect.signature(command).parameters.values()
        if typing.get_origin(p.annotation) is typing.Annotated
    }


def _declared(option) -> set[str]:
    return {flag for decl in (option.default, *option.param_decls) for flag in decl.split("/")}


def test_every_field_is_an_option_with_its_help_and_default():
    assert [s.name for s in settings.OPTIONS.values()] == [f.name for f in FIELDS]
    for f in FIELDS:
        s = settings.OPTIONS[f"ablation.{f.name}"]
        assert s.help == f.metadata["help"] and s.help and s.default == f.default, f.name


def test_the_settings_page_s_options_table_is_the_generated_one():
    text = PAGE.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1, "docs/settings.md needs the options table's two markers"
    table = text.split(START, 1)[1].split("-->", 1)[1].split(END, 1)[0].lstrip("\n")
    assert table == settings.markdown_table(("ablation",)), (
        "docs/settings.md's options table differs from the code: paste the output of python -c 'from modern_gpt.core.settings "
        'import markdown_table; print(markdown_table(("ablation",)), end="")\''
    )
    assert "[ablation]" not in settings.markdown_table()  # the run's settings table is the other one


def test_each_row_is_its_field_and_the_flags_ablate_duel_and_power_declare():
    rows = settings.markdown_table(("ablation",)).splitlines()[2:]
    assert len(rows) == len(FIELDS)
    ablate, duel, power = (_options(c) for c in (cli.ablate, cli.duel, cli.power))
    for row, f in zip(rows, FIELDS, strict=True):
        key, flags, default, what = (c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)[1:-1])
        assert key == f"`[ablation]` `{f.name}`" and what == f.metadata["help"], row
        assert (default == "unset") == (f.default is None), row
        if f.default is not None:
            assert json.loads(default.strip("`")) == f.default, row
        declared = set(re.findall(r"`([^`]+)`", flags))
        assert _declared(ablate[f"ablation_{f.name}"]) == declared == _declared(duel[f"ablation_{f.name}"]), row
        assert (f"ablation_{f.name}" in power) == (f.name in cli.POWER_OPTIONS), row
        help = ablate[f"ablation_{f.name}"].help.replace("\\[", "[")  # rich's escape of a literal [
        assert help.startswith(f.metadata["help"]) and help.count("default:") == (f.default is not None), row
    assert power["ablation_seeds"].help == cli.POWER_SEEDS_HELP  # power's own: N seeds of one variant, 8 by default


def test_jobs_help_says_its_default_once():
    result = CliRunner().invoke(cli.app, ["ablate", "--help"], env={"COLUMNS": "250"})
    jobs = [line for line in result.stdout.splitlines() if line.startswith("│ --jobs ")]
    assert result.exit_code == 0 and len(jobs) == 1 and jobs[0].count("[default: auto]") == 1, jobs


def test_the_defaults_are_written_once():
    """planning's defaults are the options' own, and no other 0.05 is written in the package."""
    stats = StatisticsOptions
    assert planning.ALPHA is stats.alpha and planning.DEFAULT_SEEDS is stats.seeds
    assert (planning.AUTO_MIN_SEEDS, planning.AUTO_MAX_SEEDS) == (stats.min_seeds, stats.max_seeds)
    package = Path(cli.__file__).parent.parent
    written = [p.name for p in package.rglob("*.py") if re.search(r"(?<![\d.])0\.05(?!\d)", p.read_text("utf-8"))]
    assert written == ["config.py"], written


def _toml(tmp_path, text: str) -> Path:
    path = tmp_path / "ablation.toml"
    path.write_text(text)
    return path


def test_a_toml_file_s_ablation_section_accepts_exactly_the_fields(tmp_path):
    lines = ["[ablation]"]
    for f in FIELDS:
        if f.default is not None:
            lines.append(f"{f.name} = {json.dumps(f.default)}")
    read = settings.read_toml(_toml(tmp_path, "\n".join(lines) + "\n"))
    assert read == {f"ablation.{f.name}": f.default for f in FIELDS if f.default is not None}
    with pytest.raises(UserError, match="unknown key 'seed' in \\[ablation\\]; did you mean 'seeds'"):
        settings.read_toml(_toml(tmp_path, "[ablation]\nseed = 3\n"))
    with pytest.raises(UserError, match="ablation.jobs must be an integer or a string, got True"):
        settings.read_toml(_toml(tmp_path, "[ablation]\njobs = true\n"))  # a bool is no number of jobs
    with pytest.raises(UserError, match="ablation.alpha must be a number, got 'low'"):
        settings.read_toml(_toml(tmp_path, '[ablation]\nalpha = "low"\n'))


def test_defaults_then_the_file_then_the_flags_and_what_was_given(tmp_path):
    file = settings.read_toml(_toml(tmp_path, '[ablation]\nseeds = "auto"\nalpha = 0.1\njobs = "3"\n'))
    flags = {"ablation.alpha": 0.2, "ablation.margin": None}
    options = settings.resolve_options(file, flags, "ablate", cli.ABLATE_OPTIONS)
    stats, execution = options.statistics, options.execution
    assert (stats.seeds, stats.alpha, execution.jobs, stats.margin, execution.max_retries) == (
        "auto",
        0.2,
        3,
        None,
        2,
    )
    assert (set(stats.given), execution.given, options.tracking) == (
        {"seeds", "alpha"},
        ("jobs",),
        AblationOptions().tracking,
    )
    assert stats.choice("alpha") == 0.2 and execution.choice("max_retries") is None  # a default is no choice
    # a key of the file that the command does not read is refused; the run's settings ignore the section
    with pytest.raises(UserError, match="power does not read the config file's \\[ablation\\] margin"):
        settings.resolve_options({"ablation.margin": 0.1}, {}, "power", cli.POWER_OPTIONS)
    assert settings.resolve_values(file, {}).given == ()


@pytest.mark.parametrize(
    "values,message",
    [
        ({"jobs": "many"}, "--jobs must be a whole number or auto, got 'many'"),
        ({"jobs": 0}, "--jobs must be at least 1, got 0"),
        ({"executor": "ray", "jobs": 2}, "--jobs 2 goes with --executor local"),
        ({"executor": "kubernetes"}, "unknown executor 'kubernetes'; choose local or ray or slurm"),
        ({"cpus_per_run": 2.0}, "--cpus-per-run goes with --executor ray"),
        ({"executor": "ray", "ray_address": " "}, "--ray-address is empty"),
        ({"executor": "ray", "gpus_per_run": float("nan")}, "--gpus-per-run must be a fraction up to 1"),
        ({"max_retries": -1}, "--max-retries must not be negative, got -1"),
    ],
)
def test_the_options_check_their_values_when_they_are_made(values, message):
    with pytest.raises(ConfigError, match=message):
        ExecutionOptions(**values)
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(ExecutionOptions(), **values)
    with pytest.raises(ConfigError, match=message):  # the flags' and the config file's way in
        AblationOptions.of(values)


def test_jobs_are_parsed_when_the_options_are_made():
    assert ExecutionOptions(jobs=" AUTO ").jobs == "auto" and ExecutionOptions(jobs="4").jobs == 4


class Started(Exception):
    """Raised in place of running.start: what the command handed it is on the exception."""


@pytest.fixture
def started(monkeypatch):
    from modern_gpt.ablation import running

    def start(spec, out, command, options):
        raise Started(spec, options)

    monkeypatch.setattr(running, "start", start)
    return lambda *args: CliRunner().invoke(cli.app, [str(a) for a in args]).exception


def test_the_commands_hand_the_options_from_the_file_and_the_flags_to_planning_and_running(started, tmp_path):
    toml = _toml(tmp_path, "[ablation]\nseeds = 3\nalpha = 0.1\nplacebo = false\njobs = 1\nmax_retries = 4\n")
    caught = started(
        "ablate", "--smoke", "-c", toml, "--plan", "custom", "--variants", "classic;rope", "--alpha", "0.2"
    )
    assert isinstance(caught, UserError) and "both choose a config file" in str(caught)  # --smoke is a file too
    caught = started("ablate", "-c", toml, "--plan", "custom", "--variants", "classic;rope", "--alpha", "0.2")
    assert isinstance(caught, Started), caught
    spec, options = caught.args
    assert spec.seeds == [0, 1, 2] and spec.alpha == 0.2 and [v.name for v in spec.variants] == ["classic", "rope"]
    assert (options.execution.jobs, options.execution.max_retries, options.statistics.alpha) == (1, 4, 0.2)
    spec, options = started("duel", "--seeds", "auto", "--max-seeds", "4", "--jobs", "2").args
    assert (spec.min_seeds, len(spec.seeds), options.execution.jobs) == (3, 4, 2)
    spec, options = started("power", "--seeds", "4").args
    assert spec.plan == "power" and spec.seeds == [0, 1, 2, 3] and spec.alpha == StatisticsOptions.alpha
    assert len(started("power").args[0].seeds) == cli.POWER_SEEDS  # power's own default, not --seeds's 5
    refused = started("power", "--seeds", "auto")
    assert isinstance(refused, UserError) and "give --seeds N, not auto" in str(refused)


def test_the_request_is_built_once_frozen_and_kept_by_the_spec(tmp_path):
    """request_of: the rows' flags and the statistics a flag or the config file gave (None: nobody chose it), as
    one frozen planning.Request; plan_spec plans from it and the Spec keeps it (meta.json does not hold it)."""
    from modern_gpt.ablation.session import request_of, settings_of

    file = _toml(tmp_path, "[ablation]\nalpha = 0.1\njobs = 1\n")
    found, options = settings_of("duel", {"seeds": 2}, cli.ABLATE_OPTIONS, config=str(file))
    request = request_of("duel", options, lrs="1e-3,1e-2")
    assert (request.command, request.plan, request.plan_name) == ("duel", None, "duel")
    assert (request.seeds, request.alpha, request.margin, request.placebo, request.lrs) == (
        2,
        0.1,
        None,
        None,
        "1e-3,1e-2",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.alpha = 0.2
    spec = planning.plan_spec(found, request)
    assert spec.request is request and spec.alpha == 0.1 and "request" not in spec.to_dict()
    assert planning.Spec.from_dict(spec.to_dict()).request is None


def test_scales_ladder_choices_are_one_frozen_part_of_its_request():
    """scale's ladder flags as typed, one frozen planning.LadderRequest in its Request, built by request_of from
    the keywords LadderRequest names (the other commands' empty): a --resume refuses those given that fix the
    rungs, named in the flags' order, and takes the table's own."""
    from modern_gpt.ablation.session import request_of, settings_of

    _, options = settings_of("scale", {}, cli.ABLATE_OPTIONS)
    given = dict(lr_rule="constant", rungs="32,64,128", trend_margin=1.1, target_compute=1e18)
    request, ladder = request_of("scale", options, plan="single", **given), planning.LadderRequest(**given)
    assert request.ladder == ladder and request.plan == "single"
    assert request_of("ablate", options).ladder == planning.LadderRequest()
    assert ladder.rung_choices == ["rungs", "lr_rule"] and planning.LadderRequest(trend_margin=1.2).rung_choices == []
    assert planning.TABLE_CHOICES == ("trend_margin", "target_compute")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ladder.rungs = "4"


def test_a_folder_s_command_is_its_plan_s(tmp_path):
    """The command that resumes a folder comes from the plans' registry (meta.json records the plan alone)."""
    assert planning.PLANS["custom"] == "ablate" and planning.PLANS["duel"] == "duel"
    assert planning.Spec.command_in({"spec": {"plan": "power"}}) == "power"
    assert planning.Spec.command_in({"spec": {"plan": 3}}) == planning.Spec.command_in([]) == "ablate"
    assert planning.resume_command("duel", tmp_path / "x y") == f"modern-gpt duel --resume '{tmp_path}/x y'"
