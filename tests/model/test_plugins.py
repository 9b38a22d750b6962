"""Components of your own (--plugin FILE, docs/components.md): the three examples ablate and are priced from
their built modules, relu2 is a hand-written squared-ReLU model, the parallel block has one norm a block,
a changed plugin is refused and an unchanged copy accepted, and every bad plugin is one sentence, exit 2."""

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import modern_gpt
import modern_gpt.core.components as components
import modern_gpt.model.plugins as plugins
from modern_gpt.ablation.results import ResultsDir
from modern_gpt.core.config import ModelConfig
from modern_gpt.core.errors import UserError
from modern_gpt.data.corpus import load_corpus
from modern_gpt.model.gpt import GPT, linear
from tests.clihelp import flat, run_main, tiny

EXAMPLES = Path(__file__).parents[2] / "examples" / "components"
SMALL = ModelConfig(vocab_size=50, context=16, dim=32, heads=4, layers=2)


def isolated_registry(monkeypatch):
    """The plugin registry emptied now and restored when the test ends (monkeypatch's undo)."""
    monkeypatch.setattr(components, "PLUGINS", {})
    monkeypatch.setattr(plugins, "PLUGINS", components.PLUGINS)
    for module in ("core.config", "model.gpt", "ablation.planning", "hf.export", "hf.explain"):
        mod = __import__(f"modern_gpt.{module}", fromlist=["x"])
        if hasattr(mod, "PLUGINS"):
            monkeypatch.setattr(mod, "PLUGINS", components.PLUGINS)
    monkeypatch.setattr(plugins, "LOADED", {})


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test loads its own plugins: the registry is emptied before and restored after."""
    isolated_registry(monkeypatch)


def ablate(capsys, monkeypatch, out, plugin, variants, *extra):
    return run_main(
        capsys,
        monkeypatch,
        "ablate",
        *tiny(2),
        "--plugin",
        plugin,
        "--plan",
        "custom",
        "--variants",
        variants,
        "--seeds",
        "1",
        "--no-placebo",
        "--jobs",
        "1",
        "--out",
        out,
        *extra,
    )


@pytest.mark.parametrize(
    ("file", "variants"),
    [
        ("relu2.py", "classic;relu2"),
        ("parallel.py", "classic;parallel"),
        ("nope.py", "classic;nope"),
    ],
)
def test_each_example_ablates_and_its_price_is_the_built_models(capsys, monkeypatch, tmp_path, file, variants):
    code, out, err = ablate(capsys, monkeypatch, tmp_path / "r", EXAMPLES / file, variants)
    assert code == 0, err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    name = variants.split(";")[1]
    assert meta["plugins"][0]["file"] == file and meta["plugins"][0]["components"] == [name]
    spec = ResultsDir(tmp_path / "r").spec
    vocab = load_corpus(spec.settings.data).tokenizer.vocab_size
    built = GPT(replace(spec.settings.model, vocab_size=vocab).with_components((name,)))
    assert meta["variants"][1]["params"] == sum(p.numel() for p in built.parameters())  # tied weights once
    assert name in out


class HandReLU2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc, self.proj = linear(cfg, cfg.dim, cfg.mlp_width), linear(cfg, cfg.mlp_width, cfg.dim)

    def forward(self, x):
        return self.proj(F.relu(self.fc(x)) ** 2)


def test_relu2_is_a_hand_written_squared_relu_model_bitwise(monkeypatch):
    plugins.load([EXAMPLES / "relu2.py"])
    torch.manual_seed(0)
    mine = GPT(SMALL.with_components(("rmsnorm", "rope", "relu2"))).eval()
    import modern_gpt.model.gpt as model

    monkeypatch.setattr(model, "MLP", HandReLU2)  # the classic MLP's place, with the same init stream
    torch.manual_seed(0)
    hand = GPT(SMALL.with_components(("rmsnorm", "rope"))).eval()
    x = torch.randint(0, 50, (2, 16))
    assert all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), hand.state_dict().values(), strict=True))
    assert torch.equal(mine(x)[0], hand(x)[0])
    classic = GPT(SMALL.with_components(("rmsnorm", "rope"))).eval()  # negative control: GELU differs
    classic.load_state_dict(mine.state_dict())
    monkeypatch.undo()
    assert not torch.equal(GPT(SMALL.with_components(("rmsnorm", "rope"))).eval()(x)[0], mine(x)[0])


def test_the_parallel_block_has_one_norm_and_adds_both_branches():
    plugins.load([EXAMPLES / "parallel.py"])
    torch.manual_seed(0)
    model = GPT(SMALL.with_components(("rmsnorm", "parallel"))).eval()
    norms = [m for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert len(norms) == SMALL.layers + 1  # one a block, and the final one
    block, x = model.blocks[0], torch.randn(2, 5, 32)
    h = block.norm1(x)
    want = x + block.attn(h, None, None) + block.mlp(h)
    assert torch.allclose(block(x, None, None), want)
    sequential = x + block.attn(h, None, None)
    assert not torch.allclose(block(x, None, None), sequential + block.mlp(block.norm1(sequential)))


def test_resume_refuses_a_changed_plugin_and_takes_an_unchanged_copy(capsys, monkeypatch, tmp_path):
    mine = tmp_path / "relu2.py"
    shutil.copy(EXAMPLES / "relu2.py", mine)
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", mine, "classic;relu2", "--seeds", "2")
    assert code == 0, err
    (tmp_path / "r" / "runs" / sorted(p.name for p in (tmp_path / "r" / "runs").iterdir())[-1]).unlink()
    mine.write_text(mine.read_text() + "# changed\n")
    plugins.LOADED.clear(), components.PLUGINS.clear()
    code, _, err = run_main(capsys, monkeypatch, "ablate", "--resume", tmp_path / "r")
    assert code == 2 and "relu2.py has changed" in err and err.count("\n") == 1, err
    copy = tmp_path / "elsewhere" / "relu2.py"
    copy.parent.mkdir()
    shutil.copy(EXAMPLES / "relu2.py", copy)
    plugins.LOADED.clear(), components.PLUGINS.clear()
    code, _, err = run_main(capsys, monkeypatch, "ablate", "--resume", tmp_path / "r", "--plugin", copy)
    assert code == 0, err


def _plugin(tmp_path, text, name="p.py") -> Path:
    path = tmp_path / name
    path.write_text("from modern_gpt import Component\nimport torch.nn as nn\n" + text)
    return path


BAD = {
    "syntax": ("def (:\n", "syntax error on line 3"),
    "import": ("import no_such_module_here\n", "ModuleNotFoundError"),
    "none": ("x = 1\n", "declares no COMPONENTS"),
    "no name": ("COMPONENTS = [Component('', 'a -> b', 'mlp', nn.Identity)]\n", "has no name"),
    # issue 43, class 8: it read "has no name"
    "spaced name": (
        "COMPONENTS = [Component('My Comp', 'a -> b', 'mlp', nn.Identity)]\n",
        "the component name 'My Comp' is not valid: a name is an ASCII Python identifier (letters, digits and _",
    ),
    "no summary": ("COMPONENTS = [Component('m', '', 'mlp', nn.Identity)]\n", "has no summary"),
    "slot": ("COMPONENTS = [Component('m', 'a -> b', 'attention', nn.Identity)]\n", "unknown slot 'attention'"),
    "builtin": ("COMPONENTS = [Component('rope', 'a -> b', 'mlp', nn.Identity)]\n", "name of a built-in"),
    "twice": ("COMPONENTS = [Component('m', 'a -> b', 'mlp', nn.Identity)] * 2\n", "declared by another plugin"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_plugin_file_is_one_sentence_naming_it(capsys, monkeypatch, tmp_path, case):
    text, fragment = BAD[case]
    path = _plugin(tmp_path, text)
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 2 and fragment in err and str(path) in err and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_a_single_component_not_in_a_list_is_loaded(capsys, monkeypatch, tmp_path):
    """Issue 43, class 8: COMPONENTS = Component(...) read "declares no COMPONENTS"."""
    path = _plugin(tmp_path, "COMPONENTS = Component('one', 'GELU MLP -> nothing', 'mlp', lambda cfg: nn.Identity())\n")
    code, out, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 0 and list(components.PLUGINS) == ["one"] and "one" in out, err


def test_missing_folder_and_fifo_plugins_are_refused(capsys, monkeypatch, tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo.py")
    for path, why in (
        (tmp_path / "gone.py", "does not exist"),
        (tmp_path, "not a regular file"),
        (tmp_path / "fifo.py", "not a regular file"),
    ):
        code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
        assert code == 2 and why in err and str(path) in err, err


def test_a_second_plugin_with_the_same_name_and_a_slot_collision_are_refused(capsys, monkeypatch, tmp_path):
    a = _plugin(tmp_path, "COMPONENTS = [Component('m', 'a -> b', 'mlp', nn.Identity)]\n", "a.py")
    b = _plugin(tmp_path, "COMPONENTS = [Component('m', 'a -> c', 'mlp', lambda cfg: nn.Identity())]\n", "b.py")
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", a, "--plugin", b)
    assert code == 2 and "declared by another plugin" in err and str(a) in err, err
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", EXAMPLES / "relu2.py", "--swiglu")
    assert code == 2 and "relu2 and swiglu both fill the model's mlp" in err, err


@pytest.mark.parametrize(
    ("factory", "fragment"),
    [
        ("def make(cfg):\n    raise ValueError('no width')\n", "factory raised ValueError: no width"),
        (
            "def make(cfg):\n    return nn.Linear(cfg.dim, 7)\n",
            "returns shape (2, 16, 7) where the model needs (2, 16, 16)",
        ),
    ],
)
def test_a_factory_that_raises_or_a_wrong_shape_is_refused_before_training(
    capsys, monkeypatch, tmp_path, factory, fragment
):
    path = _plugin(tmp_path, factory + "COMPONENTS = [Component('m', 'a -> b', 'mlp', make)]\n")
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;m")
    assert code == 2 and fragment in err and str(path) in err, err
    assert not (tmp_path / "r").exists()  # nothing written


def test_a_forward_that_raises_mid_run_is_that_runs_error(capsys, monkeypatch, tmp_path):
    text = (
        "class Late(nn.Linear):\n"
        "    calls = 0\n"
        "    def __init__(self, cfg):\n"
        "        super().__init__(cfg.dim, cfg.dim)\n"
        "    def forward(self, x):\n"
        "        Late.calls += 1\n"
        "        if Late.calls > 2:\n"
        "            raise FloatingPointError('late')\n"
        "        return super().forward(x)\n"
        "COMPONENTS = [Component('late', 'a -> b', 'mlp', Late)]\n"
    )
    path = _plugin(tmp_path, text)
    code, out, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;late")
    runs = [json.loads(p.read_text()) for p in (tmp_path / "r" / "runs").glob("*.json")]
    errors = {r["variant"]: r["error"] for r in runs}
    assert errors["classic"] == "" and "FloatingPointError: late" in errors["late"] and str(path) in errors["late"]


@pytest.mark.slow
def test_two_workers_give_the_numbers_of_one_for_a_plugin_component(capsys, monkeypatch, tmp_path):
    """The workers are spawned processes that get the plugin's source with each job, not its path."""
    mine = tmp_path / "relu2.py"
    shutil.copy(EXAMPLES / "relu2.py", mine)
    values = {}
    for jobs in ("1", "2"):
        code, _, err = ablate(
            capsys, monkeypatch, tmp_path / jobs, mine, "classic;relu2", "--jobs", jobs, "--threads", "1"
        )
        assert code == 0, err
        runs = [json.loads(p.read_text()) for p in sorted((tmp_path / jobs / "runs").glob("*.json"))]
        values[jobs] = {(r["variant"], r["seed"]): r["val_loss"] for r in runs}
    assert values["1"] == values["2"] and len(values["1"]) == 2


