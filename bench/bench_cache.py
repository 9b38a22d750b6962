"""The token cache: tokenizing a large corpus the first time against memory-mapping it afterwards.

    python bench/bench_cache.py [--mb 60] [--tokenizer char] [--text PATH]

Builds a corpus of about --mb megabytes by repeating --text (default: the built-in smoke
corpus), loads it twice into a fresh cache folder, and prints both wall times.
"""

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from modern_gpt.core.config import DataConfig
from modern_gpt.data.corpus import load_corpus, read_raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=60)
    parser.add_argument("--tokenizer", default="char", choices=["char", "byte", "bpe"])
    parser.add_argument("--text", type=Path, default=None)
    args = parser.parse_args()
    seed_text = args.text.read_text() if args.text else read_raw(DataConfig())[1][0][1].decode()  # the smoke corpus
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.txt"
        path.write_text(seed_text * max(1, int(args.mb * 1e6 / len(seed_text.encode()))))
        cfg = DataConfig(path=str(path), tokenizer=args.tokenizer, cache_dir=os.path.join(tmp, "cache"))
        times = []
        for _ in range(2):
            t = time.perf_counter()
            corpus = load_corpus(replace(cfg))
            times.append(time.perf_counter() - t)
        size = path.stat().st_size / 1e6
        print(
            f"{size:.0f} MB, {args.tokenizer}: first load (tokenize + write) {times[0]:.1f} s, "
            f"second load (cache hit, memory-mapped) {times[1]:.2f} s, {len(corpus.train):,} training tokens; "
            f"{os.cpu_count()} CPUs"
        )


if __name__ == "__main__":
    main()
