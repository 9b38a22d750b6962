"""A run's evaluation share of its time, with and without two --eval-data sets and the probes (issue 46).

    python bench/bench_eval.py [--data tinyshakespeare] [--steps 600] [--variants rope] [--repeat 1]

Trains each variant at configs/shakespeare.toml (one torch thread, as an ablation's --jobs auto gives each run on
two cores) twice, interleaved: on the corpus alone, and with the two shipped sets (modern_gpt/evalsets/code.txt
and prose.txt). Every run computes val_bpb, icl_gain and ctx2x_loss from its final evaluation (ctx2x runs its own
pass at 2x the context, on RoPE rows only: a learned position table has no row there, so RoPE is the costlier
case); the sets add their windows to the same pass. Prints each run's seconds by part (training steps, curve
evaluations, final evaluation) and its evaluation share, (curve + final) / secs, and the machine, for
docs/measurements.md. --steps below the config's 600 raises the share (the final evaluation does not shrink):
say so when quoting it. Speed is measured here, never asserted in a test.
"""

import argparse
import os
import platform
import tempfile
from importlib import resources
from pathlib import Path

from common import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="tinyshakespeare")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--variants", default="rope", help="comma-separated component sets, '' for classic")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    import torch

    from modern_gpt.core.settings import resolve
    from modern_gpt.data.corpus import load_corpus
    from modern_gpt.run.train import train_run

    sets = Path(str(resources.files("modern_gpt").joinpath("evalsets")))
    eval_data = (f"code={sets / 'code.txt'}", f"prose={sets / 'prose.txt'}")
    cache = tempfile.mkdtemp(prefix="bench-eval-cache-")
    base = {"data.path": args.data, "train.steps": args.steps, "train.threads": 1, "data.cache_dir": cache}
    plain = resolve("shakespeare", False, base)
    with_sets = resolve("shakespeare", False, {**base, "data.eval_data": eval_data})
    corpora = {"no sets": load_corpus(plain.data), "2 sets": load_corpus(with_sets.data)}
    print(f"{'variant':<12} {'sets':<8} {'secs':>7} {'steps':>7} {'curve':>6} {'final':>6} {'eval share':>10}")
    shares = {k: [] for k in corpora}
    for _ in range(args.repeat):
        for variant in args.variants.split(","):
            model = plain.model.with_components(tuple(c for c in variant.split("+") if c))
            for what, corpus in corpora.items():
                result, _ = train_run(model, corpus, plain.train, seed=0)
                t = result.timing
                share = (t["curve_evals"] + t["final_eval"]) / result.secs
                shares[what].append(share)
                print(
                    f"{variant or 'classic':<12} {what:<8} {result.secs:7.1f} {t['train_steps']:7.1f} "
                    f"{t['curve_evals']:6.1f} {t['final_eval']:6.1f} {share:10.1%}",
                    flush=True,
                )
    print(
        "mean share: "
        + ", ".join(f"{k} {sum(v) / len(v):.1%}" for k, v in shares.items())
        + f" ({args.steps} steps; {machine()}, torch {torch.__version__}, python {platform.python_version()}; "
        f"load average {os.getloadavg()[0]:.1f} at the end)"
    )


if __name__ == "__main__":
    main()
