"""Wall time of `modern-gpt ablate --seeds 3 --smoke` (8 rows with the placebo x 3 seeds), start-up included.

    python bench/bench_smoke.py [--repeat 3] [--jobs auto]

Prints each repeat's wall seconds, the median, and the machine, for docs/measurements.md.
Speed is measured here, never asserted in a test.
"""

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time

from common import ablate_command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", default="auto")
    args = parser.parse_args()
    times = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as out:
            cmd = ablate_command(os.path.join(out, "r"), "--smoke", "--jobs", args.jobs)
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times.append(time.perf_counter() - t)
        print(f"run {i + 1}: {times[-1]:.1f} s", flush=True)
    import torch

    load = os.getloadavg()[0]
    print(
        f"median {statistics.median(times):.1f} s wall for 24 runs (--jobs {args.jobs}); "
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"python {platform.python_version()}; load average {load:.1f} at the end"
    )


if __name__ == "__main__":
    main()
