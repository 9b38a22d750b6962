"""Settings: the dataclass defaults, then a TOML file, then command-line flags, each overriding the one before.

The three settings dataclasses (ModelConfig, TrainConfig, DataConfig) are the one
source of truth; this module maps TOML sections and CLI flags onto their fields.
"""

from __future__ import annotations

import difflib
import tomllib
import types
import typing
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from .data import DataConfig
from .errors import UserError
from .model import COMPONENTS, ModelConfig
from .train import TrainConfig

SECTIONS = {"model": ModelConfig, "train": TrainConfig, "data": DataConfig}

# Help for every field a flag can set, keyed by "section.field".
HELP = {
    "model.vocab_size": "vocabulary size (set by the tokenizer when training)",
    "model.context": "tokens per window: the context length the model trains on",
    "model.dim": "width of the residual stream (GPT-2's n_embd)",
    "model.heads": "query heads per attention layer",
    "model.kv_heads": "key/value heads when --gqa is on (unset: heads // 2)",
    "model.layers": "transformer blocks",
    "model.dropout": "dropout probability on embeddings, attention and residual outputs",
    "model.rope_base": "RoPE's base frequency (theta)",
    "model.multiple_of": "SwiGLU's hidden width is rounded up to a multiple of this",
    "model.mlp_hidden": "explicit MLP hidden width, overriding 4*dim and the SwiGLU rule",
    "model.tie_embeddings": "share the token embedding with the output layer",
    "train.steps": "optimizer steps per run",
    "train.batch_size": "windows per step",
    "train.lr": "peak learning rate",
    "train.min_lr_ratio": "the cosine schedule ends at this fraction of the peak",
    "train.warmup_steps": "linear warmup steps",
    "train.weight_decay": "AdamW weight decay, on matrices only",
    "train.beta1": "AdamW beta1",
    "train.beta2": "AdamW beta2",
    "train.grad_clip": "clip the gradient norm at this value (0: no clipping)",
    "train.eval_every": "evaluate every N steps (and at the end)",
    "train.eval_batches": "intermediate evaluations use this many batches of the fixed windows",
    "train.eval_tokens": "the final loss is measured on the whole split, or on this many tokens of fixed, evenly spaced windows",
    "train.device": "auto | cpu | cuda | mps (auto: cuda, then mps, then cpu)",
    "train.compile": "torch.compile the model",
    "train.threads": "torch threads per run (0: the cores, divided among --jobs)",
    "data.path": "a .txt, .jsonl or .parquet file, or a folder of them read in sorted order (unset: the built-in smoke corpus)",
    "data.tokenizer": "char | byte | bpe (trained locally on the training split) | PATH/tokenizer.json (a pretrained Hugging Face tokenizer file)",
    "data.text_field": "the field of each .jsonl object, and the .parquet column, that holds the text",
    "data.vocab_size": "vocabulary size the bpe tokenizer learns",
    "data.val_fraction": "the last fraction of the text held out for validation",
    "data.cache_dir": "token cache folder (unset: ~/.cache/modern-gpt, or $MODERN_GPT_CACHE)",
}
FLAGS = {"model.dim": ("--dim", "--n-embd"), "train.steps": ("--steps", "--iters"), "data.path": ("--data",)}
PANELS = {"model": "Model", "train": "Training", "data": "Data"}


@dataclass(frozen=True)
class Setting:
    section: str
    name: str
    type: type  # int, float, bool or str
    optional: bool  # None is a valid value

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def flags(self) -> tuple[str, ...]:
        return FLAGS.get(self.key, ("--" + self.name.replace("_", "-"),))


def _settings(section: str) -> list[Setting]:
    cls = SECTIONS[section]
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = isinstance(hint, types.UnionType) and type(None) in args
        base = next(a for a in args if a is not type(None)) if optional else hint
        out.append(Setting(section, f.name, base, optional))
    return out


ALL = {s.key: s for section in SECTIONS for s in _settings(section)}


def cli_settings(sections: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[Setting]:
    """The settings that become flags: every field of the sections but the components (they get switches)."""
    return [s for s in ALL.values() if s.section in sections and s.name not in COMPONENTS and s.key not in exclude]


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
    config_file: str = ""
    given: tuple[str, ...] = ()  # the keys a config file or a flag set (not saved)

    def to_dict(self) -> dict:
        return {"model": self.model.to_dict(), "train": vars(self.train).copy(), "data": vars(self.data).copy()}


def resolve(config: str | None, smoke: bool, overrides: dict[str, object]) -> Settings:
    """Defaults, then --smoke's or --config's file, then the flags given (None means not given)."""
    values: dict[str, object] = {}
    config_file = ""
    if smoke and config:
        raise UserError("--smoke and --config both choose a config file; give one of them.")
    if smoke or config:
        path = shipped_configs() / "smoke.toml" if smoke else find_config(config)
        values.update(read_toml(path))
        config_file = str(path)
    values.update({k: v for k, v in overrides.items() if v is not None})
    parts = {section: {} for section in SECTIONS}
    for key, value in values.items():
        section, name = key.split(".")
        parts[section][name] = value
    model = ModelConfig(**parts["model"])
    train = TrainConfig(**parts["train"])
    data = DataConfig(**parts["data"])
    if data.path:  # absolute, so that a checkpoint or a resumed ablation finds it from any folder
        data.path = str(Path(data.path).expanduser().resolve())
    if data.tokenizer_file is not None and data.tokenizer_file.is_file():  # a pretrained tokenizer.json: absolute too
        data.tokenizer = str(data.tokenizer_file.resolve())
    train.validate()
    data.validate()
    return Settings(model, train, data, config_file, tuple(values))


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
        settings = from_dict(d)
        settings.train.validate()
        settings.data.validate()
    except UserError as e:
        return f"invalid setting ({str(e).rstrip('.')})"
    except (TypeError, ValueError) as e:
        return f"unreadable settings ({e})"
    return None


def from_dict(d: dict) -> Settings:
    """Settings saved by Settings.to_dict (in a checkpoint or a results folder)."""
    return Settings(ModelConfig(**d["model"]), TrainConfig(**d["train"]), DataConfig(**d["data"]))
