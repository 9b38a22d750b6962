"""The model types explain knows, one Family a type: what its transformers class builds, as far as parameters
and components go. That is its norms per block, a gated MLP or not, the bias fields it reads, its QK-norm and
RoPE. It is also its class defaults for the fields a file leaves out, and where it reads a field of its own.
A row is data. explain.py reads every family through the same fields; a family that differs says how in one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


# Which of (q k v, o, MLP) carry a bias, from the fields the class reads.
def _attention_bias(c: dict) -> tuple:
    return (c.get("attention_bias", False),) * 2 + (False,)  # Qwen3, OLMo-2, Gemma, Apertus: q, k, v and o


def _llama_bias(c: dict) -> tuple:
    return (c.get("attention_bias", False),) * 2 + (c.get("mlp_bias", False),)


def _no_bias(c: dict) -> tuple:
    return (False, False, False)  # Mistral, Phi-3: whatever the file says


@dataclass(frozen=True)
class Family:
    """What one transformers model type builds, as far as its parameters and components go."""

    name: str
    cls: str  # the class AutoModelForCausalLM builds for it
    tie: bool  # tie_word_embeddings when the file leaves it out
    vocab: int  # vocab_size when the file leaves it out
    hidden: int | None  # intermediate_size when the file leaves it out (GPT-2: 4 x n_embd)
    biases: Callable[[dict], tuple[bool, bool, bool]]  # (q k v, o, MLP) from the config; norms: `layernorm`
    reads: frozenset = frozenset({"num_key_value_heads", "head_dim"})  # optional fields of OPTIONAL_STRUCTURE it reads
    kv_heads: int | None = None  # class default K/V heads when the file leaves it out; None: one per query head
    head_dim: int | None = None  # class default head_dim; None: hidden_size / heads
    layernorm: bool = False  # LayerNorm with a shift, not RMSNorm
    gated: bool = True  # three MLP matrices (a gate), or two
    norms: int = 2  # norms per block
    qk_norm: str = ""  # "" none, "head" one head_dim gain each for q and k, "projection" over all heads (OLMo-2)
    act_field: str = "hidden_act"
    act: str = "silu"  # the class default activation
    act_params: dict = field(default_factory=dict)  # activation -> learned parameters per layer
    rope: bool = True
    theta: float = 10000.0  # RoPE base when neither rope_parameters nor the legacy field gives one
    theta_field: str = "rope_theta"  # the legacy field the config class reads the base from
    partial_rotary: float = 1.0
    default_rope: dict | None = None  # the class's rope_parameters when the file has none (Apertus: llama3 scaling)
    note: str = ""  # what the family implies without a field
    # Where a family reads a field of its own, or reads one differently: each says how.
    size_names: tuple = (("hidden_size",), ("num_attention_heads",), ("num_hidden_layers",))  # the class's names
    width_field: str = "intermediate_size"  # the MLP width's field (hidden above: its default; None: 4 x dim)
    context_fields: tuple[str, ...] = ("max_position_embeddings",)  # the context length's, first one first
    context_default: int = 0  # the context when the file gives none (0: not said)
    act_aliases: dict = field(default_factory=dict)  # an activation name the class reads as another
    qk_norm_switch: str = ""  # a field that, true, puts a LayerNorm on each head's q and k (StableLM)
    parallel_switch: str = ""  # a field that, true, feeds attention and the MLP one normalised input (one norm)
    rope_per_layer_type: bool = False  # one RoPE block per layer type: full attention and the sliding window
    cross_attention_field: str = ""  # a field that, true, adds cross-attention blocks (GPT-2)


LLAMA_READS = frozenset({"num_key_value_heads", "head_dim", "attention_bias", "mlp_bias"})
ATTN_READS = frozenset({"num_key_value_heads", "head_dim", "attention_bias"})
FOUR_NORMS = "four RMSNorms per block, before and after attention and before and after the MLP."
# A table: one model type per entry; vocab and width are the class defaults for a file without them.
# fmt: off
FAMILIES = {
    "llama": Family("Llama", "LlamaForCausalLM", False, 32000, 11008, _llama_bias, reads=LLAMA_READS),
    "mistral": Family("Mistral", "MistralForCausalLM", False, 32000, 14336, _no_bias, kv_heads=8),
    "qwen2": Family(
        "Qwen2", "Qwen2ForCausalLM", False, 151936, 22016, lambda c: (True, False, False), kv_heads=32,
        note="Qwen2 (no field): the q, k and v projections always carry a bias, the output projection none.",
    ),
    "qwen3": Family(
        "Qwen3", "Qwen3ForCausalLM", False, 151936, 22016, _attention_bias, reads=ATTN_READS, kv_heads=32,
        head_dim=128, qk_norm="head",
    ),
    "olmo2": Family(
        "OLMo-2", "Olmo2ForCausalLM", False, 50304, 11008, _attention_bias, reads=ATTN_READS, qk_norm="projection",
        note="OLMo-2 (no field): its two norms per block sit after attention and after the MLP (post-norm).",
    ),
    "gemma": Family(
        "Gemma", "GemmaForCausalLM", True, 256000, 24576, _attention_bias, reads=ATTN_READS, kv_heads=16,
        head_dim=256, act="gelu_pytorch_tanh", act_aliases={"gelu": "gelu_pytorch_tanh"},  # GemmaConfig: legacy gelu
    ),
    "gemma2": Family(
        "Gemma-2", "Gemma2ForCausalLM", True, 256000, 9216, _attention_bias, reads=ATTN_READS, kv_heads=4,
        head_dim=256, norms=4, act_field="hidden_activation", act="gelu_pytorch_tanh",
        note="Gemma-2 (no field): " + FOUR_NORMS,
    ),
    "gemma3_text": Family(
        "Gemma-3", "Gemma3ForCausalLM", True, 262208, 9216, _attention_bias, reads=ATTN_READS, kv_heads=4,
        head_dim=256, norms=4, qk_norm="head", act_field="hidden_activation", act="gelu_pytorch_tanh",
        theta=1_000_000.0, note="Gemma-3 (no field): " + FOUR_NORMS, rope_per_layer_type=True,
    ),
    "phi3": Family(
        "Phi-3", "Phi3ForCausalLM", False, 32064, 8192, _no_bias,
        note="Phi-3 (no field): q, k, v are one fused matrix and so are the MLP's gate and up (the same parameters).",
    ),
    "gpt_neox": Family(
        "GPT-NeoX", "GPTNeoXForCausalLM", False, 50432, 24576, lambda c: (c.get("attention_bias", True),) * 2 + (True,),
        reads=frozenset({"attention_bias", "use_parallel_residual"}), layernorm=True, gated=False, act="gelu",
        theta_field="rotary_emb_base", partial_rotary=0.25,
    ),
    "gpt2": Family(
        "GPT-2", "GPT2LMHeadModel", True, 50257, None, lambda c: (True, True, True), reads=frozenset(),
        layernorm=True, gated=False, act_field="activation_function", act="gelu_new", rope=False,
        # GPT2Config maps hidden_size to n_embd and so on; its MLP width is n_inner, 4 x n_embd when null
        size_names=(("hidden_size", "n_embd"), ("num_attention_heads", "n_head"), ("num_hidden_layers", "n_layer")),
        width_field="n_inner", context_fields=("n_positions", "max_position_embeddings"), context_default=1024,
        cross_attention_field="add_cross_attention",
    ),
    "starcoder2": Family(
        "Starcoder2", "Starcoder2ForCausalLM", True, 49152, 12288, lambda c: (c.get("use_bias", True),) * 3,
        reads=frozenset({"num_key_value_heads", "head_dim", "use_bias"}), kv_heads=2, layernorm=True, gated=False,
        act="gelu_pytorch_tanh",
    ),
    "stablelm": Family(
        "StableLM", "StableLmForCausalLM", False, 50304, 6912, lambda c: (c.get("use_qkv_bias", False), False, False),
        reads=frozenset({"num_key_value_heads", "use_qkv_bias", "qk_layernorm", "use_parallel_residual"}),
        kv_heads=32, layernorm=True, partial_rotary=0.25, qk_norm_switch="qk_layernorm",
        parallel_switch="use_parallel_residual",
    ),
    "arcee": Family(
        "Arcee", "ArceeForCausalLM", False, 32000, 18432, _llama_bias, reads=LLAMA_READS, gated=False, act="relu2",
    ),
    "apertus": Family(
        "Apertus", "ApertusForCausalLM", False, 131072, 14336, _attention_bias, reads=ATTN_READS, gated=False,
        act="xielu", act_params={"xielu": 2}, qk_norm="head", theta=12_000_000.0,
        default_rope={"rope_type": "llama3", "rope_theta": 12_000_000.0, "factor": 8.0},
    ),
}
# fmt: on
# Multimodal wrappers whose text model explain counts (the shapes under text_config), with what they tie by default.
WRAPPERS = {"gemma3": ("Gemma-3 (multimodal)", "Gemma3ForConditionalGeneration", "gemma3_text", True)}
