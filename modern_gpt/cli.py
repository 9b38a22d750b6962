"""The `modern-gpt` command line: parses flags, calls the library, prints tables. No logic of its own."""

from __future__ import annotations

import functools
import inspect
import json
import sys
import time
import traceback
import typing
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from . import __version__
from .errors import UserError
from .model import COMPONENT_SUMMARY, COMPONENTS, PIECES, kv_cache_bytes_per_token, param_counts
from .settings import HELP, PANELS, SECTIONS, cli_settings, resolve

app = typer.Typer(
    name="modern-gpt",
    help="Does each piece of the modern transformer really help on your data? Train, ablate and compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
console = Console()
_state = {"debug": False}

FORMATS_TABLE_JSON = ("table", "json")


def _version(value: bool) -> None:
    if value:
        print(f"modern-gpt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show the Python traceback of an error.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    _state["debug"] = debug


def main() -> None:
    """The console script: user errors become one sentence on stderr and exit code 2."""
    try:
        app()
    except UserError as e:
        if _state["debug"]:
            traceback.print_exc()
        print(f"modern-gpt: error: {e}", file=sys.stderr)
        sys.exit(2)


# ---------------------------------------------------------------------------
# Settings flags: generated from the settings dataclasses, so that train, ablate
# and duel share one definition of every flag.
# ---------------------------------------------------------------------------
def _option(name: str, annotation, default, *flags: str, help: str, panel: str, show=False) -> inspect.Parameter:
    opt = typer.Option(*flags, help=help, rich_help_panel=panel, show_default=show)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, opt]
    )


def with_settings(sections: tuple[str, ...] = tuple(SECTIONS), components: bool = True, exclude: tuple[str, ...] = ()):
    """Adds --config, --smoke, one flag per setting and (optionally) the component switches to a command,
    and calls it with `settings`, the resolved Settings."""
    settings = cli_settings(sections, exclude)

    def deco(func):
        hints = typing.get_type_hints(func, include_extras=True)  # annotations are strings in this module
        own = [p for p in inspect.signature(func).parameters.values() if p.name != "settings"]
        params = [p.replace(annotation=hints[p.name]) for p in own]
        params.append(
            _option(
                "config",
                str | None,
                None,
                "--config",
                "-c",
                help="TOML settings file, or a shipped one by name: smoke, mini, shakespeare.",
                panel="Settings",
            )
        )
        params.append(
            _option(
                "smoke",
                bool,
                False,
                "--smoke",
                help="Tiny settings and the built-in corpus: a CPU run in seconds (configs/smoke.toml).",
                panel="Settings",
            )
        )
        for s in settings:
            default = getattr(SECTIONS[s.section](), s.name)
            flags = s.flags if s.type is not bool else (f"{s.flags[0]}/--no-{s.flags[0][2:]}",)
            show = str(default) if default not in (None, "") else False
            params.append(
                _option(
                    f"{s.section}_{s.name}",
                    s.type | None,
                    None,
                    *flags,
                    help=HELP[s.key],
                    panel=PANELS[s.section],
                    show=show,
                )
            )
        if components:
            for c in COMPONENTS:
                params.append(
                    _option(c, bool, False, "--" + c.replace("_", "-"), help=COMPONENT_SUMMARY[c], panel="Components")
                )
            params.append(_option("modern", bool, False, "--modern", help="All six components.", panel="Components"))

        @functools.wraps(func)
        def wrapper(**kw):
            overrides = {s.key: kw.pop(f"{s.section}_{s.name}") for s in settings}
            if components:
                modern = kw.pop("modern")
                for c in COMPONENTS:
                    if kw.pop(c) or modern:
                        overrides[f"model.{c}"] = True
            config, smoke = kw.pop("config"), kw.pop("smoke")
            return func(settings=resolve(config, smoke, overrides), **kw)

        wrapper.__signature__ = inspect.Signature(params)
        return wrapper

    return deco


def _check_format(fmt: str, allowed: tuple[str, ...]) -> None:
    if fmt not in allowed:
        raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(allowed)}.")


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, allow_nan=True))


