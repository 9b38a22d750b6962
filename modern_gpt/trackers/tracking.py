"""Trackers: each finished run, and an ablation's verdicts, logged to TensorBoard, MLflow or Weights & Biases.

The results folder stays the source of truth; a tracker is a view of it that people already search. Only the
driver logs (running.Ablation's on_record, the one writer of the folder, and `train`), so workers need no
tracker and no credentials, and --jobs, --executor ray and --resume log the same runs once. A tracker is
imported only when asked for: --help and every command without --track stay tracker-free.

Where each tracker puts an ablation:
    tensorboard  <results folder>/tensorboard/<row>-<variant>/seed<seed>/ per run; summary/ holds the table,
                 curves.png, lr.png and each row's Δ, CI, p_holm and mde (scalars) and verdict (text)
    mlflow       one experiment per results folder (named after it), one MLflow run per (row, seed), and a run
                 named "summary" with summary.csv, curves.png and lr.png as artifacts and rowNN.* metrics and
                 tags; each seed's run also gets its row's verdict, delta_val, p_holm, ... as tags
    wandb        one W&B group per results folder, offline by default: see WandbBackend

A run's tracker ids go into its run file ("tracked": {"mlflow": "<run id>"}), so resume and report --track never
log it twice; each backend also finds a run by a key made of the folder and (row, seed), and replaces what an
earlier, interrupted attempt logged, so a kill between logging and writing the run file leaves no duplicate.
A tracker that fails (its server died) is a warning, is switched off for the rest of the ablation, and becomes
a footnote of the report (notes()); no run is lost or stopped.
"""

from __future__ import annotations

import csv
import hashlib
import math
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Protocol

from ..core.config import DEFAULT_MLFLOW_URI, TRACKERS, check_names
from ..core.errors import UserError

FINAL_METRICS = ("train_loss", "val_loss", "val_bpc", "val_ppl", "best_val_loss", "tokens_per_s", "secs", "steps_done")
ROW_STATS = ("delta_val", "ci_low", "ci_high", "p_holm", "mde")  # each table row's, with its verdict
TRAIN = "train"  # the plan of a run that `modern-gpt train` logs
TRAIN_EXPERIMENT = "modern-gpt train"  # MLflow's experiment of every `train` run
TB_DIR = "tensorboard"  # inside the results folder (or the checkpoint folder of `train`)


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
    """A local store's file (sqlite) or folder (file:) can be written: its folder exists and is writable."""
    kind = "file" if is_file else "folder"
    if path.exists() and (path.is_file() if is_file else path.is_dir()) is False:  # a FIFO is neither
        raise UserError(f"{where}: {path} is not a {kind}; give another store.")
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
        why = _first_line(reason) if isinstance(reason, BaseException) else str(reason)
    raise UserError(
        f"{where}: no MLflow server answers there ({why}); start one with mlflow server, or give another URI."
    )


def check(names, mlflow_uri_given: str | None = None, folder: Path | None = None) -> None:
    """Every --track name known and installed, and MLflow's store reachable and writable: one sentence naming
    the flag or URI otherwise. Called before anything trains. folder: where TensorBoard writes (checked by the
    results folder's own checks for an ablation)."""
    names = check_names(names)
    if mlflow_uri_given is not None and not mlflow_uri_given.strip():
        raise UserError("--mlflow-uri is empty; give a URI, or leave it out for MLFLOW_TRACKING_URI or the default.")
    if mlflow_uri_given and "mlflow" not in names:
        raise UserError("--mlflow-uri goes with --track mlflow.")
    for name in names:
        installed(name)
    if "mlflow" in names:
        uri, where = mlflow_uri(mlflow_uri_given)
        store = _local_store(uri)
        if uri.rstrip("/") == "sqlite:":
            raise UserError(
                f"{where}: an in-memory sqlite store is lost when modern-gpt exits; give sqlite:///PATH.db."
            )
        if store is not None:
            _check_writable(store, where, is_file=uri.startswith("sqlite:"))
        elif uri.startswith(("http://", "https://")):
            _check_server(uri, where)
        _probe_mlflow(uri, where)
    if "wandb" in names:
        check_wandb()


