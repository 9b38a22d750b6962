"""`make smoke` (`modern-gpt ablate --seeds 3 --smoke`) side by side: this tree against another commit's package
(and any further trees), run in rounds whose order rotates, so that every arm sees the same load.

    python bench/bench_smoke_ab.py --before a2f2157 [--pairs 4] [--tree noctx=/tmp/noctx]

Prints each round's wall seconds (and CPU seconds of every process, by `perf stat`, where perf runs), then per
arm the median and each other arm's paired median change against `before`, with the machine, for
docs/measurements.md. A --tree is a folder holding a `modern_gpt` package, e.g. this tree with one pass skipped.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ablate_command, machine

ROOT = Path(__file__).resolve().parent.parent


def _perf() -> str | None:
    """perf, where it can count this process's task-clock (a container may refuse it)."""
    found = shutil.which("perf")
    ok = (
        found
        and subprocess.run([found, "stat", "-x,", "-e", "task-clock", "true"], capture_output=True).returncode == 0
    )
    return found if ok else None


PERF = _perf()


def timed(tree: Path, out: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (all processes, the workers included; NaN without perf) of one smoke."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    perf = [PERF, "stat", "-x,", "-e", "task-clock"] if PERF else []
    t = time.perf_counter()
    done = subprocess.run([*perf, *ablate_command(out, "--smoke")], capture_output=True, env=env, cwd=tree, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"the smoke in {tree} failed:\n{done.stderr[-2000:]}")
    if not PERF:
        return wall, float("nan")
    counted = [line for line in done.stderr.splitlines() if ",task-clock" in line]
    return wall, float(counted[-1].split(",")[0]) / 1000  # task-clock is in milliseconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit whose package is the other arm")
    parser.add_argument("--pairs", type=int, default=4, help="rounds, each running every arm once")
    parser.add_argument("--tree", action="append", default=[], help="NAME=FOLDER: a further arm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before, "modern_gpt"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        arms = {"before": before, "after": ROOT}
        for tree in args.tree:
            name, sep, folder = tree.partition("=")
            if not sep or name in arms or not (Path(folder) / "modern_gpt").is_dir():
                raise SystemExit(f"--tree {tree}: give NAME=FOLDER, a new name and a folder holding modern_gpt")
            arms[name] = Path(folder)
        names = list(arms)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for i in range(args.pairs):
            for name in names[i % len(names) :] + names[: i % len(names)]:  # the order rotates
                times[name].append(timed(arms[name], os.path.join(tmp, f"{name}-{i}")))
            said = ", ".join(f"{n} {times[n][-1][0]:.2f} s" for n in names)
            print(f"round {i + 1}: {said}", flush=True)

    def median(name: str, k: int) -> float:  # k: 0 the wall seconds, 1 the CPU seconds
        return statistics.median(t[k] for t in times[name])

    def paired(name: str, k: int) -> float:  # the median change against before, round by round, in %
        return statistics.median(100 * (t[k] / b[k] - 1) for t, b in zip(times[name], times["before"], strict=True))

    for name in names:
        walls = [w for w, _ in times[name]]
        line = f"{name}: median {median(name, 0):.2f} s ({min(walls):.2f}-{max(walls):.2f})"
        line += f", CPU {median(name, 1):.2f} s" if PERF else ""
        if name != "before":
            line += f"; paired against before: median {paired(name, 0):+.1f}%"
            line += f", ratio of medians {100 * (median(name, 0) / median('before', 0) - 1):+.1f}%"
            line += f", CPU paired median {paired(name, 1):+.1f}%" if PERF else ""
        print(line)
    print(f"{machine()}, python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
