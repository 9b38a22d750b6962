"""explain: every count it prints equals the transformers model built from the same config (on the meta device,
no memory, no download), or explain says what it does not count; components, biases and RoPE read as the class
reads them; model types it does not know are not guessed at."""

import copy
import json

import pytest
import torch

from modern_gpt.core.components import COMPONENTS
from modern_gpt.core.config import ModelConfig, param_counts
from modern_gpt.core.settings import shipped_configs
from modern_gpt.hf.explain import DETECTORS, explain_config, read_config
from modern_gpt.hf.export import CLASSIC, TABLE, TARGETS, export_hf
from modern_gpt.hf.families import FAMILIES, WRAPPERS
from modern_gpt.model.gpt import GPT
from modern_gpt.views.render import explain_lines

# The components Qwen3 has: all that export's Qwen3ForCausalLM can hold.
QWEN3 = [c for c in COMPONENTS if next(t for t in TARGETS if t.model_type == "qwen3").state(c) != CLASSIC]
SHIPPED = sorted((shipped_configs() / "hf").glob("*.json"))
NOT_TEXT = ("vision_tower", "multi_modal_projector")  # a multimodal model's parts explain says it does not count


# ---------------------------------------------------------------------------
# The independent reference: transformers' own model, built from the config on the meta device
# ---------------------------------------------------------------------------
def reference(config: dict) -> dict:
    """What transformers builds: parameters (the text model's and the rest), KV-cache values per token, RoPE bases."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (modern-gpt[hf])")
    transformers.logging.set_verbosity_error()
    hf_config = transformers.AutoConfig.for_model(**copy.deepcopy(config))  # it edits nested dicts in place
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    text = sum(p.numel() for n, p in model.named_parameters() if not any(part in n for part in NOT_TEXT))
    text_config = hf_config.get_text_config()
    rope = getattr(text_config, "rope_parameters", None) or {}
    return {
        "params": text,
        "other_params": sum(p.numel() for p in model.parameters()) - text,
        "kv_values": 2 * sum(_kv_width(name, m, model) for name, m in model.named_modules() if "vision" not in name),
        "rope_base": rope.get("full_attention", rope).get("rope_theta"),
        "local_base": rope.get("sliding_attention", {}).get("rope_theta"),
        "class": type(model).__name__,
    }


def _kv_width(name: str, module, model) -> int:
    """How many key values one layer caches per token, read off the projection that makes them."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "k_proj":
        return module.out_features
    if leaf == "query_key_value":  # GPT-NeoX: q, k, v fused, one K/V head per query head
        return module.out_features // 3
    if leaf == "c_attn":  # GPT-2's Conv1D: weight is (in, 3 * out)
        return module.weight.shape[1] // 3
    if leaf == "qkv_proj":  # Phi-3: q, k, v fused; q is as wide as o_proj's input
        o_proj = model.get_submodule(name.rsplit(".", 1)[0] + ".o_proj")
        return (module.out_features - o_proj.in_features) // 2
    return 0


def mismatches(config: dict, info: dict) -> list[str]:
    """Every count and RoPE base explain gives that transformers' model does not match ([] when all hold)."""
    ref = reference(config)
    out = []
    if info["params"] != ref["params"]:
        out.append(f"params {info['params']} != transformers' {ref['params']}")
    if ref["other_params"] and not info["params_not_counted"]:  # a vision tower left out must be said
        out.append(f"{ref['other_params']} parameters outside the text model, and explain does not say so")
    width = torch.tensor([], dtype=getattr(torch, info["dtype"])).element_size()  # bytes by torch, not explain
    if info["kv_cache_bytes_per_token"] != ref["kv_values"] * width:
        out.append(f"KV bytes {info['kv_cache_bytes_per_token']} != transformers' {ref['kv_values'] * width}")
    s = info["shape"]
    if s["rope"] and s["rope_base"] != ref["rope_base"]:
        out.append(f"RoPE base {s['rope_base']} != transformers' {ref['rope_base']}")
    if s.get("rope_local_base") != ref["local_base"]:
        out.append(f"sliding-window RoPE base {s.get('rope_local_base')} != transformers' {ref['local_base']}")
    return out


