"""MLflow: one experiment per results folder, one run per (row, seed) and a summary run."""

from __future__ import annotations

import re
import time
from pathlib import Path

from ..core.errors import UserError
from .checks import _local_store, mlflow_uri
from .records import (
    TRAIN,
    TRAIN_EXPERIMENT,
    Tracked,
    _number,
    artifacts,
    curve,
    row_stats,
    row_tag,
    run_key,
    run_metrics,
    run_name,
    run_params,
    run_tags,
    run_times,
    slug,
    summary_cells,
    tracked_ids,
)


class MlflowBackend:
    """One MLflow experiment per results folder (named after it), one run per (row, seed), and a run named
    "summary". An experiment rather than a parent run with nested runs: it is what MLflow's UI compares and
    searches (the runs table, tags.verdict = 'better'), and a resume or report --track adds to it without a
    parent run to reopen."""

    name = "mlflow"

    def __init__(self, uri: str | None = None):
        self.uri, _ = mlflow_uri(uri)

    def start(self, folder: Path, tracked: Tracked) -> None:
        from mlflow import MlflowClient

        self.folder, self.tracked = Path(folder), tracked
        self.client = MlflowClient(self.uri)
        train = tracked.plan == TRAIN
        self.experiment_id = self._experiment(TRAIN_EXPERIMENT if train else self.folder.name, shared=train)

    def _experiment(self, name: str, shared: bool) -> str:
        """The folder's experiment: made once, found again on resume; a name another folder took (or a deleted
        experiment holds) gets the time the folder was started added. shared: every `train` run's one."""
        owner = "" if shared else f"{self.folder.resolve()}|{self.tracked.started}"
        for attempt in (name, f"{name} ({self.tracked.started})"):
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
        tags = run_tags(self.tracked, record, self.folder)
        start, end = run_times(record)
        run_id = self._new_run(tags.pop("modern_gpt.key"), run_name(self.tracked, record), tags, start)
        step = int(record.get("steps_done") or 0)
        points = [(name, value, s) for s, name, value in curve(record)]
        points += [(k, v, step) for k, v in run_metrics(record).items()]
        # variant, seed and lr are tags alone: MLflow's UI downloads its runs table as a CSV whose columns are the
        # bare keys of params, metrics and tags, where a key logged as both is a column named twice
        params = {k: v for k, v in run_params(self.tracked, record).items() if k not in tags}
        self._batch(run_id, params=params, metrics=points)
        self.client.set_terminated(run_id, "FAILED" if record.get("error") else "FINISHED", end)
        return run_id

    def held(self, ids: list[str]) -> set[str]:
        """Of these run ids, those the folder's experiment holds, not deleted and terminated (a run deleted in
        MLflow's UI, or a store deleted and made again, holds none of them)."""
        from mlflow.entities import ViewType

        ids = [i for i in ids if re.fullmatch(r"[A-Za-z0-9_-]+", i)]  # a hand-edited id is no run (nor a quote)
        out = set()
        for at in range(0, len(ids), 100):  # an IN list of 100 per search
            names = ", ".join(f"'{i}'" for i in ids[at : at + 100])
            runs = self.client.search_runs(
                [self.experiment_id], f"attributes.run_id IN ({names})", ViewType.ACTIVE_ONLY, max_results=100
            )
            out.update(r.info.run_id for r in runs if r.info.status in ("FINISHED", "FAILED"))
        return out

    def holds_summary(self) -> bool:
        key = run_key(self.folder, self.tracked, None)
        runs = self.client.search_runs([self.experiment_id], f"tags.`modern_gpt.key` = '{key}'")
        return any(r.info.status == "FINISHED" for r in runs)

    @property
    def where(self) -> str:
        return f"in the store {self.uri}"

    def log_summary(self, folder: Path, summary: list, margins=None) -> None:
        rows = summary_cells(summary)
        run_id = self._new_run(
            run_key(folder, self.tracked, None), "summary", {"kind": "summary", "folder": Path(folder).name}
        )
        metrics, tags = [], {}
        for row in rows:
            at = f"row{row_tag(self.tracked, row):02d}"
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
