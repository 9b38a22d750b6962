"""Write a trained model as a Hugging Face transformers model folder. It holds config.json and
model.safetensors, plus tokenizer.json and tokenizer_config.json for its tokenizer.

Export is by construction. TARGETS says, for each transformers class, which state of each
component it holds: the classic piece, the modern one, or either. It also says how each tensor
maps. TABLE, derived from it and components.COMPONENTS, names for every combination of
components the one class that holds it exactly. A combination that no class holds is refused,
naming the pieces that have no counterpart. A new component that TARGETS does not mention is
held by no class when it is on. So it is refused until someone maps it. Nothing here imports
transformers: the folder is plain files.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..core.components import COMPONENT_SUMMARY, COMPONENTS, PLUGINS, label
from ..core.config import ModelConfig
from ..core.errors import UserError
from ..core.files import atomic_path, write_json, write_text
from ..model.gpt import GPT

CLASSIC, MODERN, EITHER = "classic", "modern", "either"

# One rule per tensor: (our name, as a regular expression; theirs, with \1 for the layer; how it moves).
COPY, TRANSPOSE, SPLIT_QKV = "copy", "transpose", "split q, k, v"
# GPT-2 has one K/V head per query head: a gqa model's shared K/V heads are repeated to fill them (the same
# function, with more parameters), and Conv1D stores a Linear's weight transposed, (in, out).
REPEAT_KV_T, REPEAT_KV = "repeat K/V heads, transpose", "repeat K/V heads"
Rule = tuple[str, str, str]

GPT2_RULES: list[Rule] = [
    (r"tok_emb\.weight", "transformer.wte.weight", COPY),
    (r"pos_emb\.weight", "transformer.wpe.weight", COPY),
    (r"blocks\.(\d+)\.norm1\.(weight|bias)", r"transformer.h.\1.ln_1.\2", COPY),
    (r"blocks\.(\d+)\.attn\.qkv\.weight", r"transformer.h.\1.attn.c_attn.weight", REPEAT_KV_T),
    (r"blocks\.(\d+)\.attn\.qkv\.bias", r"transformer.h.\1.attn.c_attn.bias", REPEAT_KV),
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


def _llama_family(norm1: str, norm2: str, mlp: dict[str, str]) -> list[Rule]:
    """The Llama layout (model.layers.N.self_attn.q_proj, ...) that Starcoder2, StableLM, Arcee, Apertus and Qwen3
    share. The class names a block's two norms and the MLP's matrices (ours -> theirs)."""
    return [
        (r"tok_emb\.weight", "model.embed_tokens.weight", COPY),
        (r"blocks\.(\d+)\.norm1\.(weight|bias)", rf"model.layers.\1.{norm1}.\2", COPY),
        (r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)", r"model.layers.\1.self_attn.{}_proj.\2", SPLIT_QKV),
        (r"blocks\.(\d+)\.attn\.proj\.(weight|bias)", r"model.layers.\1.self_attn.o_proj.\2", COPY),
        (r"blocks\.(\d+)\.attn\.q_norm\.weight", r"model.layers.\1.self_attn.q_norm.weight", COPY),
        (r"blocks\.(\d+)\.attn\.k_norm\.weight", r"model.layers.\1.self_attn.k_norm.weight", COPY),
        (r"blocks\.(\d+)\.norm2\.(weight|bias)", rf"model.layers.\1.{norm2}.\2", COPY),
        *(
            (rf"blocks\.(\d+)\.mlp\.{ours}\.(weight|bias)", rf"model.layers.\1.mlp.{theirs}.\2", COPY)
            for ours, theirs in mlp.items()
        ),
        (r"norm_f\.(weight|bias)", r"model.norm.\1", COPY),
        (r"lm_head\.weight", "lm_head.weight", COPY),
    ]


BLOCK_NORMS = ("input_layernorm", "post_attention_layernorm")
GATED = {"gate": "gate_proj", "up": "up_proj", "proj": "down_proj"}  # SwiGLU
# A class holds a q_norm rule only where it has QK-norm (Qwen3, Apertus): elsewhere the model has no such tensor.
LLAMA_RULES = _llama_family(*BLOCK_NORMS, GATED)
STARCODER2_RULES = _llama_family(*BLOCK_NORMS, {"fc": "c_fc", "proj": "c_proj"})
ARCEE_RULES = _llama_family(*BLOCK_NORMS, {"fc": "up_proj", "proj": "down_proj"})
APERTUS_RULES = _llama_family("attention_layernorm", "feedforward_layernorm", {"fc": "up_proj", "proj": "down_proj"})


# What transformers 5 reads for RoPE: rope_parameters (rope_theta alone gives Apertus its llama3 scaling at base
# 12e6, and StableLM rotates a quarter of each head); rope_theta too, for transformers 4.
def _rope(cfg: ModelConfig, **extra) -> dict:
    return {
        "rope_theta": cfg.rope_base,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_base, **extra},
    }


def _common(cfg: ModelConfig, target: Target) -> dict:
    return {
        "architectures": [target.name],
        "model_type": target.model_type,
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.tie_embeddings,
        # The tokenizers modern-gpt trains have no special tokens: say so, or the class defaults leak in
        # (GPT-2's 50256, outside a small vocabulary; Llama's 1 and 2, a newline and a space in a char vocabulary).
        # A pretrained tokenizer's own bos and eos replace these (export_hf).
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
        "n_inner": cfg.mlp_width,
        "activation_function": "gelu_new",  # the tanh approximation, as in modern-gpt's classic MLP
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
    }


def _shape(cfg: ModelConfig, target: Target) -> dict:
    """The shape keys every Llama-family class reads."""
    return _common(cfg, target) | {
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.mlp_width,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,  # explicit: Qwen3's default is 128, not hidden_size / heads
        "max_position_embeddings": cfg.context,
        "attention_dropout": 0.0,
    }


def _llama_config(cfg: ModelConfig, target: Target) -> dict:
    return (
        _shape(cfg, target)
        | _rope(cfg)
        | {
            "hidden_act": "silu",
            "rms_norm_eps": 1e-5,  # modern-gpt's RMSNorm, QK-norm included
            "attention_bias": cfg.bias,  # q, k, v and o
            "mlp_bias": cfg.bias,  # gate, up and down (Llama only; Qwen3's MLP has none)
        }
    )


def _qwen3_config(cfg: ModelConfig, target: Target) -> dict:
    config = _llama_config(cfg, target)
    del config["mlp_bias"]
    return config | {"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg.layers}


def _starcoder2_config(cfg: ModelConfig, target: Target) -> dict:
    return (
        _shape(cfg, target)
        | _rope(cfg)
        | {
            "hidden_act": "gelu_pytorch_tanh",  # GPT-2's tanh GELU
            "norm_epsilon": 1e-5,  # LayerNorm
            "use_bias": cfg.bias,  # q, k, v, o, c_fc and c_proj; its LayerNorms always have a shift (zero without biases)
            "sliding_window": None,
            "residual_dropout": 0.0,
            "embedding_dropout": 0.0,
        }
    )


def _stablelm_config(cfg: ModelConfig, target: Target) -> dict:
    return (
        _shape(cfg, target)
        | _rope(cfg, partial_rotary_factor=1.0)
        | {
            "partial_rotary_factor": 1.0,  # every channel rotates, as in modern-gpt (the class default is 0.25)
            "hidden_act": "silu",
            "layer_norm_eps": 1e-5,  # LayerNorm, with a shift that is zero here
            "use_qkv_bias": False,
            "qk_layernorm": False,
            "use_parallel_residual": False,
            "hidden_dropout": 0.0,
        }
    )


def _arcee_config(cfg: ModelConfig, target: Target) -> dict:
    return (
        _shape(cfg, target)
        | _rope(cfg)
        | {
            "hidden_act": "gelu_pytorch_tanh",  # up -> GELU -> down, as modern-gpt's classic MLP (the class default is relu2)
            "rms_norm_eps": 1e-5,
            "attention_bias": cfg.bias,
            "mlp_bias": cfg.bias,
        }
    )


def _apertus_config(cfg: ModelConfig, target: Target) -> dict:
    return (
        _shape(cfg, target)
        | _rope(cfg)
        | {
            "hidden_act": "gelu_pytorch_tanh",  # the class default is xIELU
            "rms_norm_eps": 1e-5,  # the block norms and the per-head QK-norm
            "attention_bias": False,
        }
    )


@dataclass(frozen=True)
class Target:
    """A transformers class: the component states it holds, how each tensor maps, its config.json."""

    name: str
    model_type: str
    holds: dict[str, str]  # component -> CLASSIC, MODERN or EITHER; a component not named: CLASSIC only
    rules: list[Rule]
    config: Callable[[ModelConfig, Target], dict]
    # Their weights whose bias the class always has: a model without biases exports zeros there (same function).
    zero_biases: str = ""  # a regular expression over their tensor names; empty: the class has none it must fill

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
        # LayerNorm, a learned table, the GELU MLP, plain q.k; gqa's K/V heads are repeated, one per query head
        {"no_bias": EITHER, "gqa": EITHER},
        GPT2_RULES,
        _gpt2_config,
        zero_biases=r"transformer\.(h\.\d+\.\w+(\.c_\w+)?|ln_f)\.weight",  # Conv1D and LayerNorm always have one
    ),
    Target(
        "Starcoder2ForCausalLM",
        "starcoder2",
        {
            "rope": MODERN,
            "no_bias": EITHER,
            "gqa": EITHER,
        },  # LayerNorm, the tanh-GELU MLP, biases on every Linear or on none
        STARCODER2_RULES,
        _starcoder2_config,
        zero_biases=r"model\.(layers\.\d+\.\w+_layernorm|norm)\.weight",  # its LayerNorms always shift
    ),
    Target(
        "StableLmForCausalLM",
        "stablelm",
        # LayerNorm, RoPE on every channel, SwiGLU; its MLP and o_proj never have biases: no_bias models only
        {"rope": MODERN, "swiglu": MODERN, "no_bias": MODERN, "gqa": EITHER},
        LLAMA_RULES,
        _stablelm_config,
        zero_biases=r"model\.(layers\.\d+\.\w+_layernorm|norm)\.weight",
    ),
    Target(
        "ArceeForCausalLM",
        "arcee",
        {
            "rmsnorm": MODERN,
            "rope": MODERN,
            "no_bias": EITHER,
            "gqa": EITHER,
        },  # Llama with an up -> activation -> down MLP
        ARCEE_RULES,
        _arcee_config,
    ),
    Target(
        "ApertusForCausalLM",
        "apertus",
        # Arcee's shape with per-head QK-norm before RoPE; its MLP never has biases: no_bias models only
        {"rmsnorm": MODERN, "rope": MODERN, "no_bias": MODERN, "gqa": EITHER, "qk_norm": MODERN},
        APERTUS_RULES,
        _apertus_config,
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
        LLAMA_RULES,
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


# Every exportable combination of components.COMPONENTS -> the class that holds it exactly.
TABLE = _table()


def _piece(component: str, on: bool) -> str:
    """The piece a component's state stands for, e.g. 'RMSNorm (rmsnorm)' or 'LayerNorm (rmsnorm off)'."""
    summary = COMPONENT_SUMMARY.get(component, "")
    classic, _, modern = summary.partition(" -> ")
    if on:
        return f"{modern or component} ({component})"
    return f"{classic or 'the classic piece'} ({component} off)"


