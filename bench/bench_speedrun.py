"""judge over every NanoGPT speedrun Track-1 record that holds run logs: the table in docs/measurements.md.

    python bench/bench_speedrun.py SNAPSHOT/records/track_1_short > speedrun.md

SNAPSHOT is a checkout of KellerJordan/modded-nanogpt (the figures in the docs: f411b3d, 2026-08-01). Each record
is judged as `modern-gpt judge RECORD --threshold 3.28 --alpha 0.01` judges it: the rule of the speedrun's README
("p<0.01 that their mean val loss is <=3.28"), one-sided one-sample t per variant, Hommel across a record's variants.
"""

import math
import sys
import time
from pathlib import Path

import numpy as np

from modern_gpt.core.errors import UserError
from modern_gpt.verdict.logs import judge_logs, read_folder, runs_frame
from modern_gpt.verdict.reading import JudgeSettings

TARGET, ALPHA = 3.28, 0.01


def main(root: Path) -> None:
    started = time.perf_counter()
    lines, pooled, records = [], [], 0
    head = "| record | variant | n | mean | sd | p vs 3.28 | p_adj | claim | vs | Δ [95% CI] | verdict |"
    lines += [head, "|" + " --- |" * (head.count("|") - 1)]
    notes, singles = [], []
    for record in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            _, rows, record_notes = judge_logs(record, JudgeSettings(alpha=ALPHA), threshold_at=TARGET)
            frame, _ = runs_frame(read_folder(record))
        except UserError:
            continue  # no run logs
        records += 1
        for _, g in frame.groupby("variant"):
            if len(g) > 1:
                pooled.append((record.name, len(g) - 1, g["loss"].var(ddof=1)))
        single = [r for r in rows if r["runs"] < 2]
        if len(single) == len(rows):
            singles.append(record.name)
            continue
        for r in rows:
            lines.append(_line(record.name, r))
        unadjusted = [r["variant"] for r in rows if r.get("p_target", 1) < ALPHA <= r.get("p_target_adj", 1)]
        if unadjusted:
            notes.append(f"{record.name}: {', '.join(unadjusted)} holds at p < 0.01 only without the correction.")
        notes += [f"{record.name}: {n}" for n in record_notes if n.startswith(("Same-seed", "Cut short", "One run"))]
    print("\n".join(lines))
    print()
    for n in notes:
        print(f"- {n}")
    print(f"- {len(singles)} records hold one run's log only (no spread, no test): {', '.join(singles)}.")
    print(f"\n{records} records with run logs, judged in {time.perf_counter() - started:.1f} s.")
    for since in ("", "2025", "2025-09"):
        chosen = [(d, v) for r, d, v in pooled if r >= since]
        dof = sum(d for d, _ in chosen)
        sd = math.sqrt(sum(d * v for d, v in chosen) / dof) if dof else math.nan
        print(
            f"- pooled seed sd of the final val loss, records from {since or 'the start'}: {sd:.5f} ({dof} degrees "
            f"of freedom, {len(chosen)} variants), against the 0.0013 the Track-3 rule assumes"
        )


def _line(record: str, r: dict) -> str:
    def f(x, fmt=".4f"):
        return "" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, fmt)

    ci = f"{r['delta']:+.4f}" if "delta" in r and r.get("vs") else ""
    if ci and np.isfinite(r["ci_low"]):
        ci += f" [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]"
    return (
        f"| {record} | {r['variant']} | {r['runs']} | {f(r['mean'])} | {f(r['sd'])} | {f(r.get('p_target'))} | "
        f"{f(r.get('p_target_adj'))} | {r.get('claim', '')} | {r.get('vs') or ''} | {ci} | {r.get('verdict', '')} |"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
