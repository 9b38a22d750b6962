"""The checks before anything trains: each tracker installed, its store reachable and writable, and a resume
logging into the store its earlier runs are in."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

from ..core.config import DEFAULT_MLFLOW_URI, check_names
from ..core.errors import UserError
from .records import first_line, tracking_state

# The stores the installed MLflow opens, for the sentence that refuses another
WORKING_STORES = "sqlite:///PATH.db (a file), or http://127.0.0.1:PORT for an mlflow server"
LOCK_WAIT_S = 1.5  # how long a sqlite store may be held by another writer (MLflow's writes take milliseconds)


# ---------------------------------------------------------------------------
# Checks: before anything trains
# ---------------------------------------------------------------------------
def _import(name: str):
    """The tracker's module (TensorBoard's through torch's writer, which needs the tensorboard package)."""
    if name == "mlflow":
        # a dead server fails a call at once instead of retrying it for minutes (MLflow's defaults: 7 retries)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    if name == "tensorboard":
        import tensorboard  # noqa: F401
        from torch.utils import tensorboard as writer

        return writer
    return __import__(name)


def installed(name: str) -> None:
    """The tracker's package imports, else one sentence with the extra that installs it."""
    try:
        _import(name)
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
    """The file a sqlite:/// URI names, or the folder of a file: URI or a plain path; None for a server."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    if uri.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", uri))
    if "://" not in uri and not uri.startswith("databricks"):
        return Path(uri)
    return None


def store_id(uri: str) -> str:
    """An MLflow URI as the store it names, the same from any folder: a local store's path made absolute."""
    store = _local_store(uri)
    if store is None:
        return uri.rstrip("/")
    return f"sqlite:///{store.resolve()}" if uri.startswith("sqlite:") else store.resolve().as_uri()


def other_store(meta: dict, mlflow_uri_given: str | None) -> str | None:
    """The MLflow store this folder's runs were logged to, when the URI given now names another (None: the
    same, or none recorded)."""
    recorded = tracking_state(meta).get("mlflow", {}).get("uri")
    if isinstance(recorded, str) and recorded != store_id(mlflow_uri(mlflow_uri_given)[0]):
        return recorded
    return None


def check_resume_store(folder: Path, meta: dict, names, mlflow_uri_given: str | None) -> None:
    """--resume --track mlflow goes on logging into the store the earlier runs are in, else one sentence."""
    recorded = other_store(meta, mlflow_uri_given) if "mlflow" in check_names(names) else None
    if recorded:
        _, where = mlflow_uri(mlflow_uri_given)
        raise UserError(
            f"{where}: the runs of {folder} are in the MLflow store {recorded}; resume with --mlflow-uri {recorded} "
            f"(modern-gpt report {folder} --track mlflow --mlflow-uri URI copies a folder to another store)."
        )


def _check_writable(path: Path, where: str, is_file: bool) -> None:
    """A local store's file (sqlite) or folder (file:) can be written; a dangling link is checked, and named, where
    it points (MLflow would make the folders it lacks, or retry a file it cannot open for ~100 s)."""
    if path.is_symlink() and not path.exists():
        try:
            target = path.resolve(strict=False)
        except (OSError, RuntimeError):  # a link that loops (RuntimeError before Python 3.13)
            raise UserError(f"{where}: {path} is a link that loops; give another store.") from None
        up = target.parent
        what = "does not exist" if not up.exists() else "is not a folder" if not up.is_dir() else "is not writable"
        if not up.is_dir() or not os.access(up, os.W_OK):
            raise UserError(f"{where}: {path} is a link to {target}, whose folder {up} {what}; give another store.")
    if path.exists() and (path.is_file() if is_file else path.is_dir()) is False:  # a FIFO is neither
        raise UserError(f"{where}: {path} is not a {'file' if is_file else 'folder'}; give another store.")
    folder = path.parent if is_file or not path.exists() else path
    if not folder.is_dir():
        raise UserError(f"{where}: the folder {folder} does not exist; create it or give another store.")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{where}: {path if path.exists() else folder} is not writable; give a writable store.")


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
        why = first_line(reason) if isinstance(reason, BaseException) else str(reason)
    raise UserError(
        f"{where}: no MLflow server answers there ({why}); start one with mlflow server, or give another URI."
    )


