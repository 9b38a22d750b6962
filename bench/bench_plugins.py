"""A plugin's checks: plugins.check_forward (shapes, backward, causality) and one numeric_guard.

    python bench/bench_plugins.py

Loads the shipped relu2 and prints the median of 5 of each, at a small model and at tinyshakespeare's.
"""

import time
from pathlib import Path

import torch

from modern_gpt.core.config import ModelConfig
from modern_gpt.model import plugins


def median_ms(call, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2] * 1000


if __name__ == "__main__":
    torch.set_num_threads(1)
    plugins.load([Path(__file__).parent.parent / "examples" / "components" / "relu2.py"])
    small = ModelConfig(vocab_size=65, context=64, dim=64, heads=4, layers=2)
    shakespeare = ModelConfig(vocab_size=65, context=256, dim=384, heads=6, layers=6)
    for name, cfg in (("dim 64, 2 layers", small), ("tinyshakespeare's 6 x 384", shakespeare)):
        cfg = cfg.with_components(("relu2",))
        print(f"check_forward, {name}: {median_ms(lambda cfg=cfg: plugins.check_forward(cfg)):.0f} ms")

    def guard() -> None:
        with plugins.numeric_guard("x", "while timed"):
            pass

    print(f"numeric_guard: {median_ms(guard, 1001):.2f} ms")
