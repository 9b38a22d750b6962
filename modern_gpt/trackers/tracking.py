"""The trackers of one ablation (or one `train`): the backends opened by name, each finished run logged to every
one still working, the summary at the end, and the footnotes for what a tracker lacks. The package's docstring
says where each tracker puts an ablation."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Protocol

from ..core.config import check_names
from .checks import mlflow_uri, store_id
from .records import Margins, Tracked, first_line, tracked_ids, tracking_state


class Backend(Protocol):
    name: str

    def start(self, folder: Path, tracked: Tracked) -> None: ...
    def log_run(self, record: dict) -> str: ...  # the tracker's run id
    def log_summary(self, folder: Path, summary: list, margins: Margins | None = None) -> None: ...  # SummaryRow's
    def close(self) -> None: ...


def backend(name: str, mlflow_uri_given: str | None = None) -> Backend:
    """The backend of a tracker's name (core.config.TRACKERS), from its own module: trackers/NAME.py."""
    if name == "tensorboard":
        from .tensorboard import TensorBoardBackend

        return TensorBoardBackend()
    if name == "mlflow":
        from .mlflow import MlflowBackend

        return MlflowBackend(mlflow_uri_given)
    from .wandb import WandbBackend

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
    def open(cls, names, mlflow_uri_given: str | None, folder: Path, meta: dict | Tracked, on_warning=warn) -> Tracking:
        """The trackers asked for, started on a results folder (meta: its meta.json) or on what else is tracked
        (train's one run); one that fails to start is a warning and an error kept."""
        tracked = meta if isinstance(meta, Tracked) else Tracked.of(meta)
        tracking = cls([], on_warning, mlflow_uri_given)
        tracking.folder = Path(folder)
        for name in check_names(names):
            b = backend(name, mlflow_uri_given)
            if tracking._safely(b, b.start, folder, tracked):
                tracking.backends.append(b)
        return tracking

    @property
    def names(self) -> list[str]:
        return [b.name for b in self.backends]

    def _safely(self, b: Backend, call, *args):
        try:
            return call(*args) or True
        except Exception as e:  # a tracker's failure never stops or loses a run
            self.errors[b.name] = first_line(e)
            again = push(b.name, self.folder, self.state([b.name])[b.name].get("uri"))
            self.on_warning(f"{b.name} failed ({self.errors[b.name]}); the ablation goes on without it. {again}")
            if b in self.backends:
                self.backends.remove(b)
            return None

    def log(self, record: dict) -> dict[str, str]:
        """Log one finished run to every backend whose id its file lacks (a backend replaces what an earlier,
        interrupted attempt logged under the run's key); returns its ids so far, by tracker."""
        ids = tracked_ids(record)
        for b in list(self.backends):
            if b.name not in ids:
                run_id = self._safely(b, b.log_run, record)
                if isinstance(run_id, str):
                    ids[b.name] = run_id
        return ids

    def finish(self, folder: Path, summary: list, margins: Margins | None = None) -> None:
        """The ablation's summary (summary.csv, the figures, each row's verdict, and with --seeds auto or --lrs
        each row's Δ and CI at each look or rate) to every backend still open."""
        for b in list(self.backends):
            self._safely(b, b.log_summary, folder, summary, margins)

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
    tracked = Tracked.train(settings.to_dict(), dt.datetime.now().isoformat())
    tracking = Tracking.open(names, mlflow_uri_given, Path(folder), tracked)
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
