"""Export to Hugging Face transformers, checked against transformers itself on realistic weights.

Freshly initialised weights (std 0.02) hide mapping mistakes: an erf GELU in place of GPT-2's
tanh GELU, or RoPE before QK-norm instead of after, changes the logits by less than the
tolerance. So every test here first perturbs every tensor to the magnitudes of a trained
model, and negative controls check that the same comparison catches each such mistake.
"""

import itertools
import json
import math
import re
from dataclasses import replace

import pytest
import torch

from modern_gpt.core.components import COMPONENTS
from modern_gpt.core.config import ModelConfig
from modern_gpt.core.errors import UserError
from modern_gpt.hf.export import CLASSIC, COPY, TABLE, TARGETS, WRITTEN, export_hf, target_for, write_model
from modern_gpt.model.gpt import GPT, apply_rope

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install modern-gpt[hf])")

TOL = 5e-5  # float32: the largest difference seen is 1.1e-5 (logits of magnitude 10 to 30)
SHAPE = dict(vocab_size=61, context=16, dim=32, heads=4, layers=2)
ALL_COMBINATIONS = [c for n in range(len(COMPONENTS) + 1) for c in itertools.combinations(COMPONENTS, n)]
# The widest combination Qwen3ForCausalLM holds: the most modern model that exports.
QWEN3 = tuple(c for c in COMPONENTS if next(t for t in TARGETS if t.model_type == "qwen3").state(c) != CLASSIC)


def label(components) -> str:
    return "+".join(components) or "classic"


