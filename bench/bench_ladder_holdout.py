"""Predict, then verify, on real runs: a ladder of four or more rungs whose top rung the rungs below it predict
(verdict/ladder.py's holdout_check), with the coverage of the 90% intervals, the sign accuracy and the wall time.

    python bench/bench_ladder_holdout.py --data ../shared/data/tinyshakespeare.txt --rungs 32,64,128,256 \
        --seeds 5 --out /tmp/holdout-ladder            # issue 40: 4 rungs, 64x the parameters, the default plan
    python bench/bench_ladder_holdout.py --folder /tmp/holdout-ladder   # the figures again from a ladder folder

It trains `modern-gpt scale --config shakespeare` with the given rungs (the top rung is then wider than the
config: 256 wide trains about 16x the compute of the config's own run per row and seed, hours on the 2-core
machine; a GPU or a few cores more is the place for it), then prints each row's predicted and observed delta at
the top rung and the one summary line, as the table's footnotes do. Whatever it shows is the result.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import modern_gpt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="the corpus (tinyshakespeare.txt)")
    ap.add_argument("--rungs", default="32,64,128,256", help="the widths, smallest first (four or more)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("holdout-ladder"))
    ap.add_argument("--folder", type=Path, help="a finished ladder folder: report its check, train nothing")
    ap.add_argument("--device", default=None)
    ap.add_argument("--variants", default=None, help="a custom plan's rows (classic;rope), else the default plan")
    ap.add_argument("--jobs", default=None)
    args = ap.parse_args()
    start = time.perf_counter()
    if args.folder is None:
        given = {"device": args.device, "jobs": args.jobs}
        extra = {k: v for k, v in given.items() if v is not None}
        if args.variants:
            extra.update(plan="custom", variants=args.variants)
        result = modern_gpt.scale(
            config="shakespeare", path=args.data, rungs=args.rungs, seeds=args.seeds, out=args.out, **extra
        )
    else:
        result = modern_gpt.report(args.folder)
    wall = time.perf_counter() - start
    held = result.table.holdout
    for h in held:
        print(
            f"{h.variant:18s} predicted {h.predicted:+.4f} [{h.predicted_low:+.4f}, {h.predicted_high:+.4f}]  "
            f"observed {h.observed:+.4f} [{h.observed_low:+.4f}, {h.observed_high:+.4f}]  inside={h.inside} "
            f"sign_right={h.sign_right}"
        )
    print(next((n for n in result.footnotes if n.startswith("Held out:")), "no held-out check (fewer than 4 rungs)"))
    print(f"wall {wall:.0f} s on {platform.node()} ({platform.processor() or platform.machine()})")


if __name__ == "__main__":
    main()
