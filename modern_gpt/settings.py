"""Settings: the dataclass defaults, then a TOML file, then command-line flags, each overriding the one before.

The three settings dataclasses (ModelConfig, TrainConfig, DataConfig, in config.py) are the
one source of truth: each field carries its default and its help (errors.setting), and
each config checks its values when it is made. This module maps TOML sections, CLI
flags and the README's settings table (markdown_table) onto their fields.
"""

from __future__ import annotations

import difflib
import json
import tomllib
import types
import typing
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path

from .components import COMPONENT_SUMMARY, COMPONENTS
from .config import DataConfig, ModelConfig, TrainConfig
from .errors import UserError

SECTIONS = {"model": ModelConfig, "train": TrainConfig, "data": DataConfig}

FLAGS = {"model.dim": ("--dim", "--n-embd"), "train.steps": ("--steps", "--iters"), "data.path": ("--data",)}
PANELS = {"model": "Model", "train": "Training", "data": "Data"}


@dataclass(frozen=True)
class Setting:
    """One field of a settings dataclass: its TOML key, its flags, its default and its help."""

    section: str
    name: str
    type: type  # int, float, bool or str
    optional: bool  # None is a valid value
    default: object
    help: str  # the field's metadata["help"] (a component's: its COMPONENT_SUMMARY line), the one place it is written

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def flags(self) -> tuple[str, ...]:
        return FLAGS.get(self.key, ("--" + self.name.replace("_", "-"),))

    @property
    def is_component(self) -> bool:
        """A component switch: a flag that only switches it on (--rope), with --modern for all of them."""
        return self.section == "model" and self.name in COMPONENTS


def _settings(section: str) -> list[Setting]:
    cls = SECTIONS[section]
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = isinstance(hint, types.UnionType) and type(None) in args
        base = next(a for a in args if a is not type(None)) if optional else hint
        text = f.metadata.get("help") or (COMPONENT_SUMMARY.get(f.name) if section == "model" else None)
        if not text:
            raise TypeError(f"{cls.__name__}.{f.name} has no help: declare it with errors.setting(default, help).")
        out.append(Setting(section, f.name, base, optional, f.default, text))
    return out


ALL = {s.key: s for section in SECTIONS for s in _settings(section)}