# ---------------------------------------------------------------------------
# Configs: the shipped ones, published shapes, and small ones that vary every field a class reads
# ---------------------------------------------------------------------------
PUBLISHED = {
    # name: (config, the count its model card or paper gives; None where the test asserts transformers' only)
    "mistral-7b": (
        {
            "model_type": "mistral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 32768,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "vocab_size": 32000,
            "tie_word_embeddings": False,
        },
        7_241_732_096,
    ),
    "qwen2-0.5b": (
        {
            "model_type": "qwen2",
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "rope_theta": 1000000.0,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
        },
        494_032_768,
    ),
    "gemma-2b": (
        {
            "model_type": "gemma",
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_hidden_layers": 18,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "hidden_act": "gelu",
            "vocab_size": 256000,
        },
        2_506_172_416,
    ),
    "gemma-3-1b": (  # the older rope format: rope_theta for full attention, rope_local_base_freq for the window
        {
            "model_type": "gemma3_text",
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "num_hidden_layers": 26,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "query_pre_attn_scalar": 256,
            "rope_theta": 1000000,
            "rope_local_base_freq": 10000,
            "rope_scaling": None,
            "sliding_window": 512,
            "vocab_size": 262144,
        },
        999_885_952,
    ),
    "olmo-2-1b": (
        {
            "model_type": "olmo2",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "rope_theta": 500000,
            "vocab_size": 100352,
            "tie_word_embeddings": False,
        },
        None,
    ),
    "phi-3-mini-4k": (
        {
            "model_type": "phi3",
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "original_max_position_embeddings": 4096,
            "sliding_window": 2047,
            "vocab_size": 32064,
            "pad_token_id": 32000,
        },
        3_821_079_552,
    ),
    "phi-3-mini-128k": (  # longrope: a rescaling modern-gpt has no counterpart for
        {
            "model_type": "phi3",
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48},
            "vocab_size": 32064,
            "pad_token_id": 32000,
        },
        3_821_079_552,
    ),
    "pythia-160m": (
        {
            "model_type": "gpt_neox",
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "max_position_embeddings": 2048,
            "rotary_emb_base": 10000,
            "rotary_pct": 0.25,
            "use_parallel_residual": True,
            "vocab_size": 50304,
            "tie_word_embeddings": False,
        },
        162_322_944,
    ),
    "starcoder2-3b": (
        {
            "model_type": "starcoder2",
            "hidden_size": 3072,
            "intermediate_size": 12288,
            "num_hidden_layers": 30,
            "num_attention_heads": 24,
            "num_key_value_heads": 2,
            "rope_theta": 999999.4420358813,
            "sliding_window": 4096,
            "use_bias": True,
            "vocab_size": 49152,
        },
        None,
    ),
    "stablelm-2-1.6b": (
        {
            "model_type": "stablelm",
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 24,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "partial_rotary_factor": 0.25,
            "use_qkv_bias": True,
            "vocab_size": 100352,
            "tie_word_embeddings": False,
        },
        None,
    ),
}

SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "vocab_size": 100,
    "pad_token_id": None,  # the class defaults (Phi-3's 32000) lie outside a 100-token vocabulary
    "bos_token_id": None,
    "eos_token_id": None,
}
DROP = object()  # a field left out of the file


def with_fields(base: dict, extra: dict) -> dict:
    return {k: v for k, v in (base | extra).items() if v is not DROP}


