"""Step time against peers, side by side in one process (issue 23's target: <= 0.9x the peer's).

    python bench/bench_peer.py [--threads 2] [--rounds 7] [--steps 5] [--no-compile] [--out peer.json]

Pairs at B32 x T128 x d128 x L4 x V1024 (the issue's shape), each model built from a config with random weights
(nothing is downloaded), each pair with the same parameter count but six-llama (QK-norm's 256 gains):
- gpt2: modern-gpt's classic model against transformers' GPT2LMHeadModel (nanoGPT's architecture: GPT-2);
- six-llama: modern-gpt with all six components against transformers' LlamaForCausalLM (RMSNorm, RoPE, SwiGLU at
  modern-gpt's hidden width, no biases, 2 KV heads of 4, tied embeddings). Llama has no QK-norm, so the
  project's model does a little more work; hence also
- llama: modern-gpt with the five components Llama has (all but qk_norm) against LlamaForCausalLM, and
- qwen3: all six against transformers' Qwen3ForCausalLM, which has per-head QK-norm as modern-gpt does.
A step is what train.py takes: forward with the loss, backward, gradient clipping at 1.0 and the project's AdamW,
the same optimizer for both models of a pair, so that the pair differs in the model alone. Every model of a pair is
timed in interleaved rounds (eager, then compiled when --compile auto would compile it, or always with
--compile-all), so that the noise of a shared machine falls on both alike; each row is the median over rounds of
the median step of a round, and ratio is modern-gpt's time over the peer's (target <= 0.9).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from dataclasses import replace

import torch
from common import machine

from modern_gpt.core.config import ModelConfig, TrainConfig
from modern_gpt.model.gpt import GPT
from modern_gpt.run import compiling
from modern_gpt.run.train import make_optimizer, update

B, T, D, L, V, HEADS = 32, 128, 128, 4, 1024, 4
SIX = ("rmsnorm", "rope", "swiglu", "no_bias", "gqa", "qk_norm")
BASE = ModelConfig(vocab_size=V, context=T, dim=D, heads=HEADS, layers=L)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        n_embd=D, n_layer=L, n_head=HEADS, n_positions=T, vocab_size=V, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, attn_implementation="sdpa",
    )  # fmt: skip
    return GPT2LMHeadModel(cfg)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    six = BASE.with_components(SIX)
    cfg = LlamaConfig(
        hidden_size=D, intermediate_size=six.mlp_width, num_hidden_layers=L, num_attention_heads=HEADS,
        num_key_value_heads=six.n_kv_heads, vocab_size=V, max_position_embeddings=T, tie_word_embeddings=True,
        rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0, attn_implementation="sdpa",
    )  # fmt: skip
    return LlamaForCausalLM(cfg)


def qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    six = BASE.with_components(SIX)
    cfg = Qwen3Config(
        hidden_size=D, intermediate_size=six.mlp_width, num_hidden_layers=L, num_attention_heads=HEADS,
        num_key_value_heads=six.n_kv_heads, head_dim=six.head_dim, vocab_size=V, max_position_embeddings=T,
        tie_word_embeddings=True, attention_bias=False, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0,
        attn_implementation="sdpa",
    )  # fmt: skip
    return Qwen3ForCausalLM(cfg)


def ours(components: tuple[str, ...]):
    return GPT(BASE.with_components(components))


def loss_of(model, x, y):
    if isinstance(model, GPT) or isinstance(getattr(model, "_orig_mod", None), GPT):
        return model(x, y)[1]
    return model(input_ids=x, labels=x).loss  # transformers shifts the labels itself: T - 1 targets a row


def timer(name: str, build, compiled: bool, seed: int):
    """A function that takes one training step of a fresh model and returns its seconds."""
    torch.manual_seed(seed)
    model = build()
    fn = torch.compile(model) if compiled else model
    opt = make_optimizer(model, TrainConfig())
    gen = torch.Generator().manual_seed(seed)

    def step() -> float:
        x = torch.randint(V, (B, T), generator=gen)
        y = torch.roll(x, -1, 1)
        t0 = time.perf_counter()
        update(model, opt, loss_of(fn, x, y), 1.0)
        return time.perf_counter() - t0

    return step


LLAMA = SIX[:5]  # all but qk_norm
PAIRS = {  # name: (components, modern-gpt's model), (the peer's name, its model)
    "gpt2": (((), "modern-gpt classic"), ("transformers GPT2LMHeadModel", gpt2)),
    "six-llama": ((SIX, "modern-gpt all six"), ("transformers LlamaForCausalLM", llama)),
    "llama": ((LLAMA, "modern-gpt Llama (all but qk_norm)"), ("transformers LlamaForCausalLM", llama)),
    "qwen3": ((SIX, "modern-gpt all six"), ("transformers Qwen3ForCausalLM", qwen3)),
}


def auto_compiles(components: tuple[str, ...], threads: int, steps: int) -> bool:
    """Whether --compile auto compiles a 3-seed ablation row of this model at this shape (compiling.decide)."""
    cfg = BASE.with_components(components)
    train = TrainConfig(steps=steps, batch_size=B)
    return compiling.decide([cfg] * 3, replace(train, compile="auto"), "cpu", threads)[0] == "on"


def measure(args) -> list[dict]:
    rows = []
    for pair in args.pairs.split(","):
        (components, ours_name), (peer_name, peer_build) = PAIRS[pair]
        modes = ["eager"]
        if args.compile_all or (not args.no_compile and auto_compiles(components, args.threads, args.run_steps)):
            modes.append("compiled")
        for mode in modes:
            timers = {
                ours_name: timer(ours_name, lambda c=components: ours(c), mode == "compiled", 0),
                peer_name: timer(peer_name, peer_build, mode == "compiled", 0),
            }
            for fn in timers.values():  # warm-up (and the compile)
                for _ in range(2):
                    fn()
            rounds = {name: [] for name in timers}
            for _ in range(args.rounds):
                for name, fn in timers.items():
                    rounds[name].append(statistics.median([fn() for _ in range(args.steps)]) * 1e3)
            ours_ms, peer_ms = (statistics.median(rounds[n]) for n in (ours_name, peer_name))
            rows.append(
                {"pair": pair, "mode": mode, "ours": ours_name, "ours_ms": ours_ms, "peer": peer_name,
                 "peer_ms": peer_ms, "ratio": ours_ms / peer_ms, "rounds": rounds}
            )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="steps per model per round")
    parser.add_argument("--run-steps", type=int, default=600, help="the run length --compile auto decides for")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="comma list of: " + ", ".join(PAIRS))
    parser.add_argument("--no-compile", action="store_true", help="eager rows only")
    parser.add_argument("--compile-all", action="store_true", help="compiled rows even where auto would not compile")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    rows = measure(args)
    when = datetime.date.today().isoformat()
    print(
        f"{machine()}; torch {torch.__version__}, transformers {transformers.__version__}; {args.threads} threads; "
        f"{when}; B{B}·T{T}·d{D}·L{L}·V{V}; medians of {args.rounds} interleaved rounds of {args.steps} steps\n"
    )
    print("| pair | mode | modern-gpt ms/step | peer ms/step | ratio (target <= 0.9) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['ours']} / {r['peer']} | {r['mode']} | {r['ours_ms']:.0f} | {r['peer_ms']:.0f} | {r['ratio']:.2f} |"
        )
    if args.out:
        meta = {"machine": machine(), "torch": torch.__version__, "transformers": transformers.__version__}
        with open(args.out, "w") as f:
            json.dump({**meta, "date": when, "threads": args.threads, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