def check(names, mlflow_uri_given: str | None = None, folder: Path | None = None) -> None:
    """Before anything trains: every --track name known and installed, and MLflow's store reachable and
    writable; else one sentence naming the flag or URI."""
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
    """MLflow's store: a scheme it takes, reachable and writable; a sqlite file made here is removed if it fails."""
    store = _local_store(uri)
    if uri.rstrip("/") == "sqlite:":
        raise UserError(f"{where}: an in-memory sqlite store is lost when modern-gpt exits; give sqlite:///PATH.db.")
    if store is not None:
        _check_writable(store, where, is_file=uri.startswith("sqlite:"))
    _check_scheme(uri, where)
    made = (
        [] if store is None or os.path.lexists(store) else [Path(f"{store}{end}") for end in ("", "-journal", "-wal")]
    )
    try:
        if store is not None and uri.startswith("sqlite:"):
            _check_sqlite(store, where)
        elif uri.startswith(("http://", "https://")):
            _check_server(uri, where)
        _probe_mlflow(uri, where)
    except UserError:
        for path in made:
            if path.is_file():
                path.unlink()
        raise


def _check_scheme(uri: str, where: str) -> None:
    """A scheme the installed MLflow's registry knows, and no file store where MLflow 3 refuses them: one sentence
    naming the stores that work, rather than MLflow's exception cut off mid-URL."""
    import mlflow
    from mlflow.utils.uri import get_uri_scheme

    scheme = uri if uri in ("databricks", "databricks-uc", "uc") else get_uri_scheme(uri)
    version, give = f"the installed MLflow {mlflow.__version__}", f"give {WORKING_STORES}."
    if scheme in ("", "file") and _file_store_refused():
        raise UserError(
            f"{where}: MLflow cannot use this store ({version} refuses file stores unless "
            f"MLFLOW_ALLOW_FILE_STORE=true); {give}"
        )
    known = _known_schemes()
    if known is not None and scheme not in known:
        raise UserError(f"{where}: MLflow cannot use this store ({version} knows no {scheme}: stores); {give}")


def _file_store_refused() -> bool:
    """The installed MLflow refuses file stores (MLflow 3, unless its MLFLOW_ALLOW_FILE_STORE is true)."""
    from mlflow import environment_variables

    allow = getattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE", None)
    return allow is not None and not allow.get()


def _known_schemes() -> set[str] | None:
    """The schemes MLflow's tracking-store registry knows (None where this MLflow keeps it elsewhere)."""
    try:
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry

        return set(_tracking_store_registry._registry)
    except (ImportError, AttributeError):
        return None


def _check_sqlite(path: Path, where: str) -> None:
    """The sqlite file takes a write lock within LOCK_WAIT_S (MLflow retries one it cannot open for ~100 s)."""
    import sqlite3

    try:
        db = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")  # a write lock: a read-only file, a held database, a file of other bytes
            db.execute("SELECT count(*) FROM sqlite_master")
            db.execute("ROLLBACK")
        finally:
            db.close()
    except sqlite3.Error as e:
        raise UserError(f"{where}: {path} cannot be written as a sqlite database ({e}); give another store.") from None


def _probe_mlflow(uri: str, where: str) -> None:
    """The store opens (a sqlite file is created or migrated, a server answers its API)."""
    from mlflow import MlflowClient

    try:
        with quiet_store():
            MlflowClient(uri).search_experiments(max_results=1)
    except Exception as e:  # whatever the store raises, it is one sentence
        raise UserError(f"{where}: MLflow cannot use this store ({first_line(e)}); give another URI.") from None


@contextlib.contextmanager
def quiet_store():
    """MLflow's INFO lines while it makes a sqlite store's tables kept off stderr (its warnings still show)."""
    loggers = [logging.getLogger(name) for name in ("mlflow.store.db", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
