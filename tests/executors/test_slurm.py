"""--executor slurm on a real Slurm cluster: munged, slurmctld and slurmd started by a module fixture on 127.0.0.1
(one node, 2 CPUs, its folders in a temporary folder), stopped by their own pids. The tests skip where the Slurm
packages (Debian's slurmctld, slurmd, slurm-client, munge) or submitit are missing, or where they cannot run as
root. What they show: an ablation equals --jobs 1 bitwise, packed (the smoke plan) or not (classic and RoPE); a
task killed mid-run is submitted again and the table is unchanged; a driver killed after submitting, and one that
detached, are finished by --resume, each run trained once; every bad input is one sentence before anything
trains."""

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from modern_gpt.cli.commands import app
from modern_gpt.core.errors import UserError
from tests.clihelp import cli, cli_process, invoke, runner

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
SMOKE = ["--smoke", "--seeds", "2"]  # 8 rows x 2 seeds: 16 runs of about half a second
# 2 rows x 2 seeds: 4 runs, for the one-run-per-task array (16 tasks would be 16 starts of Python and torch, on
# two CPUs; the packed tests train the smoke plan, every component, on the cluster)
SMALL = ["--smoke", "--seeds", "2", "--plan", "custom", "--variants", "classic;rope", "--no-placebo"]
SLURM = ["--executor", "slurm"]
VALUES = ["row", "variant", "seed", "params", "train_loss", "val_loss", "best_val_loss", "val_bpc", "steps_done"]
TIMING = ["secs", "tokens_per_s", "mfu"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing() -> str | None:
    gone = [c for c in DAEMONS if shutil.which(c, path=SBIN) is None] + [c for c in CLIENTS if not shutil.which(c)]
    if gone:
        return f"the Slurm packages are not installed ({', '.join(gone)} missing)"
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root (SlurmUser=root)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "there is no munge user"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed"
    return None


CONF = """ClusterName=modern-gpt-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}/munge.socket
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=2
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes={host} MaxTime=1 State=UP
"""


def _start_munged(munge: Path) -> None:
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))  # the cluster's own key: nothing else can talk to it
    for p in (munge, key):
        shutil.chown(p, "munge", "munge")
    key.chmod(0o400)
    munge.chmod(0o711)  # munged checks that its socket's folder can be entered
    files = {"socket": "munge.socket", "key-file": "munge.key", "pid-file": "munged.pid", "log-file": "munged.log"}
    flags = [f"--{flag}={munge / name}" for flag, name in {**files, "seed-file": "munged.seed"}.items()]
    subprocess.run([shutil.which("munged", path=SBIN), *flags], user="munge", group="munge", check=True, timeout=30)


