"""Executors: the local pool (dead workers, --jobs auto) and Ray, on a real two-node cluster on this machine.

Every Ray node the tests start listens on 127.0.0.1 only (conftest.py sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
before Ray is imported), and the tests check it.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from modern_gpt.ablation import planning, running
from modern_gpt.ablation.executors import local
from modern_gpt.ablation.executors import ray as ray_executor
from modern_gpt.ablation.executors.local import LocalPool
from modern_gpt.cli.commands import app
from modern_gpt.core.config import EXECUTORS, ExecutionOptions, ExecutorKind
from modern_gpt.core.errors import UserError
from modern_gpt.core.settings import resolve
from tests.clihelp import CLASSIC_ROPE, Quiet, cli, cli_process, invoke, run_main, runner, tiny, wait_for_runs
from tests.executor_jobs import FakeJob
from tests.model.test_plugins import EXAMPLES, isolated_registry
from tests.wandbread import offline_env
from tests.wandbread import runs as wandb_runs

# Tiny runs: 3 rows (classic, its placebo, rope) x 2 seeds of 40 steps
TINY = ["--smoke", "--steps", "40", "--eval-every", "40", "--eval-tokens", "1024", *CLASSIC_ROPE]
VALUES = ["row", "variant", "seed", "params", "train_loss", "val_loss", "best_val_loss", "val_bpc", "steps_done"]


def values(folder) -> pd.DataFrame:
    return pd.read_csv(Path(folder) / "runs.csv").sort_values(["row", "seed"])[VALUES].reset_index(drop=True)


# ---------------------------------------------------------------------------
# the choices
# ---------------------------------------------------------------------------
def test_a_third_executor_is_one_file_and_one_registry_line(tmp_path, monkeypatch, reference):
    """tests/executor_serial.py, registered as core.config.EXECUTORS registers local and ray: its flag is
    accepted, it trains every run (in another order), and the folder equals --jobs 1's bitwise (the module's
    reference below)."""
    monkeypatch.setitem(EXECUTORS, "serial", ExecutorKind("tests.executor_serial:Serial"))
    invoke("ablate", *TINY, "--executor", "serial", "--out", tmp_path / "serial")
    pd.testing.assert_frame_equal(values(tmp_path / "serial"), reference)
    meta = json.loads((tmp_path / "serial" / "meta.json").read_text())
    assert meta["executor"] == {"name": "serial", "ran": 0} and meta["threads"] == 1  # info() is taken at start
    with pytest.raises(UserError, match="--ray-address goes with --executor ray"):
        ExecutionOptions(executor="serial", ray_address="h:1")
    with pytest.raises(UserError, match="unknown executor 'kubernetes'; choose local or ray or slurm or serial"):
        ExecutionOptions(executor="kubernetes")


def test_a_detached_ladder_names_its_own_folder_which_resume_takes(tmp_path, monkeypatch):
    """A ladder whose executor hands its runs over (Slurm's --detach): Detached names the ladder's folder, not the
    rung's, and scale(resume=e.folder), as the docs say, trains the rest into the scale table."""
    import modern_gpt
    from modern_gpt.ablation import ladder as lad
    from tests.executor_serial import Detaching

    monkeypatch.setitem(EXECUTORS, "detaching", ExecutorKind("tests.executor_serial:Detaching"))
    monkeypatch.setattr(Detaching, "handed", False)
    small = dict(smoke=True, context=16, dim=32, heads=2, layers=1, steps=4, eval_every=4, eval_tokens=1024)
    ladder = dict(plan="custom", variants="classic;rope", seeds=2, placebo=False, rung_steps="4,4,4")
    with pytest.raises(modern_gpt.Detached) as e:
        modern_gpt.scale(**small, **ladder, executor="detaching", out=tmp_path / "l")
    assert e.value.folder == tmp_path / "l" and e.value.resume == lad.resume_command(tmp_path / "l")
    assert str(e.value) == f"4 runs are handed over; {e.value.resume} collects them and prints the table"
    result = modern_gpt.scale(resume=e.value.folder, executor="detaching")
    assert len(pd.read_csv(tmp_path / "l" / "rung-2" / "runs.csv")) == 4 and result.folder == tmp_path / "l"


def test_executor_flags_are_checked_in_one_sentence(monkeypatch):
    for options, message in [
        ({"executor": "kubernetes"}, "unknown executor 'kubernetes'; choose local or ray or slurm"),
        ({"gpus_per_run": 0.5}, "--gpus-per-run goes with --executor ray"),
        ({"ray_address": "h:1"}, "--ray-address goes with --executor ray"),
        ({"executor": "ray", "gpus_per_run": 1.5}, "--gpus-per-run must be a fraction up to 1"),
        ({"executor": "ray", "cpus_per_run": 0}, "--cpus-per-run must be a positive number"),
        ({"max_retries": -1}, "--max-retries must not be negative"),
    ]:
        with pytest.raises(UserError, match=message):
            ExecutionOptions(**options)
    assert ExecutionOptions(executor="ray", gpus_per_run=0.25).gpus_per_run == 0.25
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
    result = runner.invoke(
        app, ["ablate", *TINY, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}", "--out", tmp_path / "r"]
    )
    assert isinstance(result.exception, UserError)
    assert str(result.exception).startswith(f"cannot reach the Ray cluster at 127.0.0.1:{port} (")
    assert "ray start --head" in str(result.exception) and not (tmp_path / "r").exists()


def test_a_ray_address_of_the_wrong_form_is_named_in_modern_gpts_words():
    """Checked before anything connects; the flag is --ray-address (Ray's messages name its own --address), and a
    port out of range is not a refused connection."""
    for text, message in [
        (
            "127.0.0.1:70000",
            "--ray-address 127.0.0.1:70000: the port must be a whole number from 1 to 65535, got '70000'.",
        ),
        ("127.0.0.1:0", "--ray-address 127.0.0.1:0: the port must be a whole number from 1 to 65535, got '0'."),
        ("head:port", "--ray-address head:port: the port must be a whole number from 1 to 65535, got 'port'."),
        (
            "127.0.0.1",
            "--ray-address 127.0.0.1 has no port; give host:port (port 6379 unless `ray start --head` was given --port).",
        ),
        ("http://head:8265", "--ray-address takes the cluster's host:port (what `ray start --head` prints, port 6379"),
    ]:
        with pytest.raises(UserError) as e:
            ray_executor.parse_address(text, "--ray-address")
        assert str(e.value).startswith(message) and "--address" not in str(e.value).replace("--ray-address", "")
    assert ray_executor.parse_address("[::1]:6379", "RAY_ADDRESS") == ray_executor.Address(
        "[::1]:6379", "RAY_ADDRESS", "::1"
    )
    assert ray_executor.parse_address("localhost:1", "x").on_this_machine
    assert not ray_executor.parse_address("10.0.0.1:6379", "x").on_this_machine
    client = ray_executor.parse_address("ray://10.0.0.1:10001", "x")
    assert client.text == "ray://10.0.0.1:10001" and (client.host, client.port) == ("10.0.0.1", 10001)


def test_an_address_where_another_service_answers_is_one_sentence_not_a_wait():
    """ray.init would wait for ever on the dashboard's port, or any server that is not Ray's (gRPC) GCS."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer_as_http() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(100)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer_as_http)
        thread.start()
        address = ray_executor.parse_address(f"127.0.0.1:{server.getsockname()[1]}", "RAY_ADDRESS")
        with pytest.raises(UserError, match=r"^127\.0\.0\.1:\d+ \(RAY_ADDRESS\) answers, but not as a Ray cluster; "):
            ray_executor.check_reachable(address)
        thread.join(10)


def test_ray_init_runs_under_a_deadline_and_its_refusal_is_read_from_rays_log(monkeypatch):
    """ray.init is Ray's public call, in a thread under INIT_DEADLINE_S: one that never returns is one sentence, and
    a refused token, which Ray's C++ client writes to file descriptor 2 only, is named (not printed)."""
    import types

    address = ray_executor.parse_address("127.0.0.1:6379", "--ray-address")
    hang = threading.Event()
    stuck = types.SimpleNamespace(init=lambda **kw: hang.wait(30))
    monkeypatch.setattr(ray_executor, "INIT_DEADLINE_S", 0.2)
    with pytest.raises(UserError, match=r"^Ray did not connect to the cluster at 127.0.0.1:6379 \(--ray-address\) "):
        ray_executor.connect(stuck, address, None, False)
    hang.set()

    def refused(**kw):
        os.write(2, b"gcs_client.cc:210: Failed to get cluster ID: Unauthenticated: RPC error: InvalidAuthToken\n")
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379")

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    for token, too_late, said in [
        (None, False, "asks for a token (token authentication), and this machine has none; run `ray get-auth-token`"),
        ("RAY_AUTH_TOKEN", False, "refused the token from RAY_AUTH_TOKEN, which is not that cluster's"),
        ("RAY_AUTH_TOKEN", True, "and Ray was imported before modern-gpt could send it; set RAY_AUTH_MODE=token"),
    ]:
        with pytest.raises(UserError) as e:
            ray_executor.connect(types.SimpleNamespace(init=refused), address, token, too_late)
        assert said in str(e.value) and str(e.value).startswith("the Ray cluster at 127.0.0.1:6379 (--ray-address)")
    other = types.SimpleNamespace(init=lambda **kw: (_ for _ in ()).throw(ConnectionError("Timed out.\nmore")))
    with pytest.raises(
        UserError, match=r"^cannot connect to the Ray cluster at 127.0.0.1:6379 \(--ray-address\): Timed out\.$"
    ):
        ray_executor.connect(other, address, None, False)


def test_a_token_that_cannot_be_read_is_one_sentence(tmp_path, monkeypatch):
    """Ray aborts the process (exit 134) on a token file it cannot read, and reading a FIFO would never end."""
    for variable in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ray_executor._token_source() is None  # no token: a cluster without authentication is joined as before
    fifo, empty = tmp_path / "fifo", tmp_path / "empty"
    os.mkfifo(fifo)
    empty.write_text("\n")
    for path in (fifo, empty, tmp_path / "none", tmp_path):
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
        with pytest.raises(UserError, match=f"^RAY_AUTH_TOKEN_PATH names {path}, but it is not a readable file that"):
            ray_executor._token_source()
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    (tmp_path / ".ray").mkdir()
    os.mkfifo(tmp_path / ".ray" / "auth_token")
    with pytest.raises(UserError, match="^Ray's token file .* exists, but it is not a readable file"):
        ray_executor._token_source()
    (tmp_path / ".ray" / "auth_token").unlink()
    (tmp_path / ".ray" / "auth_token").write_text("abc")
    assert ray_executor._token_source() == str(tmp_path / ".ray" / "auth_token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    assert ray_executor._token_source() == "RAY_AUTH_TOKEN"  # Ray's order: the variable first
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    (tmp_path / ".ray" / "auth_token").unlink()
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(
        UserError, match=r"^RAY_AUTH_MODE is token, but this machine has no Ray token; run `ray get-auth"
    ):
        ray_executor.use_token()


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
    pools = []
    run = LocalPool.run
    monkeypatch.setattr(LocalPool, "run", lambda self, *a: pools.append(self) or run(self, *a))
    settings = resolve(None, True, {"train.steps": 5, "train.eval_every": 5, "train.eval_tokens": 1024})
    spec = planning.plan_spec(
        settings, planning.Request("ablate", "custom", variants="classic;rope", seeds="1", placebo=False)
    )
    ablation = running.start(spec, tmp_path / "r", "test")
    ablation.run(Quiet())
    assert [(p.workers, p.started) for p in pools] == [(2, 2)] and len(pd.read_csv(tmp_path / "r" / "runs.csv")) == 2
    assert local.workers("auto", "cpu", 3) == 3 and local.workers("auto", "cpu", 20) == 8


def server_pid() -> int | None:
    from multiprocessing import forkserver

    return forkserver._forkserver._forkserver_pid


@pytest.mark.slow
def test_workers_are_forks_of_one_early_server_and_have_the_drivers_environment(monkeypatch):
    """prestart starts the fork server only when a pool will run; each worker is a fork of it, with the driver's
    environment as it is when the pool starts (not the server's, older one); stop_server ends it at once, and a
    later pool starts another."""
    local.stop_server()  # one an earlier test started
    local.Local.prestart(ExecutionOptions(jobs=1), runs=5)  # one at a time: nothing to start
    local.Local.prestart(ExecutionOptions(jobs="auto"), runs=1)  # a single run: in this process
    assert server_pid() is None
    local.Local.prestart(ExecutionOptions(jobs=2), runs=5)
    first = server_pid()
    assert first is not None and os.waitpid(first, os.WNOHANG) == (0, 0)  # alive
    monkeypatch.setenv("MODERN_GPT_TEST_VALUE", "set after the server started")
    jobs = [FakeJob(0, s, env="MODERN_GPT_TEST_VALUE") for s in range(3)]
    records = []
    local.Local(ExecutionOptions(jobs=2, max_retries=1), 1, "cpu").run(
        jobs, "the corpus", lambda *s: None, records.append
    )
    assert sorted(r["seed"] for r in records) == [0, 1, 2] and all(r["corpus"] == "the corpus" for r in records)
    assert {r["ppid"] for r in records} == {first} and len({r["pid"] for r in records}) == 2
    assert {r["env"] for r in records} == {"set after the server started"}
    local.stop_server()
    assert server_pid() is None
    with pytest.raises(ChildProcessError):  # gone, and reaped
        os.waitpid(first, os.WNOHANG)
    records.clear()
    local.Local(ExecutionOptions(jobs=2, max_retries=1), 1, "cpu").run(
        jobs[:2], "again", lambda *s: None, records.append
    )
    assert server_pid() not in (None, first) and {r["ppid"] for r in records} == {server_pid()}


@pytest.mark.slow
def test_workers_that_finish_in_the_same_wait_are_each_stopped_or_given_a_run(monkeypatch):
    """Two workers whose runs end before the driver looks (a slow driver, a loaded machine) and one run left: one
    takes it, the other is stopped. It was left idle, and the driver waited on it for ever."""
    wait = local.wait_ready

    def late(handles, timeout=None):  # the driver looks only once both quick runs are done
        time.sleep(0.5)
        return wait(handles, timeout)

    monkeypatch.setattr(local, "wait_ready", late)
    records: list = []
    pool = threading.Thread(
        target=LocalPool(2).run,
        args=([FakeJob(0, s) for s in range(3)], None, lambda *s: None, records.append),
        daemon=True,  # should it wait for ever, the test process still ends
    )
    pool.start()
    pool.join(60)
    assert not pool.is_alive(), "the pool waits for ever on an idle worker"
    assert sorted(r["seed"] for r in records) == [0, 1, 2]


# A driver of its own (this test process has a resource tracker and a fork server already): a pool of two
# FakeJobs after prestart, with what a test adds in place of {} (jobs among it), then each record's ppid by seed, and any error.
DRIVER = """
import os, signal, sys
from multiprocessing import forkserver
from modern_gpt.ablation.executors import local
from modern_gpt.core.config import ExecutionOptions
from tests.executor_jobs import FakeJob

local.Local.prestart(ExecutionOptions(jobs=2), runs=2)
server = forkserver._forkserver._forkserver_pid
{}
records = []
local.Local(ExecutionOptions(jobs=2, max_retries=1), 1, "cpu").run(jobs, "corpus", lambda *s: None, records.append)
records.sort(key=lambda r: r["seed"])
print(server, *(r["ppid"] for r in records), *(r["error"] for r in records if r["error"]))
"""


def drive(code: str) -> tuple[list[str], str]:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", DRIVER.format(code)], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split(), proc.stderr


@pytest.mark.slow
def test_ctrl_c_while_the_fork_server_imports_is_ignored_by_it():
    """A terminal's Ctrl-C reaches the fork server too, while it imports torch (prestart, before the driver's
    own imports): it has the terminal's signals blocked, as a worker has (multiprocessing's resource tracker,
    started first, unblocks SIGINT as it starts: the server must not be started in that state)."""
    out, err = drive("os.kill(server, signal.SIGINT)\njobs = [FakeJob(0, 0), FakeJob(0, 1)]")
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert out[1:3] == [out[0], out[0]]  # both workers are forks of the first server: it lived on


@pytest.mark.slow
def test_a_fork_server_killed_mid_run_leaves_no_worker_running_and_no_traceback(tmp_path):
    """kill -9 of the fork server while its workers train: the driver, which learns of a worker's end from the
    server, takes them for dead and starts their runs again; the workers it gave up end at their next progress
    update, quietly (run() returns when every holder of its stderr has closed it)."""
    out, err = drive(f"jobs = [FakeJob(0, 0, kills_server={str(tmp_path / 'killed')!r}), FakeJob(0, 1)]")
    assert "Traceback" not in err and "Error" not in err, err
    assert out[1] != out[0] and out[3:] == []  # the run under way finished under a new server; none failed


# A driver that stops on SIGTERM as the command line does; its corpus signals it from inside a starting worker
SIGNALLED = """
import os, signal, sys
from modern_gpt.ablation.executors import local
from modern_gpt.core.config import ExecutionOptions
from tests.executor_jobs import FakeJob, SignalsDriver

def stop(*_):
    raise KeyboardInterrupt
signal.signal(signal.SIGTERM, stop)
corpus = [SignalsDriver(os.getpid(), signal.{}), bytes(1 << 22)]  # the signal, then 4 MB still to write
try:
    local.Local(ExecutionOptions(jobs=2), 1, "cpu").run([FakeJob(0, 0), FakeJob(0, 1)], corpus, print, print)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_while_a_worker_receives_its_corpus_ends_quietly(name):
    """The signal lands while the driver writes a starting worker's corpus (issue 43: about one in seven such
    signals printed the worker's UnpicklingError, half a pickle, after the clean lines): the driver holds it until
    the worker has all of it, then stops, and the worker with it."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", SIGNALLED.format(name)], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 130 and proc.stderr == "", proc.stderr


@pytest.mark.slow
def test_a_signal_at_any_moment_of_a_pools_start_up_ends_quietly(tmp_path):
    """SIGTERM and Ctrl-C at several moments of `ablate --jobs 2`'s start-up (imports, fork server, workers, first
    runs): exit 130, a sentence, no traceback from the driver, the fork server or a worker."""
    for i, (delay, signum) in enumerate([(0.3, signal.SIGTERM), (0.8, signal.SIGINT), (1.5, signal.SIGTERM),
                                         (2.5, signal.SIGINT), (3.5, signal.SIGTERM), (5, signal.SIGINT)]):  # fmt: skip
        proc = cli_process("ablate", *TINY, "--jobs", "2", "--out", tmp_path / str(i))
        time.sleep(delay)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 130, -signal.SIGTERM), err  # 0: finished; -SIGTERM: before any handler
        assert "Traceback" not in err and "Error" not in err, (delay, signum, err)