def cli_settings(sections: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[Setting]:
    """The settings that become flags: every field of the sections but the components (they get switches)."""
    return [s for s in ALL.values() if s.section in sections and not s.is_component and s.key not in exclude]


def markdown_table() -> str:
    """The README's table of every setting: its TOML key, its flags, its default and its help.

    tests/test_settings.py checks that README.md holds exactly this, so the two cannot drift apart."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("*", "\\*")

    def default(s: Setting) -> str:
        if s.default is None or s.default == "":
            return "unset"
        if isinstance(s.default, bool):
            return f"`{str(s.default).lower()}`"
        return f"`{json.dumps(s.default)}`" if isinstance(s.default, str) else f"`{s.default}`"

    def flags(s: Setting) -> str:
        if s.type is bool and not s.is_component:
            return f"`{s.flags[0]}`, `--no-{s.flags[0][2:]}`"
        return ", ".join(f"`{f}`" for f in s.flags)

    lines = ["| TOML key | flag | default | what |", "| --- | --- | --- | --- |"]
    for s in ALL.values():
        lines.append(f"| `[{s.section}]` `{s.name}` | {flags(s)} | {default(s)} | {cell(s.help)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# TOML files
# ---------------------------------------------------------------------------
def shipped_configs() -> Path:
    """The configs shipped inside the package (configs/ at the repository root links here)."""
    return Path(str(resources.files("modern_gpt").joinpath("configs")))


def find_config(name: str) -> Path:
    """A config path, or the name of a shipped config (smoke, mini, shakespeare)."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    if p.exists():
        what = "a folder" if p.is_dir() else "not a regular file"
        raise UserError(f"config {name} is {what}; give a path to a .toml file.")
    shipped = shipped_configs() / f"{name.removesuffix('.toml')}.toml"
    if "/" not in name and shipped.is_file():
        return shipped
    names = sorted(f.stem for f in shipped_configs().glob("*.toml"))
    raise UserError(f"config file {name} does not exist; give a path to a .toml file or one of: {', '.join(names)}.")


def _check_value(setting: Setting, value, where: str):
    if value is None and setting.optional:
        return None
    t = setting.type
    ok = isinstance(value, t) and not (t is int and isinstance(value, bool))
    if t is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
        raise UserError(f"{where}: {setting.key} must be {names[t]}, got {value!r}.")
    return value


def read_toml(path: Path) -> dict[str, object]:
    """A TOML file's settings as {"section.field": value}, every key and type checked."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read config {path}: {e}.") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path} is not valid TOML: {e}.") from None
    out: dict[str, object] = {}
    for section, table in doc.items():
        if section not in SECTIONS or not isinstance(table, dict):
            raise UserError(f"{path}: unknown section [{section}]; the sections are {', '.join(SECTIONS)}.")
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in ALL:
                known = [s.name for s in ALL.values() if s.section == section]
                close = difflib.get_close_matches(name, known, n=1)
                hint = (
                    f"; did you mean {close[0]!r}?" if close else f"; the keys of [{section}] are {', '.join(known)}."
                )
                raise UserError(f"{path}: unknown key {name!r} in [{section}]{hint}")
            out[key] = _check_value(ALL[key], value, str(path))
    if isinstance(out.get("data.path"), str) and out["data.path"]:
        out["data.path"] = str((path.parent / out["data.path"]).expanduser())  # relative to the file
    tokenizer = out.get("data.tokenizer")
    if isinstance(tokenizer, str) and ("/" in tokenizer or tokenizer.endswith(".json")):
        out["data.tokenizer"] = str((path.parent / tokenizer).expanduser())  # a tokenizer.json: relative to the file
    return out


# ---------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------
@dataclass
class Settings:
    model: ModelConfig
    train: TrainConfig
    data: DataConfig
    given: tuple[str, ...] = ()  # the keys a config file or a flag set (not saved)
    typed: tuple[str, ...] = ()  # of those, the keys a flag set

    def to_dict(self) -> dict:
        return {"model": self.model.to_dict(), "train": vars(self.train).copy(), "data": vars(self.data).copy()}


def resolve(config: str | None, smoke: bool, overrides: dict[str, object]) -> Settings:
    """Defaults, then --smoke's or --config's file, then the flags given (None means not given)."""
    values: dict[str, object] = {}
    if smoke and config:
        raise UserError("--smoke and --config both choose a config file; give one of them.")
    if smoke or config:
        path = shipped_configs() / "smoke.toml" if smoke else find_config(config)
        values.update(read_toml(path))
    values.update({k: v for k, v in overrides.items() if v is not None})
    parts = {section: {} for section in SECTIONS}
    for key, value in values.items():
        section, name = key.split(".")
        parts[section][name] = value
    model = ModelConfig(**parts["model"])  # each config checks its values as it is made (ConfigError)
    train = TrainConfig(**parts["train"])
    data = DataConfig(**parts["data"])
    if data.path:  # absolute, so that a checkpoint or a resumed ablation finds it from any folder
        data = replace(data, path=str(Path(data.path).expanduser().resolve()))
    if data.tokenizer_file is not None and data.tokenizer_file.is_file():  # a pretrained tokenizer.json: absolute too
        data = replace(data, tokenizer=str(data.tokenizer_file.resolve()))
    return Settings(model, train, data, tuple(values), tuple(k for k, v in overrides.items() if v is not None))


def saved_settings_problem(d) -> str | None:
    """What is wrong with settings read back from a file (a missing section, an unknown key, a wrong type, an
    invalid value), as a phrase; None when they are fine."""
    if not isinstance(d, dict) or any(not isinstance(d.get(section), dict) for section in SECTIONS):
        return f"the settings need the sections {', '.join(SECTIONS)}, each an object"
    try:
        for section in SECTIONS:
            for key, value in d[section].items():
                if f"{section}.{key}" not in ALL:
                    return f"unknown setting {section}.{key}"
                _check_value(ALL[f"{section}.{key}"], value, "settings")
        from_dict(d)  # the configs check their values as they are made
    except UserError as e:
        return f"invalid setting ({str(e).rstrip('.')})"
    except (TypeError, ValueError) as e:
        return f"unreadable settings ({e})"
    return None


def from_dict(d: dict) -> Settings:
    """Settings saved by Settings.to_dict (in a checkpoint or a results folder)."""
    return Settings(ModelConfig(**d["model"]), TrainConfig(**d["train"]), DataConfig(**d["data"]))
