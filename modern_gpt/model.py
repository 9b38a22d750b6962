"""A small GPT in which every modern piece can be switched on and off on its own.

Read it top to bottom as the story of 2019 against today: each section puts a
classic GPT-2 piece next to the modern piece that replaces it in today's open
models. With every flag off this is GPT-2. With rmsnorm, rope, swiglu and
no_bias on it is a Llama (gqa too: Llama 3, Mistral). qk_norm is not Llama's:
Qwen3 has it (per head, as here), OLMo-2 over the whole q and k projections.

The settings (ModelConfig and its checks) and the price of each piece
(param_counts, kv_cache_bytes_per_token), which needs no built model, live in
config.py, and the list of components in components.py: both torch-free, so that
the command line's help and errors start without torch. model.ModelConfig and the
other old names still work.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .components import COMPONENT_SUMMARY, COMPONENTS, component_problem  # noqa: F401 (re-exported)
from .config import (  # noqa: F401 (re-exported: model.ModelConfig, model.param_counts, ... still work)
    PIECES,
    ModelConfig,
    Shapes,
    kv_cache_bytes_per_token,
    non_embedding_params,
    param_counts,
)
from .errors import ConfigError, UserError  # noqa: F401 (ConfigError re-exported)


# ---------------------------------------------------------------------------
# Normalisation.  2019: LayerNorm subtracts the mean, divides by the standard
# deviation, then scales by a gain and shifts by a bias.  Today: RMSNorm only
# divides by the root mean square and scales: no mean, no shift, a little
# cheaper, and in practice just as stable.
# ---------------------------------------------------------------------------
def make_norm(cfg: ModelConfig, dim: int) -> nn.Module:
    if cfg.rmsnorm:
        return RMSNorm(dim)
    return nn.LayerNorm(dim, eps=1e-5, bias=cfg.bias)  # torch's own; no_bias drops its shift


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In float32 even under bf16 autocast: the mean of squares loses too much in 8 mantissa bits.
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


# ---------------------------------------------------------------------------
# Positions.  2019: a learned table with one vector per position, added to the
# token embeddings; it has nothing to say about a position past its last row
# (the "context wall").  Today: RoPE rotates each (q, k) pair of channels by an
# angle proportional to the position, so q.k depends only on the distance
# i - j.  It has no parameters and no last row.
# ---------------------------------------------------------------------------
class ContextWall(UserError, ValueError):
    """A position past the learned position table was asked for."""


class PositionTable(nn.Embedding):
    def forward(self, start: int, T: int) -> torch.Tensor:
        """The rows of positions start .. start + T - 1: (T, dim)."""
        rows = self.num_embeddings
        if start + T > rows:
            raise ContextWall(
                f"position {start + T - 1} is past the learned position table, which has {rows} rows "
                f"(positions 0-{rows - 1}); a RoPE model has no such wall."
            )
        return super().forward(torch.arange(start, start + T, device=self.weight.device))


class Rotary(nn.Module):
    def __init__(self, head_dim: int, base: float):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # a constant, not a parameter

    def forward(self, start: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of the angles of positions start .. start + T - 1: (T, hd / 2) each."""
        positions = torch.arange(start, start + T, device=self.inv_freq.device)
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Channel i is paired with channel i + hd/2 (the "rotate half" layout of
    # GPT-NeoX and Hugging Face's Llama, so exported weights need no permutation).
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).type_as(x)


# ---------------------------------------------------------------------------
# Feed-forward.  2019: dim -> 4*dim -> GELU -> dim.  Today (SwiGLU): a gate
# silu(x W_gate) multiplies an up projection x W_up; three matrices at 2/3 of
# the width cost what the classic two do, and the gate trains better.
# ---------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.dim, cfg.hidden, bias=cfg.bias)
        self.proj = nn.Linear(cfg.hidden, cfg.dim, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))  # GPT-2's tanh approximation


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.dim, cfg.hidden, bias=cfg.bias)
        self.up = nn.Linear(cfg.dim, cfg.hidden, bias=cfg.bias)
        self.proj = nn.Linear(cfg.hidden, cfg.dim, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.silu(self.gate(x)) * self.up(x))


# ---------------------------------------------------------------------------
# Attention.  2019: every query head has its own key and value head.  Today
# (GQA): kv_heads key/value heads, each shared by heads / kv_heads query heads:
# fewer K/V projections and a KV cache smaller by that factor.
# 2019: scores are plain q.k.  Today (QK-norm): q and k are RMS-normalised per
# head first, which bounds the attention logits and keeps training stable.
# Shapes: B batch, T new tokens, L tokens attended to (T, or more with a KV
# cache), H query heads, Hkv K/V heads (H without gqa), hd the head width.
# ---------------------------------------------------------------------------
class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.layer, self.heads, self.kv_heads, self.head_dim = layer, cfg.heads, cfg.n_kv_heads, cfg.head_dim
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.dim, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=cfg.bias)
        self.q_norm = RMSNorm(self.head_dim) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim) if cfg.qk_norm else nn.Identity()
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=cfg.bias)

    def forward(self, x: torch.Tensor, rope: tuple | None, cache: KVCache | None) -> torch.Tensor:
        B, T, C = x.shape
        H, Hkv, hd = self.heads, self.kv_heads, self.head_dim
        q, k, v = self.qkv(x).split([H * hd, Hkv * hd, Hkv * hd], dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, Hkv, hd).transpose(1, 2)  # (B, Hkv, T, hd)
        v = v.view(B, T, Hkv, hd).transpose(1, 2)  # (B, Hkv, T, hd)
        q, k = self.q_norm(q), self.k_norm(k)  # QK-norm, before the rotation (as Qwen3); Identity when off
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # (B, Hkv, L, hd): the cached tokens, then these T
        y = causal_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


