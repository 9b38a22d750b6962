"""Wall time of `modern-gpt ablate --seeds 3 --smoke` on each executor, start-up included, and Ray's own costs.

    python bench/bench_executors.py [--repeat 1]

(a) The smoke ablation (8 rows with the placebo x 3 seeds = 24 runs) as a fresh process, with --jobs 1,
    --jobs auto, and --executor ray (a local Ray started for the ablation, on 127.0.0.1, and shut down at
    the end): the whole command's wall time, start-up included.
(b) Ray alone, in a fresh process: starting a local Ray (ray.init) and shutting it down; the first task
    (a worker process starts); then the per-task overhead of a no-op task, one round trip at a time and
    200 submitted at once.

The runs.csv values of the three executors are checked to be equal (bitwise; the smoke config pins one
thread per run). Prints the machine and the load average with the figures, for docs/measurements.md. Speed is
measured here, never asserted in a test.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from common import ablate_command

RAY_COSTS = r"""
import json, logging, time
t = time.perf_counter()
import ray
imported = time.perf_counter() - t
t = time.perf_counter()
ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
started = time.perf_counter() - t

@ray.remote(num_cpus=1)
def noop(x=None):
    return x

t = time.perf_counter()
ray.get(noop.remote())
first = time.perf_counter() - t
for _ in range(20):  # warm
    ray.get(noop.remote())
n = 100
t = time.perf_counter()
for _ in range(n):
    ray.get(noop.remote())
round_trip = (time.perf_counter() - t) / n
m = 200
t = time.perf_counter()
ray.get([noop.remote() for _ in range(m)])
batched = (time.perf_counter() - t) / m
t = time.perf_counter()
ray.shutdown()
stopped = time.perf_counter() - t
print(json.dumps({"import_s": imported, "init_s": started, "first_task_s": first, "round_trip_ms": 1e3 * round_trip,
                  "batched_ms": 1e3 * batched, "shutdown_s": stopped, "version": ray.__version__}))
"""

COLUMNS = ["row", "variant", "seed", "train_loss", "val_loss", "best_val_loss", "steps_done"]


def ablation(flags: list[str]) -> tuple[float, list]:
    with tempfile.TemporaryDirectory() as out:
        cmd = ablate_command(os.path.join(out, "r"), "--smoke", *flags)
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall = time.perf_counter() - t
        import pandas as pd

        runs = pd.read_csv(os.path.join(out, "r", "runs.csv")).sort_values(["row", "seed"])
        return wall, runs[COLUMNS].values.tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    os.environ.update(env)
    loads = [os.getloadavg()[0]]
    setups = {"--jobs 1": ["--jobs", "1"], "--jobs auto": ["--jobs", "auto"], "--executor ray": ["--executor", "ray"]}
    walls, values = {}, {}
    for name, flags in setups.items():
        walls[name] = []
        for _ in range(args.repeat):
            wall, values[name] = ablation(flags)
            walls[name].append(wall)
            print(f"{name}: {wall:.1f} s", flush=True)
    same = all(v == values["--jobs 1"] for v in values.values())
    costs = []
    for _ in range(args.repeat):
        done = subprocess.run([sys.executable, "-c", RAY_COSTS], check=True, capture_output=True, text=True, env=env)
        costs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    loads.append(os.getloadavg()[0])
    import torch

    print()
    print(f"(a) modern-gpt ablate --seeds 3 --smoke, 24 runs, median wall over {args.repeat} (start-up included):")
    for name in setups:
        print(f"    {name:15s} {statistics.median(walls[name]):6.1f} s")
    print(f"    runs.csv values equal across the three: {same}")
    c = {k: statistics.median(x[k] for x in costs) for k in costs[0] if k != "version"}
    print(
        f"(b) Ray {costs[0]['version']}: import {c['import_s']:.1f} s, local start (ray.init) {c['init_s']:.1f} s, "
        f"first task (a worker starts) {c['first_task_s']:.2f} s, shutdown {c['shutdown_s']:.1f} s;"
    )
    print(
        f"    per no-op task: {c['round_trip_ms']:.1f} ms one round trip at a time, {c['batched_ms']:.2f} ms each "
        f"when 200 are submitted at once"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"python {platform.python_version()}; load average {loads[0]:.1f} before, {loads[1]:.1f} after"
    )


if __name__ == "__main__":
    main()