# A ladder of classic and RoPE at widths 8, 16 and 32, 2 seeds: twelve runs of at most 12 steps
TINY_LADDER = [
    *("--smoke", "--context", "16", "--dim", "32", "--heads", "2", "--layers", "1", "--steps", "12"),
    *("--seeds", "2", "--plan", "custom", "--variants", "classic;rope", "--no-placebo"),
]


# ---------------------------------------------------------------------------
# Ray: one cluster for the module, a head and a worker node, 1 CPU each
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A two-node Ray cluster on 127.0.0.1 without token authentication. HOME is the module's own while it runs:
    a ~/.ray/auth_token left on the machine would otherwise be sent to it (see the stray-token test)."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    with pytest.MonkeyPatch.context() as home:  # undone however the cluster's start ends
        home.setenv("HOME", str(tmp_path_factory.mktemp("home")))
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
def wandb_root(executor_reference):
    """W&B offline, one folder for the module: the --jobs 1 reference (conftest.executor_reference) and the Ray
    ablation both log there, each as the group of its folder's name (None without wandb). W&B, not MLflow: a
    fresh sqlite store costs seconds."""
    root = executor_reference[1]
    if root is None:
        yield None
        return
    with pytest.MonkeyPatch.context() as mp:
        offline_env(mp, root)
        yield root


