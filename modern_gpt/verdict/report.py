"""From a results folder's runs to what its table says: summary rows, verdicts, footnotes, the duel's and power's
figures. render.py draws them; plot.py draws the curves.

The table is computed from the folder's files alone (meta.json and the run files in runs/, each read once;
runs.csv and curves.csv are written for you, never read), so `modern-gpt report DIR` shows exactly what
`modern-gpt ablate` showed. Every function here takes the folder's meta.json as a results.Meta: its Spec owns the
plan, the seeds, the learning-rate layout and the statistics settings.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..ablation.planning import POWER_MIN_SEEDS
from ..ablation.results import Meta, ResultsDir, failed, unstable
from ..core.components import COMPONENTS
from ..core.errors import UserError
from ..core.schema import count, short
from ..trackers import tracking
from .stats import (
    FIXED,
    FUTILITY,
    INCONCLUSIVE,
    POWER,
    SAME,
    Boundary,
    decide,
    holm,
    honest_mde,
    mde,
    mean,
    paired,
    pairs_needed,
    sd_bound,
    sd_interval,
    sequential,
    spread,
    tost_p,
)

PARAM_MISMATCH = 0.02  # a row whose parameters differ from the first row's by more than this is flagged
MEMORISED_VAL = 0.1  # nats/token: a val loss this low on text means it was learnt by heart
MEMORISED_GAP = 0.5  # nats: val - train beyond this means the training split was memorised


def seeds_planned(meta: Meta) -> int:
    """The seeds the table is about: all of them, or with --seeds auto those up to the last look."""
    spec, seq = meta.spec, meta.sequential
    if not spec.sequential:
        return len(spec.seeds)
    return seq["looks"][-1]["seeds"] if seq and seq["looks"] else spec.min_seeds


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


def lr_view(meta: Meta, runs: pd.DataFrame, at_lr: float | None = None) -> tuple[Meta, pd.DataFrame]:
    """A folder trained at several learning rates as the table reads it: each row at its best learning rate
    (or at --at-lr), its runs' losses those of the test half of the evaluation windows. Without --lrs, the
    folder as it is.

    The best learning rate of a row is the one with the fewest runs that diverged or failed, then the lowest
    mean val loss on the tuning half. Choosing on the tuning half and reporting on the test half removes the
    optimism that the evaluation tokens' own noise gives the lowest of several losses. It does not remove the
    optimism of seed noise: both halves measure the same trained models, so a row whose learning rates nearly
    tie still gets the luckiest of them on both halves; more seeds shrink that, the split does not.
    """
    spec = meta.spec
    at = at_lr_index(spec.lrs, at_lr)
    if not spec.lrs:
        return meta, runs
    tune = runs["val_loss_tune"].astype(float)
    bad = failed(runs) | ~np.isfinite(tune)  # a run without a tuning loss cannot be chosen on it
    shaky = bad | unstable(runs)
    variants, chosen = [], {}
    for b in range(len(spec.table_variants)):
        ranks, stable = [], 0
        for j in range(spec.runs_per_row):
            mine = runs["row"] == spec.run_row(b, j)
            good = list(tune[mine & ~bad])
            # fewest runs that diverged or failed, then the lowest mean tuning loss of those that trained; a
            # learning rate with no run yet comes last
            ranks.append((int(bad[mine].sum()) if mine.any() else math.inf, mean(good) if good else math.inf, j))
            stable += bool(mine.any()) and not shaky[mine].any()
        j = at if at is not None else min(ranks)[2]
        trained = at is not None or ranks[j][1] < math.inf  # else no run of the row trained: no best lr
        v = dict(meta.variants[spec.run_row(b, j)])
        reference = None if v["reference"] is None else spec.place(v["reference"])[0]
        v.update(reference=reference, lr=spec.lrs[j] if trained else math.nan, stable=stable, lrs=spec.runs_per_row)
        variants.append(v)
        chosen[spec.run_row(b, j)] = b
    view = runs[runs["row"].isin(list(chosen))].copy()
    view["row"] = view["row"].map(chosen)
    scale = view["val_loss_test"] / view["val_loss"]  # bits per character scale with the loss
    view["val_bpc"], view["val_loss"] = view["val_bpc"] * scale, view["val_loss_test"]
    sweep = {"lrs": spec.lrs, "at": at_lr, "runs": len(runs), "run_rows": len(meta.variants), "all": runs, "meta": meta}
    return replace(meta, variants=variants, sweep=sweep), view.reset_index(drop=True)


def summarize(meta: Meta, runs: pd.DataFrame) -> list[dict]:
    """One dict per table row (the columns of summary.csv): means over seeds, the paired test of each row
    against its reference, Holm across the component rows (the placebo alone), the verdict, and what an
    inconclusive row would need. With --seeds auto the verdicts are those of the recorded looks, replayed."""
    rows = _paired_rows(meta, runs)
    _judge(meta, runs, rows)
    return rows


def _paired_rows(meta: Meta, runs: pd.DataFrame) -> list[dict]:
    """summarize's rows before any verdict: the means and each row's paired test against its reference."""
    variants, margin = meta.variants, meta.spec.margin
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
        row = _means(v, list(mine.values()), lr=v.get("lr", meta.spec.settings.train.lr))
        row.update(row=i, diverged=failures[i], reference=math.nan if v["reference"] is None else v["reference"])
        if v["reference"] is not None:
            theirs = good[v["reference"]]
            deltas = [mine[s]["val_loss"] - theirs[s]["val_loss"] for s in sorted(set(mine) & set(theirs))]
            st = paired(deltas)
            row.update(delta_val=st.delta, ci_low=st.ci_low, ci_high=st.ci_high, pairs=st.n, sd=st.sd, p=st.p_value)
            row["p_same"] = tost_p(deltas, margin) if margin else math.nan
        row["placebo"] = bool(v.get("placebo"))
        rows.append(row)
    return rows


def _means(v: dict, mine: list, lr: float) -> dict:
    """A summary row's own columns: the means over its runs that trained, and the row's facts; the paired
    columns empty."""
    vals = [r["val_loss"] for r in mine]
    return {
        "variant": v["name"],
        "params": v["params"],
        "train_loss": mean([r["train_loss"] for r in mine]),
        "val_loss": mean(vals),
        "delta_val": math.nan,
        "spread": spread(vals),
        "ci_low": math.nan,
        "ci_high": math.nan,
        "verdict": "",
        "secs": mean([r["secs"] for r in mine]),
        "val_bpc": mean([r["val_bpc"] for r in mine]),
        "tokens_per_s": mean([r["tokens_per_s"] for r in mine]),
        "kv_cache_bytes_per_token": v["kv_cache_bytes_per_token"],
        "pairs": 0,
        "sd": math.nan,
        "p": math.nan,
        "p_same": math.nan,
        "row": None,
        "components": "+".join(v["components"]),
        "reference": math.nan,
        "mlp_width": v["hidden"],
        "seeds": len(mine),
        "diverged": 0,
        "epochs": mean([r["epochs"] for r in mine]),
        "lr": lr,
        "stable": v.get("stable", math.nan),
        "lrs": v.get("lrs", 1),
    }


def _judge(meta: Meta, runs: pd.DataFrame, rows: list[dict]) -> None:
    """Verdicts, p_holm, mde and need for the rows of _paired_rows, in place."""
    margin = meta.spec.margin
    families = [[r for r in rows if not math.isnan(r["reference"]) and r["placebo"] == placebo] for placebo in (0, 1)]
    for row in rows:
        row.update(p_holm=math.nan, p_same_holm=math.nan, mde=math.nan, seeds_needed=math.nan)
    looks = sequential_verdicts(meta, runs) if meta.spec.sequential else None
    for placebo, family in enumerate(families):
        bound = meta.spec.family_boundary(bool(placebo))
        alpha = bound.alpha
        # the level Holm's first step gives each row with a test at the last look: what mde and need promise
        with_test = sum(not math.isnan(r["p"]) for r in family)
        per_row = bound.level(with_test)
        for row, p, p_same in zip(
            family, holm([r["p"] for r in family]), holm([r["p_same"] for r in family]), strict=True
        ):
            row.update(p_holm=p, p_same_holm=p_same)
            if looks is None:
                row["verdict"] = decide(row["delta_val"], p, alpha, p_same)
            else:
                row["verdict"] = looks["verdicts"].get(row["row"], INCONCLUSIVE)
            row["mde"] = honest_mde(row["sd"], row["pairs"], per_row)
            row["seeds_needed"] = need(row, margin, per_row) if row["verdict"] == INCONCLUSIVE else math.nan


def need(row: dict, margin: float | None, level: float) -> float:
    """The pairs that give 80% power at --margin, or at the observed |delta| when it is at least one standard
    error (|t| >= 1): below that the observed delta is mostly noise, and so would be any number from it. The
    sd is its 80% upper confidence bound, as for mde."""
    n, sd, delta = row["pairs"], row["sd"], row["delta_val"]
    if n < 2 or not sd > 0:
        return math.nan
    if margin:
        effect = margin
    elif abs(delta) >= sd / math.sqrt(n):
        effect = abs(delta)
    else:
        return math.nan
    return pairs_needed(effect, sd * sd_bound(n), level, POWER)


def sequential_verdicts(meta: Meta, runs: pd.DataFrame, seeds: list[int] | None = None) -> dict:
    """--seeds auto replayed from the runs: the looks at `seeds` pairs (by default those meta.json records),
    each on the first seeds of the spec as the ablation saw them (with --lrs, each row at its best learning rate
    on those seeds). Returns the verdicts that stand ({row: verdict}), the seeds at which each was reached, one
    entry per look (seeds, decided, rows, futile) and the index of the look at which the rule stops."""
    sweep = meta.sweep
    raw_meta, raw_runs, at = (sweep["meta"], sweep["all"], sweep["at"]) if sweep else (meta, runs, None)
    seq = meta.sequential or {}
    seeds = [look["seeds"] for look in seq.get("looks", [])] if seeds is None else seeds
    if not seeds:
        return {"verdicts": {}, "decided_at": {}, "looks": [], "stop": -1}
    per_look = []
    for n in seeds:
        chosen = set(meta.spec.seeds[:n])
        view, mine = lr_view(raw_meta, raw_runs[raw_runs["seed"].isin(chosen)] if len(raw_runs) else raw_runs, at)
        per_look.append(_paired_rows(view, mine))
    margin = meta.spec.margin
    first = per_look[0]
    components = [i for i, r in enumerate(first) if not math.isnan(r["reference"]) and not r["placebo"]]
    placebos = [i for i, r in enumerate(first) if not math.isnan(r["reference"]) and r["placebo"]]

    def judged(rows: list[int], bound: Boundary, stop_at=None):
        columns = ("delta_val", "sd", "pairs", "p", "p_same")
        arrays = [np.array([[look[i][c] for i in rows] for look in per_look], dtype=float) for c in columns]
        return sequential(*arrays, bound, margin, stop_at)

    out = {"verdicts": {}, "decided_at": {}, "looks": [], "stop": len(seeds) - 1}
    if components:
        comp = judged(components, meta.spec.family_boundary())
        out["stop"] = int(comp.stop)
        out["looks"] = [
            {"seeds": n, "decided": int(comp.decided[k]), "rows": len(components), "futile": int(comp.futile[k])}
            for k, n in enumerate(seeds)
        ]
    else:  # nothing asked: every look decides all of nothing
        out["looks"] = [{"seeds": n, "decided": 0, "rows": 0, "futile": 0} for n in seeds]
    for rows, looks in (
        (components, comp if components else None),
        (placebos, judged(placebos, meta.spec.family_boundary(placebo=True), out["stop"]) if placebos else None),
    ):
        for j, i in enumerate(rows):
            out["verdicts"][first[i]["row"]] = str(looks.verdict[j])
            if looks.look[j] >= 0:
                out["decided_at"][first[i]["row"]] = seeds[int(looks.look[j])]
    return out


def take_look(meta: Meta, runs: pd.DataFrame, seeds: int) -> tuple[dict, bool]:
    """The look of --seeds auto after the round that completes `seeds` pairs, computed as the table computes
    it (every earlier look replayed): its meta.json entry, and whether the ablation stops there."""
    recorded = [look["seeds"] for look in meta.sequential["looks"]]
    replay = sequential_verdicts(meta, runs, [*recorded, seeds])
    return replay["looks"][-1], 0 <= replay["stop"] <= len(recorded)


def check_sequential(meta: Meta, runs: pd.DataFrame, path) -> None:
    """A --seeds auto folder's boundary and looks, recomputed from its spec and runs: a meta.json that says
    otherwise (edited by hand, or written by a version with another rule) is refused, naming the key."""
    if not meta.sequential:
        return
    found = _boundary_problem(meta) or _looks_problem(meta, runs)
    if found:
        raise UserError(
            f"{path}/meta.json does not match its spec and runs: {found}; it was edited, or written by another "
            f"version of modern-gpt; {meta.spec.resume_command(path)} recomputes the looks."
        )


def _boundary_problem(meta: Meta) -> str | None:
    """Why meta.json's recorded boundary is not the one its spec gives, or None."""
    seq, bound = meta.sequential, meta.spec.family_boundary()
    if seq.get("method") != bound.method:
        return f"sequential.method is {seq.get('method')!r}, but its spec gives {bound.method!r}"
    if (
        not isinstance(seq.get("levels"), list)
        or len(seq["levels"]) != len(bound.looks)
        or not np.allclose(seq["levels"], bound.levels[-1], rtol=1e-9, atol=0)
    ):
        return (
            f"sequential.levels {short(seq.get('levels'), 50)} are not the boundary its spec gives "
            f"({short([float(f'{x:.3g}') for x in bound.levels[-1]], 50)})"
        )
    for i, look in enumerate(seq["looks"]):
        if look["seeds"] != seq["min_seeds"] + i or look["seeds"] > bound.looks[-1]:
            return f"sequential.looks[{i}].seeds is {look['seeds']}, not {seq['min_seeds'] + i}"
    return None


