"""A Slurm cluster, through submitit: each round of runs (the plan, or one look of --seeds auto) is one job array,
each array task one run or --runs-per-task of them one after another. See the package's docstring for what every
executor promises; here is how this one keeps them.

The folder stays the source of truth, written by the driver alone. A task writes each finished run's record to its
own file under DIR/slurm/done/ (an atomic write, the same as every file of the folder); the driver, holding the
folder's lock, takes it from there into runs/ through the one writer (on_record: ResultsDir.write_run, trackers),
and only then removes it. DIR/slurm/state.json (the driver's, atomic) records each array it submitted: its job
name (unique to the folder, written before sbatch runs), its job id and the runs of each task; a resume reads it
and waits for the tasks that are still queued or running instead of submitting their runs again. A task skips a
run whose record is already in done/ or runs/: a run is never trained twice to completion, even by a task that a
driver killed between sbatch and state.json left running.

A task that ends without the records of its runs (preempted, timed out, cancelled, killed, on a lost node) has
those runs submitted again in a new array, up to --max-retries times; then each is recorded as failed with the
state Slurm gives (JobState and ExitCode, from scontrol, or sacct where there is accounting). Arrays are submitted
with --no-requeue, so that every restart is one that --max-retries counts, and a task ignores submitit's warning
signal (USR2) before its time limit: Slurm ends it, and says TIMEOUT. A run that raises an error ends the ablation,
as in-process. Ctrl-C cancels the folder's tasks; --detach submits and returns (Detached).

Torch-free at import, and submitit is imported only when a Slurm executor is made.
"""

from __future__ import annotations

import contextlib
import getpass
import io
import json
import math
import os
import pickle
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.config import SLURM_OPTIONS, slurm_minutes
from ...core.errors import UserError
from ...core.files import atomic_path, write_json
from . import Cluster, Detached

if TYPE_CHECKING:
    from ...core.config import AblationOptions

SLURM_EXTRA = 'pip install -e ".[slurm]"'
COMMANDS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
START_S = 30.0  # a task's seconds before its first run: Python, torch, the corpus (an allowance, not measured)
STEP_OVERHEAD_S = 0.005  # a training step's seconds beyond its arithmetic (smoke: about 8 ms a step, 3 of them FLOPs)
GRACE_S = 3.0  # a task gone from the queue is settled this long after: a shared filesystem may show its files late
RECORDED = ("cpus_per_run", "gpus_per_run", "max_retries", *(o for o in SLURM_OPTIONS if o != "detach"))


# ---------------------------------------------------------------------------
# Slurm's commands, and what they say about the cluster
# ---------------------------------------------------------------------------
def import_submitit():
    try:
        import submitit
    except ImportError:
        raise UserError(
            f"--executor slurm needs submitit, which is not installed; install it with: {SLURM_EXTRA}"
        ) from None
    return submitit


def check_commands() -> None:
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise UserError(
            f"--executor slurm needs Slurm's {' and '.join(missing[:2])}{' and more' if missing[2:] else ''}, which "
            "is not on PATH; run modern-gpt on a login node of the cluster, or add Slurm's bin folder to PATH."
        )


def slurm(*args: str, timeout: float = 60) -> str:
    """A Slurm command's output; one that fails is one sentence with Slurm's own words."""
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"{args[0]} did not answer ({e}); check that the Slurm controller runs.") from None
    if out.returncode != 0:
        said = next((line.strip() for line in out.stderr.splitlines() if line.strip()), f"exit code {out.returncode}")
        raise UserError(f"{' '.join(args[:2])} failed: {said.rstrip('.')}; check that Slurm answers on this machine.")
    return out.stdout


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    max_minutes: int | None  # None: no limit
    cpus: int  # the partition's CPUs, every node's
    gpus: int  # its GPUs
    nodes: str  # Slurm's node list, compressed (node[01-04])
    node_cpus: int = 0  # the most CPUs of one node: a task cannot have more


def _minutes(text: str) -> int | None:
    return None if text.strip().lower() in ("infinite", "unlimited", "n/a", "none", "") else slurm_minutes(text)