# Each field a class may read, on its own: explain must follow the ones the class reads and ignore the others.
VARIATIONS = [
    {},
    {"head_dim": 32},
    {"num_key_value_heads": 2},
    {"num_key_value_heads": 1, "head_dim": 8},
    {"tie_word_embeddings": True},
    {"tie_word_embeddings": False},
    {"attention_bias": True},
    {"attention_bias": False},
    {"mlp_bias": True},
    {"use_bias": False},
    {"use_qkv_bias": True},
    {"qk_layernorm": True},
    {"use_qk_norm": True},
    {"use_parallel_residual": True},
    {"rope_theta": 5e5},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 3e5}},
    {"rope_theta": 7e5, "rope_parameters": {"rope_type": "default", "rope_theta": 3e5}},  # the block wins
    {"rope_scaling": {"rope_type": "linear", "factor": 4.0}, "rope_theta": 2e5},
    {"hidden_act": "gelu", "hidden_activation": "gelu"},
    {"intermediate_size": DROP, "vocab_size": DROP},  # left out: the class defaults
]
SMALL_CASES = {
    f"{kind}-{'-'.join(k if v is DROP else f'{k}={v}' for k, v in extra.items()) or 'plain'}": with_fields(
        {"model_type": kind} | SMALL, extra
    )
    for kind in FAMILIES
    if kind != "gpt2"
    for extra in VARIATIONS
    if not (kind == "phi3" and "rope_scaling" in extra)  # Phi3Config refuses any rescaling but longrope
}
SMALL_CASES |= {
    "gpt2-plain": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 32},
    "gpt2-hf-names": {"model_type": "gpt2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
    "gpt2-n_inner": {"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "n_inner": 40, "vocab_size": 9},
    "gpt2-untied-kv-field": {
        "model_type": "gpt2",
        "n_embd": 64,
        "n_layer": 1,
        "n_head": 4,
        "num_key_value_heads": 1,  # GPT-2 does not read it
        "tie_word_embeddings": False,
        "vocab_size": 9,
    },
    "gemma3-multimodal-small": {
        "model_type": "gemma3",
        "tie_word_embeddings": False,  # the wrapper's own switch ties its output layer, not text_config's
        "text_config": {"model_type": "gemma3_text"} | SMALL | {"head_dim": 16, "tie_word_embeddings": True},
        "vision_config": {
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "intermediate_size": 48,
            "image_size": 28,
            "patch_size": 14,
        },
        "mm_tokens_per_image": 4,
    },
    "gemma3-rope-parameters-5x": {"model_type": "gemma3_text"}
    | SMALL
    | {
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 2e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 2e4},
        }
    },
    "apertus-rope-theta": {"model_type": "apertus"} | SMALL | {"rope_theta": 5e5, "hidden_act": "relu2"},
    "neox-rope-theta": {"model_type": "gpt_neox"} | SMALL | {"rope_theta": 3e4},  # NeoX reads rotary_emb_base
    "neox-rotary-emb-base": {"model_type": "gpt_neox"} | SMALL | {"rotary_emb_base": 3e4, "rotary_pct": 0.5},
}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_counts_as_transformers_builds_it(path):
    config = read_config(path)
    assert mismatches(config, explain_config(config)) == []


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_shapes_count_as_transformers_builds_them(name):
    config, published = PUBLISHED[name]
    info = explain_config(config)
    assert mismatches(config, info) == []
    if published is not None:  # and the reference itself is right: the count the model's authors give
        assert info["params"] == published


@pytest.mark.parametrize("name", SMALL_CASES)
def test_each_field_a_class_reads_is_followed_and_the_others_ignored(name):
    config = SMALL_CASES[name]
    assert mismatches(config, explain_config(config)) == []


def test_every_family_and_wrapper_is_covered_by_these_tests():
    """A family added to explain without a config here would go unchecked."""
    tested = {c.get("model_type") for c in SMALL_CASES.values()} | {c["model_type"] for c, _ in PUBLISHED.values()}
    tested |= {read_config(p).get("model_type") for p in SHIPPED}
    assert set(FAMILIES) | set(WRAPPERS) <= tested
    for kind in ("mistral", "qwen2", "gemma", "gemma2", "gemma3", "olmo2", "phi3", "gpt_neox"):  # issue 21's list
        assert kind in tested


