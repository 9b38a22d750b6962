"""Components of your own (--plugin FILE, docs/components.md): the three examples ablate and are priced from
their built modules, relu2 is a hand-written squared-ReLU model, the parallel block has one norm a block,
a changed plugin is refused and an unchanged copy accepted, and every bad plugin is one sentence, exit 2."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import modern_gpt.components as components
import modern_gpt.plugins as plugins
from modern_gpt.config import ModelConfig
from modern_gpt.data import load_corpus
from modern_gpt.model import GPT, linear
from modern_gpt.results import ResultsDir
from tests.clihelp import run_main, tiny

EXAMPLES = Path(__file__).parent.parent / "examples" / "components"
SMALL = ModelConfig(vocab_size=50, context=16, dim=32, heads=4, layers=2)


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test loads its own plugins: the registry is emptied before and restored after."""
    monkeypatch.setattr(components, "PLUGINS", {})
    monkeypatch.setattr(plugins, "PLUGINS", components.PLUGINS)
    for module in ("config", "model", "planning", "export", "explain"):
        mod = __import__(f"modern_gpt.{module}", fromlist=["x"])
        if hasattr(mod, "PLUGINS"):
            monkeypatch.setattr(mod, "PLUGINS", components.PLUGINS)
    monkeypatch.setattr(plugins, "LOADED", {})


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
        self.fc, self.proj = linear(cfg, cfg.dim, cfg.hidden), linear(cfg, cfg.hidden, cfg.dim)

    def forward(self, x):
        return self.proj(F.relu(self.fc(x)) ** 2)


def test_relu2_is_a_hand_written_squared_relu_model_bitwise(monkeypatch):
    plugins.load([EXAMPLES / "relu2.py"])
    torch.manual_seed(0)
    mine = GPT(SMALL.with_components(("rmsnorm", "rope", "relu2"))).eval()
    import modern_gpt.model as model

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
    path.write_text("from modern_gpt.components import Component\nimport torch.nn as nn\n" + text)
    return path


BAD = {
    "syntax": ("def (:\n", "syntax error on line 3"),
    "import": ("import no_such_module_here\n", "ModuleNotFoundError"),
    "none": ("x = 1\n", "declares no COMPONENTS"),
    "no name": ("COMPONENTS = [Component('', 'a -> b', 'mlp', nn.Identity)]\n", "has no name"),
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
            "returns shape (1, 1, 7) where the model needs (1, 1, 16)",
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