def _looks_problem(meta: Meta, runs: pd.DataFrame) -> str | None:
    """Why meta.json's recorded looks are not those its runs give, replayed, or None."""
    looks = meta.sequential["looks"]
    if not looks:
        return None
    replay = sequential_verdicts(meta, runs)
    for i, (stored, redone) in enumerate(zip(looks, replay["looks"], strict=True)):
        wrong = [k for k in ("decided", "rows", "futile") if stored.get(k) != redone[k]]
        if wrong:
            return f"sequential.looks[{i}].{wrong[0]} is {stored.get(wrong[0])!r}, but its runs give {redone[wrong[0]]}"
    if 0 <= replay["stop"] < len(looks) - 1:
        return f"sequential.looks go on to {looks[-1]['seeds']} seeds, but its runs stop the rule at {looks[replay['stop']]['seeds']}"
    return None


def no_tested_rows(meta: Meta) -> str:
    """The verdict footnote of a table with no component row compared with a reference (one row; or one row and
    its placebo, as in a power folder)."""
    spec = meta.spec
    at = f"at {spec.alpha:g}" if not spec.sequential else "against --seeds auto's one-row boundary"
    also = (
        f"; the placebo row (the first row again with another weight init) is a diagnostic, tested alone {at}"
        if any(v.placebo for v in spec.variants)
        else ""
    )
    return (
        f"verdict: no component row is compared with a reference, so the table gives no verdict on a component{also}."
    )


