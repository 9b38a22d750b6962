"""Write a trained model as a Hugging Face transformers model folder: config.json and
model.safetensors, plus tokenizer.json and tokenizer_config.json for its tokenizer.

Export is by construction. TARGETS says, for each transformers class, which state of
each component it holds (the classic piece, the modern one, or either) and how each
tensor maps; TABLE, derived from it and model.COMPONENTS, names for every combination
of components the one class that holds it exactly. A combination that no class holds
is refused with a sentence naming the pieces that have no counterpart. A component
that TARGETS does not mention (a new one) is held by no class when it is on, so it is
refused until someone maps it. Nothing here imports transformers: the folder is plain files.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from .errors import UserError
from .files import atomic_path, write_json, write_text
from .model import COMPONENT_SUMMARY, COMPONENTS, GPT, ModelConfig
from .planning import label

CLASSIC, MODERN, EITHER = "classic", "modern", "either"

# One rule per tensor: (our name, as a regular expression; theirs, with \1 for the layer; how it moves).
COPY, TRANSPOSE, SPLIT_QKV = "copy", "transpose", "split q, k, v"
Rule = tuple[str, str, str]

GPT2_RULES: list[Rule] = [
    (r"tok_emb\.weight", "transformer.wte.weight", COPY),
    (r"pos_emb\.weight", "transformer.wpe.weight", COPY),
    (r"blocks\.(\d+)\.norm1\.(weight|bias)", r"transformer.h.\1.ln_1.\2", COPY),
    # GPT-2's Conv1D stores a Linear's weight transposed: (in, out).
    (r"blocks\.(\d+)\.attn\.qkv\.weight", r"transformer.h.\1.attn.c_attn.weight", TRANSPOSE),
    (r"blocks\.(\d+)\.attn\.qkv\.bias", r"transformer.h.\1.attn.c_attn.bias", COPY),
    (r"blocks\.(\d+)\.attn\.proj\.weight", r"transformer.h.\1.attn.c_proj.weight", TRANSPOSE),
    (r"blocks\.(\d+)\.attn\.proj\.bias", r"transformer.h.\1.attn.c_proj.bias", COPY),
    (r"blocks\.(\d+)\.norm2\.(weight|bias)", r"transformer.h.\1.ln_2.\2", COPY),
    (r"blocks\.(\d+)\.mlp\.fc\.weight", r"transformer.h.\1.mlp.c_fc.weight", TRANSPOSE),
    (r"blocks\.(\d+)\.mlp\.fc\.bias", r"transformer.h.\1.mlp.c_fc.bias", COPY),
    (r"blocks\.(\d+)\.mlp\.proj\.weight", r"transformer.h.\1.mlp.c_proj.weight", TRANSPOSE),
    (r"blocks\.(\d+)\.mlp\.proj\.bias", r"transformer.h.\1.mlp.c_proj.bias", COPY),
    (r"norm_f\.(weight|bias)", r"transformer.ln_f.\1", COPY),
    (r"lm_head\.weight", "lm_head.weight", COPY),
]
LLAMA_RULES: list[Rule] = [
    (r"tok_emb\.weight", "model.embed_tokens.weight", COPY),
    (r"blocks\.(\d+)\.norm1\.weight", r"model.layers.\1.input_layernorm.weight", COPY),
    (r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)", r"model.layers.\1.self_attn.{}_proj.\2", SPLIT_QKV),
    (r"blocks\.(\d+)\.attn\.proj\.(weight|bias)", r"model.layers.\1.self_attn.o_proj.\2", COPY),
    (r"blocks\.(\d+)\.norm2\.weight", r"model.layers.\1.post_attention_layernorm.weight", COPY),
    (r"blocks\.(\d+)\.mlp\.gate\.(weight|bias)", r"model.layers.\1.mlp.gate_proj.\2", COPY),
    (r"blocks\.(\d+)\.mlp\.up\.(weight|bias)", r"model.layers.\1.mlp.up_proj.\2", COPY),
    (r"blocks\.(\d+)\.mlp\.proj\.(weight|bias)", r"model.layers.\1.mlp.down_proj.\2", COPY),
    (r"norm_f\.weight", "model.norm.weight", COPY),
    (r"lm_head\.weight", "lm_head.weight", COPY),
]
# Qwen3 normalises q and k per head with one (head_dim,) RMSNorm gain each, before RoPE, as modern-gpt does.
QWEN3_RULES: list[Rule] = LLAMA_RULES + [
    (r"blocks\.(\d+)\.attn\.q_norm\.weight", r"model.layers.\1.self_attn.q_norm.weight", COPY),
    (r"blocks\.(\d+)\.attn\.k_norm\.weight", r"model.layers.\1.self_attn.k_norm.weight", COPY),
]


def _common(cfg: ModelConfig, target: Target) -> dict:
    return {
        "architectures": [target.name],
        "model_type": target.model_type,
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.tie_embeddings,
        # The tokenizers modern-gpt trains have no special tokens: say so, or the class defaults leak in
        # (GPT-2's 50256, outside a small vocabulary; Llama's 1 and 2, a newline and a space in a char vocabulary).
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
        "torch_dtype": "float32",
    }


def _gpt2_config(cfg: ModelConfig, target: Target) -> dict:
    return _common(cfg, target) | {
        "n_positions": cfg.context,
        "n_ctx": cfg.context,
        "n_embd": cfg.dim,
        "n_layer": cfg.layers,
        "n_head": cfg.heads,
        "n_inner": cfg.hidden,
        "activation_function": "gelu_new",  # the tanh approximation, as in modern-gpt's classic MLP
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
    }


def _llama_config(cfg: ModelConfig, target: Target) -> dict:
    return _common(cfg, target) | {
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,  # explicit: Qwen3's default is 128, not hidden_size / heads
        "hidden_act": "silu",
        "max_position_embeddings": cfg.context,
        "rms_norm_eps": 1e-5,  # modern-gpt's RMSNorm, QK-norm included
        "rope_theta": cfg.rope_base,
        "attention_bias": cfg.bias,  # q, k, v and o
        "mlp_bias": cfg.bias,  # gate, up and down (Llama only; Qwen3's MLP has none)
        "attention_dropout": 0.0,
    }


def _qwen3_config(cfg: ModelConfig, target: Target) -> dict:
    config = _llama_config(cfg, target)
    del config["mlp_bias"]
    return config | {"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg.layers}


@dataclass(frozen=True)
class Target:
    """A transformers class: the component states it holds, how each tensor maps, and its config.json."""

    name: str
    model_type: str
    holds: dict[str, str]  # component -> CLASSIC, MODERN or EITHER; a component not named: CLASSIC only
    rules: list[Rule]
    config: Callable[[ModelConfig, Target], dict]
    zero_biases: bool = False  # the class always has biases: a model without them exports zeros

    def state(self, component: str) -> str:
        return self.holds.get(component, CLASSIC)

    def describe(self) -> str:
        """What it holds, e.g. 'rmsnorm+rope+swiglu (no_bias, gqa either way)'."""
        modern = label(c for c in COMPONENTS if self.state(c) == MODERN)
        either = [c for c in COMPONENTS if self.state(c) == EITHER]
        return modern + (f" ({', '.join(either)} either way)" if either else "")

    def mismatches(self, components) -> list[tuple[str, bool]]:
        """(component, on) for every component whose state this class cannot hold."""
        on = set(components)
        bad = []
        for c in dict.fromkeys([*COMPONENTS, *on]):  # the model's list, then any component this module never saw
            state = self.state(c)
            if state != EITHER and (state == MODERN) != (c in on):
                bad.append((c, c in on))
        return bad


TARGETS = (
    Target(
        "GPT2LMHeadModel",
        "gpt2",
        {"no_bias": EITHER},  # LayerNorm, a learned table, the GELU MLP, multi-head attention, plain q.k
        GPT2_RULES,
        _gpt2_config,
        zero_biases=True,
    ),
    Target(
        "LlamaForCausalLM",
        "llama",
        {"rmsnorm": MODERN, "rope": MODERN, "swiglu": MODERN, "no_bias": EITHER, "gqa": EITHER},
        LLAMA_RULES,
        _llama_config,
    ),
    Target(
        "Qwen3ForCausalLM",
        "qwen3",
        # Qwen3's attention may have biases, but its MLP never does: only no_bias models map.
        {"rmsnorm": MODERN, "rope": MODERN, "swiglu": MODERN, "no_bias": MODERN, "gqa": EITHER, "qk_norm": MODERN},
        QWEN3_RULES,
        _qwen3_config,
    ),
)


def _table() -> dict[frozenset[str], Target]:
    table = {}
    for n in range(len(COMPONENTS) + 1):
        for combo in itertools.combinations(COMPONENTS, n):
            holders = [t for t in TARGETS if not t.mismatches(combo)]
            assert len(holders) <= 1, f"{combo} maps to {[t.name for t in holders]}: the table must name one class"
            if holders:
                table[frozenset(combo)] = holders[0]
    return table


# Every exportable combination of model.COMPONENTS -> the class that holds it exactly.
TABLE = _table()


def _piece(component: str, on: bool) -> str:
    """The piece a component's state stands for, e.g. 'RMSNorm (rmsnorm)' or 'LayerNorm (rmsnorm off)'."""
    summary = COMPONENT_SUMMARY.get(component, "")
    classic, _, modern = summary.partition(" -> ")
    if on:
        return f"{modern or component} ({component})"
    return f"{classic or 'the classic piece'} ({component} off)"