def perturb(model: GPT, seed: int = 0) -> GPT:
    """Every tensor at a trained model's magnitude: unit-variance pre-activations, gains spread around 1, real biases."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() == 1 and name.endswith("weight"):  # norm gains (LayerNorm, RMSNorm, QK-norm)
                p.copy_(1.0 + 0.5 * noise)
            elif p.dim() == 1:  # biases and LayerNorm shifts
                p.copy_(0.3 * noise)
            elif "emb" in name:
                p.copy_(noise)
            else:  # matrices: a fan-in scale, so that every activation is of order 1
                p.copy_(noise / math.sqrt(p.shape[1]))
    return model.eval()


def build(components, seed: int = 0, **shape) -> GPT:
    torch.manual_seed(0)
    return perturb(GPT(ModelConfig(**(SHAPE | shape)).with_components(components)), seed)


def load_hf(folder):
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info  # every tensor mapped, none left over
    return hf.float().eval()


def max_diff(model: GPT, folder) -> float:
    hf = load_hf(folder)
    x = torch.randint(0, model.config.vocab_size, (2, model.config.context), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(x)[0], hf(x).logits
    assert ours.abs().max() > 3  # realistic logits, not the near-zero ones of an untrained model
    return (ours - theirs).abs().max().item()


@pytest.mark.parametrize("components", ALL_COMBINATIONS, ids=label)
def test_every_combination_exports_with_equal_logits_or_is_refused_by_name(components, tmp_path):
    model = build(components)
    if frozenset(components) not in TABLE:
        with pytest.raises(UserError) as err:
            export_hf(model, tmp_path / "hf")
        message = str(err.value)
        assert message.startswith(f"{label(components)} does not export: no counterpart for ")
        named = re.findall(r"\((\w+)( off)?\)(?= in | and )", message.split("; what exports")[0])
        assert named, message  # at least one piece is named...
        for component, off in named:  # ...and each one truthfully: on when named as modern, off when classic
            assert component in COMPONENTS and (component in components) != bool(off), message
        assert not (tmp_path / "hf").exists()  # refused before anything is written
        return
    arch = export_hf(model, tmp_path / "hf")
    assert arch == TABLE[frozenset(components)].name
    assert max_diff(model, tmp_path / "hf") < TOL


def test_the_table_covers_the_components_and_names_one_class_per_combination():
    assert {c for t in TARGETS for c in t.holds} <= set(COMPONENTS)  # no stale names
    exportable = {label(c): TABLE[frozenset(c)].name for c in ALL_COMBINATIONS if frozenset(c) in TABLE}

    def each(cls, base, *optional):  # base with every subset of the optional components
        subsets = [s for n in range(len(optional) + 1) for s in itertools.combinations(optional, n)]
        return {label(c for c in COMPONENTS if c in {*base, *s}): cls for s in subsets}

    assert exportable == (
        each("GPT2LMHeadModel", (), "no_bias", "gqa")
        | each("Starcoder2ForCausalLM", ("rope",), "no_bias", "gqa")
        | each("StableLmForCausalLM", ("rope", "swiglu", "no_bias"), "gqa")
        | each("ArceeForCausalLM", ("rmsnorm", "rope"), "no_bias", "gqa")
        | each("ApertusForCausalLM", ("rmsnorm", "rope", "no_bias", "qk_norm"), "gqa")
        | each("LlamaForCausalLM", ("rmsnorm", "rope", "swiglu"), "no_bias", "gqa")
        | each("Qwen3ForCausalLM", ("rmsnorm", "rope", "swiglu", "no_bias", "qk_norm"), "gqa")
    )
    assert len(exportable) == 22 and exportable[label(QWEN3)] == "Qwen3ForCausalLM"
    # the project's own plans: every row of cumulative up to +gqa, and every row of single but qk_norm, exports
    assert all(label(COMPONENTS[:n]) in exportable for n in range(len(COMPONENTS) + 1) if n != 1)
    assert [c for c in COMPONENTS if label([c]) not in exportable] == ["rmsnorm", "swiglu", "qk_norm"]


def refusal(components) -> str:
    with pytest.raises(UserError) as err:
        target_for(ModelConfig(**SHAPE).with_components(components))
    return str(err.value)


def test_refusals_name_the_pieces_without_a_counterpart():
    assert "RMSNorm (rmsnorm) in GPT2LMHeadModel" in refusal(["rmsnorm"])
    # qk_norm with biases: Llama has no QK-norm, and Qwen3's MLP has no bias
    msg = refusal(["rmsnorm", "rope", "swiglu", "qk_norm"])
    assert "RMS-normalised q and k per head (qk_norm) in LlamaForCausalLM" in msg
    assert "a bias in every Linear and norm (no_bias off) in Qwen3ForCausalLM" in msg
    # rope and swiglu with biases: StableLM's MLP has none, Starcoder2's MLP is not gated
    msg = refusal(["rope", "swiglu"])
    assert "(no_bias off) in StableLmForCausalLM" in msg and "(swiglu) in Starcoder2ForCausalLM" in msg


@pytest.mark.parametrize("components", [c for c in ALL_COMBINATIONS if frozenset(c) not in TABLE], ids=label)
def test_every_refusal_names_each_class_it_checked(components):
    msg = refusal(components)
    checked = msg.split(f"in each of the {len(TARGETS)} classes checked: ")[1]
    assert [part.split(" ")[0] for part in checked.rstrip(".").split("; ")] == [t.name for t in TARGETS]


@pytest.mark.parametrize(
    "components,shape",
    [
        ((), {"tie_embeddings": False}),
        (("no_bias",), {"tie_embeddings": False}),
        (("rmsnorm", "rope", "swiglu", "gqa"), {"kv_heads": 1, "rope_base": 500.0, "tie_embeddings": False}),
        (("rmsnorm", "rope", "swiglu", "no_bias", "gqa"), {"kv_heads": 1, "rope_base": 500.0}),
        (QWEN3, {"kv_heads": 1, "rope_base": 500.0, "tie_embeddings": False}),
        (QWEN3, {"heads": 8, "kv_heads": 2, "mlp_hidden": 40}),
        (("gqa",), {"kv_heads": 1, "tie_embeddings": False}),
        (("gqa",), {"heads": 8, "kv_heads": 2}),
        (("rope", "gqa"), {"kv_heads": 1, "rope_base": 500.0, "tie_embeddings": False}),
        (("rope", "no_bias"), {"rope_base": 500.0}),
        (("rope", "swiglu", "no_bias", "gqa"), {"kv_heads": 1, "rope_base": 500.0, "tie_embeddings": False}),
        (("rmsnorm", "rope", "gqa"), {"kv_heads": 1, "rope_base": 500.0, "tie_embeddings": False}),
        (("rmsnorm", "rope", "no_bias", "gqa", "qk_norm"), {"kv_heads": 1, "rope_base": 500.0}),
        (("rmsnorm", "rope", "no_bias", "qk_norm"), {"heads": 8, "mlp_hidden": 40, "tie_embeddings": False}),
    ],
    ids=[
        "classic-untied",
        "no_bias-untied",
        "llama-bias-kv1-base500-untied",
        "llama-kv1-base500",
        "qwen3-kv1-base500-untied",
        "qwen3-8heads-hidden40",
        "gpt2-gqa-kv1-untied",
        "gpt2-gqa-8heads-kv2",
        "starcoder2-bias-kv1-base500-untied",
        "starcoder2-base500",
        "stablelm-kv1-base500-untied",
        "arcee-bias-kv1-base500-untied",
        "apertus-kv1-base500",
        "apertus-8heads-hidden40-untied",
    ],
)
def test_other_shapes_export_with_equal_logits(components, shape, tmp_path):
    model = build(components, **shape)
    export_hf(model, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["tie_word_embeddings"] == model.config.tie_embeddings
    assert max_diff(model, tmp_path / "hf") < TOL


# ---------------------------------------------------------------------------
# Negative controls: a deliberately wrong mapping must fail the very same comparison.
# ---------------------------------------------------------------------------
def test_control_erf_gelu_fails_on_realistic_weights_and_passes_on_fresh_ones(tmp_path):
    def diff_with_erf_gelu(model, folder):
        export_hf(model, folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {"activation_function": "gelu"}))  # exact erf GELU
        return max_diff(model, folder)

    assert diff_with_erf_gelu(build(()), tmp_path / "real") > 10 * TOL
    torch.manual_seed(0)
    fresh = GPT(ModelConfig(**SHAPE)).eval()
    fresh.lm_head.weight.data.mul_(60)  # logits of magnitude 10 to 30 for max_diff, the body still at init scale
    assert diff_with_erf_gelu(fresh, tmp_path / "fresh") < TOL  # why the weights are perturbed


def test_control_a_missing_transpose_fails(tmp_path):
    gpt2 = TARGETS[0]
    wrong = [(ours, theirs, COPY if "attn.c_proj.weight" in theirs else how) for ours, theirs, how in gpt2.rules]
    model = build(())
    write_model(model, tmp_path / "hf", replace(gpt2, rules=wrong))
    assert max_diff(model, tmp_path / "hf") > 10 * TOL


# Each class's default that differs from modern-gpt, put back: the comparison must catch every one.
WRONG_DEFAULTS = [
    (("rope",), "hidden_act", "gelu"),  # Starcoder2 with the exact erf GELU
    (("rope", "swiglu", "no_bias"), "partial_rotary_factor", None),  # StableLM rotating a quarter of each head
    (("rmsnorm", "rope"), "hidden_act", None),  # Arcee's relu2
    (("rmsnorm", "rope", "no_bias", "qk_norm"), "rope_parameters", None),  # Apertus's llama3 scaling at base 12e6
    (("rmsnorm", "rope", "no_bias", "qk_norm"), "hidden_act", "gelu"),  # Apertus with the exact erf GELU
]


@pytest.mark.parametrize("components,key,value", WRONG_DEFAULTS, ids=lambda v: label(v) if isinstance(v, tuple) else v)
def test_control_each_class_default_that_differs_fails(components, key, value, tmp_path):
    model = build(components, tie_embeddings=False)
    export_hf(model, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    if key == "partial_rotary_factor":  # the class's default comes back only when neither place sets it
        del config["rope_parameters"][key]
    if value is None:
        del config[key]  # rope_parameters: rope_theta alone stays, as transformers 4 reads it
    else:
        config[key] = value
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    assert max_diff(model, tmp_path / "hf") > 10 * TOL


def test_control_tiled_kv_heads_fail_in_gpt2(tmp_path, monkeypatch):
    """GPT-2 with gqa: query head h reads K/V head h // group. Tiling the K/V heads (h % kv_heads) must fail."""
    import modern_gpt.hf.export as export

    model = build(("gqa",), heads=4, kv_heads=2)
    export_hf(model, tmp_path / "right")
    assert max_diff(model, tmp_path / "right") < TOL

    def tiled(tensor, cfg):
        hd, kv = cfg.head_dim, cfg.n_kv_heads
        q, k, v = tensor.split([cfg.heads * hd, kv * hd, kv * hd])
        return torch.cat(
            [q, k.repeat(cfg.heads // kv, *[1] * (k.dim() - 1)), v.repeat(cfg.heads // kv, *[1] * (v.dim() - 1))]
        )

    monkeypatch.setattr(export, "_repeat_kv", tiled)
    export_hf(model, tmp_path / "tiled")
    assert max_diff(model, tmp_path / "tiled") > 10 * TOL


@pytest.mark.parametrize("components", [QWEN3, ("rmsnorm", "rope", "no_bias", "qk_norm")], ids=label)
def test_control_rope_then_qk_norm_fails(components, tmp_path, monkeypatch):
    """Qwen3, Apertus (and modern-gpt) normalise q and k, then rotate; the other order must be caught."""
    import modern_gpt.model.gpt as m

    model = build(components)
    export_hf(model, tmp_path / "hf")
    assert max_diff(model, tmp_path / "hf") < TOL
    # Swap the order in modern-gpt's model: each QK-norm passes its input through and queues itself,
    # and apply_rope (called for q, then k, right after the norms) runs the queued norm after rotating.
    queued = []

    def deferred(norm):
        def forward(x):
            queued.append(lambda y: type(norm).forward(norm, y))
            return x

        return forward

    for block in model.blocks:
        block.attn.q_norm.forward = deferred(block.attn.q_norm)
        block.attn.k_norm.forward = deferred(block.attn.k_norm)
    monkeypatch.setattr(m, "apply_rope", lambda x, cos, sin: queued.pop(0)(apply_rope(x, cos, sin)))
    assert max_diff(model, tmp_path / "hf") > 10 * TOL
    assert not queued  # every norm ran, after its rotation


# ---------------------------------------------------------------------------
# The tokenizer goes along: transformers alone reads the folder and generates what modern-gpt generates.
# ---------------------------------------------------------------------------
SAMPLE = "ROMEO: héllo, wörld 😀\n\n  tabs\tand a character never seen: ß"


def pretrained_tokenizer_file(tmp_path, text):
    """A tokenizer.json as a model ships it (a BPE with a BOS that its post-processor adds)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([text], trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(tmp_path / "tokenizer.json"))
    return str(tmp_path / "tokenizer.json")


def tokenizer_of(kind, tmp_path):
    from modern_gpt.core.config import DataConfig
    from modern_gpt.data.corpus import SMOKE, read_raw, train_tokenizer

    text = read_raw(DataConfig())[1][0][1].decode()
    assert SMOKE and "ß" not in text
    if kind == "pretrained":
        kind = pretrained_tokenizer_file(tmp_path, text)
    return train_tokenizer(kind, text, 300)


@pytest.mark.parametrize("kind", ["char", "byte", "bpe", "pretrained"])
def test_the_exported_tokenizer_has_modern_gpts_ids_and_no_leaked_special_ids(kind, tmp_path):
    tok = tokenizer_of(kind, tmp_path)
    model = build(QWEN3, vocab_size=tok.vocab_size)
    export_hf(model, tmp_path / "hf", tok)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = tok.encode(SAMPLE).tolist()
    assert hf_tok(SAMPLE)["input_ids"] == ids  # no BOS added, the same split
    assert hf_tok.decode(ids) == tok.decode(ids)
    every_id = list(range(tok.vocab_size))  # special tokens are left out, as the text-generation pipeline does
    assert hf_tok.decode(every_id, skip_special_tokens=True) == tok.decode(every_id)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    bos = 0 if kind == "pretrained" else None  # the file's post-processor puts <s> (id 0) before the text
    assert config["bos_token_id"] == bos and config["eos_token_id"] is config["pad_token_id"] is None
    hf = load_hf(tmp_path / "hf")
    for ids_of in (hf.config, hf.generation_config, hf_tok):  # no class default (50256, or Llama's 1 and 2) leaks in
        assert ids_of.bos_token_id == bos and ids_of.eos_token_id is None and ids_of.pad_token_id is None


# Every class at least once, with and without biases and gqa.
GREEDY = [
    (),
    ("gqa",),
    ("rope",),
    ("rope", "no_bias", "gqa"),
    ("rope", "swiglu", "no_bias", "gqa"),
    ("rmsnorm", "rope"),
    ("rmsnorm", "rope", "no_bias", "gqa"),
    ("rmsnorm", "rope", "no_bias", "qk_norm"),
    ("rmsnorm", "rope", "swiglu"),
    QWEN3,
]


def test_the_generation_tests_cover_every_class():
    assert {TABLE[frozenset(c)].name for c in GREEDY} == {t.name for t in TARGETS}


def _byte_bpe(special: list[str]):
    """A byte-level BPE of 300 ids trained on a short text, whose first ids are `special`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["ROMEO: a short text, written again and again. " * 20], trainer=trainer)
    return tok


@pytest.mark.parametrize(
    "template,bos,eos",
    [
        (dict(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)]), "<s>", "</s>"),
        (dict(single="$A </s>", special_tokens=[("</s>", 2)]), None, "</s>"),
        (None, None, None),  # GPT-2's file: no post-processor names a role, so none is guessed
    ],
    ids=["bos-and-eos", "eos-only", "none"],
)
def test_a_pretrained_tokenizers_bos_and_eos_go_into_the_config(template, bos, eos, tmp_path):
    from tokenizers import processors

    from modern_gpt.data.corpus import PretrainedTokenizer

    special = ["<pad>", "<s>", "</s>"]
    tok = _byte_bpe(special)
    if template is not None:
        processor = processors.TemplateProcessing(**template)
        tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), processor])  # as Llama-3's
    ours = PretrainedTokenizer(tok)
    export_hf(build(QWEN3, vocab_size=ours.vocab_size), tmp_path / "hf", ours)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    expected = {
        "bos_token_id": special.index(bos) if bos else None,
        "eos_token_id": special.index(eos) if eos else None,
    }
    assert {k: config[k] for k in expected} == expected
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert (hf_tok.bos_token, hf_tok.eos_token) == (bos, eos)
    assert hf_tok("ROMEO: a short text")["input_ids"] == ours.encode("ROMEO: a short text").tolist()  # still none added
    generation = load_hf(tmp_path / "hf").generation_config
    assert (generation.bos_token_id, generation.eos_token_id) == (expected["bos_token_id"], expected["eos_token_id"])


