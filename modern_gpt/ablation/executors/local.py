"""This machine: one run at a time in this process, or a pool of workers forked from multiprocessing's fork server.
The server imports torch while the driver does (18% of `make smoke`, docs/measurements.md); else workers spawn."""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import os
import signal
import threading
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import wait as wait_ready

from ...core.config import AUTO, ExecutionOptions
from . import Executor, RemoteTraceback, _throttled, portable, spent

RUNS_PER_GPU = 1  # --jobs auto on CUDA: runs at once on one GPU. TODO: measure with bench/bench_gpu.py (b)
SERVER_PRELOAD = ["modern_gpt.ablation.running"]  # what a job needs: torch, the model, training
STOPS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
_serverless = False  # the fork server could not start here (an AF_UNIX path too long): spawn from now on


def workers(jobs: int | str, device: str, pending: int) -> int:
    """Runs at once, at most the runs to do. auto: a single-thread run per CPU core, RUNS_PER_GPU on CUDA, else one.
    On 2 cores, that gave 1.7x the tokens/s of one two-thread run (docs/measurements.md)."""
    if jobs != AUTO:
        return jobs
    per_machine = {"cpu": os.cpu_count() or 1, "cuda": RUNS_PER_GPU}.get(device, 1)
    return max(1, min(per_machine, pending))


class Local(Executor):
    local_memory = True  # its runs train here: their memory is checked here, before the folder

    def __init__(self, options: ExecutionOptions, threads: int, device: str):
        self.jobs, self.device, self.max_retries = options.jobs, device, options.max_retries

    @staticmethod
    def device_of(name: str, options: ExecutionOptions) -> str:
        from ...run.train import resolve_device

        return resolve_device(name)  # on this machine

    @staticmethod
    def threads(options: ExecutionOptions, device: str) -> int:
        """One thread per run with --jobs auto on a CPU, bitwise as --jobs 1 --threads 1. Else runs share the cores."""
        from ...run.train import default_threads

        auto = options.jobs == AUTO
        return 1 if auto and device == "cpu" else default_threads(1 if auto else options.jobs)

    @staticmethod
    def prestart(options: ExecutionOptions, runs: int) -> None:
        """The fork server, when a pool will run, so that its imports overlap the driver's."""
        if workers(options.jobs, "cpu", runs) > 1:
            _ensure_server()

    def at_once(self, pending: int) -> int:
        return workers(self.jobs, self.device, pending)

    def run(self, jobs, corpus, on_step, on_record) -> None:
        if (n := self.at_once(len(jobs))) > 1:
            return LocalPool(n, self.max_retries).run(jobs, corpus, on_step, on_record)
        for job in jobs:
            on_record(job(corpus, on_step))

    def info(self) -> dict:
        return {"name": "local", "jobs": self.jobs, "max_retries": self.max_retries}


def _worker_main(conn, corpus, environ: dict) -> None:
    """Runs each job it is sent until None, with the driver's environ, not the fork server's. The driver has Ctrl-C."""
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    os.environ.clear()
    os.environ.update(environ)

    def send(message) -> None:
        try:
            conn.send(message)
        except OSError:  # the driver has ended, or given this worker up: end quietly
            os._exit(0)

    on_step = _throttled(lambda *step: send(("step", *step)))
    with contextlib.suppress(EOFError, OSError):  # EOF: the driver is gone
        for job in iter(conn.recv, None):
            try:
                send(("done", job(corpus, on_step)))
            except BaseException as e:  # the run's own error: the driver raises it
                return send(("error", *portable(e)))


