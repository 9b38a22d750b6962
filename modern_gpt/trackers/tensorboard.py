"""TensorBoard: one event folder per run under the results folder, and the summary's table, figures and numbers."""

from __future__ import annotations

import shutil
from pathlib import Path

from .records import (
    TB_DIR,
    Tracked,
    artifacts,
    curve,
    row_stats,
    row_tag,
    run_metrics,
    run_params,
    run_tags,
    several_lrs,
    slug,
    summary_cells,
)


class TensorBoardBackend:
    """Event files under <folder>/tensorboard/: one TensorBoard run per (row, seed) (its curves as scalars
    against step, its settings and final metrics in the HPARAMS tab), and summary/ for the table."""

    name = "tensorboard"

    def start(self, folder: Path, tracked: Tracked) -> None:
        self.folder, self.tracked = Path(folder), tracked
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
        lr = f"-lr{record['lr']:g}" if several_lrs(self.tracked) and isinstance(record.get("lr"), (int, float)) else ""
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
                for k, v in run_params(self.tracked, record).items()
            }
            for part in hparams(params, metrics):
                writer.file_writer.add_summary(part)
            step = int(record.get("steps_done") or 0)
            for key, value in metrics.items():
                writer.add_scalar(key, value, step)
            writer.add_text("tags", _markdown(run_tags(self.tracked, record, self.folder)), step)
        finally:
            writer.close()
        return str(path.relative_to(self.folder))

    def held(self, ids: list[str]) -> set[str]:
        """Of these run ids (event folders, relative to the results folder), those that still hold events."""
        return {i for i in ids if _has_events(self.root, self.folder / i)}

    def holds_summary(self) -> bool:
        return _has_events(self.root, self.root / "summary")

    @property
    def where(self) -> str:
        return f"in {self.root}"

    def log_summary(self, folder: Path, summary: list) -> None:
        writer = self._fresh(self.root / "summary")
        try:
            rows = summary_cells(summary)
            for row in rows:
                for key, value in row_stats(row).items():
                    name = (
                        f"{key}/{row_tag(self.tracked, row):02d}-{slug(row['variant'])}"  # a stat's rows side by side
                    )
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


def _has_events(root: Path, path: Path) -> bool:
    """An event folder under root (not a hand-edited id that points elsewhere) with an event file in it."""
    path = path.resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_dir():
        return False
    return any(f.is_file() and f.stat().st_size > 0 for f in path.glob("events.out.tfevents.*"))


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
