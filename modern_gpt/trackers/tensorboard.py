"""TensorBoard: one event folder per run under the results folder, and the summary's table, charts and figures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..core.components import COMPONENTS
from ..core.errors import UserError
from . import records as rec

VERDICTS = "Verdicts"  # the text and the charts' sections: capitalised, they sort before the lower-case ones
# Of a run's settings, those HPARAMS leaves out (the run's text tab has them): it shows the first five hparams
# that differ between runs, by name, and variant and verdict must be among them (lr stands for train.lr).
FACTS = ("params", "mlp_width")
SWITCHES = {f"model.{c}" for c in COMPONENTS}  # the components hparam names them: one column, not six
HPARAMS = ".hparams"  # the suffix of a run's event file of hparams, written again with its row's verdict


class TensorBoardBackend:
    """Event files under <folder>/tensorboard/: one TensorBoard run per (row, seed) (its curves as scalars
    against step, its settings, variant and row's verdict against its final metrics in the HPARAMS tab), and
    summary/ for the table (log_summary)."""

    name = "tensorboard"

    def start(self, folder: Path, tracked: rec.Tracked) -> None:
        self.folder, self.tracked = Path(folder), tracked
        self.root = self.folder / rec.TB_DIR
        _in_the_way(self.root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _fresh(self, path: Path):
        """A writer of a folder emptied of what an earlier, interrupted attempt wrote (no duplicate points)."""
        from torch.utils.tensorboard import SummaryWriter

        _in_the_way(path)
        if path.is_dir():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return SummaryWriter(log_dir=str(path))

    def run_dir(self, record: dict) -> Path:
        lr = (
            f"-lr{record['lr']:g}"
            if rec.several_lrs(self.tracked) and isinstance(record.get("lr"), (int, float))
            else ""
        )
        return self.root / f"{record['row']:02d}-{rec.slug(record['variant'])}{lr}" / f"seed{record['seed']}"

    def log_run(self, record: dict) -> str:
        path = self.run_dir(record)
        writer = self._fresh(path)
        try:
            for step, name, value in rec.curve(record):
                writer.add_scalar(name, value, step)
            step = int(record.get("steps_done") or 0)
            for key, value in rec.run_metrics(record).items():
                writer.add_scalar(f"final/{key}", value, step)
            facts = {k: record[k] for k in FACTS if record.get(k) is not None}
            writer.add_text("tags", _markdown({**rec.run_tags(self.tracked, record, self.folder), **facts}), step)
        finally:
            writer.close()
        self._hparams(path, record)
        return str(path.relative_to(self.folder))

    def _hparams(self, path: Path, record: dict, verdict: str | None = None) -> None:
        """The run's HPARAMS entry: its settings, variant (and, once the table is written, its row's verdict)
        against its final metrics, in an event file of its own (*.hparams), replaced when the verdict comes:
        TensorBoard reads a run's first hparams and no later one."""
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

    def log_summary(self, folder: Path, summary: list, margins: rec.Margins | None = None) -> None:
        """summary/: the verdict table (the first entry of the Text tab), each row's numbers as scalars
        (row/NN-variant/delta_val, ...), and CUSTOM SCALARS' layout: a margin chart of every row's Δ and CI
        (step = the run row), and one per row named by its verdict (across the looks of --seeds auto or the
        learning rates of --lrs, where there are several); the figures under Images; and each seed's HPARAMS
        entry given its row's verdict."""
        rows = rec.named(rec.summary_cells(summary))
        margins = margins or rec.Margins()
        writer = self._fresh(self.root / "summary")
        try:
            if rows:
                # TIME SERIES, the page TensorBoard opens on, lists its cards by tag: "answer" comes before the
                # curves, so the first card is the table as a chart, each row named, with its verdict
                writer.add_image("answer", _answer_image(rows), 0, dataformats="HWC")
                title = f"**{rec.answer(rows)}**"
                writer.add_text(VERDICTS, f"{title}\n\n{rec.verdict_table(rows)}\n\n{rec.ABOUT}", 0)
                writer.add_text("summary.csv", _table(rows), 0)
            layout = self._scalars(writer, rows, margins)
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

    def _scalars(self, writer, rows: list[dict[str, str]], margins: rec.Margins) -> dict:
        """Each row's numbers as scalars, and the custom scalars layout that charts them."""
        # lower case: TIME SERIES, which TensorBoard opens on, lists its groups by name, the runs' curves first
        everyone = [f"table/{k}" for k in ("delta_val", "ci_low", "ci_high")]
        charts = {}
        for row in rows:
            stats, tag = rec.row_stats(row), rec.row_tag(self.tracked, row)
            name = f"{tag:02d}-{rec.slug(row['variant'])}"
            for key, value in stats.items():
                writer.add_scalar(f"row/{name}/{key}", value, 0)
            if "ci_low" not in stats:
                continue
            for key, value in zip(everyone, (stats["delta_val"], stats["ci_low"], stats["ci_high"]), strict=True):
                writer.add_scalar(key, value, tag)
            series = [f"row/{name}/{k}" for k in ("delta_val", "ci_low", "ci_high")]
            points = margins.of(row["variant"])
            if len(points) > 1:
                series = [f"margin/{name}/{k}" for k in ("delta_val", "ci_low", "ci_high")]
                for step, *values in points:
                    for key, value in zip(series, values, strict=True):
                        writer.add_scalar(key, value, step)
            charts[rec.row_title(row) + (f" ({margins.axis_text()})" if len(points) > 1 else "")] = ["Margin", series]
        if not charts:
            return {}
        steps = ", ".join(
            f"{rec.row_tag(self.tracked, r)} = {r['variant']}" for r in rows if "ci_low" in rec.row_stats(r)
        )
        by_row = {f"every row: Δ val and its 95% CI against the row's reference (step {steps})": ["Margin", everyone]}
        in_order = dict(reversed(charts.items()))  # CUSTOM SCALARS draws a section's charts last first
        return {f"{VERDICTS}: {rec.answer(rows)}": by_row, f"{VERDICTS} by row": in_order}

    def close(self) -> None:
        pass


def _in_the_way(path: Path) -> None:
    """Something other than a folder where an event folder (or a folder above it) goes: one sentence naming it
    (logging again would fail the same way until it is moved)."""
    for p in (path, *path.parents):
        if os.path.lexists(p) and not p.is_dir():
            raise UserError(f"{p} is a file where TensorBoard writes an event folder; move or delete it first")


def _answer_image(rows: list[dict[str, str]]):
    """Each row's Δ val and 95% CI against its reference, the row named on the left and its verdict on the
    right, under the table's answer in one line: an RGB array for add_image."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")  # files only: no screen needed
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.45 * len(rows)), dpi=100)
    try:
        for y, row in enumerate(rows):
            stats = rec.row_stats(row)
            if "ci_low" in stats:
                low, high = stats["delta_val"] - stats["ci_low"], stats["ci_high"] - stats["delta_val"]
                ax.errorbar(stats["delta_val"], y, xerr=[[low], [high]], fmt="o", color="black", capsize=3)
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
