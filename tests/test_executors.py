"""Executors: the local pool (dead workers, --jobs auto) and Ray, on a real two-node cluster on this machine.

Every Ray node the tests start listens on 127.0.0.1 only (conftest.py sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
before Ray is imported), and the tests check it.
"""

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from modern_gpt import executors, planning, running
from modern_gpt.cli import app
from modern_gpt.errors import UserError
from modern_gpt.executors import ExecutorOptions, LocalPool
from modern_gpt.settings import resolve

from .clihelp import CLASSIC_ROPE, Quiet, cli_process, invoke, runner, wait_for_runs
from .executor_jobs import FakeJob

# Tiny runs: 3 rows (classic, its placebo, rope) x 2 seeds of 40 steps
TINY = ["--smoke", "--steps", "40", "--eval-every", "40", "--eval-tokens", "1024", *CLASSIC_ROPE]
VALUES = ["row", "variant", "seed", "params", "train_loss", "val_loss", "best_val_loss", "val_bpc", "steps_done"]


def values(folder) -> pd.DataFrame:
    return pd.read_csv(Path(folder) / "runs.csv").sort_values(["row", "seed"])[VALUES].reset_index(drop=True)


# ---------------------------------------------------------------------------
# the choices
# ---------------------------------------------------------------------------
def test_executor_flags_are_checked_in_one_sentence(monkeypatch):
    for options, message in [
        (ExecutorOptions(name="slurm"), "unknown executor 'slurm'; choose local or ray"),
        (ExecutorOptions(gpus_per_run=0.5), "--gpus-per-run goes with --executor ray"),
        (ExecutorOptions(address="h:1"), "--ray-address goes with --executor ray"),
        (ExecutorOptions(name="ray", gpus_per_run=1.5), "--gpus-per-run must be a fraction up to 1"),
        (ExecutorOptions(name="ray", cpus_per_run=0), "--cpus-per-run must be a positive number"),
        (ExecutorOptions(max_retries=-1), "--max-retries must not be negative"),
    ]:
        with pytest.raises(UserError, match=message):
            options.check()
    assert ExecutorOptions(name="ray", gpus_per_run=0.25).check().gpus_per_run == 0.25
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    result = runner.invoke(app, ["ablate", *TINY, "--executor", "ray"])
    assert isinstance(result.exception, UserError)
    assert str(result.exception) == (
        '--executor ray needs Ray, which is not installed; install it with: pip install -e ".[ray]"'
    )


def test_an_unreachable_ray_address_is_one_sentence_and_creates_no_folder(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port on which nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    result = runner.invoke(
        app, ["ablate", *TINY, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}", "--out", tmp_path / "r"]
    )
    assert isinstance(result.exception, UserError) and time.time() - t0 < 30
    assert str(result.exception).startswith(f"cannot reach the Ray cluster at 127.0.0.1:{port} (")
    assert "ray start --head" in str(result.exception) and not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------
# the local pool
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_dead_local_worker_has_its_run_started_again_then_recorded_as_failed(tmp_path):
    """Jobs that kill their own worker with SIGKILL: once (run again, and it finishes), always (recorded as
    failed after --max-retries more tries); the other runs finish, each recorded exactly once."""
    jobs = [FakeJob(0, 0), FakeJob(0, 1, dies="always"), FakeJob(0, 2, dies=str(tmp_path / "died")), FakeJob(0, 3)]
    records, steps = [], []
    pool = LocalPool(2, max_retries=1)
    pool.run(jobs, "the corpus", lambda *s: steps.append(s), records.append)
    assert sorted(r["seed"] for r in records) == [0, 1, 2, 3]
    by_seed = {r["seed"]: r for r in records}
    assert by_seed[1]["error"] == "the worker process running it died (killed by SIGKILL), 2 times (--max-retries 1)"
    assert all(by_seed[s]["error"] == "" and by_seed[s]["corpus"] == "the corpus" for s in (0, 2, 3))
    assert (tmp_path / "died").exists()  # seed 2 died once, then finished
    assert {s[1] for s in steps} >= {0, 2, 3}
    assert 3 <= pool.started <= 2 + 3  # two workers, and at most one in place of each of the three that died
    with pytest.raises(ValueError, match="run 1 cannot start"):  # a run's own error ends the ablation
        LocalPool(2).run([FakeJob(0, 0), FakeJob(0, 1, raises=True)], None, lambda *s: None, records.append)


@pytest.mark.slow
def test_jobs_auto_starts_no_more_workers_than_pending_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)  # a machine with more cores than runs to do
    started = []
    start = LocalPool._start
    monkeypatch.setattr(LocalPool, "_start", lambda self, *a: started.append(1) or start(self, *a))
    settings = resolve(None, True, {"train.steps": 5, "train.eval_every": 5, "train.eval_tokens": 1024})
    spec = planning.plan_spec(settings, "custom", variants="classic;rope", seeds="1", placebo=False)
    ablation = running.start(spec, tmp_path / "r", "auto", "test")
    ablation.run(Quiet())
    assert len(started) == 2 and len(pd.read_csv(tmp_path / "r" / "runs.csv")) == 2
    assert executors.workers("auto", "cpu", 3) == 3 and executors.workers("auto", "cpu", 20) == 8


