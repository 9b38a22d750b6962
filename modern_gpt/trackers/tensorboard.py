"""TensorBoard: one event folder per run under the results folder, and summary/ for the table. summary/ holds
the answer chart, the verdict text, each row's numbers as scalars and CUSTOM SCALARS' margin charts."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

from ..core.components import COMPONENTS
from ..core.errors import UserError
from . import records as rec

VERDICTS = "Verdicts"  # the text and the charts' sections: capitalised, they sort before the lower-case ones
# HPARAMS shows the first five hparams that differ between runs: variant and verdict must be among them, so the
# run's parameter count and MLP width go to its text, its switches are one column (components), lr is train.lr
FACTS = ("params", "mlp_width")
SWITCHES = {f"model.{c}" for c in COMPONENTS}
HPARAMS = ".hparams"  # the suffix of a run's event file of hparams, written again with its row's verdict
SERIES = ("delta_val", "ci_low", "ci_high")


class TensorBoardBackend:
    name = "tensorboard"

    def start(self, folder: Path, tracked: rec.Tracked) -> None:
        self.folder, self.tracked = Path(folder), tracked
        self.root = self.folder / rec.TB_DIR
        _in_the_way(self.root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _fresh(self, path: Path):
        """A writer of a folder emptied of what an earlier, interrupted attempt wrote, so no point is doubled."""
        from torch.utils.tensorboard import SummaryWriter

        _in_the_way(path)
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return SummaryWriter(log_dir=str(path))

    def run_dir(self, record: dict) -> Path:
        lr = record.get("lr")
        lr = f"-lr{lr:g}" if rec.several_lrs(self.tracked) and isinstance(lr, (int, float)) else ""
        return self.root / f"{record['row']:02d}-{rec.slug(record['variant'])}{lr}" / f"seed{record['seed']}"

    def log_run(self, record: dict) -> str:
        """The run's curve and final metrics as scalars, its tags as text, its settings in HPARAMS."""
        path = self.run_dir(record)
        writer = self._fresh(path)
        try:
            for step, name, value in rec.curve(record):
                writer.add_scalar(name, value, step)
            step = int(record.get("steps_done") or 0)
            for key, value in rec.run_metrics(record).items():
                writer.add_scalar(f"final/{key}", value, step)
            tags = {**rec.run_tags(self.tracked, record, self.folder), **{k: record.get(k) for k in FACTS}}
            writer.add_text("tags", "\n".join(f"- {k}: {v}" for k, v in tags.items() if v is not None), step)
        finally:
            writer.close()
        self._hparams(path, record)
        return str(path.relative_to(self.folder))

    def _hparams(self, path: Path, record: dict, verdict: str | None = None) -> None:
        """The run's HPARAMS entry, in an event file of its own: settings and variant against its final metrics.
        Once the table is written, its row's verdict joins them. TensorBoard reads a run's first hparams only, so
        the file is then replaced."""
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        for old in path.glob(f"events.out.tfevents.*{HPARAMS}"):
            old.unlink()
        params = {
            k: v if isinstance(v, (int, float, str, bool)) else str(v)
            for k, v in rec.run_params(self.tracked, record).items()
            if k not in FACTS and k not in SWITCHES and not (k == "train.lr" and "lr" in record)
        }
        if verdict is not None:
            params["verdict"] = verdict
        writer = SummaryWriter(log_dir=str(path), filename_suffix=HPARAMS)
        try:
            _, start, end = hparams(params, {f"final/{k}": v for k, v in rec.run_metrics(record).items()})
            for part in (start, end):  # no experiment summary: TensorBoard then lists first what differs
                writer.file_writer.add_summary(part)
        finally:
            writer.close()

    def log_summary(self, folder: Path, rows: list, metrics: list, margins: rec.Margins | None = None) -> None:
        """summary/: the answer chart (TIME SERIES' first card), the verdict tables (the Text tab's first entry), and
        each row's numbers as scalars (row/NN-variant/delta_val, .../code_loss.delta, ...). Also CUSTOM SCALARS'
        margin charts and the figures. Then each seed's HPARAMS entry gets its row's verdict."""
        writer = self._fresh(self.root / "summary")
        try:
            if rows:  # "answer" sorts before the runs' curve/ and final/ cards
                writer.add_image("answer", _answer_image(rows), 0, dataformats="HWC")
                table = rec.verdict_table(rows, metrics)
                writer.add_text(VERDICTS, f"**{rec.answer(rows)}**\n\n{table}\n\n{rec.ABOUT}", 0)
            layout = self._scalars(writer, rows, metrics, margins or rec.Margins())
            if layout:
                writer.add_custom_scalars(layout)
            for path in rec.artifacts(folder):
                if path.suffix == ".png":
                    import matplotlib.image

                    writer.add_image(path.stem, matplotlib.image.imread(path)[..., :3], 0, dataformats="HWC")
        finally:
            writer.close()
        for record in rec.tracked_records(folder, self.name):
            row, counted = rec.row_of(rows, record)
            self._hparams(self.folder / rec.tracked_ids(record)[self.name], record, row["verdict"] if counted else "")

    def _scalars(self, writer, rows: list[dict], metrics: list[dict], margins: rec.Margins) -> dict:
        """Each row's numbers as scalars, and the custom scalars layout. One chart holds every row's Δ and CI (step:
        the run row). Then a chart per row, named by its verdict, across its looks or learning rates if several."""
        everyone, charts, steps = [f"table/{k}" for k in SERIES], {}, []  # lower case: after the runs' curves
        for row in rows:
            stats, tag = rec.row_stats(row), rec.row_tag(self.tracked, row)
            name = f"{tag:02d}-{rec.slug(row['variant'])}"
            for key, value in {**stats, **rec.metric_stats(metrics, row["variant"])[0]}.items():
                writer.add_scalar(f"row/{name}/{key}", value, 0)
            if "ci_low" not in stats:
                continue
            for key, value in zip(everyone, (stats[k] for k in SERIES), strict=True):
                writer.add_scalar(key, value, tag)
            steps.append(f"{tag} = {row['variant']}")
            series, points = [f"row/{name}/{k}" for k in SERIES], margins.of(row["variant"])
            if len(points) > 1:
                series = [f"margin/{name}/{k}" for k in SERIES]
                for step, *values in points:
                    for key, value in zip(series, values, strict=True):
                        writer.add_scalar(key, value, step)
            charts[rec.row_title(row) + (f" ({margins.axis_text()})" if len(points) > 1 else "")] = ["Margin", series]
        if not charts:
            return {}
        title = f"every row: Δ val and its 95% CI against the row's reference (step {', '.join(steps)})"
        by_row = {title: ["Margin", everyone]}
        in_order = dict(reversed(charts.items()))  # CUSTOM SCALARS draws a section's charts last first
        return {f"{VERDICTS}: {rec.answer(rows)}": by_row, f"{VERDICTS} by row": in_order}


