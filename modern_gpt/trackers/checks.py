"""The checks before anything trains. Each tracker must be installed, its store reachable and writable.
A resume logs into the store its earlier runs are in. Each failure is one sentence naming the flag or URI."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

from ..core.config import DEFAULT_MLFLOW_URI, check_names
from ..core.errors import UserError
from .records import error_line, tracking_state

WORKING_STORES = "sqlite:///PATH.db (a file), or http://127.0.0.1:PORT for an mlflow server"
LOCK_WAIT_S = 1.5  # how long a sqlite store may be held by another writer (MLflow's writes take milliseconds)


def installed(name: str) -> None:
    """The tracker's package imports (TensorBoard's through torch's writer), else how to install it."""
    if name == "mlflow":  # a dead server fails a call at once instead of retrying it for minutes
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    try:
        __import__(name)
        if name == "tensorboard":
            from torch.utils import tensorboard  # noqa: F401
    except ImportError as e:
        raise UserError(
            f"--track {name} needs the {name} package, which is not installed ({e}); "
            f'pip install -e ".[{name}]" (or pip install {name}).'
        ) from None


def mlflow_uri(given: str | None) -> tuple[str, str]:
    """The MLflow tracking URI and what chose it: --mlflow-uri, else MLFLOW_TRACKING_URI, else the default."""
    if given:
        return given, f"--mlflow-uri {given}"
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env, f"MLFLOW_TRACKING_URI={env}"
    return DEFAULT_MLFLOW_URI, f"the default MLflow store {DEFAULT_MLFLOW_URI}"


def _local_store(uri: str) -> Path | None:
    """The file a sqlite:/// URI names, or the folder a file: URI or plain path names. None for a server."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    if uri.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", uri))
    if "://" not in uri and not uri.startswith("databricks"):
        return Path(uri)
    return None


def store_id(uri: str) -> str:
    """An MLflow URI as the store it names, the same from any folder. A local store's path is made absolute."""
    store = _local_store(uri)
    if store is None:
        return uri.rstrip("/")
    return f"sqlite:///{store.resolve()}" if uri.startswith("sqlite:") else store.resolve().as_uri()


def other_store(meta: dict, mlflow_uri_given: str | None) -> str | None:
    """The MLflow store this folder's runs were logged to, when the URI given now names another."""
    recorded = tracking_state(meta).get("mlflow", {}).get("uri")
    if isinstance(recorded, str) and recorded != store_id(mlflow_uri(mlflow_uri_given)[0]):
        return recorded
    return None


def check_resume_store(folder: Path, meta: dict, names, mlflow_uri_given: str | None) -> None:
    """--resume --track mlflow logs into the store the earlier runs are in. Another would split the ablation."""
    recorded = other_store(meta, mlflow_uri_given) if "mlflow" in check_names(names) else None
    if recorded:
        _, where = mlflow_uri(mlflow_uri_given)
        raise UserError(
            f"{where}: the runs of {folder} are in the MLflow store {recorded}; resume with --mlflow-uri {recorded} "
            f"(modern-gpt report {folder} --track mlflow --mlflow-uri URI copies a folder to another store)."
        )


def check(names, mlflow_uri_given: str | None = None) -> None:
    """Before anything trains: every --track name known and installed. MLflow's store must be reachable and
    writable, and W&B able to log."""
    from .wandb import check_wandb  # here: the backends' modules load only for a tracker asked for

    names = check_names(names)
    if mlflow_uri_given is not None and not mlflow_uri_given.strip():
        raise UserError("--mlflow-uri is empty; give a URI, or leave it out for MLFLOW_TRACKING_URI or the default.")
    if mlflow_uri_given and "mlflow" not in names:
        raise UserError("--mlflow-uri goes with --track mlflow.")
    for name in names:
        installed(name)
    if "mlflow" in names:
        _check_mlflow(*mlflow_uri(mlflow_uri_given))
    if "wandb" in names:
        check_wandb()


