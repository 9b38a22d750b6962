"""This machine: each round's runs in this process (--jobs 1, or a single run to do), or in a pool of worker
processes (--jobs N, or auto: one single-thread run per core), forks of a fork server. See the package's docstring
for what every executor promises."""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import traceback
from multiprocessing.connection import wait as wait_ready
from typing import TYPE_CHECKING

from ...core.config import AUTO
from . import _throttled

if TYPE_CHECKING:
    from ...core.config import AblationOptions

# --jobs auto on CUDA: runs at once on the GPU. 1 until measured: bench/bench_gpu.py (b) prints the total tokens/s
# of 1, 2, 4 and 8 concurrent shakespeare-size runs on one GPU; set this from that table, not from a guess.
RUNS_PER_GPU = 1


def workers(jobs: int | str, device: str, pending: int) -> int:
    """How many runs go at once on this machine. auto: on a CPU one single-thread run per core (two
    single-thread processes trained 1.7x the tokens/s of one two-thread process on a 2-core machine), on
    CUDA RUNS_PER_GPU, on another GPU one, and never more workers than runs to do; a number of jobs as given (the
    pool starts a worker only for a run to do, so that a spare one costs nothing)."""
    if jobs != AUTO:
        return jobs
    per_machine = {"cpu": os.cpu_count() or 1, "cuda": RUNS_PER_GPU}.get(device, 1)
    return max(1, min(per_machine, pending))


# ---------------------------------------------------------------------------
# In this process
# ---------------------------------------------------------------------------
class Local:
    """This machine: each round's runs in this process when one goes at a time, else in a pool of processes."""

    local_memory = True  # its runs train on this machine: their memory is checked here, before the folder

    def __init__(self, options: AblationOptions, threads: int, device: str):
        self.jobs, self.device, self.max_retries = options.jobs, device, options.max_retries

    @staticmethod
    def device_of(name: str, options: AblationOptions) -> str:
        """The device the runs train on: --device resolved on this machine."""
        from ...run.train import resolve_device

        return resolve_device(name)

    @staticmethod
    def threads(options: AblationOptions, device: str) -> int:
        """Torch threads per run when --threads is not set: one per run with --jobs auto on a CPU (so the
        numbers equal --jobs 1 --threads 1 bitwise), else the cores divided among the runs at once."""
        from ...run.train import default_threads

        if options.jobs == AUTO:
            return 1 if device == "cpu" else default_threads(1)
        return default_threads(options.jobs)

    @staticmethod
    def prestart(options: AblationOptions, runs: int) -> None:
        """Start the fork server now, if a pool of `runs` runs on this machine's CPU would use one, so that its
        imports overlap the driver's (called before the driver imports torch). Idempotent; it ends with this
        process."""
        if workers(options.jobs, "cpu", runs) > 1:
            _ensure_server()

    def at_once(self, pending: int) -> int:
        return workers(self.jobs, self.device, pending)

    def run(self, jobs, corpus, on_step, on_record) -> None:
        n = self.at_once(len(jobs))
        way = InProcess() if n <= 1 else LocalPool(n, self.max_retries)
        way.run(jobs, corpus, on_step, on_record)

    def info(self) -> dict:
        return {"name": "local", "jobs": self.jobs, "max_retries": self.max_retries}

    def device_name(self) -> None:
        return None  # this machine's

    def close(self) -> None:
        pass


class InProcess:
    def run(self, jobs, corpus, on_step, on_record) -> None:
        for job in jobs:
            on_record(job(corpus, on_step))