# ---------------------------------------------------------------------------
# params
# ---------------------------------------------------------------------------
@app.command()
@with_settings(sections=("model",))
def params(
    settings,
    fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
) -> None:
    """The price of each piece: parameters per piece (embedding, positions, attention, MLP, norms, biases)."""
    _check_format(fmt, FORMATS_TABLE_JSON)
    cfg = settings.model
    counts = param_counts(cfg)
    info = {
        "total": counts["total"],
        "pieces": {p: counts[p] for p in PIECES},
        "components": list(cfg.components),
        "mlp_hidden": cfg.hidden,
        "head_dim": cfg.head_dim,
        "kv_heads": cfg.n_kv_heads,
        "kv_cache_bytes_per_token": kv_cache_bytes_per_token(cfg),
        "config": cfg.to_dict(),
    }
    if fmt == "json":
        _print_json(info)
        return
    title = "classic (GPT-2)" if not cfg.components else "+".join(cfg.components)
    table = Table(title=f"Parameters: {title}")
    table.add_column("piece")
    table.add_column("params", justify="right")
    table.add_column("share", justify="right")
    for piece in PIECES:
        if piece == "output_head" and counts[piece] == 0:
            continue
        table.add_row(piece.replace("_", " "), f"{counts[piece]:,}", f"{100 * counts[piece] / counts['total']:.1f}%")
    table.add_section()
    table.add_row("total", f"{counts['total']:,}", "100.0%", style="bold")
    console.print(table)
    console.print(
        f"MLP hidden width {cfg.hidden}, head dim {cfg.head_dim}, {cfg.heads} query heads, {cfg.n_kv_heads} K/V heads, "
        f"KV cache {kv_cache_bytes_per_token(cfg):,} bytes per token at bf16."
    )


# ---------------------------------------------------------------------------
# train and generate
# ---------------------------------------------------------------------------
def _default_out(kind: str, suffix: str = "") -> Path:
    return Path(kind) / (time.strftime("%Y%m%d-%H%M%S") + (f"-{suffix}" if suffix else ""))


@app.command()
@with_settings(exclude=("model.vocab_size",))
def train(
    settings,
    seed: Annotated[int, typer.Option(help="Seed of every random stream of the run.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Checkpoint folder [default: checkpoints/<time>].")] = None,
) -> None:
    """Train one model and write a checkpoint folder (weights, settings, tokenizer, metrics)."""
    from .checkpoint import save_checkpoint
    from .data import load_corpus
    from .progress import run_progress
    from .train import train_run

    if seed < 0:
        raise UserError(f"--seed must not be negative, got {seed}.")
    corpus = load_corpus(settings.data)
    out = out or _default_out("checkpoints", "+".join(settings.model.components) or "classic")
    with run_progress(console, settings.train.steps, f"train {corpus.name}") as progress:
        result, model = train_run(settings.model, corpus, settings.train, seed, progress=progress)
    settings.model = model.config  # with the tokenizer's vocab_size
    metrics = result.to_dict()
    if result.diverged or result.error:
        from .files import write_json

        Path(out).mkdir(parents=True, exist_ok=True)
        write_json(Path(out) / "metrics.json", metrics)
        why = "diverged (the loss became NaN or infinite)" if result.diverged else result.error
        console.print(
            f"[red]The run {why} after {result.steps_done} steps[/]; no weights saved, metrics in {out}/metrics.json."
        )
        return
    save_checkpoint(out, model, settings, corpus.tokenizer, metrics)
    table = Table(title=f"{'+'.join(model.config.components) or 'classic'} on {corpus.name}, seed {seed}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("params", f"{result.params:,}"),
        ("train loss (nats/token)", f"{result.train_loss:.4f}"),
        ("val loss (nats/token)", f"{result.val_loss:.4f}"),
        ("val bits/char", f"{result.val_bpc:.4f}"),
        ("val perplexity", f"{result.val_ppl:.2f}"),
        ("best val loss (step)", f"{result.best_val_loss:.4f} ({result.best_step})"),
        ("epochs of the training split", f"{result.epochs:.2f}"),
        ("tokens/s", f"{result.tokens_per_s:,.0f}"),
        ("wall seconds", f"{result.secs:.1f}"),
        ("device, threads", f"{result.device}, {result.threads}"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if result.epochs > 1:
        console.print(
            f"[yellow]note:[/] the run saw {result.epochs:.1f} epochs of the training split: it may have memorised it."
        )
    console.print(f"checkpoint: {out}")


@app.command()
def generate(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint folder written by modern-gpt train.")],
    prompt: Annotated[str, typer.Option(help="Text to continue.")] = "",
    tokens: Annotated[int, typer.Option(help="Tokens to sample.")] = 200,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 is greedy.")] = 0.8,
    top_k: Annotated[int | None, typer.Option(help="Sample from the k most likely tokens only.")] = 40,
    seed: Annotated[int, typer.Option(help="Sampling seed: the same seed gives the same text.")] = 0,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | mps.")] = "cpu",
) -> None:
    """Continue a prompt with a trained checkpoint; every model setting is read from the checkpoint."""
    from .checkpoint import generate_text, load_checkpoint
    from .train import resolve_device

    if tokens < 0:
        raise UserError(f"--tokens must not be negative, got {tokens}.")
    if temperature < 0:
        raise UserError(f"--temperature must not be negative, got {temperature}.")
    if top_k is not None and top_k < 1:
        raise UserError(f"--top-k must be at least 1, got {top_k}.")
    model, _, tokenizer = load_checkpoint(checkpoint, resolve_device(device))
    print(generate_text(model, tokenizer, prompt, tokens, temperature, top_k, seed))


if __name__ == "__main__":
    main()