def _probe_mlflow(uri: str, where: str) -> None:
    """The store opens (a sqlite file is created or migrated, a server answers its API)."""
    from mlflow import MlflowClient

    try:
        MlflowClient(uri).search_experiments(max_results=1)
    except Exception as e:  # whatever the store raises, it is one sentence
        raise UserError(f"{where}: MLflow cannot use this store ({_first_line(e)}); give another URI.") from None


def _first_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0][:300]
    return f"{type(e).__name__}: {text}".rstrip(": ")


# ---------------------------------------------------------------------------
# What is logged: pure functions of a run's record and the folder's meta.json
# ---------------------------------------------------------------------------
def tracked_ids(record: dict) -> dict[str, str]:
    """A run file's tracker ids ("tracked"), those that are ids: a hand-edited field of another type, or an id
    that is not a string, counts as not logged (logging it again replaces any copy, see run_key)."""
    ids = record.get("tracked")
    if not isinstance(ids, dict):
        return {}
    return {k: v for k, v in ids.items() if k in TRACKERS and isinstance(v, str) and v}


def tracking_state(meta: dict) -> dict[str, dict]:
    """meta.json's tracking (per tracker asked for: its error, its summary, MLflow's store), those entries that
    are objects: a hand-edited field of another type counts as none."""
    state = meta.get("tracking")
    if not isinstance(state, dict):
        return {}
    return {k: v for k, v in state.items() if k in TRACKERS and isinstance(v, dict)}


def run_params(meta: dict, record: dict) -> dict[str, object]:
    """A run's settings, flattened (model.dim, train.lr, ...), and its identity: variant, components, seed, lr."""
    settings = meta.get("spec", {}).get("settings", {})
    out: dict[str, object] = {
        f"{section}.{key}": value
        for section in ("model", "train", "data")
        for key, value in sorted(settings.get(section, {}).items())
    }
    for key in ("variant", "components", "seed", "lr", "mlp_width", "params"):
        if record.get(key) is not None:
            out[key] = record[key]
    if "lr" in record:
        out["train.lr"] = record["lr"]  # a --lrs row trains at its own
    return out


def run_metrics(record: dict) -> dict[str, float]:
    """A run's final numbers (NaN for a run that failed), diverged as 0 or 1."""
    out = {k: _number(record.get(k)) for k in FINAL_METRICS}
    out["diverged"] = float(bool(record.get("diverged")))
    out["failed"] = float(bool(record.get("error")))
    return out


def run_tags(meta: dict, record: dict, folder: Path) -> dict[str, str]:
    """The tags a run is found by: the folder, the plan, its row (its run file's, one per variant and learning
    rate), variant, seed and lr, and its key (see run_key)."""
    return {
        "folder": Path(folder).name,
        "plan": str(meta.get("spec", {}).get("plan", "")),
        "row": str(record["row"]),
        "variant": record["variant"],
        "seed": str(record["seed"]),
        **({"lr": str(record["lr"])} if record.get("lr") is not None else {}),
        "error": (record.get("error") or "")[:500],
        "modern_gpt.key": run_key(folder, meta, record),
    }


def several_lrs(meta: dict) -> bool:
    """Trained with --lrs: a variant has a run row per learning rate, which its names must tell apart."""
    return len(meta.get("spec", {}).get("lrs") or ()) > 1


def run_name(meta: dict, record: dict) -> str:
    """A run's display name: "rope seed 2", with --lrs "rope lr 0.003 seed 2"."""
    lr = f" lr {record['lr']:g}" if several_lrs(meta) and isinstance(record.get("lr"), (int, float)) else ""
    return f"{record['variant']}{lr} seed {record['seed']}"


def row_tag(meta: dict, row: dict[str, str]) -> int:
    """The run row (the runs' row tag) of a summary.csv row: with --lrs, its variant's at the learning rate the
    table shows it at (summary.csv's row counts table rows); else the same number."""
    if several_lrs(meta):
        variants = meta.get("spec", {}).get("variants") or []
        for i, v in enumerate(variants):
            if (
                isinstance(v, dict)
                and v.get("name") == row.get("variant")
                and _number(v.get("lr")) == _number(row.get("lr"))
            ):
                return i
    return int(_number(row.get("row")))


def run_key(folder: Path, meta: dict, record: dict | None) -> str:
    """A run's (or with None, the summary's) identity in a tracker: its folder, when the folder was started, and
    its (row, seed); the same after a resume, another for a folder deleted and made again."""
    where = f"{Path(folder).resolve()}|{meta.get('started')}"
    what = "summary" if record is None else f"row{record['row']:02d}-seed{record['seed']}"
    return hashlib.sha256(f"{where}|{what}".encode()).hexdigest()[:20]


