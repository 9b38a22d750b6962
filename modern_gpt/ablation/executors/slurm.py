"""A Slurm cluster through submitit's public API: a job array per round of runs. Each task trains one run, or
--runs-per-task of them. docs/scaling.md tells the folder (slurm/done/, slurm/state.json), preemption and --detach."""

from __future__ import annotations

import contextlib
import getpass
import io
import json
import math
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ...core.config import SLURM_OPTIONS, ExecutionOptions, slurm_minutes
from ...core.errors import UserError, first_line
from ...core.files import atomic_path, write_json
from . import Cluster, Detached, RemoteTraceback, cuda_seen, need, portable, spent

COMMANDS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
START_S = 30.0  # a task's seconds before its first run: Python, torch, the corpus (an allowance)
GRACE_S = 3.0  # a task gone from the queue is settled this long after: a shared filesystem shows files late
RECORDED = ("cpus_per_run", "gpus_per_run", "max_retries", *(o for o in SLURM_OPTIONS if o != "detach"))
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def slurm(*args: str) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"{args[0]} did not answer ({e}); check that the Slurm controller runs.") from None
    if out.returncode != 0:
        said = first_line(out.stderr, f"exit code {out.returncode}")
        raise UserError(f"{' '.join(args[:2])} failed: {said}; check that Slurm answers on this machine.")
    return out.stdout


@dataclass
class Partition:
    name: str
    default: bool = False
    max_minutes: int | None = None  # None: no limit
    cpus: int = 0  # every node's
    gpus: int = 0
    nodes: str = ""  # Slurm's node list, compressed (node[01-04])
    node_cpus: int = 0  # the most CPUs of one node: a task cannot have more


def find_partition(name: str | None) -> Partition:
    known: dict[str, Partition] = {}
    for line in slurm("sinfo", "-h", "-o", "%P|%G|%D|%c|%l|%N").splitlines():  # a line per group of like nodes
        part, gres, nodes, cpus, limit, nodelist = (line.split("|") + [""] * 6)[:6]
        p = known.setdefault(part.rstrip("*"), Partition(part.rstrip("*"), part.endswith("*")))
        count, per_node = int(nodes) if nodes.isdigit() else 1, int(re.match(r"\d*", cpus).group() or 0)
        p.cpus += count * per_node
        p.gpus += count * sum(int(n) for n in re.findall(r"gpu(?::[^:,()]+)?:(\d+)", gres))  # gpu:a100:2(S:0-1)
        p.node_cpus = max(p.node_cpus, per_node)
        unlimited = limit.strip().lower() in ("infinite", "unlimited", "n/a", "none", "")
        p.max_minutes = None if unlimited else slurm_minutes(limit)
        p.nodes = ",".join(filter(None, [p.nodes, nodelist]))
    found = known.get(name) if name is not None else next((p for p in known.values() if p.default), None)
    if found is not None:
        return found
    listed = ", ".join(f"{p.name} (its default)" if p.default else p.name for p in known.values()) or "none"
    if name is None:
        raise UserError(f"the Slurm cluster has no default partition; choose one with --partition: {listed}.")
    raise UserError(f"unknown Slurm partition {name!r}; the cluster's partitions are {listed}.")


def _duration(seconds: float) -> str:  # in minutes from 90 s, as Slurm's time limits
    return f"{seconds:.0f} s" if seconds < 90 else f"{math.ceil(seconds / 60)} min"


def run_seconds(ablation, device: str, threads: int) -> float:
    """The slowest row's estimated seconds a run (compiling.run_seconds)."""
    from ...run.compiling import run_seconds as seconds
    from ..planning import variant_config

    s, vocab = ablation.spec.settings, ablation.corpus.tokenizer.vocab_size
    models = (replace(variant_config(s.model, v), vocab_size=vocab) for v in ablation.spec.variants)
    return max(seconds(cfg, s.train, device, threads, len(ablation.corpus.evals)) for cfg in models)


def _done_file(folder: Path, row: int, seed: int) -> Path:
    return folder / "slurm" / "done" / f"row{row:02d}-seed{seed}.json"


def _recorded(folder: Path, job, corpus) -> bool:
    """Its record is in done/, or runs/ has this ablation's."""
    from ..results import ResultsDir

    if _done_file(folder, job.row, job.seed).is_file():
        return True
    with contextlib.suppress(OSError, ValueError, AttributeError):  # AttributeError: a file that is no JSON object
        found = json.loads(ResultsDir(folder).run_file(job.row, job.seed).read_text(encoding="utf-8"))
        return found.get("settings_hash") == job.settings_hash(corpus)
    return False