@pytest.mark.parametrize(
    "processor,bos,eos",
    [
        (("BertProcessing", ("[SEP]", 4), ("[CLS]", 3)), "[CLS]", "[SEP]"),  # cls and sep, as RobertaProcessing's
        # the template calls id 1 '[BOS]', the vocabulary '<s>': '[BOS]' in tokenizer_config.json was a new id 288
        (("TemplateProcessing", "[BOS] $A", [("[BOS]", 1)]), "<s>", None),
        # a plain token before the text: named bos, it would become special and split 'a' out of every word
        (("TemplateProcessing", "a $A", [("a", 64)]), None, None),
    ],
    ids=["bert", "template-name-is-not-the-token", "plain-token"],
)
def test_bos_and_eos_are_the_files_special_tokens_by_their_own_names(processor, bos, eos, tmp_path):
    from tokenizers import processors

    from modern_gpt.data.corpus import PretrainedTokenizer

    special = ["<pad>", "<s>", "</s>", "[CLS]", "[SEP]"]
    tok = _byte_bpe(special)
    kind, *args = processor
    if kind == "BertProcessing":
        tok.post_processor = processors.BertProcessing(*args)
    else:
        tok.post_processor = processors.TemplateProcessing(single=args[0], special_tokens=args[1])
    ours = PretrainedTokenizer(tok)
    export_hf(build(QWEN3, vocab_size=ours.vocab_size), tmp_path / "hf", ours)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = {"bos": special.index(bos) if bos else None, "eos": special.index(eos) if eos else None}
    assert (config["bos_token_id"], config["eos_token_id"]) == (ids["bos"], ids["eos"])
    assert (hf_tok.bos_token, hf_tok.eos_token) == (bos, eos)
    assert (hf_tok.bos_token_id, hf_tok.eos_token_id) == (ids["bos"], ids["eos"])
    assert len(hf_tok) == ours.vocab_size  # no token added past the model's embedding
    sample = "ROMEO: a short text, again"
    assert hf_tok(sample)["input_ids"] == ours.encode(sample).tolist()