def track(root) -> list[str]:
    return ["--track", "wandb"] if root else []


def tracked(root, group: str) -> dict[tuple[int, int], tuple]:
    """What W&B holds of each (row, seed) of an ablation, less what differs by folder, run id and clock."""
    clock = {"tokens_per_s", "secs", "_runtime", "_timestamp", "_wandb/runtime"}
    runs = [r for r in wandb_runs(root) if r.group == group and r.job_type == "run"]
    out = {
        (r.config["row"], r.config["seed"]): (
            sorted(t for t in r.tags if not t.startswith("folder=")),
            {k: v for k, v in r.config.items() if k != "folder"},
            {k: v for k, v in r.summary.items() if k not in clock},
            [{k: v for k, v in h.items() if k not in clock} for h in r.history],
        )
        for r in runs
    }
    assert len(out) == len(runs)  # no (row, seed) logged twice
    return out


@pytest.fixture(scope="module")
def reference(executor_reference):
    """The tiny ablation with --jobs 1: what every executor must give, bitwise (logged to W&B as the group r)."""
    return executor_reference[0]


@pytest.mark.slow
def test_a_stray_token_against_a_cluster_without_one_is_one_sentence(cluster, tmp_path, monkeypatch):
    """A token on this machine (another cluster's) is sent to every address; a cluster without token
    authentication then cannot fetch the corpus from the driver (OwnerDiedError): one sentence with the way out.
    A process of its own: Ray keeps a process's first token mode."""
    import secrets

    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    monkeypatch.setenv("HOME", str(tmp_path))
    done = cli(
        "ablate", *TINY, "--executor", "ray", "--ray-address", cluster.address, "--out", tmp_path / "r", timeout=300
    )
    assert done.returncode == 2 and "set RAY_AUTH_MODE=disabled for this command" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and str(tmp_path / ".ray" / "auth_token") in done.stderr, done.stderr