# ---------------------------------------------------------------------------
# report, generate, extrapolate and export: --plugin gives a copy of the recorded plugin on another path
# ---------------------------------------------------------------------------
READERS = {
    "report": ("folder", ["report", "{made}"]),
    "generate": ("checkpoint", ["generate", "{made}", "--tokens", "3", "--device", "cpu"]),
    "extrapolate": ("checkpoint", ["extrapolate", "{made}", "--contexts", "16", "--windows", "1", "--device", "cpu"]),
    "export": ("checkpoint", ["export", "{made}", "--hf", "{hf}"]),
}


def _made_with_a_copy(capsys, monkeypatch, tmp_path, what: str) -> Path:
    """A results folder (ablate) or a checkpoint (train) made with tmp_path/made/relu2.py, which is then removed,
    and the registries emptied as in a new process."""
    made = tmp_path / "made" / "relu2.py"
    made.parent.mkdir()
    shutil.copy(EXAMPLES / "relu2.py", made)
    if what == "folder":
        code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", made, "classic;relu2")
    else:
        code, _, err = run_main(capsys, monkeypatch, "train", *tiny(2), "--plugin", made, "--out", tmp_path / "r")
    assert code == 0, err
    made.unlink()
    return tmp_path / "r"


@pytest.mark.parametrize("command", list(READERS))
def test_each_reader_takes_an_unchanged_copy_and_refuses_a_changed_or_missing_one(
    capsys, monkeypatch, tmp_path, command
):
    what, argv = READERS[command]
    made = _made_with_a_copy(capsys, monkeypatch, tmp_path, what)
    args = [a.format(made=made, hf=tmp_path / "hf") for a in argv]
    copy, changed = tmp_path / "copy" / "relu2.py", tmp_path / "changed" / "relu2.py"
    for path, text in ((copy, ""), (changed, "# changed\n")):
        path.parent.mkdir()
        path.write_text((EXAMPLES / "relu2.py").read_text() + text)

    def call(*extra):
        plugins.LOADED.clear(), components.PLUGINS.clear()  # each call as a new process
        code, out, err = run_main(capsys, monkeypatch, *args, *extra)
        assert "Traceback" not in err
        return code, out, err

    code, out, err = call()  # the recorded file is gone, and no copy given
    if command == "report":  # nothing trains: the table from the runs, the missing file named in a footnote
        assert code == 0 and flat(f"Missing plugin: {tmp_path / 'made' / 'relu2.py'} (relu2)") in flat(out), (out, err)
    else:
        assert code == 2 and f"{tmp_path / 'made' / 'relu2.py'} (relu2), which is missing" in err, err
        assert "give a copy with --plugin" in err and err.count("\n") == 1
    code, _, err = call("--plugin", changed)
    assert code == 2 and f"the plugin {changed} has changed since {made} was made" in err, err
    assert err.count("\n") == 1
    code, _, err = call("--plugin", tmp_path / "nowhere.py")
    assert code == 2 and f"the plugin {tmp_path / 'nowhere.py'} does not exist" in err and err.count("\n") == 1
    code, out, err = call("--plugin", copy)
    if command == "export":  # accepted, then refused for what it is: transformers has no class for relu2
        assert code == 2 and f"relu2 (from the plugin {copy}) does not export" in err, err
        assert not (tmp_path / "hf").exists()
    else:
        assert code == 0, err
        assert {"report": "relu2", "extrapolate": "16"}.get(command, "") in out


