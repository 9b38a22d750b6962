"""This machine: a round's runs in this process when one goes at a time, else in a pool of worker processes forked
from multiprocessing's fork server, which imports torch once while the driver imports it too (18% of `make smoke`,
docs/measurements.md). Where there is no fork server (Windows, or no socket for it), workers are spawned."""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import os
import signal
import threading
from multiprocessing.connection import wait as wait_ready
from typing import TYPE_CHECKING

from ...core.config import AUTO
from . import RemoteTraceback, _throttled, portable

if TYPE_CHECKING:
    from ...core.config import ExecutionOptions

# --jobs auto on CUDA: runs at once on one GPU. 1 until bench/bench_gpu.py (b) measures more.
RUNS_PER_GPU = 1
SERVER_PRELOAD = ["modern_gpt.ablation.running"]  # what a job needs: torch, the model, training
STOPS = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
_serverless = False  # the fork server could not start here (an AF_UNIX path too long): spawn from now on


def workers(jobs: int | str, device: str, pending: int) -> int:
    """Runs at once: auto is one single-thread run per core on a CPU (1.7x the tokens/s of one two-thread run on
    2 cores), RUNS_PER_GPU on CUDA, one elsewhere, and never more than the runs to do."""
    if jobs != AUTO:
        return jobs
    per_machine = {"cpu": os.cpu_count() or 1, "cuda": RUNS_PER_GPU}.get(device, 1)
    return max(1, min(per_machine, pending))


class Local:
    local_memory = True  # its runs train here: their memory is checked here, before the folder

    def __init__(self, options: ExecutionOptions, threads: int, device: str):
        self.jobs, self.device, self.max_retries = options.jobs, device, options.max_retries

    @staticmethod
    def device_of(name: str, options: ExecutionOptions) -> str:
        from ...run.train import resolve_device

        return resolve_device(name)  # on this machine

    @staticmethod
    def threads(options: ExecutionOptions, device: str) -> int:
        """One thread per run with --jobs auto on a CPU (bitwise --jobs 1 --threads 1), else the cores shared."""
        from ...run.train import default_threads

        if options.jobs == AUTO:
            return 1 if device == "cpu" else default_threads(1)
        return default_threads(options.jobs)

    @staticmethod
    def prestart(options: ExecutionOptions, runs: int) -> None:
        """The fork server, when a pool will run, so that its imports overlap the driver's."""
        if workers(options.jobs, "cpu", runs) > 1:
            _ensure_server()

    def at_once(self, pending: int) -> int:
        return workers(self.jobs, self.device, pending)

    def run(self, jobs, corpus, on_step, on_record) -> None:
        n = self.at_once(len(jobs))
        if n > 1:
            return LocalPool(n, self.max_retries).run(jobs, corpus, on_step, on_record)
        for job in jobs:
            on_record(job(corpus, on_step))

    def info(self) -> dict:
        return {"name": "local", "jobs": self.jobs, "max_retries": self.max_retries}

    def device_name(self) -> None:  # this machine's
        pass

    close = device_name


