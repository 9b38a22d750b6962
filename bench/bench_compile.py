"""torch.compile against eager at a config's training step: the constants of --compile auto (issue 23, item 3).

    python bench/bench_compile.py [--config shakespeare] [--threads 1] [--rounds 7] [--steps 20] [--out compile.json]

For classic and for all six components, at the config's model and batch (vocabulary 65, tinyshakespeare's
characters), one training step as train.py takes it (forward and loss, backward, clipping, the hand-written AdamW):
1. compile seconds, cold and warm: a fresh process compiles into an empty inductor cache folder (cold), then a
   second fresh process compiles the same graph into the same folder (warm, the shared cache modern-gpt's runs use).
   Each is the time of the first compiled step less an eager step's.
2. step time, eager and compiled, in one process, in interleaved rounds (eager, compiled, eager, ...), so that the
   noise of a shared machine falls on both alike; medians of the rounds, and the gain: 1 - compiled / eager.
Prints a Markdown table ready for docs/measurements.md, with the machine, the date and torch's version: its eager
GFLOP/s (per thread, by compiling.step_flops), gains and compile seconds are the fields of compiling.Measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

from common import machine

VOCAB = 65  # tinyshakespeare's characters: the shakespeare config's vocabulary
MODELS = {"classic": (), "all six": ("rmsnorm", "rope", "swiglu", "no_bias", "gqa", "qk_norm")}


def settings(config: str):
    from modern_gpt.core.settings import resolve

    s = resolve(config, False, {})
    return replace(s.model, vocab_size=VOCAB), s.train


def parts(name: str, config: str, threads: int, compiled: bool):
    """The model, the module each step calls and the optimizer, built as train.build builds them (seed 0)."""
    import torch

    from modern_gpt.model.gpt import GPT
    from modern_gpt.run.train import make_optimizer

    torch.set_num_threads(threads)
    model_cfg, train = settings(config)
    torch.manual_seed(0)
    model = GPT(model_cfg.with_components(MODELS[name]))
    return model, torch.compile(model) if compiled else model, make_optimizer(model, train), model_cfg, train


def step_timer(name: str, config: str, threads: int, compiled: bool):
    """A function that takes one training step and returns its seconds."""
    import torch

    from modern_gpt.run.train import update

    model, fn, opt, model_cfg, train = parts(name, config, threads, compiled)
    gen = torch.Generator().manual_seed(1)
    shape = (train.batch_size, model_cfg.context)

    def step() -> float:
        x, y = torch.randint(VOCAB, shape, generator=gen), torch.randint(VOCAB, shape, generator=gen)
        t0 = time.perf_counter()
        _, loss = fn(x, y)
        update(model, opt, loss, train.grad_clip)
        loss.item()
        return time.perf_counter() - t0

    return step


def child(name: str, config: str, threads: int) -> None:
    """In a fresh process: the first compiled step's seconds less the median eager step's (the compile time)."""
    eager = step_timer(name, config, threads, False)
    eager_s = statistics.median([eager() for _ in range(5)])
    first = step_timer(name, config, threads, True)()
    print(json.dumps({"compile_s": first - eager_s}))


def compile_seconds(name: str, args) -> tuple[float, float]:
    """Cold and warm compile seconds, each in a fresh process, sharing one new inductor cache folder."""
    out = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        for _ in ("cold", "warm"):
            cmd = [sys.executable, __file__, "--child", name, "--config", args.config, "--threads", str(args.threads)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            out.append(json.loads(done.stdout.strip().splitlines()[-1])["compile_s"])
    return out[0], out[1]


def step_times(name: str, args) -> tuple[float, float]:
    """Median ms per step, eager and compiled, interleaved round by round in this process."""
    eager = step_timer(name, args.config, args.threads, False)
    compiled = step_timer(name, args.config, args.threads, True)
    for fn in (eager, compiled):  # warm-up: the compile, the allocator
        for _ in range(3):
            fn()
    rounds = {"eager": [], "compiled": []}
    for _ in range(args.rounds):
        for key, fn in (("eager", eager), ("compiled", compiled)):
            rounds[key].append(statistics.median([fn() for _ in range(args.steps)]) * 1e3)
    return statistics.median(rounds["eager"]), statistics.median(rounds["compiled"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="shakespeare", help="a shipped config name or a TOML path")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (--jobs auto runs one per run)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20, help="steps per round")
    parser.add_argument("--models", default=",".join(MODELS), help="comma list of: " + ", ".join(MODELS))
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.config, args.threads)
    import torch

    from modern_gpt.run import compiling

    rows, (model_cfg, train) = [], settings(args.config)
    for name in args.models.split(","):
        cold, warm = compile_seconds(name, args)
        eager_ms, compiled_ms = step_times(name, args)
        flops = compiling.step_flops(model_cfg.with_components(MODELS[name]), train.batch_size)
        rows.append(
            {
                "model": name,
                "eager_ms": eager_ms,
                "compiled_ms": compiled_ms,
                "gain": 1 - compiled_ms / eager_ms,
                "eager_gflops": flops / eager_ms / 1e6 / args.threads,  # per thread: compiling.Measured.gflops
                "cold_s": cold,
                "warm_s": warm,
            }
        )
    when = datetime.date.today().isoformat()
    shape = f"B{train.batch_size}·T{model_cfg.context}·d{model_cfg.dim}·L{model_cfg.layers}·V{VOCAB}"
    print(f"{machine()}; torch {torch.__version__}; {args.threads} thread(s); {when}; --config {args.config} ({shape})")
    print(f"medians of {args.rounds} interleaved rounds of {args.steps} steps\n")
    print("| model | eager ms/step | eager GFLOP/s | compiled ms/step | gain | compile s, cold | compile s, warm |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['model']} | {r['eager_ms']:.1f} | {r['eager_gflops']:.0f} | {r['compiled_ms']:.1f} | {r['gain']:.0%} | {r['cold_s']:.1f} "
            f"| {r['warm_s']:.1f} |"
        )
    if args.out:
        meta = {"machine": machine(), "torch": torch.__version__, "date": when, "threads": args.threads}
        with open(args.out, "w") as f:
            json.dump({**meta, "config": args.config, "shape": shape, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
