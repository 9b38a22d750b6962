"""components.COMPONENTS is the one list: every consumer covers exactly it, and a new component needs
components.py, config.py and model.py only.

Each check runs twice: on the shipped list, and on a prototype seventh component, "parallel_block"
(attention and the MLP read the same input and are added together, as in GPT-J and PaLM). The
prototype is what a branch adding it would change: the name in COMPONENTS and its line in
COMPONENT_SUMMARY (components.py), a ModelConfig field (config.py) and its piece in the block
(model.py). The rest of modern_gpt is
then imported anew, as a fresh process would import it, so every list built at import time (the
CLI switches, the settings, the plans' defaults, export's table) is built from the longer list.
Each consumer must then handle the new component or refuse it by name; none may assume a count.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import re
import sys
import types

import pytest
import torch
import typer
from typer.testing import CliRunner

import modern_gpt.core.components as components_module
import modern_gpt.core.config as config
import modern_gpt.model.gpt as model
from modern_gpt.core.errors import UserError

NEW = "parallel_block"
# what the new component's branch edits, and errors
KEPT = (
    "modern_gpt",
    "modern_gpt.core.components",
    "modern_gpt.core.config",
    "modern_gpt.model.gpt",
    "modern_gpt.core.errors",
)
# each consumer by its short name, and where it lives
CONSUMERS = {
    "explain": "hf.explain",
    "export": "hf.export",
    "planning": "ablation.planning",
    "settings": "core.settings",
    "cli": "cli.commands",
}
NUMBER_WORDS = {5: "five", 6: "six", 7: "seven", 8: "eight"}


class ParallelBlock(model.Block):
    """The prototype's piece: with parallel_block on, x + attn(norm1(x)) + mlp(norm2(x))."""

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.parallel = cfg.parallel_block

    def forward(self, x, cos_sin, cache):
        if not self.parallel:
            return super().forward(x, cos_sin, cache)
        return x + self.drop(self.attn(self.norm1(x), cos_sin, cache)) + self.drop(self.mlp(self.norm2(x)))


def _modern_gpt_modules() -> dict[str, types.ModuleType]:
    return {k: m for k, m in sys.modules.items() if k.startswith("modern_gpt.") and k not in KEPT}


def _import_anew() -> dict[str, types.ModuleType]:
    """The consumers imported again (with everything they import but KEPT), as at startup."""
    for name in _modern_gpt_modules():
        del sys.modules[name]
    return {name: importlib.import_module(f"modern_gpt.{path}") for name, path in CONSUMERS.items()}


def _restore(saved: dict[str, types.ModuleType]) -> None:
    """sys.modules as saved, and each package's attribute for its submodule as import left it."""
    for name in _modern_gpt_modules():
        del sys.modules[name]
    sys.modules.update(saved)
    for name, module in saved.items():
        parent, _, leaf = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], leaf, module)


@pytest.fixture
def seventh(monkeypatch):
    """The consumers imported anew after components.py, config.py and model.py gained the prototype component."""
    new_config = dataclasses.make_dataclass("ModelConfig", [(NEW, bool, False)], bases=(config.ModelConfig,))
    longer = (*components_module.COMPONENTS, NEW)
    for module in (components_module, config, model):  # each kept module's own name for the one list
        if hasattr(module, "COMPONENTS"):
            monkeypatch.setattr(module, "COMPONENTS", longer)
    monkeypatch.setitem(
        components_module.COMPONENT_SUMMARY, NEW, "attention, then the MLP -> attention and the MLP in parallel"
    )
    for module in (config, model):
        if hasattr(module, "ModelConfig"):
            monkeypatch.setattr(module, "ModelConfig", new_config)
    monkeypatch.setattr(model, "Block", ParallelBlock)
    saved = _modern_gpt_modules()
    try:
        yield _import_anew()
    finally:
        _restore(saved)


@pytest.fixture(params=["shipped", "seventh"])
def world(request):
    """(the consumers as modules, the components they must cover, the new ones among them)."""
    if request.param == "shipped":
        return (
            {n: importlib.import_module(f"modern_gpt.{p}") for n, p in CONSUMERS.items()},
            components_module.COMPONENTS,
            (),
        )
    return request.getfixturevalue("seventh"), components_module.COMPONENTS, (NEW,)