def _in_the_way(path: Path) -> None:
    """Names a file where an event folder, or a folder above it, goes. Logging again would fail the same way."""
    for p in (path, *path.parents):
        if os.path.lexists(p) and not p.is_dir():
            raise UserError(f"{p} is a file where TensorBoard writes an event folder; move or delete it first")


def _answer_image(rows: list[dict[str, str]]):
    """Each row's Δ val and 95% CI, named on the left, its verdict on the right, under the one-line answer.
    An RGB array for add_image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.45 * len(rows)), dpi=100)
    try:
        for y, row in enumerate(rows):
            s = rec.row_stats(row)
            if "ci_low" in s:
                error = [[s["delta_val"] - s["ci_low"]], [s["ci_high"] - s["delta_val"]]]
                ax.errorbar(s["delta_val"], y, xerr=error, fmt="o", color="black", capsize=3)
            verdict = row.get("verdict") or ("reference" if not row.get("reference") else "")
            ax.annotate(verdict, (1.01, y), xycoords=("axes fraction", "data"), va="center")
        ax.axvline(0, color="grey", linewidth=0.8)
        ax.set_yticks(range(len(rows)), [r["variant"] for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)  # the table's order, top to bottom
        ax.set_xlabel("Δ val loss against the row's reference (nats; below 0 is better), 95% CI")
        ax.set_title(textwrap.fill(rec.answer(rows), 100), fontsize=9, loc="left")
        fig.tight_layout()
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    finally:
        plt.close(fig)
