"""Write a trained model as a Hugging Face transformers model folder (config.json + model.safetensors).

All-classic is exactly GPT-2 (GPT2LMHeadModel). rmsnorm + rope + swiglu + no_bias,
with or without gqa, is exactly Llama (LlamaForCausalLM). Other combinations have a
piece with no counterpart in either class, and are refused with a sentence naming it.
Nothing here imports transformers: the folder is plain files.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from .errors import UserError
from .files import atomic_path, write_json
from .model import GPT, ModelConfig

LLAMA = ("rmsnorm", "rope", "swiglu", "no_bias")


def architecture(cfg: ModelConfig) -> str:
    """'gpt2' or 'llama', or a UserError naming the piece that has no counterpart."""
    comps = set(cfg.components)
    if not comps:
        return "gpt2"
    if set(LLAMA) <= comps and "qk_norm" not in comps:
        return "llama"
    if "qk_norm" in comps:
        raise UserError(
            "qk_norm has no counterpart in LlamaForCausalLM or GPT2LMHeadModel; export a model trained without it."
        )
    missing = [c for c in LLAMA if c not in comps]
    raise UserError(
        f"{'+'.join(cfg.components)} mixes classic and modern pieces: LlamaForCausalLM needs {', '.join(missing)} as well, "
        "and GPT2LMHeadModel has none of them; only all-classic and rmsnorm+rope+swiglu+no_bias (with or without gqa) export."
    )


def _gpt2(model: GPT) -> tuple[dict, dict]:
    cfg = model.config
    sd = model.state_dict()
    out = {"transformer.wte.weight": sd["tok_emb.weight"], "transformer.wpe.weight": sd["pos_emb.weight"]}
    # GPT-2's Conv1D stores a Linear's weight transposed: (in, out).
    names = {
        "norm1": "ln_1",
        "norm2": "ln_2",
        "attn.qkv": "attn.c_attn",
        "attn.proj": "attn.c_proj",
        "mlp.fc": "mlp.c_fc",
        "mlp.proj": "mlp.c_proj",
    }
    for i in range(cfg.layers):
        for ours, theirs in names.items():
            weight = sd[f"blocks.{i}.{ours}.weight"]
            out[f"transformer.h.{i}.{theirs}.weight"] = weight if "norm" in ours else weight.t()
            out[f"transformer.h.{i}.{theirs}.bias"] = sd[f"blocks.{i}.{ours}.bias"]
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = sd["norm_f.weight"], sd["norm_f.bias"]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
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
        "tie_word_embeddings": cfg.tie_embeddings,
        "torch_dtype": "float32",
    }
    return out, config


def _llama(model: GPT) -> tuple[dict, dict]:
    cfg = model.config
    sd = model.state_dict()
    q, kv = cfg.heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out = {"model.embed_tokens.weight": sd["tok_emb.weight"], "model.norm.weight": sd["norm_f.weight"]}
    for i in range(cfg.layers):
        p, h = f"blocks.{i}.", f"model.layers.{i}."
        wq, wk, wv = sd[p + "attn.qkv.weight"].split([q, kv, kv])
        out |= {
            h + "input_layernorm.weight": sd[p + "norm1.weight"],
            h + "self_attn.q_proj.weight": wq,
            h + "self_attn.k_proj.weight": wk,
            h + "self_attn.v_proj.weight": wv,
            h + "self_attn.o_proj.weight": sd[p + "attn.proj.weight"],
            h + "post_attention_layernorm.weight": sd[p + "norm2.weight"],
            h + "mlp.gate_proj.weight": sd[p + "mlp.gate.weight"],
            h + "mlp.up_proj.weight": sd[p + "mlp.up.weight"],
            h + "mlp.down_proj.weight": sd[p + "mlp.proj.weight"],
        }
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.context,
        "rms_norm_eps": 1e-5,
        "rope_theta": cfg.rope_base,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "torch_dtype": "float32",
    }
    return out, config


def export_hf(model: GPT, folder: Path) -> str:
    """Write the folder; returns the transformers class it loads as."""
    arch = architecture(model.config)
    tensors, config = _gpt2(model) if arch == "gpt2" else _llama(model)
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in tensors.items()}
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / "model.safetensors") as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt"})
        write_json(folder / "config.json", config)
    except OSError as e:
        raise UserError(f"cannot write {folder}: {e.strerror or e}; choose another --hf folder.") from None
    return config["architectures"][0]
