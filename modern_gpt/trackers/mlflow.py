"""MLflow: one experiment per results folder, one run per (row, seed) and a summary run."""

from __future__ import annotations

import math
import time
from pathlib import Path

from ..core.errors import UserError
from ..verdict.judge import ROW_KIND, SUMMARY  # tags.kind of a row's run and the summary's: judge leaves both out
from . import records as rec
from .checks import _local_store, mlflow_uri, quiet_store

LAYOUT = (
    "Each table row is a run named by its verdict, with its Δ (delta_val), CI (ci_low, ci_high), p, p_adj and mde "
    "as metrics and its seeds' runs nested under it; the run named summary holds summary.csv, the figures and "
    "this table (verdicts.json)."
)


class MlflowBackend:
    """One MLflow experiment per results folder, a run per (row, seed); once the table is written, a run per
    table row (tags.kind row, its seeds nested under it), a "summary" run and the answer as the description.
    judge leaves out both kinds (they have no variant tag)."""

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
        """The folder's experiment: made once, found again on resume; a name another folder took (or a deleted
        experiment holds) gets the time the folder was started added. shared: every `train` run's one."""
        owner = "" if shared else f"{self.folder.resolve()}|{self.tracked.started}"
        for attempt in (name, f"{name} ({self.tracked.started})"):
            found = self.client.get_experiment_by_name(attempt)
            if found is None:
                store = _local_store(self.uri)  # a local store keeps artifacts beside it, not in the current folder
                where = None if store is None else (store.parent / "mlartifacts" / rec.slug(attempt)).resolve().as_uri()
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
        tags = rec.run_tags(self.tracked, record, self.folder)
        start, end = rec.run_times(record)
        run_id = self._new_run(tags.pop("modern_gpt.key"), rec.run_name(self.tracked, record), tags, start)
        step = int(record.get("steps_done") or 0)
        points = [(name, value, s) for s, name, value in rec.curve(record)]
        points += [(k, v, step) for k, v in rec.run_metrics(record).items()]
        # variant, seed and lr are tags alone: MLflow's UI downloads its runs table as a CSV whose columns are the
        # bare keys of params, metrics and tags, where a key logged as both is a column named twice
        params = {k: v for k, v in rec.run_params(self.tracked, record).items() if k not in tags}
        self._batch(run_id, params=params, metrics=points)
        self.client.set_terminated(run_id, "FAILED" if record.get("error") else "FINISHED", end)
        return run_id

    def log_summary(self, folder: Path, summary: list, margins: rec.Margins | None = None) -> None:
        """The answer where the experiment opens: its description says which rows are better or worse (and the
        table below it); a run per table row, named by its verdict, with the row's Δ, CI, p, p_adj and mde as
        metrics and its seeds' runs nested under it; and the summary run (summary.csv, the figures, the table
        as verdicts.json by mlflow.log_table, which the UI's artifact view shows). Each replaces its earlier copy."""
        rows = rec.named(rec.summary_cells(summary))
        text = f"**{rec.answer(rows)}**\n\n{rec.verdict_table(rows)}\n\n{rec.ABOUT}\n\n{LAYOUT}"
        now = int(time.time() * 1000)
        key = rec.run_key(folder, self.tracked, None)
        tags = {"kind": SUMMARY, "folder": Path(folder).name, "mlflow.note.content": text[:8000]}
        run_id = self._new_run(key, "summary", tags, now + 1)  # on top of the newest-first runs table
        self._log_table(run_id, rec.verdict_columns(rows), "verdicts.json")
        for path in rec.artifacts(folder):
            self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, "FINISHED", now + 1)
        parents = {r["variant"]: self._row_run(folder, r, now - i) for i, r in enumerate(rows)}
        self._nest_seeds(folder, rows, parents)
        self.client.set_experiment_tag(self.experiment_id, "mlflow.note.content", text[:20000])  # MLflow's limit

    def _log_table(self, run_id: str, columns: dict[str, list], name: str) -> None:
        """mlflow.log_table's table (the UI's artifact view shows it), then its file written again in the same
        format at full precision: log_table keeps 10 decimals, where a p of 1e-12 would read 0."""
        import json
        import warnings

        import pandas as pd

        with warnings.catch_warnings():  # MLflow's own select_dtypes call, deprecated by pandas
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            self.client.log_table(run_id, pd.DataFrame(columns), name)
        table = {"columns": list(columns), "data": rec.table_rows(columns)}
        self.client.log_text(run_id, json.dumps(table, allow_nan=False), name)

    def _row_run(self, folder: Path, row: dict[str, str], at: int) -> str:
        """A table row's run: its verdict and reference as tags, its numbers as metrics. Created at `at`, a
        millisecond apart, so that the UI's newest-first table lists the rows in the table's order."""
        tag = rec.row_tag(self.tracked, row)
        tags = {
            "kind": ROW_KIND,
            "folder": Path(folder).name,
            "plan": self.tracked.plan,
            "row": str(tag),
            "verdict": row.get("verdict") or "",
            "reference": row.get("reference") or "",
            "mlflow.note.content": _about(row),
        }
        key = f"{rec.run_key(folder, self.tracked, None)}-row{tag:02d}"
        run_id = self._new_run(key, rec.row_title(row), tags, at)
        self._batch(run_id, metrics=[(k, v, 0) for k, v in rec.row_stats(row).items()])
        self.client.set_terminated(run_id, "FINISHED", at)
        return run_id

    def _nest_seeds(self, folder: Path, rows: list[dict[str, str]], parents: dict[str, str]) -> None:
        """Each seed's run nested under its row's run (MLflow's mlflow.parentRunId), and given its row's verdict
        as a tag: tags.verdict = 'better' finds the runs of the rows that helped. With --lrs, a row's runs at
        the rates the table did not choose are nested too, without a verdict."""
        for record in rec.tracked_records(folder, self.name):
            row, counted = rec.row_of(rows, record)
            if row is None:
                continue
            tags = {"mlflow.parentRunId": parents[row["variant"]]}
            if counted:
                tags["verdict"] = row.get("verdict") or ""
            self._batch(rec.tracked_ids(record)[self.name], tags=tags)

    def close(self) -> None:
        pass


def _about(row: dict[str, str]) -> str:
    """A table row's run description: its verdict and numbers in words, against its reference."""
    stats = rec.row_stats(row)
    against = f" against {row['reference']}" if row.get("reference") else ""
    numbers = ", ".join(f"{k} {stats[k]:.4g}" for k in ("p", "p_adj", "mde") if k in stats)
    pairs = f" from {int(rec._number(row['pairs']))} pairs" if math.isfinite(rec._number(row.get("pairs"))) else ""
    return f"**{rec.row_title(row)}**{against}" + (f"; {numbers}{pairs}." if numbers else ".")
