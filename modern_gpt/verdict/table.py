"""From a Design and its runs to what the table says: summary rows, verdicts, footnotes.

summarize(design, runs) is the whole verdict. It takes the means over seeds and each row's paired test
against its reference. It applies the rule across the component rows (docs/statistics.md), the placebo alone.
It gives the verdict, and what an inconclusive row would need. With --seeds auto it replays the verdicts of
the recorded looks.

runs is a frame with one row per run. Every table reads row, seed, val_loss, diverged and error. train_loss,
secs, epochs and a training run's other columns are read where present. Nothing here knows how the runs were
trained. An ablation and judge hand their Design and runs to the same functions, so `report` and `judge`
share one verdict.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..core.config import SPIKE
from ..core.errors import UserError
from ..core.schema import count, short
from .design import Design, Row, SummaryRow, Sweep
from .stats import (
    FIXED,
    FUTILITY,
    HOMMEL,
    INCONCLUSIVE,
    POWER,
    SAME,
    SEQUENTIAL,
    SHAFFER,
    Boundary,
    adjust,
    decide,
    honest_mde,
    mde,
    mean,
    need_pairs,
    paired,
    pairs_needed,
    sd_bound,
    sequential,
    spread,
    tost_p,
)

PLACEBO_AUTO = 0.011  # the placebo's false alarms under --seeds auto when no row has an effect: test_verdict_rules.py
PARAM_MISMATCH = 0.02  # a row whose parameters differ from the first row's by more than this is flagged
MEMORISED_VAL = 0.1  # nats/token: a val loss this low on text means it was learnt by heart
MEMORISED_GAP = 0.5  # nats: val - train beyond this means the training split was memorised


def failed(runs: pd.DataFrame) -> pd.Series:
    """Which runs diverged or failed. The table leaves them out of its means, and the plot out of its curves."""
    return runs["diverged"].astype(bool) | (runs["error"] != "") | ~np.isfinite(runs["val_loss"].astype(float))


def unstable(runs: pd.DataFrame) -> pd.Series:
    """Which runs did not train stably: failed, or a spike. The `stable` column of a grid's table counts them."""
    return failed(runs) | (runs["spikes"] > 0)


def _column(runs: list, name: str) -> list[float]:
    """A column of these runs (pandas rows), NaN where the runs have none. judge's have no training columns."""
    return [r[name] if name in r else math.nan for r in runs]


# ---------------------------------------------------------------------------
# Several learning rates: each table row at its own best one
# ---------------------------------------------------------------------------
def at_lr_index(lrs, at_lr: float | None) -> int | None:
    """The index of --at-lr among a design's learning rates, None without --at-lr. Anything else is refused."""
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


def lr_view(design: Design, runs: pd.DataFrame, at_lr: float | None = None) -> tuple[Design, pd.DataFrame]:
    """A design over a learning-rate grid as the table reads it. Each row is at its best learning rate, or at
    --at-lr. Its runs' losses are those of the test half of the evaluation windows. Without a grid, the design
    as it is.

    A row's best learning rate has the fewest runs that diverged or failed, then the lowest mean val loss on
    the tuning half. Choosing on the tuning half and reporting on the test half removes one optimism: that of
    the evaluation tokens' own noise, which flatters the lowest of several losses. It does not remove the
    optimism of seed noise. Both halves measure the same trained models. So a row whose learning rates nearly
    tie still gets the luckiest of them on both halves. More seeds shrink that; the split does not.
    """
    at = at_lr_index(design.lrs, at_lr)
    if not design.lrs:
        return design, runs
    tune = runs["val_loss_tune"].astype(float)
    bad = failed(runs) | ~np.isfinite(tune)  # a run without a tuning loss cannot be chosen on it
    shaky = bad | unstable(runs)
    rows, chosen = [], {}
    for b in range(len(design.table_rows)):
        ranks, stable = [], 0
        for j in range(design.runs_per_row):
            mine = runs["row"] == design.run_row(b, j)
            good = list(tune[mine & ~bad])
            # fewest runs that diverged or failed, then the lowest mean tuning loss of those that trained; a
            # learning rate with no run yet comes last
            ranks.append((int(bad[mine].sum()) if mine.any() else math.inf, mean(good) if good else math.inf, j))
            stable += bool(mine.any()) and not shaky[mine].any()
        j = at if at is not None else min(ranks)[2]
        trained = at is not None or ranks[j][1] < math.inf  # else no run of the row trained: no best lr
        r = design.rows[design.run_row(b, j)]
        reference = None if r.reference is None else design.place(r.reference)[0]
        lr = design.lrs[j] if trained else math.nan
        rows.append(replace(r, reference=reference, lr=lr, stable=stable, lrs=design.runs_per_row))
        chosen[design.run_row(b, j)] = b
    view = runs[runs["row"].isin(list(chosen))].copy()
    view["row"] = view["row"].map(chosen)
    scale = view["val_loss_test"] / view["val_loss"]  # bits per character scale with the loss
    view["val_bpc"], view["val_loss"] = view["val_bpc"] * scale, view["val_loss_test"]
    sweep = Sweep(design.lrs, at_lr, len(runs), len(design.rows), runs, design)
    table = replace(design, rows=tuple(rows), lrs=None, sweep=sweep)
    return table, view.reset_index(drop=True)


