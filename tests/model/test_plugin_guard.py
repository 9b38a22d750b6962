"""Plugins are the user's own trusted code (issue 41): what is guarded is what would silently change the table.
A plugin that changes torch's numeric state (dtype, grad mode, threads, ...) at import, in the check or mid-run
is refused by name and the state put back; one that is not causal is refused (issue 43); one that raises or
exits at import is one sentence; every loaded plugin is recorded; one that fails in backward is refused before
any folder, or mid-run is that run's error. Importing modern-gpt patches nothing in the standard library."""

import json
import subprocess
import sys
import threading

import pytest
import torch

import modern_gpt.core.components as components
import modern_gpt.model.plugins as plugins
from tests.clihelp import run_main, tiny
from tests.model.test_plugins import EXAMPLES, _installed, _plugin, ablate, fresh  # noqa: F401  (fresh: the registries emptied)

MLP = "COMPONENTS = [Component('m', 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n"


def _state() -> dict:
    """What a run depends on that a plugin could change: the tests compare it before and after."""
    return {
        "dtype": torch.get_default_dtype(),
        "grad": torch.is_grad_enabled(),
        "threads": torch.get_num_threads(),
        "device": str(torch.get_default_device()),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "precision": torch.get_float32_matmul_precision(),
        "autocast": torch.is_autocast_enabled("cpu"),
    }


@pytest.fixture(autouse=True)
def restored(monkeypatch, tmp_path):
    """Whatever a plugin did to this process is undone after each test (before the fix, nothing undid it)."""
    monkeypatch.chdir(tmp_path)
    before = _state()
    yield
    torch.set_default_dtype(before["dtype"])
    torch.set_grad_enabled(before["grad"])
    torch.set_num_threads(before["threads"])
    torch.set_default_device(None)
    torch.use_deterministic_algorithms(before["deterministic"])
    torch.set_float32_matmul_precision(before["precision"])
    torch.set_autocast_enabled("cpu", before["autocast"])


def _runs(folder) -> dict:
    """A folder's run files by variant (one seed)."""
    return {r["variant"]: r for r in (json.loads(p.read_text()) for p in (folder / "runs").glob("*.json"))}


# ---------------------------------------------------------------------------
# Item 2: a plugin that changes the process for every row
# ---------------------------------------------------------------------------
AT_IMPORT = {
    "dtype": ("import torch\ntorch.set_default_dtype(torch.float64)\n", "torch's default dtype"),
    "grad": ("import torch\ntorch.set_grad_enabled(False)\n", "grad mode"),
    "threads": ("import torch\ntorch.set_num_threads(torch.get_num_threads() + 1)\n", "torch's threads"),
    "device": ("import torch\ntorch.set_default_device('meta')\n", "torch's default device"),
    "deterministic": ("import torch\ntorch.use_deterministic_algorithms(True)\n", "deterministic algorithms"),
    "precision": ("import torch\ntorch.set_float32_matmul_precision('medium')\n", "float32 matmul precision"),
    "autocast": ("import torch\ntorch.autocast('cpu', dtype=torch.bfloat16).__enter__()\n", "autocast"),
}


@pytest.mark.parametrize("case", list(AT_IMPORT))
def test_a_plugin_that_changes_the_process_at_import_is_refused_and_the_process_restored(
    capsys, monkeypatch, tmp_path, case
):
    text, what = AT_IMPORT[case]
    path = _plugin(tmp_path, text + MLP)
    before = _state()
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 2 and f"the plugin {path} set {what} from" in err and "while loading" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _state() == before  # as it was: a caller that goes on is not changed either


