"""Settings: the dataclass defaults, then a TOML file, then command-line flags, each overriding the one before.

The settings dataclasses of config.py are the one source of truth (see there). This module maps TOML
sections, CLI flags and docs/settings.md's tables (markdown_table) onto their fields. A run's settings
(Settings: model, train, data) are saved with it. An ablation's options ([ablation]) are read by ablate,
duel and power alone.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import tomllib
import types
import typing
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path

from .components import COMPONENT_SUMMARY, COMPONENTS
from .config import BUILT_IN_CORPUS, AblationOptions, DataConfig, ModelConfig, TrainConfig, built_in
from .errors import UserError, did_you_mean

SECTIONS = {"model": ModelConfig, "train": TrainConfig, "data": DataConfig}  # a run's settings
ABLATION = "ablation"  # the section of an ablation's options
TABLES = {**SECTIONS, ABLATION: AblationOptions}  # every section a TOML file may hold

FLAGS = {"model.dim": ("--dim", "--n-embd"), "train.steps": ("--steps", "--iters"), "data.path": ("--data",)}
CLUSTER = "Ray and Slurm"  # the cluster flags' panel, which --help leaves to --help-all
# The help panel of a section's flags, or of one key's
PANELS = {
    "model": "Model",
    "train": "Training",
    "data": "Data",
    ABLATION: "Ablation",
    **{f"{ABLATION}.{n}": "Statistics" for n in ("min_seeds", "max_seeds", "alpha", "margin", "placebo")},
    **{f"{ABLATION}.{n}": "Where the runs train" for n in ("executor", "max_retries")},
    **{
        f"{ABLATION}.{n}": CLUSTER
        for n in ("ray_address", "cpus_per_run", "gpus_per_run", "partition", "time_limit", "array_parallelism")
        + ("sbatch", "runs_per_task", "detach")
    },
    **{f"{ABLATION}.{n}": "Trackers" for n in ("track", "mlflow_uri")},
}


@dataclass(frozen=True)
class Setting:
    """One field of a settings dataclass: its TOML key, its flags, its default and its help."""

    section: str
    name: str
    type: (
        type  # int, float, bool or str; int | str (--seeds, --jobs, --time-limit); tuple[str, ...] (--track, --sbatch)
    )
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
    def keyword(self) -> str:
        """The Python API's keyword: the first flag's name with '_' for '-'. data for --data, dim for --dim."""
        return self.flags[0][2:].replace("-", "_")

    @property
    def annotation(self):
        """The keyword's type, or None for not given. A repeatable flag's is a list of strings."""
        return (list[str] if self.is_list else self.type) | None

    @property
    def param(self) -> str:
        """The command's parameter that holds the flag's value."""
        return f"{self.section}_{self.name}"

    @property
    def panel(self) -> str:
        return PANELS.get(self.key, PANELS[self.section])

    @property
    def is_list(self) -> bool:
        """A repeatable flag (--track), a list in TOML."""
        return typing.get_origin(self.type) is tuple

    @property
    def is_component(self) -> bool:
        """A component switch: a flag that only switches it on (--rope). --modern switches on all of them."""
        return self.section == "model" and self.name in COMPONENTS


def _settings(section: str) -> list[Setting]:
    """A section's settings, in its fields' order. [ablation]'s are those of AblationOptions' parts in turn."""
    classes = AblationOptions.parts().values() if section == ABLATION else [TABLES[section]]
    return [s for cls in classes for s in _fields(section, cls)]


def _fields(section: str, cls: type) -> list[Setting]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        if f.metadata.get("setting") is False:  # an options part's given
            continue
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = isinstance(hint, types.UnionType) and type(None) in args
        rest = [a for a in args if a is not type(None)]
        base = (rest[0] if len(rest) == 1 else functools.reduce(operator.or_, rest)) if optional else hint
        text = f.metadata.get("help") or (COMPONENT_SUMMARY.get(f.name) if section == "model" else None)
        if not text:
            raise TypeError(f"{cls.__name__}.{f.name} has no help: declare it with errors.setting(default, help).")
        out.append(Setting(section, f.name, base, optional, f.default, text))
    return out


ALL = {s.key: s for section in SECTIONS for s in _settings(section)}  # a run's settings
OPTIONS = {s.key: s for s in _settings(ABLATION)}  # an ablation's


def cli_settings(sections: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[Setting]:
    """The settings that become flags: every field of the sections but the components, which get switches."""
    return [s for s in ALL.values() if s.section in sections and not s.is_component and s.key not in exclude]


def markdown_table(sections: tuple[str, ...] = tuple(SECTIONS)) -> str:
    """docs/settings.md's table of every setting of these sections: its TOML key, flags, default and help.
    (ABLATION,) gives the ablation's options.

    tests/core/test_settings.py and tests/core/test_options.py check that docs/settings.md holds exactly these.
    So the two cannot drift apart."""

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
    for s in (s for section in sections for s in _settings(section)):
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


def check_value(setting: Setting, value, where: str):
    """A value given outside the command line (a TOML file, a Python API keyword), as the setting's type. A
    value of another type is one sentence naming where, the key and the value."""
    if value is None and setting.optional:
        return None
    if setting.key == "data.eval_data" and isinstance(value, dict):  # [data.eval_data] code = "code.jsonl"
        value = [f"{k}={v}" if isinstance(v, str) else v for k, v in value.items()]  # (or a Python dict)
    if setting.is_list:  # a list of strings in TOML, e.g. track = ["mlflow"]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise UserError(f"{where}: {setting.key} must be a list of strings, got {value!r}.")
        return tuple(value)
    t = setting.type
    types_ = typing.get_args(t) or (t,)  # int | str: either
    ok = isinstance(value, t) and not (bool not in types_ and isinstance(value, bool))
    if t is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
        raise UserError(f"{where}: {setting.key} must be {' or '.join(names[a] for a in types_)}, got {value!r}.")
    return value


def _plugin_paths(path: Path, value) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise UserError(f"{path}: plugins must be a list of file names, got {value!r}.")
    return [str((path.parent / p).expanduser()) for p in value]


def read_toml(path: Path) -> dict[str, object]:
    """A TOML file's settings as {"section.field": value}, every key and type checked."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read config {path}: {e}.") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path} is not valid TOML: {e}.") from None
    out: dict[str, object] = {}
    keys = {**ALL, **OPTIONS}
    for section, table in doc.items():
        if section == "plugins":  # plugins = ["my_norm.py"]: plugin files (plugins.py), relative to this file
            out["plugins"] = _plugin_paths(path, table)
            continue
        if section not in TABLES or not isinstance(table, dict):
            raise UserError(f"{path}: unknown section [{section}]; the sections are {', '.join(TABLES)}.")
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in keys:
                known = [s.name for s in keys.values() if s.section == section]
                hint = did_you_mean(name, known, f"; the keys of [{section}] are {', '.join(known)}.", repr)
                raise UserError(f"{path}: unknown key {name!r} in [{section}]{hint}")
            out[key] = check_value(keys[key], value, str(path))
    given = out.get("data.path")
    if isinstance(given, str) and given and not (given == BUILT_IN_CORPUS and not (path.parent / given).exists()):
        out["data.path"] = str((path.parent / given).expanduser())  # relative to the file
    sets = out.get("data.eval_data")
    if sets:  # each PATH relative to the file, as data.path
        out["data.eval_data"] = tuple(_eval_relative(path, spec) for spec in sets)
    tokenizer = out.get("data.tokenizer")
    if isinstance(tokenizer, str) and ("/" in tokenizer or tokenizer.endswith(".json")):
        out["data.tokenizer"] = str((path.parent / tokenizer).expanduser())  # a tokenizer.json: relative to the file
    return out