# ---------------------------------------------------------------------------
# Processes on this machine
# ---------------------------------------------------------------------------
class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, chained to it for --debug."""

    def __str__(self) -> str:
        return self.args[0]


def _worker_main(conn, corpus, environ: dict) -> None:
    """A pool process: runs the jobs it is sent, one at a time, on the driver's corpus, until it is sent None.
    environ: the driver's environment when the pool started (a fork of the fork server has the server's own,
    from before the driver set, say, TORCHINDUCTOR_CACHE_DIR)."""
    # Ctrl-C reaches every process of the terminal; the driver alone decides, and ends the workers. The
    # signals were blocked while this process started (see _start_process), so none arrived before this.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGHUP})
    os.environ.clear()
    os.environ.update(environ)
    with contextlib.suppress(_DriverGone):
        _serve(conn, corpus)


class _DriverGone(BaseException):
    """The driver's end of a worker's pipe is closed: it has ended, or given this worker up (taken for dead when
    the fork server died). The worker ends quietly; a BaseException, so that no run records it as its error."""


def _serve(conn, corpus) -> None:
    def send(message) -> None:
        try:
            conn.send(message)
        except OSError:
            raise _DriverGone from None

    on_step = _throttled(lambda *step: send(("step", *step)))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            return
        if job is None:
            return
        try:
            record = job(corpus, on_step)
        except _DriverGone:
            raise
        except BaseException as e:
            text = "".join(traceback.format_exception(e))
            try:
                pickle.dumps(e)
            except Exception:
                e = RuntimeError(f"{type(e).__name__}: {e}")
            send(("error", e, text))
            return
        send(("done", record))


class _Worker:
    def __init__(self, process, conn):
        self.process, self.conn, self.job = process, conn, None


def _give(w: _Worker, job) -> None:
    """Send a worker its next job (None: stop). A worker that has just died cannot take it: its sentinel says so
    next, and the job, already noted as its own, goes back to the queue."""
    w.job = job
    with contextlib.suppress(OSError):
        w.conn.send(job)


def _how_it_died(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


# Workers are forks of a fork server (multiprocessing's "forkserver"), which imported torch and the training code
# once; where the platform has none (Windows), they are spawned, each importing its own. The server is a fresh
# process that runs no torch operation, so it has none of torch's threads and forking it is safe, where forking
# the driver, once torch has started its threads, can deadlock. prestart() starts it before the driver imports
# torch, so that the two imports overlap: on this project's 2-core machine a spawned worker took 1-2 s to import
# torch, and three processes importing it at once (the driver and two workers) held up the first runs of
# `make smoke` by about a second.
SERVER_PRELOAD = ["modern_gpt.ablation.running"]  # what a job needs to unpickle and run: torch, the model, training


# True once the fork server could not start in this process (say, AF_UNIX path too long: it listens on a Unix
# socket in TMPDIR, and a cluster's per-job TMPDIR can be longer than such a path may be): this process's workers
# are then spawned, as where there is no fork server.
_serverless = False


def _has_fork_server() -> bool:
    return "forkserver" in mp.get_all_start_methods()


def _context():
    return mp.get_context("forkserver" if _has_fork_server() and not _serverless else "spawn")


def _ensure_server() -> None:
    global _serverless
    ctx = _context()
    if ctx.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver, resource_tracker

    ctx.set_forkserver_preload(SERVER_PRELOAD)
    resource_tracker.ensure_running()  # first: starting its process unblocks SIGINT in this thread
    try:
        with _terminal_signals_blocked():  # the server ignores Ctrl-C only once its imports are done
            forkserver.ensure_running()
    except OSError:  # no socket for it: spawned workers from now on
        _serverless = True


def stop_server() -> None:
    """Stop the fork server at once, if this process started one (a later pool starts another): at the end of a
    command, where its own teardown (the interpreter's, with torch loaded: about 0.6 s) would only keep this
    process's stdout and stderr open, and anyone reading them waiting."""
    if not _has_fork_server():
        return
    from multiprocessing import forkserver

    server = forkserver._forkserver  # CPython's, private: where it changes, the server stops as it would anyway
    pid = getattr(server, "_forkserver_pid", None)
    if pid and hasattr(server, "_stop"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # a killed parent leaves its children, the workers, running
        with contextlib.suppress(OSError):  # its socket file may be gone with this process's temporary folder
            server._stop()  # reaped, and forgotten


@contextlib.contextmanager
def _terminal_signals_blocked():
    """SIGINT and SIGHUP blocked in this thread, and so in a process started meanwhile. A worker ignores the
    terminal's signals once it runs _worker_main; until then a Ctrl-C would print a traceback from it."""
    terminal = {getattr(signal, n) for n in ("SIGINT", "SIGHUP") if hasattr(signal, n)}
    masked = hasattr(signal, "pthread_sigmask")
    before = signal.pthread_sigmask(signal.SIG_BLOCK, terminal) if masked else None
    try:
        yield
    finally:
        if masked:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _start_process(corpus) -> _Worker:
    """A worker process, sent the corpus and this process's environment, with the terminal's signals blocked.
    A fork server found dead (killed from outside, by the out-of-memory killer) is started again, once."""
    for attempt in (1, 2):
        _ensure_server()
        ctx = _context()  # spawn, once the fork server cannot start
        ours, theirs = ctx.Pipe()
        process = ctx.Process(target=_worker_main, args=(theirs, corpus, dict(os.environ)), daemon=True)
        try:
            with _terminal_signals_blocked():
                process.start()
            break
        except (OSError, EOFError):  # no server answered on its socket, or it died answering
            ours.close()
            theirs.close()
            if attempt == 2 or ctx.get_start_method() != "forkserver":
                raise
            stop_server()
    theirs.close()
    return _Worker(process, ours)


class LocalPool:
    """N worker processes on this machine (forks of the fork server, see above), each started with the driver's
    corpus. A worker is started only for a run to do, and a dead one is replaced while runs remain."""

    def __init__(self, workers: int, max_retries: int = 2):
        self.workers, self.max_retries = workers, max_retries
        self.started = 0  # worker processes started so far

    def _start(self, corpus) -> _Worker:
        self.started += 1
        return _start_process(corpus)

    def run(self, jobs, corpus, on_step, on_record) -> None:
        todo = collections.deque(jobs)
        deaths: collections.Counter = collections.Counter()  # per run: the workers that died running it
        live: list[_Worker] = []  # started and not told to stop
        stopping: list[_Worker] = []
        try:
            while todo or live:
                self._fill(corpus, todo, live)
                for w in [w for w in live if w.job is None]:  # idle once _fill is done: nothing is left for it
                    live.remove(w)  # it ends now, and frees its memory
                    stopping.append(w)
                    _give(w, None)
                if not live:
                    break
                handles = {h: w for w in live for h in (w.conn, w.process.sentinel)}
                for handle in wait_ready(list(handles), timeout=1.0):
                    w = handles[handle]
                    if w not in live:
                        continue
                    alive, error = self._read(w, on_step, on_record)
                    if error is not None:  # an exception raised by the run itself: the ablation ends, as in-process
                        raise error[0] from RemoteTraceback(error[1])
                    if not alive:
                        live.remove(w)
                        self._bury(w, corpus, todo, deaths, on_record)
        except BaseException:
            for w in live + stopping:  # at once: Ctrl-C or a failure must not wait for runs in progress
                with contextlib.suppress(Exception):
                    w.process.terminate()
            for w in live + stopping:
                w.process.join(5)
            raise
        for w in stopping:
            w.process.join(10)
            if w.process.is_alive():
                w.process.terminate()

    def _fill(self, corpus, todo: collections.deque, live: list[_Worker]) -> None:
        """Idle workers take the next runs; new ones start while fewer than asked run."""
        for w in live:
            if w.job is None and todo:
                _give(w, todo.popleft())
        while todo and len(live) < self.workers:
            live.append(self._start(corpus))
            _give(live[-1], todo.popleft())

    def _bury(self, w: _Worker, corpus, todo: collections.deque, deaths: collections.Counter, on_record) -> None:
        """A worker that died: the run it held goes back to the queue, or, once it has killed more than
        max_retries workers, is recorded as failed."""
        w.process.join()
        w.conn.close()  # one that lives on, its fork server dead, ends at its next message (_DriverGone)
        if w.job is None:
            return
        key = (w.job.row, w.job.seed)
        deaths[key] += 1
        if deaths[key] <= self.max_retries:
            todo.appendleft(w.job)
            return
        why = f"the worker process running it died ({_how_it_died(w.process)})"
        on_record(w.job.failure_record(corpus, f"{why}, {deaths[key]} times (--max-retries {self.max_retries})"))

    def _read(self, w: _Worker, on_step, on_record) -> tuple[bool, tuple | None]:
        """Every message the worker has sent: (alive, None), or (alive, (exception, traceback text)) when its
        run raised one. Not alive: its pipe closed, its process ended."""
        try:
            while w.conn.poll():
                kind, *rest = w.conn.recv()
                if kind == "step":
                    on_step(*rest)
                elif kind == "done":
                    w.job = None
                    on_record(rest[0])
                else:
                    return True, tuple(rest)
        except (EOFError, OSError):
            return False, None
        return w.process.is_alive(), None