def _gpus(gres: str) -> int:
    """The GPUs in a node's gres (gpu:4, gpu:a100:2(S:0-1), (null))."""
    return sum(int(n) for n in re.findall(r"gpu(?::[^:,()]+)?:(\d+)", gres))


def partitions() -> dict[str, Partition]:
    """Every partition of the cluster (sinfo: one line per group of like nodes)."""
    rows: dict[str, dict] = {}
    for line in slurm("sinfo", "-h", "-o", "%P|%G|%D|%c|%l|%N").splitlines():
        name, gres, nodes, cpus, limit, nodelist = (line.split("|") + [""] * 6)[:6]
        new = {"default": name.endswith("*"), "cpus": 0, "gpus": 0, "nodes": [], "node_cpus": 0}
        row = rows.setdefault(name.rstrip("*"), new)
        count, per_node = int(nodes) if nodes.isdigit() else 1, int(re.match(r"\d*", cpus).group() or 0)
        row["cpus"] += count * per_node
        row["gpus"] += count * _gpus(gres)
        row["node_cpus"] = max(row["node_cpus"], per_node)
        row["limit"], row["nodes"] = _minutes(limit), [*row["nodes"], nodelist]
    return {
        n: Partition(n, r["default"], r["limit"], r["cpus"], r["gpus"], ",".join(r["nodes"]), r["node_cpus"])
        for n, r in rows.items()
    }


def find_partition(name: str | None) -> Partition:
    known = partitions()
    default = next((p for p in known.values() if p.default), None)
    if name is None and default is not None:
        return default
    if name in known:
        return known[name]
    listed = ", ".join(f"{p.name} (its default)" if p.default else p.name for p in known.values()) or "none"
    if name is None:
        raise UserError(f"the Slurm cluster has no default partition; choose one with --partition: {listed}.")
    raise UserError(f"unknown Slurm partition {name!r}; the cluster's partitions are {listed}.")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"


