"""The modern components: the one list every consumer imports, each with a line on what it replaces.

Torch-free on purpose. The command line builds its switches and help from this module. `--help` or an
unknown component must not wait a second or more for torch to load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import UserError

# The modern components, in the order the cumulative ablation stacks them. This is the
# one place the list lives: the CLI switches, the settings, the plans, explain, export
# and the tests all derive from it (tests/core/test_components.py checks that each does).
# A new component needs a line here, one in COMPONENT_SUMMARY, a ModelConfig field
# (config.py) and its piece in the story of model/gpt.py.
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
    """The one check of component names, given by a user or read from a file. Returns the first unknown name
    as 'unknown component 'x'; the components are ...'. None when every name is known."""
    unknown = next((n for n in names if n not in COMPONENTS and n not in PLUGINS), None)
    if unknown is None:
        return None
    mine = f" and your plugins' {', '.join(PLUGINS)}" if PLUGINS else " (a component of your own: --plugin FILE)"
    return f"unknown component {unknown!r}; the components are {', '.join(COMPONENTS)}{mine}"


# ---------------------------------------------------------------------------
# Your own component (docs/components.md): a plugin file's module-level COMPONENTS = [Component(...), ...]
# adds a piece that fills one slot of the model. The six above stay written out in model/gpt.py's story;
# this is a way in for others, read there by plugin_for. plugins.py loads the files into PLUGINS.
# ---------------------------------------------------------------------------
# slot -> the built-in component that fills it when on (a plugin in that slot cannot be on beside it)
SLOTS = {"norm": "rmsnorm", "mlp": "swiglu", "position": "rope", "qk": "qk_norm", "block": None}
# what each slot's factory is called with, and what its module's forward takes and returns
SLOT_SIGNATURES = {
    "norm": "factory(cfg, dim) -> Module; forward(x) -> x's shape",
    "mlp": "factory(cfg) -> Module; forward(x) -> x's shape",
    "position": "factory(cfg) -> Module; forward(start, T) -> (T, dim) added to the embeddings, or with "
    "applies_to='qk' forward(q, k, start) -> (q, k)",
    "qk": "factory(cfg) -> Module; forward(q, k) -> (q, k), per head, before RoPE",
    "block": "factory(cfg, layer) -> Module (e.g. a model.Block subclass); forward(x, cos_sin, cache) -> x's shape",
}


@dataclass(frozen=True)
class Component:
    """One component of your own. Its name is what --components and --variants take. Its summary is one line,
    'classic -> yours'. It fills a slot (see SLOTS), and its factory builds its module."""

    name: str
    summary: str
    slot: str
    factory: Callable
    applies_to: str = "embeddings"  # a position slot's: "embeddings" (added to them) or "qk" (applied to q and k)
    source: str = field(default="", compare=False)  # the plugin file it came from (plugins.py sets it)

    def build(self, *args):
        """The factory's module. A factory that raises or returns no module is the plugin's error, by name."""
        settings = dict(getattr(args[0], "__dict__", {})) if args else {}
        try:
            module = self.factory(*args)
        except (Exception, SystemExit) as e:  # sys.exit in a factory is the plugin's error too, not the command's end
            raise PluginError(f"{self.where}'s factory raised {type(e).__name__}: {e}") from e
        changed = settings and self._changed(args[0], settings)
        if changed:
            raise PluginError(f"{self.where}'s factory changed the model's settings ({changed}); a factory reads cfg")
        if not callable(module) or not hasattr(module, "parameters"):
            raise PluginError(f"{self.where}'s factory returned {type(module).__name__}, not a torch Module")
        module._modern_gpt_component = self  # plugins.check_forward reads it
        return module

    @staticmethod
    def _changed(cfg, settings: dict) -> str:
        """Put back what a factory set on its frozen config (by object.__setattr__). Names the first, or "" for none."""
        now = dict(vars(cfg))
        gone = object()
        changed = [k for k in settings.keys() | now.keys() if not _same(settings.get(k, gone), now.get(k, gone))]
        for k in changed:
            if k in settings:
                object.__setattr__(cfg, k, settings[k])
            else:
                object.__delattr__(cfg, k)
        k = min(changed, default="")
        return k and f"{k} from {settings.get(k)!r} to {now.get(k)!r}"

    @property
    def where(self) -> str:
        return f"component {self.name!r} of the plugin {self.source or '(unnamed)'}"


def _same(a, b) -> bool:
    return a is b or (type(a) is type(b) and a == b)


class PluginError(UserError, ValueError):
    """A plugin file or one of its components is wrong: one sentence naming the file."""

    def __init__(self, text: str):
        super().__init__(text.rstrip(".") + ".")


PLUGINS: dict[str, Component] = {}  # the loaded plugin components by name, in the order loaded (plugins.py)
# A plugin model's parameters are counted from its built modules: plugins.py (which builds models) puts its
# counter here, so that config.param_counts, torch-free, answers for every model.
BUILT_COUNTS: list[Callable] = []


def plugin_for(cfg, slot: str) -> Component | None:
    """The plugin component on in cfg that fills this slot, or None. ModelConfig.validate allows one a slot."""
    return next((PLUGINS[n] for n in cfg.extra_components if PLUGINS[n].slot == slot), None)


def label(components) -> str:
    """The name of a set of components, as parse_variant reads it back. 'classic' for none, else the names
    joined by '+', as 'rmsnorm+rope'. Checkpoint folders, tables and messages name a model by it."""
    return "+".join(components) or "classic"


def all_components() -> tuple[str, ...]:
    """The built-in components, then the loaded plugins' ones."""
    return (*COMPONENTS, *PLUGINS)


def summary(name: str) -> str:
    return COMPONENT_SUMMARY.get(name) or PLUGINS[name].summary
