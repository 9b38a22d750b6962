"""The trackers of one ablation, or one `train`. Each finished run goes to every backend still working,
then the summary at the end. The report gets footnotes for what a tracker lacks."""

from __future__ import annotations

import datetime as dt
import importlib
import shlex
import sys
from pathlib import Path

from ..core.config import check_names
from .checks import mlflow_uri, store_id
from .records import TRAIN, Margins, Tracked, error_line, metric_cells, summary_cells, tracked_ids, tracking_state

BACKENDS = {"tensorboard": "TensorBoardBackend", "mlflow": "MlflowBackend", "wandb": "WandbBackend"}


def backend(name: str, mlflow_uri_given: str | None = None):
    """The backend of a tracker's name, imported from trackers/NAME.py only when asked for. It has start(folder,
    tracked), log_run(record) -> its run id, log_summary(folder, rows, metrics, margins) (the cells of summary.csv
    and metrics.csv); W&B's also close()."""
    made = getattr(importlib.import_module(f"{__package__}.{name}"), BACKENDS[name])
    return made(mlflow_uri_given) if name == "mlflow" else made()


def warn(text: str) -> None:
    print(f"modern-gpt: warning: {text}", file=sys.stderr)


class Tracking:
    """The backends an ablation logs to. One that raises is switched off with a warning. Its error is kept in
    meta.json's tracking, then a footnote. A tracker's failure never stops or loses a run."""

    def __init__(self, on_warning=warn, mlflow_uri_given: str | None = None, folder: Path | str = "DIR"):
        self.backends: list = []
        self.errors: dict[str, str] = {}
        self.on_warning, self.mlflow_uri_given, self.folder = on_warning, mlflow_uri_given, folder

    @classmethod
    def open(cls, names, mlflow_uri_given: str | None, folder: Path, meta: dict | Tracked, on_warning=warn) -> Tracking:
        """The trackers asked for, started on a results folder (meta: its meta.json) or on train's one run."""
        tracked = meta if isinstance(meta, Tracked) else Tracked.of(meta)
        tracking = cls(on_warning, mlflow_uri_given, Path(folder))
        for name in check_names(names):
            b = backend(name, mlflow_uri_given)
            tracking.backends.append(b)
            tracking._safely(b, b.start, folder, tracked)
        return tracking

    @property
    def names(self) -> list[str]:
        return [b.name for b in self.backends]

    def _safely(self, b, call, *args):
        try:
            return call(*args)
        except Exception as e:
            self.errors[b.name] = error_line(e)
            again = push(b.name, self.folder, self.state([b.name])[b.name].get("uri"))
            self.on_warning(f"{b.name} failed ({self.errors[b.name]}); the ablation goes on without it. {again}")
            self.backends.remove(b)
            return None

    def log(self, record: dict) -> dict[str, str]:
        """One finished run to every backend whose id its file lacks. Returns its ids so far, by tracker."""
        ids = tracked_ids(record)
        for b in [b for b in self.backends if b.name not in ids]:
            run_id = self._safely(b, b.log_run, record)
            if isinstance(run_id, str):
                ids[b.name] = run_id
        return ids

    def finish(self, folder: Path, summary: list, margins: Margins | None = None, backends=None) -> None:
        """The summary to every backend (or those given): each row's verdicts, the figures, the margins of --seeds
        auto or --lrs. The cells of summary.csv and metrics.csv are made once, for every backend."""
        rows, metrics = summary_cells(summary), metric_cells(folder)
        for b in list(self.backends if backends is None else backends):
            self._safely(b, b.log_summary, folder, rows, metrics, margins)

    def close(self) -> None:
        for b in [b for b in self.backends if hasattr(b, "close")]:
            self._safely(b, b.close)
        self.backends = []

    def state(self, names) -> dict[str, dict]:
        """meta.json's tracking: per tracker, its error (None while it works). MLflow's has its run ids' store."""
        store = {"mlflow": {"uri": store_id(mlflow_uri(self.mlflow_uri_given)[0])}}
        return {name: {"error": self.errors.get(name), **store.get(name, {})} for name in check_names(names)}


def log_train(names, mlflow_uri_given: str | None, folder: Path, settings, seed: int, metrics: dict) -> dict[str, str]:
    """`modern-gpt train --track`'s one run, in MLflow's "modern-gpt train" experiment and the checkpoint's
    tensorboard/. Returns its ids by tracker."""
    components = "+".join(settings.model.components)
    record = {**metrics, "row": 0, "seed": seed, "variant": components or "classic", "components": components}
    tracked = Tracked(settings.to_dict(), TRAIN, dt.datetime.now().isoformat())
    tracking = Tracking.open(names, mlflow_uri_given, Path(folder), tracked)
    try:
        return tracking.log({**record, "lr": settings.train.lr})
    finally:
        tracking.close()


def push(name: str, folder: Path | str = "DIR", uri: str | None = None) -> str:
    """The command that logs what a tracker lacks. MLflow's logs into the store its runs are in (uri)."""
    store = f" --mlflow-uri {shlex.quote(uri)}" if name == "mlflow" and isinstance(uri, str) else ""
    return f"modern-gpt report {shlex.quote(str(folder))} --track {name}{store} logs what is missing."


def notes(meta: dict, records: dict, folder: Path | str) -> list[str]:
    """The report's footnotes: per tracker asked for, the runs it does not hold and why."""
    out = []
    for name, state in tracking_state(meta).items():
        missing = [r for r in records.values() if not tracked_ids(r).get(name)]
        error = state.get("error")
        if missing or error:
            why = f" ({str(error).rstrip('.')})" if error else ""
            what = f"{len(missing)} of {len(records)} runs are not in {name}" if missing else f"{name} failed"
            out.append(f"{what}{why}; {push(name, folder, state.get('uri'))}")
    return out