def target_for(cfg: ModelConfig) -> Target:
    """The transformers class that holds this model exactly. Else a UserError names the pieces that have none."""
    if cfg.extra_components:  # your own piece: transformers has no class that holds it
        mine = ", ".join(f"{n} (from the plugin {PLUGINS[n].source})" for n in cfg.extra_components)
        raise UserError(f"{mine} does not export: a plugin component has no transformers counterpart.")
    components = cfg.components
    if frozenset(components) in TABLE:
        return TABLE[frozenset(components)]
    by_distance = sorted(((len(t.mismatches(components)), i, t) for i, t in enumerate(TARGETS)), key=lambda x: x[:2])
    closest = [t for d, _, t in by_distance if d == by_distance[0][0]]
    parts = [f"{' and '.join(_piece(c, on) for c, on in t.mismatches(components))} in {t.name}" for t in closest]
    exportable = "; ".join(f"{t.name} {t.describe()}" for t in TARGETS)
    raise UserError(
        f"{label(components)} does not export: no counterpart for {'; nor for '.join(parts)} "
        f"(the closest transformers class{'es' if len(closest) > 1 else ''}); what exports, "
        f"in each of the {len(TARGETS)} classes checked: {exportable}."
    )


def architecture(cfg: ModelConfig) -> str:
    """The transformers class name, or a UserError naming the piece that has no counterpart."""
    return target_for(cfg).name