# ---------------------------------------------------------------------------
# The summary: one SummaryRow per table row
# ---------------------------------------------------------------------------
def summarize(design: Design, runs: pd.DataFrame) -> list[SummaryRow]:
    """One SummaryRow per table row: means over seeds, each row's paired test, the verdict rule (stats.adjust),
    and what an inconclusive row would need. With --seeds auto, the recorded looks replayed."""
    rows = _paired_rows(design, runs)
    _judge(design, runs, rows)
    return rows


def _paired_rows(design: Design, runs: pd.DataFrame) -> list[SummaryRow]:
    """summarize's rows before any verdict: the means and each row's paired test against its reference."""
    good = {i: {} for i in range(len(design.rows))}  # row -> {seed: run} for runs that finished well
    failures = {i: 0 for i in range(len(design.rows))}
    errors = dict(failures)  # of the failures, those with an error (killed, out of memory): not a divergence
    # as plain dicts: a pandas row per run (iterrows) was most of judge's time on a file of many runs
    for r, bad in zip(runs.to_dict("records"), failed(runs), strict=True):
        if bad:
            failures[int(r["row"])] += 1
            errors[int(r["row"])] += bool(r["error"])
        else:
            good[int(r["row"])][int(r["seed"])] = r
    rows = []
    for i, v in enumerate(design.rows):
        mine = good[i]
        row = _means(v, list(mine.values()), design.lr if v.lr is None else v.lr)
        row.row, row.diverged, row.errored = i, failures[i], errors[i]
        if v.reference is not None:
            theirs = good[v.reference]
            deltas = [mine[s]["val_loss"] - theirs[s]["val_loss"] for s in sorted(set(mine) & set(theirs))]
            st = paired(deltas)
            row.reference = v.reference
            row.delta_val, row.ci_low, row.ci_high, row.pairs, row.sd, row.p = (
                st.delta,
                st.ci_low,
                st.ci_high,
                st.n,
                st.sd,
                st.p_value,
            )
            row.p_same = tost_p(deltas, design.margin) if design.margin else math.nan
        rows.append(row)
    return rows


def _means(v: Row, mine: list, lr: float) -> SummaryRow:
    """A summary row's own columns: the means over its runs that trained, and the row's facts."""
    return SummaryRow(
        variant=v.name,
        params=v.params,
        train_loss=mean(_column(mine, "train_loss")),
        val_loss=mean([r["val_loss"] for r in mine]),
        spread=spread([r["val_loss"] for r in mine]),
        secs=mean(_column(mine, "secs")),
        val_bpc=mean(_column(mine, "val_bpc")),
        tokens_per_s=mean(_column(mine, "tokens_per_s")),
        flops=mean(_column(mine, "flops")),
        mfu=mean(_column(mine, "mfu")),
        kv_cache_bytes_per_token=v.kv_cache_bytes_per_token,
        components="+".join(v.components),
        mlp_width=v.mlp_width,
        seeds=len(mine),
        epochs=mean(_column(mine, "epochs")),
        lr=lr,
        stable=v.stable,
        lrs=v.lrs,
        placebo=v.placebo,
    )