def run_times(record: dict) -> tuple[int | None, int | None]:
    """When the run started and ended, in Unix milliseconds (its timing.started and secs), so that a tracker shows
    its training time rather than the moment it was logged; None for what the record lacks (an older file)."""
    started, secs = _number((record.get("timing") or {}).get("started")), _number(record.get("secs"))
    if not (math.isfinite(started) and started > 0):
        return None, None
    start = int(started * 1000)
    return start, start + int(secs * 1000) if math.isfinite(secs) and secs >= 0 else None


def curve(record: dict) -> list[tuple[int, str, float]]:
    """(step, curve/train_loss or curve/val_loss, value) of each finite point of the run's curve (named apart
    from the final train_loss and val_loss, which are measured on more windows)."""
    return [
        (int(p["step"]), f"curve/{name}", float(p[name]))
        for p in record.get("curve") or []
        for name in ("train_loss", "val_loss")
        if isinstance(p.get(name), (int, float)) and math.isfinite(p[name])
    ]


def summary_rows(folder: Path) -> list[dict[str, str]]:
    """summary.csv's rows (report.write wrote it), [] without one."""
    path = Path(folder) / "summary.csv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def row_stats(row: dict[str, str]) -> dict[str, float]:
    """A table row's Δ, CI, p_holm and mde that it has (the first row, the reference, has none)."""
    out = {}
    for key in ROW_STATS:
        value = _number(row.get(key))
        if math.isfinite(value):
            out[key] = value
    return out


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def slug(text: str) -> str:
    """A variant's name as a folder or key name: "classic (placebo)" -> "classic_placebo"."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_") or "row"


def artifacts(folder: Path) -> list[Path]:
    """The summary's files: summary.csv, curves.png and lr.png, those that exist."""
    return [p for p in (Path(folder) / n for n in ("summary.csv", "curves.png", "lr.png")) if p.is_file()]


# ---------------------------------------------------------------------------
# The backends
# ---------------------------------------------------------------------------
class Backend(Protocol):
    name: str

    def start(self, folder: Path, meta: dict) -> None: ...
    def log_run(self, record: dict) -> str: ...  # the tracker's run id
    def log_summary(self, folder: Path) -> None: ...
    def close(self) -> None: ...


class TensorBoardBackend:
    """Event files under <folder>/tensorboard/: one TensorBoard run per (row, seed) (its curves as scalars
    against step, its settings and final metrics in the HPARAMS tab), and summary/ for the table."""

    name = "tensorboard"

    def start(self, folder: Path, meta: dict) -> None:
        self.folder, self.meta = Path(folder), meta
        self.root = self.folder / TB_DIR
        self.root.mkdir(parents=True, exist_ok=True)

    def _fresh(self, path: Path):
        """A writer of a folder emptied of what an earlier, interrupted attempt wrote (no duplicate points)."""
        from torch.utils.tensorboard import SummaryWriter

        if path.is_dir():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return SummaryWriter(log_dir=str(path))

    def run_dir(self, record: dict) -> Path:
        lr = f"-lr{record['lr']:g}" if several_lrs(self.meta) and isinstance(record.get("lr"), (int, float)) else ""
        return self.root / f"{record['row']:02d}-{slug(record['variant'])}{lr}" / f"seed{record['seed']}"

    def log_run(self, record: dict) -> str:
        from torch.utils.tensorboard.summary import hparams

        path = self.run_dir(record)
        writer = self._fresh(path)
        try:
            for step, name, value in curve(record):
                writer.add_scalar(name, value, step)
            metrics = {f"final/{k}": v for k, v in run_metrics(record).items()}
            params = {
                k: v if isinstance(v, (int, float, str, bool)) else str(v)
                for k, v in run_params(self.meta, record).items()
            }
            for part in hparams(params, metrics):
                writer.file_writer.add_summary(part)
            step = int(record.get("steps_done") or 0)
            for key, value in metrics.items():
                writer.add_scalar(key, value, step)
            writer.add_text("tags", _markdown(run_tags(self.meta, record, self.folder)), step)
        finally:
            writer.close()
        return str(path.relative_to(self.folder))

    def log_summary(self, folder: Path) -> None:
        writer = self._fresh(self.root / "summary")
        try:
            rows = summary_rows(folder)
            for row in rows:
                for key, value in row_stats(row).items():
                    name = f"{key}/{row_tag(self.meta, row):02d}-{slug(row['variant'])}"  # a stat's rows side by side
                    writer.add_scalar(name, value, 0)
            if rows:
                verdicts = [{"variant": r["variant"], "verdict": r.get("verdict", ""), **_cells(r)} for r in rows]
                writer.add_text("verdicts", _table(verdicts), 0)
            for path in artifacts(folder):
                if path.suffix == ".png":
                    import matplotlib.image

                    writer.add_image(path.stem, matplotlib.image.imread(path)[..., :3], 0, dataformats="HWC")
                else:
                    writer.add_text(path.name, _table(rows), 0)
        finally:
            writer.close()

    def close(self) -> None:
        pass