def combinations(components):
    return [c for n in range(len(components) + 1) for c in itertools.combinations(components, n)]


def test_the_summary_has_one_classic_to_modern_line_per_component(world):
    _, components, _ = world
    assert list(components_module.COMPONENT_SUMMARY) == list(components)
    assert all(" -> " in line for line in components_module.COMPONENT_SUMMARY.values())  # export names both sides
    fields = {f.name for f in dataclasses.fields(config.ModelConfig)}
    assert set(components) <= fields


def test_explain_detects_each_component_or_names_it_as_not_detected(world):
    mods, components, new = world
    explain = mods["explain"]
    assert set(explain.DETECTORS) <= set(components)  # no stale names
    # every shipped component has a detector; the prototype, which has none, is named
    assert explain.not_detected() == list(new)
    config = {
        "model_type": "qwen3",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 96,
        "vocab_size": 100,
    }
    info = explain.explain_config(config)
    assert info["not_detected"] == explain.not_detected()
    for c in info["not_detected"]:  # refused by name where a reader sees it
        assert any(note.startswith(f"{c} (") for note in info["notes"]), info["notes"]
    assert set(info["components"]) <= set(components) and info["flags"] is not None


def test_export_holds_each_combination_or_refuses_it_by_name(world):
    mods, components, new = world
    export = mods["export"]
    assert {c for t in export.TARGETS for c in t.holds} <= set(components)  # no stale names
    held_on = {c for t in export.TARGETS for c in components if t.state(c) != export.CLASSIC}
    assert set(components) - held_on <= set(new)  # every shipped component exports when on
    base = config.ModelConfig(vocab_size=61, context=16, dim=32, heads=4, layers=2)
    exported = 0
    for combo in combinations(components):
        cfg = base.with_components(combo)
        if frozenset(combo) in export.TABLE:
            assert export.target_for(cfg) is export.TABLE[frozenset(combo)]
            exported += 1
            continue
        with pytest.raises(UserError) as err:
            export.target_for(cfg)
        message = str(err.value).split("; what exports")[0]
        named = set(re.findall(r"\((\w+)(?: off)?\)(?= in | and )", message))
        assert named and named <= set(components), message
        assert {c for c in new if c in combo} <= named, message  # a new component that is on is named
    assert exported == len(export.TABLE) and all(not set(new) & c for c in export.TABLE)


def test_the_plans_have_one_row_per_component(world):
    mods, components, _ = world
    planning = mods["planning"]
    rows = planning.make_plan("cumulative")
    assert [r.name for r in rows] == ["classic", *(f"+{c}" for c in components)]
    assert [r.components for r in rows] == [components[:i] for i in range(len(components) + 1)]
    assert [r.name for r in planning.make_plan("single")] == ["classic", *components]
    assert [r.name for r in planning.make_plan("leave-one-out")] == ["modern", *(f"-{c}" for c in components)]
    assert planning.parse_variant("modern") == components == planning.parse_components(None)


