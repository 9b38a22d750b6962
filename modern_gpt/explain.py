"""Read a Hugging Face style config.json in terms of model.COMPONENTS.

Every field it knows gets one sentence; fields it does not know are listed as
unknown, never guessed. What a family implies without a field (Qwen3's per-head
QK-norm, Qwen2's q/k/v biases) is said in a note, and so is a component that
explain has no detector for (it is named, never guessed). The parameter count and the
KV-cache bytes per token come from model.param_counts and model.kv_cache_bytes_per_token,
the formulas modern-gpt counts its own models with, fed the shapes read from the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import UserError
from .model import (
    COMPONENT_SUMMARY,
    COMPONENTS,
    ConfigError,
    ModelConfig,
    Shapes,
    kv_cache_bytes_per_token,
    param_counts,
)

FAMILIES = {
    "llama": "Llama",
    "mistral": "Mistral",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "olmo2": "OLMo-2",
    "gemma": "Gemma",
    "gpt2": "GPT-2",
    "gpt_neox": "GPT-NeoX",
}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
QK_NORM_FIELDS = ("qk_norm", "use_qk_norm", "qk_layernorm")  # other families' switches for QK-norm
# The transformers class defaults that are not what the general rule (hidden / heads, K/V heads = heads) gives,
# for a config.json that leaves the field out.
FAMILY_DEFAULTS = {
    "qwen3": {"head_dim": 128, "num_key_value_heads": 32},
    "gemma": {"head_dim": 256, "num_key_value_heads": 16},
    "qwen2": {"num_key_value_heads": 32},
    "mistral": {"num_key_value_heads": 8},
}
BIASES = {"qkv_bias": "q, k, v", "o_bias": "o", "mlp_bias": "MLP", "norm_bias": "norms"}


def read_config(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; give the path to a model's config.json.") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path} is not a readable JSON file ({e}).") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path} holds JSON but not an object of fields; give a model's config.json.")
    check_fields(doc, str(path))
    return doc


# The fields explain computes with, by the kind of value each must hold.
WHOLE = (
    "hidden_size",
    "n_embd",
    "d_model",
    "num_attention_heads",
    "n_head",
    "num_hidden_layers",
    "n_layer",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "n_inner",
    "vocab_size",
    "max_position_embeddings",
    "n_positions",
    "n_ctx",
)
NUMBER = ("rope_theta", "rotary_emb_base")
SWITCH = ("attention_bias", "mlp_bias", "tie_word_embeddings", *QK_NORM_FIELDS)


def check_fields(cfg: dict, source: str = "the config") -> None:
    """Every field explain computes with holds a usable value; else one sentence naming the field and the file."""
    for name in WHOLE:
        v = cfg.get(name)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not a whole number of at least 1.")
    for name in NUMBER:
        v = cfg.get(name)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 1 < v < float("inf")):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not a number greater than 1 (RoPE's base).")
    for name in SWITCH:
        v = cfg.get(name)
        if v is not None and not isinstance(v, bool):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not true or false.")


def _get(cfg: dict, *names, default=None):
    """The first of several field names that is present (GPT-2 and Llama name the same thing differently)."""
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def shape(cfg: dict, source: str = "the config") -> dict:
    """The architecture in one vocabulary, with each family's defaults for fields the file leaves out."""
    check_fields(cfg, source)
    kind = cfg.get("model_type", "")
    gpt2, neox = kind == "gpt2", kind == "gpt_neox"
    dim = _get(cfg, "hidden_size", "n_embd", "d_model")
    heads = _get(cfg, "num_attention_heads", "n_head")
    layers = _get(cfg, "num_hidden_layers", "n_layer")
    if not all(isinstance(x, int) and x > 0 for x in (dim, heads, layers)):
        raise UserError(
            f"{source} has no usable hidden size, head count and layer count (hidden_size/n_embd, num_attention_heads/n_head, num_hidden_layers/n_layer)."
        )
    defaults = FAMILY_DEFAULTS.get(kind, {})
    kv_heads = _get(cfg, "num_key_value_heads", default=defaults.get("num_key_value_heads", heads))
    if cfg.get("num_key_value_heads") is not None and heads % kv_heads:  # (a class default is counted as it is)
        raise UserError(
            f"{source}: num_key_value_heads {kv_heads} does not divide the {heads} attention heads; "
            "each K/V head must serve the same number of query heads."
        )
    if "head_dim" not in defaults and cfg.get("head_dim") is None and dim % heads:
        raise UserError(
            f"{source}: the hidden size {dim} is not divisible by the {heads} attention heads, and no head_dim is given."
        )
    head_dim = _get(cfg, "head_dim", default=defaults.get("head_dim", dim // heads))
    act = str(
        _get(cfg, "hidden_act", "hidden_activation", "activation_function", default="gelu_new" if gpt2 else "silu")
    )
    gated = not (gpt2 or neox)  # Llama-style MLPs are gated (SwiGLU, or GeGLU in Gemma)
    attention_bias = bool(_get(cfg, "attention_bias", default=False))
    # QK-norm: Qwen3 has one head_dim-wide gain for q and one for k (per head, like modern-gpt's);
    # OLMo-2 normalises the whole q and k projections; other families switch it on with a field.
    if kind == "qwen3" or (kind != "olmo2" and any(cfg.get(f) is True for f in QK_NORM_FIELDS)):
        qk_norm = "head"
    else:
        qk_norm = "projection" if kind == "olmo2" else ""
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
        "qk_norm": qk_norm,  # "", "head" or "projection"
        "tie": bool(_get(cfg, "tie_word_embeddings", default=kind in ("gpt2", "gemma"))),
        "dtype": str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")),
    }


def shapes(s: dict) -> Shapes:
    """The shapes as model.param_counts reads them."""
    hd = s["head_dim"]
    return Shapes(
        vocab_size=s["vocab"],
        dim=s["dim"],
        layers=s["layers"],
        heads=s["heads"],
        kv_heads=s["kv_heads"],
        head_dim=hd,
        hidden=s["hidden"],
        mlp_matrices=3 if s["gated"] else 2,
        position_rows=0 if s["rope"] else s["context"],
        qk_norm_gains={"": 0, "head": 2 * hd, "projection": (s["heads"] + s["kv_heads"]) * hd}[s["qk_norm"]],
        qkv_bias=s["qkv_bias"],
        o_bias=s["o_bias"],
        mlp_bias=s["mlp_bias"],
        norm_shift=s["norm_bias"],
        tied=s["tie"],
    )


def param_count(s: dict) -> int:
    """Parameters from the shapes, with the formula modern-gpt counts its own models with."""
    return param_counts(shapes(s))["total"]


def kv_cache_bytes(s: dict) -> int:
    return kv_cache_bytes_per_token(shapes(s), DTYPE_BYTES.get(s["dtype"], 2))


# How each component shows in a config's shapes. Keyed by model.COMPONENTS; a component
# without a detector is named as not detected (in "not_detected" and in a note), never guessed.
DETECTORS = {
    "rmsnorm": lambda s: s["rmsnorm"],
    "rope": lambda s: s["rope"],
    "swiglu": lambda s: s["gated"],
    "no_bias": lambda s: not any(s[b] for b in BIASES),
    "gqa": lambda s: s["kv_heads"] < s["heads"],
    "qk_norm": lambda s: bool(s["qk_norm"]),
}


def components(s: dict) -> list[str]:
    return [c for c in COMPONENTS if c in DETECTORS and DETECTORS[c](s)]


def not_detected() -> list[str]:
    """The components explain cannot tell from a config.json (none today; a new one until it gets a detector)."""
    return [c for c in COMPONENTS if c not in DETECTORS]


def biases(s: dict) -> dict[str, bool]:
    """Which projections carry a bias: q, k, v; o; MLP; norms (LayerNorm's shift)."""
    return {label: bool(s[key]) for key, label in BIASES.items()}


def notes(s: dict, cfg: dict) -> list[str]:
    """What the family implies without a field, and where modern-gpt's closest variant cannot follow."""
    kind = cfg.get("model_type", "")
    out = []
    if kind == "qwen3":
        out.append(
            "Qwen3 (no field): q and k are RMS-normalised per head before RoPE, one head_dim-wide gain each "
            f"({s['head_dim']}) per layer: qk_norm, as in modern-gpt."
        )
    elif kind == "olmo2":
        out.append(
            f"OLMo-2 (no field): q and k are RMS-normalised over the whole projection ({s['heads']} x {s['head_dim']} "
            f"and {s['kv_heads']} x {s['head_dim']} gains per layer), not per head: qk_norm, wider than modern-gpt's; "
            "and its two norms per block sit after attention and after the MLP (post-norm), not before."
        )
    elif s["qk_norm"]:
        out.append("QK-norm gains are counted as one head_dim-wide gain each for q and k per layer (Qwen3's layout).")
    if kind == "qwen2":
        out.append("Qwen2 (no field): the q, k and v projections always carry a bias, the output projection none.")
    if s["head_dim"] != s["dim"] // s["heads"]:
        out.append(
            f"head_dim {s['head_dim']} is not hidden_size / heads = {s['dim'] // s['heads']}: modern-gpt's heads are "
            "always dim / heads wide, so the closest variant's parameter count differs."
        )
    elif s["qk_norm"] == "projection":
        out.append("modern-gpt's qk_norm has per-head gains, so the closest variant's parameter count differs.")
    some = [label for label, on in biases(s).items() if on]
    if some and len(some) < len(BIASES):
        out.append(
            f"biases on {', '.join(some)} only: modern-gpt has a bias everywhere or nowhere, "
            "so the closest variant's parameter count differs."
        )
    for c in not_detected():
        out.append(
            f"{c} ({COMPONENT_SUMMARY.get(c, 'a component')}): explain cannot tell it from a config.json, "
            "so it is not reported either way and the closest variant's flags leave it off."
        )
    return out


def flags_problem(s: dict) -> str:
    """Why `params` would refuse the closest variant's flags, or '' when it accepts them."""
    if not s["vocab"]:
        return "it gives no vocab_size, which --vocab-size needs"
    try:  # the model config the flags stand for, checked as `params` checks it
        ModelConfig(
            vocab_size=s["vocab"],
            context=s["context"] or 1,
            dim=s["dim"],
            heads=s["heads"],
            layers=s["layers"],
            kv_heads=s["kv_heads"],
            mlp_hidden=s["hidden"],
            rope_base=float(s["rope_base"]) if s["rope"] else 10000.0,
            tie_embeddings=s["tie"],
        ).with_components(components(s))
    except ConfigError as e:
        return str(e).rstrip(".")
    return ""


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


# fmt: off  (a table: one field and its sentence per line)
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
    "head_dim": (
        None,
        lambda v, s: (
            f"each head is {v} wide"
            + ("" if v == s["dim"] // s["heads"] else f", not hidden_size / heads = {s['dim'] // s['heads']}")
            + "."
        ),
    ),
    "intermediate_size": ("swiglu", lambda v, s: f"MLP hidden width {v} ({v / s['dim']:.2f} x the model width)."),
    "n_inner": (
        None,
        lambda v, s: f"MLP hidden width {v if v else 4 * s['dim']}" + ("" if v else " (null means 4 x n_embd)") + ".",
    ),
    "hidden_act": ("swiglu", _act_sentence),
    "hidden_activation": ("swiglu", _act_sentence),
    "activation_function": (
        None,
        lambda v, s: f"{v}: the MLP's activation (gelu_new is GELU's tanh approximation), no gate.",
    ),
    "max_position_embeddings": (
        "rope",
        lambda v, s: (
            f"the longest context it was built for: {v:,} tokens"
            + (" (RoPE: no table, a length it was trained or tuned to)." if s["rope"] else ".")
        ),
    ),
    "n_positions": (
        "rope",
        lambda v, s: f"{v} rows in the learned position table: the context wall, no position past it.",
    ),
    "n_ctx": (None, lambda v, s: f"context length {v} (an older name for n_positions)."),
    "rope_theta": (
        "rope",
        lambda v, s: f"RoPE's base frequency {v:g}: a larger base rotates slower and reaches further.",
    ),
    "rotary_emb_base": ("rope", lambda v, s: f"RoPE's base frequency {v:g}."),
    "rotary_pct": (
        "rope",
        lambda v, s: f"RoPE rotates {100 * v:g}% of each head's channels; the rest carry no position.",
    ),
    "partial_rotary_factor": ("rope", lambda v, s: f"RoPE rotates {100 * v:g}% of each head's channels."),
    "rope_scaling": (
        "rope",
        lambda v, s: f"RoPE rescaled to stretch the context: {json.dumps(v)}." if v else "no RoPE rescaling.",
    ),
    "rms_norm_eps": ("rmsnorm", lambda v, s: f"RMSNorm, with epsilon {v:g} added to the mean square."),
    "layer_norm_epsilon": ("rmsnorm", lambda v, s: f"classic LayerNorm (with a bias), epsilon {v:g}."),
    "layer_norm_eps": ("rmsnorm", lambda v, s: f"classic LayerNorm (with a bias), epsilon {v:g}."),
    "attention_bias": (
        "no_bias",
        lambda v, s: (
            "biases on the q, k, v and o projections."
            if v
            else (
                "no bias on o (Qwen2's q, k and v always have one)."
                if s["family"] == "Qwen2"
                else "no bias in the attention projections."
            )
        ),
    ),
    "mlp_bias": ("no_bias", _either("biases in the MLP.", "no bias in the MLP.")),
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
    "use_parallel_residual": (
        None,
        _either(
            "attention and MLP read the same input and are added in parallel (GPT-J style).",
            "attention, then MLP, in sequence.",
        ),
    ),
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


def explain_config(cfg: dict, source: str = "the config") -> dict:
    s = shape(cfg, source)
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
        "not_detected": not_detected(),
        "biases": biases(s),
        "notes": notes(s, cfg),
        "params": param_count(s),
        "kv_cache_bytes_per_token": kv_cache_bytes(s),
        "dtype": s["dtype"],
        "flags": None if flags_problem(s) else flags(s),  # None: `params` would refuse them (flags_problem says why)
        "flags_problem": flags_problem(s),
        "shape": s,
    }