# ---------------------------------------------------------------------------
# Workers get the plugin by value (and Ray tasks: tests/executors/test_executors.py, on its cluster)
# ---------------------------------------------------------------------------
def _tiny_settings():
    from modern_gpt.core.settings import resolve

    tiny_model = {"model.context": 16, "model.dim": 16, "model.heads": 2, "model.layers": 1}
    return resolve(None, True, {"train.steps": 2, "train.eval_every": 2, "train.eval_tokens": 1024, **tiny_model})


@pytest.mark.slow
def test_a_spawned_worker_trains_a_plugin_component_whose_file_is_gone(tmp_path):
    """The job carries the plugin's source: with the file renamed away, a fresh worker process still trains
    relu2, to the value this process gets; the same job without its sources cannot (negative control)."""
    import math

    from modern_gpt.ablation import planning, running
    from modern_gpt.ablation.executors.local import LocalPool

    mine = tmp_path / "relu2.py"
    shutil.copy(EXAMPLES / "relu2.py", mine)
    plugins.load([mine])
    spec = planning.plan_spec(
        _tiny_settings(), planning.Request("ablate", "custom", variants="relu2", seeds="1", placebo=False)
    )
    ablation = running.start(spec, tmp_path / "r", "test")
    (job,) = ablation.pending()
    assert job.plugins == ((str(mine), mine.read_text(), ""),)
    mine.rename(tmp_path / "elsewhere.py")
    records = []
    LocalPool(1).run([job], ablation.corpus, lambda *step: None, records.append)
    assert records[0]["error"] == "" and math.isfinite(records[0]["val_loss"])
    assert records[0]["val_loss"] == job(ablation.corpus)["val_loss"]  # in this process, where it is loaded
    with pytest.raises(Exception, match="unknown component 'relu2'"):
        LocalPool(1).run([replace(job, plugins=())], ablation.corpus, lambda *step: None, records.append)


