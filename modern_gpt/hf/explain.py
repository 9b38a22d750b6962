"""Read a Hugging Face style config.json in terms of components.COMPONENTS.

Every field it knows gets one sentence. Fields it does not know are listed as unknown, never
guessed. Each model type explain knows is one row of families.FAMILIES, which says what its
transformers class builds. A model type without a row is not guessed at either: explain says
which components it cannot tell, and counts nothing.

The parameter count and the KV-cache bytes per token are modern-gpt's own formulas
(config.param_counts, config.kv_cache_bytes_per_token), fed the shapes read from the file.
tests/hf/test_explain.py checks them against the transformers model that each config builds
on the meta device.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..core.components import COMPONENTS, all_components, summary
from ..core.config import ModelConfig, Shapes, kv_cache_bytes_per_token, param_counts
from ..core.errors import ConfigError, UserError
from ..core.files import not_regular
from .families import FAMILIES, WRAPPERS, Family
from .fields import FIELDS, mlp_name, number

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
QK_NORM_FIELDS = ("qk_norm", "use_qk_norm", "qk_layernorm")  # the switches for QK-norm that some families have
# Fields that change what a class builds, where a family's class may or may not read them.
OPTIONAL_STRUCTURE = (
    "num_key_value_heads",
    "head_dim",
    "attention_bias",
    "mlp_bias",
    "use_bias",
    "use_qkv_bias",
    *QK_NORM_FIELDS,
    "use_parallel_residual",
)
# Fields that only a mixture-of-experts model has: explain has no formula for expert MLPs.
MOE_FIELDS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_intermediate_size",
    "num_experts_per_tok",
)
ACT_FIELDS = ("hidden_act", "hidden_activation", "activation_function")
BIASES = {"qkv_bias": "q, k, v", "o_bias": "o", "mlp_bias": "MLP", "norm_bias": "norms"}


def read_config(path: Path) -> dict:
    what = not_regular(Path(path))  # checked before any open: reading a pipe waits for ever
    if what:
        raise UserError(f"{path} is {what}, not a file; give the path to a model's config.json.")
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
NUMBER = ("rope_theta", "rotary_emb_base", "rope_local_base_freq")
SWITCH = (
    "attention_bias",
    "mlp_bias",
    "use_bias",
    "use_qkv_bias",
    "tie_word_embeddings",
    "add_cross_attention",
    *QK_NORM_FIELDS,
)
ROPE_BLOCKS = ("rope_parameters", "rope_scaling")


def _theta_problem(v) -> bool:
    return not (isinstance(v, (int, float)) and not isinstance(v, bool) and 1 < v < math.inf)


def check_fields(cfg: dict, source: str = "the config") -> None:
    """Every field explain computes with holds a usable value. Else one sentence names the field and the file."""
    _check_scalars(cfg, source)
    _check_rope_blocks(cfg, source)
    kind = cfg.get("model_type")
    if kind is not None and not isinstance(kind, str):
        raise UserError(f"{source}: model_type is {json.dumps(kind)}, not the name of a model type.")
    for name in ("text_config", "vision_config"):
        v = cfg.get(name)
        if v is not None and not isinstance(v, dict):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not an object of fields.")
        if name == "text_config" and v is not None:
            check_fields(v, f"{source} (text_config)")


def _check_scalars(cfg: dict, source: str) -> None:
    """The whole numbers, RoPE's base and the switches."""
    for name in WHOLE:
        v = cfg.get(name)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not a whole number of at least 1.")
    for name in NUMBER:
        v = cfg.get(name, 10000.0)
        if _theta_problem(v):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not a number greater than 1 (RoPE's base).")
    for name in SWITCH:
        v = cfg.get(name)
        if v is not None and not isinstance(v, bool):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not true or false.")


def _check_rope_blocks(cfg: dict, source: str) -> None:
    """{"rope_theta": ..., "rope_type": ...}, or one such per layer type (Gemma-3)."""
    for name in ROPE_BLOCKS:
        v = cfg.get(name)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise UserError(f"{source}: {name} is {json.dumps(v)}, not an object of RoPE settings.")
        for key, inner in [(name, v)] + [(f"{name}.{k}", b) for k, b in v.items() if isinstance(b, dict)]:
            if "rope_theta" in inner and _theta_problem(inner["rope_theta"]):
                raise UserError(
                    f"{source}: {key}.rope_theta is {json.dumps(inner['rope_theta'])}, "
                    "not a number greater than 1 (RoPE's base)."
                )


def _get(cfg: dict, *names, default=None):
    """The first of several field names that is present. GPT-2 and Llama name the same thing differently."""
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def _rope(cfg: dict, fam: Family) -> dict:
    """RoPE's base, scaling and rotated share as the config class reads them (transformers 5.x).

    rope_scaling, the older field, wins over rope_parameters, as in transformers. A base inside
    the block wins over the legacy field (rope_theta, GPT-NeoX's rotary_emb_base). Gemma-3 keeps
    one block per layer type: full attention and the sliding window.
    """
    block = cfg.get("rope_scaling") or cfg.get("rope_parameters") or fam.default_rope or {}
    if fam.rope_per_layer_type:
        params = cfg.get("rope_parameters") or {}
        full = dict(params.get("full_attention") or {})
        full.update(cfg.get("rope_scaling") or {})  # the old format: one block, for the full-attention layers
        local = params.get("sliding_attention") or {}
        base = full.get("rope_theta", cfg.get("rope_theta", fam.theta))
        local_base = local.get("rope_theta", cfg.get("rope_local_base_freq", 10000.0))
        block = full
    else:
        block = block.get("full_attention", block) if isinstance(block.get("full_attention"), dict) else block
        base = block.get("rope_theta", cfg.get(fam.theta_field, fam.theta))
        local_base = None
    kind = block.get("rope_type", block.get("type", "default"))
    legacy_partial = cfg.get("rotary_pct") if fam.theta_field == "rotary_emb_base" else cfg.get("partial_rotary_factor")
    partial = block.get("partial_rotary_factor", legacy_partial if legacy_partial is not None else fam.partial_rotary)
    return {
        "rope_base": float(base),
        "rope_local_base": local_base,
        "rope_scaling": "" if kind == "default" else str(kind),
        "rope_factor": block.get("factor"),
        "rotary_share": partial,
    }


def _layers_of(cfg: dict, kind: str) -> tuple[dict, Family | None, str]:
    """The config whose shapes are counted, its family, and why not all. A multimodal wrapper's is text_config."""
    text = cfg.get("text_config")
    if kind in FAMILIES or not isinstance(text, dict):  # a text model's class reads no text_config
        return cfg, FAMILIES.get(kind), ""
    fam = FAMILIES.get(text.get("model_type", WRAPPERS[kind][2])) if kind in WRAPPERS else None
    # a wrapper explain knows, around a text model it knows; otherwise its text model is described, not counted
    return text, fam, "vision" if fam else "wrapper"


def architecture(cfg: dict, source: str = "the config") -> dict:
    """The architecture in one vocabulary. The family's class defaults fill the fields the file leaves out.

    For a model type explain does not know, what only the class could say is None, not guessed.
    """
    check_fields(cfg, source)
    kind = cfg.get("model_type", "")
    text, fam, part = _layers_of(cfg, kind)
    where = " (under text_config)" if text is not cfg else ""
    dim, heads, layers = _sizes(text, fam, source, where)
    reads = fam.reads if fam else frozenset(OPTIONAL_STRUCTURE)
    given = {n: text.get(n) for n in OPTIONAL_STRUCTURE if text.get(n) is not None and n in reads}
    if fam is not None and "num_key_value_heads" in text and text["num_key_value_heads"] is None:
        given["num_key_value_heads"] = _null_kv_heads(fam, heads, source, where)
    kv_heads = _kv_heads(given, fam, heads, source, where)
    head_dim = _head_dim(given, fam, dim, heads, source, where)
    b = _unknown_blocks(text, given) if fam is None else _known_blocks(text, given, fam, dim)
    norms = fam.norms if fam else None
    if fam is not None and fam.parallel_switch and given.get(fam.parallel_switch):
        norms = 1  # attention and MLP read the same normalised input
    act, gated = b["act"], b["gated"]
    return {
        "family": _family_name(kind, text, fam, part),
        "known": fam is not None,
        "kind": kind,
        "part": part,  # "", "vision" (the text model of a wrapper explain knows) or "wrapper" (one it does not)
        "vocab": _get(text, "vocab_size", default=fam.vocab if fam else 0),
        "dim": dim,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "hidden": b["hidden"],
        "context": _get(text, *fam.context_fields, default=fam.context_default)
        if fam
        else _get(text, "max_position_embeddings", default=0),
        "rope": b["rope"],
        **({"rope_base": 10000.0} | b["rope_info"]),
        "rmsnorm": b["rmsnorm"],
        "gated": gated,
        "swiglu": None if gated is None else bool(gated) and act in ("silu", "swish"),
        "act": act,
        "act_params": fam.act_params.get(act, 0) if fam else 0,
        "qkv_bias": b["biases"][0],
        "o_bias": b["biases"][1],
        "mlp_bias": b["biases"][2],
        "norm_bias": b["biases"][3],
        "qk_norm": b["qk_norm"],  # "", "head", "projection", "each head", or None (cannot tell)
        "norms": norms,
        "tie": _tie(cfg, text, fam, part, kind),
        "dtype": str(_get(text, "torch_dtype", "dtype", default=_get(cfg, "torch_dtype", "dtype", default="bfloat16"))),
        "cross_attention": bool(fam and fam.cross_attention_field and text.get(fam.cross_attention_field)),
        "moe": [f for f in MOE_FIELDS if isinstance(text.get(f), int) and text.get(f) > 1],
    }


def _sizes(text: dict, fam: Family | None, source: str, where: str) -> tuple[int, int, int]:
    """The hidden size, head count and layer count, by the names the family's class reads."""
    names = (("hidden_size", "n_embd"), ("num_attention_heads", "n_head"), ("num_hidden_layers", "n_layer"))
    if fam is None:  # an unknown type: any of the names in use, for the description only
        names = (("hidden_size", "n_embd", "d_model"), *names[1:])
    else:  # the names the family's class reads
        names = fam.size_names
    dim, heads, layers = (_get(text, *n) for n in names)
    if not all(isinstance(x, int) and x > 0 for x in (dim, heads, layers)):
        raise UserError(
            f"{source} has no usable hidden size, head count and layer count{where} "
            f"({', '.join('/'.join(n) for n in names)})."
        )
    return dim, heads, layers


# The classes whose config reads "num_key_value_heads": null as one K/V head per query head (not the class default)
NULL_KV_IS_HEADS = frozenset(
    f"{n}ForCausalLM" for n in ("Llama", "Qwen2", "Qwen3", "Olmo2", "Phi3", "Arcee", "Apertus")
)


def _null_kv_heads(fam: Family, heads: int, source: str, where: str) -> int:
    if fam.cls in NULL_KV_IS_HEADS:  # Qwen2's default is 32, but null means the head count
        return heads
    raise UserError(
        f"{source}: num_key_value_heads is null{where}, which {fam.cls}'s config does not accept; "
        "give the number of K/V heads, or leave the field out for the class default."
    )


def _kv_heads(given: dict, fam: Family | None, heads: int, source: str, where: str) -> int | None:
    if fam is None:
        kv_heads = given.get("num_key_value_heads")
    elif "num_key_value_heads" in fam.reads:
        kv_heads = given.get("num_key_value_heads", fam.kv_heads or heads)
    else:
        kv_heads = heads  # GPT-2 and GPT-NeoX: one K/V head per query head, whatever the file says
    if "num_key_value_heads" in given and heads % kv_heads:  # (a class default is counted as it is)
        raise UserError(
            f"{source}: num_key_value_heads {kv_heads} does not divide the {heads} attention heads{where}; "
            "each K/V head must serve the same number of query heads."
        )
    return kv_heads


def _head_dim(given: dict, fam: Family | None, dim: int, heads: int, source: str, where: str) -> int:
    head_dim = given.get("head_dim", fam.head_dim if fam else None)
    if head_dim is not None:
        return head_dim
    if dim % heads:
        raise UserError(
            f"{source}: the hidden size {dim} is not divisible by the {heads} attention heads{where}, "
            "and no head_dim is given."
        )
    return dim // heads


def _unknown_blocks(text: dict, given: dict) -> dict:
    """A model type explain does not know: what its fields say. None for what only its class could say."""
    attention_bias = given.get("attention_bias")
    qk = next((text[f] for f in QK_NORM_FIELDS if f in given), None)
    rope = True if any(text.get(f) is not None for f in (*ROPE_BLOCKS, "rope_theta", "rotary_emb_base")) else None
    return {
        "act": _get(text, "hidden_act", "hidden_activation", "activation_function"),
        "biases": (attention_bias, attention_bias, given.get("mlp_bias"), None),
        "qk_norm": None if qk is None else ("head" if qk else ""),
        "rope": rope,
        "rope_info": _rope(text, FAMILIES["llama"]) if rope else {},
        "hidden": _get(text, "intermediate_size", "n_inner"),
        "gated": None,
        "rmsnorm": None,
    }


def _known_blocks(text: dict, given: dict, fam: Family, dim: int) -> dict:
    """A family explain knows: its class's blocks, as the fields given change them."""
    act = str(text.get(fam.act_field) or fam.act)
    act = fam.act_aliases.get(act, act)
    qk_norm = fam.qk_norm
    if fam.qk_norm_switch and given.get(fam.qk_norm_switch):
        qk_norm = "each head"  # one LayerNorm per head, each with its own head_dim gain
    hidden = _get(text, fam.width_field, default=4 * dim if fam.hidden is None else fam.hidden)
    return {
        "act": act,
        "biases": (*fam.biases(given), fam.layernorm),
        "qk_norm": qk_norm,
        "rope": fam.rope,
        "rope_info": _rope(text, fam) if fam.rope else {},
        "hidden": hidden,
        "gated": fam.gated,
        "rmsnorm": not fam.layernorm,
    }


def _tie(cfg: dict, text: dict, fam: Family | None, part: str, kind: str) -> bool | None:
    """Whether the output layer is the token embedding. For a wrapper explain knows, the wrapper's switch says."""
    tie_default = WRAPPERS[kind][3] if part == "vision" else (fam.tie if fam else None)
    tie_source = cfg if part == "vision" else text
    return tie_source.get("tie_word_embeddings", tie_default)


def _family_name(kind: str, text: dict, fam: Family | None, part: str) -> str:
    if part == "vision":
        return WRAPPERS[kind][0]
    if part == "wrapper":
        inner = text.get("model_type")
        return f"unknown model_type {kind!r}" + (f" (its text model: {inner!r})" if inner else "")
    if fam is not None:
        return fam.name
    return f"unknown model_type {kind!r}" if kind else "no model_type"


def not_counted(s: dict) -> str:
    """Why explain gives no parameter count, or '' when it gives one. A wrapper's counts its text model only."""
    if not s["known"]:
        why = (
            f"a mixture-of-experts model ({', '.join(s['moe'])}), and explain has no formula for expert MLPs"
            if s["moe"]
            else "explain does not know what its transformers class builds (norms, biases, MLP, QK-norm)"
        )
        return f"{s['family']}: {why}"
    if s["cross_attention"]:
        return "add_cross_attention adds cross-attention layers that explain has no formula for"
    return ""


def counted_shapes(s: dict) -> Shapes:
    """The shapes as config.param_counts reads them. Only for a counted model: see not_counted."""
    hd = s["head_dim"]
    return Shapes(
        vocab_size=s["vocab"],
        dim=s["dim"],
        layers=s["layers"],
        heads=s["heads"],
        kv_heads=s["kv_heads"],
        head_dim=hd,
        mlp_width=s["hidden"],
        mlp_matrices=3 if s["gated"] else 2,
        position_rows=0 if s["rope"] else s["context"],
        qk_norm_gains={"": 0, "head": 2 * hd}.get(s["qk_norm"], (s["heads"] + s["kv_heads"]) * hd),
        qkv_bias=s["qkv_bias"],
        o_bias=s["o_bias"],
        mlp_bias=s["mlp_bias"],
        norm_shift=s["norm_bias"],
        tied=s["tie"],
        norms_per_layer=s["norms"],
        act_params=s["act_params"],
    )


def param_count(s: dict) -> int | None:
    """Parameters from the shapes, by modern-gpt's own formula. None: see not_counted."""
    return None if not_counted(s) else param_counts(counted_shapes(s))["total"]


def kv_cache_bytes(s: dict) -> int | None:
    """None for a model type explain does not know. Its attention may cache something else."""
    if not s["known"]:
        return None
    only = {"layers": s["layers"], "kv_heads": s["kv_heads"], "head_dim": s["head_dim"]}  # what the cache depends on
    return kv_cache_bytes_per_token(Shapes(**dict.fromkeys(Shapes.__dataclass_fields__, 0) | only), _bytes(s))


def _bytes(s: dict) -> int:
    return DTYPE_BYTES.get(s["dtype"], 2)  # an unknown dtype is said in a note


# How each component shows in a config's shapes. Keyed by components.COMPONENTS; a component
# without a detector is named as not detected (in "not_detected" and in a note), never guessed.
# A detector answers None when the config cannot tell (a model type explain does not know).
def _told(*values):
    return None if any(v is None for v in values) else True


DETECTORS = {
    "rmsnorm": lambda s: s["rmsnorm"],
    "rope": lambda s: s["rope"],
    "swiglu": lambda s: s["swiglu"],
    "no_bias": lambda s: _told(*(s[b] for b in BIASES)) and not any(s[b] for b in BIASES),
    "gqa": lambda s: _told(s["kv_heads"]) and s["kv_heads"] < s["heads"],
    "qk_norm": lambda s: _told(s["qk_norm"]) and bool(s["qk_norm"]),
}


def components(s: dict) -> list[str]:
    return [c for c in COMPONENTS if c in DETECTORS and DETECTORS[c](s)]


def cannot_tell(s: dict) -> list[str]:
    """Components this config does not settle: its model type is unknown and no field says."""
    return [c for c in COMPONENTS if c in DETECTORS and DETECTORS[c](s) is None]


def not_detected() -> list[str]:
    """The components explain cannot tell from a config.json. None today; a new one, until it gets a detector."""
    return [c for c in all_components() if c not in DETECTORS]  # a plugin's (--plugin) never has one


def biases(s: dict) -> dict[str, bool | None]:
    """Which projections carry a bias: q, k, v; o; MLP; norms (LayerNorm's shift). None: cannot tell."""
    return {label: None if s[key] is None else bool(s[key]) for key, label in BIASES.items()}


def closest(s: dict) -> list[str]:
    """The components of modern-gpt's closest variant. A gated MLP of another activation (GeGLU) has --swiglu's
    shape."""
    return [c for c in COMPONENTS if c in components(s) or (c == "swiglu" and s["gated"])]


def notes(s: dict, cfg: dict) -> list[str]:
    """What the family implies without a field, and where modern-gpt's closest variant cannot follow."""
    text, fam, _ = _layers_of(cfg, cfg.get("model_type", ""))
    return [
        *_kind_notes(s, fam),
        *_qk_norm_notes(s, fam),
        *_mlp_notes(s),
        *_rope_notes(s, text),
        *_default_notes(s, fam, text),
        *_count_notes(s),
        *_class_notes(s, fam, text, cfg),
    ]


def _kind_notes(s: dict, fam: Family | None) -> list[str]:
    """Notes for an unknown model type and for a multimodal one's text model. Then the family's own note."""
    out = []
    if not s["known"]:
        told = ", ".join(components(s))
        out.append(
            f"{s['family']}: explain does not know this model type, so it does not guess what only its class says: "
            f"it cannot tell {', '.join(cannot_tell(s)) or 'nothing more'}"
            + (f" (told by fields: {told})" if told else "")
            + ", and it counts no parameters and no KV cache."
        )
    if s["part"] == "vision":
        out.append(
            "a multimodal model: the count is of its text model (text_config) and output layer; the vision tower "
            "and the projector (vision_config) are not counted."
        )
    if fam is not None and fam.note:
        out.append(fam.note)
    return out


def _qk_norm_notes(s: dict, fam: Family | None) -> list[str]:
    if s["qk_norm"] == "head":
        return [
            f"{fam.name} (no field): q and k are RMS-normalised per head before RoPE, one head_dim-wide gain each "
            f"({s['head_dim']}) per layer: qk_norm, as in modern-gpt."
            if fam is not None and fam.qk_norm == "head"
            else "QK-norm is switched on by a field; its gains are not counted (the model type is unknown)."
        ]
    if s["qk_norm"] == "projection":
        return [
            f"OLMo-2 (no field): q and k are RMS-normalised over the whole projection ({s['heads']} x {s['head_dim']} "
            f"and {s['kv_heads']} x {s['head_dim']} gains per layer), not per head: qk_norm, wider than modern-gpt's."
        ]
    if s["qk_norm"] == "each head":
        return [
            f"qk_layernorm: each of the {s['heads']} query and {s['kv_heads']} key heads has a LayerNorm of its own "
            "(no shift): qk_norm, with more gains than modern-gpt's one per q and k."
        ]
    return []


def _mlp_notes(s: dict) -> list[str]:
    """An MLP that is neither SwiGLU nor the classic GELU one, and an activation with parameters."""
    out = []
    if s["gated"] and not s["swiglu"]:
        out.append(
            f"the MLP is {mlp_name(s)}: gated like SwiGLU (three matrices) but with {s['act']} in place of SiLU, "
            "so components leave swiglu out; the closest variant's flags give --swiglu (the same shapes)."
        )
    elif s["gated"] is False and s["rmsnorm"]:
        out.append(
            f"the MLP is {mlp_name(s)}, two matrices and no gate; modern-gpt's classic MLP uses GELU "
            "(the closest variant has the same shapes, another activation)."
        )
    if s["act_params"]:
        out.append(f"{s['act']} has {s['act_params']} learned parameters per layer (counted).")
    return out


def _rope_notes(s: dict, text: dict) -> list[str]:
    """RoPE that modern-gpt's cannot follow: rescaled, two bases, partly rotated. And a sliding window."""
    out = []
    if s["known"] and s["rope"]:
        if s["rope_scaling"]:
            factor = f", factor {number(s['rope_factor'])}" if isinstance(s["rope_factor"], (int, float)) else ""
            out.append(
                f"RoPE is rescaled ({s['rope_scaling']}{factor}) to stretch the context; modern-gpt has no RoPE "
                f"scaling, so the closest variant uses the plain base {number(s['rope_base'])}."
            )
        if s["rope_local_base"] is not None:
            out.append(
                f"RoPE's base is {number(s['rope_base'])} in the full-attention layers and {number(s['rope_local_base'])} in the "
                "sliding-window layers; the closest variant uses the first."
            )
        if isinstance(s["rotary_share"], (int, float)) and s["rotary_share"] != 1:
            out.append(
                f"RoPE rotates {100 * s['rotary_share']:g}% of each head's channels; modern-gpt rotates them all."
            )
    window = text.get("sliding_window")
    if s["known"] and isinstance(window, int) and window > 0 and text.get("use_sliding_window") is not False:
        out.append(
            f"sliding-window attention ({window:,} tokens) in some or all layers: the KV cache per token holds "
            "for contexts up to the window; past it those layers keep only the last tokens."
        )
    return out


def _default_notes(s: dict, fam: Family | None, text: dict) -> list[str]:
    """The sizes the file leaves out, which the family's class defaults fill in."""
    if fam is None:
        return []
    first, *others = fam.context_fields
    defaults = {"vocab_size": fam.vocab, fam.width_field: fam.hidden, first: fam.context_default or None}
    out = [
        f"{name} is left out: {fam.cls}'s class default {value} is what transformers builds, and what is counted."
        for name, value in defaults.items()
        if value is not None and text.get(name) is None and not (name == first and any(text.get(o) for o in others))
    ]
    if fam.kv_heads and "num_key_value_heads" not in text:
        more = f", more than the {s['heads']} query heads" if s["kv_heads"] > s["heads"] else ""
        out.append(
            f"num_key_value_heads is left out: {fam.cls}'s class default is {s['kv_heads']}{more}; "
            "that is what transformers builds, and what is counted."
        )
    return out


def _count_notes(s: dict) -> list[str]:
    """Where the closest variant's parameter count differs, and a dtype of unknown size."""
    out = []
    if s["head_dim"] != s["dim"] // s["heads"]:
        out.append(
            f"head_dim {s['head_dim']} is not hidden_size / heads = {s['dim'] // s['heads']}: modern-gpt's heads are "
            "always dim / heads wide, so the closest variant's parameter count differs."
        )
    elif s["qk_norm"] in ("projection", "each head"):
        out.append("modern-gpt's qk_norm has one gain per q and k, so the closest variant's parameter count differs.")
    some = [label for label, on in biases(s).items() if on]
    if some and len(some) < len(BIASES):
        out.append(
            f"biases on {', '.join(some)} only: modern-gpt has a bias everywhere or nowhere, "
            "so the closest variant's parameter count differs."
        )
    if s["norms"] not in (2, None):
        many = "one norm" if s["norms"] == 1 else f"{s['norms']} norms"
        out.append(f"{many} per block, modern-gpt has 2: the closest variant's parameter count differs.")
    if s["known"] and s["dtype"] not in DTYPE_BYTES:
        out.append(f"dtype {s['dtype']!r} is not one explain knows the size of: the KV cache is given at 2 bytes.")
    return out


def _class_notes(s: dict, fam: Family | None, text: dict, cfg: dict) -> list[str]:
    """Fields the class does not read, and another head named in architectures. An unknown wrapper, and the
    components explain cannot tell from a config."""
    out = []
    if fam is not None:
        out += [
            f"{name} is ignored: {fam.cls} does not read it, so it changes nothing here."
            for name in OPTIONAL_STRUCTURE
            if name in text and name not in fam.reads
        ]
        arch = cfg.get("architectures")
        want = WRAPPERS[cfg["model_type"]][1] if s["part"] == "vision" else fam.cls
        if isinstance(arch, list) and arch and arch != [want]:
            out.append(
                f"architectures names {', '.join(map(str, arch))}, but the count is of {want}, the class that "
                "model_type gives AutoModelForCausalLM (another head has other parameters)."
            )
    if s["part"] == "wrapper":
        out.append(f"{s['family']}: the fields shown are of text_config; the wrapper's own layers are not known.")
    for c in not_detected():
        out.append(
            f"{c} ({summary(c)}): explain cannot tell it from a config.json, "
            "so it is not reported either way and the closest variant's flags leave it off."
        )
    out.append(
        "A component of your own (--plugin) cannot be detected from a config.json: explain knows the built-in ones."
    )
    return out


def flags_problem(s: dict) -> str:
    """Why `params` would refuse the closest variant's flags, or '' when it accepts them."""
    if not s["known"]:
        what = f"model_type {s['kind']!r}" if s["kind"] else "a config without a model_type"
        return f"explain does not know {what}, so it cannot tell {', '.join(cannot_tell(s)) or 'its layers'}"
    if s["cross_attention"]:
        return "modern-gpt has no cross-attention"
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
        ).with_components(closest(s))
    except ConfigError as e:
        return str(e).rstrip(".")
    return ""