def _cells(row: dict[str, str]) -> dict[str, str]:
    return {k: f"{v:.4g}" for k, v in row_stats(row).items()}


def _table(rows: list[dict]) -> str:
    """Rows as a Markdown table (TensorBoard's text tab renders it)."""
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def _markdown(tags: dict[str, str]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in tags.items())


class MlflowBackend:
    """One MLflow experiment per results folder (named after it), one run per (row, seed), and a run named
    "summary". An experiment rather than a parent run with nested runs: it is what MLflow's UI compares and
    searches (the runs table, tags.verdict = 'better'), and a resume or report --track adds to it without a
    parent run to reopen."""

    name = "mlflow"

    def __init__(self, uri: str | None = None):
        self.uri, _ = mlflow_uri(uri)

    def start(self, folder: Path, meta: dict) -> None:
        from mlflow import MlflowClient

        self.folder, self.meta = Path(folder), meta
        self.client = MlflowClient(self.uri)
        train = meta.get("spec", {}).get("plan") == TRAIN
        self.experiment_id = self._experiment(TRAIN_EXPERIMENT if train else self.folder.name, shared=train)

    def _experiment(self, name: str, shared: bool) -> str:
        """The folder's experiment: made once, found again on resume; a name another folder took (or a deleted
        experiment holds) gets the time the folder was started added. shared: every `train` run's one."""
        owner = "" if shared else f"{self.folder.resolve()}|{self.meta.get('started')}"
        for attempt in (name, f"{name} ({self.meta.get('started')})"):
            found = self.client.get_experiment_by_name(attempt)
            if found is None:
                store = _local_store(self.uri)  # a local store keeps artifacts beside it, not in the current folder
                where = None if store is None else (store.parent / "mlartifacts" / slug(attempt)).resolve().as_uri()
                return self.client.create_experiment(
                    attempt, artifact_location=where, tags={"modern_gpt.folder": owner}
                )
            if found.lifecycle_stage == "active" and found.tags.get("modern_gpt.folder") == owner:
                return found.experiment_id
        raise UserError(f"MLflow's experiments {name!r} and {attempt!r} belong to other folders; give another --out.")

    def _replace(self, key: str) -> None:
        """Delete what an earlier attempt logged under this key (its id never reached the run file)."""
        for run in self.client.search_runs([self.experiment_id], filter_string=f"tags.`modern_gpt.key` = '{key}'"):
            self.client.delete_run(run.info.run_id)

    def _new_run(self, key: str, name: str, tags: dict[str, str], start_time: int | None = None) -> str:
        self._replace(key)
        tags = {**tags, "modern_gpt.key": key}
        return self.client.create_run(self.experiment_id, start_time, tags, name).info.run_id

    def _batch(self, run_id: str, params=None, metrics=None, tags=None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        params = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
        metrics = [Metric(k, v, now, step) for k, v, step in (metrics or [])]
        tags = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for i in range(0, len(params), 100):  # MLflow's batch limits: 100 params, 1000 metrics
            self.client.log_batch(run_id, params=params[i : i + 100])
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[i : i + 1000])
        if tags:
            self.client.log_batch(run_id, tags=tags)

    def log_run(self, record: dict) -> str:
        tags = run_tags(self.meta, record, self.folder)
        start, end = run_times(record)
        run_id = self._new_run(tags.pop("modern_gpt.key"), run_name(self.meta, record), tags, start)
        step = int(record.get("steps_done") or 0)
        points = [(name, value, s) for s, name, value in curve(record)]
        points += [(k, v, step) for k, v in run_metrics(record).items()]
        self._batch(run_id, params=run_params(self.meta, record), metrics=points)
        self.client.set_terminated(run_id, "FAILED" if record.get("error") else "FINISHED", end)
        return run_id

    def log_summary(self, folder: Path) -> None:
        rows = summary_rows(folder)
        run_id = self._new_run(
            run_key(folder, self.meta, None), "summary", {"kind": "summary", "folder": Path(folder).name}
        )
        metrics, tags = [], {}
        for row in rows:
            at = f"row{row_tag(self.meta, row):02d}"
            metrics += [(f"{at}.{k}", v, 0) for k, v in row_stats(row).items()]
            tags.update({f"{at}.variant": row["variant"], f"{at}.verdict": row.get("verdict") or ""})
        self._batch(run_id, metrics=metrics, tags=tags)
        for path in artifacts(folder):
            self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, "FINISHED")
        self._verdicts_on_runs(folder, rows)

    def _verdicts_on_runs(self, folder: Path, rows: list[dict[str, str]]) -> None:
        """Each seed's run gets its row's verdict and numbers as tags: search them with tags.verdict = 'better'."""
        by_variant = {r["variant"]: r for r in rows}
        for record in _tracked_records(folder, self.name):
            row = by_variant.get(record["variant"])
            if row is None or (row.get("lr") and _number(row["lr"]) != _number(record.get("lr"))):
                continue
            tags = {"verdict": row.get("verdict") or "", **{k: f"{v:.6g}" for k, v in row_stats(row).items()}}
            self._batch(tracked_ids(record)[self.name], tags=tags)

    def close(self) -> None:
        pass


