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


@pytest.mark.slow
def test_a_plugin_that_calls_os_exit_at_import_is_one_sentence_naming_it(at_import):
    path, done = at_import["os._exit"]
    code, err = done.returncode, done.stderr
    assert code == 2 and str(path) in err and "os._exit(0)" in err and err.count("\n") == 1, (code, err)


# ---------------------------------------------------------------------------
# The hostile tester's second round (A-F): more state watched, no traceback, no hang, the right exit code
# ---------------------------------------------------------------------------
def _more_state() -> dict:
    import numpy as np
    import torch.nn.functional as F

    import modern_gpt.model.gpt as gpt

    return {
        "autocast": torch.is_autocast_enabled("cpu"),
        "gelu": F.gelu,
        "F": gpt.F,
        "softmax": vars(torch.Tensor).get("softmax"),
        "hooks": len(torch.nn.modules.module._global_forward_hooks),
        "recursion": sys.getrecursionlimit(),
        "numpy": np.geterr(),
        "scipy": sys.modules.get("scipy", "absent"),
        "alarm": signal.getitimer(signal.ITIMER_REAL)[0] > 0,
        "sigalrm": signal.getsignal(signal.SIGALRM),
        "fd1": os.fstat(1).st_ino,
        "encoding": sys.stdout.encoding,
        "registry": dict(components.PLUGINS),
        "columns": os.environ.get("COLUMNS"),
        "components": components.COMPONENTS,
    }


AT_IMPORT_2 = {
    "autocast": ("import torch\ntorch.autocast('cpu', dtype=torch.bfloat16).__enter__()\n", "autocast"),
    "hook": (
        "import torch\ntorch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None)\n",
        "a hook of every torch module (torch.nn.modules.module._global_forward_hooks)",
    ),
    "gelu": ("import torch.nn.functional as F\nF.gelu = lambda x, **k: x\n", "torch.nn.functional.gelu"),
    "model's F": ("import types, modern_gpt.model.gpt as g\ng.F = types.SimpleNamespace()\n", "modern_gpt.model.gpt.F"),
    "stats": ("import modern_gpt.verdict.stats as s\ns.t_sf2 = lambda *a: 0.5\n", "modern_gpt.verdict.stats.t_sf2"),
    "Tensor": ("import torch\ntorch.Tensor.softmax = lambda self, *a, **k: self\n", "torch.Tensor.softmax"),
    "registry": (
        "import modern_gpt.core.components as C\nC.PLUGINS['gqa'] = C.Component('gqa', 'a -> b', 'mlp', print)\n",
        "the component registry (PLUGINS) (gqa)",
    ),
    "reload": (
        "import importlib, modern_gpt.core.components as C\nimportlib.reload(C)\n",
        "modern_gpt.core.components.",
    ),
    "fd 1": ("import os\nos.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n", "file descriptor 1 to another file"),
    "recursion": ("import sys\nsys.setrecursionlimit(60)\n", "the recursion limit from"),  # lowered: raised is let be
    "numpy": ("import numpy as np\nnp.seterr(all='raise')\n", "numpy's error handling (np.seterr)"),
    "sys.modules": ("import sys\nsys.modules['scipy'] = None\n", "sys.modules['scipy'] to None"),
    "alarm": ("import signal\nsignal.alarm(30)\n", "a pending alarm (signal.alarm)"),
    "SIGALRM": ("import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\n", "the handler of SIGALRM"),
    "COLUMNS": ("import os\nos.environ['COLUMNS'] = '20'\n", "the environment variable COLUMNS"),
    "stdout": ("import io, sys\nsys.stdout = io.TextIOWrapper(io.BytesIO())\n", "sys.stdout to another stream"),
}


@pytest.mark.parametrize("case", list(AT_IMPORT_2))
def test_more_of_the_process_is_watched_at_import(capsys, monkeypatch, tmp_path, case):
    """Before: each of these loaded silently and changed every row's numbers (autocast, a patched function, a
    hook), or killed the command (an alarm: exit 142), or silenced it (fd 1)."""
    text, what = AT_IMPORT_2[case]
    path = _plugin(tmp_path, text + MLP)
    monkeypatch.delenv("COLUMNS", raising=False)
    before = _more_state()
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 2 and str(path) in err and what in err and "while loading" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and "TextIOWrapper" not in err
    assert _more_state() == before


def test_a_forked_child_is_refused_and_never_runs_modern_gpt(capsys, monkeypatch, tmp_path):
    """The child leaves when it returns to the guard (else it would go on to train, a second modern-gpt)."""
    path = _plugin(tmp_path, "import os\nos.fork()\n" + MLP)
    code, _, err = run_main(capsys, monkeypatch, "params", "--plugin", path)
    assert code == 2 and str(path) in err and "forked a child process" in err and err.count("\n") == 1, err