def flags(s: dict) -> list[str]:
    """modern-gpt flags of the closest variant. Its shapes are the same wherever modern-gpt's model can say them."""
    out = ["--" + c.replace("_", "-") for c in closest(s)]
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
        out += ["--rope-base", f"{number(s['rope_base'])}"]
    if not s["tie"]:
        out.append("--no-tie-embeddings")
    return out


def _field_rows(cfg: dict, s: dict, fam: Family | None, prefix: str = "") -> tuple[list[dict], list[str]]:
    fields, unknown = [], []
    for name, value in cfg.items():
        if name not in FIELDS:
            unknown.append(prefix + name)
            continue
        component, sentence = FIELDS[name]
        if fam is not None and name in OPTIONAL_STRUCTURE and name not in fam.reads:
            component, sentence = None, lambda v, s, c=fam.cls: f"ignored: {c} does not read it."
        elif fam is not None and name in ACT_FIELDS and name != fam.act_field:
            component, sentence = None, lambda v, s, f=fam: f"ignored: {f.cls} reads {f.act_field}."
        try:
            meaning = sentence(value, s)
        except (TypeError, ValueError, ZeroDivisionError, KeyError, AttributeError):
            meaning = f"(the value {value!r} is not of the expected kind)"
        if name in ("text_config", "vision_config") and isinstance(value, dict):  # its fields get rows of their own
            value = f"{len(value)} fields"
        fields.append({"field": prefix + name, "value": value, "component": component, "meaning": meaning})
    return fields, unknown


def explain_config(cfg: dict, source: str = "the config") -> dict:
    s = architecture(cfg, source)
    text, fam, part = _layers_of(cfg, cfg.get("model_type", ""))
    fields, unknown = _field_rows(cfg, s, fam if text is cfg else None)
    if text is not cfg:
        more, unknown_text = _field_rows(text, s, fam, "text_config.")
        fields += more
        unknown += unknown_text
    problem = flags_problem(s)
    return {
        "family": s["family"],
        "fields": fields,
        "unknown": unknown,
        "components": components(s),
        "cannot_tell": cannot_tell(s),
        "not_detected": not_detected(),
        "biases": biases(s),
        "notes": notes(s, cfg),
        "params": param_count(s),
        "params_not_counted": not_counted(s) or ("the vision tower and projector" if part == "vision" else ""),
        "kv_cache_bytes_per_token": kv_cache_bytes(s),
        "dtype": s["dtype"] if s["dtype"] in DTYPE_BYTES else "bfloat16",
        "flags": None if problem else flags(s),  # None: `params` would refuse them (flags_problem says why)
        "flags_problem": problem,
        "shape": s,
    }
