"""The modern components: the one list every consumer imports, with a line each on what it replaces.

Torch-free on purpose: the command line builds its switches and help from this module, and `--help` or an
unknown component must not wait a second or more for torch to load.
"""

from __future__ import annotations

# The modern components, in the order the cumulative ablation stacks them. This is the
# one place the list lives: the CLI switches, the settings, the plans, explain, export
# and the tests all derive from it (tests/test_components.py checks that each does).
# A new component needs a line here, one in COMPONENT_SUMMARY, a ModelConfig field
# (config.py) and its piece in the story of model.py.
COMPONENTS = ("rmsnorm", "rope", "swiglu", "no_bias", "gqa", "qk_norm")

# classic piece -> modern piece, one line each, for help texts and tables.
COMPONENT_SUMMARY = {
    "rmsnorm": "LayerNorm -> RMSNorm",
    "rope": "learned position table -> rotary position embedding (RoPE)",
    "swiglu": "GELU MLP at 4*dim -> SwiGLU at 2/3*4*dim",
    "no_bias": "a bias in every Linear and norm -> no biases",
    "gqa": "one K/V head per query head -> kv_heads shared K/V heads",
    "qk_norm": "plain q.k -> RMS-normalised q and k per head",
}


def component_problem(names) -> str | None:
    """The one check of component names given by a user or read from a file: the first name that is not one of
    COMPONENTS, as 'unknown component 'x'; the components are ...', or None when every name is one."""
    unknown = next((n for n in names if n not in COMPONENTS), None)
    return None if unknown is None else f"unknown component {unknown!r}; the components are {', '.join(COMPONENTS)}"