def _judge(design: Design, runs: pd.DataFrame, rows: list[SummaryRow]) -> None:
    """Verdicts, p_adj, mde and need for the rows of _paired_rows, in place."""
    tested = [r for r in rows if not math.isnan(r.reference)]
    families = [[r for r in tested if r.placebo == placebo] for placebo in (False, True)]
    looks = sequential_verdicts(design, runs) if design.sequential else None
    for placebo, family in enumerate(families):
        bound = design.family_boundary(bool(placebo))
        # the level Holm's first step gives each row with a test at the last look: what mde and need promise
        per_row = bound.level(sum(not math.isnan(r.p) for r in family))
        p_adj, p_same_adj, _ = adjust([r.p for r in family], [r.p_same for r in family])
        for row, p, p_same in zip(family, p_adj, p_same_adj, strict=True):
            if looks is None:
                row.p_adj, row.p_same_adj = float(p), float(p_same)
                row.verdict = decide(row.delta_val, p, bound.alpha, p_same)
            else:  # the p on alpha's scale at the boundary: below alpha exactly when the row crossed
                row.p_adj, row.p_same_adj = (
                    looks["p_adj"].get(row.row, math.nan),
                    looks["p_same_adj"].get(row.row, math.nan),
                )
                row.verdict = looks["verdicts"].get(row.row, INCONCLUSIVE)
            row.mde = honest_mde(row.sd, row.pairs, per_row)
            row.seeds_needed = need(row, design.margin, per_row) if row.verdict == INCONCLUSIVE else math.nan


def rule_name(design: Design) -> str:
    """The rule a table's component rows are judged by: HOMMEL (fixed seeds), SHAFFER (fixed, --margin) or
    SEQUENTIAL. SEQUENTIAL is --seeds auto's: Holm's step-down against the boundary, Holm-Shaffer's with --margin."""
    if design.sequential:
        return SEQUENTIAL
    return SHAFFER if design.margin else HOMMEL


def need(row: SummaryRow, margin: float | None, level: float) -> float:
    """The pairs an inconclusive row would need. With --margin, those that give 80% power at the margin, at the
    sd's upper bound as honest_mde takes it. Without, stats.need_pairs: blank where it gives none."""
    n, sd, delta = row.pairs, row.sd, row.delta_val
    if n < 2 or not sd > 0:
        return math.nan
    if margin:
        return pairs_needed(margin, sd * sd_bound(n), level, POWER)
    return need_pairs(delta / (sd / math.sqrt(n)), n, level)


