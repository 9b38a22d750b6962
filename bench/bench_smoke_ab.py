"""`make smoke` (`modern-gpt ablate --seeds 3 --smoke`) side by side: this tree against another commit's package,
run interleaved (A, B, then B, A, ...) in one process, so that both arms see the same load.

    python bench/bench_smoke_ab.py --before a2f2157 [--pairs 4]

Prints each pair's wall seconds, the medians and the machine, for docs/measurements.md.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ablate_command, machine

ROOT = Path(__file__).resolve().parent.parent


def timed(tree: Path, out: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t = time.perf_counter()
    subprocess.run(ablate_command(out, "--smoke"), check=True, capture_output=True, env=env, cwd=tree)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit whose package is the other arm")
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before, "modern_gpt"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        arms = {"before": before, "after": ROOT}
        times: dict[str, list[float]] = {"before": [], "after": []}
        for i in range(args.pairs):
            for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
                times[name].append(timed(arms[name], os.path.join(tmp, f"{name}-{i}")))
            print(f"pair {i + 1}: before {times['before'][-1]:.2f} s, after {times['after'][-1]:.2f} s", flush=True)
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    print(
        f"median before {b:.2f} s ({min(times['before']):.2f}-{max(times['before']):.2f}), after {a:.2f} s "
        f"({min(times['after']):.2f}-{max(times['after']):.2f}): {100 * (a - b) / b:+.1f}%; {machine()}, "
        f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f} at the end"
    )


if __name__ == "__main__":
    main()
