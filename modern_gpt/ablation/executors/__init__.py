"""Executors: where the runs of an ablation train. One interface (Executor), three executors:

    Local       this machine (--executor local), each round of runs in one of two ways:
      InProcess   one run after another in this process (--jobs 1, or a single run to do)
      LocalPool   N processes (--jobs N, or auto: one single-thread run per core)
    Ray         one Ray task per run on a Ray cluster (--executor ray), local or remote
    Slurm       one Slurm job array per round of runs (--executor slurm), each task one run or a few

executor.run(jobs, corpus, on_step, on_record) trains every job and returns when each has a record (or, for an
executor that can let its runs go on without the driver, raises Detached once they are handed over: --detach).
A job comes from running.py: job(corpus, on_step) -> its record, job.failure_record(corpus, error) -> the record
of a run that could not finish, job.row and job.seed name it. on_step(row, seed, step, loss) follows the
runs in progress (a few updates a second per run at most); on_record(record) receives each finished run in
this process, the driver, which alone writes the results folder. Data flows one way: the driver's corpus
goes to the workers once (no worker reads the data files), records come back.

A worker that dies (killed from outside, by the kernel's out-of-memory killer, a lost node) has its run
started again, up to max_retries times; a run that still cannot finish is recorded as failed with the
reason, and the ablation goes on. An exception raised by a run itself (a bug, a UserError) ends the
ablation, as it would in-process. Ctrl-C and SIGTERM (a KeyboardInterrupt in the driver) stop every
executor at once: the runs in progress are abandoned, every finished run has been handed over already.

This module imports neither torch nor Ray at import time: a Ray worker unpickling a task imports it cheaply,
and Ray is needed only when it is asked for.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Protocol

from ...core.errors import UserError

if TYPE_CHECKING:
    from ...core.config import AblationOptions

PROGRESS_INTERVAL = 0.25  # seconds between two step updates of one run: enough for a display, cheap to send


class Executor(Protocol):
    """What an ablation holds from start or resume to its end (running.Ablation.executor), made as
    cls(options, threads, device). The class also says, before one is made, the device its runs train on
    (device_of: --device as the executor reads it), the torch threads per run when --threads is not set
    (threads), whether their memory is checked on this machine (local_memory), and what starts before the
    driver imports torch (prestart). core.config.EXECUTORS registers each by name."""

    local_memory: bool

    @staticmethod
    def device_of(name: str, options: AblationOptions) -> str: ...

    @staticmethod
    def threads(options: AblationOptions, device: str) -> int: ...

    @staticmethod
    def prestart(options: AblationOptions, runs: int) -> None: ...

    def run(self, jobs, corpus, on_step, on_record) -> None:
        """Train every job; see the module's docstring."""

    def at_once(self, pending: int) -> int:
        """How many of `pending` runs train at once (for the time estimate)."""

    def info(self) -> dict:
        """What meta.json's executor records."""

    def device_name(self) -> str | None:
        """What meta.json's device_name says, when it is not this machine's device."""

    def close(self) -> None:
        """Let go of what it holds (a Ray cluster); it runs no more jobs."""

    # Two hooks an executor may have (Slurm has both; local and Ray have neither):
    #   bind(ablation)                              called once the ablation is made (before its folder is, for a
    #                                               new one): its plan, corpus and folder; may refuse it (UserError)
    #   resume_options(meta, folder, options)       static: the options a resume of a folder it started runs with


class Cluster:
    """What Ray and Slurm share: runs that reserve their CPUs and GPUs on nodes of a cluster. Their device is cuda
    when each run reserves GPUs (--gpus-per-run), else cpu; their threads the CPUs each run reserves
    (--cpus-per-run, one by default); their memory is checked on their own node (train_run), not this machine;
    nothing starts before the driver imports torch."""

    local_memory = False
    NAME = ""  # as a sentence names the cluster: "Ray", "Slurm"
    CUDA_HINT = "--gpus-per-run 1"  # what --device cuda needs here

    @classmethod
    def device_of(cls, name: str, options: AblationOptions) -> str:
        gpus = bool(options.gpus_per_run)
        if name == "mps" or (name == "cuda" and not gpus) or (name == "cpu" and gpus):
            want = cls.CUDA_HINT if name == "cuda" else "--device auto"
            given = options.gpus_per_run or 0
            raise UserError(f"--device {name} does not go with --gpus-per-run {given:g} on {cls.NAME}; use {want}.")
        return "cuda" if gpus else "cpu"

    @staticmethod
    def threads(options: AblationOptions, device: str) -> int:
        return max(1, int(options.cpus_per_run or 1))

    @staticmethod
    def prestart(options: AblationOptions, runs: int) -> None:
        """Nothing: the runs start on the cluster."""


class Detached(Exception):  # not an error: the runs go on without this process
    """The runs are handed over and go on without this process (--detach); a resume of the folder collects them."""

    def __init__(self, message: str):
        super().__init__(message)


def executor_class(options: AblationOptions) -> type:
    """The class of the executor these options name, from the registry (core.config.EXECUTORS)."""
    from ...core.config import EXECUTORS

    return EXECUTORS[options.executor].load()


def resume_options(meta: dict, folder, options: AblationOptions) -> AblationOptions:
    """The options a resume of this folder runs with: those given, unless the executor that the folder records
    has its own say (resume_options: Slurm's tasks may still be training the folder's runs)."""
    from ...core.config import EXECUTORS

    recorded = meta.get("executor") if isinstance(meta.get("executor"), dict) else {}
    kind = EXECUTORS.get(recorded.get("name")) if isinstance(recorded.get("name"), str) else None
    hook = getattr(kind.load(), "resume_options", None) if kind is not None else None
    return options if hook is None else hook(meta, folder, options)


def prestart(options: AblationOptions, runs: int) -> None:
    """What the chosen executor starts before the driver imports torch (the local pool's fork server)."""
    executor_class(options).prestart(options, runs)


def _throttled(send):
    """on_step for a worker: at most one update per run per PROGRESS_INTERVAL, sent with send(row, seed, step,
    loss); a run's first step is always sent."""
    last: dict = {}

    def on_step(row: int, seed: int, step: int, loss: float) -> None:
        now = time.monotonic()
        if now - last.get((row, seed), -math.inf) >= PROGRESS_INTERVAL:
            last[(row, seed)] = now
            send(row, seed, step, loss)

    return on_step
