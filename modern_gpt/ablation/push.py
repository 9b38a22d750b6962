"""`modern-gpt report DIR --track NAME`: a results folder pushed to a tracker after the fact, once. It logs what a
tracker that failed midway, or was not asked for, left out."""

from __future__ import annotations

from pathlib import Path

from ..core.config import check_names
from ..core.errors import UserError
from ..core.files import write_json
from ..trackers.checks import check, other_store
from ..trackers.records import tracked_ids, tracking_state
from ..trackers.tracking import Tracking, notes
from .margins import margins
from .report import write
from .results import ResultsDir


def push_folder(folder: Path, names, mlflow_uri_given: str | None = None) -> dict[str, tuple[int, bool]]:
    """Log each finished run whose file has no id of that tracker, record the ids, then log the summary. A run is
    logged by its key, so an earlier, interrupted copy is replaced. The summary goes again only when runs were
    added or meta.json records none: a second push logs nothing. Returns, by tracker, the runs logged and whether
    the summary was. The folder is locked meanwhile, so an ablation still writing it is refused. A tracker that
    fails is one sentence, after the rest is pushed."""
    results = ResultsDir(folder)
    meta = results.read_meta()  # not a results folder: one sentence
    names = check_names(names)
    check(names, mlflow_uri_given)
    results.lock()
    try:
        records = results.finished()
        if "mlflow" in names and other_store(meta, mlflow_uri_given):  # another store: every run is logged there
            for record in records.values():
                record["tracked"] = {k: v for k, v in tracked_ids(record).items() if k != "mlflow"}
        quiet = lambda text: None  # noqa: E731 (a failure is the one sentence raised below)
        tracking = Tracking.open(names, mlflow_uri_given, results.path, meta, on_warning=quiet)
        logged = dict.fromkeys(names, 0)
        for key in sorted(records, key=lambda rs: (rs[1], rs[0])):  # seed-major, as an ablation runs them
            before = tracked_ids(records[key])
            ids = tracking.log(records[key])
            if ids != before:
                records[key]["tracked"] = ids
                write_json(results.run_file(*key), records[key])
                for name in ids.keys() - before.keys():
                    logged[name] += 1
        state = tracking_state(meta)
        stale = [b for b in tracking.backends if logged[b.name] or not (state.get(b.name) or {}).get("summary")]
        if stale:  # summary.csv and curves.png of the runs it holds now
            tracking.finish(results.path, write(results.path), margins(results), stale)
        tracking.close()
        done = {b.name for b in stale if b.name not in tracking.errors}
        for name in names:
            summary = name in done or (name not in tracking.errors and bool((state.get(name) or {}).get("summary")))
            state[name] = {**tracking.state([name])[name], "summary": summary}
        meta["tracking"] = state
        results.write_meta(meta)
    finally:
        results.unlock()
    if tracking.errors:
        failed = {"tracking": {name: state[name] for name in tracking.errors}}
        raise UserError(" ".join(notes(failed, records, results.path)))
    return {name: (logged[name], name in done) for name in names}