# ---------------------------------------------------------------------------
# A task's estimated time: the time limit's check and default
# ---------------------------------------------------------------------------
def run_seconds(ablation, device: str, threads: int) -> float:
    """The slowest row's estimated seconds for one run: its steps' matmul FLOPs at compiling's measured rate (one
    thread on a CPU; assumed on CUDA), a few milliseconds of overhead per step, and its evaluations."""
    from ...run import compiling
    from ..planning import variant_config

    m = compiling.CPU if device == "cpu" else compiling.CUDA
    rate = m.gflops * 1e9 * (threads if device == "cpu" else 1)
    s = ablation.spec.settings
    vocab = ablation.corpus.tokenizer.vocab_size if ablation.corpus is not None else s.model.vocab_size
    t, worst = s.train, 0.0
    for v in ablation.spec.variants:
        cfg = replace(variant_config(s.model, v), vocab_size=vocab)
        step = compiling.step_flops(cfg, t.batch_size) / rate + STEP_OVERHEAD_S
        windows = t.eval_tokens / cfg.context + (t.steps // t.eval_every) * t.eval_batches * t.batch_size * 2
        worst = max(worst, t.steps * step + windows * compiling.forward_flops(cfg, 1, cfg.context) / rate)
    return worst


# ---------------------------------------------------------------------------
# What a task runs, on a compute node
# ---------------------------------------------------------------------------
def _done_file(folder: Path, row: int, seed: int) -> Path:
    return folder / "slurm" / "done" / f"row{row:02d}-seed{seed}.json"


def _recorded(folder: Path, job, corpus) -> bool:
    """The run is already in the folder: its record in done/, or its run file with its settings hash."""
    if _done_file(folder, job.row, job.seed).is_file():
        return True
    from ...core.settings import Settings
    from ..results import settings_hash

    try:
        found = json.loads((folder / "runs" / f"row{job.row:02d}-seed{job.seed}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    want = settings_hash(Settings(job.model, job.train, job.data).to_dict(), corpus.key)
    return isinstance(found, dict) and found.get("settings_hash") == want


def task(jobs: list, corpus_file: str, folder: str, gpus: int = 0) -> list:
    """One array task: its runs one after another, each record written to done/ as it finishes. Returns
    [("raised", row, seed, error, traceback)] when a run raised (the ablation ends), else []."""
    if hasattr(signal, "SIGUSR2"):  # submitit's warning before the time limit: Slurm ends the task, as TIMEOUT
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    if gpus:
        import torch

        if not torch.cuda.is_available():  # else --device auto would train on the CPU, the GPUs reserved and idle
            error = UserError(
                f"a task on the Slurm node {socket.gethostname()} reserved {gpus} GPU, but torch {torch.__version__} "
                "there sees no CUDA GPU; install a CUDA build of torch where the GPU nodes see it, or leave out "
                "--gpus-per-run."
            )
            return [("raised", jobs[0].row, jobs[0].seed, error, str(error))]
    with open(corpus_file, "rb") as f:
        corpus = pickle.load(f)
    root = Path(folder)
    for job in jobs:
        name = f"modern-gpt: row {job.row} seed {job.seed} on {socket.gethostname()}"
        if _recorded(root, job, corpus):
            print(f"{name}: already recorded, skipped", flush=True)
            continue
        print(f"{name}: training", flush=True)
        try:
            record = job(corpus, None)
        except BaseException as e:  # a run's own error: the driver raises it, as in-process
            text = "".join(traceback.format_exception(e))
            try:
                pickle.dumps(e)
            except Exception:
                e = RuntimeError(f"{type(e).__name__}: {e}")
            return [("raised", job.row, job.seed, e, text)]
        _done_file(root, job.row, job.seed).parent.mkdir(parents=True, exist_ok=True)
        write_json(_done_file(root, job.row, job.seed), record)
        print(f"{name}: trained in {record['secs']:.2f} s", flush=True)
    return []


# ---------------------------------------------------------------------------
# DIR/slurm/state.json: the arrays the folder's drivers submitted
# ---------------------------------------------------------------------------
def _key(row: int, seed: int) -> str:
    return f"{row},{seed}"


class Book:
    """state.json: a token that names the folder's jobs (mgpt-TOKEN-N), each array submitted (its name, job id once
    sbatch gave it, the (row, seed) of each task's runs, and the tasks settled), each run's attempts and the last
    reason. Written by the driver alone, atomically."""

    def __init__(self, folder: Path):
        self.path = folder / "slurm" / "state.json"
        try:
            data = json.loads(self.path.read_text(encoding="utf-8")) if self.path.exists() else {}
        except (OSError, ValueError) as e:
            raise UserError(f"{self.path} is damaged ({e}); remove it (and cancel the folder's Slurm jobs).") from None
        if not isinstance(data, dict) or not isinstance(data.get("waves", []), list):
            raise UserError(f"{self.path} is not modern-gpt's Slurm state; remove it (and cancel the folder's jobs).")
        self.token = data.get("token") or secrets.token_hex(4)
        self.waves: list[dict] = data.get("waves", [])
        self.attempts: dict[str, int] = data.get("attempts", {})

    def save(self) -> None:
        write_json(self.path, {"token": self.token, "waves": self.waves, "attempts": self.attempts})

    def tasks(self) -> list[tuple[dict, str, list]]:
        """(wave, task id, its runs' keys) for each task whose job id is known."""
        out = []
        for w in self.waves:
            if w.get("job_id"):
                lone = len(w["packs"]) == 1
                out += [(w, w["job_id"] if lone else f"{w['job_id']}_{i}", p) for i, p in enumerate(w["packs"])]
        return out

    def live(self) -> dict[str, str]:
        """The folder's tasks in the queue (pending, running, completing), task id -> state; a wave whose job id a
        killed driver never wrote learns it here, from its job name."""
        if not self.waves:
            return {}
        names = ",".join(w["name"] for w in self.waves)
        out = slurm("squeue", "-h", "-r", "-o", "%i|%j|%T", f"--name={names}", f"--user={getpass.getuser()}")
        live = {}
        for line in out.splitlines():
            tid, name, state = (line.split("|") + ["", ""])[:3]
            live[tid] = state
            for w in self.waves:
                if w["name"] == name and not w.get("job_id"):
                    w["job_id"] = tid.split("_")[0]
        for w in self.waves:  # never in the queue: its tasks, if sbatch took them, are over (done/ has their runs)
            if w.get("job_id") is None:
                w["job_id"] = ""
        return live


def why_ended(task_id: str) -> str:
    """How Slurm says a task ended: JobState, the signal or exit code, the reason (scontrol; sacct with accounting)."""
    fields = {}
    with_scontrol = subprocess.run(["scontrol", "show", "job", "-o", task_id], capture_output=True, text=True)
    if with_scontrol.returncode == 0:
        fields = dict(t.split("=", 1) for t in with_scontrol.stdout.split() if "=" in t)
    else:
        acct = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-j", task_id, "-o", "State,ExitCode,Reason"], capture_output=True, text=True
        )
        line = acct.stdout.strip().splitlines()[:1] if acct.returncode == 0 else []
        if line:
            fields = dict(zip(("JobState", "ExitCode", "Reason"), (line[0].split("|") + ["", ""])[:3], strict=True))
    state = fields.get("JobState", "").split()[0] if fields.get("JobState") else ""
    if not state:
        return f"the Slurm task running it ({task_id}) left the queue, and Slurm no longer says how it ended"
    code, _, sig = fields.get("ExitCode", "0:0").partition(":")
    detail = ""
    if sig.isdigit() and int(sig):
        name = next((s.name for s in signal.Signals if s.value == int(sig)), "")
        detail = f" (signal {sig}{', ' + name if name else ''})"
    elif code.isdigit() and int(code):
        detail = f" (exit code {code})"
    reason = fields.get("Reason", "")
    detail += f", reason {reason}" if reason and reason not in ("None", "(null)") else ""
    return f"the Slurm task running it ({task_id}) ended {state}{detail}"


def live_tasks(folder: Path) -> dict[str, str]:
    """The folder's Slurm tasks still queued or running (none where Slurm cannot be asked)."""
    if not (folder / "slurm" / "state.json").exists() or shutil.which("squeue") is None:
        return {}
    return Book(folder).live()


# ---------------------------------------------------------------------------
# The executor
# ---------------------------------------------------------------------------
class Slurm(Cluster):
    """Job arrays through submitit, from a login node that shares the results folder with the compute nodes."""

    NAME = "Slurm"

    @staticmethod
    def resume_options(meta: dict, folder: Path, options: AblationOptions) -> AblationOptions:
        """A resume of a Slurm folder trains on Slurm with its recorded settings (the flags given win), unless
        another executor is named; that is refused while the folder's tasks are still queued or running."""
        chosen = options.choice("executor")
        if chosen not in (None, "slurm"):
            live = live_tasks(Path(folder))
            if live:
                ids = " ".join(sorted({t.split("_")[0] for t in live}))
                raise UserError(
                    f"{folder} has {len(live)} Slurm tasks still queued or running (job {ids}); resume it on Slurm "
                    f"(leave out --executor {chosen}), or cancel them first with scancel {ids}."
                )
            return options
        recorded = (meta.get("executor") or {}).get("settings") or {}
        kept = {k: v for k, v in recorded.items() if k in RECORDED and k not in options.given}
        if isinstance(kept.get("sbatch"), list):
            kept["sbatch"] = tuple(kept["sbatch"])
        return replace(options, executor="slurm", **kept)

    def __init__(self, options: AblationOptions, threads: int, device: str):
        self.submitit = import_submitit()
        check_commands()
        self.options, self.threads, self.device = options, threads, device
        self.cpus = int(options.cpus_per_run or threads)
        self.gpus = int(options.gpus_per_run or 0)
        self.per_task = options.runs_per_task or 1
        self.partition = find_partition(options.partition)
        if self.gpus and self.partition.gpus < self.gpus:
            raise UserError(
                f"--gpus-per-run {self.gpus} asks for GPUs, and Slurm partition {self.partition.name} has "
                f"{self.partition.gpus or 'none'} (no node of it lists a gpu gres); choose a partition with GPUs with "
                "--partition, or leave out --gpus-per-run to train on CPUs."
            )
        if self.cpus > self.partition.node_cpus:
            raise UserError(
                f"--cpus-per-run {self.cpus} is more than a node of Slurm partition {self.partition.name} has "
                f"({self.partition.node_cpus}); lower --cpus-per-run."
            )
        self.version = slurm("sbatch", "--version").strip()
        self.folder: Path | None = None
        self.minutes = self.run_s = None
        self.book: Book | None = None
        self.submitted = 0

    def bind(self, ablation) -> None:
        """The ablation's folder, and its task time limit checked against the estimate (before any folder)."""
        self.folder = Path(ablation.results.path).absolute()
        self.run_s = run_seconds(ablation, self.device, self.threads)
        self.minutes = self._time_limit(self.per_task * self.run_s + START_S)
        check_visible(self.folder, self.partition)

    def _time_limit(self, task_s: float) -> int:
        o, p, runs = self.options, self.partition, self.per_task
        estimate = (
            f"a task's estimated {_duration(task_s)} ({runs} run{'s' * (runs > 1)} of about {_duration(self.run_s)}, "
            f"and about {START_S:.0f} s to start)"
        )
        fewer = ", or fewer --runs-per-task" if runs > 1 else ""
        if p.max_minutes is not None and p.max_minutes * 60 < task_s:
            raise UserError(
                f"Slurm partition {p.name} allows a task {p.max_minutes} min, less than {estimate}; choose another "
                f"--partition{fewer}."
            )
        if o.time_limit is None:
            default = max(10, math.ceil(3 * task_s / 60))
            return default if p.max_minutes is None else min(default, p.max_minutes)
        given = slurm_minutes(o.time_limit)
        if given * 60 < task_s:
            raise UserError(
                f"--time-limit {o.time_limit} is shorter than {estimate}; give a longer --time-limit{fewer}."
            )
        if p.max_minutes is not None and given > p.max_minutes:
            raise UserError(
                f"--time-limit {o.time_limit} is more than Slurm partition {p.name} allows ({p.max_minutes} min); give "
                "a shorter one, or choose another --partition."
            )
        return given

    # -- what the ablation reads -------------------------------------------------
    def at_once(self, pending: int) -> int:
        tasks = math.ceil(pending / self.per_task)
        room = self.partition.cpus // max(1, self.cpus)
        if self.gpus:
            room = min(room, self.partition.gpus // self.gpus)
        return max(1, min(tasks, room, self.options.array_parallelism or tasks))

    def settings(self) -> dict:
        """The options a resume reads back (resume_options): each one set, none of the defaults left unset."""
        values = {k: getattr(self.options, k) for k in RECORDED if getattr(self.options, k) is not None}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}

    def info(self) -> dict:
        return {
            "name": "slurm",
            "slurm_version": self.version,
            "submitit_version": getattr(self.submitit, "__version__", None),
            "partition": self.partition.name,
            "time_limit_min": self.minutes,
            "cpus_per_run": self.cpus,
            "gpus_per_run": self.gpus,
            "runs_per_task": self.per_task,
            "array_parallelism": self.options.array_parallelism,
            "sbatch": list(self.options.sbatch or ()),
            "max_retries": self.options.max_retries,
            "settings": self.settings(),
        }

    def device_name(self) -> str:
        what = "GPUs" if self.gpus else "CPUs"
        return f"the Slurm partition {self.partition.name}'s {what}"

    def close(self) -> None:
        pass

    # -- running -------------------------------------------------------------------
    def run(self, jobs, corpus, on_step, on_record) -> None:
        if self.book is None:
            self.book = Book(self.folder)
        pending = {(j.row, j.seed): j for j in jobs}
        corpus_file = self._corpus_file(corpus)
        try:
            self._until_done(pending, corpus, corpus_file, on_record)
        except Detached:
            raise
        except BaseException:  # Ctrl-C, SIGTERM, a run's error: nothing more trains
            self._cancel()
            raise

    def _until_done(self, pending: dict, corpus, corpus_file: Path, on_record) -> None:
        gone: dict[str, float] = {}  # task id -> when it was first seen out of the queue
        started = time.monotonic()
        while True:
            self._collect(pending, on_record)
            if not pending:
                return
            live = self.book.live()
            self._settle(live, gone, pending, corpus, on_record)
            covered = {tuple(k) for w, tid, keys in self.book.tasks() if tid in live or tid in gone for k in keys}
            fresh = [job for key, job in pending.items() if key not in covered]
            if fresh:
                self._submit(fresh, corpus_file)
                continue
            if self.options.detach and pending:
                self._collect(pending, on_record)
                raise Detached(self._detached_text(len(pending)))
            time.sleep(min(10.0, 1.0 + (time.monotonic() - started) / 60))

    def _detached_text(self, runs: int) -> str:
        ids = sorted({w["job_id"] for w in self.book.waves if w.get("job_id")}, key=int)
        jobs = f"job {ids[-1]}" if len(ids) == 1 else f"jobs {', '.join(ids)}"
        return f"{runs} runs are queued or training in Slurm {jobs} (partition {self.partition.name})"

    def _collect(self, pending: dict, on_record) -> None:
        """Each pending run whose task wrote its record: into the folder by on_record, then its done/ file goes."""
        done = self.folder / "slurm" / "done"
        names = set(os.listdir(done)) if done.is_dir() else set()
        for key in sorted(pending, key=lambda k: (k[1], k[0])):
            f = _done_file(self.folder, *key)
            if f.name not in names:
                continue
            try:
                record = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # half visible on a shared filesystem: the next look reads it
            on_record(record)
            del pending[key]
            f.unlink(missing_ok=True)

    def _settle(self, live: dict, gone: dict, pending: dict, corpus, on_record) -> None:
        """Tasks out of the queue for GRACE_S: a run's raised error is raised; each of their runs without a record
        counts an attempt, and is recorded as failed once it has had max_retries + 1."""
        now, changed = time.monotonic(), False
        for wave, tid, keys in self.book.tasks():
            if tid in wave.setdefault("settled", []) or tid in live:
                gone.pop(tid, None)
                continue
            if now - gone.setdefault(tid, now) < GRACE_S:
                continue
            self._collect(pending, on_record)
            self._raise_if_raised(tid)
            missing = [tuple(k) for k in keys if tuple(k) in pending]
            why = why_ended(tid) + self._task_error(tid) if missing else ""
            for key in missing:
                n = self.book.attempts[_key(*key)] = self.book.attempts.get(_key(*key), 0) + 1
                if n > self.options.max_retries:
                    on_record(pending.pop(key).failure_record(corpus, f"{why}, {n} time{'s' * (n > 1)}"))
            wave["settled"].append(tid)
            gone.pop(tid, None)
            changed = True
        if changed:
            self.book.save()

    def _result(self, tid: str):
        path = self.submitit.core.utils.JobPaths(self.folder / "slurm" / "tasks", job_id=tid, task_id=0).result_pickle
        try:
            return self.submitit.core.utils.pickle_load(path) if path.exists() else None
        except Exception:
            return None

    def _raise_if_raised(self, tid: str) -> None:
        result = self._result(tid)
        if result and result[0] == "success" and result[1]:
            _, row, seed, error, text = result[1][0]
            from .local import RemoteTraceback

            raise error from RemoteTraceback(f"row {row} seed {seed}, in Slurm task {tid}:\n{text}")  # for --debug

    def _task_error(self, tid: str) -> str:
        """The last line of the traceback submitit recorded when the task's own Python failed."""
        result = self._result(tid)
        if result and result[0] == "error":
            last = [line for line in str(result[1]).strip().splitlines() if line.strip()][-1:]
            return f" ({last[0].strip()})" if last else ""
        return ""

    def _corpus_file(self, corpus) -> Path:
        """The driver's corpus, once per folder and data: the tasks read it, never the data files."""
        path = self.folder / "slurm" / f"corpus-{corpus.key[:16]}.pkl"
        if not path.exists():
            import numpy as np  # plain arrays, not memory maps of this machine's cache

            plain = replace(corpus, train=np.asarray(corpus.train), val=np.asarray(corpus.val))
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp, open(tmp, "wb") as f:
                pickle.dump(plain, f, protocol=pickle.HIGHEST_PROTOCOL)
        return path

    def _submit(self, jobs: list, corpus_file: Path) -> None:
        """One job array: a task per pack of runs_per_task runs, seed-major. Its name goes into state.json before
        sbatch runs, its job id after."""
        packs = [jobs[i : i + self.per_task] for i in range(0, len(jobs), self.per_task)]
        wave = {"name": f"mgpt-{self.book.token}-{len(self.book.waves) + 1}", "job_id": None, "settled": []}
        wave["packs"] = [[[j.row, j.seed] for j in pack] for pack in packs]
        self.book.waves.append(wave)
        self.book.save()
        ex = self.submitit.SlurmExecutor(folder=self.folder / "slurm" / "tasks", max_num_timeout=0)
        ex.update_parameters(**self._parameters(wave["name"]))
        n = len(packs)
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's refusal: it is said below
                submitted = ex.map_array(task, packs, [str(corpus_file)] * n, [str(self.folder)] * n, [self.gpus] * n)
        except Exception as e:  # sbatch refused the array (an --sbatch option, a limit)
            self.book.waves.remove(wave)
            self.book.save()
            lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
            said = next((line for line in lines if "error" in line.lower()), lines[0]).removeprefix("sbatch: error: ")
            raise UserError(
                f"sbatch refused the array of {n} task{'s' * (n > 1)}: {said.rstrip('.')}; check --sbatch and --partition."
            ) from None
        wave["job_id"] = submitted[0].job_id.split("_")[0]
        self.book.save()
        self.submitted += len(jobs)

    def _parameters(self, name: str) -> dict:
        extra = {"no_requeue": True}  # each restart is a resubmission that --max-retries counts
        for entry in self.options.sbatch or ():
            k, _, v = entry.partition("=")
            extra[k.strip().lstrip("-")] = v if v else True
        params = {
            "job_name": name,
            "partition": self.partition.name,
            "time": self.minutes,
            "nodes": 1,
            "ntasks_per_node": 1,
            "cpus_per_task": self.cpus,
            "additional_parameters": extra,
        }
        if self.gpus:
            params["gpus_per_node"] = self.gpus
        if self.options.array_parallelism:
            params["array_parallelism"] = self.options.array_parallelism
        return params

    def _cancel(self) -> None:
        """Cancel the folder's tasks still in the queue; they are settled, so that no attempt is counted."""
        if self.book is None:
            return
        ids = sorted({w["job_id"] for w in self.book.waves if w.get("job_id")})
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=60)
        for wave, tid, _ in self.book.tasks():
            if tid not in wave.setdefault("settled", []):
                wave["settled"].append(tid)
        self.book.save()


NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def check_visible(folder: Path, partition: Partition) -> None:
    """A folder the compute nodes cannot see, where that can be told: under a node-local path (/tmp, /dev/shm)
    while the partition has a node other than this machine. A shared filesystem is not checked (see the docs)."""
    real = os.path.realpath(folder)
    if not any(real == p or real.startswith(p + "/") for p in NODE_LOCAL):
        return
    try:
        nodes = set(slurm("scontrol", "show", "hostnames", partition.nodes).split())
    except UserError:
        return
    here = {socket.gethostname(), socket.getfqdn(), "localhost"}
    others = sorted(nodes - here)
    if others:
        raise UserError(
            f"the results folder {folder} is on this machine's own {real.split('/')[1]}, which the compute nodes of "
            f"partition {partition.name} ({', '.join(others[:3])}) cannot see; give --out a folder on the filesystem "
            "they share (your home or project folder)."
        )