def target_for(cfg: ModelConfig) -> Target:
    """The transformers class that holds this model exactly, or a UserError naming the pieces that have none."""
    components = cfg.components
    if frozenset(components) in TABLE:
        return TABLE[frozenset(components)]
    by_distance = sorted(((len(t.mismatches(components)), i, t) for i, t in enumerate(TARGETS)), key=lambda x: x[:2])
    closest = [t for d, _, t in by_distance if d == by_distance[0][0]]
    parts = [f"{' and '.join(_piece(c, on) for c, on in t.mismatches(components))} in {t.name}" for t in closest]
    exportable = "; ".join(f"{t.name} {t.describe()}" for t in TARGETS)
    raise UserError(
        f"{label(components)} does not export: no counterpart for {'; nor for '.join(parts)} "
        f"(the closest transformers class{'es' if len(closest) > 1 else ''}); what exports: {exportable}."
    )


def architecture(cfg: ModelConfig) -> str:
    """The transformers class name, or a UserError naming the piece that has no counterpart."""
    return target_for(cfg).name


def map_tensors(model: GPT, target: Target) -> dict[str, torch.Tensor]:
    """The model's tensors under the class's names; a tensor no rule maps is refused by name."""
    cfg = model.config
    q, kv = cfg.heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_embeddings:
            continue  # the same tensor as the token embedding
        rule = next(((m, theirs, how) for ours, theirs, how in target.rules if (m := re.fullmatch(ours, name))), None)
        if rule is None:
            raise UserError(f"the tensor {name} has no counterpart in {target.name}; it cannot be exported.")
        m, theirs, how = rule
        key = m.expand(theirs)
        if how == SPLIT_QKV:
            for part, t in zip("qkv", tensor.split([q, kv, kv]), strict=True):
                out[key.format(part)] = t
        else:
            out[key] = tensor.t() if how == TRANSPOSE else tensor
    if target.zero_biases and cfg.no_bias:
        # Conv1D weights are (in, out) and LayerNorm gains (dim,): the bias has the last size either way.
        for key, t in list(out.items()):
            if key.startswith(("transformer.h.", "transformer.ln_f.")) and key.endswith(".weight"):
                out.setdefault(key.removesuffix("weight") + "bias", torch.zeros(t.shape[-1], dtype=t.dtype))
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in out.items()}