# ---------------------------------------------------------------------------
# Negative controls: the reference catches each misreading that explain used to make
# ---------------------------------------------------------------------------
def test_negative_control_the_reference_catches_the_old_misreadings():
    gemma2 = read_config(shipped_configs() / "hf" / "gemma2-style.json")
    assert reference(gemma2)["params"] == 2_614_341_888  # the published count of Gemma-2-2B
    # read as a Llama (the old guess: untied, two norms per block) it is the old, wrong number, and caught
    as_llama = explain_config(gemma2 | {"model_type": "llama"})
    assert as_llama["params"] == 3_204_046_080
    assert any("params" in m for m in mismatches(gemma2, as_llama))
    # Gemma-3 read without its QK-norm (as Gemma-2): caught
    gemma3 = PUBLISHED["gemma-3-1b"][0]
    assert any("params" in m for m in mismatches(gemma3, explain_config(gemma3 | {"model_type": "gemma2"})))
    # a Llama-3 config in transformers 5.x's format, read as if rope_parameters were not there: base 10000, caught
    llama = read_config(shipped_configs() / "hf" / "llama31-rope-parameters.json")
    stripped = {k: v for k, v in llama.items() if k != "rope_parameters"}
    assert explain_config(stripped)["shape"]["rope_base"] == 10000.0
    assert any("RoPE base" in m for m in mismatches(llama, explain_config(stripped)))
    # a multimodal count that kept quiet about the vision tower: caught
    multimodal = read_config(shipped_configs() / "hf" / "gemma3-multimodal-style.json")
    quiet = explain_config(multimodal) | {"params_not_counted": ""}
    assert any("outside the text model" in m for m in mismatches(multimodal, quiet))
    # the KV cache at the wrong width: caught
    wrong_kv = explain_config(llama) | {"kv_cache_bytes_per_token": 2 * 32 * 32 * 128 * 2}
    assert any("KV bytes" in m for m in mismatches(llama, wrong_kv))


# ---------------------------------------------------------------------------
# What explain says
# ---------------------------------------------------------------------------
def test_rope_parameters_give_the_base_and_the_flags():
    llama = explain_config(read_config(shipped_configs() / "hf" / "llama31-rope-parameters.json"))
    assert llama["shape"]["rope_base"] == 500000.0
    assert llama["flags"][llama["flags"].index("--rope-base") + 1] == "500000"
    assert any("RoPE is rescaled (llama3, factor 8)" in n for n in llama["notes"])
    field = next(f for f in llama["fields"] if f["field"] == "rope_parameters")
    assert field["component"] == "rope" and "500000" in field["meaning"]
    gemma3 = explain_config(read_config(shipped_configs() / "hf" / "gemma3-multimodal-style.json"))
    assert (gemma3["shape"]["rope_base"], gemma3["shape"]["rope_local_base"]) == (1e6, 1e4)
    assert any("1000000 in the full-attention layers and 10000 in the sliding-window" in n for n in gemma3["notes"])
    pythia = explain_config(PUBLISHED["pythia-160m"][0])
    assert any("RoPE rotates 25% of each head's channels" in n for n in pythia["notes"])
    overridden = explain_config(
        SMALL | {"model_type": "llama", "rope_theta": 7e5, "rope_parameters": {"rope_theta": 3e5}}
    )
    field = next(f for f in overridden["fields"] if f["field"] == "rope_theta")
    assert "which wins" in field["meaning"] and overridden["shape"]["rope_base"] == 3e5


def test_gemma_gelu_is_reported_as_geglu_not_swiglu():
    for config in (PUBLISHED["gemma-2b"][0], read_config(shipped_configs() / "hf" / "gemma2-style.json")):
        info = explain_config(config)
        assert "swiglu" not in info["components"]
        assert any("the MLP is GeGLU" in n and "components leave swiglu out" in n for n in info["notes"])
        assert "--swiglu" in info["flags"]  # the closest variant: the same three matrices
        rows = [f for f in info["fields"] if f["field"] in ("hidden_act", "hidden_activation")]
        act = [f for f in rows if not f["meaning"].startswith("ignored")]
        assert len(act) == 1 and "GeGLU" in act[0]["meaning"] and "SwiGLU" not in act[0]["meaning"]
    # Gemma-2 reads hidden_activation: its hidden_act is named as ignored, whatever it says
    gemma2 = explain_config(SMALL | {"model_type": "gemma2", "hidden_act": "silu"})
    assert "swiglu" not in gemma2["components"]
    row = next(f for f in gemma2["fields"] if f["field"] == "hidden_act")
    assert row["meaning"] == "ignored: Gemma2ForCausalLM reads hidden_activation."
    assert "swiglu" in explain_config(PUBLISHED["mistral-7b"][0])["components"]  # gated SiLU is SwiGLU
    arcee = explain_config(SMALL_CASES["arcee-plain"])  # two matrices, no gate
    assert "swiglu" not in arcee["components"] and "--swiglu" not in arcee["flags"]


