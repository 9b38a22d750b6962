"""Progress displays: a live rich bar on a terminal. In logs, nothing, or one plain line per run."""

from __future__ import annotations

import contextlib
import math
import threading
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..core.schema import count


def duration(secs: float) -> str:
    if secs < 90:
        return f"{secs:.0f} s"
    if secs < 5400:
        return f"{secs / 60:.0f} min"
    return f"{secs / 3600:.1f} h"


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
def working(console: Console, description: str, after: float = 1.0):
    """A spinner with the time elapsed, on a terminal, for work of unknown length (judge on a large file).
    It shows after `after` seconds, so never for quick work. Nothing in a log or a pipe."""
    if not console.is_terminal:
        yield
        return
    spinner = Progress(SpinnerColumn(), TextColumn(description), TimeElapsedColumn(), console=console, transient=True)
    spinner.add_task(description, total=None)
    lock, done = threading.Lock(), []

    def start() -> None:
        with lock:
            if not done:
                spinner.start()

    timer = threading.Timer(after, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            done.append(True)
            spinner.stop()


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


class AblationDisplay:
    """What an ablation shows while it runs.

    On a terminal: a live bar of runs done, with time left, and one bar per run in
    progress (variant, seed, step, loss). Elsewhere: one plain line per finished run
    on stderr. CI logs stay readable, and stdout stays clean for --format.
    """

    def __init__(self, console: Console, log: Console, variants: list[str], steps: int, live: bool, last_runs=None):
        """last_runs: called once, when runs are left but fewer than train at once. A core is then free."""
        self.console, self.log, self.variants, self.steps, self.live = console, log, variants, steps, live
        self.last_runs = last_runs
        self.bar = _bar(console) if live else None
        self.total = self.done = self.rounds = 0
        self.at_once, self.estimated = 1, False  # runs training at once (set by the ablation); estimate printed
        self.tasks: dict[tuple[int, int], int] = {}

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def start(self, total: int, done: int) -> None:
        """Called once. With --seeds auto, once per round of seeds, as the total grows."""
        self.total, self.done, self.rounds = total, done, self.rounds + 1
        if self.bar and self.rounds > 1:
            self.bar.update(self.overall, total=total, completed=done)
        elif self.bar:
            self.overall = self.bar.add_task("runs", total=total, completed=done, status="")
        elif self.rounds > 1:
            self.log.print(f"another round of seeds: {total - done} more runs", markup=False, highlight=False)
        elif done:
            self.log.print(f"resuming: {done} of {total} runs already finished")

    def step(self, row: int, seed: int, step: int, loss: float) -> None:
        if not self.bar:
            return
        key = (row, seed)
        if key not in self.tasks:
            self.tasks[key] = self.bar.add_task(f"  {self.variants[row]} seed {seed}", total=self.steps, status="")
        self.bar.update(self.tasks[key], completed=step, status=f"loss {loss:.4f}")

    def _estimate(self, record: dict) -> None:
        """Once, after the first run that trained: how long the runs left will take, at its pace."""
        left = self.total - self.done
        if self.estimated or record["error"] or record["diverged"] or not record["secs"] or left <= 0:
            return
        self.estimated = True
        secs = record["secs"] * math.ceil(left / max(1, self.at_once))
        pace = f"{self.at_once} at a time" if self.at_once > 1 else "one at a time"
        (self.console if self.bar else self.log).print(
            f"first run: {record['secs']:.1f} s; the {left} runs left take about {duration(secs)} ({pace})",
            markup=False,
            highlight=False,
        )

    def finished(self, record: dict) -> None:
        self.done += 1
        self._estimate(record)
        if self.last_runs is not None and 0 < self.total - self.done < self.at_once:
            self.last_runs()
            self.last_runs = None
        key = (record["row"], record["seed"])
        if self.bar:
            if key in self.tasks:
                self.bar.remove_task(self.tasks.pop(key))
            self.bar.update(self.overall, completed=self.done)
            return
        if record["error"]:
            outcome = record["error"]
        elif record["diverged"]:
            outcome = f"diverged after {count(record['steps_done'], 'step')}"
        else:
            outcome = f"val {record['val_loss']:.4f}  train {record['train_loss']:.4f}"
        self.log.print(
            f"[{self.done}/{self.total}] {self.variants[record['row']]} seed {record['seed']}: {outcome}  "
            f"({record['secs']:.1f} s)",
            highlight=False,
            markup=False,
        )


def ablation_display(ablation, console: Console, log: Console) -> AblationDisplay:
    """The display of an ablation about to train (running.Ablation). The run count and its folder go to log.
    Then bars on a terminal, plain lines elsewhere. curves.png's import is warmed while the last runs train."""
    from ..ablation.plot import warm

    spec, folder = ablation.spec, ablation.results.path
    log.print(run_count(spec, ablation.total, folder), markup=False, highlight=False)
    names = run_names(spec)
    return AblationDisplay(console, log, names, spec.settings.train.steps, console.is_terminal, last_runs=warm)


def run_count(spec, total: int, folder: Path) -> str:
    """Printed before the first run: the rows, learning rates and seeds, their product, and the folder."""
    rows = f"{len(spec.table_variants)} rows x " + (f"{len(spec.lrs)} learning rates x " if spec.lrs else "")
    seeds = (
        f"{spec.min_seeds} to {len(spec.seeds)} seeds (--seeds auto)" if spec.sequential else f"{len(spec.seeds)} seeds"
    )
    return f"{spec.plan}: {rows}{seeds} = {total} runs -> {folder}"


def run_names(spec) -> list[str]:
    """The progress display's name of each run row: the variant, and its learning rate with --lrs."""
    return [v.name if v.lr is None else f"{v.name} lr {v.lr:g}" for v in spec.variants]


def display_of(progress: bool | None):
    """The live display on stderr for session.run_ablation and run_ladder, or None (quiet). progress=None
    shows it when stderr is a terminal or in IPython."""
    import sys

    if progress is None:
        shell = sys.modules.get("IPython")
        progress = sys.stderr.isatty() or (shell is not None and shell.get_ipython() is not None)
    if not progress:
        return None
    err = Console(stderr=True)
    return lambda ablation: ablation_display(ablation, err, err)
