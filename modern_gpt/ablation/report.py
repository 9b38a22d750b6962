"""A results folder's table: its Design read from meta.json, and the verdict engine's summary and footnotes over
its runs. Also the duel's and power's figures, and the files report writes (summary.csv, the figures).

The table is computed from the folder's files alone: meta.json and the run files in runs/, each read once.
runs.csv and curves.csv are written for you, never read. So `modern-gpt report DIR` shows exactly what
`modern-gpt ablate` showed.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import pandas as pd

from ..core.components import COMPONENTS
from ..core.config import lossy_note
from ..core.errors import UserError
from ..verdict.design import Design, SummaryRow
from ..verdict.metrics import MetricsVerdict, judge_metrics, judged_metrics, snr_note, with_family
from ..verdict.stats import mde, mean, sd_interval
from ..verdict.table import failed, footnotes, looks_problem, lr_view, summarize
from .planning import POWER_MIN_SEEDS, Spec
from .results import ResultsDir, Scan


def design_of(meta: dict, spec: Spec, folder="DIR") -> Design:
    """The folder's Design. Its spec's rows get the facts meta.json holds for each: parameters, MLP width,
    KV-cache bytes. It adds the --seeds auto looks recorded so far, what finishes the folder, and what the table
    says of a lossy tokenizer."""
    design = spec.design
    rows = tuple(
        replace(
            r,
            params=v["params"],
            body_params=v.get("body_params", math.nan),  # a folder from before the key: unknown
            mlp_width=v["hidden"],
            kv_cache_bytes_per_token=v["kv_cache_bytes_per_token"],
        )
        for r, v in zip(design.rows, meta["variants"], strict=True)
    )
    return replace(
        design,
        rows=rows,
        looks=meta.get("sequential"),
        resume=spec.resume_command(folder),
        data_note=_lossy(spec, meta.get("corpus")),
    )


def _lossy(spec: Spec, corpus: dict | None) -> str:
    kept = corpus or {}
    return lossy_note(spec.settings.data.tokenizer, kept.get("val_lost_chars"), kept.get("val_chars"))


class Report(NamedTuple):
    """A folder's table: its spec, the design as shown, the summary rows, the footnotes, and a duel's figures.
    Over a grid, the design shows each row at its chosen rate. scan: the runs/ it was read from, read once."""

    spec: Spec
    design: Design
    summary: list[SummaryRow]
    notes: list[str]
    duel: dict | None
    scan: Scan
    runs: object = None  # pandas.DataFrame: the runs the table was computed from (over a grid: the chosen lrs')
    metrics: object = None  # verdict.metrics.MetricsVerdict: every metric's verdicts, with --eval-data sets


def title(rep: Report) -> str:
    """The table's title: the plan, the data, the seeds and the budget."""
    spec, design, s = rep.spec, rep.design, rep.spec.settings
    seeds = design.seeds_planned()
    what = "classic-vs-modern duel" if spec.plan == "duel" else f"{spec.plan} ablation"
    auto = f" (--seeds auto, at most {len(spec.seeds)})" if spec.sequential else ""
    if spec.lrs:
        at = design.sweep.at if design.sweep else None
        which = "each row at its best" if at is None else f"all at {at:g}"
        auto += f", {len(spec.lrs)} learning rates ({which})"
    return (
        f"{what} on {spec.data_name} ({s.data.tokenizer} tokens): {seeds} seed"
        f"{'s' if seeds != 1 else ''}{auto}, {s.train.steps} steps of {s.train.batch_size}x{s.model.context} tokens, "
        f"dim {s.model.dim}, {s.model.layers} layers"
    )


def check_sequential(design: Design, runs: pd.DataFrame, folder, spec: Spec) -> None:
    """A --seeds auto folder's boundary and looks, recomputed from its spec and runs. A meta.json that says
    otherwise is refused, naming the key: edited by hand, or written by a version with another rule."""
    found = looks_problem(design, runs)
    if found:
        raise UserError(
            f"{folder}/meta.json does not match its spec and runs: {found}; it was edited, or written by another "
            f"version of modern-gpt; {spec.resume_command(folder)} recomputes the looks."
        )


