"""Executors: where the runs of an ablation train. One interface (Executor), two executors:

    Local       this machine (--executor local), each round of runs in one of two ways:
      InProcess   one run after another in this process (--jobs 1, or a single run to do)
      LocalPool   N processes (--jobs N, or auto: one single-thread run per core)
    Ray         one Ray task per run on a Ray cluster (--executor ray), local or remote

executor.run(jobs, corpus, on_step, on_record) trains every job and returns when each has a record.
A job comes from running.py: job(corpus, on_step) -> its record, job.failed(corpus, error) -> the record
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

import collections
import contextlib
import logging
import math
import multiprocessing as mp
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import wait as wait_ready
from typing import TYPE_CHECKING, Protocol

from ..core.config import AUTO
from ..core.errors import UserError

if TYPE_CHECKING:
    from ..core.config import AblationOptions

PROGRESS_INTERVAL = 0.25  # seconds between two step updates of one run: enough for a display, cheap to send
# --jobs auto on CUDA: runs at once on the GPU. 1 until measured: bench/bench_gpu.py (b) prints the total tokens/s
# of 1, 2, 4 and 8 concurrent shakespeare-size runs on one GPU; set this from that table, not from a guess.
RUNS_PER_GPU = 1
RAY_EXTRA = 'pip install -e ".[ray]"'


class Executor(Protocol):
    """What an ablation holds from start or resume to its end (running.Ablation.executor)."""

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


def workers(jobs: int | str, device: str, pending: int) -> int:
    """How many runs go at once on this machine. auto: on a CPU one single-thread run per core (two
    single-thread processes trained 1.7x the tokens/s of one two-thread process on a 2-core machine), on
    CUDA RUNS_PER_GPU, on another GPU one; never more workers than runs to do."""
    if jobs != AUTO:
        return jobs
    per_machine = {"cpu": os.cpu_count() or 1, "cuda": RUNS_PER_GPU}.get(device, 1)
    return max(1, min(per_machine, pending))


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


# ---------------------------------------------------------------------------
# In this process
# ---------------------------------------------------------------------------
class Local:
    """This machine: each round's runs in this process when one goes at a time, else in a pool of processes."""

    def __init__(self, jobs: int | str, device: str, max_retries: int):
        self.jobs, self.device, self.max_retries = jobs, device, max_retries

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


def prestart(options: AblationOptions, runs: int) -> None:
    """Start the fork server now, if a local pool of `runs` runs on this machine's CPU would use one, so that its
    imports overlap the driver's (called before the driver imports torch). Idempotent; it ends with this process."""
    if options.on_ray or workers(options.jobs, "cpu", runs) <= 1:
        return
    _ensure_server()


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
        on_record(w.job.failed(corpus, f"{why}, {deaths[key]} times (--max-retries {self.max_retries})"))

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


# ---------------------------------------------------------------------------
# A Ray cluster
# ---------------------------------------------------------------------------
class ProgressBuffer:
    """A Ray actor (num_cpus=0) that tasks post step updates to; the driver drains it a few times a second.
    It keeps only the latest update of each run, so it never grows."""

    def __init__(self):
        self.latest: dict = {}

    def put(self, row: int, seed: int, step: int, loss: float) -> None:
        self.latest[(row, seed)] = (row, seed, step, loss)

    def drain(self) -> list:
        out, self.latest = list(self.latest.values()), {}
        return out


def _ray_task(job, corpus, progress, gpus=0):
    """One run as a Ray task, on the corpus from the object store; its record is the task's result. The device
    is resolved here, on the worker: the driver may have no GPU, or no CUDA build of torch."""
    if gpus:
        import torch

        if not torch.cuda.is_available():  # else --device auto would train on the CPU, a GPU reserved and idle
            raise UserError(
                f"a run on the Ray node {socket.gethostname()} reserved {gpus:g} GPU, but torch {torch.__version__} "
                "there sees no CUDA GPU; install a CUDA build of torch on the GPU nodes, or leave out --gpus-per-run."
            )
    send = None if progress is None else lambda *step: progress.put.remote(*step)
    return job(corpus, None if send is None else _throttled(send))