@pytest.mark.slow
def test_a_ray_ablation_equals_jobs_1_and_records_the_cluster(cluster, reference, wandb_root, tmp_path):
    folder = tmp_path / "ray"
    invoke("ablate", *TINY, "--executor", "ray", "--ray-address", cluster.address, "--out", folder, *track(wandb_root))
    pd.testing.assert_frame_equal(values(folder), reference)
    if wandb_root:  # the driver logged the runs that came back from the cluster: the same runs as --jobs 1 logged
        ray, jobs1 = tracked(wandb_root, "ray"), tracked(wandb_root, "r")
        assert sorted(ray) == sorted(jobs1) == [(row, seed) for row in range(3) for seed in range(2)]
        assert ray == jobs1 and all(summary["val_loss"] > 0 for _, _, summary, _ in ray.values())
    meta = json.loads((folder / "meta.json").read_text())
    ex = meta["executor"]
    assert meta["status"] == "finished" and ex["name"] == "ray" and ex["ray_version"]
    assert ex["address"] == cluster.address and ex["cpus_per_run"] == 1 and ex["max_retries"] == 2
    assert len(ex["nodes"]) == 2 and {n["address"] for n in ex["nodes"]} == {"127.0.0.1"}  # loopback only
    assert ex["resources"]["CPU"] == 2
    assert pd.read_csv(folder / "runs.csv").threads.eq(1).all()


