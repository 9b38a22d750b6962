"""MLflow: one experiment per results folder, one run per (row, seed). Once the table is written, each table
row gets a run named by its verdict, its seeds nested under it. A "summary" run comes too, and the answer as
the description. judge leaves out the row and summary runs by their tags.kind, as they have no variant tag."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

from ..core.errors import UserError
from ..verdict.judge import ROW_KIND, SUMMARY
from . import records as rec
from .checks import _local_store, mlflow_uri, quiet_store

LAYOUT = (
    "Each table row is a run named by its verdict, with its numbers as metrics (code_loss.delta, ... for each further "
    "metric) and its seeds' runs nested under it; the run named summary holds the files and this table (verdicts.json)."
)


class MlflowBackend:
    name = "mlflow"

    def __init__(self, uri: str | None = None):
        self.uri, _ = mlflow_uri(uri)

    def start(self, folder: Path, tracked: rec.Tracked) -> None:
        from mlflow import MlflowClient

        self.folder, self.tracked = Path(folder), tracked
        train = tracked.plan == rec.TRAIN
        with quiet_store():  # a new store's tables are made here when no check made them
            self.client = MlflowClient(self.uri)
            self.experiment_id = self._experiment(rec.TRAIN_EXPERIMENT if train else self.folder.name, shared=train)

    def _experiment(self, name: str, shared: bool) -> str:
        """The folder's experiment, found again on resume. A name another folder took gets the folder's start time
        added. shared: every `train` run's one."""
        owner = "" if shared else f"{self.folder.resolve()}|{self.tracked.started}"
        for attempt in (name, f"{name} ({self.tracked.started})"):
            found = self.client.get_experiment_by_name(attempt)
            if found is None:
                store = _local_store(self.uri)  # a local store keeps artifacts beside it, not in the current folder
                where = None if store is None else (store.parent / "mlartifacts" / rec.slug(attempt)).resolve().as_uri()
                return self.client.create_experiment(attempt, where, tags={"modern_gpt.folder": owner})
            if found.lifecycle_stage == "active" and found.tags.get("modern_gpt.folder") == owner:
                return found.experiment_id
        raise UserError(f"MLflow's experiments {name!r} and {attempt!r} belong to other folders; give another --out.")

    def _new_run(self, key: str, name: str, tags: dict[str, str], start_time: int | None = None) -> str:
        """A run under key, replacing what an earlier attempt logged under it. That id never reached the run file."""
        for run in self.client.search_runs([self.experiment_id], filter_string=f"tags.`modern_gpt.key` = '{key}'"):
            self.client.delete_run(run.info.run_id)
        return self.client.create_run(self.experiment_id, start_time, {**tags, "modern_gpt.key": key}, name).info.run_id

    def _batch(self, run_id: str, params=None, metrics=(), tags=None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        params = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
        metrics = [Metric(k, v, now, step) for k, v, step in metrics]
        for i in range(0, len(params), 100):  # MLflow's batch limits: 100 params, 1000 metrics
            self.client.log_batch(run_id, params=params[i : i + 100])
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[i : i + 1000])
        if tags:
            self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_run(self, record: dict) -> str:
        """A run spanning its own training time. It logs settings as params, curve and final metrics, and tags."""
        tags = rec.run_tags(self.tracked, record, self.folder)
        start, end = rec.run_times(record)
        run_id = self._new_run(tags.pop("modern_gpt.key"), rec.run_name(self.tracked, record), tags, start)
        step = int(record.get("steps_done") or 0)
        points = [(name, value, s) for s, name, value in rec.curve(record)]
        points += [(k, v, step) for k, v in rec.run_metrics(record).items()]
        # a key that is a tag is not a param too: the UI's CSV of the runs table would name its column twice
        params = {k: v for k, v in rec.run_params(self.tracked, record).items() if k not in tags}
        self._batch(run_id, params, points)
        self.client.set_terminated(run_id, "FAILED" if record.get("error") else "FINISHED", end)
        return run_id

    def log_summary(self, folder: Path, rows: list, metrics: list, margins: rec.Margins | None = None) -> None:
        """The answer and the verdict tables go in as the experiment's description. The summary run holds
        summary.csv, metrics.csv, the figures, and the table as verdicts.json. Each table row gets a run, with its
        seeds' runs nested under it. They are a millisecond apart, so the newest-first runs table keeps their order."""
        text = f"**{rec.answer(rows)}**\n\n{rec.verdict_table(rows, metrics)}\n\n{rec.ABOUT}\n\n{LAYOUT}"
        now, key = int(time.time() * 1000), rec.run_key(folder, self.tracked, None)
        tags = {"kind": SUMMARY, "folder": Path(folder).name, "mlflow.note.content": text[:8000]}
        run_id = self._new_run(key, "summary", tags, now + 1)  # on top of the newest-first runs table
        self._log_table(run_id, rec.verdict_columns(rows))
        for path in rec.artifacts(folder):
            self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, "FINISHED", now + 1)
        parents = {}
        for i, row in enumerate(rows):
            tag = rec.row_tag(self.tracked, row)
            tags = {"kind": ROW_KIND, "folder": Path(folder).name, "plan": self.tracked.plan, "row": str(tag)}
            tags |= {"verdict": row.get("verdict") or "", "reference": row.get("reference") or ""}
            numbers, verdicts = rec.metric_stats(metrics, row["variant"])
            tags |= {**verdicts, "mlflow.note.content": _about(row)}
            run_id = parents[row["variant"]] = self._new_run(f"{key}-row{tag:02d}", rec.row_title(row), tags, now - i)
            numbers |= rec.row_stats(row)
            self._batch(run_id, metrics=[(k, v, 0) for k, v in numbers.items()])
            self.client.set_terminated(run_id, "FINISHED", now - i)
        for record in rec.tracked_records(folder, self.name):  # seeds nested; the counted ones get the verdict
            row, counted = rec.row_of(rows, record)
            if row is not None:
                tags = {
                    "mlflow.parentRunId": parents[row["variant"]],
                    **({"verdict": row["verdict"]} if counted else {}),
                }
                self._batch(rec.tracked_ids(record)[self.name], tags=tags)
        self.client.set_experiment_tag(self.experiment_id, "mlflow.note.content", text[:20000])  # MLflow's limit

    def _log_table(self, run_id: str, table: tuple[list[str], list[list]]) -> None:
        """mlflow.log_table's verdicts.json, which the UI's artifact view shows, written again at full precision.
        log_table keeps 10 decimals, where a p of 1e-12 would read 0."""
        import pandas as pd

        with warnings.catch_warnings():  # MLflow's own select_dtypes call, deprecated by pandas
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            self.client.log_table(run_id, pd.DataFrame(table[1], columns=table[0]), "verdicts.json")
        self.client.log_text(
            run_id, json.dumps({"columns": table[0], "data": table[1]}, allow_nan=False), "verdicts.json"
        )


def _about(row: dict[str, str]) -> str:
    """A table row's run description: its verdict and numbers in words, against its reference."""
    stats = rec.row_stats(row)
    against = f" against {row['reference']}" if row.get("reference") else ""
    numbers = ", ".join(f"{k} {stats[k]:.4g}" for k in ("p", "p_adj", "mde") if k in stats)
    pairs = f" from {row['pairs']} pairs" if row.get("pairs") else ""
    return f"**{rec.row_title(row)}**{against}" + (f"; {numbers}{pairs}." if numbers else ".")