def test_a_factory_that_changes_the_frozen_config_is_refused_and_it_is_put_back():
    cfg = components.Component("m", "a -> b", "mlp", lambda c: object.__setattr__(c, "dropout", 0.9))
    model = plugins.ModelConfig(dropout=0.0)
    with pytest.raises(components.PluginError, match="changed the model's settings .dropout from 0.0 to 0.9"):
        cfg.build(model)
    assert model.dropout == 0.0


LATE_2 = {
    "autocast": ("torch.autocast('cpu', dtype=torch.bfloat16).__enter__()", "autocast"),
    "gelu": ("import torch.nn.functional as F; F.gelu = lambda x, **k: x", "torch.nn.functional.gelu"),
    "hook": ("torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None)", "a hook of every"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "raised KeyboardInterrupt while training"),
    "BaseException": ("raise type('Boom', (BaseException,), {})('boom')", "raised Boom: boom while training"),
    "GeneratorExit": ("raise GeneratorExit('x')", "raised GeneratorExit: x while training"),
    "MemoryError": ("raise MemoryError('mine')", "out of memory at step 2 in the plugin"),
    "fork": ("import os; os.fork()", "forked a child process"),
}


@pytest.mark.parametrize("case", list(LATE_2))
def test_more_mid_run_changes_and_exceptions_are_that_runs_error(capsys, monkeypatch, tmp_path, case):
    """Before: autocast, a patched gelu or a hook changed the next rows silently; a BaseException or the plugin's
    own KeyboardInterrupt ended the ablation with a traceback (or as if the user pressed Ctrl-C); a MemoryError
    of its own was 'out of memory' without the plugin's name."""
    change, what = LATE_2[case]
    path = _plugin(tmp_path, LATE.replace("CHANGE", change))
    before = _more_state()
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;late;rope", "--steps", "3")
    assert code == 0, err
    runs = _runs(tmp_path / "r")
    assert what in runs["late"]["error"] and str(path) in runs["late"]["error"], runs["late"]["error"]
    after = _more_state()
    after.pop("registry"), before.pop("registry")  # the plugin's own component, registered by the loader
    assert runs["rope"]["error"] == "" and after == before


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("class Boom(BaseException):\n    pass\nraise Boom('x')\n", "raised Boom: x while loading"),
        ("raise GeneratorExit\n", "raised GeneratorExit while loading"),
        ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt while loading"),
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
        "has no name (an ASCII Python identifier",
        None,
    ),
    "fullwidth": (
        HEAD + "COMPONENTS = [Component('ｒｏｐｅ', 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n".encode(),
        "which reads as 'rope'",
        None,
    ),
    "cyrillic": (
        HEAD + "COMPONENTS = [Component('rоpe', 'a -> b', 'mlp', lambda cfg: nn.Identity())]\n".encode(),
        "an ASCII Python identifier",
        None,
    ),
    "loads itself": (
        HEAD
        + b"from modern_gpt.model import plugins as P\nP.install(__file__ + 'x', open(__file__).read() + '#')\n"
        + MLP.encode(),
        "loads a plugin",
        "KeyError",
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


def test_os_exit_kept_by_the_plugin_is_the_real_one_outside_the_guard(monkeypatch, tmp_path):
    """atexit.register(os._exit, 0) kept the guard's replacement: at the end it raised _Exited, a traceback."""
    path = _plugin(tmp_path, "import os\nKEPT = os._exit\n" + MLP)
    (plugin,) = plugins.load([path])
    kept = sys.modules[f"modern_gpt_plugin_p_{plugin.sha256[:12]}"].KEPT
    called = []
    monkeypatch.setattr(plugins, "_REAL_EXIT", called.append)
    kept(0)
    assert called == [0]


def test_train_with_a_plugin_that_exits_mid_run_is_one_sentence(capsys, monkeypatch, tmp_path):
    """Before: `modern-gpt train` exited 4, silently, with no checkpoint."""
    path = _plugin(tmp_path, EXIT_IN_FORWARD.replace("AFTER", "2").replace("'no more'", "4"))
    args = ["train", "--smoke", "--steps", "4", "--plugin", path, "--out", tmp_path / "ckpt"]
    code, _, err = run_main(capsys, monkeypatch, *args)
    assert code == 2 and str(path) in err and "SystemExit(4)" in err and err.count("\n") == 1, err


HANGS = {
    "atexit": ("import atexit, time\natexit.register(time.sleep, 1000)\n", 0, "an exit handler"),
    "pool": (
        "import concurrent.futures, time\nconcurrent.futures.ThreadPoolExecutor(1).submit(time.sleep, 1000)\n",
        2,
        "ThreadPoolExecutor",
    ),
    "grandchild": (
        "import threading, time\nthreading.Thread(target=lambda: threading.Thread(target=time.sleep, args=(1000,), daemon=False)"
        ".start(), daemon=True).start()\ntime.sleep(0.2)\n",
        2,
        "left it running",
    ),
    "later": (
        "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.5), threading.Thread(target=time.sleep, daemon=False,"
        " args=(1000,)).start()), daemon=True).start()\n",
        0,
        None,
    ),
    "process": (
        "import multiprocessing, time\nmultiprocessing.get_context('fork').Process(target=time.sleep, args=(1000,))"
        ".start()\n",
        2,
        "forked a child process",
    ),
}


@pytest.mark.slow
def test_a_plugin_cannot_hang_the_end_of_the_command(tmp_path, monkeypatch):
    """Before: each hung at exit (timeout's 124). The watchdog (MODERN_GPT_EXIT_WAIT, 2 s here) names what still
    runs and leaves with the command's code; the loader refuses what it can see."""
    monkeypatch.setenv("MODERN_GPT_EXIT_WAIT", "2")
    paths = [
        _plugin(tmp_path / case, text + MLP)
        for case, (text, _, _) in HANGS.items()
        if (tmp_path / case).mkdir() is None
    ]
    done = concurrently(lambda path: cli_process("params", "--plugin", path), paths, width=3, timeout=20)
    for (case, (_, want, what)), result in zip(HANGS.items(), done, strict=True):
        assert result.returncode == want, (case, result.returncode, result.stderr[-2000:])
        assert what is None or what in result.stderr, (case, result.stderr)
        assert "Traceback" not in result.stderr, (case, result.stderr)
        if want == 2:  # refused: the one sentence alone (the watchdog says no more of a thread it named)
            assert result.stderr.count("\n") == 1, (case, result.stderr)


def test_a_thread_or_fork_of_torchs_own_while_a_plugin_row_trains_is_not_the_plugins(capsys, monkeypatch, tmp_path):
    """Only the plugin's code is refused for what it starts: a non-daemon thread that the training code (here a
    stand-in for torch.compile's compile pool) starts during a plugin row's run, with no plugin frame on the
    stack, leaves the run as it is (it was refused as the plugin's, a false failure)."""
    import threading

    import modern_gpt.ablation.running as running

    done, real = threading.Event(), running.train_run
    pool = []

    def train_run(*args, **kwargs):
        thread = threading.Thread(target=done.wait, name="compile-pool")  # non-daemon, alive past the run
        thread.start()
        pool.append(thread)
        return real(*args, **kwargs)

    monkeypatch.setattr(running, "train_run", train_run)
    path = tmp_path / "relu2.py"
    path.write_text((EXAMPLES / "relu2.py").read_text())
    try:
        code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;classic+relu2", "--steps", "3")
    finally:
        done.set()
    assert code == 0, err
    runs = {r["variant"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "r" / "runs").glob("*.json"))}
    assert runs["classic+relu2"]["error"] == "" and not pool[-1].daemon, runs["classic+relu2"]["error"]