# ---------------------------------------------------------------------------
# --seeds auto: the looks, replayed from the runs
# ---------------------------------------------------------------------------
def sequential_verdicts(design: Design, runs: pd.DataFrame, seeds: list[int] | None = None) -> dict:
    """--seeds auto replayed from the runs. The looks are at `seeds` pairs, by default those the design records.
    Each look is on the design's first seeds, as the ablation saw them. Over a grid, each row is at its best
    learning rate on those seeds. Returns the verdicts that stand ({row: verdict}), and the seeds at which each
    was reached. Then one entry per look (seeds, decided, rows, futile), and the index of the look at which the
    rule stops."""
    sweep = design.sweep
    raw, raw_runs, at = (sweep.design, sweep.all, sweep.at) if sweep else (design, runs, None)
    seeds = [look["seeds"] for look in (design.looks or {}).get("looks", [])] if seeds is None else seeds
    if not seeds:
        return {"verdicts": {}, "decided_at": {}, "looks": [], "stop": -1, "p_adj": {}, "p_same_adj": {}}
    per_look = []
    for n in seeds:
        chosen = set(design.seeds[:n])
        view, mine = lr_view(raw, raw_runs[raw_runs["seed"].isin(chosen)] if len(raw_runs) else raw_runs, at)
        per_look.append(_paired_rows(view, mine))
    first = per_look[0]
    components = [i for i, r in enumerate(first) if not math.isnan(r.reference) and not r.placebo]
    placebos = [i for i, r in enumerate(first) if not math.isnan(r.reference) and r.placebo]

    def judged(rows: list[int], bound: Boundary, stop_at=None):
        columns = ("delta_val", "sd", "pairs", "p", "p_same")
        arrays = [np.array([[getattr(look[i], c) for i in rows] for look in per_look], dtype=float) for c in columns]
        return sequential(*arrays, bound, design.margin, stop_at)

    out = {"verdicts": {}, "decided_at": {}, "looks": [], "stop": len(seeds) - 1, "p_adj": {}, "p_same_adj": {}}
    comp = judged(components, design.family_boundary()) if components else None
    if comp is not None:
        out["stop"] = int(comp.stop)
        out["looks"] = [
            {"seeds": n, "decided": int(comp.decided[k]), "rows": len(components), "futile": int(comp.futile[k])}
            for k, n in enumerate(seeds)
        ]
    else:  # nothing asked: every look decides all of nothing
        out["looks"] = [{"seeds": n, "decided": 0, "rows": 0, "futile": 0} for n in seeds]
    placebo = judged(placebos, design.family_boundary(placebo=True), out["stop"]) if placebos else None
    for rows, looks in ((components, comp), (placebos, placebo)):
        for j, i in enumerate(rows):
            out["verdicts"][first[i].row] = str(looks.verdict[j])
            out["p_adj"][first[i].row], out["p_same_adj"][first[i].row] = (
                float(looks.p_adj[j]),
                float(looks.p_same_adj[j]),
            )
            if looks.look[j] >= 0:
                out["decided_at"][first[i].row] = seeds[int(looks.look[j])]
    return out


def take_look(design: Design, runs: pd.DataFrame, seeds: int) -> tuple[dict, bool]:
    """The look of --seeds auto after the round that completes `seeds` pairs: its record, and whether the
    ablation stops there. Computed as the table computes it, every earlier look replayed."""
    recorded = [look["seeds"] for look in design.looks["looks"]]
    replay = sequential_verdicts(design, runs, [*recorded, seeds])
    return replay["looks"][-1], 0 <= replay["stop"] <= len(recorded)


def looks_problem(design: Design, runs: pd.DataFrame) -> str | None:
    """Why the recorded boundary and looks of a --seeds auto design are not those its settings and runs give,
    naming the key. They may be edited by hand, or written by a version with another rule. None when they are."""
    if not design.looks:
        return None
    return _boundary_problem(design) or _replay_problem(design, runs)


def _boundary_problem(design: Design) -> str | None:
    seq, bound = design.looks, design.family_boundary()
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


def _replay_problem(design: Design, runs: pd.DataFrame) -> str | None:
    looks = design.looks["looks"]
    if not looks:
        return None
    replay = sequential_verdicts(design, runs)
    for i, (stored, redone) in enumerate(zip(looks, replay["looks"], strict=True)):
        wrong = [k for k in ("decided", "rows", "futile") if stored.get(k) != redone[k]]
        if wrong:
            return f"sequential.looks[{i}].{wrong[0]} is {stored.get(wrong[0])!r}, but its runs give {redone[wrong[0]]}"
    if 0 <= replay["stop"] < len(looks) - 1:
        return f"sequential.looks go on to {looks[-1]['seeds']} seeds, but its runs stop the rule at {looks[replay['stop']]['seeds']}"
    return None