def test_gemma3_keeps_its_qk_norm_and_a_multimodal_config_is_read_under_text_config():
    info = explain_config(read_config(shipped_configs() / "hf" / "gemma3-multimodal-style.json"))
    assert info["family"] == "Gemma-3 (multimodal)" and "qk_norm" in info["components"]
    assert info["params_not_counted"] == "the vision tower and projector"
    assert any("vision tower" in n and "not counted" in n for n in info["notes"])
    assert any("vocab_size is left out" in n and "262208" in n for n in info["notes"])  # the file leaves it out
    assert any(f["field"] == "text_config.hidden_size" for f in info["fields"])
    lines = explain_lines(info)
    assert "parameters: 3,880,263,168 (not counted: the vision tower and projector)" in lines


@pytest.mark.parametrize(
    "config,says",
    [
        (
            SMALL | {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2},
            "a mixture-of-experts model (num_local_experts, num_experts_per_tok)",
        ),
        (
            SMALL | {"model_type": "qwen3_moe", "num_experts": 8, "moe_intermediate_size": 32},
            "a mixture-of-experts model (num_experts, moe_intermediate_size)",
        ),
        (SMALL | {"model_type": "cohere", "use_qk_norm": True}, "explain does not know what its transformers class"),
        (SMALL, "explain does not know what its transformers class"),  # no model_type at all
        (
            {"model_type": "llava", "text_config": {"model_type": "llama"} | SMALL},
            "unknown model_type 'llava' (its text model: 'llama')",
        ),
    ],
    ids=["mixtral", "qwen3-moe", "cohere", "no-model-type", "llava"],
)
def test_a_model_type_explain_does_not_know_is_not_guessed(config, says, capsys, monkeypatch, tmp_path):
    from tests.clihelp import run_main

    info = explain_config(config)
    assert info["params"] is None and info["kv_cache_bytes_per_token"] is None and info["flags"] is None
    assert says in info["params_not_counted"]
    assert {"rmsnorm", "swiglu", "no_bias"} <= set(info["cannot_tell"])  # only its class could say
    assert not set(info["cannot_tell"]) & set(info["components"])
    assert info["biases"]["norms"] is None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = run_main(capsys, monkeypatch, "explain", path)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "parameters: not counted (" in flat and "cannot tell:" in flat and "KV cache:" not in flat
    code, out, err = run_main(capsys, monkeypatch, "explain", path, "--as-flags")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "so it cannot tell" in err, err


def test_qk_norm_read_from_a_field_only_where_the_class_reads_it():
    cohere = explain_config(SMALL | {"model_type": "cohere", "use_qk_norm": True})
    field = next(f for f in cohere["fields"] if f["field"] == "use_qk_norm")
    assert field["component"] == "qk_norm" and "qk_norm" in cohere["components"]
    # Llama's class does not read use_qk_norm: no QK-norm, the field named as ignored (it used to count gains)
    llama = explain_config(SMALL | {"model_type": "llama", "use_qk_norm": True})
    assert "qk_norm" not in llama["components"]
    assert any(n.startswith("use_qk_norm is ignored: LlamaForCausalLM does not read it") for n in llama["notes"])
    stablelm = explain_config(SMALL | {"model_type": "stablelm", "qk_layernorm": True})
    assert "qk_norm" in stablelm["components"] and any("LayerNorm of its own" in n for n in stablelm["notes"])


def test_qk_norm_qwen3_per_head_and_olmo2_over_the_projection():
    qwen3 = explain_config(read_config(shipped_configs() / "hf" / "qwen3-style.json"))
    assert qwen3["components"] == QWEN3 and set(DETECTORS) >= set(QWEN3)
    # Qwen3-0.6B's public shapes: 0.6B parameters, 0.44B of them outside the (tied) embedding
    assert qwen3["params"] == 596_049_920 and qwen3["params"] - 151936 * 1024 == 440_467_456
    assert qwen3["kv_cache_bytes_per_token"] == 2 * 28 * 8 * 128 * 2
    assert any("per head" in n for n in qwen3["notes"])
    assert any("head_dim 128 is not hidden_size / heads = 64" in n for n in qwen3["notes"])  # an explicit head_dim
    olmo2 = explain_config(SMALL | {"model_type": "olmo2", "num_key_value_heads": 2})
    assert "qk_norm" in olmo2["components"] and olmo2["family"] == "OLMo-2"
    assert any("whole projection" in n for n in olmo2["notes"])