def _worker_main(conn, corpus, environ: dict) -> None:
    """Runs each job it is sent until None. The driver alone decides on Ctrl-C (the signals were held while this
    process started); environ is the driver's now, not the fork server's older one."""
    for s in set(STOPS) - {signal.SIGTERM}:
        signal.signal(s, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
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
    return mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() and not _serverless else "spawn")


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C, SIGTERM and SIGHUP held back while a process starts or a job is sent, then delivered: one that
    lands mid-write leaves the new process half a pickle, and a traceback. Held by the mask (which a process
    started meanwhile inherits) and, in the main thread, by a handler that only notes one already pending."""
    main = threading.current_thread() is threading.main_thread()
    caught: list[int] = []
    saved = {s: signal.signal(s, lambda n, _: caught.append(n)) for s in STOPS} if main else {}
    masked = hasattr(signal, "pthread_sigmask")
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS) if masked else None
    try:
        yield
    finally:
        if masked:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
        for s, handler in saved.items():
            if handler is not None:  # None: not Python's to restore
                signal.signal(s, handler)
        for s in caught[:1]:
            signal.raise_signal(s)


def _ensure_server() -> None:
    global _serverless
    ctx = _context()
    if ctx.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver, resource_tracker

    ctx.set_forkserver_preload(SERVER_PRELOAD)
    resource_tracker.ensure_running()  # first: starting it unblocks SIGINT in this thread
    try:
        with _signals_held():  # the server inherits the mask: no signal while it imports
            forkserver.ensure_running()
    except OSError:
        _serverless = True


def stop_server() -> None:
    """Stop the fork server at once, at the end of a command: its own teardown (0.6 s with torch loaded) would
    keep the command's stdout open. CPython's private names: where they change, it stops as it would anyway."""
    if "forkserver" not in mp.get_all_start_methods():
        return
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid and hasattr(server, "_stop"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # its children, the workers, live on
        with contextlib.suppress(OSError):
            server._stop()  # reaped, and forgotten


class _Worker:
    def __init__(self, corpus):
        """A worker process with the corpus; a fork server found dead (the OOM killer) is started again, once."""
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
                if attempt == 2 or ctx.get_start_method() != "forkserver":
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
    """N workers, each started for a run to do; a dead one's run goes back to the queue up to max_retries times."""

    def __init__(self, workers: int, max_retries: int = 2):
        self.workers, self.max_retries = workers, max_retries
        self.started = 0  # worker processes started so far

    def _start(self, corpus) -> _Worker:
        self.started += 1
        return _Worker(corpus)

    def run(self, jobs, corpus, on_step, on_record) -> None:
        todo, deaths = collections.deque(jobs), collections.Counter()
        live: list[_Worker] = []
        stopping: list[_Worker] = []
        try:
            while todo or live:
                for w in live:  # idle workers take the next runs, and new ones start while fewer than asked run
                    if w.job is None and todo:
                        w.give(todo.popleft())
                while todo and len(live) < self.workers:
                    live.append(self._start(corpus))
                    live[-1].give(todo.popleft())
                for w in [w for w in live if w.job is None]:  # nothing left for it: it ends and frees its memory
                    w.give(None)
                    live.remove(w)
                    stopping.append(w)
                handles = {h: w for w in live for h in (w.conn, w.process.sentinel)}
                for handle in wait_ready(list(handles), timeout=1.0) if live else ():
                    w = handles[handle]
                    if w not in live:
                        continue
                    alive, error = self._read(w, on_step, on_record)
                    if error is not None:  # the run's own error ends the ablation, as in-process
                        raise error[0] from RemoteTraceback(error[1])
                    if not alive:
                        live.remove(w)
                        self._bury(w, corpus, todo, deaths, on_record)
        except BaseException:  # Ctrl-C or a failure: at once, every finished run is written already
            for w in live + stopping:
                with contextlib.suppress(Exception):
                    w.process.terminate()
            raise
        for w in stopping:
            w.process.join(10)
            w.process.terminate()  # if it is still alive

    def _read(self, w: _Worker, on_step, on_record) -> tuple[bool, tuple | None]:
        """Every message the worker has sent: (alive, the run's error and traceback, or None)."""
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

    def _bury(self, w: _Worker, corpus, todo: collections.deque, deaths: collections.Counter, on_record) -> None:
        w.process.join()
        w.conn.close()  # one that lives on, its fork server dead, ends at its next message
        if w.job is not None:
            n = deaths[(w.job.row, w.job.seed)] = deaths[(w.job.row, w.job.seed)] + 1
            if n <= self.max_retries:
                return todo.appendleft(w.job)
            why = f"the worker process running it died ({w.died()}), {n} times (--max-retries {self.max_retries})"
            on_record(w.job.failure_record(corpus, why))
