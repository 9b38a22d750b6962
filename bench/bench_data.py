"""Preparing a corpus: modern-gpt's streamed token cache side by side with the anchor (bench/anchor_prepare.py,
nanoGPT's practice), and what a later start and a start on token shards cost.

    python bench/bench_data.py [--mb 30 300] [--bpe-mb 30] [--shard-mtokens 90] [--text PATH]

Each step runs in a fresh process (os.wait4 gives its CPU time and peak RSS). The corpus is --text (default:
../shared/data/tinyshakespeare.txt, else the built-in smoke corpus) repeated to each size.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"

LOAD = """
import sys, time
from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import load_corpus
path, kind, vocab, cache, val = sys.argv[1:6]
t, cpu = time.perf_counter(), time.process_time()
c = load_corpus(DataConfig(path=path, tokenizer=kind, vocab_size=int(vocab), cache_dir=cache, val_data=val))
print(f"{len(c.train) + len(c.val)} {time.perf_counter() - t:.3f} {time.process_time() - cpu:.2f}")
"""


def measured(argv) -> tuple[float, float, float, str]:
    """CPU seconds, peak RSS in GB, wall seconds and stdout of one command in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "true"}
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{argv} failed ({p.returncode})")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 2**20, time.perf_counter() - t, out.strip()


def corpus(folder: Path, seed: str, mb: float) -> Path:
    path = folder / f"corpus-{mb:g}mb.txt"
    if not path.exists():
        with open(path, "w") as f:
            for _ in range(max(1, int(mb * 1e6 / len(seed.encode())))):
                f.write(seed)
    return path


def prepare(folder: Path, path: Path, kind: str, vocab: int) -> None:
    cache = folder / f"cache-{kind}-{path.stem}"
    ours = measured([sys.executable, "-c", LOAD, str(path), kind, str(vocab), str(cache), ""])
    anchor = measured([sys.executable, str(HERE / "anchor_prepare.py"), str(path), str(folder / "a.bin"), kind])
    hit = measured([sys.executable, "-c", LOAD, str(path), kind, str(vocab), str(cache), ""])
    mb = path.stat().st_size / 1e6
    label = f"{mb:.0f} MB {kind}{f' {vocab}' if kind == 'bpe' else ''}"
    inside = float(ours[3].split()[2])  # load_corpus's own CPU time (the process's less imports)
    print(
        f"| {label} | {ours[0]:.1f} s ({inside:.1f} s) / {ours[1]:.2f} GB | {anchor[0]:.1f} s / {anchor[1]:.2f} GB | "
        f"{ours[0] / anchor[0]:.2f}x ({inside / anchor[0]:.2f}x) | {float(hit[3].split()[1]):.3f} s |",
        flush=True,
    )


def shards(folder: Path, mtokens: int) -> None:
    """FineWeb-style headered shards of synthetic GPT-2 ids (100M tokens a shard, as modded-nanogpt's)."""
    sub = folder / "fineweb"
    sub.mkdir(exist_ok=True)
    rng, left, i = np.random.default_rng(0), mtokens * 1_000_000, 0
    while left > 0:
        n = min(left, 100_000_000)
        header = np.zeros(256, "<i4")
        header[:3] = 20240520, 1, n
        with open(sub / f"fineweb_train_{i + 1:06d}.bin", "wb") as f:
            f.write(header.tobytes())
            for a in range(0, n, 1 << 24):
                f.write(rng.integers(0, 50257, min(1 << 24, n - a), dtype=np.uint16).tobytes())
        left, i = left - n, i + 1
    val = sub / "fineweb_val_000000.bin"
    header = np.zeros(256, "<i4")
    header[:3] = 20240520, 1, 1_000_000
    val.write_bytes(header.tobytes() + rng.integers(0, 50257, 1_000_000, dtype=np.uint16).tobytes())
    cache = folder / "cache-shards"
    for what in ("first start (scans every id once)", "later start"):
        cpu, rss, wall, out = measured([sys.executable, "-c", LOAD, str(sub), "char", "50304", str(cache), ""])
        print(f"| {mtokens}M tokens, {i} shards, {what} | {float(out.split()[1]):.2f} s | {cpu:.1f} s | {rss:.2f} GB |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, nargs="*", default=[30, 300])
    p.add_argument("--bpe-mb", type=float, nargs="*", default=[30])
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--shard-mtokens", type=int, default=90)
    p.add_argument("--text", type=Path, default=SHARED if SHARED.exists() else None)
    a = p.parse_args()
    seed = a.text.read_text() if a.text else resources.files("modern_gpt").joinpath("smoke.txt").read_text()
    print(f"machine: {machine()}, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(
            "| corpus | modern-gpt: CPU (in load_corpus) / peak RSS | anchor: CPU / peak RSS | CPU ratio "
            "(load_corpus alone) | cache hit: load_corpus wall |"
        )
        print("| --- | --- | --- | --- | --- |")
        for mb in a.mb:
            prepare(folder, corpus(folder, seed, mb), "char", a.vocab_size)
        for mb in a.bpe_mb:
            prepare(folder, corpus(folder, seed, mb), "bpe", a.vocab_size)
        if a.shard_mtokens:
            print("\n| shards | load_corpus | CPU | peak RSS |\n| --- | --- | --- | --- |")
            shards(folder, a.shard_mtokens)


if __name__ == "__main__":
    main()