def _tracked_records(folder: Path, name: str) -> list[dict]:
    """The folder's run files that this tracker logged."""
    import json

    out = []
    for f in sorted((Path(folder) / "runs").glob("*.json")):
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and tracked_ids(record).get(name):
            out.append(record)
    return out


# ---------------------------------------------------------------------------
# Weights & Biases
# ---------------------------------------------------------------------------
WANDB_PROJECT = "modern-gpt"  # unless WANDB_PROJECT is set
WANDB_OFFLINE = ("offline", "dryrun", "disabled")  # WANDB_MODE values that never reach the network


def wandb_mode() -> str:
    """WANDB_MODE if set, else offline: an ablation never waits on a login prompt or the network."""
    return os.environ.get("WANDB_MODE") or "offline"


def wandb_root(folder: Path) -> Path:
    """Where the run folders go: WANDB_DIR, else the results folder (wandb adds wandb/offline-run-...)."""
    return Path(os.environ.get("WANDB_DIR") or folder)


def check_wandb() -> None:
    """Before anything trains: online mode has a key to log with, and WANDB_DIR (if set) is a writable folder."""
    if wandb_mode() not in WANDB_OFFLINE and not os.environ.get("WANDB_API_KEY") and not _netrc_key():
        raise UserError(
            f"--track wandb with WANDB_MODE={wandb_mode()} needs a W&B login (wandb login, or WANDB_API_KEY); "
            "leave WANDB_MODE unset to log offline and upload later with wandb sync."
        )
    where = os.environ.get("WANDB_DIR")
    if where and not (Path(where).is_dir() and os.access(where, os.W_OK)):
        raise UserError(f"--track wandb: WANDB_DIR={where} is not a writable folder; create it or unset it.")


def _netrc_key() -> bool:
    """A key saved by `wandb login` (in ~/.netrc, or the file NETRC names)."""
    import netrc

    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _wandb_tag(key: str, value) -> str:
    return f"{key}={value}"[:64]  # W&B's limit on a tag's length