def verdict_rule(meta: Meta) -> str:
    spec = meta.spec
    alpha, margin, tested = spec.alpha, spec.margin, spec.tested_rows
    if not tested:  # no component row: a rule over zero rows (alpha/0) would describe nothing
        return no_tested_rows(meta)
    bound = spec.family_boundary()
    at = bound.level(tested)
    if bound.method == FIXED:
        how = (
            f"better/worse when its Holm-adjusted p < {alpha:g}, so the chance of any wrong better/worse among them "
            f"is at most {alpha:g}"
        )
        first = f"level {at:.3g} ({alpha:g}/{max(1, tested)}), Holm's first step"
    else:
        looks = bound.looks
        how = (
            f"with --seeds auto, at each look Holm's step-down against an O'Brien-Fleming-shaped boundary: with all "
            f"{tested} rows undecided, a row's p must be below {bound.level(tested, 0):.2g} at {looks[0]} seeds, "
            f"rising to {at:.3g} at {looks[-1]} (less strict as rows are decided); a verdict stands once reached, so "
            f"the chance of any wrong better/worse among them is at most {alpha:g} wherever the ablation stopped"
        )
        if bound.method == "bonferroni":
            how += (
                f" (at alpha {alpha:g} the boundary is too small to calibrate by simulation, so every look gets "
                f"alpha / rows / {len(looks)} looks: Bonferroni over the looks, valid and stricter)"
            )
        first = f"the last look's level {at:.3g} with all {max(1, tested)} rows undecided, Holm's first step"
    placebo = (
        "; the placebo is a diagnostic, tested alone at "
        + (f"{alpha:g}" if bound.method == FIXED else "the one-row boundary")
        if any(v.placebo for v in spec.variants)
        else ""
    )
    rows = f"the {tested} component rows" if tested > 1 else "the 1 component row (Holm over one row is its own p)"
    same = f"; same when an equivalence test (TOST, Holm-adjusted) shows |Δ| < {margin:g}" if margin else ""
    need = f"--margin {margin:g}" if margin else "the observed |Δ|, shown when it is at least one standard error"
    return (
        f"verdict: a paired t-test of each component row against its reference, Holm-corrected across {rows}; "
        f"{how}{placebo}{same}; otherwise inconclusive (not evidence of no effect). mde: the smallest "
        f"|Δ| these pairs detect with 80% power if the row's true sd is as large as the 80% upper confidence bound on "
        f"its paired sd; need: the pairs that would give 80% power at {need}, at that sd; both at {first}."
    )


