"""Inference plumbing: the KV cache, the attention mask of tokens after cached ones, and sampling.

It stays out of gpt.py's story of 2019 against today. gpt.py reaches each piece through one line.
None of it changes a weight, a training step or the logits of a full forward pass.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core.errors import UserError


class KVCache:
    """Every layer's keys and values for the tokens seen so far. A forward pass over new tokens then
    computes only theirs, and attends to the stored ones. At the training context, generate rebuilds
    it from the last half-context."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}  # layer -> (B, Hkv, L, hd)
        self.values: dict[int, torch.Tensor] = {}
        self.length = 0  # tokens stored; advanced by GPT.forward after the last layer

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new keys and values after the layer's cached ones. Returns all of them: (B, Hkv, L, hd)."""
        if layer in self.keys:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def cached_attention_mask(T: int, L: int, device: torch.device) -> torch.Tensor | None:
    """Which of L keys each of T new queries sees, as a (T, L) mask. The first L - T keys are cached tokens.
    A query sees every cached key, and its own chunk up to itself. None for one new token: it sees every key."""
    if T == 1:
        return None
    return torch.ones(T, L, dtype=torch.bool, device=device).tril(diagonal=L - T)


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample new_tokens after idx (B, T) with a KV cache. Temperature 0 is greedy.

    At the training context the cache is rebuilt from the last half-context of tokens.
    So a learned-position model never hits its wall, and a RoPE model stays within its trained lengths.
    """
    context = model.config.context
    idx = idx[:, -context:]
    out = idx
    cache = KVCache()
    logits, _ = model(idx, cache=cache)
    for i in range(new_tokens):
        nxt = next_token(logits[:, -1, :].float(), i, temperature, top_k, generator)
        out = torch.cat([out, nxt], dim=1)
        if cache.length >= context:
            cache = KVCache()
            logits, _ = model(out[:, -(context // 2 or 1) :], cache=cache)
        else:
            logits, _ = model(nxt, cache=cache)
    return out


def next_token(
    logits: torch.Tensor, i: int, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """The token (B, 1) sampled from the last position's float32 logits (B, vocab). i counts tokens generated."""
    if not torch.isfinite(logits).all():  # finite weights can still overflow: no token to choose
        raise UserError(
            f"the model's logits are not finite (NaN or infinite) at generated token {i + 1}; its weights "
            "are too large to sample from: train the checkpoint again."
        )
    if temperature <= 0:
        return logits.argmax(-1, keepdim=True)
    # float64, from the largest logit down: a temperature near 0 (1e-300) or huge (1e308) gives the
    # limit it tends to (greedy, uniform), never inf / inf = NaN probabilities
    top = logits.amax(-1, keepdim=True)
    logits = (logits.double() - top.double()) / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
