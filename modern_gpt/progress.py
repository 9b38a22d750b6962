"""Progress displays: a live rich bar on a terminal, nothing (or one plain line per run) in logs."""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def _bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


@contextlib.contextmanager
def run_progress(console: Console, steps: int, description: str):
    """Yields progress(step, loss) for one training run: a bar on a terminal, None otherwise."""
    if not console.is_terminal:
        yield None
        return
    with _bar(console) as bar:
        task = bar.add_task(description, total=steps, status="")

        def progress(step: int, loss: float) -> None:
            bar.update(task, completed=step, status=f"loss {loss:.4f}")

        yield progress