def import_ray():
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray needs Ray, which is not installed; install it with: {RAY_EXTRA}") from None
    return ray


# ---------------------------------------------------------------------------
# Connecting to a cluster. ray.init retries for minutes, or for ever, on an address where no cluster answers,
# where another service does, or where the cluster refuses this machine; so each is found out first.
# ---------------------------------------------------------------------------
GCS_PORT = 6379  # the port `ray start --head` takes unless given --port
TOKEN_HELP = (
    "run `ray get-auth-token` on the head node and give its output to this machine in RAY_AUTH_TOKEN, or in a file "
    "named by RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token); every node that joins the cluster needs it too"
)
# An HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS is one) answers with SETTINGS.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


@dataclass(frozen=True)
class Address:
    text: str  # as given
    source: str  # --ray-address or RAY_ADDRESS: where to correct it
    host: str | None = None  # None: auto, which Ray resolves itself
    port: int = GCS_PORT
    client: bool = False  # ray://host:port, Ray Client's server: reached, but not a GCS to ask for a token

    def __str__(self) -> str:
        return f"{self.text} ({self.source})"

    @property
    def on_this_machine(self) -> bool:
        """127.0.0.1, localhost, ::1, or auto (the cluster that `ray start` started on this machine)."""
        import ipaddress

        if self.host is None:
            return self.text == "auto"
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host.lower() == "localhost"


def parse_address(text: str, source: str) -> Address:
    """host:port (or ray://host:port), checked before anything connects; auto is left to Ray."""
    if text == "auto":
        return Address(text, source)
    if text.startswith("ray://"):
        inner = parse_address(text.removeprefix("ray://"), source)
        return replace(inner, text=text, client=True)
    if "://" in text or "/" in text:
        raise UserError(
            f"{source} takes the cluster's host:port (what `ray start --head` prints, port {GCS_PORT} unless it was "
            f"given --port), not a URL like {text}; the dashboard's http://...:8265 is another service."
        )
    host, sep, port = text.rpartition(":")
    if not sep or not host.strip("[]"):
        raise UserError(
            f"{source} {text} has no port; give host:port (port {GCS_PORT} unless `ray start --head` was given --port)."
        )
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UserError(f"{source} {text}: the port must be a whole number from 1 to 65535, got {port!r}.")
    return Address(text, source, host.strip("[]"), int(port))


def _token_source() -> str | None:
    """Where Ray reads the cluster's token from, in Ray's order: RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names,
    ~/.ray/auth_token; None when there is none. A file that cannot be read is refused here: Ray aborts the process
    on it (exit 134, no sentence)."""
    from pathlib import Path

    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return "RAY_AUTH_TOKEN"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    try:
        path = Path(named).expanduser() if named else Path.home() / ".ray" / "auth_token"
    except RuntimeError:  # no home folder to expand
        return None
    if not named and not os.path.lexists(path):
        return None
    try:
        text = path.read_text() if path.is_file() else None  # a FIFO or a folder is never opened
    except (OSError, UnicodeError):
        text = None
    if not text or not text.strip():
        where = f"RAY_AUTH_TOKEN_PATH names {path}" if named else f"Ray's token file {path} exists"
        raise UserError(f"{where}, but it is not a readable file that holds a token; {TOKEN_HELP}.")
    return f"RAY_AUTH_TOKEN_PATH ({path})" if named else str(path)