def test_a_plugin_no_row_uses_cannot_change_the_classic_rows_dtype(capsys, monkeypatch, tmp_path):
    """The issue's example: float64 at import changed the classic row's losses though no row used the plugin."""
    path = _plugin(tmp_path, AT_IMPORT["dtype"][0] + MLP)
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;rope")
    assert code == 2 and f"the plugin {path} set torch's default dtype" in err and "float64" in err, err
    assert not (tmp_path / "r").exists() and torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize(
    ("text", "what"), [(AT_IMPORT["dtype"][0], "torch's default dtype"), ("import sys\nsys.exit(0)\n", "SystemExit(0)")]
)
def test_an_installed_packages_plugin_is_guarded_as_a_file_is(capsys, monkeypatch, tmp_path, text, what):
    """Its module is imported as Python imports it (ep.load), before its source runs again as a plugin's."""
    _installed(
        monkeypatch,
        tmp_path,
        "mg_hostile_plugin",
        "from modern_gpt import Component\nimport torch.nn as nn\n" + text + MLP,
    )
    code, _, err = run_main(capsys, monkeypatch, "params")
    assert code == 2 and "mg_hostile_plugin (entry point 'relu2'" in err and what in err, err
    assert err.count("\n") == 1 and torch.get_default_dtype() == torch.float32


STATE_IN_FORWARD = (
    "import torch\n"
    "class Sneaky(nn.Linear):\n"
    "    def __init__(self, cfg):\n"
    "        super().__init__(cfg.dim, cfg.dim)\n"
    "    def forward(self, x):\n"
    "        torch.set_default_dtype(torch.float64)\n"
    "        return super().forward(x)\n"
    "COMPONENTS = [Component('sneaky', 'a -> b', 'mlp', Sneaky)]\n"
)


def test_a_forward_that_changes_the_process_is_refused_before_training(capsys, monkeypatch, tmp_path):
    path = _plugin(tmp_path, STATE_IN_FORWARD)
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;sneaky")
    assert code == 2 and str(path) in err and "torch's default dtype" in err and "forward" in err, err
    assert not (tmp_path / "r").exists() and torch.get_default_dtype() == torch.float32


def test_every_loaded_plugin_is_recorded_and_an_older_folder_resumes(capsys, monkeypatch, tmp_path):
    unused = _plugin(tmp_path, MLP, "unused.py")
    code, _, err = ablate(
        capsys, monkeypatch, tmp_path / "r", EXAMPLES / "relu2.py", "classic;relu2", "--plugin", unused
    )
    assert code == 0, err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert [p["file"] for p in meta["plugins"]] == ["relu2.py"]  # what the rows use: a resume needs it
    assert [(p["file"], p["components"]) for p in meta["loaded_plugins"]] == [
        ("relu2.py", ["relu2"]),
        ("unused.py", ["m"]),
    ]
    assert meta["loaded_plugins"][1]["sha256"] == __import__("hashlib").sha256(unused.read_bytes()).hexdigest()
    # a folder written before loaded_plugins, resumed in a new process without the unused plugin: it resumes
    # (no row needs that file) and gains the record of what this resume loaded
    del meta["loaded_plugins"]
    (tmp_path / "r" / "meta.json").write_text(json.dumps(meta))
    next((tmp_path / "r" / "runs").glob("*.json")).unlink()
    plugins.LOADED.clear(), components.PLUGINS.clear()
    code, _, err = run_main(capsys, monkeypatch, "ablate", "--resume", tmp_path / "r")
    assert code == 0, err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert [p["file"] for p in meta["loaded_plugins"]] == ["relu2.py"] and meta["status"] == "finished"


# ---------------------------------------------------------------------------
# Item 5: a plugin that fails in backward
# ---------------------------------------------------------------------------
IN_PLACE = (
    "import torch\n"
    "class InPlace(nn.Module):\n"
    "    calls = 0\n"
    "    def __init__(self, cfg):\n"
    "        super().__init__()\n"
    "        self.fc = nn.Linear(cfg.dim, cfg.dim)\n"
    "    def forward(self, x):\n"
    "        InPlace.calls += 1\n"
    "        h = torch.sigmoid(self.fc(x))\n"
    "        if InPlace.calls > AFTER:\n"
    "            h.mul_(2.0)  # sigmoid saved h for its backward\n"
    "        return h\n"
    "COMPONENTS = [Component('inplace', 'a -> b', 'mlp', InPlace)]\n"
)


