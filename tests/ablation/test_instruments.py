"""Research instruments: the duel, curves.png, the context wall, explain and the Hugging Face export."""

import json
import math

import pandas as pd
import pytest
import torch

from modern_gpt.core.errors import UserError
from modern_gpt.core.settings import shipped_configs
from modern_gpt.hf.explain import architecture, explain_config, read_config
from modern_gpt.hf.export import export_hf
from modern_gpt.run.checkpoint import load_checkpoint
from tests.clihelp import tiny

TINY = tiny(steps=12, eval_every=4, dim=32, heads=4, layers=2)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Tiny trained models: all classic, Llama-style with and without GQA, and RoPE alone."""
    from modern_gpt.core.settings import resolve
    from modern_gpt.data.corpus import load_corpus
    from modern_gpt.run.checkpoint import save_checkpoint
    from modern_gpt.run.train import train_run

    root = tmp_path_factory.mktemp("ckpts")
    variants = {
        "classic": (),
        "llama": ("rmsnorm", "rope", "swiglu", "no_bias"),
        "llama-gqa": ("rmsnorm", "rope", "swiglu", "no_bias", "gqa"),
        "rope": ("rope",),
    }
    settings = resolve(
        None, True, {"train.steps": 12, "model.context": 16, "model.dim": 32, "model.heads": 4, "model.layers": 2}
    )
    corpus = load_corpus(settings.data)
    for name, components in variants.items():
        result, model = train_run(settings.model.with_components(components), corpus, settings.train, seed=0)
        settings.model = model.config
        save_checkpoint(root / name, model, settings, corpus.tokenizer, result.to_dict())
    return root


# ---------------------------------------------------------------------------
# duel and plots
# ---------------------------------------------------------------------------
def test_the_duel_reports_the_relative_perplexity_recomputed_from_runs(run_ok, tmp_path):
    folder = tmp_path / "duel"
    table = run_ok("duel", *TINY, "--jobs", "1", "--seeds", "2", "--out", folder)
    assert "classic (GPT-2) against modern (Qwen3-style)" in table and "perplexity" in table
    doc = json.loads(run_ok("report", folder, "--format", "json"))
    runs = pd.read_csv(folder / "runs.csv")
    classic = runs[runs.variant == "classic"].set_index("seed").val_loss
    modern = runs[runs.variant == "modern"].set_index("seed").val_loss
    by_hand = math.exp((modern - classic).mean()) - 1
    ppl = {side: math.exp(runs[runs.variant == side].val_loss.mean()) for side in ("classic", "modern")}
    assert doc["duel"]["perplexity_change"] == pytest.approx(by_hand, rel=1e-12)
    assert doc["duel"]["perplexity_change"] == pytest.approx(ppl["modern"] / ppl["classic"] - 1, rel=1e-12)
    best = runs.groupby("variant").best_step.mean()
    assert doc["duel"]["best_step_sooner"] == best["classic"] - best["modern"]
    assert [r["variant"] for r in doc["rows"]] == ["classic", "classic (placebo)", "modern"]  # placebo by default
    assert doc["rows"][2]["verdict"] in ("better", "worse", "inconclusive") and doc["rows"][2]["reference"] == "classic"
    assert list(doc["duel"]["sides"]) == ["classic", "modern"]  # the duel compares the two architectures
    assert f"perplexity {100 * by_hand:+.1f}%" in table
    assert f"perplexity {100 * by_hand:+.1f}%" in run_ok("report", folder, "--format", "markdown")
    for name in ("runs.csv", "curves.csv", "summary.csv", "meta.json", "curves.png"):
        assert (folder / name).is_file()


def test_ablate_draws_curves_and_report_redraws_them(run_ok, tmp_path):
    folder = tmp_path / "r"
    variants = ["--plan", "custom", "--variants", "classic;rope;modern"]
    run_ok("ablate", *TINY, "--jobs", "1", "--seeds", "2", *variants, "--out", folder)
    png = folder / "curves.png"
    assert png.read_bytes().startswith(PNG) and png.stat().st_size > 10_000
    png.unlink()
    run_ok("report", folder, "--plot")
    assert png.read_bytes().startswith(PNG) and png.stat().st_size > 10_000


# ---------------------------------------------------------------------------
# the context wall
# ---------------------------------------------------------------------------
def test_learned_positions_report_a_wall_and_rope_keeps_going(run_ok, checkpoints):
    classic = json.loads(run_ok("extrapolate", checkpoints / "classic", "--contexts", "8,16,32", "--format", "json"))
    rope = json.loads(run_ok("extrapolate", checkpoints / "rope", "--contexts", "8,16,32", "--format", "json"))
    assert classic["trained_context"] == 16 and classic["positions"] == "learned positions"
    assert [r["status"] for r in classic["results"]] == ["ok", "ok", "wall"]
    assert classic["results"][2]["note"] == "the learned position table has 16 rows"
    assert [r["status"] for r in rope["results"]] == ["ok", "ok", "ok"]  # twice the trained context
    for r in rope["results"]:
        assert r["val_loss"] > 0 and r["val_bpc"] > 0 and r["ms_per_token"] > 0
    table = run_ok("extrapolate", checkpoints / "classic", "--contexts", "16,32")
    assert "wall" in table and "16 rows" in table


def test_extrapolate_refuses_nonsense_lengths():
    from modern_gpt.run.extrapolate import parse_contexts

    with pytest.raises(UserError, match="whole numbers"):
        parse_contexts("128,lots")
    with pytest.raises(UserError, match="lengths of 1 or more"):
        parse_contexts("0,16")


# ---------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------
def hand_count_llama(v, d, layers, heads, kv, hidden, tied):
    hd = d // heads
    per_layer = d * d + 2 * d * kv * hd + d * d + 3 * d * hidden + 2 * d  # q, k+v, o, gate+up+down, two RMSNorms
    return v * d * (1 if tied else 2) + layers * per_layer + d


def test_explain_the_shipped_llama_config(run_ok):
    path = shipped_configs() / "hf" / "llama-style.json"
    info = explain_config(read_config(path))
    assert info["params"] == hand_count_llama(128256, 4096, 32, 32, 8, 14336, tied=False) == 8_030_261_248
    assert info["kv_cache_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert info["components"] == ["rmsnorm", "rope", "swiglu", "no_bias", "gqa"]
    kv = next(f for f in info["fields"] if f["field"] == "num_key_value_heads")
    assert kv["component"] == "gqa"
    assert kv["meaning"] == (
        "8 K/V heads with 32 query heads: grouped-query attention, 4 query heads share each K/V head, "
        "KV cache 4x smaller than multi-head attention."
    )
    assert info["unknown"] == []
    # the closest modern-gpt variant has exactly the same parameter count
    flags = run_ok("explain", path, "--as-flags").split()
    assert json.loads(run_ok("params", *flags, "--format", "json"))["total"] == info["params"]


def test_explain_the_shipped_gpt2_config(run_ok):
    path = shipped_configs() / "hf" / "gpt2-style.json"
    info = explain_config(read_config(path))
    v, d, t, n = 50257, 768, 1024, 12
    by_hand = (
        v * d
        + t * d
        + n * (2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d))
        + 2 * d
    )
    assert info["params"] == by_hand == 124_439_808
    assert info["components"] == []
    assert set(info["unknown"]) == {
        "summary_activation",
        "summary_first_dropout",
        "summary_proj_to_labels",
        "summary_type",
        "summary_use_proj",
    }
    positions = next(f for f in info["fields"] if f["field"] == "n_positions")
    assert "context wall" in positions["meaning"]
    flags = run_ok("explain", path, "--as-flags").split()
    assert json.loads(run_ok("params", *flags, "--format", "json"))["total"] == by_hand
    table = run_ok("explain", path)
    assert "unknown (not explained, not guessed): summary_activation" in table


def test_explain_lists_unknown_fields_and_refuses_non_configs(tmp_path):
    cfg = {
        "model_type": "mistral",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 128,
        "vocab_size": 100,
        "flux_capacitor": 3,
    }
    info = explain_config(cfg)
    assert info["unknown"] == ["flux_capacitor"] and info["family"] == "Mistral"
    assert architecture(cfg)["kv_heads"] == 1 and "gqa" in info["components"]
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="not an object of fields"):
        read_config(tmp_path / "list.json")
    with pytest.raises(UserError, match="does not exist"):
        read_config(tmp_path / "none.json")
    with pytest.raises(UserError, match="no usable hidden size"):
        explain_config({"model_type": "llama"})


# ---------------------------------------------------------------------------
# export to Hugging Face transformers
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,arch", [("classic", "GPT2LMHeadModel"), ("llama", "LlamaForCausalLM"), ("llama-gqa", "LlamaForCausalLM")]
)
def test_export_loads_in_transformers_with_the_same_logits(checkpoints, tmp_path, name, arch):
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install modern-gpt[hf])"
    )
    model, _, _ = load_checkpoint(checkpoints / name)
    assert export_hf(model, tmp_path / "hf") == arch
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", attn_implementation="eager").eval()
    assert type(hf).__name__ == arch
    x = torch.randint(0, model.config.vocab_size, (2, 16))
    with torch.no_grad():
        ours, theirs = model(x)[0], hf(x).logits
    assert torch.allclose(ours, theirs, atol=1e-4), (ours - theirs).abs().max()


@pytest.mark.parametrize(
    "cfg,published",
    [
        # the public shapes of Pythia-160m (GPT-NeoX: biases, LayerNorm, untied), 162,322,944 parameters
        (
            {
                "model_type": "gpt_neox",
                "hidden_size": 768,
                "num_hidden_layers": 12,
                "num_attention_heads": 12,
                "intermediate_size": 3072,
                "vocab_size": 50304,
                "rotary_pct": 0.25,
                "tie_word_embeddings": False,
            },
            162_322_944,
        ),
        # Qwen2-0.5B (q, k and v carry biases, GQA 14:2, tied), 494,032,768 parameters
        (
            {
                "model_type": "qwen2",
                "hidden_size": 896,
                "num_hidden_layers": 24,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "intermediate_size": 4864,
                "vocab_size": 151936,
                "tie_word_embeddings": True,
            },
            494_032_768,
        ),
        # Gemma-2B (head_dim 256 is not hidden/heads, one K/V head, GeGLU, tied), 2,506,172,416 parameters
        (
            {
                "model_type": "gemma",
                "hidden_size": 2048,
                "num_hidden_layers": 18,
                "num_attention_heads": 8,
                "num_key_value_heads": 1,
                "head_dim": 256,
                "intermediate_size": 16384,
                "vocab_size": 256000,
                "hidden_activation": "gelu_pytorch_tanh",
            },
            2_506_172_416,
        ),
    ],
)
def test_explain_counts_other_families_as_published(cfg, published):
    assert explain_config(cfg)["params"] == published
