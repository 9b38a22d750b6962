"""modern-gpt: does each piece of the modern transformer really help on your data, at your scale?"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """modern_gpt.verdict, imported when first used: the command line starts without pandas."""
    if name == "verdict":
        from .judge import verdict

        return verdict
    raise AttributeError(f"module 'modern_gpt' has no attribute {name!r}")


__all__ = ["verdict"]
