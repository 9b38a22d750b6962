"""judge's speed on large files: rows per second and peak memory of `modern-gpt judge FILE` on synthetic CSVs.

    python bench/bench_judge.py                       # 200,000 runs (20 variants x 10,000 seeds), 5,000 x 3
    python bench/bench_judge.py --runs 1000000 --wide 5000

Two shapes, each written to a temporary folder and judged in a fresh process (`python -m modern_gpt judge FILE
--format csv`, its start-up included): a long file (a few variants, many seeds: the cost per row) and a wide
one (many variants of 3 seeds: the cost per variant). Each is timed once (best of --repeat), and judge's reader
alone (the file to the checked runs frame, without the statistics) in another fresh process; the peak memory
is the judge process's maximum resident set. The figures go in docs/measurements.md with the machine and the date.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import machine  # noqa: E402


def write_csv(path: Path, variants: int, seeds: int) -> int:
    """variants x seeds runs of a loss near 2.3, variant-major as an ablation writes them; returns the size."""
    rng = np.random.default_rng(0)
    names = np.repeat([f"variant_{i}" for i in range(variants)], seeds)
    seed = np.tile(np.arange(seeds), variants)
    loss = 2.3 + rng.normal(0, 0.02, variants * seeds) - 0.001 * np.repeat(np.arange(variants) % 7, seeds)
    with path.open("w", encoding="utf-8") as f:
        f.write("variant,seed,val_loss\n")
        f.writelines(f"{n},{s},{x:.6f}\n" for n, s, x in zip(names, seed, loss, strict=True))
    return path.stat().st_size


def judge_once(path: Path) -> tuple[float, float]:
    """Seconds and peak resident MB of one `modern-gpt judge` in a fresh process (wait4: this child's own)."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "modern_gpt", "judge", str(path), "--format", "csv"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"judge failed on {path}: {err.decode(errors='replace').strip()}")
    return seconds, usage.ru_maxrss / 1024  # kB on Linux


READ = (
    "import sys, time; from modern_gpt.verdict.judge import JudgeSettings, read_file, runs_from; "
    "t = time.perf_counter(); runs_from(read_file(sys.argv[1]), JudgeSettings()); print(time.perf_counter() - t)"
)


def read_once(path: Path) -> float:
    """Seconds of judge's reader alone (the file to the checked runs frame, no statistics), in a fresh process."""
    done = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def measure(folder: Path, label: str, variants: int, seeds: int, repeat: int) -> None:
    path = folder / f"{label}.csv"
    size = write_csv(path, variants, seeds)
    times, peak = [], 0.0
    for _ in range(repeat):
        seconds, mb = judge_once(path)
        times.append(seconds)
        peak = max(peak, mb)
    rows, best, read = variants * seeds, min(times), min(read_once(path) for _ in range(repeat))
    print(
        f"| {label} | {variants:,} x {seeds:,} = {rows:,} | {size / 1e6:.1f} MB | {best:.1f} s | "
        f"{rows / best:,.0f} | {read:.2f} s | {rows / read:,.0f} | {peak:,.0f} MB |",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200_000, help="runs in the long file (20 variants)")
    ap.add_argument("--variants", type=int, default=20, help="variants in the long file")
    ap.add_argument("--wide", type=int, default=5000, help="variants of 3 seeds in the wide file (0: none)")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(f"{machine()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(
        "| file | variants x seeds | size | judge | rows/s | reader | reader rows/s | peak memory |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        measure(Path(tmp), "long", args.variants, args.runs // args.variants, args.repeat)
        if args.wide:
            measure(Path(tmp), "wide", args.wide, 3, args.repeat)


if __name__ == "__main__":
    main()
