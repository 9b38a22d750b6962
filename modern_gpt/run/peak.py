"""The peak a run's MFU is measured against: the most FLOPs per second the device could do.

MFU (model FLOPs utilisation) is a run's training FLOPs per second over this peak. The FLOPs are
compiling.step_flops, attention included. On a CPU no data sheet knows the machine at hand. So the peak is
measured in the run's process, at its thread count: the best rate of a float32 matrix multiply. That is
about 10 ms of work, once per process and thread count. On a GPU it is the device's dense bf16 peak from its
data sheet, as training runs under bf16 autocast there. A GPU not on this list has none: its MFU is left
empty rather than guessed.
"""

from __future__ import annotations

import math
import time
from functools import lru_cache

# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, from the vendors' data sheets. Longest names first, so that
# "H100 PCIe" is not read as the SXM part.
GPU_PEAKS = (
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
    ("RTX 4090", 165e12),
    ("RTX 3090", 71e12),
    ("V100", 125e12),  # fp16: V100 has no bf16
    ("T4", 65e12),  # fp16
)
_SIZE, _REPEATS, _ROUNDS = 256, 4, 3  # 3 rounds of 4 products of 256 x 256 matrices: about 10 ms on one core


@lru_cache(maxsize=8)
def cpu_peak(threads: int) -> float:
    """The best float32 matmul rate of this process at `threads` torch threads. The caller pins them per run."""
    import torch

    a = torch.randn(_SIZE, _SIZE, generator=torch.Generator().manual_seed(0))
    b = torch.randn(_SIZE, _SIZE, generator=torch.Generator().manual_seed(1))
    torch.mm(a, b)  # the first call pays for the kernel's set-up
    best = math.inf
    for _ in range(_ROUNDS):
        start = time.perf_counter()
        for _ in range(_REPEATS):
            torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * _SIZE**3 * _REPEATS / best


def gpu_peak(name: str) -> float:
    """A GPU's dense bf16 peak, by its name (torch.cuda.get_device_name). NaN for one not listed."""
    return next((peak for part, peak in GPU_PEAKS if part.lower() in name.lower()), math.nan)


def peak(device: str, threads: int) -> tuple[float, str]:
    """(FLOP/s, which peak it is) for a run on this device."""
    if device == "cuda":
        import torch

        name = torch.cuda.get_device_name()
        found = gpu_peak(name)
        return found, f"{name} dense bf16 peak (data sheet)" if math.isfinite(found) else f"{name}: no peak on record"
    if device == "cpu":
        return cpu_peak(threads), f"float32 matmul rate measured in the run's process at {threads} threads"
    return math.nan, f"{device}: no peak on record"
