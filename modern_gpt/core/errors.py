"""The one exception type for mistakes a user can fix. The CLI prints its message and exits with code 2.

Also `setting`, which declares a field of ModelConfig, TrainConfig or DataConfig with its help. That help is
the one source of the flag's help, the TOML key and docs/settings.md's settings table.
"""

import difflib
from dataclasses import field


class UserError(Exception):
    """A mistake in the user's input. The message is one sentence that names what is wrong and how to fix it."""


class ConfigError(UserError, ValueError):
    """A setting of ModelConfig, TrainConfig or DataConfig that cannot be used. Raised when the config is made."""


def first_line(text: str, default: str = "") -> str:
    """A message's first non-blank line without its full stop, to quote inside a sentence. default if none."""
    return next((line.strip() for line in text.splitlines() if line.strip()), default).rstrip(".")


def setting(default, help: str):
    """A settings dataclass field with its default and one-line help. See modern_gpt/core/settings.py."""
    return field(default=default, metadata={"help": help})


def did_you_mean(name: str, known, otherwise: str, shown=str) -> str:
    """A sentence's end for an unknown name: the closest known one, else otherwise. shown() words a name."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {shown(close[0])}?" if close else otherwise