def test_a_char_tokenizer_whose_text_has_u_fffd_decodes_id_0_the_same(tmp_path):
    from modern_gpt.data.corpus import CharTokenizer

    tok = CharTokenizer.train("ROMEO: \ufffd replaced, and more text.\n")
    export_hf(build(QWEN3, vocab_size=tok.vocab_size), tmp_path / "hf", tok)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "ROMEO: \ufffd, and ß unseen <unk>"  # U+FFFD has its own id; ß and < were never seen: id 0
    ids = tok.encode(text).tolist()
    assert hf_tok(text)["input_ids"] == ids and ids[text.index("ß")] == 0 != ids[text.index("\ufffd")]
    every_id = list(range(tok.vocab_size))
    assert hf_tok.decode(ids) == tok.decode(ids) and hf_tok.decode(every_id) == tok.decode(every_id)
    assert hf_tok.decode([0]) == "\ufffd"


def test_a_pretrained_tokenizers_truncation_and_padding_are_not_exported():
    from tokenizers import Tokenizer

    from modern_gpt.data.corpus import PretrainedTokenizer
    from modern_gpt.hf.export import hf_tokenizer
    from tests.data.test_hf_data import sentencepiece_style_tokenizer

    tok = PretrainedTokenizer(sentencepiece_style_tokenizer())
    tok.tok.enable_truncation(4)
    tok.tok.enable_padding(length=64)
    exported = Tokenizer.from_str(hf_tokenizer(tok).to_str())
    assert exported.truncation is None and exported.padding is None
    assert len(exported.encode("ROMEO: there " * 10, add_special_tokens=False).ids) > 4