def use_token() -> str | None:
    """Token authentication for this driver, before Ray is imported (it reads RAY_AUTH_MODE then). Ray 2.59+ turns
    it on for a cluster that `ray start` makes where a token exists (a local ray.init writes ~/.ray/auth_token), but
    a driver given an address sends no token unless RAY_AUTH_MODE=token. So the token is sent whenever this machine
    has one (a cluster without authentication ignores it); a RAY_AUTH_MODE set by the user is obeyed. Returns
    where the token comes from, or None."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.strip().lower() != "token":
        return None  # disabled, or a mode of Ray's own (Kubernetes)
    source = _token_source()
    if source is None and mode is not None:
        raise UserError(f"RAY_AUTH_MODE is token, but this machine has no Ray token; {TOKEN_HELP}.")
    if source is not None and mode is None:
        os.environ["RAY_AUTH_MODE"] = "token"
        if "ray" in sys.modules:  # imported earlier by this process: it reads its configuration again
            with contextlib.suppress(Exception):
                from ray._raylet import AuthenticationTokenLoader, Config

                Config.initialize("")
                AuthenticationTokenLoader.instance().reset_cache()
    return source


def check_reachable(address: Address) -> None:
    """A TCP connection to host:port, then a gRPC greeting: ray.init waits minutes where nothing listens, and
    for ever where another service does (the dashboard's port, say)."""
    if address.host is None:
        return
    try:
        conn = socket.create_connection((address.host, address.port), timeout=5)
    except OSError as e:
        raise UserError(
            f"cannot reach the Ray cluster at {address}: {e.strerror or e}; start one there with "
            "`ray start --head`, or give the host:port it printed."
        ) from None
    head = b""
    with conn, contextlib.suppress(OSError):
        conn.settimeout(5)
        conn.sendall(_H2_PREFACE)
        while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
            head += chunk
    if len(head) < 9 or head[3] != 4:  # no HTTP/2 SETTINGS frame: not a gRPC server, so not Ray's GCS
        raise UserError(
            f"{address} answers, but not as a Ray cluster; give the host:port that `ray start --head` printed "
            f"(port {GCS_PORT} unless it was given --port), not the dashboard's or another service's."
        )


@contextlib.contextmanager
def _stderr_silenced():
    """File descriptor 2 to /dev/null: Ray's C++ client logs each refused attempt there, before our one sentence."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def check_admitted(ray, address: Address, token: str | None) -> None:
    """One call of Ray's own GCS client: a cluster that refuses this machine's token, or its lack of one, says so
    in a second, where ray.init retries for 20 s and then blames the connection."""
    if address.host is None or address.client:
        return
    try:
        from ray._raylet import GcsClient

        refused = ray.exceptions.AuthenticationError
    except (ImportError, AttributeError):
        return  # a Ray without token authentication
    host = f"[{address.host}]" if ":" in address.host else address.host
    try:
        with _stderr_silenced():
            GcsClient(address=f"{host}:{address.port}")
    except refused:
        mode = os.environ.get("RAY_AUTH_MODE", "token")
        if mode.strip().lower() != "token":
            raise UserError(
                f"the Ray cluster at {address} asks for a token (token authentication), and RAY_AUTH_MODE={mode} here "
                f"sends none; unset RAY_AUTH_MODE, or set it to token. To get the token, {TOKEN_HELP}."
            ) from None
        if token is None:
            raise UserError(
                f"the Ray cluster at {address} asks for a token (token authentication), and this machine has none; "
                f"{TOKEN_HELP}."
            ) from None
        raise UserError(
            f"the Ray cluster at {address} refused the token from {token}, which is not that cluster's; {TOKEN_HELP}."
        ) from None
    except Exception:
        return  # anything else, ray.init says


def _resolve_auto(ray, address: Address) -> Address:
    """auto as the host:port it stands for, to be checked as any other; Ray's own lookup (its running cluster file,
    then its GCS processes). Left to ray.init when that lookup is not there (another Ray version)."""
    if address.text != "auto":
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address("auto")
    except Exception:
        return address
    if not found:
        raise UserError(_no_local_cluster(address))
    return replace(parse_address(found, address.source), text=f"auto, {found}")


def _no_local_cluster(address: Address) -> str:
    return (
        f"{address.source} auto connects to the Ray cluster that `ray start --head` started on this machine, "
        "and none is running; start one, or give the host:port of another."
    )


def connect_error(address: Address, e: BaseException) -> str:
    """ray.init's error in one sentence, in modern-gpt's words (Ray's name its own --address flag)."""
    line = _first_line(e)
    if address.text == "auto" and "Could not find any running Ray instance" in line:
        return _no_local_cluster(address)
    line = line.replace("the `--address` flag", address.source).replace("`--address`", address.source)
    return f"cannot connect to the Ray cluster at {address}: {line}."


@contextlib.contextmanager
def _signals_kept():
    """ray.init installs its own SIGTERM handler (sys.exit); the command line's (stop like Ctrl-C) is put back."""
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


class Ray:
    """One Ray task per run. The corpus goes to the object store once (ray.put), tasks return their records;
    no shared filesystem is needed. A task whose worker or node dies is retried by Ray up to max_retries times."""

    def __init__(self, options: AblationOptions, threads: int):
        given = options.ray_address if options.ray_address is not None else os.environ.get("RAY_ADDRESS", "")
        source = "--ray-address" if options.ray_address is not None else "RAY_ADDRESS"
        text = given.strip()
        target = parse_address(text, source) if text and text != "local" else None  # local: as without one
        self.address = None if target is None else text
        if "ray" not in sys.modules and (target is None or target.on_this_machine):
            # A local Ray for this ablation listens on the loopback interface only (by default Ray takes the
            # machine's network address), and a driver given 127.0.0.1 connects there (Ray would put the
            # machine's network address in its place, where a loopback-only cluster does not answer). Ray reads
            # this when it is imported, and its processes inherit it.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        token = None if target is None else use_token()
        self.ray = ray = import_ray()
        self.options, self.threads = options, threads
        self.cpus = options.cpus_per_run if options.cpus_per_run is not None else threads
        self.gpus = options.gpus_per_run or 0
        self.connected = not ray.is_initialized()  # True: this executor connected, and disconnects in close()
        if self.connected:
            with _signals_kept():
                if self.address is None:  # a local Ray for this ablation, on the loopback interface only
                    try:
                        ray.init(
                            address="local",  # a new one, never a cluster that another program left running
                            include_dashboard=False,
                            log_to_driver=False,
                            logging_level=logging.ERROR,
                        )
                    except Exception as e:
                        raise UserError(f"could not start a local Ray: {_first_line(e)}.") from None
                else:
                    resolved = _resolve_auto(ray, target)
                    check_reachable(resolved)
                    check_admitted(ray, resolved, token)
                    try:
                        ray.init(address=text, log_to_driver=False, logging_level=logging.ERROR)
                    except Exception as e:
                        raise UserError(connect_error(target, e)) from None
        self._corpus = self._corpus_ref = self._progress = None
        try:
            self._check_resources()
        except BaseException:
            self.close()
            raise

    def _nodes(self) -> list[dict]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    @property
    def workers(self) -> int:
        """Runs the cluster holds at once, by CPUs and GPUs (for the time estimate)."""

        def holds(n: dict) -> int:
            by_cpu = n["Resources"].get("CPU", 0) // max(self.cpus, 1e-9)
            return int(min(by_cpu, n["Resources"].get("GPU", 0) // self.gpus) if self.gpus else by_cpu)

        return max(1, sum(holds(n) for n in self._nodes()))

    def at_once(self, pending: int) -> int:
        return self.workers

    def device_name(self) -> str:
        """What meta.json's device_name says on Ray: the workers' devices, not this machine's."""
        kinds = sorted(
            {k.split(":", 1)[1] for n in self._nodes() for k in n["Resources"] if k.startswith("accelerator_type:")}
        )
        what = "GPUs" if self.gpus else "CPUs"
        return f"the Ray workers' {what}" + (f" ({', '.join(kinds)})" if self.gpus and kinds else "")

    def _check_resources(self) -> None:
        """A run that no node can hold would wait for ever: refuse it now."""
        fits = [
            n
            for n in self._nodes()
            if n["Resources"].get("CPU", 0) >= self.cpus and n["Resources"].get("GPU", 0) >= self.gpus
        ]
        if not fits:
            cpus = max((n["Resources"].get("CPU", 0) for n in self._nodes()), default=0)
            gpus = max((n["Resources"].get("GPU", 0) for n in self._nodes()), default=0)
            lower = "--cpus-per-run" if cpus < self.cpus else "--gpus-per-run (or leave it out to train on CPUs)"
            raise UserError(
                f"no node of the Ray cluster has {self.cpus:g} CPU and {self.gpus:g} GPU for a run (its nodes have at "
                f"most {cpus:g} CPU and {gpus:g} GPU); lower {lower}, or add such a node."
            )

    def info(self) -> dict:
        nodes = [
            {"node_id": n["NodeID"], "address": n["NodeManagerAddress"], "resources": n["Resources"]}
            for n in self._nodes()
        ]
        return {
            "name": "ray",
            "ray_version": self.ray.__version__,
            "address": self.address or "local (started for this ablation)",
            "cpus_per_run": self.cpus,
            "gpus_per_run": self.gpus,
            "max_retries": self.options.max_retries,
            "nodes": nodes,
            "resources": self.ray.cluster_resources(),
        }

    def _corpus_in_store(self, corpus):
        if self._corpus is not corpus:
            import numpy as np  # plain arrays (not memory maps): the workers read them from the object store

            plain = replace(corpus, train=np.asarray(corpus.train), val=np.asarray(corpus.val))
            self._corpus, self._corpus_ref = corpus, self.ray.put(plain)
        return self._corpus_ref

    def _progress_actor(self):
        if self._progress is None:
            self._progress = self.ray.remote(num_cpus=0)(ProgressBuffer).remote()
        return self._progress

    def _drain(self, on_step) -> None:
        if not self._progress:
            return
        try:
            steps = self.ray.get(self._progress.drain.remote(), timeout=5)
        except self.ray.exceptions.RayError:  # its node died: the display goes on without step updates
            self._progress = False
            return
        for step in steps:
            on_step(*step)

    def run(self, jobs, corpus, on_step, on_record) -> None:
        ray = self.ray
        corpus_ref, progress = self._corpus_in_store(corpus), self._progress_actor() or None
        task = ray.remote(_ray_task)
        resources = {"num_cpus": self.cpus, "num_gpus": self.gpus, "max_retries": self.options.max_retries}
        order = {}
        for i, job in enumerate(jobs):
            name = f"modern-gpt row {job.row} seed {job.seed}"
            order[
                task.options(**resources, retry_exceptions=False, name=name).remote(
                    job, corpus_ref, progress, self.gpus
                )
            ] = i
        pending = list(order)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=PROGRESS_INTERVAL)
                if done and pending:  # and every other one finished meanwhile
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                    done += more
                self._drain(on_step)
                for ref in sorted(done, key=order.get):
                    on_record(self._record(ref, jobs[order[ref]], corpus))
        except BaseException:
            # Ctrl-C, SIGTERM or a failed run: nothing more trains. Runs that have finished meanwhile are not
            # cancelled: Ray's driver can abort when a cancel races a task's reply (a RAY_CHECK in its task
            # manager, ray-project/ray#54798 for a sibling), and that window is the finishing task's.
            with contextlib.suppress(Exception):
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise

    def _record(self, ref, job, corpus) -> dict:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # raised by the run itself: the ablation ends, as in-process
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except ray.exceptions.TaskCancelledError:
            raise
        except ray.exceptions.RayError as e:  # its worker or node died on every try
            attempts = self.options.max_retries + 1
            return job.failed(corpus, f"{type(e).__name__} on {attempts} attempts: {_first_line(e)}")

    def close(self) -> None:
        if self.connected and self.ray.is_initialized():
            self.connected = False
            with _signals_kept():
                self.ray.shutdown()


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__).rstrip(".")