def _check_mlflow(uri: str, where: str) -> None:
    """MLflow's store: a scheme it takes, reachable and writable. A sqlite file made here is removed if it fails."""
    store = _local_store(uri)
    if uri.rstrip("/") == "sqlite:":
        raise UserError(f"{where}: an in-memory sqlite store is lost when modern-gpt exits; give sqlite:///PATH.db.")
    if store is not None:
        _check_writable(store, where, is_file=uri.startswith("sqlite:"))
    _check_scheme(uri, where)
    made = store is not None and not os.path.lexists(store)  # removed again if the store fails
    try:
        if store is not None and uri.startswith("sqlite:"):
            _check_sqlite(store, where)
        elif uri.startswith(("http://", "https://")):
            _check_server(uri, where)
        from mlflow import MlflowClient

        with quiet_store():  # a sqlite file is created or migrated, a server answers its API
            MlflowClient(uri).search_experiments(max_results=1)
    except Exception as e:
        for end in ("", "-journal", "-wal") if made else ():
            Path(f"{store}{end}").unlink(missing_ok=True)
        if isinstance(e, UserError):
            raise
        raise UserError(f"{where}: MLflow cannot use this store ({error_line(e)}); give another URI.") from None


def _check_writable(path: Path, where: str, is_file: bool) -> None:
    """A local store's file (sqlite) or folder (file:) must be one, in a folder that exists, and writable."""
    if path.exists() and not (path.is_file() if is_file else path.is_dir()):  # a FIFO is neither
        raise UserError(f"{where}: {path} is not a {'file' if is_file else 'folder'}; give another store.")
    folder = path.parent if is_file or not path.exists() else path
    if not folder.is_dir():
        raise UserError(f"{where}: the folder {folder} does not exist; create it or give another store.")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{where}: {path if path.exists() else folder} is not writable; give a writable store.")


def _check_scheme(uri: str, where: str) -> None:
    """A scheme the installed MLflow knows, and no file store where MLflow 3 refuses them."""
    import mlflow
    from mlflow.utils.uri import get_uri_scheme

    scheme = uri if uri in ("databricks", "databricks-uc", "uc") else get_uri_scheme(uri)
    version, give = f"the installed MLflow {mlflow.__version__}", f"give {WORKING_STORES}."
    if scheme in ("", "file") and _file_store_refused():
        refused = f"{version} refuses file stores unless MLFLOW_ALLOW_FILE_STORE=true"
        raise UserError(f"{where}: MLflow cannot use this store ({refused}); {give}")
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    if scheme not in _tracking_store_registry._registry:
        raise UserError(f"{where}: MLflow cannot use this store ({version} knows no {scheme}: stores); {give}")


def _file_store_refused() -> bool:
    """The installed MLflow refuses file stores (MLflow 3, unless its MLFLOW_ALLOW_FILE_STORE is true)."""
    from mlflow import environment_variables

    allow = getattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE", None)
    return allow is not None and not allow.get()


def _check_server(uri: str, where: str) -> None:
    """An http(s) tracking server answers its health check within a few seconds."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=5) as answer:
            if answer.status == 200:
                return
            why = f"HTTP {answer.status}"
    except urllib.error.HTTPError as e:
        why = f"HTTP {e.code}"
    except Exception as e:  # refused, timed out, or something else answering (http.client.BadStatusLine)
        reason = getattr(e, "reason", e)
        why = error_line(reason) if isinstance(reason, BaseException) else str(reason)
    raise UserError(
        f"{where}: no MLflow server answers there ({why}); start one with mlflow server, or give another URI."
    )


def _check_sqlite(path: Path, where: str) -> None:
    """The sqlite file takes a write lock within LOCK_WAIT_S. A read-only file, a database another process
    holds, a file of other bytes or a dead link is one sentence. MLflow would retry ten times over ~100 s."""
    import sqlite3

    try:
        db = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("SELECT count(*) FROM sqlite_master")
            db.execute("ROLLBACK")
        finally:
            db.close()
    except sqlite3.Error as e:
        raise UserError(f"{where}: {path} cannot be written as a sqlite database ({e}); give another store.") from None


@contextlib.contextmanager
def quiet_store():
    """Keeps MLflow's INFO lines off stderr while it makes a sqlite store's tables. Its warnings still show."""
    loggers = {logger: logger.level for logger in map(logging.getLogger, ("mlflow.store.db", "alembic"))}
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in loggers.items():
            logger.setLevel(level)