# ---------------------------------------------------------------------------
# An installed package's plugin (the modern_gpt.components entry points)
# ---------------------------------------------------------------------------
def _installed(monkeypatch, tmp_path, module: str, source: str | None) -> Path:
    """A distribution that declares `relu2 = "<module>"` in the modern_gpt.components group, as pip would
    install it: the module on sys.path, and importlib.metadata.entry_points answering for the group."""
    from importlib import metadata

    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    path = site / f"{module}.py"
    if source is not None:
        path.write_text(source)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(__import__("sys").modules, module, raising=False)
    ep = metadata.EntryPoint(name="relu2", value=module, group=plugins.ENTRY_POINTS)
    real = metadata.entry_points

    def entry_points(**kw):
        return metadata.EntryPoints([ep]) if kw.get("group") == plugins.ENTRY_POINTS else real(**kw)

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    return path


def test_an_installed_packages_component_is_ablated_without_plugin(capsys, monkeypatch, tmp_path):
    path = _installed(monkeypatch, tmp_path, "mg_installed_relu2", (EXAMPLES / "relu2.py").read_text())
    code, out, err = run_main(
        capsys, monkeypatch, "ablate", *tiny(2), "--plan", "custom", "--variants", "classic;relu2", "--seeds", "1",
        "--no-placebo", "--jobs", "1", "--out", tmp_path / "r",
    )  # fmt: skip
    assert code == 0, err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["plugins"] == [
        {"file": path.name, "path": str(path), "sha256": plugins.sha256(path.read_text()), "components": ["relu2"]}
    ]
    assert "relu2" in out