def footnotes(
    meta: Meta, runs: pd.DataFrame, summary: list[dict], folder: str = "", verdicts: bool = True
) -> list[str]:
    """The warnings a careful reader needs: one seed, parameter mismatch, memorisation, diverged or missing runs.
    verdicts=False: a table shown without its verdicts (power's), whose own sentences say what the placebo did."""
    seeds = seeds_planned(meta)
    notes = _seed_notes(meta, summary, seeds) + _mismatch_notes(summary) + _memorisation_notes(runs, summary)
    if verdicts:
        notes += _placebo_notes(meta, summary)
    if meta.sequential and meta.sequential["looks"]:
        notes.append(sequential_note(meta, runs, summary))
    notes += _failure_notes(runs)
    if "lossless" in runs and (runs["lossless"].astype(str).str.lower() == "false").any():
        from ..data.corpus import lossy_note  # the sentence train prints too

        kept = meta.corpus or {}
        notes.append(lossy_note(meta.spec.settings.data.tokenizer, kept.get("val_lost_chars"), kept.get("val_chars")))
    if meta.sweep:
        notes += sweep_notes(meta.sweep, summary)
    notes += _unfinished_notes(meta, runs, summary, seeds, folder)
    if verdicts:
        notes.append(verdict_rule(meta))
    return notes


