"""From a results folder's runs to what its table says: summary rows, verdicts, footnotes, the duel's and power's
figures. render.py draws them; plot.py draws the curves.

The table is computed from the folder's files alone (meta.json, and runs.csv checked against runs/; plot also
reads curves.csv), so `modern-gpt report DIR` shows exactly what `modern-gpt ablate` showed.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .errors import UserError
from .model import COMPONENTS
from .results import ResultsDir, failed, unstable
from .stats import (
    INCONCLUSIVE,
    SAME,
    decide,
    holm,
    mde,
    mean,
    paired,
    pairs_needed,
    spread,
    table_level,
    tost_p,
)
from .train import SPIKE

PARAM_MISMATCH = 0.02  # a row whose parameters differ from the first row's by more than this is flagged
MEMORISED_VAL = 0.1  # nats/token: a val loss this low on text means it was learnt by heart
MEMORISED_GAP = 0.5  # nats: val - train beyond this means the training split was memorised


def tested_rows(meta: dict) -> int:
    """The rows with a reference: the family whose false positives the verdicts control."""
    return sum(v["reference"] is not None for v in meta["variants"])


def level(meta: dict) -> float:
    """What Holm-adjusted p-values are compared with: the level meta.json records for --seeds auto, else the
    one its settings give (alpha, or the boundary of an ablation stopped before it was written)."""
    spec, seq = meta["spec"], meta.get("sequential")
    if seq:
        return seq["level"]
    return table_level(spec.get("alpha", 0.05), tested_rows(meta), spec.get("min_seeds"), len(spec["seeds"]))


def seeds_planned(meta: dict) -> int:
    """The seeds the table is about: all of them, or with --seeds auto those up to the last look."""
    spec, seq = meta["spec"], meta.get("sequential")
    if spec.get("min_seeds") is None:
        return len(spec["seeds"])
    return seq["looks"][-1]["seeds"] if seq and seq["looks"] else spec["min_seeds"]


# ---------------------------------------------------------------------------
# Several learning rates (--lrs): each table row at its own best one
# ---------------------------------------------------------------------------
def at_lr_index(lrs: list[float] | None, at_lr: float | None) -> int | None:
    """The index of --at-lr among a folder's learning rates (None without --at-lr); anything else is refused."""
    if at_lr is None:
        return None
    if not lrs:
        raise UserError("--at-lr goes with an ablation trained at several learning rates (--lrs or --lr-sweep).")
    at = [j for j, lr in enumerate(lrs) if math.isclose(lr, at_lr, rel_tol=1e-6)]
    if not at:
        raise UserError(
            f"--at-lr {at_lr:g} is not one of the learning rates tried: {', '.join(f'{x:g}' for x in lrs)}."
        )
    return at[0]