def _repeat_kv(tensor: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """A qkv weight or bias, each shared K/V head repeated for the query heads it serves. Query head h reads K/V
    head h // (heads / kv_heads), as torch's enable_gqa and modern-gpt's fallback do."""
    group, hd = cfg.heads // cfg.n_kv_heads, cfg.head_dim
    q, k, v = tensor.split([cfg.heads * hd, cfg.n_kv_heads * hd, cfg.n_kv_heads * hd])
    per_head = [t.reshape(cfg.n_kv_heads, hd, *t.shape[1:]).repeat_interleave(group, 0) for t in (k, v)]
    return torch.cat([q, *(t.reshape(cfg.heads * hd, *t.shape[2:]) for t in per_head)])


def map_tensors(model: GPT, target: Target) -> dict[str, torch.Tensor]:
    """The model's tensors under the class's names. A tensor no rule maps is refused by name."""
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
        elif how in (REPEAT_KV, REPEAT_KV_T):
            tensor = _repeat_kv(tensor, cfg)
            out[key] = tensor.t() if how == REPEAT_KV_T else tensor
        else:
            out[key] = tensor.t() if how == TRANSPOSE else tensor
    if target.zero_biases:
        # Conv1D weights are (in, out) and LayerNorm gains (dim,): the bias has the last size either way.
        for key, t in list(out.items()):
            if re.fullmatch(target.zero_biases, key):
                out.setdefault(key.removesuffix("weight") + "bias", torch.zeros(t.shape[-1], dtype=t.dtype))
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in out.items()}