def _seed_notes(meta: Meta, summary: list[dict], seeds: int) -> list[str]:
    """One seed (no verdict is possible), or few in a big table (what they can see)."""
    notes = []
    if seeds == 1:
        notes.append(
            "One seed: every verdict is inconclusive, because a difference cannot be told from seed noise without "
            "several seeds; use --seeds 3 or more, or --seeds auto."
        )
    few = few_seeds_note(meta, summary, seeds)
    return notes + ([few] if few else [])


def _mismatch_notes(summary: list[dict]) -> list[str]:
    """Rows whose parameters differ from the first row's by more than PARAM_MISMATCH."""
    notes, base = [], summary[0]
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
    return notes


def _memorisation_notes(runs: pd.DataFrame, summary: list[dict]) -> list[str]:
    """Rows that may have learnt the training split by heart: several epochs, a tiny val loss, a wide gap."""
    notes = []
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
    return notes


def _placebo_notes(meta: Meta, summary: list[dict]) -> list[str]:
    """What the placebo row's delta says about the others'."""
    notes, first = [], summary[0]["variant"]
    for row, v in zip(summary, meta.variants, strict=True):
        if not v.get("placebo") or row["pairs"] < 2:
            continue
        said = (
            "it is what initialisation alone does on this data and budget"
            + (" (within --margin, as it should be)" if row["verdict"] == SAME else "")
            if row["verdict"] in (INCONCLUSIVE, SAME)
            else f"initialisation alone moved the val loss by {row['delta_val']:+.4f} nats and came out "
            f"{row['verdict']} (tested alone, p {row['p']:.2g}), which happens in {meta.spec.alpha:g} "
            "of correct ablations by chance; a component row whose |Δ| is not well beyond this may be "
            "initialisation rather than the component, and if it recurs the runs are not reproducible"
        )
        notes.append(
            f"Placebo: {row['variant']} is {first} with only its weight init changed, a diagnostic outside the "
            f"rows' Holm family; its Δ is {row['delta_val']:+.4f} (95% CI [{row['ci_low']:+.4f}, "
            f"{row['ci_high']:+.4f}]): {said}."
        )
    return notes