# ---------------------------------------------------------------------------
# Footnotes: what a careful reader needs
# ---------------------------------------------------------------------------
def no_tested_rows(design: Design) -> str:
    """The verdict footnote of a table with no component row compared with a reference. It has one row, or one
    row and its placebo, as in a power folder."""
    at = f"at {design.alpha:g}" if not design.sequential else "against --seeds auto's one-row boundary"
    also = (
        f"; the placebo row (the first row again with another weight init) is a diagnostic, tested alone {at}"
        if any(r.placebo for r in design.rows)
        else ""
    )
    return (
        f"verdict: no component row is compared with a reference, so the table gives no verdict on a component{also}."
    )


def verdict_rule(design: Design) -> str:
    alpha, margin, tested = design.alpha, design.margin, design.tested_rows
    if not tested:  # no component row: a rule over zero rows (alpha/0) would describe nothing
        return no_tested_rows(design)
    bound, rule = design.family_boundary(), rule_name(design)
    at = bound.level(tested)
    test, how = _rule_test(design, rule)
    wrong = "better, worse or same" if margin else "better/worse"
    where = " wherever the ablation stopped" + _sequential_scale(design) if rule == SEQUENTIAL else ""
    first = (
        f"level {at:.3g} ({alpha:g}/{max(1, tested)}), the adjustment's first step"
        if bound.method == FIXED
        else f"the last look's level {at:.3g} with all {max(1, tested)} rows undecided, Holm's first step"
    )
    placebo = (
        f"; the placebo is a diagnostic, tested alone at {alpha:g}"
        if bound.method == FIXED
        else "; the placebo is a diagnostic, tested alone against the one-row boundary up to the look where the "
        f"components stopped: a false alarm in at most {alpha:g} of tables, fewer the earlier they stop (at the default "
        f"alpha, {PLACEBO_AUTO:.1%} of simulated tables with no effect anywhere, which stop at about 6 seeds)"
    )
    placebo = placebo if any(r.placebo for r in design.rows) else ""
    need = (
        f"the pairs that would give 80% power at --margin {margin:g}, at that sd"
        if margin
        else "the pairs that would detect the row's effect with 80% power, planned on the 80% lower confidence "
        "bound of its effect given that it was inconclusive; blank when the 90% bound is zero"
    )
    return (
        f"verdict: {test}; {how}, so the chance of any wrong {wrong} among them is at most {alpha:g}{where}"
        f"{placebo}; otherwise inconclusive (not evidence of no effect). mde: the smallest |Δ| these pairs detect "
        f"with 80% power if the row's true sd is as large as the 80% upper confidence bound on its paired sd; need: "
        f"{need}; both at {first}."
    )


def _rule_test(design: Design, rule: str) -> tuple[str, str]:
    """For each rule, the verdict footnote's test (which tests, adjusted how) and when a row is decided."""
    alpha, margin, tested = design.alpha, design.margin, design.tested_rows
    rows = f"the {tested} component rows" if tested > 1 else "the 1 component row"
    own = "" if tested > 1 else ": over one row, its own p"
    tost = f"an equivalence test (TOST, |Δ| < {margin:g})" if margin else ""
    if rule == HOMMEL:
        test = (
            f"a paired t-test of each component row against its reference, Hommel-adjusted across {rows} (p_adj{own})"
        )
        return test, f"better/worse when p_adj < {alpha:g}"
    if rule == SHAFFER:
        test = (
            f"a paired t-test and {tost} of each component row against its reference, in one Holm step-down with "
            f"Shaffer's restriction (a row's two nulls cannot both be true) across {rows} (p_adj, and p_same_adj in "
            f"the csv{own})"
        )
        return test, f"better/worse when p_adj < {alpha:g}, same when p_same_adj < {alpha:g}"
    bound = design.family_boundary()
    looks = bound.looks
    both = f" and {tost} in one step-down with Shaffer's restriction" if margin else ""
    test = (
        f"a paired t-test of each component row against its reference{both}, with --seeds auto: at each look Holm's "
        f"step-down across {rows} against an O'Brien-Fleming-shaped boundary (with all {tested} rows undecided, a "
        f"row's p must be below {bound.level(tested, 0):.2g} at {looks[0]} seeds, rising to {bound.level(tested):.3g} "
        f"at {looks[-1]}, less strict as rows are decided); a verdict stands once reached"
    )
    return test, "better/worse when a row's p crosses it" + (", same when its equivalence p does" if margin else "")