def test_an_installed_packages_module_with_a_relative_import_loads_and_travels_with_its_package(monkeypatch, tmp_path):
    """A package's module (mg_pkg.comps) that imports its sibling (from .layers import ...), as packages do."""
    pkg = tmp_path / "site" / "mg_rel_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text((EXAMPLES / "relu2.py").read_text().replace("COMPONENTS", "_UNUSED"))
    comps = "from modern_gpt import Component\nfrom .layers import ReLU2\n"
    comps += "COMPONENTS = [Component('relu2', 'GELU MLP -> squared ReLU', 'mlp', ReLU2)]\n"
    (pkg / "comps.py").write_text(comps)
    _installed(monkeypatch, tmp_path, "mg_rel_pkg.comps", None)
    monkeypatch.delitem(__import__("sys").modules, "mg_rel_pkg", raising=False)
    (loaded,) = plugins.load([])
    assert loaded.package == "mg_rel_pkg" and loaded.names == ("relu2",)
    plugins.check_forward(SMALL.with_components(("relu2",)))
    sent = plugins.jobs_plugins(SMALL.with_components(("relu2",)))
    assert sent == ((str(pkg / "comps.py"), comps, "mg_rel_pkg"),)
    components.PLUGINS.clear()  # a worker: nothing loaded, the job's sources alone
    plugins.LOADED.clear()
    plugins.install_all(sent)
    assert list(components.PLUGINS) == ["relu2"]
    plugins.check_forward(SMALL.with_components(("relu2",)))  # its factory, from the package's sibling


