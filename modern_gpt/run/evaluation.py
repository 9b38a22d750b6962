"""The further metrics of a run's final evaluation, from its fixed windows' per-token losses (numpy only).

Every metric is lower-is-better:

- `val_bpb`, `NAME_bpb`: bits per byte, the idea of nanochat's evaluate_bpb. The nats of the windows' target
  tokens over the UTF-8 bytes they stand for, / ln 2. It compares across tokenizers. A token of no bytes (a
  special token) is left out of both sums. NaN for token ids with no tokenizer file: no bytes are known.
- `NAME_loss`: nats per token on an --eval-data set's fixed windows.
- `icl_gain`: in-context gain, after Olsson et al. 2022, scaled to the context. Theirs is "the loss at token
  500 minus the loss at token 50" of a 512-token context. Ours is the mean loss of the validation windows'
  last sixteenth of target positions, minus that of their second sixteenth. Context 64: positions 60-63
  minus 4-7; 512: 480-511 minus 32-63. Negative when later tokens, which see more context, are predicted
  better. The more negative, the more the model uses its context. NaN below a context of 16.
- `ctx2x_loss`: the mean loss per token on validation windows of twice the trained context. They are
  evaluated as run/extrapolate.py does, and chosen from the split's length alone. NaN where the model cannot
  run there: past a learned position table's last row (its wall), or on a split shorter than one such
  window. The run's metric_notes say which.
"""

from __future__ import annotations

import math

import numpy as np

LONG = 2  # ctx2x_loss: windows of LONG x the trained context
PROBES = ("val_bpb", "ctx2x_loss", "icl_gain")


def metric_names(set_names) -> list[str]:
    """The metrics of a run with these --eval-data sets, in their column order."""
    return [*PROBES] + [f"{name}_{what}" for name in set_names for what in ("loss", "bpb")]


def icl_bands(context: int) -> tuple[slice, slice] | None:
    """The target positions icl_gain compares. Early: the window's second sixteenth; late: its last."""
    w = context // 16
    if w < 1:
        return None
    return slice(w, 2 * w), slice(context - w, context)


def icl_gain(losses: np.ndarray) -> float:
    """Late minus early mean loss over windows' per-token losses (windows x context)."""
    bands = icl_bands(losses.shape[1]) if losses.ndim == 2 and len(losses) else None
    if bands is None:
        return math.nan
    early, late = bands
    return float(losses[:, late].astype(np.float64).mean() - losses[:, early].astype(np.float64).mean())


def targets(ids, offsets: np.ndarray, context: int) -> np.ndarray:
    """The target token ids of windows starting at offsets (windows x context), as data.corpus.windows's."""
    if not len(offsets):
        return np.zeros((0, context), dtype=np.int64)
    return np.stack([np.asarray(ids[o + 1 : o + context + 1], dtype=np.int64) for o in offsets])


def bits_per_byte(losses: np.ndarray, target_ids: np.ndarray, lengths: np.ndarray | None) -> float:
    """Sum of nats over sum of bytes of the target tokens, / ln 2. Tokens of no bytes are left out of both."""
    if lengths is None or not losses.size:
        return math.nan
    nbytes = lengths[target_ids]
    total = int(nbytes.sum())
    if total == 0:
        return math.nan
    nats = float(np.where(nbytes > 0, losses.astype(np.float64), 0.0).sum())
    return nats / (math.log(2) * total)