class WandbBackend:
    """Offline unless WANDB_MODE says otherwise: nothing reaches the network and no login is needed; `wandb sync`
    uploads the run folders later. An ablation is one W&B group (named after its results folder) in the project modern-gpt
    (or WANDB_PROJECT): one W&B run per (row, seed), tagged folder=, plan=, row= and variant=, with its settings as
    config, its curves as history and its final metrics in its summary; and one run named "summary" (job type
    summary) holding summary.csv as a wandb.Table, curves.png and lr.png as images, and each row's Δ, CI, p_holm,
    mde and verdict in its summary (rowNN.verdict), which the W&B runs table shows and filters.

    A run's W&B id is its run_key, so logging it again (a kill after logging and before its run file was
    written) replaces the earlier offline folder instead of adding a second run."""

    name = "wandb"

    def start(self, folder: Path, meta: dict) -> None:
        import wandb

        self.wandb, self.folder, self.meta = wandb, Path(folder), meta
        self.root = wandb_root(self.folder)
        train = meta.get("spec", {}).get("plan") == TRAIN
        self.group = TRAIN_EXPERIMENT if train else self.folder.name

    def _init(self, key: str, name: str, job_type: str, tags: list[str], config: dict):
        """A new W&B run with the id key, after removing an earlier attempt's offline folder of that id."""
        for old in (self.root / "wandb").glob(f"offline-run-*-{key}"):
            shutil.rmtree(old, ignore_errors=True)
        online = wandb_mode() not in WANDB_OFFLINE
        settings = self.wandb.Settings(console="off", silent=True, x_disable_stats=True, x_save_requirements=False)
        return self.wandb.init(
            project=os.environ.get("WANDB_PROJECT") or WANDB_PROJECT,
            group=self.group,
            name=name,
            id=key,
            job_type=job_type,
            tags=tags,
            config=config,
            dir=str(self.root),
            mode=wandb_mode(),
            resume="allow" if online else None,  # online, a second attempt continues the same run
            reinit="create_new",
            settings=settings,
        )

    def log_run(self, record: dict) -> str:
        tags = run_tags(self.meta, record, self.folder)
        key = tags.pop("modern_gpt.key")
        keys = ("folder", "plan", "row", "variant", *(("lr",) if several_lrs(self.meta) and "lr" in tags else ()))
        labels = [_wandb_tag(k, tags[k]) for k in keys]
        config = {**{k: v for k, v in tags.items() if v}, **run_params(self.meta, record), "row": record["row"]}
        run = self._init(key, run_name(self.meta, record), "run", labels, config)
        try:
            steps: dict[int, dict[str, float]] = {}
            for step, name, value in curve(record):
                steps.setdefault(step, {})[name] = value
            for step in sorted(steps):
                run.log(steps[step], step=step)
            run.summary.update(run_metrics(record))
        finally:
            run.finish(exit_code=1 if record.get("error") else 0)
        return run.id

    def log_summary(self, folder: Path) -> None:
        rows = summary_rows(folder)
        key = run_key(folder, self.meta, None)
        plan = str(self.meta.get("spec", {}).get("plan", ""))
        labels = [_wandb_tag("folder", Path(folder).name), _wandb_tag("plan", plan), "summary"]
        run = self._init(key, "summary", "summary", labels, {"folder": Path(folder).name, "plan": plan})
        try:
            logged = {}
            if rows:
                columns = list(rows[0])
                logged["summary"] = self.wandb.Table(
                    columns=columns, data=[[r.get(c, "") for c in columns] for r in rows]
                )
            for path in artifacts(folder):
                if path.suffix == ".png":
                    logged[path.stem] = self.wandb.Image(str(path))
            if logged:
                run.log(logged)
            verdicts = {}
            for row in rows:
                at = f"row{row_tag(self.meta, row):02d}"
                verdicts.update({f"{at}.variant": row["variant"], f"{at}.verdict": row.get("verdict") or ""})
                verdicts.update({f"{at}.{k}": v for k, v in row_stats(row).items()})
            run.summary.update(verdicts)
        finally:
            run.finish()

    def close(self) -> None:
        self.wandb.teardown()  # stops wandb's service process: nothing of it outlives the ablation


def backend(name: str, mlflow_uri_given: str | None = None) -> Backend:
    if name == "tensorboard":
        return TensorBoardBackend()
    if name == "mlflow":
        return MlflowBackend(mlflow_uri_given)
    return WandbBackend()


# ---------------------------------------------------------------------------
# Tracking: the open backends of one ablation (or one `train`)
# ---------------------------------------------------------------------------
def warn(text: str) -> None:
    print(f"modern-gpt: warning: {text}", file=sys.stderr)