def test_an_installed_plugin_that_cannot_import_is_one_sentence(capsys, monkeypatch, tmp_path):
    _installed(monkeypatch, tmp_path, "mg_broken_plugin", "import no_such_module_anywhere\n")
    code, _, err = run_main(capsys, monkeypatch, "params")
    assert code == 2 and "the plugin mg_broken_plugin (entry point 'relu2'" in err, err
    assert "ModuleNotFoundError" in err and err.count("\n") == 1 and "Traceback" not in err


# ---------------------------------------------------------------------------
# The qk slot, and a position scheme applied to q and k
# ---------------------------------------------------------------------------
QSCALE = """
import torch
class QScale(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(1))
    def forward(self, q, k):
        return q * self.gain, k
COMPONENTS = [Component('qscale', 'plain q.k -> a learned gain on q', 'qk', QScale)]
"""


def test_a_qk_component_transforms_q_and_k_in_every_layer(tmp_path):
    plugins.load([_plugin(tmp_path, QSCALE)])
    cfg = SMALL.with_components(("qscale",))
    torch.manual_seed(0)
    mine = GPT(cfg).eval()
    torch.manual_seed(0)
    classic = GPT(SMALL).eval()
    assert sum(p.numel() for p in mine.parameters()) == sum(p.numel() for p in classic.parameters()) + SMALL.layers
    assert components.plugin_for(cfg, "qk").name == "qscale"
    x = torch.randint(0, 50, (2, 16))
    assert torch.equal(mine(x)[0], classic(x)[0])  # a gain of 1 is the classic attention, bitwise
    with torch.no_grad():
        mine.blocks[1].attn.qk.gain.fill_(3.0)
    assert not torch.equal(mine(x)[0], classic(x)[0])  # and the gain is read
    with pytest.raises(UserError, match="qscale and qk_norm both fill the model's qk"):
        SMALL.with_components(("qk_norm", "qscale"))


def test_a_qk_component_of_the_wrong_shape_is_refused_on_one_token(tmp_path):
    path = _plugin(tmp_path, QSCALE.replace("return q * self.gain, k", "return q * self.gain, k[..., :-1]"))
    plugins.load([path])
    with pytest.raises(
        components.PluginError,
        match=r"'qscale' of the plugin .*p\.py returns shape .*2, 4, 16, 7\)\) where the model needs",
    ):
        plugins.check_forward(SMALL.with_components(("qscale",)))


QK_ROTATION = """
from modern_gpt.model.gpt import Rotary, apply_rope
class QKRotation(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.rotary = Rotary(cfg.head_dim, cfg.rope_base)
    def forward(self, q, k, start):
        cos, sin = self.rotary(start, q.size(-2))
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)
COMPONENTS = [Component('myrope', 'table -> RoPE, as a plugin', 'position', QKRotation, applies_to='qk')]
"""


def test_a_position_applied_to_q_and_k_is_rope_when_it_rotates_as_rope_does(tmp_path):
    """A rotation of q and k by position, written as a plugin, is the built-in RoPE model bitwise (the same
    init stream, no position table), and a KV cache passes it the right start position."""
    plugins.load([_plugin(tmp_path, QK_ROTATION)])
    torch.manual_seed(0)
    mine = GPT(SMALL.with_components(("myrope",))).eval()
    torch.manual_seed(0)
    rope = GPT(SMALL.with_components(("rope",))).eval()
    assert mine.pos_emb is None and mine.position is None and mine.blocks[0].attn.qk_position is not None
    x = torch.randint(0, 50, (2, 16))
    assert torch.equal(mine(x)[0], rope(x)[0])
    from modern_gpt.model.inference import KVCache

    cache = KVCache()
    one_by_one = torch.cat([mine(x[:, t : t + 1], cache=cache)[0] for t in range(16)], dim=1)
    assert torch.allclose(one_by_one, mine(x)[0], atol=1e-5)
    with pytest.raises(UserError, match="myrope and rope both fill the model's position"):
        SMALL.with_components(("rope", "myrope"))


