"""Each table row's Δ and 95% CI at more than one point, for the trackers' margin charts (trackers.records.Margins).
With --seeds auto, a point per look, on the seeds it saw. With --lrs, a point per learning rate, every row at it.
Computed as the table is (verdict.table's lr_view and summarize): the last look's points are the table's own.
A look's interval is its plain 95% CI, not the boundary the verdict was held to."""

from __future__ import annotations

from dataclasses import replace

from ..trackers.records import Margins
from ..verdict.table import lr_view, summarize
from .report import design_of
from .results import ResultsDir


def margins(folder) -> Margins:
    """The folder's margins (folder: a path or its ResultsDir). Empty for a table of one point per row."""
    results = folder if isinstance(folder, ResultsDir) else ResultsDir(folder)
    design = design_of(results.read_meta(), results.spec, results.path)
    runs = results.scan().runs()
    looks = [look["seeds"] for look in (design.looks or {}).get("looks", [])]
    if design.sequential and len(looks) > 1:
        fixed = replace(design, min_seeds=None, looks=None)  # each look's own Δ and CI, without replaying looks
        tables = [summarize(*lr_view(fixed, runs[runs["seed"].isin(design.seeds[:n])])) for n in looks]
        return _margins("pairs", tuple(looks), (), tables)
    if design.lrs and len(design.lrs) > 1:
        tables = [summarize(*lr_view(design, runs, lr)) for lr in design.lrs]
        return _margins("lr", tuple(range(len(design.lrs))), tuple(design.lrs), tables)
    return Margins()


def _margins(axis: str, steps: tuple[int, ...], lrs: tuple[float, ...], tables: list) -> Margins:
    rows: dict[str, list] = {}
    for table in tables:
        for r in table:
            rows.setdefault(r.variant, []).append((float(r.delta_val), float(r.ci_low), float(r.ci_high)))
    return Margins(axis, steps, lrs, {k: tuple(v) for k, v in rows.items()})