def _eval_relative(path: Path, spec: str) -> str:
    name, sep, given = spec.partition("=")
    if not sep or not given or (given == BUILT_IN_CORPUS and not (path.parent / given).exists()):
        return spec  # DataConfig names what is wrong; the built-in corpus stays a name
    return f"{name}={(path.parent / given).expanduser()}"


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
        data = vars(self.data).copy()
        if not data["val_data"]:  # no pinned evaluation set: saved (and hashed) as before --val-data existed
            del data["val_data"]
        if data["eval_data"]:  # a list in JSON
            data["eval_data"] = list(data["eval_data"])
        else:  # no extra evaluation set: saved (and hashed) as before --eval-data existed
            del data["eval_data"]
        return {"model": self.model.to_dict(), "train": vars(self.train).copy(), "data": data}


def config_values(config: str | None, smoke: bool) -> dict[str, object]:
    """The values of --smoke's or --config's file, {"section.key": value}; none without either."""
    if smoke and config:
        raise UserError("--smoke and --config both choose a config file; give one of them.")
    if smoke or config:
        return read_toml(shipped_configs() / "smoke.toml" if smoke else find_config(config))
    return {}


def resolve(config: str | None, smoke: bool, overrides: dict[str, object]) -> Settings:
    """Defaults, then --smoke's or --config's file, then the flags given (None means not given)."""
    return resolve_values(config_values(config, smoke), overrides)