def test_fields_a_class_ignores_are_named_and_not_counted():
    mistral = explain_config(SMALL | {"model_type": "mistral", "attention_bias": True, "mlp_bias": True})
    assert mistral["biases"] == dict.fromkeys(mistral["biases"], False) and "no_bias" in mistral["components"]
    row = next(f for f in mistral["fields"] if f["field"] == "attention_bias")
    assert row["component"] is None and row["meaning"] == "ignored: MistralForCausalLM does not read it."
    neox = explain_config(SMALL | {"model_type": "gpt_neox", "num_key_value_heads": 1, "head_dim": 8})
    assert neox["shape"]["kv_heads"] == 4 and neox["shape"]["head_dim"] == 16 and "gqa" not in neox["components"]
    qwen2 = explain_config(SMALL | {"model_type": "qwen2"})  # no num_key_value_heads: the class default, 32
    assert qwen2["shape"]["kv_heads"] == 32
    assert any("Qwen2ForCausalLM's class default is 32, more than the 4 query heads" in n for n in qwen2["notes"])
    odd = explain_config(SMALL | {"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]})
    assert any("the count is of LlamaForCausalLM" in n for n in odd["notes"])


def test_biases_are_reported_per_projection():
    qwen2 = explain_config(SMALL | {"model_type": "qwen2"})
    assert qwen2["biases"] == {"q, k, v": True, "o": False, "MLP": False, "norms": False}
    assert "no_bias" not in qwen2["components"] and any("q, k and v" in n for n in qwen2["notes"])
    llama = explain_config(SMALL | {"model_type": "llama", "attention_bias": True})
    assert llama["biases"] == {"q, k, v": True, "o": True, "MLP": False, "norms": False}
    assert any("biases on q, k, v, o only" in n for n in llama["notes"])
    gpt2 = explain_config(read_config(shipped_configs() / "hf" / "gpt2-style.json"))
    assert set(gpt2["biases"].values()) == {True}
    starcoder = explain_config(SMALL | {"model_type": "starcoder2", "use_bias": False})
    assert starcoder["biases"] == {"q, k, v": False, "o": False, "MLP": False, "norms": True}


@pytest.mark.parametrize(
    "config,line",
    [
        (
            read_config(shipped_configs() / "hf" / "gpt2-style.json"),
            "on every projection and norm (q, k, v, o, MLP, norms)",
        ),
        (PUBLISHED["pythia-160m"][0], "on every projection and norm (q, k, v, o, MLP, norms)"),
        (SMALL | {"model_type": "qwen2"}, "on q, k, v; none on o, MLP, norms"),
        (SMALL | {"model_type": "starcoder2", "use_bias": False}, "on norms; none on q, k, v, o, MLP"),
        (SMALL | {"model_type": "llama"}, "none"),
        (SMALL | {"model_type": "cohere", "attention_bias": False}, "none on q, k, v, o; cannot tell for MLP, norms"),
    ],
    ids=["gpt2", "pythia", "qwen2", "starcoder2", "llama", "unknown"],
)
def test_the_biases_line_is_a_whole_sentence(config, line):
    """GPT-2 and Pythia used to end with an empty 'none on'."""
    lines = [entry for entry in explain_lines(explain_config(config)) if entry.startswith("biases: ")]
    assert lines == [f"biases: {line}"]


def test_the_explain_command_prints_biases_and_notes(capsys, monkeypatch):
    from tests.clihelp import run_main

    code, out, err = run_main(capsys, monkeypatch, "explain", shipped_configs() / "hf" / "qwen3-style.json")
    assert code == 0, err
    assert f"components: {', '.join(QWEN3)}" in out
    assert "biases: none" in out and "parameters: 596,049,920" in out
    assert "note: Qwen3 (no field): q and k are RMS-normalised per head" in " ".join(out.split())
    code, out, err = run_main(
        capsys, monkeypatch, "explain", shipped_configs() / "hf" / "qwen3-style.json", "--as-flags"
    )
    assert "--qk-norm" in out.split()
    info = json.loads(
        run_main(capsys, monkeypatch, "explain", shipped_configs() / "hf" / "gpt2-style.json", "--format", "json")[1]
    )
    assert info["biases"] == {"q, k, v": True, "o": True, "MLP": True, "norms": True}
    code, out, err = run_main(
        capsys, monkeypatch, "explain", shipped_configs() / "hf" / "llama31-rope-parameters.json", "--as-flags"
    )
    assert code == 0 and out.split()[out.split().index("--rope-base") + 1] == "500000", err


def test_what_explain_cannot_count_is_said():
    cross = explain_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "add_cross_attention": True})
    assert cross["params"] is None and "cross-attention" in cross["params_not_counted"] and cross["flags"] is None
    odd_dtype = explain_config(SMALL | {"model_type": "llama", "torch_dtype": "float8_e4m3fn"})
    assert odd_dtype["dtype"] == "bfloat16" and any("float8_e4m3fn" in n for n in odd_dtype["notes"])


