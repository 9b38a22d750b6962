"""A Ray cluster: one task per run, through Ray's public API. ray.init waits minutes, or for ever, where nothing or
another service answers or the cluster refuses this host. So the address is checked first; ray.init has a deadline."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from ...core.config import ExecutionOptions
from ...core.errors import UserError, first_line
from . import PROGRESS_INTERVAL, Cluster, _throttled, cuda_seen, need

GCS_PORT = 6379  # the port `ray start --head` takes unless given --port
INIT_DEADLINE_S = 120  # ray.init's own tries end in 20 s where a cluster refuses a token; a local start takes ~10 s
TOKEN_HELP = (
    "run `ray get-auth-token` on the head node and give its output to this machine in RAY_AUTH_TOKEN, or in a file "
    "named by RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token); every node that joins the cluster needs it too"
)
# An HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS is one) answers with SETTINGS.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


class ProgressBuffer:
    """A Ray actor (num_cpus=0) holding each run's latest step update. The driver drains it a few times a second."""

    def __init__(self):
        self.latest: dict = {}

    def put(self, *step) -> None:  # row, seed, step, loss
        self.latest[step[:2]] = step

    def drain(self) -> list:
        out, self.latest = list(self.latest.values()), {}
        return out


def _ray_task(job, corpus, progress, gpus=0):
    """One run. Its device is resolved on the worker, whose torch may differ from the driver's."""
    cuda_seen("a run on the Ray node", gpus)
    return job(corpus, None if progress is None else _throttled(lambda *step: progress.put.remote(*step)))


@dataclass(frozen=True)
class Address:
    text: str  # as given
    source: str  # --ray-address or RAY_ADDRESS: where to correct it
    host: str | None = None  # None: auto, which Ray resolves itself
    port: int = GCS_PORT

    def __str__(self) -> str:
        return f"{self.text} ({self.source})"

    @property
    def on_this_machine(self) -> bool:
        host = (self.host or "").lower()
        return self.text == "auto" or host in ("localhost", "::1") or host.startswith("127.")


def parse_address(text: str, source: str) -> Address:
    """host:port (or ray://host:port), checked before anything connects. auto is left to Ray."""
    if text == "auto":
        return Address(text, source)
    if text.startswith("ray://"):
        return replace(parse_address(text.removeprefix("ray://"), source), text=text)
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
    """Where Ray reads the token, in Ray's order, or None. An unreadable file is refused, as Ray aborts on it."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return "RAY_AUTH_TOKEN"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    try:
        path = Path(named or "~/.ray/auth_token").expanduser()
    except RuntimeError:  # no home folder to expand
        return None
    if not named and not os.path.lexists(path):
        return None
    with contextlib.suppress(OSError, UnicodeError):
        if path.is_file() and path.read_text().strip():  # a FIFO or a folder is never opened
            return f"RAY_AUTH_TOKEN_PATH ({path})" if named else str(path)
    where = f"RAY_AUTH_TOKEN_PATH names {path}" if named else f"Ray's token file {path} exists"
    raise UserError(f"{where}, but it is not a readable file that holds a token; {TOKEN_HELP}.")


def use_token() -> str | None:
    """The token's source, sent. Ray sends none to an address without RAY_AUTH_MODE=token, read at its import.
    A RAY_AUTH_MODE the user set is obeyed."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.strip().lower() != "token":
        return None  # disabled, or a mode of Ray's own (Kubernetes)
    source = _token_source()
    if source is None and mode is not None:
        raise UserError(f"RAY_AUTH_MODE is token, but this machine has no Ray token; {TOKEN_HELP}.")
    if source is not None:
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    return source


def check_reachable(address: Address) -> None:
    """A TCP connection to host:port, then a gRPC greeting. Ray's GCS is a gRPC server; the dashboard is not."""
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
    with conn, contextlib.suppress(OSError):  # the 5 s timeout holds for each call
        conn.sendall(_H2_PREFACE)
        while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
            head += chunk
    if len(head) < 9 or head[3] != 4:  # no HTTP/2 SETTINGS frame: not a gRPC server, so not Ray's GCS
        raise UserError(
            f"{address} answers, but not as a Ray cluster; give the host:port that `ray start --head` printed "
            f"(port {GCS_PORT} unless it was given --port), not the dashboard's or another service's."
        )


