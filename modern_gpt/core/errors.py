"""The one exception type for mistakes a user can fix: the CLI prints its message and exits with code 2.

Also `setting`, how the settings dataclasses (ModelConfig, TrainConfig, DataConfig) declare a field with its
help: that help is the one source of the flag's help, the TOML key and docs/settings.md's settings table.
"""

import difflib
from dataclasses import field


class UserError(Exception):
    """A mistake in the user's input. The message is one sentence that names what is wrong and how to fix it."""


class ConfigError(UserError, ValueError):
    """A setting of ModelConfig, TrainConfig or DataConfig that cannot be used, raised when the config is made."""


def first_line(text: str, default: str = "") -> str:
    """A message's first non-blank line without its full stop, to quote inside one sentence (default: none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), default).rstrip(".")


def setting(default, help: str):
    """A settings dataclass field with its default and its one-line help (see modern_gpt/core/settings.py)."""
    return field(default=default, metadata={"help": help})


def did_you_mean(name: str, known, otherwise: str, shown=str) -> str:
    """A sentence's end for an unknown name: the closest known one (shown as shown() gives it), else otherwise."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {shown(close[0])}?" if close else otherwise
