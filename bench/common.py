"""What the benchmarks share: the `modern-gpt ablate` command line they time, run in this Python."""

import sys


def ablate_command(out, *flags) -> list[str]:
    """argv of `modern-gpt ablate --seeds 3 FLAGS --out OUT --format csv`, for subprocess.run."""
    return [
        sys.executable,
        "-m",
        "modern_gpt",
        "ablate",
        "--seeds",
        "3",
        *map(str, flags),
        "--out",
        str(out),
        "--format",
        "csv",
    ]
