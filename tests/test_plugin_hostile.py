"""Plugins that misbehave (issue 31, items 2, 5 and 6): one that changes the process for every row (torch's
default dtype, grad mode, the working folder, threads...) is refused by name and the process left as it was;
every loaded plugin is recorded; one that fails in backward is refused before any folder, or mid-run is that
run's error; one that ends the process (sys.exit, os._exit) or starts a non-daemon thread is one sentence naming
it, never a silent exit, a bare rc 1 or a hang."""

import json
import os
import signal
import sys

import pytest
import torch

import modern_gpt.core.components as components
import modern_gpt.model.plugins as plugins
from tests.clihelp import cli_process, concurrently, run_main
from tests.test_plugins import EXAMPLES, _installed, _plugin, ablate, fresh  # noqa: F401  (fresh: the registries emptied)

MLP = "COMPONENTS = [Component('m', 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n"


def _state() -> dict:
    """What a run depends on that a plugin could change: the tests compare it before and after."""
    return {
        "dtype": torch.get_default_dtype(),
        "grad": torch.is_grad_enabled(),
        "cwd": os.getcwd(),
        "threads": torch.get_num_threads(),
        "device": str(torch.get_default_device()),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "precision": torch.get_float32_matmul_precision(),
        "sigint": signal.getsignal(signal.SIGINT),
        "environment": dict(os.environ),
    }


@pytest.fixture(autouse=True)
def restored(monkeypatch, tmp_path):
    """Whatever a plugin did to this process is undone after each test (before the fix, nothing undid it)."""
    monkeypatch.chdir(tmp_path)
    before, stdout = _state(), sys.stdout
    yield
    torch.set_default_dtype(before["dtype"])
    torch.set_grad_enabled(before["grad"])
    os.chdir(before["cwd"])
    torch.set_num_threads(before["threads"])
    torch.set_default_device(None)
    torch.use_deterministic_algorithms(before["deterministic"])
    torch.set_float32_matmul_precision(before["precision"])
    signal.signal(signal.SIGINT, before["sigint"])
    sys.stdout = stdout


def _runs(folder) -> dict:
    """A folder's run files by variant (one seed)."""
    return {r["variant"]: r for r in (json.loads(p.read_text()) for p in (folder / "runs").glob("*.json"))}


# ---------------------------------------------------------------------------
# Item 2: a plugin that changes the process for every row
# ---------------------------------------------------------------------------
AT_IMPORT = {
    "dtype": ("import torch\ntorch.set_default_dtype(torch.float64)\n", "torch's default dtype"),
    "grad": ("import torch\ntorch.set_grad_enabled(False)\n", "grad mode"),
    "cwd": ("import os\nos.chdir('/')\n", "the working folder"),
    "threads": ("import torch\ntorch.set_num_threads(torch.get_num_threads() + 1)\n", "torch's threads"),
    "device": ("import torch\ntorch.set_default_device('meta')\n", "torch's default device"),
    "deterministic": ("import torch\ntorch.use_deterministic_algorithms(True)\n", "deterministic algorithms"),
    "precision": ("import torch\ntorch.set_float32_matmul_precision('medium')\n", "float32 matmul precision"),
    # a handler of its own: SIG_IGN could already be the handler when another test left it so, and be no change
    "sigint": ("import signal\nsignal.signal(signal.SIGINT, lambda *args: None)\n", "SIGINT"),
    "stdout": ("import io, sys\nsys.stdout = io.StringIO()\n", "sys.stdout"),
    # a worker starts with the driver's environment: every row would train on another device or thread count
    "env set": (
        "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = ''\n",
        "the environment variable CUDA_VISIBLE_DEVICES",
    ),
    "env unset": ("import os\nos.environ.pop('OMP_NUM_THREADS')\n", "OMP_NUM_THREADS"),
}