def test_a_plugin_that_fails_in_backward_is_refused_before_any_folder(capsys, monkeypatch, tmp_path):
    path = _plugin(tmp_path, IN_PLACE.replace("AFTER", "0"))
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;inplace")
    assert code == 2 and f"the plugin {path} failed" in err and "backward" in err and "inplace" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_train_with_a_plugin_that_fails_in_backward_is_refused_before_training(capsys, monkeypatch, tmp_path):
    """modern-gpt train runs the same forward-and-backward check as an ablation, before any step."""
    path = _plugin(tmp_path, IN_PLACE.replace("AFTER", "0"))
    args = ["train", "--smoke", "--steps", "2", "--plugin", path, "--out", tmp_path / "ckpt"]
    code, _, err = run_main(capsys, monkeypatch, *args)
    assert code == 2 and "backward" in err and "inplace" in err and "Traceback" not in err, err
    assert not (tmp_path / "ckpt").exists()


def test_a_factory_that_calls_sys_exit_is_the_plugins_error():
    component = components.Component("quits", "a -> b", "mlp", lambda cfg: sys.exit(0))
    with pytest.raises(components.PluginError, match="factory raised SystemExit"):
        component.build(None)


def test_a_backward_that_fails_mid_run_is_that_runs_error_and_the_ablation_goes_on(capsys, monkeypatch, tmp_path):
    """The check's forward is call 1 (one layer), step 1 call 2: step 2's backward fails, past the check."""
    path = _plugin(tmp_path, IN_PLACE.replace("AFTER", "2"))
    code, out, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;inplace;rope", "--steps", "3")
    assert code == 0, err
    runs = _runs(tmp_path / "r")
    assert runs["classic"]["error"] == "" and runs["rope"]["error"] == ""  # the row after it trained too
    assert str(path) in runs["inplace"]["error"] and "RuntimeError" in runs["inplace"]["error"]
    assert "inplace operation" in runs["inplace"]["error"]
    assert json.loads((tmp_path / "r" / "meta.json").read_text())["status"] == "finished"
    code, _, err = run_main(capsys, monkeypatch, "ablate", "--resume", tmp_path / "r")  # it crashed every resume
    assert code == 0 and _runs(tmp_path / "r")["inplace"] == runs["inplace"], err


LATE = (
    "import torch\n"
    "class Late(nn.Module):\n"
    "    calls = 0\n"
    "    def __init__(self, cfg):\n"
    "        super().__init__()\n"
    "        self.fc = nn.Linear(cfg.dim, cfg.dim)\n"
    "    def forward(self, x):\n"
    "        Late.calls += 1\n"
    "        if Late.calls == 3:  # past the check's forward (call 1): mid-run\n"
    "            CHANGE\n"
    "        return self.fc(x)\n"
    "COMPONENTS = [Component('late', 'a -> b', 'mlp', Late)]\n"
)


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ("torch.set_default_dtype(torch.float64)", "torch's default dtype from torch.float32 to torch.float64"),
        ("torch.set_num_threads(torch.get_num_threads() + 1)", "torch's threads"),
        ("torch.autocast('cpu', dtype=torch.bfloat16).__enter__()", "autocast from () to ('cpu',)"),
    ],
)
def test_a_forward_that_changes_the_process_mid_run_is_that_runs_error(capsys, monkeypatch, tmp_path, change, what):
    """Issue 41's case: a change on step 2, past the check, is that run's error naming it, and the rows after it
    train in the process as it was (the same worker, --jobs 1): their numbers equal an ablation without the
    plugin row, bit for bit."""
    path = _plugin(tmp_path, LATE.replace("CHANGE", change))
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;late;rope", "--steps", "3")
    assert code == 0, err
    runs = _runs(tmp_path / "r")
    assert f"the plugin {path} set {what}" in runs["late"]["error"] and "while training" in runs["late"]["error"]
    assert _state()["dtype"] == torch.float32
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "c", path, "classic;rope", "--steps", "3")
    control = _runs(tmp_path / "c")
    assert code == 0 and runs["rope"]["val_loss"] == control["rope"]["val_loss"], err
    assert runs["rope"]["train_loss"] == control["rope"]["train_loss"]


