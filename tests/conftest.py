import os
import tempfile

import pytest
import torch

# Tests never touch the user's token cache.
os.environ.setdefault("MODERN_GPT_CACHE", tempfile.mkdtemp(prefix="modern-gpt-test-cache-"))
# Every Ray node the tests start (and every process they start) uses 127.0.0.1, never the machine's network
# address. Ray reads this when it is imported, so it is set before any test imports it.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def plugin_registry():
    """Each test leaves the plugin registry as it found it, so that a plugin one test loads is never another's
    (pytest -n runs a file's tests in another order, beside other files)."""
    import sys

    from modern_gpt.core import components

    registries = [components.PLUGINS]
    plugins = sys.modules.get("modern_gpt.model.plugins")  # never imported here: a test that needs it does
    if isinstance(getattr(plugins, "LOADED", None), dict):
        registries.append(plugins.LOADED)
    saved = [dict(r) for r in registries]
    yield
    for registry, before in zip(registries, saved, strict=True):
        registry.clear()
        registry.update(before)


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")


@pytest.fixture
def run(capsys, monkeypatch, tmp_path):
    """The CLI in process, from the test's own folder (checkpoints/ and results/ land there):
    run(*args) -> (exit code, stdout, stderr)."""
    from .clihelp import run_main

    monkeypatch.chdir(tmp_path)
    return lambda *args: run_main(capsys, monkeypatch, *args)


@pytest.fixture
def run_ok(run):
    """run(*args), which must exit 0: its stdout."""

    def call(*args):
        code, out, err = run(*args)
        assert code == 0, (code, out, err)
        return out

    return call


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The built-in smoke corpus, tokenized once per test module into a cache of the module's own."""
    from modern_gpt.core.config import DataConfig
    from modern_gpt.data.corpus import load_corpus

    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


@pytest.fixture(scope="session")
def made(tmp_path_factory):
    """One tiny results folder and one checkpoint, made in process once; each test works on a copy:
    made("r" or "ckpt", to) -> the copy's path."""
    import shutil
    from pathlib import Path

    from .clihelp import main_ok
    from .errhelp import ABLATE, TINY

    base = tmp_path_factory.mktemp("made")
    for args in ([*ABLATE, "--out", base / "r"], ["train", *TINY, "--out", base / "ckpt"]):
        main_ok(*args)
    return lambda name, to: Path(shutil.copytree(base / name, to, symlinks=True))


@pytest.fixture(scope="session")
def executor_reference(tmp_path_factory):
    """tests/executors/test_executors.py's tiny ablation (TINY) with --jobs 1, trained once for the session: what every
    executor must give, bitwise (test_executors' and test_ray_start's clusters). Where wandb is installed it is
    logged to W&B offline (the group r) under a folder of its own: (its values, that folder or None)."""
    import importlib.util

    from .clihelp import invoke
    from .executors.test_executors import TINY, values
    from .wandbread import offline_env

    folder, root = tmp_path_factory.mktemp("jobs1") / "r", None
    with pytest.MonkeyPatch.context() as mp:
        if importlib.util.find_spec("wandb") is not None:
            root = tmp_path_factory.mktemp("wandb")
            offline_env(mp, root)
        invoke("ablate", *TINY, "--jobs", "1", "--out", folder, *(["--track", "wandb"] if root else []))
    return values(folder), root


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory):
    """An empty MLflow sqlite store whose tables are made once for the session (a fresh store's migrations cost
    seconds): mlflow_store(path) copies it to path and gives its URI, a store of the caller's own."""
    import shutil

    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    empty = tmp_path_factory.mktemp("mlflow-empty") / "mlflow.db"
    MlflowClient(f"sqlite:///{empty}").search_experiments()  # the tables and the Default experiment

    def copy(path) -> str:
        shutil.copyfile(empty, path)
        return f"sqlite:///{path}"

    return copy