def task(jobs: list, corpus_file: str, folder: str, gpus: int = 0) -> list:
    """One array task: its runs in turn, each record to done/. If one raised: [("raised", row, seed, error, traceback)].
    Submitit's USR2 before the time limit is ignored: Slurm ends the task, as TIMEOUT."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    corpus = pickle.loads(Path(corpus_file).read_bytes())
    for job in jobs:
        name = f"modern-gpt: row {job.row} seed {job.seed} on {socket.gethostname()}"
        if _recorded(Path(folder), job, corpus):
            print(f"{name}: already recorded, skipped", flush=True)
            continue
        print(f"{name}: training", flush=True)
        try:
            cuda_seen("a task on the Slurm node", gpus)
            record = job(corpus, None)
        except BaseException as e:  # a run's own error: the driver raises it, as in-process
            return [("raised", job.row, job.seed, *portable(e))]
        write_json(_done_file(Path(folder), job.row, job.seed), record)  # done/ is the driver's
        print(f"{name}: trained in {record['secs']:.2f} s", flush=True)
    return []


class Book:
    """state.json: a token naming the folder's jobs (mgpt-TOKEN-N), and each run's attempts. Each array has its
    name, job id, each task's runs, and the tasks settled."""

    def __init__(self, folder: Path):
        self.path = folder / "slurm" / "state.json"
        try:  # a hand edit: one sentence, not a traceback
            data = dict(json.loads(self.path.read_text(encoding="utf-8")) if self.path.exists() else {})
        except (OSError, ValueError, TypeError):
            raise UserError(f"{self.path} is damaged; remove it (and cancel the folder's Slurm jobs).") from None
        self.token = data.get("token") or os.urandom(4).hex()
        self.waves, self.attempts = data.get("waves", []), data.get("attempts", {})  # attempts: "row,seed" -> n

    def save(self) -> None:
        write_json(self.path, {"token": self.token, "waves": self.waves, "attempts": self.attempts})

    def tasks(self) -> list[tuple[dict, str, list]]:
        """(wave, task id, its runs) of each task submitted. A lone task's id has no array index."""
        return [
            (w, w["job_id"] if len(w["packs"]) == 1 else f"{w['job_id']}_{i}", p)
            for w in self.waves if w.get("job_id") for i, p in enumerate(w["packs"])
        ]  # fmt: skip

    def live(self) -> dict[str, str]:
        """The folder's tasks in the queue, id -> state. A wave whose id a killed driver never wrote learns it here."""
        if not self.waves:
            return {}
        names = ",".join(w["name"] for w in self.waves)
        out = slurm("squeue", "-h", "-r", "-o", "%i|%j|%T", f"--name={names}", f"--user={getpass.getuser()}")
        live = {}
        for tid, name, state in ((line.split("|") + ["", ""])[:3] for line in out.splitlines()):
            live[tid] = state
            for w in (w for w in self.waves if w["name"] == name and not w.get("job_id")):
                w["job_id"] = tid.split("_")[0]
        for w in (w for w in self.waves if w.get("job_id") is None):  # never queued: over, done/ has its runs
            w["job_id"] = ""
        return live


def why_ended(task_id: str) -> str:
    """JobState, the signal or exit code, and the reason. From scontrol, or sacct where there is accounting."""
    said = subprocess.run(["scontrol", "show", "job", "-o", task_id], capture_output=True, text=True)
    if said.returncode == 0:
        fields = dict(t.split("=", 1) for t in said.stdout.split() if "=" in t)
    else:
        acct = ["sacct", "-n", "-P", "-X", "-j", task_id, "-o", "State,ExitCode,Reason"]
        line = (subprocess.run(acct, capture_output=True, text=True).stdout.strip().splitlines() or [""])[0]
        fields = dict(zip(("JobState", "ExitCode", "Reason"), (line.split("|") + ["", ""])[:3], strict=True))
    state = next(iter(fields.get("JobState", "").split()), "")
    if not state:
        return f"the Slurm task running it ({task_id}) left the queue, and Slurm no longer says how it ended"
    code, _, sig = (fields.get("ExitCode") or "0:0").partition(":")
    detail = ""
    if sig.isdigit() and int(sig):
        name = next((s.name for s in signal.Signals if s.value == int(sig)), "")
        detail = f" (signal {sig}{', ' + name if name else ''})"
    elif code.isdigit() and int(code):
        detail = f" (exit code {code})"
    reason = "" if fields.get("Reason") in (None, "", "None", "(null)") else f", reason {fields['Reason']}"
    return f"the Slurm task running it ({task_id}) ended {state}{detail}{reason}"