# ---------------------------------------------------------------------------
# Item 6: a plugin that controls the process
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("call", ["sys.exit(0)", "sys.exit(3)", "raise SystemExit", "exit('bye')"])
def test_a_plugin_that_exits_at_import_is_one_sentence_naming_it(capsys, monkeypatch, tmp_path, call):
    path = _plugin(tmp_path, f"import sys\n{call}\n" + MLP)
    code, out, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 2 and str(path) in err and "SystemExit" in err and "line 4" in err, err
    assert err.count("\n") == 1 and out == ""


EXIT_IN_FORWARD = (
    "import sys\n"
    "class Quits(nn.Linear):\n"
    "    calls = 0\n"
    "    def __init__(self, cfg):\n"
    "        super().__init__(cfg.dim, cfg.dim)\n"
    "    def forward(self, x):\n"
    "        Quits.calls += 1\n"
    "        if Quits.calls > AFTER:\n"
    "            sys.exit('no more')\n"
    "        return super().forward(x)\n"
    "COMPONENTS = [Component('quits', 'a -> b', 'mlp', Quits)]\n"
)


def test_a_forward_that_calls_sys_exit_is_refused_before_any_folder(capsys, monkeypatch, tmp_path):
    path = _plugin(tmp_path, EXIT_IN_FORWARD.replace("AFTER", "0"))
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;quits")
    assert code == 2 and str(path) in err and "SystemExit" in err and "no more" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "r").exists()


def test_a_factory_that_calls_sys_exit_is_refused_before_any_folder(capsys, monkeypatch, tmp_path):
    path = _plugin(tmp_path, "import sys\nCOMPONENTS = [Component('q', 'a -> b', 'mlp', lambda cfg: sys.exit(4))]\n")
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;q")
    assert code == 2 and str(path) in err and "SystemExit" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "r").exists()


def test_a_forward_that_calls_sys_exit_mid_run_is_that_runs_error(capsys, monkeypatch, tmp_path):
    path = _plugin(tmp_path, EXIT_IN_FORWARD.replace("AFTER", "2"))
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;quits", "--steps", "4")
    assert code == 0, err
    runs = _runs(tmp_path / "r")
    assert runs["classic"]["error"] == ""
    assert str(path) in runs["quits"]["error"] and "SystemExit" in runs["quits"]["error"]
    assert "no more" in runs["quits"]["error"]


@pytest.mark.slow
def test_a_forward_that_calls_sys_exit_in_a_worker_is_that_runs_error(capsys, monkeypatch, tmp_path):
    """In a pool worker (a fresh process: the check ran in the driver, so its first call is step 1's)."""
    path = _plugin(tmp_path, EXIT_IN_FORWARD.replace("AFTER", "2"))
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;quits", "--steps", "4", "--jobs", "2")
    assert code == 0, err
    runs = _runs(tmp_path / "r")
    assert runs["classic"]["error"] == "" and str(path) in runs["quits"]["error"]
    assert "SystemExit: no more" in runs["quits"]["error"]


