"""modern-gpt: does each piece of the modern transformer really help on your data, at your scale?"""

__version__ = "0.1.0"

from .core.components import Component  # noqa: E402 (torch-free): what a plugin file's COMPONENTS list holds


def __getattr__(name: str):
    """modern_gpt.judge, imported when first used: the command line starts without pandas."""
    if name == "judge":
        from .verdict.judge import verdict

        return verdict
    raise AttributeError(f"module 'modern_gpt' has no attribute {name!r}")


__all__ = ["Component", "judge"]