@pytest.mark.parametrize("case", list(AT_IMPORT))
def test_a_plugin_that_changes_the_process_at_import_is_refused_and_the_process_restored(
    capsys, monkeypatch, tmp_path, case
):
    text, what = AT_IMPORT[case]
    path = _plugin(tmp_path, text + MLP)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    before, stdout = _state(), sys.stdout
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 2 and str(path) in err and what in err and "while loading" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert _state() == before and sys.stdout is stdout  # as it was: a caller that goes on is not changed either


def test_a_plugin_no_row_uses_cannot_change_the_classic_rows_dtype(capsys, monkeypatch, tmp_path):
    """The issue's example: float64 at import changed the classic row's losses though no row used the plugin."""
    path = _plugin(tmp_path, AT_IMPORT["dtype"][0] + MLP)
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;rope")
    assert code == 2 and f"the plugin {path} set torch's default dtype" in err and "float64" in err, err
    assert not (tmp_path / "r").exists() and torch.get_default_dtype() == torch.float32


def test_a_variable_no_run_reads_is_the_plugins_own(capsys, monkeypatch, tmp_path):
    """Libraries set variables as they import (scikit-learn's KMP_DUPLICATE_LIB_OK): a plugin that imports one
    is not refused, and what it set stays (the negative control of the environment cases above)."""
    monkeypatch.delenv("KMP_DUPLICATE_LIB_OK", raising=False)
    path = _plugin(tmp_path, "import os\nos.environ['KMP_DUPLICATE_LIB_OK'] = 'True'\n" + MLP)
    code, out, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 0 and not err and os.environ["KMP_DUPLICATE_LIB_OK"] == "True", err


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
        ("import os; os.environ['OMP_NUM_THREADS'] = '7'", "the environment variable OMP_NUM_THREADS"),
    ],
)
def test_a_forward_that_changes_the_process_mid_run_is_that_runs_error(capsys, monkeypatch, tmp_path, change, what):
    """The rows after it train in the process as it was (the same worker, --jobs 1): their numbers equal an
    ablation without the plugin row, bit for bit."""
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


THREADS = {
    "non-daemon": ("threading.Thread(target=time.sleep, args=(600,)).start()\n", 2),
    "daemon=False": ("threading.Thread(target=time.sleep, args=(600,), daemon=False).start()\n", 2),
    "a Timer": ("threading.Timer(600, print).start()\n", 2),
    "daemon (allowed)": ("threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n", 0),
    "joined (allowed)": ("t = threading.Thread(target=time.sleep, args=(0.01,))\nt.start()\nt.join()\n", 0),
}


@pytest.fixture(scope="module")
def at_import(tmp_path_factory) -> dict:
    """`modern-gpt params --plugin P` for each plugin below, one folder each, two at a time (clihelp.concurrently;
    returncode None: still running after 30 s): case -> (P, its CompletedProcess)."""
    texts = {case: "import threading, time\n" + text for case, (text, _) in THREADS.items()}
    texts["os._exit"] = "import os\nos._exit(0)\n"
    paths = {case: _plugin(tmp_path_factory.mktemp("plugin"), text + MLP) for case, text in texts.items()}
    done = concurrently(lambda path: cli_process("params", "--plugin", path), list(paths.values()), timeout=30)
    return {case: (path, result) for (case, path), result in zip(paths.items(), done, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(THREADS))
def test_a_plugin_that_starts_a_non_daemon_thread_at_import_is_refused_without_a_hang(at_import, case):
    want = THREADS[case][1]
    path, done = at_import[case]
    code, err = done.returncode, done.stderr
    assert code == want, (code, err[-2000:])
    if want:
        assert str(path) in err and "thread" in err and err.count("\n") == 1, err
    assert done.seconds < 30


@pytest.mark.slow
def test_a_plugin_that_calls_os_exit_at_import_is_one_sentence_naming_it(at_import):
    path, done = at_import["os._exit"]
    code, err = done.returncode, done.stderr
    assert code == 2 and str(path) in err and "os._exit(0)" in err and err.count("\n") == 1, (code, err)