@pytest.mark.parametrize("components", sorted(TABLE, key=sorted), ids=lambda c: "+".join(sorted(c)) or "classic")
def test_explain_reads_every_exported_model_back_to_its_components_and_count(components, tmp_path):
    """What export writes, explain reads: the same components, and transformers' count of the folder."""
    cfg = ModelConfig(vocab_size=61, context=16, dim=32, heads=4, layers=2).with_components(components)
    export_hf(GPT(cfg), tmp_path)
    config = read_config(tmp_path / "config.json")
    info = explain_config(config)
    assert mismatches(config, info) == []
    assert info["unknown"] == []
    target = next(t for t in TARGETS if t.model_type == config["model_type"])
    # A class whose norms (or, GPT-2, every Linear) always carry a bias holds a no_bias model with zeros there,
    # and GPT-2 holds gqa with each K/V head repeated: explain reports what the folder has.
    fixed_biases = getattr(target, "zero_biases", None) or target.model_type == "gpt2"
    excused = ({"no_bias"} if fixed_biases and cfg.no_bias else set()) | (
        {"gqa"} if target.model_type == "gpt2" else set()
    )
    assert info["components"] == [c for c in cfg.components if c not in excused]
    if not excused:
        assert info["params"] == param_counts(cfg)["total"]
        assert info["biases"] == dict.fromkeys(info["biases"], not cfg.no_bias) | (
            {"norms": False} if cfg.rmsnorm else {}
        )


@pytest.mark.parametrize(
    "field,message",
    [
        ({"rope_theta": "x"}, 'rope_theta is "x", not a number greater than 1'),
        ({"rope_theta": None}, "rope_theta is null, not a number greater than 1"),
        ({"rope_parameters": "x"}, 'rope_parameters is "x", not an object of RoPE settings'),
        ({"rope_parameters": {"rope_theta": 0.5}}, "rope_parameters.rope_theta is 0.5, not a number greater than 1"),
        (
            {"rope_parameters": {"full_attention": {"rope_theta": "big"}}},
            'rope_parameters.full_attention.rope_theta is "big"',
        ),
        ({"text_config": [1]}, "text_config is [1], not an object of fields"),
        ({"model_type": ["llama"]}, 'model_type is ["llama"], not the name of a model type'),
        ({"text_config": {"head_dim": 0}}, "(text_config): head_dim is 0, not a whole number of at least 1"),
        ({"head_dim": -4}, "head_dim is -4, not a whole number of at least 1"),
        ({"vocab_size": -5}, "vocab_size is -5, not a whole number of at least 1"),
        ({"hidden_size": True}, "hidden_size is true, not a whole number of at least 1"),
        ({"num_key_value_heads": 3}, "num_key_value_heads 3 does not divide the 4 attention heads"),
        ({"attention_bias": "no"}, 'attention_bias is "no", not true or false'),
        ({"hidden_size": 66, "head_dim": None}, "the hidden size 66 is not divisible by the 4 attention heads"),
    ],
    ids=lambda v: "-".join(map(str, v)) if isinstance(v, dict) else "",
)
def test_a_field_explain_cannot_use_is_one_sentence_naming_the_field_and_file(
    capsys, monkeypatch, tmp_path, field, message
):
    from tests.clihelp import run_main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL | {"model_type": "llama"} | field))
    for extra in ([], ["--as-flags"]):
        code, out, err = run_main(capsys, monkeypatch, "explain", path, *extra)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"{path}" in err and message in " ".join(err.split()), err