def test_a_position_on_q_and_k_that_ignores_the_cache_start_fails_the_cache_check(tmp_path):
    """The negative control of the cache check above: rotating every new token as position 0 differs."""
    plugins.load([_plugin(tmp_path, QK_ROTATION.replace("self.rotary(start,", "self.rotary(0,"))])
    torch.manual_seed(0)
    mine = GPT(SMALL.with_components(("myrope",))).eval()
    x = torch.randint(0, 50, (2, 16))
    from modern_gpt.model.inference import KVCache

    cache = KVCache()
    one_by_one = torch.cat([mine(x[:, t : t + 1], cache=cache)[0] for t in range(16)], dim=1)
    assert not torch.allclose(one_by_one, mine(x)[0], atol=1e-5)


# ---------------------------------------------------------------------------
# The forward check of an additive position: exactly (T, dim), not a shape that broadcasts
# ---------------------------------------------------------------------------
ADDITIVE = """
import torch
class Pos(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dim = cfg.dim
        self.register_buffer("zero", torch.zeros(()), persistent=False)
    def forward(self, start, T):
        return self.zero.expand(SHAPE)
COMPONENTS = [Component('pos', 'table -> mine', 'position', Pos)]
"""


@pytest.mark.parametrize("shape", ["1, 1, self.dim", "T, 1", "self.dim"])
def test_an_additive_position_of_a_shape_that_broadcasts_is_refused(capsys, monkeypatch, tmp_path, shape):
    path = _plugin(tmp_path, ADDITIVE.replace("SHAPE", shape))
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;pos")
    assert code == 2 and f"component 'pos' of the plugin {path} returns shape" in err, err
    assert "where the model needs (16, 16)" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


POOLED_MLP = """
class Pooled(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.dim, cfg.dim)
    def forward(self, x):
        return self.fc(x).mean(dim=AXES, keepdim=True)
COMPONENTS = [Component('pooled', 'mlp -> mine', 'mlp', Pooled)]
"""


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("position", ADDITIVE.replace("SHAPE", "1, self.dim")),  # one row for every position: (1, dim) at T = 1
        ("mlp over time", POOLED_MLP.replace("AXES", "1")),  # (B, 1, dim): broadcast over T
        ("mlp over the batch", POOLED_MLP.replace("AXES", "0")),  # (1, T, dim): broadcast over B
    ],
)
def test_an_output_that_drops_the_batch_or_time_axis_is_refused(tmp_path, kind, text):
    """At one token of one sequence such an output has the right shape and would broadcast in training."""
    plugins.load([_plugin(tmp_path, text)])
    name = "pos" if kind == "position" else "pooled"
    with pytest.raises(components.PluginError, match=f"'{name}' of the plugin .*p\\.py returns shape"):
        plugins.check_forward(SMALL.with_components((name,)))


def test_an_additive_position_of_the_right_shape_passes_the_check(tmp_path):
    plugins.load([_plugin(tmp_path, ADDITIVE.replace("SHAPE", "T, self.dim"))])  # the control
    plugins.check_forward(SMALL.with_components(("pos",)))


# ---------------------------------------------------------------------------
# --debug, and --match-params with a plugin row
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "last"), [("x = 1\ndef (:\n", "SyntaxError"), BAD["import"][:1] + ("No module",)])
def test_debug_shows_the_traceback_of_a_plugin_that_fails_to_load(capsys, monkeypatch, tmp_path, text, last):
    path = _plugin(tmp_path, text)
    code, _, err = run_main(capsys, monkeypatch, "--debug", "params", "--plugin", path)
    assert code == 2 and "Traceback (most recent call last)" in err and last in err, err
    assert f'File "{path}", line' in err  # the plugin's own line, in the traceback
    assert err.splitlines()[-1].startswith(f"modern-gpt: error: the plugin {path}")
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)  # without --debug: the sentence
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1


