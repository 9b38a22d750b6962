"""When the first run of an ablation starts with --jobs 1 and with --jobs 2, on a large corpus (cache warm).

    python bench/bench_data_jobs.py [--mb 300] [--text PATH] [--smoke]

A 2-row, 2-seed tiny ablation of 2 steps a run; the first run's timing.started less the launch time. --smoke:
the built-in corpus instead, to tell the worker pool's own start from the corpus's cost.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
TINY = ["--smoke", "--steps", "2", "--eval-every", "2", "--plan", "custom", "--variants", "classic;rope"]
SHAPE = ["--seeds", "2", "--context", "16", "--dim", "16", "--heads", "2", "--layers", "1"]


def first_start(folder: Path, data: list[str], jobs: str, env: dict) -> tuple[float, float]:
    out = folder / f"res-{jobs}-{time.time_ns()}"
    t = time.time()
    argv = [sys.executable, "-m", "modern_gpt", "ablate", *TINY, *SHAPE, *data, "--jobs", jobs, "--out", str(out)]
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr[-2000:])
    starts = []
    for f in out.rglob("*.json"):
        d = json.loads(f.read_text())
        if isinstance(d, dict) and isinstance(d.get("timing"), dict) and "started" in d["timing"]:
            starts.append(d["timing"]["started"])
    return min(starts) - t, time.time() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=300)
    p.add_argument("--text", type=Path, default=SHARED if SHARED.exists() else None)
    p.add_argument("--smoke", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MODERN_GPT_CACHE": str(folder / "cache")}
        data = []
        if not a.smoke:
            seed = a.text.read_text() if a.text else (ROOT / "modern_gpt" / "smoke.txt").read_text()
            corpus = folder / "corpus.txt"
            with open(corpus, "w") as f:
                for _ in range(int(a.mb * 1e6 / len(seed.encode()))):
                    f.write(seed)
            data = ["--data", str(corpus)]
            warm = "from modern_gpt.core.config import DataConfig as D; from modern_gpt.data.corpus import load_corpus"
            subprocess.run([sys.executable, "-c", f"{warm}; load_corpus(D(path={str(corpus)!r}))"], env=env, check=True)
        for jobs in ("1", "2", "1", "2"):
            start, total = first_start(folder, data, jobs, env)
            print(f"--jobs {jobs}: first run started {start:.1f} s after launch; the ablation took {total:.1f} s")


if __name__ == "__main__":
    main()
