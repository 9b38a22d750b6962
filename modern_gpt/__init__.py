"""modern-gpt: does each piece of the modern transformer really help on your data, at your scale?

The Python API (docs/python.md): modern_gpt.ablate, duel, power and report return a Result, scale a LadderResult (the summary and runs
as DataFrames, the folder, the footnotes); modern_gpt.judge(df) gives the verdict table of anyone's runs. Each
takes the same options as its command's flags and raises UserError with the sentence the command prints.
"""

__version__ = "0.3.0"

from .core.components import Component  # noqa: E402 (torch-free): what a plugin file's COMPONENTS list holds
from .core.errors import UserError  # noqa: E402

# What the package's face hands on, imported when first used: `modern-gpt --help` starts without pandas or torch.
_LAZY = {
    "ablate": ("api", "ablate"),
    "duel": ("api", "duel"),
    "power": ("api", "power"),
    "power_info": ("api", "power_info"),
    "scale": ("api", "scale"),
    "LadderResult": ("api", "LadderResult"),
    "report": ("api", "report"),
    "train": ("api", "train"),
    "Trained": ("api", "Trained"),
    "Result": ("api", "Result"),
    "Interrupted": ("api", "Interrupted"),
    "Detached": ("api", "Detached"),
    "judge": ("verdict.judge", "verdict"),
    "share": ("views.page", "share"),
}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        return getattr(import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'modern_gpt' has no attribute {name!r}")


__all__ = ["Component", "UserError", *_LAZY]
