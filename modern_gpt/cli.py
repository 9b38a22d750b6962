"""The `modern-gpt` command line: parses flags, calls the library, prints tables. No logic of its own."""

from __future__ import annotations

import functools
import inspect
import json
import os
import shlex
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
if not console.is_terminal and "COLUMNS" not in os.environ:
    console = Console(width=120)  # logs and pipes: wide enough for the ablation table on one line per row
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
    _state["argv"] = sys.argv[1:]
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


# ---------------------------------------------------------------------------
# ablate and report
# ---------------------------------------------------------------------------
def _results_folder(out: Path | None, plan: str) -> Path:
    if out is not None:
        return out
    base = Path("results") / f"{time.strftime('%Y%m%d-%H%M%S')}-{plan}"
    folder, n = base, 2
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    return folder


def _command_line() -> str:
    """The command as typed (main() records it; an in-process call has none)."""
    if "argv" not in _state:
        return "(called in-process, not from the command line)"
    return shlex.join(["modern-gpt", *_state["argv"]])


def _print_report(meta: dict, runs, fmt: str, folder: Path) -> list[dict]:
    from . import report

    summary = report.summarize(meta, runs)
    notes = report.footnotes(meta, runs, summary, str(folder))
    if fmt == "table":
        console.print(report.rich_table(meta, summary))
        for note in notes:
            console.print(f"- {note}", highlight=False, markup=False)
    elif fmt == "markdown":
        print(report.markdown(meta, summary, notes), end="")
    elif fmt == "csv":
        print(report.csv_text(summary), end="")
    else:
        print(report.json_text(meta, summary, notes))
    return summary


@app.command()
@with_settings(components=False, exclude=("model.vocab_size",))
def ablate(
    settings,
    plan: Annotated[
        str | None,
        typer.Option(
            help="cumulative (each row adds one component to the row above), single (each alone on the baseline), leave-one-out (all modern minus each), custom (--variants). [default: cumulative]",
            rich_help_panel="Ablation",
        ),
    ] = None,
    components: Annotated[
        str | None,
        typer.Option(
            help=f"Comma list choosing and ordering the components [default: {','.join(COMPONENTS)}].",
            rich_help_panel="Ablation",
        ),
    ] = None,
    variants: Annotated[
        str | None,
        typer.Option(
            help='With --plan custom: rows separated by ";", each classic, modern or components joined by "+", e.g. "classic;rmsnorm+rope;modern". Each row is compared with the row above.',
            rich_help_panel="Ablation",
        ),
    ] = None,
    seeds: Annotated[
        int | None, typer.Option(help="Run every variant with seeds 0..N-1 [default: 3].", rich_help_panel="Ablation")
    ] = None,
    seed_list: Annotated[
        str | None, typer.Option(help="Explicit seeds instead, e.g. 3,7,11.", rich_help_panel="Ablation")
    ] = None,
    match_params: Annotated[
        bool,
        typer.Option(
            "--match-params",
            help="Adjust each variant's MLP width so that its non-embedding parameters are within 1% of the first row's.",
            rich_help_panel="Ablation",
        ),
    ] = False,
    jobs: Annotated[
        int,
        typer.Option(
            help="Runs at once, in separate processes; torch threads are divided among them.",
            rich_help_panel="Ablation",
        ),
    ] = 1,
    out: Annotated[
        Path | None, typer.Option(help="Results folder [default: results/<time>-<plan>].", rich_help_panel="Ablation")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Finish an interrupted ablation in this results folder; its settings are reused.",
            rich_help_panel="Ablation",
        ),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="table, markdown, csv or json.", rich_help_panel="Ablation")
    ] = "table",
) -> None:
    """Train every variant with every seed and print one table: does each component really help?"""
    from . import ablate as ab
    from .data import load_corpus
    from .progress import AblationDisplay
    from .report import FORMATS
    from .results import ResultsDir
    from .train import resolve_device

    _check_format(fmt, FORMATS)
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}.")
    if settings.data.path:
        settings.data.path = str(Path(settings.data.path).expanduser().resolve())  # resume works from anywhere
    explicit = bool(settings.given or plan or components or variants or seeds is not None or seed_list or match_params)
    requested = None
    if resume is None or explicit:
        variant_rows = ab.make_plan(plan or "cumulative", ab.parse_components(components), variants)
        if match_params:
            variant_rows = ab.match_params(variant_rows, settings.model)
        requested = ab.Spec(settings, plan or "cumulative", variant_rows, ab.seed_list(seeds, seed_list), match_params)
    device = resolve_device(settings.train.device if requested else "cpu")

    if resume is not None:
        results = ResultsDir(resume)
        meta = results.read_meta()
        spec = ab.Spec.from_dict(meta["spec"])
        corpus = load_corpus(spec.settings.data)
        if requested is not None:
            requested.data_key, requested.data_name = corpus.key, corpus.name
            diffs = ab.spec_differences(meta["spec"], requested.to_dict())
            if diffs:
                raise UserError(
                    f"{resume} was made with other settings ({'; '.join(diffs[:4])}); resume with the same settings, "
                    f"or with --resume {resume} alone, which reuses them."
                )
        if corpus.key != spec.data_key:
            raise UserError(
                f"the data of {resume} has changed since the ablation started ({spec.data_name}); start a new ablation."
            )
        device = resolve_device(spec.settings.train.device)
        meta.update(status="running", resumed=[*meta.get("resumed", []), ab.now()])
    else:
        spec = requested
        corpus = load_corpus(spec.settings.data)
        spec.data_key, spec.data_name = corpus.key, corpus.name
        results = ResultsDir(_results_folder(out, spec.plan))
        if results.path.exists() and any(results.path.iterdir()):
            raise UserError(f"{results.path} already exists and is not empty; choose another --out, or --resume it.")
        meta = {
            "command": _command_line(),
            "spec": spec.to_dict(),
            "variants": ab.variant_info(spec, corpus.tokenizer.vocab_size),
            "jobs": jobs,
            **ab.environment(device),
            "started": ab.now(),
            "finished": None,
            "status": "running",
        }
        results.create(meta)
    from .data import check_length

    check_length(corpus, spec.settings.model.context)
    results.lock()
    try:
        results.write_meta(meta)
        names = [v.name for v in spec.variants]
        log = Console(stderr=True)
        with AblationDisplay(console, log, names, spec.settings.train.steps, live=console.is_terminal) as display:
            if not console.is_terminal:
                log.print(
                    f"ablation: {len(names)} variants x {len(spec.seeds)} seeds -> {results.path}",
                    markup=False,
                    highlight=False,
                )
            ab.Ablation(spec, results, jobs).run(display)
        meta.update(status="finished", finished=ab.now())
        results.write_meta(meta)
        summary = _print_report(meta, results.runs(), fmt, results.path)
        results.write_summary(summary)
    finally:
        results.unlock()
    if fmt == "table":
        console.print(f"results: {results.path}", highlight=False)


@app.command()
def report(
    folder: Annotated[Path, typer.Argument(help="A results folder written by modern-gpt ablate or duel.")],
    fmt: Annotated[str, typer.Option("--format", help="table, markdown, csv or json.")] = "table",
) -> None:
    """Re-render an ablation's table from its results folder alone (nothing is trained)."""
    from .report import FORMATS
    from .results import ResultsDir

    _check_format(fmt, FORMATS)
    results = ResultsDir(folder)
    meta = results.read_meta()
    _print_report(meta, results.runs(), fmt, folder)


if __name__ == "__main__":
    main()