@pytest.mark.slow
def test_a_ray_ladder_equals_jobs_1(cluster, tmp_path):
    """modern-gpt scale on the cluster: every rung's runs, and so the scale table, as --jobs 1 gives them. The test
    connects to the cluster once, so that the three rungs use one Ray job and its warm workers (each rung's own
    connection would start new workers, each importing torch); connecting and disconnecting per ablation is the
    other tests' (the plain ablation, then the plugin one, in this one process)."""
    import logging

    import ray

    ladder = ["scale", *TINY_LADDER]
    invoke(*ladder, "--jobs", "1", "--out", tmp_path / "one")
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # ray.init sets its own
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
    for s, handler in saved.items():
        signal.signal(s, handler)
    try:
        invoke(*ladder, "--executor", "ray", "--ray-address", cluster.address, "--out", tmp_path / "ray")
        assert ray.is_initialized()  # the rungs used the test's connection and left it open
    finally:
        ray.shutdown()
    for name in ("runs.csv", "summary.csv"):
        one, ray = (pd.read_csv(tmp_path / f / name) for f in ("one", "ray"))
        drop = [c for c in ("secs", "tokens_per_s", "mfu") if c in one]
        pd.testing.assert_frame_equal(ray.drop(columns=drop), one.drop(columns=drop))
    assert json.loads((tmp_path / "ray" / "rung-2" / "meta.json").read_text())["executor"]["name"] == "ray"