def test_text_config_is_read_only_where_a_wrapper_has_one():
    stray = SMALL | {"model_type": "llama", "text_config": {"model_type": "gemma3_text", "hidden_size": 8}}
    plain = SMALL | {"model_type": "llama"}  # LlamaForCausalLM reads no text_config
    assert explain_config(stray)["family"] == "Llama"
    assert explain_config(stray)["params"] == explain_config(plain)["params"] == reference(plain)["params"]
    unknown_inside = {"model_type": "gemma3", "text_config": SMALL | {"model_type": "mamba"}}
    info = explain_config(unknown_inside)
    assert info["params"] is None and "cannot tell" in " ".join(info["notes"])


def test_a_multimodal_config_without_text_shapes_says_where_it_looked():
    with pytest.raises(Exception, match=r"no usable hidden size.*\(under text_config\)"):
        explain_config({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})


@pytest.mark.parametrize(
    "config,refused",
    [
        (SMALL | {"model_type": "llama", "num_key_value_heads": 2, "rope_theta": 5e5}, ""),
        (SMALL | {"model_type": "qwen3", "num_key_value_heads": 1, "head_dim": 16}, ""),
        ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64}, ""),
        (SMALL | {"model_type": "gemma", "num_key_value_heads": 1, "head_dim": 16}, ""),
        (with_fields(SMALL | {"model_type": "llama"}, {"vocab_size": DROP}), ""),  # the class default, 32000
        (SMALL | {"model_type": "llama", "hidden_size": 36}, "rope needs an even head dimension"),
        (SMALL | {"model_type": "llama", "hidden_size": 66, "head_dim": 16}, "dim 66 is not divisible by 4 heads"),
        (SMALL | {"model_type": "starcoder2", "rope_theta": 999999.4420358813}, ""),  # the base exactly, not 1e+06
        (SMALL | {"model_type": "mixtral", "num_local_experts": 4}, "explain does not know model_type 'mixtral'"),
    ],
    ids=["gqa", "qwen3", "gpt2", "gemma-geglu", "no-vocab", "odd-head", "head-dim", "starcoder2-base", "moe"],
)
def test_as_flags_prints_only_flags_that_params_accepts(capsys, monkeypatch, tmp_path, config, refused):
    import shlex

    from tests.clihelp import run_main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = run_main(capsys, monkeypatch, "explain", path, "--as-flags")
    if refused:
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"modern-gpt: error: {path} has no modern-gpt variant") and refused in err, err
        return
    assert code == 0, err
    code, params, err = run_main(capsys, monkeypatch, "params", *shlex.split(out), "--format", "json")
    assert code == 0, err
    assert json.loads(params)["total"] == explain_config(config)["params"]
    if config.get("rope_theta"):
        assert out.split()[out.split().index("--rope-base") + 1] == repr(float(config["rope_theta"])).removesuffix(".0")


# ---------------------------------------------------------------------------
# "num_key_value_heads": null is the head count where the class says so, refused where it is not
# ---------------------------------------------------------------------------
NULL_KV_BASE = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96, vocab_size=100)


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama", "olmo2", "arcee"])
def test_explain_reads_null_kv_heads_as_transformers_does(kind):
    # Qwen2/Qwen3 default to 32 K/V heads when the field is left out, but null means one per query head:
    # counted with 32 it printed 199,616 parameters for a model of 83,136, exit 0.
    from modern_gpt.hf.explain import explain_config

    config = dict(model_type=kind, num_key_value_heads=None, **NULL_KV_BASE)
    info = explain_config(config)
    assert info["shape"]["kv_heads"] == 4
    assert mismatches(config, info) == []


@pytest.mark.parametrize("kind", ["mistral", "gemma", "gemma2", "starcoder2", "stablelm"])
def test_explain_refuses_null_kv_heads_where_the_class_does(kind):
    from modern_gpt.core.errors import UserError
    from modern_gpt.hf.explain import explain_config

    with pytest.raises(UserError, match="num_key_value_heads is null, which .* does not accept"):
        explain_config(dict(model_type=kind, num_key_value_heads=None, **NULL_KV_BASE))