def _sequential_scale(design: Design) -> str:
    """What a --seeds auto table's p_adj is. And the boundary's fallback when alpha is too small to simulate."""
    alpha, bound = design.alpha, design.family_boundary()
    scale = (
        f"; p_adj is the row's p on alpha's scale: its p over the threshold it was held to, times {alpha:g}, at its "
        f"best look, so below {alpha:g} exactly when it crossed"
    )
    if bound.method == "bonferroni":
        scale += (
            f" (at alpha {alpha:g} the boundary is too small to calibrate by simulation, so every look gets "
            f"alpha / rows / {len(bound.looks)} looks: Bonferroni over the looks, valid and stricter)"
        )
    return scale


def footnotes(design: Design, runs: pd.DataFrame, summary: list[SummaryRow], verdicts: bool = True) -> list[str]:
    """The warnings a careful reader needs: one seed, parameter mismatch, memorisation, diverged or missing runs.
    verdicts=False: a table shown without its verdicts (power's). Its own sentences say what the placebo did."""
    seeds = design.seeds_planned()
    notes = _seed_notes(design, summary, seeds) + _mismatch_notes(design, summary) + _memorisation_notes(runs, summary)
    if verdicts:
        notes += _placebo_notes(design, summary) + _rerun_notes(design, summary)
    if design.looks and design.looks["looks"]:
        notes.append(sequential_note(design, runs, summary))
    notes += failure_notes(runs)
    if design.data_note and "lossless" in runs and (runs["lossless"].astype(str).str.lower() == "false").any():
        notes.append(design.data_note)
    if design.sweep:
        notes += sweep_notes(design.sweep)
    notes += unfinished_notes(design, runs, summary, seeds)
    if verdicts:
        notes.append(verdict_rule(design))
    return notes


def _rerun_notes(design: Design, summary: list[SummaryRow]) -> list[str]:
    """What to do with a component row's need: train on that many fresh seeds, and read that table alone. The
    placebo is a diagnostic, not decided. The same seeds again and more (--seeds N) are a second look at runs
    chosen because they looked promising. A table with no real effect then ends wrong in 6% of simulations at
    the default alpha (tests/verdict/test_need_rerun.py). Fresh seeds end wrong in at most alpha."""
    needs = [r.seeds_needed for r in summary if not r.placebo and r.seeds_needed > 0]  # NaN > 0 is False
    if not needs:
        return []
    if design.any_reference:  # judge: the seeds are the file's labels
        how = "run the variants again on that many fresh seeds and judge those runs alone; adding seeds to these runs"
    else:
        first, n = max(design.seeds) + 1, int(min(needs))
        how = (
            f"train the plan again on that many seeds this table did not use (--seed-list {first}-{first + n - 1} "
            f"for {n}) and read that table alone; --seeds {n} would train these seeds again, which"
        )
    return [
        f"need is for a fresh start: to decide a row, {how} is a second look at runs chosen because they looked "
        f"promising, whose table is wrong more often than alpha ({design.alpha:g}) says (docs/statistics.md)."
    ]


def _seed_notes(design: Design, summary: list[SummaryRow], seeds: int) -> list[str]:
    """One seed, where no verdict is possible. Or few in a big table, and what they can see."""
    notes = []
    if seeds == 1:
        notes.append(
            "One seed: every verdict is inconclusive, because a difference cannot be told from seed noise without "
            "several seeds; use --seeds 3 or more, or --seeds auto."
        )
    few = few_seeds_note(design, summary, seeds)
    return notes + ([few] if few else [])


