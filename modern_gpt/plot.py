"""curves.png: validation loss against step, the mean over seeds and a min-max band, one colour per variant."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .files import atomic_path
from .results import failed


def plot_curves(meta: dict, runs: pd.DataFrame, curves: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no screen needed
    import matplotlib.pyplot as plt

    # Runs that diverged or failed are left out, as they are of the table's means.
    good = runs[~failed(runs)][["row", "seed"]]
    curves = curves.merge(good, on=["row", "seed"])
    seeds = len(meta["spec"]["seeds"])
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    for row, variant in enumerate(meta["variants"]):
        mine = curves[curves["row"] == row].groupby("step")["val_loss"]
        if not len(mine):
            continue
        mean = mine.mean()
        (line,) = ax.plot(
            mean.index, mean.values, marker="o", markersize=3, label=f"{variant['name']} ({variant['params']:,} params)"
        )
        if seeds > 1:
            ax.fill_between(
                mean.index, mine.min().values, mine.max().values, color=line.get_color(), alpha=0.18, linewidth=0
            )
    s = meta["spec"]["settings"]
    ax.set_title(
        f"{meta['spec']['plan']} on {meta['spec']['data_name']}: dim {s['model']['dim']}, {s['model']['layers']} layers, "
        f"{meta['variants'][0]['params']:,} params\nvalidation loss, mean over {seeds} seed{'s' if seeds != 1 else ''}"
        + (" (band: min to max)" if seeds > 1 else "")
    )
    ax.set_xlabel("training step")
    ax.set_ylabel(f"validation loss (nats per {s['data']['tokenizer']} token)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no curve at all when every run diverged before its first evaluation
        ax.legend(fontsize="small")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path