_SDPA_HAS_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal attention of q (B, H, T, hd) over k, v (B, Hkv, L, hd), where the last T of the L keys are q's own tokens."""
    T, L = q.size(-2), k.size(-2)
    mask, is_causal = None, False
    if T == L:
        is_causal = True
    elif T > 1:  # a chunk after cached tokens: query t sees every cached key and its own chunk up to t
        mask = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(diagonal=L - T)  # (T, L)
    extra = {}
    if k.size(1) != q.size(1):
        if _SDPA_HAS_GQA:
            extra["enable_gqa"] = True  # the kernel indexes shared heads; nothing is copied
        else:
            group = q.size(1) // k.size(1)
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, L, hd)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, **extra)


class KVCache:
    """The keys and values of every layer for the tokens seen so far, so that generation computes each token once."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}  # layer -> (B, Hkv, L, hd)
        self.values: dict[int, torch.Tensor] = {}
        self.length = 0  # tokens stored; advanced by GPT.forward after the last layer

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self.keys:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


# ---------------------------------------------------------------------------
# The block and the model are the same in 2019 and today: pre-norm residual
# blocks, and one initialisation for every variant, so that only the toggled
# piece differs.  The output layer shares the token embedding's weights unless
# tie_embeddings is off (a setting, not a component: GPT-2 ties them, and so do
# small Qwen3 and Gemma models; Llama 3 8B does not).
# ---------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.norm1 = make_norm(cfg, cfg.dim)
        self.attn = Attention(cfg, layer)
        self.norm2 = make_norm(cfg, cfg.dim)
        self.mlp = SwiGLU(cfg) if cfg.swiglu else MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, rope: tuple | None, cache: KVCache | None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), rope, cache))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos_emb = None if cfg.rope else PositionTable(cfg.context, cfg.dim)
        self.rotary = Rotary(cfg.head_dim, cfg.rope_base) if cfg.rope else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.norm_f = make_norm(cfg, cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """One scheme for every variant: normal(0, 0.02) weights, zero biases and shifts, unit norm gains."""
        self.apply(_init_weights)
        # GPT-2's scaling: each block adds two residual outputs, so shrink them to keep the residual stream's variance flat.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.layers))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None):
        """Logits (B, T, vocab) for token ids idx (B, T), and the mean cross-entropy when targets are given."""
        T = idx.size(1)
        start = cache.length if cache is not None else 0
        x = self.tok_emb(idx)  # (B, T, dim)
        if self.pos_emb is not None:
            x = x + self.pos_emb(start, T)
        rope = self.rotary(start, T) if self.rotary is not None else None
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, rope, cache)
        logits = self.lm_head(self.norm_f(x))
        if cache is not None:
            cache.length += T
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample new_tokens after idx (B, T) with a KV cache; temperature 0 is greedy.

        When the window reaches the training context the cache is rebuilt from the
        last half-context of tokens, so that learned-position models never hit
        their wall and RoPE models stay within the lengths they were trained on.
        """
        context = self.config.context
        idx = idx[:, -context:]
        out = idx
        cache = KVCache()
        logits, _ = self(idx, cache=cache)
        for i in range(new_tokens):
            next_logits = logits[:, -1, :].float()
            if not torch.isfinite(next_logits).all():  # finite weights can still overflow: no token to choose
                raise UserError(
                    f"the model's logits are not finite (NaN or infinite) at generated token {i + 1}; its weights "
                    "are too large to sample from: train the checkpoint again."
                )
            if temperature <= 0:
                nxt = next_logits.argmax(-1, keepdim=True)
            else:
                # float64, from the largest logit down: a temperature near 0 (1e-300) or huge (1e308) gives the
                # limit it tends to (greedy, uniform), never inf / inf = NaN probabilities
                top = next_logits.amax(-1, keepdim=True)
                next_logits = (next_logits.double() - top.double()) / temperature
                if top_k is not None and top_k < next_logits.size(-1):
                    kth = torch.topk(next_logits, top_k).values[:, -1:]
                    next_logits = next_logits.masked_fill(next_logits < kth, float("-inf"))
                probs = F.softmax(next_logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            out = torch.cat([out, nxt], dim=1)
            if cache.length >= context:
                cache = KVCache()
                logits, _ = self(out[:, -(context // 2 or 1) :], cache=cache)
            else:
                logits, _ = self(nxt, cache=cache)
        return out


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, (nn.LayerNorm, RMSNorm)):  # QK-norm's RMSNorms included
        nn.init.ones_(module.weight)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
