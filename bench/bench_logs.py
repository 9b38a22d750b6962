"""judge DIR on large logs: time and peak memory of reading a folder whose logs are SIZE_MB each.

    python bench/bench_logs.py 100 1000

Each log is modded-nanogpt's shape: lines of training steps with an evaluation every 250 steps. Peak RSS is the
process's own (ru_maxrss), measured in a fresh process per size.
"""

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_log(path: Path, size_mb: int) -> None:
    line = "step:{s}/{t} train_time:{ms}ms step_avg:58.05ms\n"
    total = size_mb * (1 << 20) // len(line.format(s=1000, t=1000, ms=80000))
    with open(path, "w") as f:
        block = []
        for s in range(total + 1):
            block.append(line.format(s=s, t=total, ms=s * 58))
            if s % 250 == 0 or s == total:
                block.append(f"step:{s}/{total} val_loss:{3.28 + 1 / (1 + s / 1000):.4f} train_time:{s * 58}ms\n")
            if len(block) > 100_000:
                f.write("".join(block))
                block = []
        f.write("".join(block))


def measure(folder: Path) -> None:
    from modern_gpt.verdict.logs import judge_logs
    from modern_gpt.verdict.reading import JudgeSettings

    started = time.perf_counter()
    _, rows, _ = judge_logs(folder, JudgeSettings())
    took = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{rows[0]['runs']} runs, {took:.1f} s, peak RSS {peak:.0f} MB")


def main(sizes: list[int]) -> None:
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            for v in ("a", "b"):
                (Path(tmp) / v).mkdir()
                for i in range(2):
                    write_log(Path(tmp) / v / f"r{i}.txt", size // 4)
            print(f"{size} MB of logs in 4 files: ", end="", flush=True)
            code = "import sys; sys.path.insert(0, 'bench'); from bench_logs import measure; from pathlib import Path; "
            subprocess.run([sys.executable, "-c", code + f"measure(Path({tmp!r}))"], check=True)


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [100])
