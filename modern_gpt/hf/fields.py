"""One sentence per config.json field explain knows: the field, the component it tells (or None), and the
sentence its value gives. The sentence reads the architecture that explain.architecture found (s)."""

from __future__ import annotations

import json


def number(x) -> str:
    """A number exactly, as short as it goes. RoPE's base 500000, not 5e+05; 999999.4420358813, not 1e+06."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e16 else repr(x)


def mlp_name(s: dict) -> str:
    """The MLP as a reader names it: SwiGLU, GeGLU, or a gated or plain MLP of its activation."""
    act = s["act"]
    if s["swiglu"]:
        return "SwiGLU"
    if "gelu" in str(act):
        return "GeGLU" if s["gated"] else f"a {act} MLP"
    return f"a gated {act} MLP" if s["gated"] else f"a {act} MLP"


# ---------------------------------------------------------------------------
# One sentence per field. Each entry: field -> (component or None, sentence(value, shape)).
# ---------------------------------------------------------------------------
def _kv_sentence(v, s):
    if not isinstance(v, int) or v < 1:
        return f"{v!r} K/V heads: not a usable number (it must be at least 1)."
    if v >= s["heads"]:
        return f"{v} K/V heads for {s['heads']} query heads: classic multi-head attention, one K/V head per query head."
    group = s["heads"] // v
    return (
        f"{v} K/V heads with {s['heads']} query heads: grouped-query attention, {group} query heads share each K/V head, "
        f"KV cache {group}x smaller than multi-head attention."
    )


def _act_sentence(v, s):
    if s["gated"] is None:
        return f"{v}: the MLP's activation (whether the MLP is gated, only the model's class says)."
    if s["gated"]:
        return f"{v} gates the MLP: {mlp_name(s)}, three matrices at width {s['hidden']}."
    return f"{v}: {mlp_name(s)} without a gate, two matrices at width {s['hidden']}."


def _either(yes: str, no: str):
    """A sentence for a true/false field."""
    return lambda v, s: yes if v else no


def _rope_block_sentence(v, s):
    if not v:
        return "no RoPE settings given: the class defaults."
    if not s["known"]:
        return f"RoPE settings: {json.dumps(v)}."
    local = (
        f" ({number(s['rope_local_base'])} in the sliding-window layers)" if s["rope_local_base"] is not None else ""
    )
    kind = f", rescaled ({s['rope_scaling']})" if s["rope_scaling"] else ", no rescaling"
    return f"RoPE's base frequency {number(s['rope_base'])}{local}{kind}."


def _head_dim_sentence(v, s):
    if v != s["head_dim"]:
        return f"ignored: this family's heads are hidden_size / heads = {s['head_dim']} wide."
    return (
        f"each head is {v} wide"
        + ("" if v == s["dim"] // s["heads"] else f", not hidden_size / heads = {s['dim'] // s['heads']}")
        + "."
    )


def _attention_bias_sentence(v, s):
    if not s["known"]:
        return "biases on the attention projections." if v else "no bias in the attention projections."
    if s["family"] == "GPT-NeoX":
        return "biases on the fused q, k, v and the o projections." if v else "no bias on q, k, v and o."
    return "biases on the q, k, v and o projections." if v else "no bias in the attention projections."


def _n_positions_sentence(v, s):
    return f"{v} rows in the learned position table: the context wall, no position past it."


# A table: one field and its sentence per line.
# fmt: off
FIELDS = {
    "model_type": (None, lambda v, s: f"the family: {s['family']}."),
    "architectures": (
        None,
        lambda v, s: f"the transformers class that loads the weights: {', '.join(v) if isinstance(v, list) else v}.",
    ),
    "vocab_size": (None, lambda v, s: f"{v:,} token ids in the embedding table."),
    "hidden_size": (None, lambda v, s: f"width of the residual stream (modern-gpt's --dim): {v}."),
    "n_embd": (None, lambda v, s: f"width of the residual stream (modern-gpt's --dim): {v}."),
    "num_hidden_layers": (None, lambda v, s: f"{v} transformer blocks."),
    "n_layer": (None, lambda v, s: f"{v} transformer blocks."),
    "num_attention_heads": (None, lambda v, s: f"{v} query heads of dimension {s['head_dim']}."),
    "n_head": (None, lambda v, s: f"{v} attention heads of dimension {s['head_dim']}."),
    "num_key_value_heads": ("gqa", _kv_sentence),
    "head_dim": (None, _head_dim_sentence),
    "intermediate_size": ("swiglu", lambda v, s: f"MLP hidden width {v} ({v / s['dim']:.2f} x the model width)."),
    "n_inner": (
        None,
        lambda v, s: f"MLP hidden width {v if v else 4 * s['dim']}" + ("" if v else " (null means 4 x n_embd)") + ".",
    ),
    "hidden_act": ("swiglu", _act_sentence),
    "hidden_activation": ("swiglu", _act_sentence),
    "activation_function": (None, _act_sentence),
    "max_position_embeddings": (
        "rope",
        lambda v, s: (
            f"the longest context it was built for: {v:,} tokens"
            + (" (RoPE: no table, a length it was trained or tuned to)." if s["rope"] else ".")
        ),
    ),
    "original_max_position_embeddings": (
        "rope",
        lambda v, s: f"the context it was trained at before RoPE was rescaled: {v:,} tokens.",
    ),
    "n_positions": ("rope", _n_positions_sentence),
    "n_ctx": (None, lambda v, s: f"context length {v} (an older name for n_positions)."),
    "rope_theta": (
        "rope",
        lambda v, s: (
            f"RoPE's base frequency {number(v)}: a larger base rotates slower and reaches further."
            if not s["known"] or v == s["rope_base"]
            else f"{number(v)}, but rope_parameters or rope_scaling gives the base {number(s['rope_base'])}, which wins."
        ),
    ),
    "rotary_emb_base": ("rope", lambda v, s: f"RoPE's base frequency {number(v)}."),
    "rope_local_base_freq": ("rope", lambda v, s: f"RoPE's base frequency {number(v)} in the sliding-window layers."),
    "rotary_pct": (
        "rope",
        lambda v, s: f"RoPE rotates {100 * v:g}% of each head's channels; the rest carry no position.",
    ),
    "partial_rotary_factor": ("rope", lambda v, s: f"RoPE rotates {100 * v:g}% of each head's channels."),
    "rope_scaling": ("rope", _rope_block_sentence),
    "rope_parameters": ("rope", _rope_block_sentence),
    "rms_norm_eps": ("rmsnorm", lambda v, s: f"RMSNorm, with epsilon {v:g} added to the mean square."),
    "layer_norm_epsilon": ("rmsnorm", lambda v, s: f"classic LayerNorm (with a bias), epsilon {v:g}."),
    "layer_norm_eps": ("rmsnorm", lambda v, s: f"classic LayerNorm (with a bias), epsilon {v:g}."),
    "norm_epsilon": ("rmsnorm", lambda v, s: f"classic LayerNorm (with a bias), epsilon {v:g}."),
    "attention_bias": ("no_bias", _attention_bias_sentence),
    "mlp_bias": ("no_bias", _either("biases in the MLP.", "no bias in the MLP.")),
    "use_bias": (
        "no_bias",
        _either("biases in every projection.", "no bias in the projections (the norms keep theirs)."),
    ),
    "use_qkv_bias": ("no_bias", _either("biases on q, k and v.", "no bias on q, k and v.")),
    "qk_norm": (
        "qk_norm",
        _either("q and k are normalised before their dot product (QK-norm).", "no QK-norm: plain q.k."),
    ),
    "use_qk_norm": (
        "qk_norm",
        _either("q and k are normalised before their dot product (QK-norm).", "no QK-norm: plain q.k."),
    ),
    "qk_layernorm": (
        "qk_norm",
        _either("q and k are layer-normalised before their dot product (QK-norm).", "no QK-norm: plain q.k."),
    ),
    "tie_word_embeddings": (
        None,
        _either(
            "the output layer shares the token embedding's weights.",
            "the output layer has weights of its own (untied).",
        ),
    ),
    "torch_dtype": (None, lambda v, s: f"weights stored as {v}."),
    "dtype": (None, lambda v, s: f"weights stored as {v}."),
    "use_cache": (None, _either("generation keeps a KV cache.", "generation keeps no KV cache.")),
    "sliding_window": (
        None,
        lambda v, s: (
            f"each token attends to the last {v:,} tokens only (sliding-window attention)."
            if v
            else "no sliding window: full causal attention."
        ),
    ),
    "use_sliding_window": (None, _either("sliding-window attention is on.", "sliding-window attention is off.")),
    "max_window_layers": (None, lambda v, s: f"the sliding window applies from layer {v} on."),
    "layer_types": (
        None,
        lambda v, s: ", ".join(f"{v.count(t)} {t.replace('_', ' ')}" for t in dict.fromkeys(v)) + " layers.",
    ),
    "use_parallel_residual": (
        None,
        _either(
            "attention and MLP read the same input and are added in parallel (GPT-J style).",
            "attention, then MLP, in sequence.",
        ),
    ),
    "attn_logit_softcapping": (
        None,
        lambda v, s: f"attention scores are soft-capped at {v} (tanh)." if v else "no soft cap on attention scores.",
    ),
    "final_logit_softcapping": (
        None,
        lambda v, s: f"output logits are soft-capped at {v} (tanh)." if v else "no soft cap on the logits.",
    ),
    "query_pre_attn_scalar": (None, lambda v, s: f"attention scores are divided by sqrt({v}), not sqrt(head_dim)."),
    "add_cross_attention": (
        None,
        _either("cross-attention layers to an encoder (not counted).", "no cross-attention."),
    ),
    "text_config": (None, lambda v, s: "the text model's fields: shown below with a text_config. prefix."),
    "vision_config": (
        None,
        lambda v, s: f"the vision tower ({v.get('model_type', 'unknown type')}): not explained, not counted.",
    ),
    "attention_dropout": (None, lambda v, s: f"dropout on attention weights: {v}."),
    "attn_pdrop": (None, lambda v, s: f"dropout on attention weights: {v}."),
    "resid_pdrop": (None, lambda v, s: f"dropout on residual outputs: {v}."),
    "embd_pdrop": (None, lambda v, s: f"dropout on embeddings: {v}."),
    "hidden_dropout": (None, lambda v, s: f"dropout on hidden states: {v}."),
    "residual_dropout": (None, lambda v, s: f"dropout on residual outputs: {v}."),
    "embedding_dropout": (None, lambda v, s: f"dropout on embeddings: {v}."),
    "initializer_range": (None, lambda v, s: f"weights initialised with standard deviation {v}."),
    "bos_token_id": (None, lambda v, s: f"the beginning-of-sequence token id: {v}."),
    "eos_token_id": (None, lambda v, s: f"the end-of-sequence token id: {v}."),
    "pad_token_id": (None, lambda v, s: f"the padding token id: {v}."),
    "transformers_version": (None, lambda v, s: f"written by transformers {v}."),
    "pretraining_tp": (
        None,
        lambda v, s: f"tensor-parallel degree used in pretraining: {v} (no effect on the shapes).",
    ),
    "scale_attn_weights": (
        None,
        _either("attention scores divided by sqrt(head dim).", "attention scores not scaled."),
    ),
}
# fmt: on
