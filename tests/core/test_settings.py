"""The settings have one source: the dataclass fields. Flags, TOML keys and docs/settings.md's table derive from them,
and every config checks its values when it is made."""

import dataclasses
import inspect
import json
import re
import typing
from pathlib import Path

import pytest

from modern_gpt.cli import commands as cli
from modern_gpt.core import settings
from modern_gpt.core.components import COMPONENT_SUMMARY, COMPONENTS
from modern_gpt.core.config import DataConfig, ModelConfig, TrainConfig
from modern_gpt.core.errors import ConfigError, UserError

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
START, END = "<!-- settings table start", "<!-- settings table end -->"


def test_every_field_of_the_three_configs_is_a_setting_with_its_help():
    fields = {f"{s}.{f.name}": f for s, cls in settings.SECTIONS.items() for f in dataclasses.fields(cls)}
    # every field but the plugin components on (--plugin switches them; declared with setting=False)
    assert set(settings.ALL) == {k for k, f in fields.items() if f.metadata.get("setting") is not False}
    assert [k for k in fields if k not in settings.ALL] == ["model.extra_components"]
    for key, s in settings.ALL.items():
        own = fields[key].metadata.get("help")  # a component's help is its COMPONENT_SUMMARY line
        assert s.help == (COMPONENT_SUMMARY[s.name] if s.is_component else own) and s.help, key
        assert s.default == fields[key].default, key


def test_the_settings_page_s_table_is_the_generated_one():
    text = PAGE.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1, "docs/settings.md needs the settings table's two markers"
    table = text.split(START, 1)[1].split("-->", 1)[1].split(END, 1)[0].lstrip("\n")
    assert table == settings.markdown_table(), (
        "docs/settings.md's settings table differs from the code: paste the output of "
        "python -c 'from modern_gpt.core.settings import markdown_table; print(markdown_table(), end=\"\")'"
    )


def _cells(row: str) -> list[str]:
    """A markdown table row's cells, with the table's escapes undone."""
    return [c.strip().replace("\\|", "|").replace("\\*", "*") for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def _declared_flags(option) -> set[str]:
    """Every flag a typer.Option declares: --dim and --n-embd, --compile and --no-compile."""
    return {flag for decl in (option.default, *option.param_decls) for flag in decl.split("/")}


def test_the_table_has_one_row_per_setting():
    """Each row read back, in field order, against the dataclass field and the flags the commands declare."""
    rows = settings.markdown_table().splitlines()[2:]
    fields = [(section, f) for section, cls in settings.SECTIONS.items() for f in dataclasses.fields(cls)]
    fields = [(section, f) for section, f in fields if f.metadata.get("setting") is not False]  # extra_components
    assert len(rows) == len(fields)
    options = _flag_options(cli.train) | {"model_vocab_size": _flag_options(cli.params)["model_vocab_size"]}
    for row, (section, f) in zip(rows, fields, strict=True):
        key, flags, default, what = _cells(row)
        assert key == f"`[{section}]` `{f.name}`", row
        assert (default == "unset") == (f.default in (None, "")), row
        if default != "unset":
            read_back = json.loads(default.strip("`"))  # true, "char", 128, 0.001
            assert read_back == f.default and type(read_back) is type(f.default), row
        assert what == (f.metadata.get("help") or COMPONENT_SUMMARY[f.name]), row
        option = options[f.name if f.name in COMPONENTS else f"{section}_{f.name}"]
        assert set(re.findall(r"`([^`]+)`", flags)) == _declared_flags(option), row


def _flag_options(command) -> dict[str, typing.Any]:
    """The typer.Option of every parameter of a command that with_settings made."""
    return {
        p.name: typing.get_args(p.annotation)[1]
        for p in inspect.signature(command).parameters.values()
        if typing.get_origin(p.annotation) is typing.Annotated
    }


def test_every_flag_s_help_is_its_field_s_help():
    options = _flag_options(cli.train)
    for s in settings.cli_settings(tuple(settings.SECTIONS), exclude=("model.vocab_size",)):
        option = options[f"{s.section}_{s.name}"]
        assert option.help.startswith(s.help), s.key
        declared = (option.default, *option.param_decls)  # typer keeps the first declaration as the default
        assert declared[0].split("/")[0] == s.flags[0], s.key
    for c in COMPONENTS:  # the component switches: the same help as the field
        assert options[c].help == settings.ALL[f"model.{c}"].help


def test_a_toml_file_accepts_exactly_the_fields(tmp_path):
    lines = []
    for section in settings.SECTIONS:
        lines.append(f"[{section}]")
        for s in settings.ALL.values():
            if s.section == section and s.default is not None:
                value = str(s.default).lower() if isinstance(s.default, bool) else repr(s.default)
                lines.append(f"{s.name} = {value}".replace("'", '"'))
    path = tmp_path / "all.toml"
    path.write_text("\n".join(lines) + "\n")
    read = settings.read_toml(path)
    assert set(read) == {k for k, s in settings.ALL.items() if s.default is not None}
    path.write_text("[train]\nstep = 3\n")
    with pytest.raises(UserError, match="unknown key 'step' in \\[train\\]; did you mean 'steps'"):
        settings.read_toml(path)


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: ModelConfig(layers=0), "layers must be at least 1, got 0"),
        (lambda: ModelConfig(dim=30, heads=4), "dim 30 is not divisible by 4 heads"),
        (lambda: TrainConfig(steps=0), "steps must be at least 1, got 0"),
        (lambda: TrainConfig(lr=0.0), "lr must be a positive number, got 0.0"),
        (lambda: TrainConfig(device="tpu"), "unknown device 'tpu'"),
        (lambda: DataConfig(val_fraction=1.5), "val_fraction must be between 0 and 1, got 1.5"),
        (lambda: DataConfig(tokenizer="wordpiece"), "unknown tokenizer 'wordpiece'"),
        (lambda: DataConfig(text_field=""), "text_field must not be empty"),
    ],
)
def test_every_config_checks_its_values_when_it_is_made(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


@pytest.mark.parametrize(
    "config,change,message",
    [
        (ModelConfig(), {"heads": 3}, "dim 128 is not divisible by 3 heads"),
        (TrainConfig(), {"batch_size": -1}, "batch_size must be at least 1, got -1"),
        (DataConfig(), {"tokenizer": "bpe", "vocab_size": 10}, "a bpe vocab_size must be between 257"),
    ],
)
def test_replace_checks_too(config, change, message):
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(config, **change)


@pytest.mark.parametrize(
    "make",
    [lambda: ModelConfig(layers=0), lambda: TrainConfig(steps=0), lambda: DataConfig(val_fraction=2.0)],
    ids=["model", "train", "data"],
)
def test_one_error_type_for_the_three_configs(make):
    with pytest.raises(ValueError) as caught:  # what code that predates ConfigError catches
        make()
    assert type(caught.value) is ConfigError  # the same type from each config, not a subclass of its own
    assert isinstance(caught.value, UserError)  # which main() prints as one sentence


def test_resolved_settings_keep_what_was_given(tmp_path):
    (tmp_path / "corpus.txt").write_text("hello\n")
    resolved = settings.resolve(None, True, {"train.steps": 3, "data.path": str(tmp_path / "corpus.txt")})
    assert resolved.train.steps == 3 and Path(resolved.data.path).is_absolute()
    assert "train.steps" in resolved.given and "model.dim" in resolved.given  # smoke.toml sets dim
    assert set(resolved.typed) == {"train.steps", "data.path"}  # the flags alone, not smoke.toml's keys
    assert [f.name for f in dataclasses.fields(resolved)] == ["model", "train", "data", "given", "typed"]