def lr_view(meta: dict, runs: pd.DataFrame, at_lr: float | None = None) -> tuple[dict, pd.DataFrame]:
    """A folder trained at several learning rates as the table reads it: each row at its best learning rate
    (or at --at-lr), its runs' losses those of the test half of the evaluation windows. Without --lrs, the
    folder as it is.

    The best learning rate of a row is the one with the fewest runs that diverged or failed, then the lowest
    mean val loss on the tuning half. Choosing on the tuning half and reporting on the test half removes the
    optimism that the evaluation tokens' own noise gives the lowest of several losses. It does not remove the
    optimism of seed noise: both halves measure the same trained models, so a row whose learning rates nearly
    tie still gets the luckiest of them on both halves; more seeds shrink that, the split does not.
    """
    lrs = meta["spec"].get("lrs")
    at = at_lr_index(lrs, at_lr)
    if not lrs:
        return meta, runs
    k, tune = len(lrs), runs["val_loss_tune"].astype(float)
    bad = failed(runs) | ~np.isfinite(tune)  # a run without a tuning loss cannot be chosen on it
    shaky = bad | unstable(runs)
    variants, chosen = [], {}
    for b in range(len(meta["variants"]) // k):
        ranks, stable = [], 0
        for j in range(k):
            mine = runs["row"] == b * k + j
            good = list(tune[mine & ~bad])
            # fewest runs that diverged or failed, then the lowest mean tuning loss of those that trained; a
            # learning rate with no run yet comes last
            ranks.append((int(bad[mine].sum()) if mine.any() else math.inf, mean(good) if good else math.inf, j))
            stable += bool(mine.any()) and not shaky[mine].any()
        j = at if at is not None else min(ranks)[2]
        trained = at is not None or ranks[j][1] < math.inf  # else no run of the row trained: no best lr
        v = dict(meta["variants"][b * k + j])
        lr = lrs[j] if trained else math.nan
        v.update(reference=None if v["reference"] is None else v["reference"] // k, lr=lr, stable=stable, lrs=k)
        variants.append(v)
        chosen[b * k + j] = b
    view = runs[runs["row"].isin(list(chosen))].copy()
    view["row"] = view["row"].map(chosen)
    scale = view["val_loss_test"] / view["val_loss"]  # bits per character scale with the loss
    view["val_bpc"], view["val_loss"] = view["val_bpc"] * scale, view["val_loss_test"]
    sweep = {"lrs": lrs, "at": at_lr, "runs": len(runs), "run_rows": len(meta["variants"]), "all": runs}
    return {**meta, "variants": variants, "sweep": sweep}, view.reset_index(drop=True)


def summarize(meta: dict, runs: pd.DataFrame) -> list[dict]:
    """One dict per table row (the columns of summary.csv): means over seeds, the paired test of each row
    against its reference, Holm across the rows, the verdict, and what an inconclusive row would need."""
    variants, margin = meta["variants"], meta["spec"].get("margin")
    good = {i: {} for i in range(len(variants))}  # row -> {seed: run} for runs that finished well
    failures = {i: 0 for i in range(len(variants))}
    for (_, r), bad in zip(runs.iterrows(), failed(runs), strict=True):
        if bad:
            failures[int(r["row"])] += 1
        else:
            good[int(r["row"])][int(r["seed"])] = r
    rows = []
    for i, v in enumerate(variants):
        mine = good[i]
        vals = [r["val_loss"] for r in mine.values()]
        row = {
            "variant": v["name"],
            "params": v["params"],
            "train_loss": mean([r["train_loss"] for r in mine.values()]),
            "val_loss": mean(vals),
            "delta_val": math.nan,
            "spread": spread(vals),
            "ci_low": math.nan,
            "ci_high": math.nan,
            "verdict": "",
            "secs": mean([r["secs"] for r in mine.values()]),
            "val_bpc": mean([r["val_bpc"] for r in mine.values()]),
            "tokens_per_s": mean([r["tokens_per_s"] for r in mine.values()]),
            "kv_cache_bytes_per_token": v["kv_cache_bytes_per_token"],
            "pairs": 0,
            "sd": math.nan,
            "p": math.nan,
            "p_same": math.nan,
            "row": i,
            "components": "+".join(v["components"]),
            "reference": v["reference"] if v["reference"] is not None else math.nan,
            "mlp_width": v["hidden"],
            "seeds": len(mine),
            "diverged": failures[i],
            "epochs": mean([r["epochs"] for r in mine.values()]),
            "lr": v.get("lr", meta["spec"]["settings"]["train"]["lr"]),
            "stable": v.get("stable", math.nan),
            "lrs": v.get("lrs", 1),
        }
        if v["reference"] is not None:
            theirs = good[v["reference"]]
            deltas = [mine[s]["val_loss"] - theirs[s]["val_loss"] for s in sorted(set(mine) & set(theirs))]
            st = paired(deltas)
            row.update(delta_val=st.delta, ci_low=st.ci_low, ci_high=st.ci_high, pairs=st.n, sd=st.sd, p=st.p_value)
            row["p_same"] = tost_p(deltas, margin) if margin else math.nan
        rows.append(row)
    tested = [row for row in rows if not math.isnan(row["reference"])]
    at = level(meta)
    per_row = at / max(1, len(tested))  # Holm's first step: the level a single row is sure to be tested at
    for row in rows:
        row.update(p_holm=math.nan, p_same_holm=math.nan, mde=math.nan, seeds_needed=math.nan)
    for row, p, p_same in zip(tested, holm([r["p"] for r in tested]), holm([r["p_same"] for r in tested]), strict=True):
        row.update(p_holm=p, p_same_holm=p_same)
        row["verdict"] = decide(row["delta_val"], p, at, p_same)
        row["mde"] = mde(row["sd"], row["pairs"], per_row)
        if row["verdict"] == INCONCLUSIVE:
            row["seeds_needed"] = pairs_needed(margin or abs(row["delta_val"]), row["sd"], per_row)
    return rows


def decided_rows(meta: dict, runs: pd.DataFrame, seeds: int) -> tuple[int, int]:
    """(rows decided, rows asked) using the first `seeds` seeds: a look of --seeds auto. The placebo is
    tested with the others but asks no question, so --seeds auto does not wait for it (the boundary holds
    the error rate whatever rule decides when to stop)."""
    chosen = set(meta["spec"]["seeds"][:seeds])
    meta, runs = lr_view(meta, runs[runs["seed"].isin(chosen)] if len(runs) else runs)
    summary = summarize(meta, runs)
    asked = [
        row
        for row, v in zip(summary, meta["variants"], strict=True)
        if v["reference"] is not None and not v.get("placebo")
    ]
    return sum(row["verdict"] != INCONCLUSIVE for row in asked), len(asked)


def verdict_rule(meta: dict) -> str:
    spec = meta["spec"]
    alpha, margin, at, tested = spec.get("alpha", 0.05), spec.get("margin"), level(meta), tested_rows(meta)
    how = (
        f"better/worse when its Holm-adjusted p < {at:.3g}, which keeps the chance of any wrong better/worse in this "
        f"table at or below {alpha:g} at whichever look --seeds auto stopped"
        if spec.get("min_seeds") is not None
        else f"better/worse when its Holm-adjusted p < {alpha:g}, so the chance of any wrong better/worse in this "
        f"table is at most {alpha:g}"
    )
    same = f"; same when an equivalence test (TOST, Holm-adjusted) shows |Δ| < {margin:g}" if margin else ""
    need = f"--margin {margin:g}" if margin else "the observed |Δ|"
    return (
        f"verdict: a paired t-test of each row against its reference, Holm-corrected across the {tested} tested rows; "
        f"{how}{same}; otherwise inconclusive (not evidence of no effect). mde: the smallest |Δ| these pairs detect "
        f"with 80% power at the row's paired sd; need: the pairs that would give 80% power at {need}; both at "
        f"level {at / max(1, tested):.3g} ({at:.3g}/{tested}), Holm's first step."
    )


def footnotes(meta: dict, runs: pd.DataFrame, summary: list[dict], folder: str = "") -> list[str]:
    """The warnings a careful reader needs: one seed, parameter mismatch, memorisation, diverged or missing runs."""
    notes = []
    seeds = seeds_planned(meta)
    if seeds == 1:
        notes.append(
            "One seed: every verdict is inconclusive, because a difference cannot be told from seed noise without "
            "several seeds; use --seeds 3 or more, or --seeds auto."
        )
    base = summary[0]
    for row in summary[1:]:
        gap = (row["params"] - base["params"]) / base["params"]
        if abs(gap) > PARAM_MISMATCH:
            ref = summary[int(row["reference"])]
            against_ref = (row["params"] - ref["params"]) / ref["params"]
            also = f" ({100 * against_ref:+.1f}% against its reference {ref['variant']})" if ref is not base else ""
            notes.append(
                f"Parameter mismatch: {row['variant']} has {row['params']:,} parameters, {100 * gap:+.1f}% against "
                f"{base['variant']}{also}: part of a delta may be size, not architecture; --match-params equalises them."
            )
    for row in summary:
        mine = runs[runs["row"] == row["row"]]
        reasons = []
        if len(mine) and mine["epochs"].max() > 1:
            reasons.append(f"its runs saw {mine['epochs'].max():.1f} epochs of the training split")
        if row["val_loss"] < MEMORISED_VAL:
            reasons.append(f"its val loss is {row['val_loss']:.3f} nats/token")
        if row["val_loss"] - row["train_loss"] > MEMORISED_GAP:
            reasons.append(f"val - train is {row['val_loss'] - row['train_loss']:.2f} nats")
        if reasons:
            notes.append(f"Memorisation risk: {row['variant']}: {'; '.join(reasons)}. Use more text or fewer steps.")
    for row, v in zip(summary, meta["variants"], strict=True):
        if v.get("placebo") and row["pairs"] >= 2:
            first = summary[0]["variant"]
            said = (
                "it is what initialisation alone does on this data and budget"
                + (" (within --margin, as it should be)" if row["verdict"] == SAME else "")
                if row["verdict"] in (INCONCLUSIVE, SAME)
                else f"initialisation alone came out {row['verdict']}, which a correct table does in at most "
                f"{meta['spec'].get('alpha', 0.05):g} of ablations; read the other verdicts with that in mind"
            )
            notes.append(
                f"Placebo: {row['variant']} is {first} with only its weight init changed; its Δ is "
                f"{row['delta_val']:+.4f} (95% CI [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]): {said}."
            )
    seq = meta.get("sequential")
    if seq and seq["looks"]:
        last = seq["looks"][-1]
        why = (
            "every row decided"
            if last["decided"] == last["rows"]
            else f"{last['rows'] - last['decided']} of {last['rows']} rows still inconclusive at --max-seeds"
            if seq.get("stopped")
            else "not finished"
        )
        notes.append(
            f"--seeds auto: {len(seq['looks'])} looks, from {seq['min_seeds']} to {last['seeds']} seeds "
            f"(at most {seq['max_seeds']}); stopped: {why}."
        )
    ordered = runs.sort_values(["row", "seed"])
    for _, r in ordered[failed(ordered)].iterrows():
        what = r["error"] or f"diverged (loss NaN or infinite) after {int(r['steps_done'])} steps"
        notes.append(f"{r['variant']}, seed {int(r['seed'])}: {what}; left out of the means.")
    sweep = meta.get("sweep")
    if sweep:
        notes += sweep_notes(sweep, summary)
    done, expected = (sweep["runs"], sweep["run_rows"] * seeds) if sweep else (len(runs), len(summary) * seeds)
    if done < expected:
        where = f" {folder}" if folder else " DIR"
        notes.append(
            f"{expected - done} of {expected} runs have not finished; finish them with: modern-gpt ablate --resume{where}"
        )
    notes.append(verdict_rule(meta))
    return notes


def sweep_notes(sweep: dict, summary: list[dict]) -> list[str]:
    """What a table over several learning rates must say: how each row's learning rate was chosen, what
    stable counts, and the runs that diverged at the learning rates not shown."""
    lrs = ", ".join(f"{x:g}" for x in sweep["lrs"])
    if sweep["at"] is None:
        how = (
            f"Learning rates: each row at its best of {lrs}: the one with the fewest diverged or failed runs, then "
            "the lowest mean val loss on the tuning half of the evaluation windows; its losses, Δ and verdict are "
            "on the other half, so that the evaluation tokens' noise flatters no row (both halves measure the "
            "same models: the luck of the seeds, which only more seeds shrink, is in both)."
        )
    else:
        how = f"Learning rates: every row at {sweep['at']:g} (--at-lr), of {lrs}; losses on the test half of the evaluation windows."
    notes = [
        how + f" stable: of the {len(sweep['lrs'])} learning rates, those at which every seed trained without "
        f"diverging or a loss spike (a training loss over {SPIKE:g} nat above its running minimum after warm-up)."
    ]
    runs = sweep["all"]
    bad = runs[unstable(runs)]
    for lr, group in bad.groupby("lr"):
        diverged, spiked = int(failed(group).sum()), int((~failed(group) & (group["spikes"] > 0)).sum())
        what = [f"{diverged} diverged or failed" if diverged else "", f"{spiked} spiked" if spiked else ""]
        names = ", ".join(dict.fromkeys(group["variant"]))
        of = int((runs["lr"] == lr).sum())
        notes.append(f"At lr {lr:g}, of {of} runs {' and '.join(w for w in what if w)}: {names}; see lr.png.")
    return notes


def load(folder, at_lr: float | None = None) -> tuple[dict, list[dict], list[str], dict | None]:
    """meta.json, the summary rows, the footnotes and (for a duel) its figures, from the folder's files alone;
    with --lrs each row at its best learning rate, or all at at_lr."""
    results = ResultsDir(folder)
    meta, runs = lr_view(results.read_meta(), results.runs(), at_lr)
    summary = summarize(meta, runs)
    duel_info = duel(meta, runs) if meta["spec"]["plan"] == "duel" else None
    return meta, summary, results.health_notes(meta) + footnotes(meta, runs, summary, str(folder)), duel_info


def write(folder, draw: bool = True) -> None:
    """summary.csv (and, with draw, curves.png) from the runs the folder holds."""
    results = ResultsDir(folder)
    results.write_summary(summarize(*lr_view(results.read_meta(), results.runs())))
    if draw:
        plot(folder)


def plot(folder) -> list:
    """Draw curves.png, and lr.png for a folder trained at several learning rates, from the folder's files;
    returns their paths."""
    from .plot import plot_curves, plot_lrs

    results = ResultsDir(folder)
    meta, runs = results.read_meta(), results.runs()
    paths = [plot_curves(meta, runs, results.curves(), results.path / "curves.png")]
    if meta["spec"].get("lrs"):
        paths.append(plot_lrs(meta, runs, results.path / "lr.png"))
    return paths


# ---------------------------------------------------------------------------
# The duel: all classic against all modern
# ---------------------------------------------------------------------------
def duel(meta: dict, runs: pd.DataFrame) -> dict:
    """Per architecture: params, best val loss and its step, val bits/char, perplexity; and the relative
    perplexity change exp(mean paired delta) - 1, which is perplexity(modern) / perplexity(classic) - 1."""
    good = runs[~failed(runs)]
    sides, rows = {}, {}
    for row, v in enumerate(meta["variants"]):
        if v.get("placebo"):  # the placebo row is in the verdict table; the duel compares the two architectures
            continue
        rows[v["name"]] = row
        mine = good[good["row"] == row]
        sides[v["name"]] = {
            "params": v["params"],
            "val_loss": mean(list(mine["val_loss"])),
            "best_val_loss": mean(list(mine["best_val_loss"])),
            "best_step": mean(list(mine["best_step"])),
            "val_bpc": mean(list(mine["val_bpc"])),
            "perplexity": math.exp(mean(list(mine["val_loss"]))) if len(mine) else math.nan,
        }
    classic = good[good["row"] == rows["classic"]].set_index("seed")["val_loss"]
    modern = good[good["row"] == rows["modern"]].set_index("seed")["val_loss"]
    deltas = list((modern - classic).dropna())
    return {
        "sides": sides,
        "perplexity_change": math.exp(mean(deltas)) - 1 if deltas else math.nan,
        "best_step_sooner": sides["classic"]["best_step"] - sides["modern"]["best_step"],
        "test_half": bool(meta["spec"].get("lrs")),  # with --lrs, val loss is the test half's; best val loss is not
    }


# ---------------------------------------------------------------------------
# `modern-gpt power`: how many seeds a question needs
# ---------------------------------------------------------------------------
POWER_SEEDS = (3, 5, 10, 20)


def power_info(meta: dict, summary: list[dict]) -> dict:
    """From a power folder's meta.json and summary (one architecture and its placebo): the paired sd of two
    inits, the placebo's own test, and the smallest effect 3, 5, 10 and 20 seeds would detect with 80% power,
    for one comparison and for a row of the default cumulative table (Holm's first step over its tested rows)."""
    first, placebo = summary[0], summary[1]
    alpha, sd = meta["spec"].get("alpha", 0.05), placebo["sd"]
    table_rows = len(COMPONENTS) + 1  # the cumulative plan's tested rows, with its placebo
    return {
        "variant": first["variant"],
        "pairs": placebo["pairs"],
        "val_loss": first["val_loss"],
        "spread": first["spread"],
        "paired_sd": sd,
        "placebo": {k: placebo[k] for k in ("delta_val", "ci_low", "ci_high", "p", "verdict")},
        "alpha": alpha,
        "table_rows": table_rows,
        "mde": [
            {"seeds": n, "one_comparison": mde(sd, n, alpha), "table_row": mde(sd, n, alpha / table_rows)}
            for n in POWER_SEEDS
        ],
    }