def _pid(path: Path, limit: float = 15) -> int | None:
    """A daemon's pid from its pid file, which it writes once it has forked (after its starter returned)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text())
        time.sleep(0.05)
    return None


def _wait_idle(env: dict, limit: float = 60) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.split() and all(s == "idle" for s in out.stdout.split()):
            return
        time.sleep(0.3)
    raise AssertionError(f"the test cluster did not come up: {out.stdout} {out.stderr}")


def _cancel_all(env: dict, limit: float = 30) -> None:
    """Every job of the test cluster cancelled, and gone from its queue (their slurmstepd processes with them)."""
    subprocess.run(["scancel", "--user", "root", "--full"], env=env, capture_output=True, timeout=30)
    deadline = time.time() + limit
    while time.time() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.strip():
            return
        time.sleep(0.2)


def _stop(pids: list[int], limit: float = 20) -> None:
    """SIGTERM to each daemon by its own pid, then SIGKILL to any left after `limit` seconds; waits until all
    are gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.time() + limit
    while any(os.path.exists(f"/proc/{p}") for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = _missing()
    if why:
        pytest.skip(f"no test Slurm cluster: {why}")
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    munge = Path(tempfile.mkdtemp(prefix="modern-gpt-munge-", dir="/tmp"))  # the munge user must reach it
    conf = root / "slurm.conf"
    host = socket.gethostname().split(".")[0]
    conf.write_text(CONF.format(host=host, ctld=_free_port(), slurmd=_free_port(), munge=munge, root=root))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pid_files = [munge / "munged.pid", root / "slurmctld.pid", root / "slurmd.pid"]
    try:
        _start_munged(munge)
        assert _pid(pid_files[0]), "munged did not start"
        subprocess.run([shutil.which("slurmctld", path=SBIN), "-i"], env=env, check=True, timeout=30)
        assert _pid(pid_files[1]), "slurmctld did not start"
        subprocess.run([shutil.which("slurmd", path=SBIN)], env=env, check=True, timeout=30)
        assert _pid(pid_files[2]), "slurmd did not start"
        _wait_idle(env)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SLURM_CONF", str(conf))
            yield root
    finally:
        _cancel_all(env)
        pids = [_pid(f, limit=2) for f in pid_files]
        _stop([p for p in pids[1:] if p])  # slurmctld and slurmd, then munged, which they talk to until they end
        _stop([p for p in pids[:1] if p])
        shutil.rmtree(munge, ignore_errors=True)
    left = [p for p in pids if p and os.path.exists(f"/proc/{p}")]
    assert not left, f"daemons left running: {left}"


def values(folder) -> pd.DataFrame:
    return pd.read_csv(Path(folder) / "runs.csv").sort_values(["row", "seed"])[VALUES].reset_index(drop=True)


def summary(folder) -> pd.DataFrame:
    frame = pd.read_csv(Path(folder) / "summary.csv")
    return frame.drop(columns=[c for c in frame if c in TIMING or c.endswith("secs")])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The smoke ablation with --jobs 1 (one thread per run, as the smoke config pins): what Slurm must give."""
    folder = tmp_path_factory.mktemp("jobs1") / "r"
    invoke("ablate", *SMOKE, "--jobs", "1", "--out", folder)
    return folder


@pytest.fixture(scope="module")
def small_reference(tmp_path_factory):
    """SMALL with --jobs 1."""
    folder = tmp_path_factory.mktemp("small-jobs1") / "r"
    invoke("ablate", *SMALL, "--jobs", "1", "--out", folder)
    return folder


def same_as(folder, reference, runs: int = 16) -> None:
    pd.testing.assert_frame_equal(values(folder), values(reference))
    pd.testing.assert_frame_equal(summary(folder), summary(reference))
    table = pd.read_csv(Path(folder) / "runs.csv", keep_default_na=False)
    assert len(table) == runs and (table.error == "").all() and (table.threads == 1).all()


def trainings(folder) -> dict[tuple[int, int], int]:
    """How many times each (row, seed) was trained to completion, from the tasks' own log lines."""
    counts: dict = {}
    for log in (Path(folder) / "slurm" / "tasks").glob("*_log.out"):
        for row, seed in re.findall(r"modern-gpt: row (\d+) seed (\d+) on \S+: trained in", log.read_text()):
            counts[(int(row), int(seed))] = counts.get((int(row), int(seed)), 0) + 1
    return counts


def once_each(folder, rows: int = 8) -> None:
    assert trainings(folder) == {(r, s): 1 for r in range(rows) for s in range(2)}
    assert not list((Path(folder) / "slurm" / "done").glob("*.json"))  # every record taken into runs/


@pytest.mark.slow
def test_an_ablation_on_slurm_equals_jobs_1(cluster, small_reference, tmp_path):
    folder = tmp_path / "r"
    out = invoke("ablate", *SMALL, *SLURM, "--out", folder)
    same_as(folder, small_reference, runs=4)
    once_each(folder, rows=2)
    meta = json.loads((folder / "meta.json").read_text())
    ex = meta["executor"]
    assert meta["status"] == "finished" and ex["name"] == "slurm" and ex["partition"] == "debug"
    assert ex["runs_per_task"] == 1 and ex["cpus_per_run"] == 1 and ex["slurm_version"].startswith("slurm")
    state = json.loads((folder / "slurm" / "state.json").read_text())
    assert len(state["waves"]) == 1 and len(state["waves"][0]["packs"]) == 4  # one array of 4 tasks
    assert "classic" in out and "rope" in out


def _wait_for(predicate, what: str, limit: float = 120, proc=None) -> None:
    deadline = time.time() + limit
    while not predicate():
        assert time.time() < deadline, f"waited {limit} s for {what}"
        assert proc is None or proc.poll() is None, proc.communicate()
        time.sleep(0.1)


def _kill_task(task: str) -> None:
    """scancel --signal=KILL of an array task, and SIGKILL to its processes on this one-node cluster as well:
    under load, Slurm 22.05 was seen to deliver only SIGCONT and SIGTERM (which the tasks ignore, as the time-limit
    warning) and let the task finish, so the kill the test is about is made sure of."""
    subprocess.run(["scancel", "--full", "--signal=KILL", task], check=True)
    job, _, index = task.partition("_")
    for proc in Path("/proc").iterdir():
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            argv = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        wanted = [f"SLURM_ARRAY_JOB_ID={job}", f"SLURM_ARRAY_TASK_ID={index}"] if index else [f"SLURM_JOB_ID={job}"]
        mine = all(w.encode() in env for w in wanted)
        if mine and b"submitit" in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _log(folder: Path, task: str) -> str:
    log = folder / "slurm" / "tasks" / f"{task}_0_log.out"
    return log.read_text() if log.exists() else ""


@pytest.mark.slow
def test_a_task_killed_mid_run_is_submitted_again_and_the_table_is_unchanged(cluster, reference, tmp_path):
    """scancel --signal=KILL of a task of 8 runs once it trains its second (Slurm ends it within KillWait, 2 s
    here): the runs it finished are kept, the run it was training and those it had not begun go into a second
    array, and every value equals --jobs 1."""
    folder = tmp_path / "r"
    proc = cli_process("ablate", *SMOKE, *SLURM, "--runs-per-task", "8", "--out", folder)
    state = folder / "slurm" / "state.json"
    _wait_for(lambda: state.exists() and json.loads(state.read_text())["waves"][0]["job_id"], "the array", proc=proc)
    task = json.loads(state.read_text())["waves"][0]["job_id"] + "_0"
    _wait_for(lambda: _log(folder, task).count(": training") >= 2, f"task {task}'s second run", proc=proc)
    _kill_task(task)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    same_as(folder, reference)
    killed = _log(folder, task)
    kept = killed.count(": trained in")
    # killed mid-run, or (on a loaded machine) between one run's end and the next one's start
    assert killed.count(": training") in (kept, kept + 1) and 1 <= kept < 8, killed
    waves = json.loads(state.read_text())["waves"]
    assert len(waves) == 2 and [len(p) for p in waves[1]["packs"]] == [8 - kept]  # the rest, submitted again
    assert set(trainings(folder).values()) == {1}  # none trained twice to completion
    assert json.loads(state.read_text())["attempts"] == {f"{r},{s}": 1 for r, s in waves[1]["packs"][0]}


@pytest.mark.slow
def test_a_driver_killed_after_submitting_is_finished_by_resume(cluster, reference, tmp_path):
    """kill -9 of the driver once its array is submitted: the tasks train on, and --resume waits for them
    instead of submitting their runs again."""
    folder = tmp_path / "r"
    proc = cli_process("ablate", *SMOKE, *SLURM, "--runs-per-task", "8", "--out", folder)
    state = folder / "slurm" / "state.json"
    _wait_for(lambda: state.exists() and json.loads(state.read_text())["waves"][0]["job_id"], "the array", proc=proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert json.loads((folder / "meta.json").read_text())["status"] == "running"
    out = invoke("ablate", "--resume", folder)
    assert "rope" in out
    same_as(folder, reference)
    once_each(folder)
    assert len(json.loads(state.read_text())["waves"]) == 1  # nothing submitted again


@pytest.mark.slow
def test_detach_then_resume_with_four_runs_per_task(cluster, reference, tmp_path):
    """--detach submits 4 tasks of 4 runs and exits; while they train, a resume on another executor is refused and
    report shows the folder as detached; ablate --resume DIR waits for them and prints --jobs 1's table."""
    folder = tmp_path / "r"
    done = cli("ablate", *SMOKE, *SLURM, "--runs-per-task", "4", "--detach", "--out", folder)
    assert done.returncode == 0, done.stderr
    assert re.search(r"16 runs are queued or training in Slurm job \d+ \(partition debug\); modern-gpt ablate "
                     rf"--resume {re.escape(str(folder))} collects them and prints the table\.", done.stdout), done.stdout  # fmt: skip
    assert json.loads((folder / "meta.json").read_text())["status"] == "detached"
    refused = runner.invoke(app, ["ablate", "--resume", str(folder), "--executor", "local"])
    assert isinstance(refused.exception, UserError) and re.fullmatch(
        rf"{re.escape(str(folder))} has 4 Slurm tasks still queued or running \(job (\d+)\); resume it on Slurm "
        r"\(leave out --executor local\), or cancel them first with scancel \1\.",
        str(refused.exception),
    ), refused.exception
    report = cli("report", folder)
    assert report.returncode == 0 and "Detached: its runs were submitted to Slurm" in report.stdout, report.stdout
    out = invoke("ablate", "--resume", folder)  # waits for the tasks, then the table
    assert "rope" in out
    same_as(folder, reference)
    once_each(folder)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["executor"]["settings"]["runs_per_task"] == 4
    waves = json.loads((folder / "slurm" / "state.json").read_text())["waves"]
    assert [[len(p) for p in w["packs"]] for w in waves] == [[4, 4, 4, 4]]  # one array, nothing submitted again


@pytest.mark.slow
def test_seeds_auto_submits_one_array_per_look(cluster, tmp_path):
    """--seeds auto: the first look's runs are one array, each later look's another; the values and the looks are
    --jobs 1's."""
    auto = ["--smoke", "--seeds", "auto", "--min-seeds", "2", "--max-seeds", "3", "--plan", "custom"]
    auto += ["--variants", "classic;rope"]
    invoke("ablate", *auto, "--jobs", "1", "--out", tmp_path / "one")
    invoke("ablate", *auto, *SLURM, "--runs-per-task", "3", "--out", tmp_path / "slurm")
    pd.testing.assert_frame_equal(values(tmp_path / "slurm"), values(tmp_path / "one"))
    looks = [json.loads((tmp_path / f / "meta.json").read_text())["sequential"]["looks"] for f in ("one", "slurm")]
    assert [lk["seeds"] for lk in looks[1]] == [lk["seeds"] for lk in looks[0]] == [2, 3]
    waves = json.loads((tmp_path / "slurm" / "slurm" / "state.json").read_text())["waves"]
    assert [[len(p) for p in w["packs"]] for w in waves] == [[3, 3], [3]]


@pytest.mark.slow
def test_a_run_whose_tasks_all_die_is_recorded_failed_with_slurm_s_reason(cluster, tmp_path):
    """--max-retries 0 and the one task killed mid-run: the run is a failed run whose error is Slurm's JobState,
    and the ablation ends with its table (the failed run counted apart)."""
    folder = tmp_path / "r"
    one = ["--smoke", "--steps", "3000", "--seeds", "1", "--plan", "custom", "--variants", "classic", "--no-placebo"]
    proc = cli_process("ablate", *one, *SLURM, "--max-retries", "0", "--out", folder)
    state = folder / "slurm" / "state.json"
    _wait_for(lambda: state.exists() and json.loads(state.read_text())["waves"][0]["job_id"], "the array", proc=proc)
    task = json.loads(state.read_text())["waves"][0]["job_id"]  # a lone task: no array index
    _wait_for(lambda: ": training" in _log(folder, task), "the run to start", proc=proc)
    subprocess.run(["scancel", "--signal=KILL", task], check=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run = json.loads((folder / "runs" / "row00-seed0.json").read_text())
    assert run["error"] == f"the Slurm task running it ({task}) ended CANCELLED (signal 15, SIGTERM), 1 time", run
    assert "failed" in out


def test_a_failed_run_s_record_belongs_to_its_folder(corpus):
    """The record an executor writes for a run that could not finish (its worker, node or task died on every
    try) passes the run files' schema: its peak was None, which left the file out of its own folder's table."""
    from modern_gpt.ablation import planning, running
    from modern_gpt.ablation.results import RUN_SCHEMA
    from modern_gpt.core.schema import problem
    from modern_gpt.core.settings import resolve

    settings = resolve(None, True, {})
    spec = planning.plan_spec(
        settings, planning.Request("ablate", "custom", variants="classic", seeds="1", placebo=False)
    )
    s = spec.settings
    job = running.Job(0, spec.variants[0], 0, s.model, s.train, s.data, 1)
    record = job.failure_record(corpus, "the Slurm task running it (7_0) ended NODE_FAIL, 3 times")
    assert problem(record, RUN_SCHEMA) is None and record["error"].endswith("3 times")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "7", '"text"'])
def test_a_hand_edited_state_json_is_one_sentence(tmp_path, text):
    from modern_gpt.ablation.executors import slurm

    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "state.json").write_text(text)
    with pytest.raises(UserError) as e:
        slurm.Book(tmp_path)
    assert str(e.value) == f"{tmp_path}/slurm/state.json is damaged; remove it (and cancel the folder's Slurm jobs)."