@pytest.mark.parametrize("components", GREEDY, ids=label)
def test_greedy_generation_in_transformers_equals_modern_gpts(components, tmp_path):
    from modern_gpt.run.checkpoint import generate_text

    tok = tokenizer_of("char", tmp_path)
    # untied: with tied random weights every model only repeats its last token, which would test little;
    # and the first weights (by modern-gpt alone) whose continuation is varied, not one token repeated
    for seed in range(10):
        model = build(components, seed, vocab_size=tok.vocab_size, context=32, tie_embeddings=False)
        ours = generate_text(model, tok, "ROMEO:", 20, temperature=0.0, top_k=None, seed=0)
        if len(set(ours[6:])) >= 5:
            break
    assert len(set(ours[6:])) >= 5 and len(ours) == len("ROMEO:") + 20
    export_hf(model, tmp_path / "hf", tok)
    pipe = transformers.pipeline("text-generation", model=str(tmp_path / "hf"), device="cpu")
    theirs = pipe("ROMEO:", max_new_tokens=20, do_sample=False)[0]["generated_text"]
    assert theirs == ours


BLOCKED = "import sys; sys.modules['modern_gpt'] = None  # importing modern_gpt now fails: transformers alone\n"
PIPELINE = (
    "from transformers import pipeline\n"
    "input()  # the folder is there once a line comes: transformers loads meanwhile\n"
    "out = pipeline('text-generation', model=sys.argv[1], device='cpu')('ROMEO:', max_new_tokens=20, do_sample=False)\n"
    "print(out[0]['generated_text'])\n"
)