def test_the_cli_has_one_switch_per_component_and_settings_take_every_component(world, tmp_path):
    mods, components, new = world
    cli, settings = mods["cli"], mods["settings"]
    flags = {c: "--" + c.replace("_", "-") for c in components}
    for name, command in typer.main.get_command(cli.app).commands.items():
        switches = {p.name for p in command.params if p.name in flags}
        assert switches in (set(), set(components)), name  # a command has every switch or none
    result = CliRunner().invoke(cli.app, ["params", "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for c, flag in flags.items():
        assert any(f" {flag} " in line and components_module.COMPONENT_SUMMARY[c] in line for line in lines), flag
    # the last component's switch works end to end, and --modern switches on every component
    result = CliRunner().invoke(cli.app, ["params", flags[components[-1]], "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["components"] == [components[-1]]
    modern = json.loads(CliRunner().invoke(cli.app, ["params", "--modern", "--format", "json"]).output)
    assert modern["components"] == list(components)
    assert modern["total"] == config.param_counts(config.ModelConfig().with_components(components))["total"]
    # the TOML key of a component, and the flags a setting gets (components have switches instead)
    toml = tmp_path / "c.toml"
    toml.write_text(f"[model]\n{components[-1]} = true\n")
    assert settings.resolve(str(toml), False, {}).model.components == (components[-1],)
    assert not {s.name for s in settings.cli_settings(("model",))} & set(components)
    # last: the --modern help must not name a count that is no longer true
    help_text = next(line for line in lines if " --modern " in line)
    stale = [w for n, w in NUMBER_WORDS.items() if n != len(components) and re.search(rf"\b{w}\b", help_text, re.I)]
    assert not stale, help_text


def test_the_prototype_is_a_real_parallel_block(seventh):
    """The new component builds, counts, caches and trains like the others; off, it changes nothing."""
    cfg = config.ModelConfig(vocab_size=50, context=16, dim=32, heads=4, layers=2)
    torch.manual_seed(0)
    sequential = model.GPT(cfg).eval()
    torch.manual_seed(0)
    parallel = model.GPT(cfg.with_components([NEW])).eval()
    x = torch.randint(0, 50, (2, 16))
    assert config.param_counts(cfg.with_components([NEW]))["total"] == sum(p.numel() for p in parallel.parameters())
    state = parallel.state_dict()
    assert all(torch.equal(state[k], v) for k, v in sequential.state_dict().items())  # the same weights...
    assert not torch.allclose(sequential(x)[0], parallel(x)[0])  # ...wired differently
    cache = model.KVCache()
    one_by_one = torch.cat([parallel(x[:, t : t + 1], cache=cache)[0] for t in range(16)], dim=1)
    assert torch.allclose(one_by_one, parallel(x)[0], atol=1e-5)
    _, loss = parallel.train()(x[:, :-1], x[:, 1:])
    loss.backward()
    assert all(p.grad is not None for p in parallel.parameters())


def test_a_plugin_component_is_covered_by_every_consumer(monkeypatch):
    """A component from a plugin file (docs/components.md): in the plans, the variants, the price, explain's
    not-detected list, and refused by name by export and beside the built-in that fills its slot."""
    import pathlib

    import modern_gpt.ablation.planning as planning
    import modern_gpt.hf.explain as explain
    import modern_gpt.hf.export as export
    import modern_gpt.model.plugins as plugins

    monkeypatch.setattr(plugins, "LOADED", {})
    monkeypatch.setattr(components_module, "PLUGINS", {})
    for module in (plugins, config, planning, export, explain):
        monkeypatch.setattr(module, "PLUGINS", components_module.PLUGINS, raising=False)
    examples = pathlib.Path(__file__).parents[2] / "examples" / "components"
    plugins.load([examples / "relu2.py"])
    assert planning.parse_variant("modern+relu2") == (
        *(c for c in components_module.COMPONENTS if c != "swiglu"),
        "relu2",
    )
    assert planning.parse_variant("modern") == components_module.COMPONENTS  # --modern stays the six
    rows = planning.make_plan("cumulative", ("rmsnorm", "relu2"))
    assert [r.components for r in rows] == [(), ("rmsnorm",), ("rmsnorm", "relu2")]
    leave = planning.make_plan("leave-one-out", ("rope",))  # the six then, each plan's rows from the one list
    assert [r.name for r in leave] == ["modern", "-rope"] and "relu2" not in leave[0].components
    cfg = config.ModelConfig(vocab_size=50, context=16, dim=32, heads=4, layers=2).with_components(("relu2",))
    assert config.param_counts(cfg)["total"] == sum(p.numel() for p in model.GPT(cfg).parameters())
    assert "relu2" in explain.not_detected()
    with pytest.raises(UserError, match="relu2 .from the plugin .*relu2.py. does not export"):
        export.target_for(cfg)
    with pytest.raises(UserError, match="relu2 and swiglu both fill the model's mlp"):
        cfg.with_components(("swiglu", "relu2"))