def test_a_task_trains_a_run_whose_run_file_is_foreign_or_no_json_object(corpus, tmp_path):
    """A task skips a run already recorded, in done/ or as this ablation's run file; a run file of other settings,
    or one that is no JSON object (a hand edit), is no record: the run trains."""
    from modern_gpt.ablation import planning, running
    from modern_gpt.ablation.executors import slurm
    from modern_gpt.core.settings import resolve

    spec = planning.plan_spec(resolve(None, True, {}), planning.Request("ablate", "custom", variants="classic"))
    s = spec.settings
    job = running.Job(0, spec.variants[0], 0, s.model, s.train, s.data, 1)
    (tmp_path / "runs").mkdir()
    run_file = tmp_path / "runs" / "row00-seed0.json"
    for text, recorded in (("[1]", False), ('{"settings_hash": "other"}', False), ("{}", False)):
        run_file.write_text(text)
        assert slurm._recorded(tmp_path, job, corpus) is recorded, text
    run_file.write_text(json.dumps({"settings_hash": job.settings_hash(corpus)}))
    assert slurm._recorded(tmp_path, job, corpus)


def test_a_results_folder_the_compute_nodes_cannot_see_is_refused(monkeypatch, tmp_path):
    from modern_gpt.ablation.executors import slurm

    monkeypatch.setattr(slurm, "slurm", lambda *args, **kw: "gpu01\ngpu02\n")  # scontrol show hostnames
    partition = slurm.Partition("gpu", True, None, 64, 8, "gpu[01-02]")
    with pytest.raises(UserError) as e:
        slurm.check_visible(Path("/tmp/results/r"), partition)
    assert str(e.value) == (
        "the results folder /tmp/results/r is on this machine's own tmp, which the compute nodes of partition gpu "
        "(gpu01, gpu02) cannot see; give --out a folder on the filesystem they share (your home or project folder)."
    )
    slurm.check_visible(Path.home() / "results" / "r", partition)  # not node-local: trusted (the docs say so)
    monkeypatch.setattr(slurm, "slurm", lambda *args, **kw: f"{socket.gethostname()}\n")
    slurm.check_visible(Path("/tmp/results/r"), partition)  # a cluster of this machine alone sees its /tmp


