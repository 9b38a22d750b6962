"""The figures of a results folder. curves.png: validation loss against step, the mean over seeds and a min-max
band, one colour per run row. For a folder trained at several learning rates, lr.png: final val loss against
learning rate, one line per table row."""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd

from ..core.files import atomic_path
from ..verdict.design import Design
from ..verdict.table import failed
from .planning import Spec


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no screen needed
    import matplotlib.pyplot as plt

    return plt


def warm() -> None:
    """Import matplotlib (about 0.4 s) in a background thread, once. It is called while the last runs train and a
    core is free (progress.AblationDisplay), so the figures that follow them start at once."""
    if not _warming:
        _warming.append(threading.Thread(target=_pyplot, name="import matplotlib", daemon=True))
        _warming[0].start()


_warming: list[threading.Thread] = []


def plot_curves(spec: Spec, design: Design, runs: pd.DataFrame, curves: pd.DataFrame, path: Path) -> Path:
    plt = _pyplot()
    # Runs that diverged or failed are left out, as they are of the table's means.
    good = runs[~failed(runs)][["row", "seed"]]
    curves = curves.merge(good, on=["row", "seed"])
    seeds = runs["seed"].nunique()
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    for row, variant in enumerate(design.rows):
        mine = curves[curves["row"] == row].groupby("step")["val_loss"]
        if not len(mine):
            continue
        mean = mine.mean()
        lr = f" at lr {variant.lr:g}" if variant.lr is not None else ""
        (line,) = ax.plot(
            mean.index,
            mean.values,
            marker="o",
            markersize=3,
            label=f"{variant.name}{lr} ({variant.params:,} params)",
        )
        if seeds > 1:
            ax.fill_between(
                mean.index, mine.min().values, mine.max().values, color=line.get_color(), alpha=0.18, linewidth=0
            )
    model = spec.settings.model
    ax.set_title(
        f"{spec.plan} on {spec.data_name}: dim {model.dim}, {model.layers} layers, "
        f"{design.rows[0].params:,} params\nvalidation loss, {_over_seeds(seeds)}"
    )
    return _finish(fig, ax, "training step", spec, path)


def plot_lrs(spec: Spec, design: Design, runs: pd.DataFrame, path: Path) -> Path:
    """lr.png: final val loss (test half) against learning rate on a log axis. One line per table row, with its
    mean and min-max band over seeds. A rate at which a run diverged or failed gets an x at the top of the axis.
    A component that buys stability shows as a flatter, wider line."""
    plt = _pyplot()
    bad, table_row = failed(runs), runs["row"].map(lambda run: design.place(run)[0])
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    failures = []  # (row, colour, lr) of every learning rate at which a run of a row diverged or failed
    for b, variant in enumerate(design.table_rows):
        mine, trouble = runs[table_row == b], bad[table_row == b]
        good = mine[~trouble].groupby("lr")["val_loss_test"]
        if len(good):
            mean = good.mean()
            (line,) = ax.plot(mean.index, mean.values, marker="o", markersize=4, label=variant.name)
            ax.fill_between(
                mean.index, good.min().values, good.max().values, color=line.get_color(), alpha=0.18, linewidth=0
            )
            colour = line.get_color()
        else:
            colour = ax.plot([], [], marker="x", linestyle="", label=f"{variant.name} (every run diverged)")[
                0
            ].get_color()
        failures += [(b, colour, lr) for lr in sorted(set(mine[trouble]["lr"]))]
    # x marks in the axes' own height (a row's just below the one above), so that they stay at the top whatever
    # the losses' scale, and those of several rows at one learning rate do not hide each other
    for b, colour, lr in failures:
        top = 0.97 - 0.035 * b
        ax.plot([lr], [top], marker="x", markersize=8, color=colour, linestyle="", transform=ax.get_xaxis_transform())
    if failures:
        ax.plot([], [], marker="x", color="grey", linestyle="", label="a run diverged at this lr (x, at the top)")
    ax.set_xscale("log")
    ax.set_xticks(spec.lrs, [f"{x:g}" for x in spec.lrs])
    ax.minorticks_off()
    model = spec.settings.model
    ax.set_title(
        f"learning-rate sensitivity on {spec.data_name}: dim {model.dim}, {model.layers} layers, "
        f"{spec.settings.train.steps} steps\nfinal val loss (test half), {_over_seeds(runs['seed'].nunique())}"
    )
    return _finish(fig, ax, "peak learning rate (log scale)", spec, path)


def _over_seeds(seeds: int) -> str:
    """The second line of a figure's title: what each line and band is over. That is the seeds that ran, as
    --seeds auto may stop before its last."""
    return f"mean over {seeds} seed{'s' if seeds != 1 else ''}" + (" (band: min to max)" if seeds > 1 else "")


def _finish(fig, ax, xlabel: str, spec, path: Path) -> Path:
    """Axis labels, grid and legend, then the figure written atomically. A reader never sees half a PNG."""
    plt = _pyplot()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"validation loss (nats per {spec.settings.data.tokenizer} token)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no line at all when every run diverged before its first evaluation
        ax.legend(fontsize="small")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path


def plot_ladder(rep, path: Path) -> Path:
    """scale.png. Left: val loss against training compute (log axis) per row, the mean over seeds with a min-max
    band, and the shared fit E + A C^-alpha. Right: each row's k at each rung with its 95% CI, and its trend line
    (k = 1 dashed)."""
    import numpy as np

    from ..verdict.ladder import fitted_curves

    plt = _pyplot()
    frame = rep.runs.assign(failed=failed(rep.runs).to_numpy())
    c = fitted_curves(rep.design, frame)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, r in enumerate(rep.design.rows):
        x = c["flops"][i]
        (line,) = left.plot(x, c["mean"][i], "o", label=r.name)
        left.fill_between(x, c["low"][i], c["high"][i], color=line.get_color(), alpha=0.15)
        grid = np.geomspace(x.min(), x.max(), 50)
        left.plot(grid, c["e"] + np.exp(c["log_a"][i]) * grid ** -c["alpha"], color=line.get_color(), lw=1)
        row = rep.rows[i]
        if r.reference is None:
            right.plot([], [])  # keep the colours of both panels in step
            continue
        k = np.array([p["k"] for p in row.rungs])
        lo, hi = np.array([p["k_low"] for p in row.rungs]), np.array([p["k_high"] for p in row.rungs])
        right.errorbar(x, k, yerr=[k - lo, hi - k], fmt="o", color=line.get_color(), capsize=3, label=r.name)
        right.fill_between(x, lo, hi, color=line.get_color(), alpha=0.1)
        centre = np.log10(x).mean()
        right.plot(grid, row.k * row.trend_per_10x ** (np.log10(grid) - centre), color=line.get_color(), lw=1)
    left.set_xscale("log")
    right.set_xscale("log")
    right.set_yscale("log")
    right.axhline(1.0, color="grey", ls="--", lw=1)
    left.set_xlabel("training FLOPs")
    left.set_ylabel("final val loss (nats/token)")
    left.set_title(f"L = {c['e']:.3g} + A C^-{c['alpha']:.3g}, one E and exponent for every row", fontsize=9)
    right.set_xlabel("training FLOPs (the row's own)")
    right.set_ylabel("k against the reference")
    right.set_title("k at each rung (95% CI) and its trend", fontsize=9)
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path
