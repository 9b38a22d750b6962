"""--track mlflow against a real `mlflow server`, as a team runs it: started here on 127.0.0.1 with a sqlite backend
store and a proxied artifact store in the test's folder, in a session of its own, and stopped at the end with
every process of that session (the server and its uvicorn worker); then its URI is one sentence, exit 2."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import pytest

from tests.clihelp import CLASSIC_ROPE, invoke, tiny
from tests.executors.test_ray_start import free_port, in_session, stop_session

pytestmark = pytest.mark.slow
pytest.importorskip("mlflow")


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def stop(server: subprocess.Popen) -> list[str]:
    """SIGTERM to the server's whole process group (its workers too), SIGKILL to what is left after 20 s."""
    return stop_session(server, group=True, patience=20)


@pytest.fixture(scope="module")
def server(tmp_path_factory, mlflow_store):
    base = tmp_path_factory.mktemp("mlflow-server")
    store = mlflow_store(base / "mlflow.db")  # its tables made already: the server starts sooner
    port = free_port()
    # MLflow 3's job runner (a pool of huey consumers for GenAI jobs) is switched off: tracking never uses it
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = (base / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        + ["--backend-store-uri", store, "--artifacts-destination", str(base / "art")],
        cwd=base,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own session and process group: stopped as one, counted as one
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while not healthy(url):
        if proc.poll() is not None or time.time() > deadline:
            stop(proc)
            pytest.fail(f"mlflow server did not start: {(base / 'server.log').read_text()[-2000:]}")
        time.sleep(0.25)
    yield SimpleNamespace(url=url, proc=proc, base=base)
    stop(proc)
    log.close()


def test_an_ablation_logs_each_run_once_to_a_real_server_with_the_summary_artifacts(server, tmp_path):
    from mlflow import MlflowClient

    folder = tmp_path / "r"
    invoke(
        "ablate",
        *tiny(4, 2),
        *CLASSIC_ROPE,
        "--jobs",
        "1",
        "--out",
        folder,
        "--track",
        "mlflow",
        "--mlflow-uri",
        server.url,
    )
    client = MlflowClient(server.url)
    experiment = client.get_experiment_by_name("r")
    runs = client.search_runs([experiment.experiment_id])
    records = {(r["row"], r["seed"]): r for r in (json.loads(f.read_text()) for f in (folder / "runs").glob("*.json"))}
    seeds = [r for r in runs if not r.data.tags.get("kind")]  # not the summary's nor a table row's run
    assert sorted((int(r.data.tags["row"]), int(r.data.tags["seed"])) for r in seeds) == sorted(records)
    for run in seeds:
        record = records[int(run.data.tags["row"]), int(run.data.tags["seed"])]
        assert run.info.run_id == record["tracked"]["mlflow"] and run.info.status == "FINISHED"
        assert run.data.tags["variant"] == record["variant"] and run.data.tags["folder"] == "r"
        assert run.data.metrics["val_loss"] == pytest.approx(record["val_loss"], rel=1e-12)
        assert run.data.tags["verdict"] in {"", "better", "worse", "inconclusive", "same"}
    (summary,) = [r for r in runs if r.data.tags.get("kind") == "summary"]
    names = {a.path for a in client.list_artifacts(summary.info.run_id)}  # through the server's artifact proxy
    assert {"summary.csv", "curves.png", "verdicts.json"} <= names
    assert list((server.base / "art").rglob("summary.csv"))  # stored where the server was told
    rope = client.search_runs([experiment.experiment_id], "tags.variant = 'rope'")
    (row,) = [r for r in runs if r.data.tags.get("kind") == "row" and r.data.tags["row"] == "2"]
    assert len(rope) == 2 and {r.data.tags["verdict"] for r in rope} == {row.data.tags["verdict"]}
    assert {r.data.tags["mlflow.parentRunId"] for r in rope} == {row.info.run_id}  # nested under its row's run


def test_stopping_the_server_leaves_no_process_and_then_its_uri_is_one_sentence(server, tmp_path, run):
    assert in_session(server.proc.pid)  # the server and its worker, before
    assert stop(server.proc) == [] and not in_session(server.proc.pid)
    folder = tmp_path / "r"
    code, out, err = run("ablate", *tiny(4, 2), "--out", folder, "--track", "mlflow", "--mlflow-uri", server.url)
    assert code == 2 and err.count("\n") == 1 and not folder.exists(), err
    assert err.startswith(f"modern-gpt: error: --mlflow-uri {server.url}: no MLflow server answers there (")