def resolve_values(file: dict[str, object], overrides: dict[str, object]) -> Settings:
    """A run's settings: the defaults, then a config file's values, then the flags given. The file's
    [ablation] section is left aside; a flag's None means not given."""
    values = {k: v for k, v in file.items() if k in ALL}
    values.update({k: v for k, v in overrides.items() if v is not None})
    parts = {section: {} for section in SECTIONS}
    for key, value in values.items():
        section, name = key.split(".")
        parts[section][name] = value
    model = ModelConfig(**parts["model"])  # each config checks its values as it is made (ConfigError)
    train = TrainConfig(**parts["train"])
    data = DataConfig(**parts["data"])
    if data.path and not built_in(data.path):  # absolute, so that a checkpoint or a resumed ablation finds it
        # realpath, not Path.resolve: a symbolic link loop stays a path, and corpus_files names it in one sentence
        data = replace(data, path=os.path.realpath(os.path.expanduser(data.path)))
    if data.eval_data:  # absolute too, each built-in name aside
        sets = [(n, p if built_in(p) else os.path.realpath(os.path.expanduser(p))) for n, p in data.eval_sets]
        data = replace(data, eval_data=tuple(f"{n}={p}" for n, p in sets))
    if data.tokenizer_file is not None and data.tokenizer_file.is_file():  # a pretrained tokenizer.json: absolute too
        data = replace(data, tokenizer=str(data.tokenizer_file.resolve()))
    return Settings(model, train, data, tuple(values), tuple(k for k, v in overrides.items() if v is not None))


def resolve_options(
    file: dict[str, object], overrides: dict[str, object], command: str, names: tuple[str, ...]
) -> AblationOptions:
    """An ablation's options: the defaults, then a config file's [ablation] section, then the flags given. A
    flag's None means not given. names: the options the command reads. A key of the file's that it does not
    read is refused, since it would change nothing, silently."""
    unread = [k.split(".")[1] for k in file if k in OPTIONS and k.split(".")[1] not in names]
    if unread:
        raise UserError(f"{command} does not read the config file's [{ABLATION}] {', '.join(unread)}; leave it out.")
    values = {k.split(".")[1]: v for k, v in file.items() if k in OPTIONS}
    values.update({k.split(".")[1]: v for k, v in overrides.items() if v is not None})
    return AblationOptions.of(values)


def saved_settings_problem(d) -> str | None:
    """What is wrong with settings read back from a file, as a phrase; None when they are fine. A section may be
    missing, or a key unknown, or a value of the wrong type or invalid."""
    if not isinstance(d, dict) or any(not isinstance(d.get(section), dict) for section in SECTIONS):
        return f"the settings need the sections {', '.join(SECTIONS)}, each an object"
    try:
        for section in SECTIONS:
            for key, value in d[section].items():
                if f"{section}.{key}" == "model.extra_components":  # the plugin components (config.py): no flag
                    continue
                if f"{section}.{key}" not in ALL:
                    return f"unknown setting {section}.{key}"
                check_value(ALL[f"{section}.{key}"], value, "settings")
        from_dict(d)  # the configs check their values as they are made
    except UserError as e:
        return f"invalid setting ({str(e).rstrip('.')})"
    except (TypeError, ValueError) as e:
        return f"unreadable settings ({e})"
    return None


def from_dict(d: dict) -> Settings:
    """Settings saved by Settings.to_dict, in a checkpoint or a results folder."""
    return Settings(ModelConfig(**d["model"]), TrainConfig(**d["train"]), DataConfig(**d["data"]))