# ---------------------------------------------------------------------------
# The tokenizer, as the `tokenizers` library writes it, so that AutoTokenizer loads it.
# ---------------------------------------------------------------------------
def _byte_symbols() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte value (what the ByteLevel pre-tokenizer and decoder use)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in symbols:
            symbols[b], extra = chr(256 + extra), extra + 1
    return symbols


def hf_tokenizer(tokenizer):
    """A tokenizers.Tokenizer giving the same ids as modern-gpt's char, byte, bpe or pretrained tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    if tokenizer.kind == "char":
        # id 0 stands for any character the training split never had; it decodes as U+FFFD, as in modern-gpt.
        unknown = tokenizer.UNKNOWN if tokenizer.UNKNOWN not in tokenizer.chars else "<unk>"
        vocab = {unknown: 0, **{c: i + 1 for i, c in enumerate(tokenizer.chars)}}
        tok = Tokenizer(models.WordLevel(vocab, unk_token=unknown))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character alone
        tok.decoder = decoders.Fuse()
        return tok
    if tokenizer.kind == "byte":
        vocab = {s: b for b, s in _byte_symbols().items()}  # id = byte value
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
        return tok
    tok = Tokenizer.from_str(tokenizer.tok.to_str())
    tok.post_processor = None  # modern-gpt encodes without added special tokens (no BOS): so must transformers
    return tok


def write_tokenizer(tokenizer, folder: Path, context: int) -> None:
    tok = hf_tokenizer(tokenizer)
    write_text(folder / "tokenizer.json", tok.to_str())
    write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": context,
            "clean_up_tokenization_spaces": False,  # decode to exactly modern-gpt's text
            "add_bos_token": False,
            "add_eos_token": False,
        },
    )


def write_model(model: GPT, folder: Path, target: Target) -> None:
    """config.json and model.safetensors for this class."""
    tensors = map_tensors(model, target)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "model.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    write_json(folder / "config.json", target.config(model.config, target))


def export_hf(model: GPT, folder: Path, tokenizer=None) -> str:
    """Write the folder (with the tokenizer when one is given); returns the transformers class it loads as."""
    target = target_for(model.config)
    folder = Path(folder)
    try:
        write_model(model, folder, target)
        if tokenizer is not None:
            write_tokenizer(tokenizer, folder, model.config.context)
    except OSError as e:
        raise UserError(f"cannot write {folder}: {e.strerror or e}; choose another --hf folder.") from None
    return target.name
