"""Executors: where an ablation's runs train, behind one interface (Executor) and one registry (core.config.EXECUTORS).
local trains in this process, or a pool (--jobs); ray, a task per run; slurm, a job array per round. docs/scaling.md
tells their faults. Neither torch nor Ray is imported here, so a Ray worker imports this cheaply."""

from __future__ import annotations

import math
import pickle
import socket
import time
import traceback
from typing import Protocol

from ...core.config import EXECUTORS, ExecutionOptions
from ...core.errors import UserError

PROGRESS_INTERVAL = 0.25  # seconds between two step updates of one run: enough for a display, cheap to send


class Executor(Protocol):
    """Made as cls(options, threads, device) for an ablation's life. Before that, the class gives device_of, threads
    (without --threads), local_memory (is memory checked here?) and prestart (what starts before torch).
    A subclass inherits prestart, device_name and close doing nothing."""

    local_memory: bool

    @staticmethod
    def device_of(name: str, options: ExecutionOptions) -> str: ...
    @staticmethod
    def threads(options: ExecutionOptions, device: str) -> int: ...
    @staticmethod
    def prestart(options: ExecutionOptions, runs: int) -> None: ...

    # Every job (running.Job: job(corpus, on_step) -> its record) trained, each record to on_record in the driver,
    # which alone writes the folder; a dead worker's run tried again up to max_retries times, then recorded as failed;
    # a run's own exception raised. Or raises Detached (--detach).
    def run(self, jobs, corpus, on_step, on_record) -> None: ...
    def at_once(self, pending: int) -> int: ...  # runs at once, of those pending (the time estimate)
    def info(self) -> dict: ...  # meta.json's executor
    def device_name(self) -> str | None: ...  # meta.json's device_name, when not this machine's device
    def close(self) -> None: ...  # let go of what it holds (a Ray cluster)

    # Optional hooks (Slurm's): bind(ablation), once the ablation is made, before a new one's folder (may refuse
    # it); static resume_options(meta, folder, options), the options a resume of its folder runs with.


class Cluster(Executor):
    """What Ray and Slurm share. A run reserves CPUs and GPUs (then cuda) on a node, where its memory is checked."""

    local_memory = False
    NAME = ""  # as a sentence names the cluster: "Ray", "Slurm"
    CUDA_HINT = "--gpus-per-run 1"  # what --device cuda needs here

    def __init__(self, options: ExecutionOptions, threads: int, device: str):
        self.options, self.threads, self.device = options, threads, device
        self.cpus, self.gpus = options.cpus_per_run or threads, options.gpus_per_run or 0

    @classmethod
    def device_of(cls, name: str, options: ExecutionOptions) -> str:
        gpus = bool(options.gpus_per_run)
        if name == "mps" or (name == "cuda" and not gpus) or (name == "cpu" and gpus):
            want, given = cls.CUDA_HINT if name == "cuda" else "--device auto", options.gpus_per_run or 0
            raise UserError(f"--device {name} does not go with --gpus-per-run {given:g} on {cls.NAME}; use {want}.")
        return "cuda" if gpus else "cpu"

    @staticmethod
    def threads(options: ExecutionOptions, device: str) -> int:
        return max(1, int(options.cpus_per_run or 1))


class Detached(Exception):  # not an error: the runs go on without this process (--detach); a resume collects them
    pass


def executor_class(options: ExecutionOptions) -> type:
    return EXECUTORS[options.executor].load()


def resume_options(meta: dict, folder, options: ExecutionOptions) -> ExecutionOptions:
    """The options a resume runs with: those given, unless the recorded executor's resume_options says otherwise."""
    recorded = meta.get("executor") if isinstance(meta.get("executor"), dict) else {}
    kind = EXECUTORS.get(recorded.get("name")) if isinstance(recorded.get("name"), str) else None
    hook = getattr(kind.load(), "resume_options", None) if kind is not None else None
    return options if hook is None else hook(meta, folder, options)


def need(module: str, name: str, executor: str):
    """The module a cluster executor needs, imported; or one sentence saying how to install it."""
    try:
        return __import__(module)
    except ImportError:
        how = f'pip install -e ".[{executor}]"'
        raise UserError(f"--executor {executor} needs {name}, which is not installed; install it with: {how}") from None


def spent(tries: dict, job, max_retries: int) -> int:
    """Counts a try that ended without the run's record (a dead worker). 0 while it may go again, else the tries."""
    key = f"{job.row},{job.seed}"
    n = tries[key] = tries.get(key, 0) + 1
    return n if n > max_retries else 0


def _throttled(send):
    """on_step for a worker: a run's first step, then at most one update per PROGRESS_INTERVAL."""
    last: dict = {}

    def on_step(row: int, seed: int, step: int, loss: float) -> None:
        now = time.monotonic()
        if now - last.get((row, seed), -math.inf) >= PROGRESS_INTERVAL:
            last[(row, seed)] = now
            send(row, seed, step, loss)

    return on_step


class RemoteTraceback(Exception):
    """A worker's traceback, chained to its exception for --debug."""


def portable(e: BaseException) -> tuple[BaseException, str]:
    """A run's exception as the driver raises it, and its traceback. An unpicklable one is a RuntimeError naming it."""
    text = "".join(traceback.format_exception(e))
    try:
        pickle.dumps(e)
    except Exception:
        e = RuntimeError(f"{type(e).__name__}: {e}")
    return e, text


def cuda_seen(where: str, gpus: float) -> None:
    """A cluster run that reserved GPUs refuses a node whose torch sees no CUDA. It would train on the CPU."""
    if not gpus:
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError(
            f"{where} {socket.gethostname()} reserved {gpus:g} GPU, but torch {torch.__version__} there sees no "
            "CUDA GPU; install a CUDA build of torch on the GPU nodes, or leave out --gpus-per-run."
        )