@pytest.mark.slow
def test_train_export_then_transformers_alone_generates_what_modern_gpt_generates(capsys, monkeypatch, tmp_path):
    """docs/instruments.md's promise: train all six, export, and a Python without modern-gpt prints the same greedy
    text."""
    import subprocess
    import sys

    from tests.clihelp import run_main

    monkeypatch.chdir(tmp_path)

    def run(*args):
        code, out, err = run_main(capsys, monkeypatch, *args)
        assert code == 0, (code, out, err)
        return out

    # transformers alone, started first: it imports transformers while this process trains and exports
    theirs = subprocess.Popen(
        [sys.executable, "-c", BLOCKED + PIPELINE, "hf"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        ours = _train_export_generate(run, tmp_path)
        out, err = theirs.communicate("go\n", timeout=240)
    finally:
        if theirs.poll() is None:
            theirs.kill()
            theirs.wait()
    assert theirs.returncode == 0, err[-2000:]
    assert out == ours and len(ours) == len("ROMEO:") + 20 + 1  # print's line end


def _train_export_generate(run, tmp_path) -> str:
    run(
        "train",
        "--smoke",
        "--modern",
        "--steps",
        "40",
        "--context",
        "32",
        "--dim",
        "32",
        "--layers",
        "2",
        "--out",
        "ckpt",
    )
    assert "Qwen3ForCausalLM" in run("export", "ckpt", "--hf", "hf")
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    return run("generate", "ckpt", "--prompt", "ROMEO:", "--tokens", "20", "--temperature", "0")


def test_greedy_generation_equals_transformers_with_a_sentencepiece_style_tokenizer(tmp_path):
    """Llama's tokenizer kind: its decoder strips a leading space only at the start of a text, so the prompt and
    the new ids are decoded together, as transformers decodes a generated sequence; decoded alone, the new ids
    lose the space between 'ROMEO:' and '▁there'. (transformers 5's text-generation pipeline decodes the new ids
    alone and loses it too, so its text is not the reference here.)"""
    from modern_gpt.data.corpus import PretrainedTokenizer
    from modern_gpt.run.checkpoint import generate_text
    from tests.data.test_hf_data import sentencepiece_style_tokenizer

    tok = PretrainedTokenizer(sentencepiece_style_tokenizer())
    model = build(QWEN3, vocab_size=tok.vocab_size, context=32, tie_embeddings=False)
    prompt = torch.as_tensor(tok.encode("ROMEO:"))[None]
    with torch.no_grad():  # the first new token is made '▁there': its output row swapped with the top one's
        top, there = model(prompt)[0][0, -1].argmax().item(), tok.tok.token_to_id("▁there")
        rows = model.lm_head.weight
        rows[[top, there]] = rows[[there, top]].clone()
    export_hf(model, tmp_path / "hf", tok)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tok("ROMEO:")["input_ids"] == prompt[0].tolist()
    sequence = load_hf(tmp_path / "hf").generate(prompt, max_new_tokens=6, do_sample=False)[0]
    theirs = hf_tok.decode(sequence)
    ours = generate_text(model, tok, "ROMEO:", 6, temperature=0.0, top_k=None, seed=0)
    assert ours == theirs and ours.startswith("ROMEO: there"), (ours, theirs)
    assert tok.decode(sequence[prompt.size(1) :]).startswith("there")  # the defect: the new ids decoded alone


# ---------------------------------------------------------------------------
# export --force into a folder that holds files, and a transformers folder given where a checkpoint belongs.
# ---------------------------------------------------------------------------
def checkpoint_of(model: GPT, tokenizer, folder):
    from modern_gpt.core.config import DataConfig, TrainConfig
    from modern_gpt.core.settings import Settings
    from modern_gpt.run.checkpoint import save_checkpoint

    save_checkpoint(folder, model, Settings(model.config, TrainConfig(), DataConfig()), tokenizer, {})
    return folder


def cli_error(capsys, monkeypatch, *args) -> str:
    from tests.clihelp import run_main

    capsys.readouterr()  # what transformers printed before
    code, out, err = run_main(capsys, monkeypatch, *args)
    assert code == 2 and err.startswith("modern-gpt: error: ") and err.count("\n") == 1, (code, out, err)
    return err


def greedy_in_transformers(folder) -> str:
    pipe = transformers.pipeline("text-generation", model=str(folder), device="cpu")
    return pipe("ROMEO:", max_new_tokens=20, do_sample=False)[0]["generated_text"]


# What transformers reads beside the files export writes: weights, shards and their index, a PEFT adapter,
# tokenizer files, chat templates, processor configs. Each would change or break what the folder loads as.
STALE = {
    "generation_config.json": json.dumps({"repetition_penalty": 5.0, "eos_token_id": 3}),
    "special_tokens_map.json": json.dumps({"bos_token": "R", "eos_token": "O"}),
    "added_tokens.json": json.dumps({"<extra>": 61}),
    "chat_template.jinja": "{{ messages }}",
    "model.safetensors.index.json": json.dumps({"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}}),
    "model-00001-of-00002.safetensors": "not weights",
    "pytorch_model.bin": "not weights",
    "adapter_config.json": json.dumps({"base_model_name_or_path": "gpt2", "peft_type": "LORA"}),
    "vocab.json": "{}",
    "merges.txt": "#version: 0.2\n",
    "tokenizer.model": "not sentencepiece",
    ".config.json.123-0a1b2c3d.tmp": "an interrupted write",
}


def test_export_force_removes_what_transformers_would_read(tmp_path, capsys, monkeypatch):
    """A stale generation_config.json made transformers generate something else; --force removes every such file."""
    from modern_gpt.run.checkpoint import generate_text
    from tests.clihelp import run_main

    tok = tokenizer_of("char", tmp_path)
    model = build(("rope", "gqa"), 1, vocab_size=tok.vocab_size, context=32, tie_embeddings=False)
    ours = generate_text(model, tok, "ROMEO:", 20, temperature=0.0, top_k=None, seed=0)
    ckpt, hf = checkpoint_of(model, tok, tmp_path / "ckpt"), tmp_path / "hf"
    export_hf(model, hf, tok)
    assert greedy_in_transformers(hf) == ours
    (hf / "generation_config.json").write_text(STALE["generation_config.json"])
    assert greedy_in_transformers(hf) != ours  # the control: the stale file changes what transformers generates
    for name, text in STALE.items():
        (hf / name).write_text(text)
    (hf / "additional_chat_templates").mkdir()
    (hf / "additional_chat_templates" / "tool_use.jinja").write_text("{{ tools }}")
    kept = {"README.md": "# my model\n", ".gitattributes": "*.safetensors filter=lfs\n"}
    for name, text in kept.items():
        (hf / name).write_text(text)
    (hf / "notes.txt").write_text("mine")
    # a file it does not know is refused by name, before anything is removed
    err = cli_error(capsys, monkeypatch, "export", ckpt, "--hf", hf, "--force")
    assert "holds notes.txt, which modern-gpt export does not write" in err
    assert all((hf / name).exists() for name in STALE)
    (hf / "notes.txt").unlink()
    code, out, err = run_main(capsys, monkeypatch, "export", ckpt, "--hf", hf, "--force")
    assert code == 0, (out, err)
    assert sorted(p.name for p in hf.iterdir()) == sorted([*kept, *WRITTEN])
    assert all((hf / name).read_text() == text for name, text in kept.items())
    assert greedy_in_transformers(hf) == ours


def test_export_refuses_a_folder_named_like_a_file_transformers_reads(tmp_path, capsys, monkeypatch):
    tok = tokenizer_of("char", tmp_path)
    ckpt = checkpoint_of(build((), vocab_size=tok.vocab_size), tok, tmp_path / "ckpt")
    (tmp_path / "hf" / "generation_config.json").mkdir(parents=True)
    (tmp_path / "hf" / "runs").mkdir()  # another folder inside is never read: kept
    err = cli_error(capsys, monkeypatch, "export", ckpt, "--hf", tmp_path / "hf", "--force")
    assert "holds generation_config.json/, which" in err


def test_export_force_into_another_checkpoint_is_refused_and_leaves_it_whole(tmp_path, capsys, monkeypatch):
    """Before, --force overwrote its config.json and model.safetensors: a checkpoint that no longer loaded."""
    from modern_gpt.run.checkpoint import load_checkpoint

    tok = tokenizer_of("char", tmp_path)
    ckpt = checkpoint_of(build((), vocab_size=tok.vocab_size), tok, tmp_path / "ckpt")
    other = checkpoint_of(build(("gqa",), vocab_size=tok.vocab_size), tok, tmp_path / "other")
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    err = cli_error(capsys, monkeypatch, "export", ckpt, "--hf", other, "--force")
    assert "holds metrics.json, which modern-gpt export does not write" in err
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before
    assert load_checkpoint(other)[0].config.gqa


def test_generate_extrapolate_and_export_name_a_transformers_folder(tmp_path, capsys, monkeypatch):
    tok = tokenizer_of("char", tmp_path)
    export_hf(build(QWEN3, vocab_size=tok.vocab_size), tmp_path / "hf", tok)
    sharded = tmp_path / "sharded"  # a folder as the hub ships a large model: no model.safetensors, no "architectures"
    sharded.mkdir()
    (sharded / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (sharded / "model.safetensors.index.json").write_text("{}")
    for folder, arch in ((tmp_path / "hf", "Qwen3ForCausalLM"), (sharded, "a llama model")):
        for args in (("generate", folder), ("extrapolate", folder), ("export", folder, "--hf", tmp_path / "out")):
            err = cli_error(capsys, monkeypatch, *args)
            assert f"{folder} is a Hugging Face transformers folder ({arch}), not a modern-gpt checkpoint" in err
            assert "AutoModelForCausalLM.from_pretrained" in err and "damaged" not in err


def test_export_into_a_symbolic_link_loop_is_one_sentence(tmp_path, capsys, monkeypatch):
    """--hf a link to itself raised RuntimeError ('Symlink loop') from Path.resolve: a traceback."""
    tok = tokenizer_of("char", tmp_path)
    ckpt = checkpoint_of(build((), vocab_size=tok.vocab_size), tok, tmp_path / "ckpt")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    err = cli_error(capsys, monkeypatch, "export", ckpt, "--hf", tmp_path / "loop", "--force")
    assert f"--hf {tmp_path / 'loop'} cannot be followed" in err


def test_export_into_a_folder_it_cannot_read_is_one_sentence(tmp_path, capsys, monkeypatch):
    """Another user's folder (mode 700): listing it raised PermissionError, a traceback (root reads any folder,
    so the refusal is simulated)."""
    import pathlib

    tok = tokenizer_of("char", tmp_path)
    ckpt = checkpoint_of(build((), vocab_size=tok.vocab_size), tok, tmp_path / "ckpt")
    locked = tmp_path / "locked"
    locked.mkdir()
    real = pathlib.Path.iterdir

    def iterdir(self):
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    err = cli_error(capsys, monkeypatch, "export", ckpt, "--hf", locked, "--force")
    assert f"cannot read the folder {locked}: Permission denied; choose another --hf." in err