def _mismatch_notes(design: Design, summary: list[SummaryRow]) -> list[str]:
    """Rows whose parameters differ from the first row's by more than PARAM_MISMATCH. The design may know each
    row's non-embedding parameters, as a folder's meta.json does. Then the note says where the gap is. A gap in
    the body, --match-params closes. A gap in the embeddings alone (the position table RoPE drops), it need not."""
    notes, base = [], summary[0]
    body = [r.body_params for r in design.rows] if len(design.rows) == len(summary) else [math.nan] * len(summary)
    for i, row in enumerate(summary[1:], 1):
        gap = (row.params - base.params) / base.params
        if abs(gap) > PARAM_MISMATCH:
            ref = summary[int(row.reference)]
            against_ref = (row.params - ref.params) / ref.params
            also = f" ({100 * against_ref:+.1f}% against its reference {ref.variant})" if ref is not base else ""
            said = f"Parameter mismatch: {row.variant} has {row.params:,} parameters, {100 * gap:+.1f}% against {base.variant}{also}"
            body_gap = (body[i] - body[0]) / body[0]
            if abs(body_gap) <= PARAM_MISMATCH:  # NaN (unknown) is not
                notes.append(
                    f"{said}, in its embeddings (a position table, say): its non-embedding parameters, which "
                    f"scaling laws count and --match-params matches, are {100 * body_gap:+.1f}% against {base.variant}."
                )
            else:
                notes.append(f"{said}: part of a delta may be size, not architecture; --match-params equalises them.")
    return notes


def _memorisation_notes(runs: pd.DataFrame, summary: list[SummaryRow]) -> list[str]:
    """Rows that may have learnt the training split by heart: several epochs, a tiny val loss, a wide gap."""
    notes = []
    epochs = runs.groupby("row")["epochs"].max().to_dict() if "epochs" in runs else {}  # once: rows x runs was slow
    for row in summary:
        reasons = []
        if epochs.get(row.row, math.nan) > 1:
            reasons.append(f"its runs saw {epochs[row.row]:.1f} epochs of the training split")
        if row.val_loss < MEMORISED_VAL:
            reasons.append(f"its val loss is {row.val_loss:.3f} nats/token")
        if row.val_loss - row.train_loss > MEMORISED_GAP:
            reasons.append(f"val - train is {row.val_loss - row.train_loss:.2f} nats")
        if reasons:
            notes.append(f"Memorisation risk: {row.variant}: {'; '.join(reasons)}. Use more text or fewer steps.")
    return notes


def _placebo_notes(design: Design, summary: list[SummaryRow]) -> list[str]:
    """What the placebo row's delta says about the others'."""
    notes, first = [], summary[0].variant
    for row in summary:
        if not row.placebo or row.pairs < 2:
            continue
        said = (
            "it is what initialisation alone does on this data and budget"
            + (" (within --margin, as it should be)" if row.verdict == SAME else "")
            if row.verdict in (INCONCLUSIVE, SAME)
            else f"initialisation alone moved the val loss by {row.delta_val:+.4f} nats and came out "
            f"{row.verdict} (tested alone, p {row.p:.2g}), which happens in {design.alpha:g} "
            "of correct ablations by chance; a component row whose |Δ| is not well beyond this may be "
            "initialisation rather than the component, and if it recurs the runs are not reproducible"
        )
        notes.append(
            f"Placebo: {row.variant} is {first} with only its weight init changed, a diagnostic outside the "
            f"component rows' family; its Δ is {row.delta_val:+.4f} (95% CI [{row.ci_low:+.4f}, "
            f"{row.ci_high:+.4f}]): {said}."
        )
    return notes


def failure_notes(runs: pd.DataFrame) -> list[str]:
    """Each run that diverged or failed, with why. The means leave it out."""
    ordered = runs.sort_values(["row", "seed"])
    notes = []
    for _, r in ordered[failed(ordered)].iterrows():
        what = (
            str(r["error"]).rstrip(". ")
            or f"diverged (loss NaN or infinite) after {count(int(r['steps_done']), 'step')}"
        )
        notes.append(f"{r['variant']}, seed {int(r['seed'])}: {what}; left out of the means.")
    return notes