def _context():  # a fork server is a fresh process that runs no torch operation: forking it is safe
    return mp.get_context("spawn" if _serverless else "forkserver")


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C, SIGTERM and SIGHUP held, then delivered, while a process starts or a job is sent. Mid-write, one
    leaves the worker half a pickle. The mask holds them (a new process inherits it); in the main thread, a handler."""
    main = threading.current_thread() is threading.main_thread()
    caught: list[int] = []
    saved = {s: signal.signal(s, lambda n, _: caught.append(n)) for s in STOPS} if main else {}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        for s, handler in saved.items():
            if handler is not None:  # None: not Python's to restore
                signal.signal(s, handler)
        for s in caught[:1]:
            signal.raise_signal(s)


def _ensure_server() -> None:
    global _serverless
    if _serverless:
        return
    mp.set_forkserver_preload(SERVER_PRELOAD)
    resource_tracker.ensure_running()  # first: starting it unblocks SIGINT in this thread
    try:
        with _signals_held():  # the server inherits the mask: no signal while it imports
            forkserver.ensure_running()
    except OSError:
        _serverless = True


def stop_server() -> None:
    """Stop the fork server at once at a command's end: its own teardown, 0.6 s, keeps stdout open. This uses
    CPython's private names; where they change, the server stops as it would anyway."""
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)  # None: never started
    if pid and hasattr(server, "_stop"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # its children, the workers, live on
        with contextlib.suppress(OSError):
            server._stop()  # reaped, and forgotten


class _Worker:
    def __init__(self, corpus):
        """A worker process with the corpus. A fork server found dead (the OOM killer) is started again, once."""
        for attempt in (1, 2):
            _ensure_server()
            ctx = _context()
            self.conn, theirs = ctx.Pipe()
            self.process = ctx.Process(target=_worker_main, args=(theirs, corpus, dict(os.environ)), daemon=True)
            try:
                with _signals_held():
                    self.process.start()
                break
            except (OSError, EOFError):
                self.conn.close()
                theirs.close()
                if attempt == 2 or _serverless:
                    raise
                stop_server()
            except BaseException:  # a signal held during the start: this worker ends with the pool
                with contextlib.suppress(Exception):
                    self.process.terminate()
                raise
        theirs.close()
        self.job = None

    def give(self, job) -> None:  # None: stop. One that has just died takes it not: its sentinel says so next
        self.job = job
        with contextlib.suppress(OSError), _signals_held():
            self.conn.send(job)

    def died(self) -> str:
        code = self.process.exitcode
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"


class LocalPool:
    """N workers, each started for a run to do. A dead one's run goes back to the queue, up to max_retries times."""

    def __init__(self, workers: int, max_retries: int = 2):
        self.workers, self.max_retries = workers, max_retries
        self.started = 0  # worker processes started so far

    def run(self, jobs, corpus, on_step, on_record) -> None:
        todo, tries = collections.deque(jobs), {}
        live, stopping = [], []  # the workers with a run or about to get one; those told to stop
        try:
            while todo or live:
                for w in [w for w in live if w.job is None]:  # idle: the next run, or it ends (its memory freed)
                    w.give(todo.popleft() if todo else None)
                    if w.job is None:
                        live.remove(w)
                        stopping.append(w)
                while todo and len(live) < self.workers:  # and new ones while fewer than asked run
                    live.append(_Worker(corpus))
                    self.started += 1
                    live[-1].give(todo.popleft())
                handles = {h: w for w in live for h in (w.conn, w.process.sentinel)}
                for handle in wait_ready(list(handles), timeout=1.0) if live else ():
                    if (w := handles[handle]) in live and not self._read(w, on_step, on_record):
                        live.remove(w)
                        w.process.join()
                        w.conn.close()  # one that lives on, its fork server dead, ends at its next message
                        if w.job is None:
                            continue
                        if n := spent(tries, w.job, self.max_retries):
                            why = f"the worker process running it died ({w.died()}), {n} times"
                            on_record(w.job.failure_record(corpus, f"{why} (--max-retries {self.max_retries})"))
                        else:
                            todo.appendleft(w.job)
        except BaseException:  # Ctrl-C or a failure: at once, every finished run is written already
            for w in live + stopping:
                with contextlib.suppress(Exception):
                    w.process.terminate()
            raise
        for w in stopping:
            w.process.join(10)
            w.process.terminate()  # if it is still alive

    def _read(self, w: _Worker, on_step, on_record) -> bool:
        """Every message the worker has sent; False once it has died. A run's own error ends the ablation."""
        try:
            while w.conn.poll():
                kind, *rest = w.conn.recv()
                if kind == "error":
                    break
                if kind == "step":
                    on_step(*rest)
                else:
                    w.job = None
                    on_record(rest[0])
            else:
                return w.process.is_alive()
        except (EOFError, OSError):
            return False
        raise rest[0] from RemoteTraceback(rest[1])