# ---------------------------------------------------------------------------
# Ray: one cluster for the module, a head and a worker node, 1 CPU each
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # Ray's node sets its own
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = c.add_node(num_cpus=1)
    c.wait_for_nodes()
    for s, handler in saved.items():
        signal.signal(s, handler)
    assert c.head_node.node_ip_address == worker.node_ip_address == "127.0.0.1"
    c.worker = worker
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny ablation with --jobs 1: what every executor must give, bitwise."""
    folder = tmp_path_factory.mktemp("jobs1") / "r"
    invoke("ablate", *TINY, "--jobs", "1", "--out", folder)
    return values(folder)


@pytest.mark.slow
def test_a_ray_ablation_equals_jobs_1_and_records_the_cluster(cluster, reference, tmp_path):
    invoke("ablate", *TINY, "--executor", "ray", "--ray-address", cluster.address, "--out", tmp_path / "r")
    pd.testing.assert_frame_equal(values(tmp_path / "r"), reference)
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    ex = meta["executor"]
    assert meta["status"] == "finished" and ex["name"] == "ray" and ex["ray_version"]
    assert ex["address"] == cluster.address and ex["cpus_per_run"] == 1 and ex["max_retries"] == 2
    assert len(ex["nodes"]) == 2 and {n["address"] for n in ex["nodes"]} == {"127.0.0.1"}  # loopback only
    assert ex["resources"]["CPU"] == 2
    assert pd.read_csv(tmp_path / "r" / "runs.csv").threads.eq(1).all()


@pytest.mark.slow
def test_ctrl_c_on_ray_keeps_finished_runs_and_resume_completes_it(cluster, reference, tmp_path):
    folder = tmp_path / "r"
    proc = cli_process("ablate", *TINY, "--executor", "ray", "--ray-address", cluster.address, "--out", folder)
    wait_for_runs(folder, 1, proc, limit=60)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and f"Resume with: modern-gpt ablate --resume {folder}" in err
    assert json.loads((folder / "meta.json").read_text())["status"] == "interrupted"
    kept = {f.name: f.read_bytes() for f in (folder / "runs").glob("*.json")}
    assert 1 <= len(kept) < 6
    # the Ray run resumed on Ray; any executor finishes any folder
    invoke("ablate", "--resume", folder, "--executor", "ray", "--ray-address", cluster.address)
    assert all((folder / "runs" / name).read_bytes() == data for name, data in kept.items())  # not run again
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    assert len(runs) == 6 and (runs.error == "").all()
    pd.testing.assert_frame_equal(values(folder), reference)


@pytest.mark.slow
def test_losing_a_node_mid_ablation_still_completes_it_with_equal_values(cluster, reference, tmp_path):
    """The worker node is removed while runs are on it: Ray runs them again on the head node."""
    folder = tmp_path / "r"
    removed = threading.Event()

    def remove_when_running() -> None:
        deadline = time.time() + 60
        while not list((folder / "runs").glob("*.json")) and time.time() < deadline:
            time.sleep(0.02)
        cluster.remove_node(cluster.worker)
        removed.set()

    thread = threading.Thread(target=remove_when_running)
    thread.start()
    try:
        invoke("ablate", *TINY, "--executor", "ray", "--ray-address", cluster.address, "--out", folder)
    finally:
        thread.join(60)
    assert removed.is_set()
    pd.testing.assert_frame_equal(values(folder), reference)
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    assert (runs.error == "").all() and len(runs) == 6