def test_time_limits_read_as_slurm_reads_them():
    from modern_gpt.core.config import slurm_minutes

    cases = {"90": 90, "1:30": 2, "1:30:00": 90, "2-00": 2880, "2-1:30": 2970, "1-00:00:30": 1441, 5: 5}
    assert {k: slurm_minutes(k) for k in cases} == cases
    for bad in ("soon", "1:2:3:4", "0", "-5", "1-"):
        with pytest.raises(UserError):
            slurm_minutes(bad)


def refusal(tmp_path, *args, env: dict | None = None) -> str:
    """The ablation with these flags: one sentence, exit code 2, and no folder made."""
    folder = tmp_path / "never"
    result = runner.invoke(app, ["ablate", *SMOKE, *SLURM, *map(str, args), "--out", str(folder)], env=env)
    assert isinstance(result.exception, UserError), (result.exception, result.output)
    assert not folder.exists()
    text = str(result.exception)
    assert len(text.splitlines()) == 1, text
    return text


@pytest.mark.slow
def test_every_bad_input_is_one_sentence_before_anything_trains(cluster, tmp_path, monkeypatch):
    assert refusal(tmp_path, "--partition", "gpu") == (
        "unknown Slurm partition 'gpu'; the cluster's partitions are debug (its default), short."
    )
    assert refusal(tmp_path, "--gpus-per-run", "1") == (
        "--gpus-per-run 1 asks for GPUs, and Slurm partition debug has none (no node of it lists a gpu gres); choose a "
        "partition with GPUs with --partition, or leave out --gpus-per-run to train on CPUs."
    )
    too_short = refusal(tmp_path, "--steps", "100000", "--time-limit", "1")
    assert (
        too_short.startswith("--time-limit 1 is shorter than a task's estimated ")
        and "longer --time-limit" in too_short
    )
    assert refusal(tmp_path, "--steps", "100000", "--partition", "short").startswith(
        "Slurm partition short allows a task 1 min, less than a task's estimated "
    )
    assert refusal(tmp_path, "--time-limit", "soon") == (
        "--time-limit must be minutes or Slurm's [D-]HH:MM[:SS] (90, 1:30:00, 2-00:00:00), got 'soon'."
    )
    assert refusal(tmp_path, "--sbatch", "exclusive") == (
        "--sbatch takes KEY=VALUE (account=lab, qos=high), got 'exclusive'."
    )
    assert refusal(tmp_path, env={"PATH": os.path.dirname(sys.executable)}) == (
        "--executor slurm needs Slurm's sbatch and srun and more, which is not on PATH; run modern-gpt on a login "
        "node of the cluster, or add Slurm's bin folder to PATH."
    )
    assert refusal(tmp_path, "--cpus-per-run", "3") == (
        "--cpus-per-run 3 is more than a node of Slurm partition debug has (2); lower --cpus-per-run."
    )
    # what sbatch alone can refuse, when the array is submitted: its words, in one sentence
    folder = tmp_path / "refused"
    result = runner.invoke(app, ["ablate", *SMOKE, *SLURM, "--sbatch", "constraint=nope", "--out", str(folder)])
    assert str(result.exception) == (
        "sbatch refused the array of 16 tasks: Batch job submission failed: Invalid feature specification; check "
        "--sbatch and --partition."
    )
    assert json.loads((folder / "meta.json").read_text())["status"] == "failed" and not list(folder.glob("runs/*"))
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if it were not installed
    assert refusal(tmp_path) == (
        '--executor slurm needs submitit, which is not installed; install it with: pip install -e ".[slurm]"'
    )