def _failure_notes(runs: pd.DataFrame) -> list[str]:
    """Each run that diverged or failed, with why: the means leave it out."""
    ordered = runs.sort_values(["row", "seed"])
    notes = []
    for _, r in ordered[failed(ordered)].iterrows():
        what = r["error"] or f"diverged (loss NaN or infinite) after {count(int(r['steps_done']), 'step')}"
        notes.append(f"{r['variant']}, seed {int(r['seed'])}: {what}; left out of the means.")
    return notes


def _unfinished_notes(meta: Meta, runs: pd.DataFrame, summary: list[dict], seeds: int, folder: str) -> list[str]:
    """The runs planned so far that have not finished, and the command that finishes them."""
    sweep = meta.sweep
    done, expected = (sweep["runs"], sweep["run_rows"] * seeds) if sweep else (len(runs), len(summary) * seeds)
    if done >= expected:
        return []
    return [
        f"{expected - done} of {expected} runs have not finished; finish them with: "
        f"{meta.spec.resume_command(folder or 'DIR')}"
    ]


FEW_SEEDS, FEW_SEEDS_ROWS = 5, 5  # below this many seeds, with at least this many tested rows: say what it costs


def few_seeds_note(meta: Meta, summary: list[dict], seeds: int) -> str | None:
    """Below 5 seeds in a table of 5 or more component rows: the effect a row needs to be found, in paired sds
    and in nats at the rows' observed sds, and what 5 seeds would need."""
    tested = meta.spec.tested_rows
    if not 2 <= seeds < FEW_SEEDS or tested < FEW_SEEDS_ROWS or meta.spec.sequential:
        return None
    at = meta.spec.family_boundary().level(tested)
    need, at_five = mde(1.0, seeds, at), mde(1.0, FEW_SEEDS, at)
    sds = [r["sd"] for r in summary if not math.isnan(r["reference"]) and not r["placebo"] and r["sd"] > 0]
    nats = f" ({need * min(sds):.3f}-{need * max(sds):.3f} nats at these rows' paired sds)" if sds else ""
    return (
        f"Few seeds: with {seeds} seeds and {tested} tested rows, a row is found 80% of the time only when its true "
        f"|Δ| is at least {need:.1f} paired sds{nats}; {FEW_SEEDS} seeds need {at_five:.1f} sds, 10 need "
        f"{mde(1.0, 10, at):.1f}."
    )


