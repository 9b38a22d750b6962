"""What the benchmarks share: the `modern-gpt ablate` command line they time, run in this Python, and the name of
the machine they print."""

import os
import platform
import sys
from pathlib import Path


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


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """The CPU and its cores, as the benchmarks' tables print them."""
    return f"{cpu_model()}, {os.cpu_count()} cores"