def test_what_torchs_compiler_changes_mid_run_is_not_the_plugins(capsys, monkeypatch, tmp_path):
    """torch.compile, on a plugin row's first compiled step, raises the recursion limit to 2000 and sets its cache
    folders (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR): each was refused as the plugin's, a false failure of the
    shipped example whenever it trained first. Lowering the limit is still refused (the control)."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    limit = sys.getrecursionlimit()
    raised = f"import os, sys; sys.setrecursionlimit({limit + 1000}); os.environ['TRITON_CACHE_DIR'] = '/tmp/t'"
    try:
        path = _plugin(tmp_path, LATE.replace("CHANGE", raised))
        code, _, err = ablate(capsys, monkeypatch, tmp_path / "r", path, "classic;late", "--steps", "3")
        assert code == 0 and _runs(tmp_path / "r")["late"]["error"] == "", err
    finally:
        sys.setrecursionlimit(limit)
    lowered = LATE.replace("CHANGE", f"import sys; sys.setrecursionlimit({limit - 100})").replace("'late'", "'low'")
    (tmp_path / "low").mkdir()
    path = _plugin(tmp_path / "low", lowered)
    code, _, err = ablate(capsys, monkeypatch, tmp_path / "c", path, "classic;low", "--steps", "3")
    assert code == 0 and "set the recursion limit" in _runs(tmp_path / "c")["low"]["error"], err
    assert sys.getrecursionlimit() == limit


@pytest.mark.slow
def test_a_patch_of_a_module_the_plugin_imports_first_is_refused(tmp_path):
    """The fingerprint knows the modules loaded before the plugin: one it imports first (modern_gpt.verdict.stats,
    which params never loads) it could patch unseen, and every p-value read 0. A modern-gpt name bound to a
    function of the plugin's file is now refused, loaded before or not."""
    patch = "import modern_gpt.verdict.stats as S\nS.t_sf2 = lambda t, df: 0 * t\n"
    path = _plugin(tmp_path, patch + MLP)
    process = cli_process("params", "--plugin", path)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2 and "set modern_gpt.verdict.stats.t_sf2 to a function of its own" in err, err
    assert err.count("\n") == 1
