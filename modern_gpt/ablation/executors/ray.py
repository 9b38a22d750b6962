"""A Ray cluster: one Ray task per run, local or remote, and the checks that find out before ray.init whether a
cluster answers and admits this machine. See the package's docstring for what every executor promises."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...core.errors import UserError
from . import PROGRESS_INTERVAL, Cluster, _throttled

if TYPE_CHECKING:
    from ...core.config import AblationOptions

RAY_EXTRA = 'pip install -e ".[ray]"'


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


# Ray's private names that the checks before ray.init use, and where the Ray these tests run on keeps them
# (tests/test_executors.py pins each to the installed Ray). An upgrade that moves one fails loudly, in
# ray_private, rather than skipping its check without a word.
RAY_PRIVATE = {
    "GcsClient": "ray._raylet",  # check_admitted: one call of Ray's own GCS client
    "Config": "ray._raylet",  # use_token: Ray's configuration, read again
    "AuthenticationTokenLoader": "ray._raylet",
    "canonicalize_bootstrap_address": "ray._private.services",  # _resolve_auto: what auto stands for
}


def ray_private(name: str):
    """One of RAY_PRIVATE's names, from where Ray keeps it; a Ray that has moved it is one sentence."""
    import importlib

    module = RAY_PRIVATE[name]
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        version = getattr(sys.modules.get("ray"), "__version__", "this")
        raise UserError(
            f"--executor ray checks a cluster before connecting with Ray's own {module}.{name}, which Ray {version} "
            'no longer has; install the Ray that modern-gpt\'s tests pass with (pip install -e ".[ray]" in a fresh '
            "environment), or report the Ray version."
        ) from None


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
            config, loader = ray_private("Config"), ray_private("AuthenticationTokenLoader")
            with contextlib.suppress(Exception):
                config.initialize("")
                loader.instance().reset_cache()
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
    refused = getattr(ray.exceptions, "AuthenticationError", None)
    if refused is None:
        return  # a Ray without token authentication
    gcs_client = ray_private("GcsClient")
    host = f"[{address.host}]" if ":" in address.host else address.host
    try:
        with _stderr_silenced():
            gcs_client(address=f"{host}:{address.port}")
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
    lookup = ray_private("canonicalize_bootstrap_address")
    try:
        found = lookup("auto")
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


class Ray(Cluster):
    """One Ray task per run. The corpus goes to the object store once (ray.put), tasks return their records;
    no shared filesystem is needed. A task whose worker or node dies is retried by Ray up to max_retries times."""

    NAME = "Ray"
    CUDA_HINT = "--gpus-per-run 1 (or a fraction)"

    def __init__(self, options: AblationOptions, threads: int, device: str):
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
            return job.failure_record(corpus, f"{type(e).__name__} on {attempts} attempts: {_first_line(e)}")

    def close(self) -> None:
        if self.connected and self.ray.is_initialized():
            self.connected = False
            with _signals_kept():
                self.ray.shutdown()


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__).rstrip(".")