class Slurm(Cluster):
    """Job arrays, from a login node that shares the results folder with the compute nodes."""

    NAME = "Slurm"

    @staticmethod
    def resume_options(meta: dict, folder: Path, options: ExecutionOptions) -> ExecutionOptions:
        """On Slurm with the recorded settings; flags given win. Another executor only once no task is queued."""
        chosen = options.choice("executor")
        if chosen not in (None, "slurm"):
            live = Book(Path(folder)).live() if shutil.which("squeue") else {}  # a folder copied off the cluster
            if live:
                ids = " ".join(sorted({t.split("_")[0] for t in live}))
                raise UserError(
                    f"{folder} has {len(live)} Slurm tasks still queued or running (job {ids}); resume it on Slurm "
                    f"(leave out --executor {chosen}), or cancel them first with scancel {ids}."
                )
            return options
        recorded = (meta.get("executor") or {}).get("settings") or {}
        kept = {k: v for k, v in recorded.items() if k in RECORDED and k not in options.given}
        return replace(options, executor="slurm", **kept)  # its check makes --sbatch a tuple

    def __init__(self, options: ExecutionOptions, threads: int, device: str):
        super().__init__(options, threads, device)
        self.submitit = need("submitit", "submitit", "slurm")
        if missing := [c for c in COMMANDS if shutil.which(c) is None]:
            raise UserError(
                f"--executor slurm needs Slurm's {' and '.join(missing[:2])}{' and more' if missing[2:] else ''}, "
                "which is not on PATH; run modern-gpt on a login node of the cluster, or add Slurm's bin folder to PATH."
            )
        self.cpus, self.gpus, self.per_task = int(self.cpus), int(self.gpus), options.runs_per_task or 1
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
        self.folder = self.minutes = self.run_s = self.book = None

    def bind(self, ablation) -> None:
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
        fewer, most = ", or fewer --runs-per-task" if runs > 1 else "", p.max_minutes or math.inf
        if most * 60 < task_s:
            raise UserError(
                f"Slurm partition {p.name} allows a task {p.max_minutes} min, less than {estimate}; choose another "
                f"--partition{fewer}."
            )
        if o.time_limit is None:
            return min(max(10, math.ceil(3 * task_s / 60)), most)  # three times the estimate
        given = slurm_minutes(o.time_limit)
        if given * 60 < task_s:
            raise UserError(
                f"--time-limit {o.time_limit} is shorter than {estimate}; give a longer --time-limit{fewer}."
            )
        if given > most:
            raise UserError(
                f"--time-limit {o.time_limit} is more than Slurm partition {p.name} allows ({p.max_minutes} min); give "
                "a shorter one, or choose another --partition."
            )
        return given

    def at_once(self, pending: int) -> int:
        p, tasks = self.partition, math.ceil(pending / self.per_task)
        room = min(p.cpus // self.cpus, p.gpus // self.gpus if self.gpus else tasks)
        return max(1, min(tasks, room, self.options.array_parallelism or tasks))

    def info(self) -> dict:
        o = self.options
        settings = {k: list(v) if isinstance(v, tuple) else v for k in RECORDED if (v := getattr(o, k)) is not None}
        return dict(name="slurm", slurm_version=self.version, submitit_version=self.submitit.__version__,
                    partition=self.partition.name, time_limit_min=self.minutes, cpus_per_run=self.cpus,
                    gpus_per_run=self.gpus, runs_per_task=self.per_task, array_parallelism=o.array_parallelism,
                    sbatch=list(o.sbatch or ()), max_retries=o.max_retries, settings=settings)  # fmt: skip

    def device_name(self) -> str:
        return f"the Slurm partition {self.partition.name}'s {'GPUs' if self.gpus else 'CPUs'}"

    def run(self, jobs, corpus, on_step, on_record) -> None:
        self.book = self.book or Book(self.folder)
        pending, gone, started = {(j.row, j.seed): j for j in jobs}, {}, time.monotonic()  # gone: tid -> first seen so
        corpus_file = self.folder / "slurm" / f"corpus-{corpus.key[:16]}-tokens.pkl"  # -tokens: the sets' too
        (self.folder / "slurm" / "done").mkdir(parents=True, exist_ok=True)
        if not corpus_file.exists():
            with atomic_path(corpus_file) as tmp, open(tmp, "wb") as f:
                pickle.dump(corpus.in_memory(), f, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            while self._collect(pending, on_record):
                live = self.book.live()
                self._settle(live, gone, pending, corpus, on_record)
                covered = {tuple(k) for w, tid, keys in self.book.tasks() if tid in live or tid in gone for k in keys}
                fresh = [job for key, job in pending.items() if key not in covered]
                if fresh:
                    self._submit(fresh, corpus_file)
                elif self.options.detach and self._collect(pending, on_record):
                    ids = sorted({w["job_id"] for w in self.book.waves if w.get("job_id")}, key=int)
                    jobs = f"job {ids[-1]}" if len(ids) == 1 else f"jobs {', '.join(ids)}"
                    raise Detached(
                        f"{len(pending)} runs are queued or training in Slurm {jobs} (partition {self.partition.name})"
                    )
                else:
                    time.sleep(min(10.0, 1.0 + (time.monotonic() - started) / 60))
        except BaseException as e:  # Ctrl-C, SIGTERM, a run's error: nothing more trains, and no task is counted
            if not isinstance(e, Detached):
                ids = sorted({w["job_id"] for w in self.book.waves if w.get("job_id")})
                if ids:
                    subprocess.run(["scancel", *ids], capture_output=True, timeout=60)
                for wave, tid, _ in self.book.tasks():
                    if tid not in wave["settled"]:
                        wave["settled"].append(tid)
                self.book.save()
            raise

    def _collect(self, pending: dict, on_record) -> int:
        """Each record a task wrote to done/ goes into the folder, its file removed. Returns the runs still pending."""
        names = set(os.listdir(self.folder / "slurm" / "done"))  # one listing: a shared filesystem shows it fresh
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
        return len(pending)

    def _settle(self, live: dict, gone: dict, pending: dict, corpus, on_record) -> None:
        """Tasks out of the queue for GRACE_S: a run's error is raised. Each run without a record counts an attempt,
        and is recorded as failed after max_retries + 1."""
        now = time.monotonic()
        for wave, tid, keys in self.book.tasks():
            if tid in wave["settled"] or tid in live:
                gone.pop(tid, None)
                continue
            if now - gone.setdefault(tid, now) < GRACE_S:
                continue
            self._collect(pending, on_record)
            try:  # submitit's result file: ("success", what task returned) or ("error", a traceback)
                with open(self.submitit.SlurmJob(self.folder / "slurm" / "tasks", tid).paths.result_pickle, "rb") as f:
                    kind, result = pickle.load(f)
            except Exception:
                kind, result = "", ""
            if kind == "success" and result:  # a run's own error ends the ablation
                _, row, seed, error, text = result[0]
                raise error from RemoteTraceback(f"row {row} seed {seed}, in Slurm task {tid}:\n{text}")  # for --debug
            last = [line.strip() for line in str(result).splitlines() if line.strip()][-1:] if kind == "error" else []
            missing = [tuple(k) for k in keys if tuple(k) in pending]
            why = why_ended(tid) + (f" ({last[0]})" if last else "") if missing else ""
            for key in missing:
                if n := spent(self.book.attempts, pending[key], self.options.max_retries):
                    on_record(pending.pop(key).failure_record(corpus, f"{why}, {n} time{'s' * (n > 1)}"))
            wave["settled"].append(tid)
            gone.pop(tid, None)
            self.book.save()

    def _submit(self, jobs: list, corpus_file: Path) -> None:
        """One job array, a task per pack of runs. Its name goes into state.json before sbatch, its job id after."""
        packs = [jobs[i : i + self.per_task] for i in range(0, len(jobs), self.per_task)]
        wave = {"name": f"mgpt-{self.book.token}-{len(self.book.waves) + 1}", "job_id": None, "settled": []}
        wave["packs"] = [[[j.row, j.seed] for j in pack] for pack in packs]
        self.book.waves.append(wave)
        self.book.save()
        given = (entry.partition("=") for entry in self.options.sbatch or ())  # no_requeue: --max-retries counts each
        extra = {"no_requeue": True, **{k.strip().lstrip("-"): v or True for k, _, v in given}}
        optional = {"gpus_per_node": self.gpus, "array_parallelism": self.options.array_parallelism}
        ex = self.submitit.SlurmExecutor(folder=self.folder / "slurm" / "tasks", max_num_timeout=0)
        ex.update_parameters(job_name=wave["name"], partition=self.partition.name, time=self.minutes, nodes=1,
                             ntasks_per_node=1, cpus_per_task=self.cpus, additional_parameters=extra,
                             **{k: v for k, v in optional.items() if v})  # fmt: skip
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


def check_visible(folder: Path, partition: Partition) -> None:
    """A folder under a node-local path (/tmp, /dev/shm) while the partition has other nodes than this machine."""
    real = os.path.realpath(folder)
    if not any(real == p or real.startswith(p + "/") for p in NODE_LOCAL):
        return
    nodes = set(slurm("scontrol", "show", "hostnames", partition.nodes).split())
    others = sorted(nodes - {socket.gethostname(), socket.getfqdn(), "localhost"})
    if others:
        raise UserError(
            f"the results folder {folder} is on this machine's own {real.split('/')[1]}, which the compute nodes of "
            f"partition {partition.name} ({', '.join(others[:3])}) cannot see; give --out a folder on the filesystem "
            "they share (your home or project folder)."
        )