def sequential_note(meta: Meta, runs: pd.DataFrame, summary: list[dict]) -> str:
    """--seeds auto: the looks, why the ablation stopped, and the seeds at which each row was decided."""
    seq = meta.sequential
    last = seq["looks"][-1]
    undecided, futile = last["rows"] - last["decided"], last.get("futile", 0)
    why = (
        "not finished"
        if not seq.get("stopped")
        else "every row decided"
        if undecided == 0
        else f"{undecided} of {last['rows']} rows undecided at --max-seeds"
        if last["seeds"] >= seq["max_seeds"] or futile < undecided
        else f"the {undecided} undecided rows could not be decided by --max-seeds (conditional power below "
        f"{FUTILITY:.0%}: a futility stop, which never raises the error rate)"
    )
    decided_at = sequential_verdicts(meta, runs)["decided_at"]
    when = [f"{r['variant']} at {decided_at[r['row']]}" for r in summary if r["row"] in decided_at]
    return (
        f"--seeds auto: {len(seq['looks'])} looks, from {seq['min_seeds']} to {last['seeds']} seeds (at most "
        f"{seq['max_seeds']}); stopped: {why}." + (f" Decided at (seeds): {', '.join(when)}." if when else "")
    )


def sweep_notes(sweep: dict, summary: list[dict]) -> list[str]:
    """What a table over several learning rates must say: how each row's learning rate was chosen, what
    stable counts, and the runs that diverged at the learning rates not shown."""
    from ..run.train import SPIKE  # here, not at the top: train loads torch, which --at-lr's check never needs

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


def load(folder, at_lr: float | None = None, verdicts: bool = True) -> tuple[Meta, list[dict], list[str], dict | None]:
    """meta.json, the summary rows, the footnotes and (for a duel) its figures, from the folder's files alone
    (folder: a path or its ResultsDir), meta.json and runs/ each read once; with --lrs each row at its best
    learning rate, or all at at_lr. verdicts=False: the footnotes of a folder shown without its verdict table
    (power's): every health note and warning, but not the verdict rule."""
    results = folder if isinstance(folder, ResultsDir) else ResultsDir(folder)
    raw, scan = results.read(), results.scan()
    all_runs = scan.runs()
    check_sequential(raw, all_runs, results.path)
    meta, runs = lr_view(raw, all_runs, at_lr)
    summary = summarize(meta, runs)
    duel_info = duel(meta, runs) if meta.spec.plan == "duel" else None
    notes = results.health_notes(scan.rejected) + footnotes(meta, runs, summary, str(results.path), verdicts)
    notes += tracking.notes(results.read_meta(), scan.records, results.path)  # runs a tracker lacks (--track)
    return meta, summary, notes, duel_info


def write(folder, draw: bool = True) -> None:
    """summary.csv (and, with draw, curves.png) from the runs the folder holds."""
    results = ResultsDir(folder)
    scan = results.scan()
    results.write_summary(summarize(*lr_view(results.read(), scan.runs())))
    if draw:
        plot(results, scan)


