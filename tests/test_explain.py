"""explain: every component, explicit head_dim, biases per projection, and one parameter formula shared with the model."""

import json

import pytest
import torch

from modern_gpt.explain import DETECTORS, explain_config, read_config
from modern_gpt.export import CLASSIC, TABLE, TARGETS, export_hf
from modern_gpt.model import COMPONENTS, GPT, ModelConfig, param_counts
from modern_gpt.settings import shipped_configs

# The components Qwen3 has: all that export's Qwen3ForCausalLM can hold.
QWEN3 = [c for c in COMPONENTS if next(t for t in TARGETS if t.model_type == "qwen3").state(c) != CLASSIC]


@pytest.mark.parametrize("components", sorted(TABLE, key=sorted), ids=lambda c: "+".join(sorted(c)) or "classic")
def test_explain_reads_every_exported_model_back_to_its_components_and_count(components, tmp_path):
    """What export writes, explain reads: the same components and the same parameters as model.param_counts."""
    cfg = ModelConfig(vocab_size=61, context=16, dim=32, heads=4, layers=2).with_components(components)
    export_hf(GPT(cfg), tmp_path)
    info = explain_config(read_config(tmp_path / "config.json"))
    if info["family"] == "GPT-2" and cfg.no_bias:  # GPT2LMHeadModel always has biases: the export writes zeros
        cfg = cfg.with_components([])
    assert info["components"] == list(cfg.components)
    assert info["params"] == param_counts(cfg)["total"]
    assert info["unknown"] == []
    assert info["biases"] == dict.fromkeys(info["biases"], not cfg.no_bias) | ({"norms": False} if cfg.rmsnorm else {})


def hf_count(config: dict) -> int:
    """transformers' own count: the model built on the meta device (no memory), tied weights once."""
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "vocab_size": 100,
}
FAMILIES = [
    {"model_type": "llama", "num_key_value_heads": 2, "attention_bias": True, "mlp_bias": True},
    {"model_type": "llama", "attention_bias": True, "tie_word_embeddings": True},
    {"model_type": "mistral", "num_key_value_heads": 1},
    {"model_type": "qwen2", "num_key_value_heads": 2, "tie_word_embeddings": False},
    {"model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": True},
    {"model_type": "qwen3", "attention_bias": True},  # and the class defaults: head_dim 128, 32 K/V heads
    {"model_type": "gemma"},  # head_dim 256 and 16 K/V heads by default
    {"model_type": "mistral"},  # 8 K/V heads by default
    {"model_type": "olmo2", "num_key_value_heads": 2},
    {"model_type": "gemma", "num_key_value_heads": 1, "head_dim": 48, "hidden_activation": "gelu_pytorch_tanh"},
    {"model_type": "gpt_neox", "rotary_pct": 0.25, "tie_word_embeddings": False},
]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: "-".join(f"{v}" for v in f.values()))
def test_the_count_equals_transformers_own(family):
    config = SMALL | family
    assert explain_config(config)["params"] == hf_count(config)


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
    with_field = explain_config(SMALL | {"model_type": "cohere", "use_qk_norm": True})
    field = next(f for f in with_field["fields"] if f["field"] == "use_qk_norm")
    assert field["component"] == "qk_norm" and "qk_norm" in with_field["components"]
    assert "qk_norm" not in explain_config(SMALL | {"model_type": "llama", "use_qk_norm": False})["components"]


def test_biases_are_reported_per_projection():
    qwen2 = explain_config(SMALL | {"model_type": "qwen2"})
    assert qwen2["biases"] == {"q, k, v": True, "o": False, "MLP": False, "norms": False}
    assert "no_bias" not in qwen2["components"] and any("q, k and v" in n for n in qwen2["notes"])
    llama = explain_config(SMALL | {"model_type": "llama", "attention_bias": True})
    assert llama["biases"] == {"q, k, v": True, "o": True, "MLP": False, "norms": False}
    assert any("biases on q, k, v, o only" in n for n in llama["notes"])
    gpt2 = explain_config(read_config(shipped_configs() / "hf" / "gpt2-style.json"))
    assert set(gpt2["biases"].values()) == {True}


def test_the_explain_command_prints_biases_and_notes(capsys, monkeypatch):
    from .clihelp import run_main

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


@pytest.mark.parametrize(
    "field,message",
    [
        ({"rope_theta": "x"}, 'rope_theta is "x", not a number greater than 1'),
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
    from .clihelp import run_main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL | {"model_type": "llama"} | field))
    for extra in ([], ["--as-flags"]):
        code, out, err = run_main(capsys, monkeypatch, "explain", path, *extra)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"{path}: {message}" in " ".join(err.split()), err


@pytest.mark.parametrize(
    "config,refused",
    [
        (SMALL | {"model_type": "llama", "num_key_value_heads": 2, "rope_theta": 5e5}, ""),
        (SMALL | {"model_type": "qwen3", "num_key_value_heads": 1, "head_dim": 16}, ""),
        (SMALL | {"model_type": "gpt2", "n_positions": 64}, ""),
        (SMALL | {"model_type": "llama", "hidden_size": 36}, "rope needs an even head dimension"),
        (SMALL | {"model_type": "llama", "hidden_size": 66, "head_dim": 16}, "dim 66 is not divisible by 4 heads"),
        ({k: v for k, v in SMALL.items() if k != "vocab_size"} | {"model_type": "llama"}, "no vocab_size"),
    ],
    ids=["gqa", "qwen3", "gpt2", "odd-head", "head-dim", "no-vocab"],
)
def test_as_flags_prints_only_flags_that_params_accepts(capsys, monkeypatch, tmp_path, config, refused):
    import shlex

    from .clihelp import run_main

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