def test_match_params_sizes_a_plugin_row_from_its_built_modules():
    from modern_gpt.ablation.planning import Request, plan_spec, variant_config
    from modern_gpt.core.config import non_embedding_params

    plugins.load([EXAMPLES / "relu2.py"])
    settings = _tiny_settings()

    def body(v) -> int:  # non-embedding parameters of the built model
        model = GPT(replace(variant_config(settings.model, v), vocab_size=50))
        return sum(
            p.numel() for n, p in model.named_parameters() if not n.startswith(("tok_emb", "pos_emb", "lm_head"))
        )

    matched = plan_spec(
        settings, Request("ablate", "custom", variants="swiglu;relu2", seeds="1", match_params=True, placebo=False)
    ).variants
    plain = plan_spec(settings, Request("ablate", "custom", variants="swiglu;relu2", seeds="1", placebo=False)).variants
    assert matched[1].mlp_hidden is not None and plain[1].mlp_hidden is None
    assert abs(body(matched[1]) - body(matched[0])) <= 0.01 * body(matched[0])
    assert abs(body(plain[1]) - body(plain[0])) > 0.01 * body(plain[0])  # unmatched, relu2 is 4*dim wide
    cfg = replace(variant_config(settings.model, matched[1]), vocab_size=50)
    assert non_embedding_params(plugins.built_counts(cfg)) == body(matched[1])


def test_the_counter_of_built_modules_agrees_with_the_formula_for_every_built_in_model():
    """plugins.built_counts sorts a built model's parameters into the pieces by name; for all 64 built-in
    combinations (tied and untied) it must give config.param_counts' arithmetic, piece by piece, so that a plugin
    model's price is counted the way a built-in's is."""
    import itertools

    from modern_gpt.core.components import COMPONENTS
    from modern_gpt.core.config import param_counts

    base = ModelConfig(vocab_size=50, context=16, dim=32, heads=4, layers=2)
    for n in range(len(COMPONENTS) + 1):
        for chosen in itertools.combinations(COMPONENTS, n):
            for tied in (True, False):
                cfg = replace(base.with_components(chosen), tie_embeddings=tied)
                assert plugins.built_counts(cfg) == param_counts(cfg), (chosen, tied)


def test_a_ladder_made_with_a_plugin_is_read_back_as_an_ablation_folder_is(capsys, monkeypatch, tmp_path):
    """Issue 43, class 2: report, scale --resume (the command an interrupted ladder prints) and
    modern_gpt.report said the ladder file was damaged (unknown component) and advised a new ladder. Each now
    loads the rungs' recorded plugin: report reads the runs alone with a footnote when the file is gone, and a
    resume loads the recorded file, or names it."""
    monkeypatch.chdir(tmp_path)
    made = tmp_path / "made" / "relu2.py"
    made.parent.mkdir()
    shutil.copy(EXAMPLES / "relu2.py", made)
    flags = [*tiny(8, dim=32), "--seeds", "1", "--plan", "custom", "--variants", "classic;relu2"]
    code, _, err = run_main(capsys, monkeypatch, "scale", *flags, "--no-placebo", "--plugin", made, "--out", "L")
    assert code == 0, err

    def call(*args):
        plugins.LOADED.clear(), components.PLUGINS.clear()  # each call as a new process
        code, out, err = run_main(capsys, monkeypatch, *args)
        assert "Traceback" not in err and "not a modern-gpt ladder file" not in err, err
        return code, out, err

    code, out, err = call("report", "L")
    assert code == 0 and "relu2" in out and "Missing plugin" not in out, err
    plugins.LOADED.clear(), components.PLUGINS.clear()
    assert "relu2" in modern_gpt.report("L").summary["variant"].tolist()
    next(Path("L/rung-0/runs").glob("*.json")).unlink()  # an interrupted ladder
    code, _, err = call("scale", "--resume", "L")
    assert code == 0 and len(list(Path("L/rung-0/runs").glob("*.json"))) == 2, err
    made.unlink()
    code, out, err = call("report", "L")
    assert code == 0 and f"Missing plugin: {made} (relu2)" in " ".join(out.split()), (out, err)
    code, _, err = call("scale", "--resume", "L")
    assert code == 2 and f"{made} (relu2), which is missing" in err and err.count("\n") == 1, err
    Path("L/rung-1/meta.json").unlink()
    os.mkfifo("L/rung-1/meta.json")  # never opened for its plugins: a read would wait for a writer for ever
    code, _, err = call("report", "L")
    assert code == 2 and "rung-1 holds no meta.json" in err, err