def test_a_factory_that_changes_the_frozen_config_is_refused_and_it_is_put_back():
    cfg = components.Component("m", "a -> b", "mlp", lambda c: object.__setattr__(c, "dropout", 0.9))
    model = plugins.ModelConfig(dropout=0.0)
    with pytest.raises(components.PluginError, match="changed the model's settings .dropout from 0.0 to 0.9"):
        cfg.build(model)
    assert model.dropout == 0.0


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("class Boom(BaseException):\n    pass\nraise Boom('x')\n", "raised Boom: x while loading"),
        ("raise GeneratorExit\n", "raised GeneratorExit while loading"),
        ("x = '\\0'\n" + "a = " + "(" * 20 + "1" + ")" * 20 + "\n", None),  # a control: it loads
    ],
)
def test_a_base_exception_at_import_is_one_sentence(capsys, monkeypatch, tmp_path, text, what):
    path = _plugin(tmp_path, text + MLP)
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    if what is None:
        assert code == 0, err
        return
    assert code == 2 and str(path) in err and what in err and err.count("\n") == 1, err


def _file(tmp_path, data: bytes):
    path = tmp_path / "odd.py"
    path.write_bytes(data)
    return path


HEAD = b"from modern_gpt import Component\nimport torch.nn as nn\n"
FILES = {
    "null byte": (b"x = 1\0\n", "null bytes", None),
    "deep": (b"x = " + b"1+" * 200000 + b"1\n", "cannot be compiled: RecursionError", None),
    "components unhashable slot": (
        HEAD + b"COMPONENTS = [Component('m', 'a -> b', ['mlp'], lambda cfg: nn.Identity())]\n",
        "unknown slot ['mlp']",
        None,
    ),
    "components iter raises": (
        HEAD + b"class L(list):\n    def __iter__(s): raise RuntimeError('iter boom')\n"
        b"COMPONENTS = L([Component('m', 'a -> b', 'mlp', lambda cfg: nn.Identity())])\n",
        "reading its COMPONENTS raised RuntimeError: iter boom",
        None,
    ),
    "attribute raises": (
        HEAD + b"class K(Component):\n    def __getattribute__(s, n):\n"
        b"        if n == 'summary': raise RuntimeError('summary boom')\n"
        b"        return object.__getattribute__(s, n)\n"
        b"COMPONENTS = [K('m', 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n",
        "raised RuntimeError: summary boom",
        None,
    ),
    "str subclass name": (
        HEAD + b"class N(str):\n    def __hash__(s): raise RuntimeError('hash')\n"
        b"COMPONENTS = [Component(N('m'), 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n",
        "is not valid: a name is an ASCII Python identifier",
        None,
    ),
    "fullwidth": (
        HEAD + "COMPONENTS = [Component('ｒｏｐｅ', 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n".encode(),
        "the component name 'ｒｏｐｅ' is not valid",
        None,
    ),
    "cyrillic": (
        HEAD + "COMPONENTS = [Component('rоpe', 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n".encode(),
        "an ASCII Python identifier",
        None,
    ),
}


@pytest.mark.parametrize("case", list(FILES))
def test_odd_files_and_components_are_one_sentence(capsys, monkeypatch, tmp_path, case):
    """Before: a traceback (RecursionError, ValueError, TypeError: unhashable, the subclass's error) or a leaked
    KeyError of the loader's module name; a fullwidth 'rope' was another component that printed as rope."""
    data, what, absent = FILES[case]
    path = _file(tmp_path, data)
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 2 and "odd.py" in err and what in err and err.count("\n") == 1, err
    assert "line None" not in err and (absent is None or absent not in err)


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + HEAD + MLP.encode(),
        b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + HEAD + MLP.encode(),
    ],
    ids=["BOM", "PEP 263"],
)
def test_a_source_python_runs_is_loaded(capsys, monkeypatch, tmp_path, data):
    """Before: refused (U+FEFF 'syntax error', or 'cannot read': not UTF-8)."""
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", _file(tmp_path, data))
    assert code == 0, err


def test_a_symlink_loop_is_one_sentence(capsys, monkeypatch, tmp_path):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", tmp_path / "a.py")
    assert code == 2 and "a.py" in err and "loop" in err and err.count("\n") == 1, err


