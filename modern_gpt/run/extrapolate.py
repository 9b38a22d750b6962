"""The context wall: how a model does at context lengths it was not trained on.

A learned position table has one row per trained position, and nothing past its last
row. Such a model reports `wall` there. RoPE has no last row, so a RoPE model keeps
producing numbers. How fast its loss grows shows how far it extrapolates.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..core.errors import UserError
from ..data.corpus import bits_per_char
from ..model.gpt import GPT, ContextWall


@dataclass
class ContextResult:
    context: int
    status: str  # ok | wall | short
    val_loss: float = math.nan  # NaN unless ok
    val_bpc: float = math.nan
    ms_per_token: float = math.nan
    windows: int = 0
    note: str = ""


def parse_contexts(text: str) -> list[int]:
    try:
        contexts = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise UserError(f"--contexts must be whole numbers separated by commas, got {text!r}.") from None
    if not contexts or min(contexts) < 1:
        raise UserError(f"--contexts needs lengths of 1 or more, got {text!r}.")
    return contexts


@torch.no_grad()
def evaluate_context(
    model: GPT, ids: np.ndarray, context: int, tokens_per_char: float, max_windows: int
) -> ContextResult:
    """Mean loss over non-overlapping windows of `context` tokens, from the validation split's start."""
    rows = model.config.context
    if model.pos_emb is not None and context > rows:
        return ContextResult(context, "wall", note=f"the learned position table has {rows} rows")
    n = min(max_windows, (len(ids) - 1) // context)
    if n < 1:
        return ContextResult(context, "short", note=f"the validation split has {len(ids)} tokens, {context + 1} needed")
    device = next(model.parameters()).device
    losses, seconds = [], 0.0
    for i in range(n):
        window = torch.as_tensor(np.asarray(ids[i * context : (i + 1) * context + 1], dtype=np.int64), device=device)
        t = time.perf_counter()
        try:
            _, loss = model(window[None, :-1], window[None, 1:])
        except ContextWall as e:  # belt and braces: the model itself refuses past its table
            return ContextResult(context, "wall", note=str(e))
        losses.append(loss.item())  # .item() waits for the device, so the time is real
        seconds += time.perf_counter() - t
    val = float(np.mean(losses))
    return ContextResult(context, "ok", val, bits_per_char(val, tokens_per_char), 1000 * seconds / (n * context), n)


def extrapolate(model: GPT, tokenizer, val_text: str, contexts: list[int], max_windows: int = 8) -> list[ContextResult]:
    if max_windows < 1:
        raise UserError(f"--windows must be at least 1, got {max_windows}.")
    ids = tokenizer.encode(val_text)
    if len(ids) == 0:
        raise UserError("the validation text is empty; give a longer corpus with --data.")
    tokens_per_char = len(ids) / len(val_text)
    model.eval()
    # one short forward first, so that the first length's timing does not include warm-up
    warm = np.asarray(ids[: min(len(ids), 8, model.config.context)], dtype=np.int64)
    warm = torch.as_tensor(warm, device=next(model.parameters()).device)
    model(warm[None])
    return [evaluate_context(model, ids, c, tokens_per_char, max_windows) for c in contexts]