def unfinished_notes(design: Design, runs: pd.DataFrame, summary: list[SummaryRow], seeds: int) -> list[str]:
    """The runs planned so far that have not finished, and the command that finishes them."""
    sweep = design.sweep
    done, expected = (sweep.runs, sweep.run_rows * seeds) if sweep else (len(runs), len(summary) * seeds)
    if done >= expected:
        return []
    return [f"{expected - done} of {expected} runs have not finished; finish them with: {design.resume}"]


FEW_SEEDS, FEW_SEEDS_ROWS = 5, 5  # below this many seeds, with at least this many tested rows: say what it costs


def few_seeds_note(design: Design, summary: list[SummaryRow], seeds: int) -> str | None:
    """Below 5 seeds in a table of 5 or more component rows: the effect a row needs to be found. In paired sds,
    and in nats at the rows' observed sds. And what 5 seeds would need."""
    tested = design.tested_rows
    if not 2 <= seeds < FEW_SEEDS or tested < FEW_SEEDS_ROWS or design.sequential:
        return None
    at = design.family_boundary().level(tested)
    need, at_five = mde(1.0, seeds, at), mde(1.0, FEW_SEEDS, at)
    sds = [r.sd for r in summary if not math.isnan(r.reference) and not r.placebo and r.sd > 0]
    nats = f" ({need * min(sds):.3f}-{need * max(sds):.3f} nats at these rows' paired sds)" if sds else ""
    return (
        f"Few seeds: with {seeds} seeds and {tested} tested rows, a row is found 80% of the time only when its true "
        f"|Δ| is at least {need:.1f} paired sds{nats}; {FEW_SEEDS} seeds need {at_five:.1f} sds, 10 need "
        f"{mde(1.0, 10, at):.1f}."
    )


def sequential_note(design: Design, runs: pd.DataFrame, summary: list[SummaryRow]) -> str:
    """--seeds auto: the looks, why the ablation stopped, and the seeds at which each row was decided."""
    seq = design.looks
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
    decided_at = sequential_verdicts(design, runs)["decided_at"]
    when = [f"{r.variant} at {decided_at[r.row]}" for r in summary if r.row in decided_at]
    return (
        f"--seeds auto: {len(seq['looks'])} looks, from {seq['min_seeds']} to {last['seeds']} seeds (at most "
        f"{seq['max_seeds']}); stopped: {why}." + (f" Decided at (seeds): {', '.join(when)}." if when else "")
    )


def sweep_notes(sweep: Sweep) -> list[str]:
    """What a table over several learning rates must say. How each row's learning rate was chosen, and what
    stable counts. And the runs that diverged at the learning rates not shown."""
    lrs = ", ".join(f"{x:g}" for x in sweep.lrs)
    if sweep.at is None:
        how = (
            f"Learning rates: each row at its best of {lrs}: the one with the fewest diverged or failed runs, then "
            "the lowest mean val loss on the tuning half of the evaluation windows; its losses, Δ and verdict are "
            "on the other half, so that the evaluation tokens' noise flatters no row (both halves measure the "
            "same models: the luck of the seeds, which only more seeds shrink, is in both)."
        )
    else:
        how = f"Learning rates: every row at {sweep.at:g} (--at-lr), of {lrs}; losses on the test half of the evaluation windows."
    notes = [
        how + f" stable: of the {len(sweep.lrs)} learning rates, those at which every seed trained without "
        f"diverging or a loss spike (a training loss over {SPIKE:g} nat above its running minimum after warm-up)."
    ]
    runs = sweep.all
    bad = runs[unstable(runs)]
    for lr, group in bad.groupby("lr"):
        diverged, spiked = int(failed(group).sum()), int((~failed(group) & (group["spikes"] > 0)).sum())
        what = [f"{diverged} diverged or failed" if diverged else "", f"{spiked} spiked" if spiked else ""]
        names = ", ".join(dict.fromkeys(group["variant"]))
        of = int((runs["lr"] == lr).sum())
        notes.append(f"At lr {lr:g}, of {of} runs {' and '.join(w for w in what if w)}: {names}; see lr.png.")
    return notes
