"""A small GPT in which every modern piece switches on and off on its own.

Read it top to bottom as 2019 against today. Each section puts a classic GPT-2
piece beside the modern piece that replaced it in today's open models: biases,
normalisation, positions, the feed-forward, attention. The block and the model
come last, the same in both. With every flag off this is GPT-2. With rmsnorm,
rope, swiglu and no_bias on it is a Llama (with gqa, Llama 3 or Mistral).
qk_norm is not Llama's. Qwen3 has it per head, as here; OLMo-2 over the whole
q and k projections.

The settings (ModelConfig and its checks) live in core/config.py. So does each
piece's price (param_counts, kv_cache_bytes_per_token), which needs no built
model. The component list and its name check (component_problem) live in
core/components.py. Both are torch-free, so the command line's help and errors
start without torch. The KV cache, the mask of tokens after cached ones and
sampling are in model/inference.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core.components import plugin_for
from ..core.config import ModelConfig
from ..core.errors import UserError
from . import inference
from .inference import KVCache, cached_attention_mask


# ---------------------------------------------------------------------------
# Biases.  2019: every Linear layer adds a learned bias vector to its output,
# and every LayerNorm adds a learned shift.  Today (no_bias): none of them, as
# in Llama, Mistral and Qwen3.  A bias is dim numbers beside a dim x dim matrix,
# so it buys little capacity, and PaLM reported that large models trained more
# stably without them.  What is left is matrices and gains.  The output layer
# never had a bias, in GPT-2 either.
# ---------------------------------------------------------------------------
def linear(cfg: ModelConfig, fan_in: int, fan_out: int) -> nn.Linear:
    return nn.Linear(fan_in, fan_out, bias=cfg.bias)  # cfg.bias is False with no_bias


# ---------------------------------------------------------------------------
# Normalisation.  2019: LayerNorm subtracts the mean, divides by the standard
# deviation, then scales by a gain and shifts by a bias.  Today: RMSNorm only
# divides by the root mean square and scales: no mean, no shift, a little
# cheaper, and in practice just as stable.
# ---------------------------------------------------------------------------
def make_norm(cfg: ModelConfig, dim: int) -> nn.Module:
    if mine := plugin_for(cfg, "norm"):  # your own component (docs/components.md), in any slot below too
        return mine.build(cfg, dim)
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
        self.fc = linear(cfg, cfg.dim, cfg.mlp_width)
        self.proj = linear(cfg, cfg.mlp_width, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))  # GPT-2's tanh approximation


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = linear(cfg, cfg.dim, cfg.mlp_width)
        self.up = linear(cfg, cfg.dim, cfg.mlp_width)
        self.proj = linear(cfg, cfg.mlp_width, cfg.dim)

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
        self.qkv = linear(cfg, cfg.dim, (self.heads + 2 * self.kv_heads) * self.head_dim)
        self.q_norm = RMSNorm(self.head_dim) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim) if cfg.qk_norm else nn.Identity()
        self.proj = linear(cfg, cfg.dim, cfg.dim)
        self.qk = mine.build(cfg) if (mine := plugin_for(cfg, "qk")) else None  # a q/k transform of your own
        position = plugin_for(cfg, "position")  # a position scheme of your own that acts on q and k
        self.qk_position = position.build(cfg) if position and position.applies_to == "qk" else None

    def forward(
        self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor] | None, cache: KVCache | None
    ) -> torch.Tensor:
        B, T, C = x.shape
        H, Hkv, hd = self.heads, self.kv_heads, self.head_dim
        q, k, v = self.qkv(x).split([H * hd, Hkv * hd, Hkv * hd], dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, Hkv, hd).transpose(1, 2)  # (B, Hkv, T, hd)
        v = v.view(B, T, Hkv, hd).transpose(1, 2)  # (B, Hkv, T, hd)
        q, k = self.q_norm(q), self.k_norm(k)  # QK-norm, before the rotation (as Qwen3); Identity when off
        if self.qk is not None:
            q, k = self.qk(q, k)
        if self.qk_position is not None:
            q, k = self.qk_position(q, k, cache.length if cache is not None else 0)
        if cos_sin is not None:  # RoPE on
            q, k = apply_rope(q, *cos_sin), apply_rope(k, *cos_sin)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # (B, Hkv, L, hd): the cached tokens, then these T (inference.py)
        y = causal_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


_SDPA_HAS_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal attention of q (B, H, T, hd) over k, v (B, Hkv, L, hd). The last T keys are q's own tokens."""
    T, L = q.size(-2), k.size(-2)
    if T == L:  # training, or the first pass of generation: the usual causal triangle
        mask, is_causal = None, True
    else:  # new tokens after cached ones (inference.py)
        mask, is_causal = cached_attention_mask(T, L, q.device), False
    extra = {}
    if k.size(1) != q.size(1):
        if _SDPA_HAS_GQA:
            extra["enable_gqa"] = True  # the kernel indexes shared heads; nothing is copied
        else:
            group = q.size(1) // k.size(1)
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, L, hd)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, **extra)


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
        mine = plugin_for(cfg, "mlp")
        self.mlp = mine.build(cfg) if mine else SwiGLU(cfg) if cfg.swiglu else MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor] | None, cache: KVCache | None
    ) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), cos_sin, cache))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        position = plugin_for(cfg, "position")  # a position scheme of your own replaces the table
        self.pos_emb = None if cfg.rope or position else PositionTable(cfg.context, cfg.dim)
        self.position = position.build(cfg) if position and position.applies_to == "embeddings" else None
        self.rotary = Rotary(cfg.head_dim, cfg.rope_base) if cfg.rope else None
        self.drop = nn.Dropout(cfg.dropout)
        wiring = plugin_for(cfg, "block")  # a block of your own (e.g. a parallel one)
        self.blocks = nn.ModuleList(wiring.build(cfg, i) if wiring else Block(cfg, i) for i in range(cfg.layers))
        self.norm_f = make_norm(cfg, cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """One scheme for every variant. Weights are normal(0, 0.02), biases and shifts 0, norm gains 1."""
        self.apply(_init_weights)
        # GPT-2's scaling: each block adds two residual outputs, so shrink them to keep the residual stream's variance flat.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.layers))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None):
        """Logits (B, T, vocab) for token ids idx (B, T). With targets, also the mean cross-entropy."""
        T = idx.size(1)
        start = cache.length if cache is not None else 0
        x = self.tok_emb(idx)  # (B, T, dim)
        if self.pos_emb is not None:
            x = x + self.pos_emb(start, T)
        if self.position is not None:
            x = x + self.position(start, T)
        cos_sin = self.rotary(start, T) if self.rotary is not None else None  # RoPE's angles, shared by every layer
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, cos_sin, cache)
        logits = self.lm_head(self.norm_f(x))
        if cache is not None:
            cache.length += T
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    # model.generate(idx, new_tokens, temperature, top_k, generator): sampling with a KV cache, in inference.py
    generate = inference.generate


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, (nn.LayerNorm, RMSNorm)):  # QK-norm's RMSNorms included
        nn.init.ones_(module.weight)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
