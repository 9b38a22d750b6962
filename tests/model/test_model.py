"""The model: parameter counts, one piece per flag, attention against hand-written references, the KV cache."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from modern_gpt.core.components import COMPONENTS
from modern_gpt.core.config import PIECES, ModelConfig, kv_cache_bytes_per_token, non_embedding_params, param_counts
from modern_gpt.core.errors import ConfigError
from modern_gpt.model.gpt import GPT, ContextWall, apply_rope, causal_attention
from modern_gpt.model.inference import KVCache

TINY = dict(vocab_size=50, context=16, dim=32, heads=4, layers=2)
ALL_VARIANTS = [c for n in range(len(COMPONENTS) + 1) for c in itertools.combinations(COMPONENTS, n)]


def tiny(components=(), **kw):
    return ModelConfig(**{**TINY, **kw}).with_components(components)


def _piece_of(name: str) -> str:
    """Which piece a parameter of a built GPT belongs to, by its name."""
    if name.endswith(".bias"):
        return "biases"
    for prefix, piece in (("tok_emb.", "token_embedding"), ("pos_emb.", "position_table"), ("lm_head.", "output_head")):
        if name.startswith(prefix):
            return piece
    if "norm" in name.rsplit(".", 2)[-2]:
        return "norms"
    return "attention" if ".attn." in name else "mlp"


def counted(model) -> dict:
    counts = dict.fromkeys(PIECES, 0)
    for name, p in model.named_parameters():  # a tied tensor is yielded once
        counts[_piece_of(name)] += p.numel()
    return {**counts, "total": sum(counts.values())}


@pytest.mark.parametrize("components", ALL_VARIANTS, ids=lambda c: "+".join(c) or "classic")
def test_param_counts_equal_the_parameters_of_a_built_model(components):
    for kw in (dict(), dict(heads=8, kv_heads=2, tie_embeddings=False, multiple_of=16), dict(mlp_hidden=37, layers=1)):
        cfg = tiny(components, **kw)
        assert param_counts(cfg) == counted(GPT(cfg)), kw


def test_gpt2_and_llama_style_parameter_counts_are_exact():
    base = ModelConfig(vocab_size=1024, context=128, dim=128, heads=4, layers=4, multiple_of=1)
    assert param_counts(base)["total"] == 940_800
    assert param_counts(base.with_components(["rmsnorm", "rope", "swiglu"]))["total"] == 923_432
    # and a model built in full holds exactly that many parameters
    model = GPT(base)
    assert sum(p.numel() for p in model.parameters()) == 940_800


def test_parameter_count_by_hand():
    # GPT-2 formula: embeddings + layers * (attention 4d^2+4d, mlp 8d^2+5d, two LayerNorms 4d) + final LayerNorm 2d
    v, t, d, n = 1024, 128, 128, 4
    by_hand = v * d + t * d + n * (4 * d * d + 4 * d + 8 * d * d + 5 * d + 4 * d) + 2 * d
    cfg = ModelConfig(vocab_size=v, context=t, dim=d, heads=4, layers=n)
    assert param_counts(cfg)["total"] == by_hand


# The pieces each flag may change: everything else must stay exactly as it was.
OWN_PIECES = {
    "rmsnorm": {"biases"},  # RMSNorm keeps LayerNorm's gain but drops its shift (a bias)
    "rope": {"position_table"},
    "swiglu": {"mlp", "biases"},
    "no_bias": {"biases"},
    "gqa": {"attention", "biases"},
    "qk_norm": {"norms"},
}
OWN_MODULES = {
    "rmsnorm": ("norm1", "norm2", "norm_f"),
    "rope": ("pos_emb", "rotary"),
    "swiglu": ("mlp",),
    "no_bias": (),  # no module changes type; only .bias parameters go
    "gqa": ("attn.qkv",),
    "qk_norm": ("q_norm", "k_norm"),
}


def test_every_component_says_which_pieces_and_modules_it_may_change():
    assert set(OWN_PIECES) == set(OWN_MODULES) == set(COMPONENTS)  # a new component adds its own entries


def _tree(model):
    """Every module and parameter: name -> type or shape."""
    tree = {name: type(m).__name__ for name, m in model.named_modules()}
    tree.update({name: tuple(p.shape) for name, p in model.named_parameters()})
    return tree


@pytest.mark.parametrize("flag", COMPONENTS)
@pytest.mark.parametrize("others", [(), COMPONENTS], ids=["from-classic", "from-modern"])
def test_one_flag_changes_only_its_own_piece(flag, others):
    base_components = tuple(c for c in others if c != flag)
    base = tiny(base_components, heads=4, layers=3)
    toggled = tiny(base_components + (flag,), heads=4, layers=3)
    before, after = param_counts(base), param_counts(toggled)
    changed = {p for p in PIECES if before[p] != after[p]}
    assert changed <= OWN_PIECES[flag]
    tree_a, tree_b = _tree(GPT(base)), _tree(GPT(toggled))
    differing = {k for k in tree_a.keys() | tree_b.keys() if tree_a.get(k) != tree_b.get(k)}
    assert differing  # even where no count changes (RMSNorm against a LayerNorm without bias), the modules do
    for name in differing:
        own = any(part in name for part in OWN_MODULES[flag]) or (
            flag in ("no_bias", "rmsnorm") and name.endswith(".bias")
        )
        assert own, f"{flag} changed {name}"


@pytest.mark.parametrize("components", [(), COMPONENTS], ids=["classic", "modern"])
def test_reset_parameters_gives_unit_norm_gains_and_zero_biases(components):
    model = GPT(tiny(components))
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(2.0, 3.0)
    model.reset_parameters()
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            assert torch.equal(p, torch.zeros_like(p)), name
        elif p.dim() == 1:  # LayerNorm, RMSNorm and QK-norm gains
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert p.abs().max() < 0.2, name  # normal(0, 0.02), not the values written above


def test_rope_score_depends_only_on_distance():
    torch.manual_seed(0)
    d = 16
    q, k = torch.randn(d), torch.randn(d)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)

    def at(x, pos):
        angles = torch.tensor([float(pos)])[:, None] * inv_freq[None]
        return apply_rope(x[None], angles.cos(), angles.sin())[0]

    def score(i, j):
        return float(at(q, i) @ at(k, j))

    for delta in (0, 1, 5, 40):
        scores = [score(i + delta, i) for i in (0, 3, 17, 250, 1000)]
        assert max(scores) - min(scores) < 1e-4, (delta, scores)
    assert abs(score(5, 0) - score(6, 0)) > 1e-3  # and it does depend on the distance
    # a rotation: norms are kept
    assert torch.allclose(at(q, 123).norm(), q.norm(), atol=1e-5)


def _reference_attention(q, k, v):
    """softmax(QK^T / sqrt(d) + causal mask) V, written out, with K/V heads repeated for grouped queries."""
    group = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    T, L = q.size(-2), k.size(-2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    allowed = torch.ones(T, L, dtype=torch.bool).tril(diagonal=L - T)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return F.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("heads,kv_heads,T,L", [(4, 4, 10, 10), (8, 2, 7, 7), (4, 1, 1, 9), (6, 3, 4, 11)])
def test_sdpa_path_equals_hand_written_attention(heads, kv_heads, T, L):
    torch.manual_seed(1)
    q = torch.randn(2, heads, T, 16)
    k, v = torch.randn(2, kv_heads, L, 16), torch.randn(2, kv_heads, L, 16)
    assert torch.allclose(causal_attention(q, k, v), _reference_attention(q, k, v), atol=1e-5)


def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention():
    torch.manual_seed(0)
    mha = GPT(tiny(("rope",)))
    gqa = GPT(tiny(("rope", "gqa"), kv_heads=4))
    gqa.load_state_dict(mha.state_dict())
    x = torch.randint(0, 50, (2, 12))
    assert torch.allclose(mha(x)[0], gqa(x)[0], atol=1e-6)


def test_gqa_shares_kv_heads_and_shrinks_the_cache():
    cfg = tiny(("gqa",), heads=8, kv_heads=2)
    assert GPT(cfg).blocks[0].attn.qkv.out_features == (8 + 2 * 2) * 4
    assert kv_cache_bytes_per_token(cfg) * 4 == kv_cache_bytes_per_token(tiny((), heads=8))


def _cached_logits(model, x, chunks):
    cache, outs, start = KVCache(), [], 0
    for size in chunks:
        outs.append(model(x[:, start : start + size], cache=cache)[0])
        start += size
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("components", ALL_VARIANTS, ids=lambda c: "+".join(c) or "classic")
def test_kv_cache_decoding_equals_full_forward(components):
    torch.manual_seed(0)
    model = GPT(tiny(components)).eval()
    x = torch.randint(0, 50, (2, 16))
    full = model(x)[0]
    one_by_one = _cached_logits(model, x, [1] * 16)
    chunked = _cached_logits(model, x, [5, 1, 7, 3])  # a prefill, then chunks after cached tokens
    assert torch.allclose(full, one_by_one, atol=1e-5)
    assert torch.allclose(full, chunked, atol=1e-5)


@pytest.mark.parametrize("components", ALL_VARIANTS, ids=lambda c: "+".join(c) or "classic")
def test_every_variant_builds_trains_and_generates(components):
    torch.manual_seed(0)
    model = GPT(tiny(components, dropout=0.1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randint(0, 50, (4, 16))
    losses = []
    for _ in range(3):
        _, loss = model(x[:, :-1], x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    out = model.eval().generate(x[:1, :4], 30, temperature=1.0, top_k=5)  # past the 16-token context
    assert out.shape == (1, 34) and int(out.max()) < 50


def test_learned_positions_hit_a_wall_and_rope_does_not():
    classic, rope = GPT(tiny()).eval(), GPT(tiny(("rope",))).eval()
    long = torch.randint(0, 50, (1, 20))
    with pytest.raises(ContextWall, match="16 rows"):
        classic(long)
    assert rope(long)[0].shape == (1, 20, 50)
    cache = KVCache()
    classic(long[:, :16], cache=cache)
    with pytest.raises(ContextWall, match="position 16 is past"):
        classic(long[:, 16:17], cache=cache)


def _greedy_without_cache(model, idx, new_tokens):
    """Greedy decoding by full forward passes over the window generate's cache holds: it grows a token at a time
    and, once it has reached the context, starts again from the last half-context of tokens."""
    context = model.config.context
    out = window = idx[:, -context:]
    for _ in range(new_tokens):
        nxt = model(window)[0][:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
        window = out[:, -(context // 2) :] if window.size(1) >= context else torch.cat([window, nxt], dim=1)
    return out


@pytest.mark.parametrize("components", [(), COMPONENTS], ids=["classic", "modern"])
def test_generation_past_the_context_rebuilds_the_cache_from_the_last_half_context(components):
    torch.manual_seed(0)
    model = GPT(tiny(components)).eval()
    with torch.no_grad():  # larger weights than at initialisation, so that the next token depends on the window
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    prompt = torch.randint(0, 50, (2, 20))  # longer than the context: only its last 16 tokens are read
    out = model.generate(prompt, 40, temperature=0)
    assert out.shape == (2, 56)
    assert torch.equal(out, _greedy_without_cache(model, prompt, 40))


def test_generation_is_reproducible_with_a_generator():
    model = GPT(tiny(COMPONENTS)).eval()
    x = torch.zeros(1, 1, dtype=torch.long)
    a = model.generate(x, 20, generator=torch.Generator().manual_seed(3))
    b = model.generate(x, 20, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    greedy = model.generate(x, 5, temperature=0)
    assert torch.equal(greedy, model.generate(x, 5, temperature=0))


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(dim=130, heads=4), "dim 130 is not divisible by 4 heads"),
        (dict(dim=64, heads=8, gqa=True, kv_heads=3), "8 heads with 3 KV heads: 8 is not divisible by 3"),
        (dict(dim=12, heads=4, rope=True), "rope needs an even head dimension, but dim 12 / 4 heads = 3"),
        (dict(dim=32, heads=4, gqa=True, kv_heads=0), "kv_heads must be at least 1, got 0"),
        (dict(dim=32, heads=1, gqa=True), "kv_heads must be at least 1, got 0 \\(the default is heads // 2"),
        (dict(layers=0), "layers must be at least 1"),
        (dict(dropout=1.5), "dropout must be in"),
    ],
)
def test_bad_shapes_fail_at_construction_with_one_sentence(kw, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**{**TINY, **kw})


def test_unknown_component_is_named():
    with pytest.raises(ConfigError, match="unknown component 'rmsnrom'"):
        tiny().with_components(["rmsnrom"])


def test_swiglu_width_and_non_embedding_count():
    cfg = ModelConfig(dim=96, swiglu=True, multiple_of=32)
    assert cfg.mlp_width == 256  # int(2 * 4 * 96 / 3) = 256, already a multiple of 32
    assert ModelConfig(dim=128, swiglu=True, multiple_of=64).mlp_width == 384  # 341 rounded up
    assert ModelConfig(dim=128, mlp_hidden=100, swiglu=True).mlp_width == 100
    counts = param_counts(tiny())
    assert non_embedding_params(counts) == counts["total"] - 50 * 32 - 16 * 32