def connect(ray, address: Address, token: str | None, too_late: bool) -> None:
    """ray.init in a thread under INIT_DEADLINE_S. Its C++ log of refused tries is captured, for InvalidAuthToken."""
    outcome: list = []

    def init() -> None:
        try:
            ray.init(address=address.text, log_to_driver=False, logging_level=logging.ERROR)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            thread = threading.Thread(target=init, daemon=True)  # a thread: Ray leaves the signal handlers alone
            thread.start()
            thread.join(INIT_DEADLINE_S)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        said = log.read().decode(errors="replace")
    if not outcome:
        raise UserError(
            f"Ray did not connect to the cluster at {address} within {INIT_DEADLINE_S} s; check that it runs and "
            "that this machine can reach every port it uses."
        )
    if outcome[0] is None:
        return
    mode, at = os.environ.get("RAY_AUTH_MODE", "token"), f"the Ray cluster at {address}"
    if "InvalidAuthToken" in said:  # the cluster refused this machine's token, or its lack of one
        if mode.strip().lower() != "token":
            why = f"RAY_AUTH_MODE={mode} here sends none; unset RAY_AUTH_MODE, or set it to token. To get the token,"
        elif token is None:
            why = "this machine has none;"
        elif too_late:  # RAY_AUTH_MODE set by use_token after Ray was imported
            why = "Ray was imported before modern-gpt could send it; set RAY_AUTH_MODE=token before importing ray, or"
        else:
            raise UserError(f"{at} refused the token from {token}, which is not that cluster's; {TOKEN_HELP}.")
        raise UserError(f"{at} asks for a token (token authentication), and {why} {TOKEN_HELP}.")
    line = first_line(str(outcome[0]), type(outcome[0]).__name__)
    if address.text == "auto" and "Could not find any running Ray instance" in line:
        raise UserError(
            f"{address.source} auto connects to the Ray cluster that `ray start --head` started on this machine, "
            "and none is running; start one, or give the host:port of another."
        )
    line = line.replace("the `--address` flag", address.source).replace("`--address`", address.source)
    raise UserError(f"cannot connect to the Ray cluster at {address}: {line}.")