def load(folder, at_lr: float | None = None, verdicts: bool = True) -> Report:
    """The folder's table from its files alone (folder: a path or its ResultsDir); meta.json and runs/ are each
    read once. Over a grid, each row is at its best learning rate, or all at at_lr. verdicts=False: the footnotes of
    a folder shown without its verdict table (power's). Every health note and warning, but not the rule."""
    from ..trackers.tracking import notes as tracker_notes

    results = folder if isinstance(folder, ResultsDir) else ResultsDir(folder)
    meta, spec, scan = results.read_meta(), results.spec, results.scan()
    all_runs = scan.runs()
    raw = design_of(meta, spec, results.path)
    check_sequential(raw, all_runs, results.path, spec)
    design, runs = lr_view(raw, all_runs, at_lr)
    summary, metrics = judged(spec, design, runs)
    duel_info = duel(spec, design, runs) if spec.plan == "duel" else None
    notes = results.health_notes(scan.rejected) + one_rule(footnotes(design, runs, summary, verdicts), metrics)
    notes += metric_notes(spec, design, metrics) if verdicts else []
    notes += _retry_note(results, all_runs) + _missing_note(results) + lossy_sets(meta.get("corpus"))
    notes += tracker_notes(meta, scan.records, results.path)  # runs a tracker lacks (--track)
    return Report(spec, design, summary, notes, duel_info, scan, runs, metrics)


def judged(spec: Spec, design: Design, runs: pd.DataFrame) -> tuple[list[SummaryRow], MetricsVerdict | None]:
    """The summary rows; with --eval-data sets, every metric judged as one family (verdict/metrics.py). The
    summary then has val's verdicts, then the family's. Over a learning-rate grid only val is judged: each row's
    rate is chosen on val's tuning half, which the other metrics do not have."""
    summary = summarize(design, runs)
    names = judged_metrics(runs.columns, [name for name, _ in spec.settings.data.eval_sets])
    if len(names) < 2 or spec.lrs:
        return summary, None
    result = judge_metrics(design, runs, names)
    return with_family(design, summary, result), result


def metric_notes(spec: Spec, design: Design, result: MetricsVerdict | None) -> list[str]:
    if result is None:
        if spec.lrs and spec.settings.data.eval_sets:
            return ["Over a learning-rate grid only val_loss is judged; the --eval-data sets' metrics are in runs.csv."]
        return []
    notes = [result.rule_note(design.alpha, design.margin, design.sequential)]
    return notes + [n for n in [snr_note(result.snr)] if n]


RULE_NOTE = "verdict: "  # how verdict.table.verdict_rule's footnote begins


def one_rule(notes: list[str], result: MetricsVerdict | None) -> list[str]:
    """With several metrics the family's footnote states the rule. The one-metric rule's footnote goes."""
    return notes if result is None else [n for n in notes if not n.startswith(RULE_NOTE)]


def lossy_sets(corpus) -> list[str]:
    """A footnote per --eval-data set the tokenizer does not give back whole (meta.json's corpus.eval_sets)."""
    sets = corpus.get("eval_sets") if isinstance(corpus, dict) else None
    out = []
    for name, facts in (sets or {}).items() if isinstance(sets, dict) else ():
        lost, chars = (facts.get(k) if isinstance(facts, dict) else None for k in ("lost_chars", "chars"))
        if isinstance(lost, int) and lost > 0 and isinstance(chars, int) and chars > 0:
            out.append(
                f"Lossy evaluation set: the tokenizer does not give back {lost:,} of the {chars:,} characters of "
                f"{name} ({100 * lost / chars:.2g}%), so {name}_loss and {name}_bpb count only what it keeps and "
                "compare with no other tokenizer's."
            )
    return out


def _missing_note(results: ResultsDir) -> list[str]:
    """A report of a folder whose plugin file is gone. The table is read from the runs alone."""
    if not results.missing_plugins:
        return []
    files = "; ".join(results.missing_plugins)
    return [
        f"Missing plugin: {files} made this folder's runs and is gone; the table is read from the runs alone, and "
        f"resuming, checking or training its rows again needs the file back (or a copy given with --plugin)."
    ]