def test_train_with_a_plugin_that_exits_mid_run_is_one_sentence(capsys, monkeypatch, tmp_path):
    """Before: `modern-gpt train` exited 4, silently, with no checkpoint. The check's two forwards of the smoke
    model's two layers are calls 1-4: step 1's forward exits."""
    path = _plugin(tmp_path, EXIT_IN_FORWARD.replace("AFTER", "4").replace("'no more'", "4"))
    args = ["train", "--smoke", "--steps", "4", "--plugin", path, "--out", tmp_path / "ckpt"]
    code, _, err = run_main(capsys, monkeypatch, *args)
    assert code == 2 and str(path) in err and "SystemExit(4)" in err and err.count("\n") == 1, err


# ---------------------------------------------------------------------------
# Issue 41: importing modern-gpt patches nothing; a shipped plugin trains compiled
# ---------------------------------------------------------------------------
def test_threading_is_the_standard_librarys_after_importing_modern_gpt():
    """Before: importing the ablation code replaced threading.Thread.start for the whole process."""
    import modern_gpt.ablation.running  # noqa: F401
    import modern_gpt.api  # noqa: F401

    assert threading.Thread.start.__code__.co_filename == threading.__file__


@pytest.mark.slow
def test_importing_modern_gpt_patches_nothing_in_the_standard_library():
    """In a fresh process: Thread.start is the same object after the import, and no at-fork hook is registered
    by modern-gpt's code (before: plugins.py registered one as it was imported)."""
    code = (
        "import os, sys, threading\n"
        "hooks, real = [], os.register_at_fork\n"
        "def spy(**kw):\n"
        "    hooks.append(sys._getframe(1).f_code.co_filename)\n"
        "    real(**kw)\n"
        "os.register_at_fork = spy\n"
        "a = threading.Thread.start\n"
        "import modern_gpt, modern_gpt.ablation.running, modern_gpt.api, modern_gpt.cli.commands\n"
        "import modern_gpt.model.plugins\n"
        "assert threading.Thread.start is a, threading.Thread.start\n"
        "mine = [h for h in hooks if 'modern_gpt' in h]\n"
        "assert not mine, mine\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_a_shipped_plugin_trains_under_compile_on(capsys, monkeypatch, tmp_path):
    """Before: torch's compiler, on a plugin row's first compiled step, rebound names the guard watched (the
    recursion limit, its cache folders, a global of modern-gpt's), and the shipped relu2 row was refused."""
    pytest.importorskip("torch._inductor")
    args = [*tiny(2), "--plugin", EXAMPLES / "relu2.py", "--plan", "custom", "--variants", "relu2", "--seeds", "1"]
    code, _, err = run_main(capsys, monkeypatch, "ablate", *args, "--no-placebo", "--compile", "on", "--out", "r")
    assert code == 0, err
    (run,) = _runs(tmp_path / "r").values()
    assert run["compile"] == "on" and run["error"] == "" and run["val_loss"] > 0, run


# ---------------------------------------------------------------------------
# Issue 43, class 1: a plugin that is not causal sees the answer
# ---------------------------------------------------------------------------
MIXERS = {
    # an MLP that reads the next token's vector beside its own
    "next-token MLP": (
        "import torch\n"
        "class Mix(nn.Module):\n"
        "    def __init__(self, cfg):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(2 * cfg.dim, cfg.dim)\n"
        "    def forward(self, x):\n"
        "        nxt = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], dim=1)\n"
        "        return self.fc(torch.cat([x, nxt], dim=-1))\n",
        "in the forward pass",
    ),
    # RWKV's token shift written the wrong way round: x[t + 1] where x[t - 1] was meant
    "wrong-way shift": (
        "import torch.nn.functional as F\n"
        "class Mix(nn.Module):\n"
        "    def __init__(self, cfg):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(cfg.dim, cfg.dim)\n"
        "    def forward(self, x):\n"
        "        shifted = F.pad(x, (0, 0, 0, 1))[:, 1:]\n"
        "        return self.fc(0.5 * x + 0.5 * shifted)\n",
        "in the forward pass",
    ),
    # a shift by several positions (a convolution padded on the wrong side reads t .. t + 3)
    "shift by seven": (
        "import torch.nn.functional as F\n"
        "class Mix(nn.Module):\n"
        "    def __init__(self, cfg):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(cfg.dim, cfg.dim)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x + F.pad(x, (0, 0, 0, 7))[:, 7:])\n",
        "in the forward pass",
    ),
    # the same in value as x, yet the gradient of position t flows into position t + 1
    "gradient only": (
        "import torch.nn.functional as F\n"
        "class Mix(nn.Module):\n"
        "    def __init__(self, cfg):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(cfg.dim, cfg.dim)\n"
        "    def forward(self, x):\n"
        "        shifted = F.pad(x, (0, 0, 0, 1))[:, 1:]\n"
        "        return self.fc(x + (shifted - shifted.detach()))\n",
        "through the gradient",
    ),
}
MIX = "COMPONENTS = [Component('mix', 'GELU MLP -> a mixing MLP', 'mlp', Mix)]\n"
CAUSAL_SHIFT = MIXERS["wrong-way shift"][0].replace("F.pad(x, (0, 0, 0, 1))[:, 1:]", "F.pad(x, (0, 0, 1, 0))[:, :-1]")


@pytest.mark.parametrize("case", list(MIXERS))
def test_a_plugin_that_is_not_causal_is_refused_before_any_folder(capsys, monkeypatch, tmp_path, case):
    """Before: each trained with no word, and its row read `better` by more than a nat."""
    text, how = MIXERS[case]
    path = _plugin(tmp_path, text + MIX)
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;mix")
    assert code == 2 and f"the plugin {path} (mix) is not causal" in err and how in err, err
    assert err.count("\n") == 1 and not (tmp_path / "r").exists()


CAUSAL = {
    "token shift": ("mix",),
    "token shift with RoPE": ("rope", "mix"),
    "relu2": ("relu2",),
    "parallel": ("parallel",),
    "nope": ("nope",),
    "the modern pieces": ("rmsnorm", "rope", "no_bias", "gqa", "qk_norm", "relu2", "parallel"),
}


@pytest.mark.parametrize("case", list(CAUSAL))
def test_a_causal_token_shift_and_the_shipped_examples_pass_the_check(tmp_path, case):
    """The controls: RWKV's token shift the right way round (x[t - 1], with a dropout of its own: the same draws
    in both forwards), and the shipped examples with the classic and the modern pieces."""
    dropped = CAUSAL_SHIFT.replace(
        "return self.fc(0.5 * x + 0.5 * shifted)", "return F.dropout(self.fc(x + shifted), 0.5)"
    )
    plugins.load([_plugin(tmp_path, dropped + MIX), *(EXAMPLES / f for f in ("relu2.py", "parallel.py", "nope.py"))])
    small = plugins.ModelConfig(vocab_size=50, context=8, dim=32, heads=4, kv_heads=2, layers=2)
    plugins.check_forward(small.with_components(CAUSAL[case]))


def test_train_with_a_plugin_and_threads_of_its_own_trains(capsys, monkeypatch, tmp_path):
    """`train --threads N` pins torch's threads as its run starts: the guard read that as the plugin's change
    (from 1 to 2 here) and refused the shipped relu2."""
    args = ["train", *tiny(2), "--threads", "2", "--plugin", EXAMPLES / "relu2.py", "--out", tmp_path / "ckpt"]
    code, _, err = run_main(capsys, monkeypatch, *args)
    assert code == 0 and (tmp_path / "ckpt").is_dir(), err