@pytest.mark.slow
def test_a_ray_ablation_with_a_plugin_component_equals_jobs_1(cluster, capsys, monkeypatch, tmp_path):
    """Ray tasks get the plugin by value (tests/model/test_plugins.py has the local workers' case)."""
    isolated_registry(monkeypatch)  # the plugin loaded here is gone after the test
    mine = tmp_path / "relu2.py"
    shutil.copy(EXAMPLES / "relu2.py", mine)
    values = {}
    for name, extra in (("jobs1", ["--jobs", "1"]), ("ray", ["--executor", "ray", "--ray-address", cluster.address])):
        code, _, err = run_main(
            capsys, monkeypatch, "ablate", *tiny(2), "--plugin", mine, "--plan", "custom", "--variants",
            "classic;relu2", "--seeds", "2", "--no-placebo", "--threads", "1", "--out", tmp_path / name, *extra,
        )  # fmt: skip
        assert code == 0, err
        runs = [json.loads(p.read_text()) for p in sorted((tmp_path / name / "runs").glob("*.json"))]
        assert all(r["error"] == "" for r in runs)
        values[name] = {(r["variant"], r["seed"]): r["val_loss"] for r in runs}
    assert values["ray"] == values["jobs1"] and len(values["jobs1"]) == 4
    meta = json.loads((tmp_path / "ray" / "meta.json").read_text())
    assert meta["executor"]["name"] == "ray" and meta["plugins"][0]["components"] == ["relu2"]


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


@pytest.mark.slow
def test_gpus_per_run_on_a_cluster_without_gpus_is_one_sentence_before_any_folder(cluster, tmp_path):
    """The driver's torch has no CUDA here: planning must not touch it (the device is the workers'), and a cluster
    with no GPU is refused at once, where the runs would wait for ever."""
    args = ["ablate", *TINY, "--executor", "ray", "--ray-address", cluster.address, "--gpus-per-run", "1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "r")])
    assert isinstance(result.exception, UserError), result.exception
    assert str(result.exception) == (
        "no node of the Ray cluster has 1 CPU and 1 GPU for a run (its nodes have at most 1 CPU and 0 GPU); lower "
        "--gpus-per-run (or leave it out to train on CPUs), or add such a node."
    )
    assert not (tmp_path / "r").exists()