def _retry_note(results: ResultsDir, runs) -> list[str]:
    """How to train a failed run (killed, out of memory, a plugin's error) again. A resume keeps a recorded run,
    failed or not, so its file goes first. A diverged run is not named: it would diverge again, bit for bit."""
    errored = runs[(runs["error"].fillna("") != "")] if "error" in runs else runs.iloc[:0]
    if errored.empty:
        return []
    files = [results.run_file(int(r.row), int(r.seed)).name for r in errored.itertuples()]
    shown = ", ".join(f"runs/{f}" for f in files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    return [
        f"To train the {len(files)} failed run{'s' if len(files) != 1 else ''} again (not the diverged ones: they "
        f"would diverge again), delete {shown} in {results.path} and resume: {results.spec.resume_command(results.path)}."
    ]


def write(folder, draw: bool = True, scan: Scan | None = None) -> list[SummaryRow]:
    """summary.csv, and with draw curves.png, from the runs the folder holds. Returns the summary rows.
    scan: those runs, when the caller holds them already."""
    results = ResultsDir(folder)
    scan = scan or results.scan()
    design = design_of(results.read_meta(), results.spec, results.path)
    summary, metrics = judged(results.spec, *lr_view(design, scan.runs()))
    results.write_summary(summary, metrics)
    if draw:
        plot(results, scan)
    return summary


def write_report(results: ResultsDir, table: Report) -> None:
    """summary.csv and the figures of a table load() made. The folder is summarised once, at a run's end."""
    results.write_summary(table.summary, table.metrics)
    plot(results, table.scan)


def plot(folder, scan=None) -> list:
    """Draw curves.png, and lr.png for a folder trained at several learning rates, from the folder's files.
    folder: a path or its ResultsDir; scan: its runs/, when already read. Returns their paths."""
    from .plot import plot_curves, plot_lrs

    results = folder if isinstance(folder, ResultsDir) else ResultsDir(folder)
    spec, scan = results.spec, scan or results.scan()
    design = design_of(results.read_meta(), spec, results.path)
    runs = scan.runs()
    paths = [plot_curves(spec, design, runs, scan.curves(), results.path / "curves.png")]
    if spec.lrs:
        paths.append(plot_lrs(spec, design, runs, results.path / "lr.png"))
    return paths


# ---------------------------------------------------------------------------
# The duel: all classic against all modern
# ---------------------------------------------------------------------------
def duel(spec: Spec, design: Design, runs: pd.DataFrame) -> dict:
    """Per architecture: params, best val loss and its step, val bits/char, perplexity. Also the relative
    perplexity change exp(mean paired delta) - 1, which is perplexity(modern) / perplexity(classic) - 1."""
    good = runs[~failed(runs)]
    sides, rows = {}, {}
    for row, v in enumerate(design.rows):
        if v.placebo:  # the placebo row is in the verdict table; the duel compares the two architectures
            continue
        rows[v.name] = row
        mine = good[good["row"] == row]
        sides[v.name] = {
            "params": v.params,
            "val_loss": mean(list(mine["val_loss"])),
            "best_val_loss": mean(list(mine["best_val_loss"])),
            "best_step": mean(list(mine["best_step"])),
            "val_bpc": mean(list(mine["val_bpc"])),
            "perplexity": math.exp(mean(list(mine["val_loss"]))) if len(mine) else math.nan,
        }
    classic = good[good["row"] == rows["classic"]].set_index("seed")["val_loss"]
    modern = good[good["row"] == rows["modern"]].set_index("seed")["val_loss"]
    deltas = list((modern - classic).dropna())
    info = {
        "sides": sides,
        "perplexity_change": math.exp(mean(deltas)) - 1 if deltas else math.nan,
        "best_step_sooner": sides["classic"]["best_step"] - sides["modern"]["best_step"],
        "test_half": bool(spec.lrs),  # with --lrs, val loss is the test half's; best val loss is not
        "windows": _duel_windows(spec, good),  # best val loss is on the curve's windows, val loss on all of them
    }
    sets = [name for name, _ in spec.settings.data.eval_sets]
    if sets and "val_bpb" in good:  # with --eval-data: bits per byte on val and every set (without: as before)
        info["bpb"] = _duel_bpb(good, rows, ["val", *sets])
    return info


def _duel_bpb(good: pd.DataFrame, rows: dict, names: list[str]) -> dict:
    """Bits per byte on each set: each side's mean over its seeds, and the relative change modern/classic - 1.
    The change takes the means over the seeds both sides finished with a number: a seed one side lacks would tilt it."""
    out = {"sides": {side: {} for side in rows}, "change": {}}
    by_seed = {side: good[good["row"] == row].set_index("seed") for side, row in rows.items()}
    for name in names:
        column = f"{name}_bpb"
        for side, frame in by_seed.items():
            out["sides"][side][name] = mean(list(frame[column].dropna())) if column in frame else math.nan
        if column not in good:
            out["change"][name] = math.nan
            continue
        both = pd.concat([by_seed["classic"][column], by_seed["modern"][column]], axis=1, keys=["c", "m"]).dropna()
        out["change"][name] = both["m"].mean() / both["c"].mean() - 1 if len(both) else math.nan
    return out


def _duel_windows(spec: Spec, good: pd.DataFrame) -> dict:
    """The validation windows of the final loss (all) and of the curve (where best val loss comes from). None
    when the runs do not say: no run trained, or an older run file without val_tokens."""
    tokens = good["val_tokens"].max() if "val_tokens" in good and len(good) else math.nan
    if not math.isfinite(tokens):
        return {"all": None, "curve": None}
    from ..run.train import curve_windows  # here: train loads torch

    every = int(tokens) // spec.settings.model.context
    return {"all": every, "curve": curve_windows(spec.settings.train, every)}


# ---------------------------------------------------------------------------
# `modern-gpt power`: how many seeds a question needs
# ---------------------------------------------------------------------------
POWER_TABLE_SEEDS = (3, 5, 10, 20)  # the seed counts power's mde table shows (it trains config.POWER_SEEDS)


def power_info(spec: Spec, summary: list[SummaryRow]) -> dict:
    """From a power folder's spec and summary: one architecture and its placebo. It gives the paired sd of
    two inits with its 95% CI, and the placebo's own test. Then the smallest effect 3, 5, 10 and 20 seeds would
    detect with 80% power, at the measured sd and over its interval. That is for one comparison, and for a row
    of the default cumulative table: the adjustment's first step, alpha over its component rows. An sd from 8
    pairs (power's default) is known only to within x0.66 to x2.04 (docs/statistics.md)."""
    first, placebo = summary[0], summary[1]
    alpha, sd = spec.alpha, placebo.sd
    low, high = sd_interval(sd, placebo.pairs)
    table_rows = len(COMPONENTS)  # the cumulative plan's component rows; its placebo is tested alone

    def at(level: float, n: int) -> dict:
        return {"mde": mde(sd, n, level), "low": mde(low, n, level), "high": mde(high, n, level)}

    enough = placebo.pairs >= POWER_MIN_SEEDS  # fewer pairs (interrupted, diverged) give no sd worth an mde
    return {
        "variant": first.variant,
        "seeds": first.seeds,  # the architecture's runs that trained (the placebo's are counted in pairs)
        "planned": len(spec.seeds),
        "min_pairs": POWER_MIN_SEEDS,
        "pairs": placebo.pairs,
        "val_loss": first.val_loss,
        "spread": first.spread,
        "paired_sd": sd,
        "sd_ci": [low, high],
        "placebo": {k: getattr(placebo, k) for k in ("delta_val", "ci_low", "ci_high", "p", "verdict")},
        "alpha": alpha,
        "table_rows": table_rows,
        "mde": [
            {"seeds": n, "one_comparison": at(alpha, n), "table_row": at(alpha / table_rows, n)}
            for n in POWER_TABLE_SEEDS
        ]
        if enough
        else [],
    }


def power_frame(spec: Spec, summary: list[SummaryRow]):
    """power_info as a DataFrame (modern_gpt.power_info): one row per seed count. Each has the mde for one
    comparison and for a row of the table, with its range over the sd's CI. The folder's figures are in its attrs:
    variant, pairs, paired_sd, sd_low, sd_high, and the placebo's placebo_delta_val, placebo_p, placebo_verdict..."""
    import pandas as pd

    info = power_info(spec, summary)
    parts = (("mde", ""), ("low", "_low"), ("high", "_high"))
    columns = ["seeds", *(f"{k}{end}" for k in ("one_comparison", "table_row") for _, end in parts)]
    rows = [
        [r["seeds"], *(r[k][part] for k in ("one_comparison", "table_row") for part, _ in parts)] for r in info["mde"]
    ]
    frame = pd.DataFrame(rows, columns=columns)
    facts = {k: v for k, v in info.items() if k not in ("mde", "sd_ci", "placebo")}
    facts.update(sd_low=info["sd_ci"][0], sd_high=info["sd_ci"][1])
    facts.update({f"placebo_{k}": v for k, v in info["placebo"].items()})
    frame.attrs.update(facts)
    return frame