def plot(folder, scan=None) -> list:
    """Draw curves.png, and lr.png for a folder trained at several learning rates, from the folder's files
    (folder: a path or its ResultsDir; scan: its runs/, when already read); returns their paths."""
    from ..ablation.plot import plot_curves, plot_lrs

    results = folder if isinstance(folder, ResultsDir) else ResultsDir(folder)
    meta, scan = results.read(), scan or results.scan()
    runs = scan.runs()
    paths = [plot_curves(meta, runs, scan.curves(), results.path / "curves.png")]
    if meta.spec.lrs:
        paths.append(plot_lrs(meta, runs, results.path / "lr.png"))
    return paths


# ---------------------------------------------------------------------------
# The duel: all classic against all modern
# ---------------------------------------------------------------------------
def duel(meta: Meta, runs: pd.DataFrame) -> dict:
    """Per architecture: params, best val loss and its step, val bits/char, perplexity; and the relative
    perplexity change exp(mean paired delta) - 1, which is perplexity(modern) / perplexity(classic) - 1."""
    good = runs[~failed(runs)]
    sides, rows = {}, {}
    for row, v in enumerate(meta.variants):
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
        "test_half": bool(meta.spec.lrs),  # with --lrs, val loss is the test half's; best val loss is not
        "windows": _duel_windows(meta, good),  # best val loss is on the curve's windows, val loss on all of them
    }


def _duel_windows(meta: Meta, good: pd.DataFrame) -> dict:
    """The validation windows of the final loss (all) and of the curve (where best val loss comes from); None
    when the runs do not say (no run trained, or an older run file without val_tokens)."""
    tokens = good["val_tokens"].max() if "val_tokens" in good and len(good) else math.nan
    if not math.isfinite(tokens):
        return {"all": None, "curve": None}
    from ..run.train import curve_windows  # here: train loads torch

    every = int(tokens) // meta.spec.settings.model.context
    return {"all": every, "curve": curve_windows(meta.spec.settings.train, every)}


# ---------------------------------------------------------------------------
# `modern-gpt power`: how many seeds a question needs
# ---------------------------------------------------------------------------
POWER_TABLE_SEEDS = (3, 5, 10, 20)  # the seed counts power's mde table shows (it trains config.POWER_SEEDS)


def power_info(meta: Meta, summary: list[dict]) -> dict:
    """From a power folder's meta.json and summary (one architecture and its placebo): the paired sd of two
    inits with its 95% confidence interval, the placebo's own test, and the smallest effect 3, 5, 10 and 20
    seeds would detect with 80% power, for one comparison and for a row of the default cumulative table (Holm's
    first step over its component rows), at the measured sd and over its interval: an sd from 8 pairs (power's
    default) is known only to within x0.66 to x2.04."""
    first, placebo = summary[0], summary[1]
    alpha, sd = meta.spec.alpha, placebo["sd"]
    low, high = sd_interval(sd, placebo["pairs"])
    table_rows = len(COMPONENTS)  # the cumulative plan's component rows; its placebo is tested alone

    def at(level: float, n: int) -> dict:
        return {"mde": mde(sd, n, level), "low": mde(low, n, level), "high": mde(high, n, level)}

    enough = placebo["pairs"] >= POWER_MIN_SEEDS  # fewer pairs (interrupted, diverged) give no sd worth an mde
    return {
        "variant": first["variant"],
        "seeds": first["seeds"],  # the architecture's runs that trained (the placebo's are counted in pairs)
        "planned": len(meta.spec.seeds),
        "min_pairs": POWER_MIN_SEEDS,
        "pairs": placebo["pairs"],
        "val_loss": first["val_loss"],
        "spread": first["spread"],
        "paired_sd": sd,
        "sd_ci": [low, high],
        "placebo": {k: placebo[k] for k in ("delta_val", "ci_low", "ci_high", "p", "verdict")},
        "alpha": alpha,
        "table_rows": table_rows,
        "mde": [
            {"seeds": n, "one_comparison": at(alpha, n), "table_row": at(alpha / table_rows, n)}
            for n in POWER_TABLE_SEEDS
        ]
        if enough
        else [],
    }