class Tracking:
    """The backends an ablation logs to. A backend that raises is switched off, with a warning, and its error
    kept in errors (meta.json's tracking, then a footnote): the ablation goes on."""

    def __init__(self, backends: list[Backend], on_warning=warn, mlflow_uri_given: str | None = None):
        self.backends = backends
        self.errors: dict[str, str] = {}
        self.on_warning = on_warning
        self.mlflow_uri_given = mlflow_uri_given
        self.folder: Path | str = "DIR"  # the results folder, named in the command that pushes what a tracker lacks

    @classmethod
    def open(cls, names, mlflow_uri_given: str | None, folder: Path, meta: dict, on_warning=warn) -> Tracking:
        tracking = cls([], on_warning, mlflow_uri_given)
        tracking.folder = Path(folder)
        for name in check_names(names):
            b = backend(name, mlflow_uri_given)
            if tracking._safely(b, b.start, folder, meta):
                tracking.backends.append(b)
        return tracking

    @property
    def names(self) -> list[str]:
        return [b.name for b in self.backends]

    def _safely(self, b: Backend, call, *args):
        try:
            return call(*args) or True
        except Exception as e:  # a tracker's failure never stops or loses a run
            self.errors[b.name] = _first_line(e)
            again = push(b.name, self.folder, self.state([b.name])[b.name].get("uri"))
            self.on_warning(f"{b.name} failed ({self.errors[b.name]}); the ablation goes on without it. {again}")
            if b in self.backends:
                self.backends.remove(b)
            return None

    def log(self, record: dict) -> dict[str, str]:
        """Log one finished run to every backend that has not logged it; returns its ids so far, by tracker."""
        ids = tracked_ids(record)
        for b in list(self.backends):
            if b.name not in ids:
                run_id = self._safely(b, b.log_run, record)
                if isinstance(run_id, str):
                    ids[b.name] = run_id
        return ids

    def finish(self, folder: Path) -> None:
        """The ablation's summary (summary.csv, the figures, each row's verdict) to every backend still open."""
        for b in list(self.backends):
            self._safely(b, b.log_summary, folder)

    def close(self) -> None:
        for b in list(self.backends):
            self._safely(b, b.close)
        self.backends = []

    def state(self, names) -> dict[str, dict]:
        """meta.json's tracking: per tracker asked for, its error (None while it works), and MLflow's store (the
        run ids in the run files are that store's)."""
        store = {"mlflow": {"uri": store_id(mlflow_uri(self.mlflow_uri_given)[0])}}
        return {name: {"error": self.errors.get(name), **store.get(name, {})} for name in check_names(names)}


def log_train(names, mlflow_uri_given: str | None, folder: Path, settings, seed: int, metrics: dict) -> dict[str, str]:
    """`modern-gpt train --track`: its one run (settings: a settings.Settings), in MLflow's "modern-gpt train"
    experiment and under the checkpoint's tensorboard/; returns the run ids by tracker."""
    import datetime as dt

    components = settings.model.components
    record = {
        **metrics,
        "row": 0,
        "seed": seed,
        "variant": "+".join(components) or "classic",
        "components": "+".join(components),
        "lr": settings.train.lr,
    }
    meta = {"spec": {"settings": settings.to_dict(), "plan": TRAIN}, "started": dt.datetime.now().isoformat()}
    tracking = Tracking.open(names, mlflow_uri_given, Path(folder), meta)
    try:
        return tracking.log(record)
    finally:
        tracking.close()


def push(name: str, folder: Path | str = "DIR", uri: str | None = None) -> str:
    """The command that pushes what a tracker lacks: MLflow's into the store its runs are in (uri)."""
    store = f" --mlflow-uri {shlex.quote(uri)}" if name == "mlflow" and isinstance(uri, str) else ""
    return f"modern-gpt report {shlex.quote(str(folder))} --track {name}{store} logs what is missing."


def notes(meta: dict, records: dict, folder: Path | str) -> list[str]:
    """The report's footnotes for trackers: per tracker asked for, the runs it does not hold and why. The one
    place their wording lives."""
    out = []
    for name, state in tracking_state(meta).items():
        missing = [r for r in records.values() if not tracked_ids(r).get(name)]
        error = state.get("error")
        if missing or error:
            why = f" ({str(error).rstrip('.')})" if error else ""
            what = f"{len(missing)} of {len(records)} runs are not in {name}" if missing else f"{name} failed"
            out.append(f"{what}{why}; {push(name, folder, state.get('uri'))}")
    return out
