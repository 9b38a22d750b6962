"""Read a Hugging Face style config.json in terms of the six components.

Every field it knows gets one sentence; fields it does not know are listed as
unknown, never guessed. The parameter count is computed from the shapes in the
file, per model family, and the KV-cache bytes per token from the K/V heads.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import UserError

FAMILIES = {
    "llama": "Llama",
    "mistral": "Mistral",
    "qwen2": "Qwen2",
    "gemma": "Gemma",
    "gpt2": "GPT-2",
    "gpt_neox": "GPT-NeoX",
}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def read_config(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; give the path to a model's config.json.") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path} is not a readable JSON file ({e}).") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path} holds JSON but not an object of fields; give a model's config.json.")
    return doc


def _get(cfg: dict, *names, default=None):
    """The first of several field names that is present (GPT-2 and Llama name the same thing differently)."""
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def shape(cfg: dict) -> dict:
    """The architecture in one vocabulary, with each family's defaults for fields the file leaves out."""
    kind = cfg.get("model_type", "")
    gpt2, neox = kind == "gpt2", kind == "gpt_neox"
    dim = _get(cfg, "hidden_size", "n_embd", "d_model")
    heads = _get(cfg, "num_attention_heads", "n_head")
    layers = _get(cfg, "num_hidden_layers", "n_layer")
    if not all(isinstance(x, int) and x > 0 for x in (dim, heads, layers)):
        raise UserError(
            "the config has no usable hidden size, head count and layer count (hidden_size/n_embd, num_attention_heads/n_head, num_hidden_layers/n_layer)."
        )
    kv_heads = _get(cfg, "num_key_value_heads", default=heads)
    head_dim = _get(cfg, "head_dim", default=dim // heads)
    act = str(
        _get(cfg, "hidden_act", "hidden_activation", "activation_function", default="gelu_new" if gpt2 else "silu")
    )
    gated = not (gpt2 or neox)  # Llama-style MLPs are gated (SwiGLU, or GeGLU in Gemma)
    attention_bias = bool(_get(cfg, "attention_bias", default=False))
    return {
        "family": FAMILIES.get(kind, f"unknown model_type {kind!r}" if kind else "no model_type"),
        "vocab": _get(cfg, "vocab_size", default=0),
        "dim": dim,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "hidden": _get(cfg, "intermediate_size", "n_inner", default=4 * dim),
        "context": _get(cfg, "max_position_embeddings", "n_positions", "n_ctx", default=0),
        "rope": not gpt2,
        "rope_base": _get(cfg, "rope_theta", "rotary_emb_base", default=10000.0),
        "rmsnorm": not (gpt2 or neox),
        "gated": gated,
        "swiglu": gated and ("silu" in act or act == "swish"),
        "act": act,
        "qkv_bias": gpt2 or neox or kind == "qwen2" or attention_bias,  # Qwen2's q, k, v projections always have one
        "o_bias": gpt2 or neox or attention_bias,
        "mlp_bias": gpt2 or neox or bool(_get(cfg, "mlp_bias", default=False)),
        "norm_bias": gpt2 or neox,
        "tie": bool(_get(cfg, "tie_word_embeddings", default=kind in ("gpt2", "gemma"))),
        "dtype": str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")),
    }


def param_count(s: dict) -> int:
    """Parameters from the shapes: embeddings, then per layer attention, MLP and norms, then the final norm."""
    d, hd = s["dim"], s["head_dim"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    attention = d * q + 2 * d * kv + q * d + (q + 2 * kv if s["qkv_bias"] else 0) + (d if s["o_bias"] else 0)
    matrices = 3 if s["gated"] else 2
    mlp = matrices * d * s["hidden"] + ((matrices - 1) * s["hidden"] + d if s["mlp_bias"] else 0)
    norm = 2 * d if s["norm_bias"] else d
    positions = 0 if s["rope"] else s["context"] * d
    embeddings = s["vocab"] * d * (1 if s["tie"] else 2) + positions
    return embeddings + s["layers"] * (attention + mlp + 2 * norm) + norm


def kv_cache_bytes(s: dict) -> int:
    return 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * DTYPE_BYTES.get(s["dtype"], 2)


def components(s: dict) -> list[str]:
    out = []
    if s["rmsnorm"]:
        out.append("rmsnorm")
    if s["rope"]:
        out.append("rope")
    if s["gated"]:
        out.append("swiglu")
    if not (s["qkv_bias"] or s["o_bias"] or s["mlp_bias"] or s["norm_bias"]):
        out.append("no_bias")
    if s["kv_heads"] < s["heads"]:
        out.append("gqa")
    return out


def flags(s: dict) -> list[str]:
    """modern-gpt flags of the closest variant (the same shapes wherever modern-gpt's model can express them)."""
    out = ["--" + c.replace("_", "-") for c in components(s)]
    out += [
        "--vocab-size",
        str(s["vocab"]),
        "--dim",
        str(s["dim"]),
        "--heads",
        str(s["heads"]),
        "--layers",
        str(s["layers"]),
    ]
    if s["context"]:
        out += ["--context", str(s["context"])]
    if s["kv_heads"] < s["heads"]:
        out += ["--kv-heads", str(s["kv_heads"])]
    if s["gated"] or s["hidden"] != 4 * s["dim"]:  # modern-gpt's own width rules differ: give the width itself
        out += ["--mlp-hidden", str(s["hidden"])]
    if s["rope"]:
        out += ["--rope-base", f"{float(s['rope_base']):g}"]
    if not s["tie"]:
        out.append("--no-tie-embeddings")
    return out


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
    if s["gated"]:
        kind = "SwiGLU" if s["swiglu"] else f"a gated unit with {v} (GeGLU-like)"
        return f"{v} gates the MLP: {kind}, three matrices at width {s['hidden']}."
    return f"{v}: the classic GELU MLP, two matrices at width {s['hidden']}."


def _either(yes: str, no: str):
    """A sentence for a true/false field."""
    return lambda v, s: yes if v else no


# fmt: off
FIELDS = {
    "model_type": (None, lambda v, s: f"the family: {s['family']}."),
    "architectures": (None, lambda v, s: f"the transformers class that loads the weights: {', '.join(v) if isinstance(v, list) else v}."),
    "vocab_size": (None, lambda v, s: f"{v:,} token ids in the embedding table."),
    "hidden_size": (None, lambda v, s: f"width of the residual stream (modern-gpt's --dim): {v}."),
    "n_embd": (None, lambda v, s: f"width of the residual stream (modern-gpt's --dim): {v}."),
    "num_hidden_layers": (None, lambda v, s: f"{v} transformer blocks."),
    "n_layer": (None, lambda v, s: f"{v} transformer blocks."),
    "num_attention_heads": (None, lambda v, s: f"{v} query heads of dimension {s['head_dim']}."),
    "n_head": (None, lambda v, s: f"{v} attention heads of dimension {s['head_dim']}."),
    "num_key_value_heads": ("gqa", _kv_sentence),
    "head_dim": (None, lambda v, s: f"each head is {v} wide" + ("" if v == s["dim"] // s["heads"] else f", not hidden_size / heads = {s['dim'] // s['heads']}") + "."),
    "intermediate_size": ("swiglu", lambda v, s: f"MLP hidden width {v} ({v / s['dim']:.2f} x the model width)."),
    "n_inner": (None, lambda v, s: f"MLP hidden width {v if v else 4 * s['dim']}" + ("" if v else " (null means 4 x n_embd)") + "."),
    "hidden_act": ("swiglu", _act_sentence),
    "hidden_activation": ("swiglu", _act_sentence),
    "activation_function": (None, lambda v, s: f"{v}: the MLP's activation (gelu_new is GELU's tanh approximation), no gate."),
    "max_position_embeddings": ("rope", lambda v, s: f"the longest context it was built for: {v:,} tokens" + (" (RoPE: no table, a length it was trained or tuned to)." if s["rope"] else ".")),
    "n_positions": ("rope", lambda v, s: f"{v} rows in the learned position table: the context wall, no position past it."),
    "n_ctx": (None, lambda v, s: f"context length {v} (an older name for n_positions)."),
    "rope_theta": ("rope", lambda v, s: f"RoPE's base frequency {v:g}: a larger base rotates slower and reaches further."),
    "rotary_emb_base": ("rope", lambda v, s: f"RoPE's base frequency {v:g}."),
    "rotary_pct": ("rope", lambda v, s: f"RoPE rotates {100 * v:g}% of each head's channels; the rest carry no position."),
    "partial_rotary_factor": ("rope", lambda v, s: f"RoPE rotates {100 * v:g}% of each head's channels."),
    "rope_scaling": ("rope", lambda v, s: f"RoPE rescaled to stretch the context: {json.dumps(v)}." if v else "no RoPE rescaling."),
    "rms_norm_eps": ("rmsnorm", lambda v, s: f"RMSNorm, with epsilon {v:g} added to the mean square."),
    "layer_norm_epsilon": ("rmsnorm", lambda v, s: f"classic LayerNorm (with a bias), epsilon {v:g}."),
    "layer_norm_eps": ("rmsnorm", lambda v, s: f"classic LayerNorm (with a bias), epsilon {v:g}."),
    "attention_bias": ("no_bias", _either("biases in the attention projections.", "no bias in the attention projections.")),
    "mlp_bias": ("no_bias", _either("biases in the MLP.", "no bias in the MLP.")),
    "tie_word_embeddings": (None, _either("the output layer shares the token embedding's weights.", "the output layer has weights of its own (untied).")),
    "torch_dtype": (None, lambda v, s: f"weights stored as {v}."),
    "dtype": (None, lambda v, s: f"weights stored as {v}."),
    "use_cache": (None, _either("generation keeps a KV cache.", "generation keeps no KV cache.")),
    "sliding_window": (None, lambda v, s: f"each token attends to the last {v:,} tokens only (sliding-window attention)." if v else "no sliding window: full causal attention."),
    "use_sliding_window": (None, _either("sliding-window attention is on.", "sliding-window attention is off.")),
    "max_window_layers": (None, lambda v, s: f"the sliding window applies from layer {v} on."),
    "use_parallel_residual": (None, _either("attention and MLP read the same input and are added in parallel (GPT-J style).", "attention, then MLP, in sequence.")),
    "attention_dropout": (None, lambda v, s: f"dropout on attention weights: {v}."),
    "attn_pdrop": (None, lambda v, s: f"dropout on attention weights: {v}."),
    "resid_pdrop": (None, lambda v, s: f"dropout on residual outputs: {v}."),
    "embd_pdrop": (None, lambda v, s: f"dropout on embeddings: {v}."),
    "hidden_dropout": (None, lambda v, s: f"dropout on hidden states: {v}."),
    "initializer_range": (None, lambda v, s: f"weights initialised with standard deviation {v}."),
    "bos_token_id": (None, lambda v, s: f"the beginning-of-sequence token id: {v}."),
    "eos_token_id": (None, lambda v, s: f"the end-of-sequence token id: {v}."),
    "pad_token_id": (None, lambda v, s: f"the padding token id: {v}."),
    "transformers_version": (None, lambda v, s: f"written by transformers {v}."),
    "pretraining_tp": (None, lambda v, s: f"tensor-parallel degree used in pretraining: {v} (no effect on the shapes)."),
    "scale_attn_weights": (None, _either("attention scores divided by sqrt(head dim).", "attention scores not scaled.")),
}
# fmt: on


def explain_config(cfg: dict) -> dict:
    s = shape(cfg)
    fields, unknown = [], []
    for name, value in cfg.items():
        if name not in FIELDS:
            unknown.append(name)
            continue
        component, sentence = FIELDS[name]
        try:
            meaning = sentence(value, s)
        except (TypeError, ValueError, ZeroDivisionError, KeyError):
            meaning = f"(the value {value!r} is not of the expected kind)"
        fields.append({"field": name, "value": value, "component": component, "meaning": meaning})
    return {
        "family": s["family"],
        "fields": fields,
        "unknown": unknown,
        "components": components(s),
        "params": param_count(s),
        "kv_cache_bytes_per_token": kv_cache_bytes(s),
        "dtype": s["dtype"],
        "flags": flags(s),
        "shape": s,
    }