# ---------------------------------------------------------------------------
# The tokenizer, as the `tokenizers` library writes it, so that AutoTokenizer loads it.
# ---------------------------------------------------------------------------
def _byte_symbols() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte value, as the ByteLevel pre-tokenizer and decoder use."""
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
        # Its entry is '<unk>', which no single character equals (U+FFFD may be a character of the text, with
        # its own id), and the decoder turns it into U+FFFD.
        vocab = {"<unk>": 0, **{c: i + 1 for i, c in enumerate(tokenizer.chars)}}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character alone
        tok.decoder = decoders.Sequence([decoders.Replace("<unk>", tokenizer.UNKNOWN), decoders.Fuse()])
        return tok
    if tokenizer.kind == "byte":
        vocab = {s: b for b, s in _byte_symbols().items()}  # id = byte value
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
        return tok
    tok = Tokenizer.from_str(tokenizer.tok.to_str())
    tok.post_processor = None  # modern-gpt encodes without added special tokens (no BOS): so must transformers
    tok.no_truncation()  # modern-gpt's ids are the whole text's: a file's truncation or padding must not cut or pad
    tok.no_padding()
    return tok


def special_tokens(tokenizer) -> dict[str, tuple[str, int]]:
    """{'bos': (token, id), 'eos': (token, id)} as a pretrained tokenizer.json defines them. They are the special
    tokens its post-processor puts before (bos) and after (eos) the text. The post-processor is a
    TemplateProcessing (Llama's '<s> $A'), or a RobertaProcessing or BertProcessing (cls, sep). A role the file
    does not define is absent: no name is guessed.

    A role counts only when its id is one of the file's special added tokens. It is named by that token. A
    template may call id 1 '[BOS]' where the vocabulary says '<s>'. transformers would add '[BOS]' as a new id,
    outside the embedding. A template may also put a plain token before the text. Naming it bos would make it
    special, and split text anew."""
    tok = getattr(tokenizer, "tok", None)
    if tok is None:
        return {}
    special = {i: t.content for i, t in tok.get_added_tokens_decoder().items() if t.special}
    found: dict[str, tuple[str, int]] = {}

    def add(role: str, i) -> None:
        if isinstance(i, int) and not isinstance(i, bool) and i in special:
            found.setdefault(role, (special[i], i))

    def visit(proc) -> None:
        if not isinstance(proc, dict):
            return
        if proc.get("type") == "Sequence":
            for p in proc.get("processors") or []:
                visit(p)
        elif proc.get("type") in ("RobertaProcessing", "BertProcessing"):
            for role, key in (("bos", "cls"), ("eos", "sep")):
                pair = proc.get(key)
                if isinstance(pair, list) and len(pair) == 2:
                    add(role, pair[1])
        elif proc.get("type") == "TemplateProcessing":
            ids = {k: v.get("ids") for k, v in (proc.get("special_tokens") or {}).items() if isinstance(v, dict)}
            pieces = [p for p in proc.get("single") or [] if isinstance(p, dict)]
            text_at = next((i for i, p in enumerate(pieces) if "Sequence" in p), None)
            if text_at is None:
                return
            for role, side in (("bos", pieces[:text_at]), ("eos", pieces[text_at + 1 :][::-1])):
                token = next((p["SpecialToken"].get("id") for p in side if "SpecialToken" in p), None)
                if isinstance(ids.get(token), list) and len(ids[token]) == 1:  # one id: a token, not a phrase
                    add(role, ids[token][0])

    visit(json.loads(tok.to_str()).get("post_processor"))
    return found


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
            **{f"{role}_token": token for role, (token, _) in special_tokens(tokenizer).items()},
        },
    )


def write_model(model: GPT, folder: Path, target: Target, tokenizer=None) -> None:
    """config.json and model.safetensors for this class. With the tokenizer's bos and eos ids, when it defines them."""
    tensors = map_tensors(model, target)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "model.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    special = {f"{role}_token_id": i for role, (_, i) in special_tokens(tokenizer).items()}
    write_json(folder / "config.json", target.config(model.config, target) | special)


# ---------------------------------------------------------------------------
# --force: a file that transformers reads and this export does not write would change what the folder loads as
# (a stale generation_config.json changes what generate() does). Each is removed; any other file is refused.
# ---------------------------------------------------------------------------
WRITTEN = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
# What transformers 5 reads from a model folder besides those (its file-name constants and tokenizer file names):
TRANSFORMERS_READS = (
    "generation_config.json",  # generate()'s defaults: eos, max_length, sampling, ...
    "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json",
    "tf_model.h5", "flax_model.msgpack", "model.ckpt.index",  # other weights, shards and their indexes
    "adapter_config.json", "adapter_model.safetensors", "adapter_model.bin",  # a PEFT adapter, loaded on top
    "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json",
    "additional_chat_templates", "vocab.json", "merges.txt", "vocab.txt", "tekken.json", "*.tiktoken",
    "tokenizer.model", "spiece.model", "spm.model", "sentencepiece.model", "sentencepiece.bpe.model", "tiktoken.model",
    "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
    "audio_tokenizer_config.json",
)  # fmt: skip
# What transformers never reads, kept: a model card, git's files, the hub's download cache.
KEPT = ("*.md", "LICENSE*", ".git*", ".cache", ".DS_Store")


def _stale_and_foreign(folder: Path) -> tuple[list[Path], list[Path]]:
    """(stale, foreign). Stale: what transformers would read, which this export replaces or removes. Foreign:
    what it does not know, and refuses."""
    if not folder.is_dir():
        return [], []
    stale, foreign = [], []
    for path in sorted(folder.iterdir()):
        name, is_dir = path.name, path.is_dir() and not path.is_symlink()
        if any(fnmatch.fnmatchcase(name, k) for k in KEPT):
            continue
        if name == "additional_chat_templates" or re.fullmatch(r"\..+\.\d+-[0-9a-f]+\.tmp", name):
            stale.append(path)  # a folder transformers reads, and an interrupted write's temporary file
        elif any(fnmatch.fnmatchcase(name, k) for k in (*WRITTEN, *TRANSFORMERS_READS)):
            (foreign if is_dir else stale).append(path)
        elif not is_dir:  # another folder inside is never read (transformers reads a subfolder only when told)
            foreign.append(path)
    return stale, foreign


def clear_for_export(folder: Path) -> list[str]:
    """Remove from `folder` every file transformers would read; a file this export writes is rewritten anyway. A
    file it does not know is refused before anything is removed. Returns the names removed."""
    stale, foreign = _stale_and_foreign(folder)
    if foreign:
        names = ", ".join(
            (p.name if p.name.isprintable() else repr(p.name)) + ("/" if p.is_dir() else "") for p in foreign[:5]
        )
        raise UserError(
            f"{folder} holds {names}{' and more' if len(foreign) > 5 else ''}, which modern-gpt export does not "
            f"write and transformers may read; move {'it' if len(foreign) == 1 else 'them'} away, or choose another --hf."
        )
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return [p.name for p in stale if p.name not in WRITTEN]


def export_hf(model: GPT, folder: Path, tokenizer=None) -> str:
    """Write the folder, with the tokenizer when one is given. Returns the transformers class it loads as.
    clear_for_export first removes what transformers would read, and refuses anything unknown."""
    target = target_for(model.config)
    folder = Path(folder)
    try:
        clear_for_export(folder)
        write_model(model, folder, target, tokenizer)
        if tokenizer is not None:
            write_tokenizer(tokenizer, folder, model.config.context)
    except OSError as e:
        raise UserError(f"cannot write {folder}: {e.strerror or e}; choose another --hf folder.") from None
    return target.name