class Ray(Cluster):
    """One task per run. The corpus goes to the object store once. Ray retries a task whose worker or node dies."""

    NAME = "Ray"
    CUDA_HINT = "--gpus-per-run 1 (or a fraction)"

    def __init__(self, options: ExecutionOptions, threads: int, device: str):
        super().__init__(options, threads, device)
        source = "RAY_ADDRESS" if options.ray_address is None else "--ray-address"  # its check refuses an empty one
        text = (options.ray_address or os.environ.get("RAY_ADDRESS", "")).strip()
        target = parse_address(text, source) if text and text != "local" else None  # local: as without one
        self.address = None if target is None else text
        imported_before, mode_given = "ray" in sys.modules, "RAY_AUTH_MODE" in os.environ  # Ray reads it at import
        if not imported_before and (target is None or target.on_this_machine):
            # A local Ray then listens on the loopback interface only, where a driver given 127.0.0.1 connects
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        self.token = token = None if target is None else use_token()
        self.ray = ray = need("ray", "Ray", "ray")
        self.connected = not ray.is_initialized()  # True: this executor connected, and disconnects in close()
        if self.connected and target is None:  # a new local Ray, never one left running; Ray's SIGTERM handler undone
            # here, not in connect's thread: the processes Ray starts die with their thread (PR_SET_PDEATHSIG)
            main = threading.current_thread() is threading.main_thread()
            saved = signal.getsignal(signal.SIGTERM) if main else None
            try:
                ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
            except Exception as e:
                raise UserError(f"could not start a local Ray: {first_line(str(e), type(e).__name__)}.") from None
            finally:
                if saved is not None:
                    signal.signal(signal.SIGTERM, saved)
        elif self.connected:
            check_reachable(target)
            connect(ray, target, token, imported_before and not mode_given)
        self._corpus_ref = self._progress = None  # the ablation's one corpus in the object store; the step buffer
        try:  # a run that no node can hold would wait for ever: refused now
            nodes = self._resources()
            if not any(r.get("CPU", 0) >= self.cpus and r.get("GPU", 0) >= self.gpus for r in nodes):
                cpus = max((r.get("CPU", 0) for r in nodes), default=0)
                gpus = max((r.get("GPU", 0) for r in nodes), default=0)
                lower = "--cpus-per-run" if cpus < self.cpus else "--gpus-per-run (or leave it out to train on CPUs)"
                raise UserError(
                    f"no node of the Ray cluster has {self.cpus:g} CPU and {self.gpus:g} GPU for a run (its nodes have "
                    f"at most {cpus:g} CPU and {gpus:g} GPU); lower {lower}, or add such a node."
                )
        except BaseException:
            self.close()
            raise

    def at_once(self, pending: int) -> int:
        """Runs the cluster holds at once, by CPUs and GPUs (for the time estimate)."""
        fits = [(r.get("CPU", 0) // self.cpus, r.get("GPU", 0) // (self.gpus or 1)) for r in self._resources()]
        return max(1, sum(int(min(cpus, gpus) if self.gpus else cpus) for cpus, gpus in fits))

    def _resources(self) -> list[dict]:
        return [n["Resources"] for n in self.ray.nodes() if n.get("Alive")]

    def device_name(self) -> str:
        kinds = sorted({k.split(":", 1)[1] for r in self._resources() for k in r if k.startswith("accelerator_type:")})
        listed = f" ({', '.join(kinds)})" if self.gpus and kinds else ""
        return f"the Ray workers' {'GPUs' if self.gpus else 'CPUs'}{listed}"

    def info(self) -> dict:
        nodes = [{"node_id": n["NodeID"], "address": n["NodeManagerAddress"], "resources": n["Resources"]}
                 for n in self.ray.nodes() if n.get("Alive")]  # fmt: skip
        return dict(name="ray", ray_version=self.ray.__version__, address=self.address or "local (started for this ablation)",
                    cpus_per_run=self.cpus, gpus_per_run=self.gpus, max_retries=self.options.max_retries, nodes=nodes,
                    resources=self.ray.cluster_resources())  # fmt: skip

    def run(self, jobs, corpus, on_step, on_record) -> None:
        ray = self.ray
        if self._corpus_ref is None:
            self._corpus_ref = ray.put(corpus.in_memory())
        if self._progress is None:
            self._progress = ray.remote(num_cpus=0)(ProgressBuffer).remote()
        task, each = ray.remote(_ray_task), {"num_cpus": self.cpus, "num_gpus": self.gpus, "retry_exceptions": False}
        order = {
            task.options(**each, max_retries=self.options.max_retries, name=f"modern-gpt row {job.row} seed {job.seed}")
            .remote(job, self._corpus_ref, self._progress or None, self.gpus): i
            for i, job in enumerate(jobs)
        }  # fmt: skip
        pending = list(order)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=PROGRESS_INTERVAL)
                try:  # the runs' latest steps
                    for step in ray.get(self._progress.drain.remote(), timeout=5) if self._progress else ():
                        on_step(*step)
                except ray.exceptions.RayError:  # its node died: the display goes on without step updates
                    self._progress = False
                for ref in sorted(done, key=order.get):
                    on_record(self._record(ref, jobs[order[ref]], corpus))
        except BaseException:
            # Nothing more trains. Runs finished meanwhile are not cancelled: a cancel that races a task's reply can
            # abort Ray's driver (ray-project/ray#54798 for a sibling).
            with contextlib.suppress(Exception):
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise

    def _record(self, ref, job, corpus) -> dict:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:  # raised by the run itself: the ablation ends, as in-process
            if self.token and isinstance(e.cause, self.ray.exceptions.OwnerDiedError):  # TODO: a token only if asked
                raise UserError(
                    f"the Ray cluster at {self.address} could not fetch the corpus from this driver, which asks for "
                    f"the token from {self.token} while the cluster sends none (it has no token authentication); "
                    "set RAY_AUTH_MODE=disabled for this command."
                ) from None
            raise e.cause from None
        except self.ray.exceptions.RayError as e:  # its worker or node died on every try
            why = f"{type(e).__name__} on {self.options.max_retries + 1} attempts"
            return job.failure_record(corpus, f"{why}: {first_line(str(e), type(e).__name__)}")

    def close(self) -> None:
        if self.connected and self.ray.is_initialized():
            self.connected = False
            self.ray.shutdown()
