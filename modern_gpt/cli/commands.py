"""The `modern-gpt` command line: its flags (the settings' and the ablation's options' generated from their
dataclasses), a user error as one sentence and exit code 2, and what render.py renders, printed. What a command
decides, the library decides: planning.py what an ablation runs, running.py how, report.py what it found."""

from __future__ import annotations

import errno
import os
import select
import shlex
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from .. import __version__
from ..ablation.session import ABLATE_OPTIONS, POWER_OPTIONS, TRACK_OPTIONS, Interrupted, request_of, run_ablation
from ..core.components import COMPONENTS
from ..core.config import POWER_SEEDS, TRACKERS, AblationOptions
from ..core.errors import UserError
from ..core.settings import ABLATION, OPTIONS
from .options import (
    TABLE_OR_JSON,
    Checkpoint,
    Device,
    Force,
    Format,
    RecordedPlugins,
    Seed,
    TableOrJson,
    _flag_help,
    _folder,
    _load_plugins,
    _out,
    with_settings,
)

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
    console = Console(width=150)  # logs and pipes: wide enough for the ablation table on one line per row
_state = {"debug": False}


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


def _terminate(signum, frame) -> None:
    """SIGTERM and SIGHUP stop a run the way Ctrl-C does: finished work is kept."""
    if frame is not None and frame.f_code.co_name == "cb" and frame.f_code.co_filename.startswith("<frozen"):
        # importlib's module-lock weakref callback: Python ignores (and prints) an exception raised there, and the
        # signal would be lost. Send it again once the callback has returned. TODO: other frames that swallow it.
        threading.Timer(0.02, os.kill, (os.getpid(), signum)).start()
        return
    raise KeyboardInterrupt


# The exceptions click raises for a mistyped command line, reached through typer's public BadParameter (a
# UsageError, a ClickException): typer bundles its own click in recent versions, so click's names may not be its.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _usage_error(e) -> str:
    """click's usage error as one sentence: what is wrong, and where the flags are listed."""
    text = " ".join(e.format_message().split())
    command = e.ctx.command_path if e.ctx is not None else "modern-gpt"
    return f"{text.rstrip('.')}; see {command} --help."


def main() -> None:
    """The console script: a user error (a usage error included) and running out of memory are one sentence on
    stderr and exit code 2; Ctrl-C, SIGTERM and SIGHUP exit with 130."""
    _state["argv"] = sys.argv[1:]
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _terminate)
    try:
        try:
            code = _invoke()
        except UsageError as e:
            raise UserError(_usage_error(e)) from e
        except typer.Abort:  # click's name for Ctrl-C
            raise KeyboardInterrupt from None
        except ClickException as e:
            raise UserError(" ".join(e.format_message().split())) from e
    except UserError as e:
        if _state["debug"]:
            traceback.print_exc()
        print(f"modern-gpt: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        if _state["debug"]:
            traceback.print_exc()
        print("modern-gpt: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as e:  # BrokenPipeError among them
        _end_on_os_error(e)
    except MemoryError:  # by now the unwinding has freed what filled the memory: one sentence can be printed
        if _state["debug"]:
            traceback.print_exc()
        what = " ".join(["modern-gpt", *[a for a in _state["argv"] if not a.startswith("-")][:1]])
        print(
            f"modern-gpt: error: out of memory: {what} needed more memory than is free; give it a smaller input "
            "(for judge, a file of fewer runs) or run it where more memory is free.",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _end_on_os_error(e: OSError) -> None:
    """Two OSErrors that are the user's, not faults: stdout's reader gone (`| head` read what it wanted: end
    quietly, as a tool killed by SIGPIPE does; a finished run is already in its folder), and a name longer than
    the file system allows in a path that is read. Any other, a worker's broken pipe included, is raised."""
    if isinstance(e, BrokenPipeError) and _stdout_closed():
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush is silent
        sys.exit(128 + 13)
    if e.errno == errno.ENAMETOOLONG:
        name = os.fsdecode(e.filename or "")
        print(
            f"modern-gpt: error: {name[:60]}… holds a name longer than the file system allows; check the path.",
            file=sys.stderr,
        )
        sys.exit(2)
    raise e


def _stdout_closed() -> bool:
    """stdout is a pipe whose reader has gone (poll reports an error on its write end)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no stdout
        return False


def _invoke():
    """The app run as app(standalone_mode=False) runs it, except that Ctrl-C reaches main() as the
    KeyboardInterrupt it is: typer turns one into a bare exit code 130, with no word on stderr. Start-up
    matters here: torch and pandas load inside the commands that need them, after __main__'s handler is gone."""
    command = typer.main.get_command(app)
    if not sys.argv[1:]:  # no command: the help, as no_args_is_help shows it, with exit code 0
        with command.make_context("modern-gpt", ["--help"], resilient_parsing=True) as ctx:
            print(command.get_help(ctx))
        return 0
    try:
        with command.make_context("modern-gpt", sys.argv[1:]) as ctx:
            return command.invoke(ctx)
    except typer.Exit as e:  # --help, --version, and a command's own exit code
        return e.exit_code


# ---------------------------------------------------------------------------
# params
# ---------------------------------------------------------------------------
@app.command()
@with_settings(sections=("model",))
def params(settings, fmt: TableOrJson = "table") -> None:
    """The price of each piece: parameters per piece (embedding, positions, attention, MLP, norms, biases)."""
    from ..ablation.planning import check_read
    from ..views import render

    check_read(settings, [settings.model.components])
    info = render.params_info(settings.model)
    if fmt == "json":
        print(render.to_json(info))
        return
    console.print(render.params_table(info))
    console.print(render.params_sentence(info))


# ---------------------------------------------------------------------------
# train and generate
# ---------------------------------------------------------------------------
OutCheckpoint = _out("Checkpoint", "checkpoints/<time>")


@app.command()
@with_settings(exclude=("model.vocab_size",), options=TRACK_OPTIONS, other_options_ok=True)
def train(settings, options: AblationOptions, seed: Seed = 0, out: OutCheckpoint = None, force: Force = False) -> None:
    """Train one model and write a checkpoint folder (weights, settings, tokenizer, metrics).

    [bold]Examples[/bold]
      modern-gpt train --smoke --rope --out ckpt
      modern-gpt train --config shakespeare --data tinyshakespeare --modern
    """
    from ..ablation.session import train_checkpoint
    from ..core.config import lossy_note
    from ..views import render
    from ..views.progress import run_progress

    steps = settings.train.steps
    done = train_checkpoint(
        settings, options.tracking, seed, out, force, lambda name: run_progress(console, steps, f"train {name}")
    )
    for name, run_id in done.tracked.items():
        console.print(f"{name}: {run_id}", markup=False, highlight=False)
    result, corpus, settings = done.result, done.corpus, done.settings
    if done.failed:
        console.print(render.train_failed(result, done.folder), markup=False)
        return
    windows = render.train_windows(result, settings)
    console.print(render.train_table(result, settings.model.components, corpus.name, seed, windows))
    if result.epochs > 1:
        console.print(render.memorised(result.epochs))
    if not corpus.lossless:
        console.print(f"note: {lossy_note(settings.data.tokenizer, corpus.val_lost, corpus.val_chars)}", markup=False)
    console.print(f"checkpoint: {done.folder}")


@app.command()
def generate(
    checkpoint: Checkpoint,
    prompt: Annotated[str, typer.Option(help="Text to continue.")] = "",
    tokens: Annotated[int, typer.Option(help="Tokens to sample (0 to 100,000).")] = 200,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 is greedy.")] = 0.8,
    top_k: Annotated[int | None, typer.Option(help="Sample from the k most likely tokens only.")] = 40,
    seed: Seed = 0,
    device: Device = "auto",
    plugin: RecordedPlugins = None,
) -> None:
    """Continue a prompt with a trained checkpoint; every model setting is read from the checkpoint."""
    from ..run.checkpoint import check_sampling, generate_text, load_checkpoint
    from ..run.train import resolve_device

    check_sampling(tokens, temperature, top_k)  # before the checkpoint is read
    _load_plugins(plugin)
    model, _, tokenizer = load_checkpoint(checkpoint, resolve_device(device))
    print(generate_text(model, tokenizer, prompt, tokens, temperature, top_k, seed))


# ---------------------------------------------------------------------------
# ablate, duel and report
# ---------------------------------------------------------------------------
def _command_line() -> str:
    """The command as typed (main() records it; an in-process call has none)."""
    if "argv" not in _state:
        return "(called in-process, not from the command line)"
    return shlex.join(["modern-gpt", *_state["argv"]])


def _print_report(folder: Path, fmt: str, at_lr: float | None = None) -> None:
    from ..ablation import report
    from ..ablation.results import ResultsDir

    results = ResultsDir(folder, read_only=True)  # nothing trains: a missing plugin file is a footnote
    power = fmt in TABLE_OR_JSON and results.spec.plan == "power"
    _print_table(report.load(results, at_lr, verdicts=not power), fmt)


def _print_table(rep, fmt: str) -> None:
    """A folder's table (ablation.report.Report) in the format asked for; a power folder's figures."""
    from ..ablation import report
    from ..views import render

    if fmt in TABLE_OR_JSON and rep.spec.plan == "power":  # what `modern-gpt power` printed, with every note
        _print_power(report.power_info(rep.spec, rep.summary), rep.notes, fmt)
        return
    if fmt == "table":
        render.print_table(console, render.folder_table(console, rep))  # compact where the terminal is narrow
        if rep.duel:
            console.print(render.duel_table(rep.duel))
            console.print(render.duel_sentence(rep.duel), highlight=False, markup=False)
        for table in render.report_metric_tables(rep.metrics, rep.design) if rep.metrics is not None else []:
            render.print_table(console, table)
        render.print_notes(console, rep.notes)
    elif fmt == "markdown":
        print(render.markdown(rep), end="")
    elif fmt == "csv":
        print(render.csv_text(rep.summary), end="")
    else:
        print(render.json_text(rep))


def _print_power(info: dict, notes: list[str], fmt: str) -> None:
    from ..views import render

    if fmt == "json":
        print(render.to_json({**info, "footnotes": notes}))
        return
    if info["mde"]:
        console.print(render.power_table(info))
    for line in render.power_sentences(info):
        console.print(line, highlight=False, markup=False)
    render.print_notes(console, notes)


def _run_ablation(
    settings,
    options: AblationOptions,
    request,
    *,
    out: str | None,
    resume: Path | None,
    fmt: str,
    at_lr: float | None = None,
) -> None:
    """ablate, duel and power: the library's run_ablation with the live display, then the table printed.
    Ctrl-C: the summary of what finished, the command that resumes, exit code 130."""
    from ..ablation.session import Detached
    from ..views.progress import ablation_display

    def display(ablation):
        return ablation_display(ablation, console, Console(stderr=True))

    try:
        result = run_ablation(settings, options, request, out, resume, at_lr, display, _command_line())
    except Interrupted as e:
        from ..views import render

        print(render.interrupted(e.finished, e.total, e.folder, e.resume), file=sys.stderr)
        raise typer.Exit(130) from None
    except Detached as e:  # --detach: submitted, and this process is done
        print(f"{e}.", flush=True)
        return
    _print_table(result.table, fmt)
    if fmt == "table":
        from ..views import render

        console.print(render.results_line(result.folder, result.table.spec.lrs), highlight=False)


PLAN_HELP = (
    "cumulative (each row adds one component to the row above), single (each alone on the baseline), "
    "leave-one-out (all modern minus each), custom (--variants). \\[default: cumulative]"
)
COMPONENTS_HELP = f"Comma list choosing and ordering the components \\[default: {','.join(COMPONENTS)}]."
VARIANTS_HELP = (
    'With --plan custom: rows separated by ";", each classic, modern or components joined by "+", e.g. '
    '"classic;rmsnorm+rope;modern". Each row is compared with the row above.'
)
VARIANT_HELP = (
    "The architecture to measure: classic, modern, or components joined by +; measure the noisiest one you plan "
    "(rows that change the architecture can be several times noisier than two inits of classic) \\[default: classic]."
)
RESUME_HELP = "Finish an interrupted run of this command in this results folder; its settings are reused."
PANEL = "Ablation"

# The ablation's options (AblationOptions, in config.py): their flags, help and defaults come from its fields;
# which command takes which is the API's (ABLATE_OPTIONS, POWER_OPTIONS, TRACK_OPTIONS).


POWER_SEEDS_HELP = f"Seeds to train it with, each also with the placebo init \\[default: {POWER_SEEDS}]."
STATS = OPTIONS[f"{ABLATION}.alpha"].panel
Alpha = Annotated[float | None, typer.Option(help=_flag_help(OPTIONS[f"{ABLATION}.alpha"]), rich_help_panel=STATS)]
Resume = Annotated[Path | None, typer.Option(help=RESUME_HELP, rich_help_panel=PANEL)]
LR = "Learning rates"
LRS_HELP = (
    "Train every row at each of these peak learning rates (replacing lr), e.g. 1e-3,3e-3,1e-2; the table shows "
    "each row at its own best one, chosen on half the evaluation tokens and reported on the other half."
)
SWEEP_HELP = "LOW:HIGH:N: N learning rates log-spaced from LOW to HIGH, as for --lrs (e.g. 1e-3:1e-2:3)."
AT_LR_HELP = "With a folder trained at several learning rates: show every row at this one instead of its best."
Lrs = Annotated[str | None, typer.Option(help=LRS_HELP, rich_help_panel=LR)]
LrSweep = Annotated[str | None, typer.Option("--lr-sweep", help=SWEEP_HELP, rich_help_panel=LR)]
AtLr = Annotated[float | None, typer.Option("--at-lr", help=AT_LR_HELP, rich_help_panel=LR)]
OutAblate, OutDuel, OutPower = (_out("Results", f"results/<time>-{c}", PANEL) for c in ("<plan>", "duel", "power"))


@app.command()
@with_settings(components=False, exclude=("model.vocab_size",), options=ABLATE_OPTIONS)
def ablate(
    settings,
    options: AblationOptions,
    plan: Annotated[str | None, typer.Option(help=PLAN_HELP, rich_help_panel=PANEL)] = None,
    components: Annotated[str | None, typer.Option(help=COMPONENTS_HELP, rich_help_panel=PANEL)] = None,
    variants: Annotated[str | None, typer.Option(help=VARIANTS_HELP, rich_help_panel=PANEL)] = None,
    lrs: Lrs = None,
    lr_sweep: LrSweep = None,
    at_lr: AtLr = None,
    out: OutAblate = None,
    resume: Resume = None,
    fmt: Format = "table",
) -> None:
    """Train every variant with every seed and print one table: does each component really help?

    [bold]Examples[/bold]
      modern-gpt ablate --seeds 3 --smoke                      [dim]# the first table, on a CPU in seconds[/dim]
      modern-gpt ablate --config shakespeare --data tinyshakespeare --seeds 5
      modern-gpt ablate --plan single --components rope,swiglu --track mlflow
      modern-gpt ablate --resume results/20261202-101500-cumulative
    """
    rows = dict(plan=plan, components=components, variants=variants, lrs=lrs, lr_sweep=lr_sweep)
    _run_ablation(
        settings, options, request_of("ablate", options, **rows), out=out, resume=resume, fmt=fmt, at_lr=at_lr
    )


LADDER = "Ladder"
RUNGS_HELP = (
    "A count of rungs, each halving the config's width below the one above (the top rung is the config), or the "
    "widths, smallest first (e.g. 32,64,128); every rung keeps the config's heads and KV heads \\[default: 3]."
)
DEPTHS_HELP = "Layers per rung, one per rung (e.g. 2,3,4) \\[default: the config's at every rung]."
TPP_HELP = (
    "Training tokens per non-embedding parameter (of the plan's first row) at every rung \\[default: the config's "
    "own, its steps x batch x context over its size, so the top rung trains as ablate does]."
)
RUNG_STEPS_HELP = "Steps per rung instead, one per rung (e.g. 50,150,600)."
LR_RULE_HELP = (
    "Each rung's learning rate: scaled (--lr at the top rung times (N/N_top)^(-1/3), OLMo's ladder exponent) or "
    "constant (--lr everywhere); --lrs instead trains every row at each rate at every rung, each at its best "
    "(the fair version: one more run per rate) \\[default: scaled]."
)
TREND_MARGIN_HELP = "A factor of k per 10x compute (e.g. 1.1): call a row's trend 'steady' when it is shown within it."
TARGET_HELP = "FLOPs to extrapolate each row's k to along its trend line, with its interval (e.g. 1e18)."
OutScale = _out("Results", "results/<time>-scale", PANEL)


@app.command()
@with_settings(components=False, exclude=("model.vocab_size",), options=ABLATE_OPTIONS)
def scale(
    settings,
    options: AblationOptions,
    plan: Annotated[str | None, typer.Option(help=PLAN_HELP, rich_help_panel=PANEL)] = None,
    components: Annotated[str | None, typer.Option(help=COMPONENTS_HELP, rich_help_panel=PANEL)] = None,
    variants: Annotated[str | None, typer.Option(help=VARIANTS_HELP, rich_help_panel=PANEL)] = None,
    rungs: Annotated[str | None, typer.Option(help=RUNGS_HELP, rich_help_panel=LADDER)] = None,
    depths: Annotated[str | None, typer.Option(help=DEPTHS_HELP, rich_help_panel=LADDER)] = None,
    tokens_per_param: Annotated[float | None, typer.Option(help=TPP_HELP, rich_help_panel=LADDER)] = None,
    rung_steps: Annotated[str | None, typer.Option(help=RUNG_STEPS_HELP, rich_help_panel=LADDER)] = None,
    lr_rule: Annotated[str | None, typer.Option(help=LR_RULE_HELP, rich_help_panel=LADDER)] = None,
    trend_margin: Annotated[float | None, typer.Option(help=TREND_MARGIN_HELP, rich_help_panel=LADDER)] = None,
    target_compute: Annotated[float | None, typer.Option(help=TARGET_HELP, rich_help_panel=LADDER)] = None,
    lrs: Lrs = None,
    lr_sweep: LrSweep = None,
    out: OutScale = None,
    resume: Resume = None,
    fmt: Format = "table",
) -> None:
    """The plan's rows at a ladder of model sizes: each component's compute multiplier k (how many times the
    reference's compute reaches its loss) at each size and over the ladder, with seed noise in its CI, and
    whether its gain grows, holds or shrinks as the model grows.

    [bold]Examples[/bold]
      modern-gpt scale --smoke --seeds 3
      modern-gpt scale --config shakespeare --data tinyshakespeare --rungs 32,64,128
    """
    from ..ablation.session import Detached, run_ladder
    from ..views.progress import ablation_display

    rows = dict(plan=plan, components=components, variants=variants, lrs=lrs, lr_sweep=lr_sweep)
    ladder = dict(rungs=rungs, depths=depths, tokens_per_param=tokens_per_param, rung_steps=rung_steps)
    ladder |= dict(lr_rule=lr_rule, trend_margin=trend_margin, target_compute=target_compute)
    request = request_of("scale", options, **rows, **ladder)

    def display(ablation):
        return ablation_display(ablation, console, Console(stderr=True))

    try:
        result = run_ladder(settings, options, request, out, resume, display, _command_line())
    except Interrupted as e:
        from ..views import render

        print(render.interrupted(e.finished, e.total, e.folder, e.resume), file=sys.stderr)
        raise typer.Exit(130) from None
    except Detached as e:  # --detach: a rung's runs are submitted, and this process is done
        print(f"{e}.", flush=True)
        return
    _print_ladder(result, fmt)


def _print_ladder(result, fmt: str) -> None:
    """A ladder's scale table; under it, in the table format, each rung's ordinary table."""
    from ..views import render

    rep = result.table
    if fmt == "markdown":
        print(render.ladder_markdown(rep), end="")
    elif fmt == "csv":
        print(render.ladder_csv(rep), end="")
    elif fmt == "json":
        print(render.ladder_json(rep))
    else:
        render.print_table(console, render.scale_table(console, rep))  # compact where the terminal is narrow
        render.print_notes(console, rep.notes)
        for i, rung in enumerate(result.rungs):
            console.print()
            console.print(f"Rung {rep.design.rungs[i]} ({rung.folder}):", highlight=False, markup=False)
            _print_table(rung.table, "table")
        if getattr(result, "folder", None) is not None:  # judge's table has no folder
            console.print(f"Results in {result.folder} (summary.csv: k and trend per row; runs.csv: its runs).")


@app.command()
@with_settings(components=False, exclude=("model.vocab_size",), options=ABLATE_OPTIONS)
def duel(
    settings,
    options: AblationOptions,
    lrs: Lrs = None,
    lr_sweep: LrSweep = None,
    at_lr: AtLr = None,
    out: OutDuel = None,
    resume: Resume = None,
    fmt: Format = "table",
) -> None:
    """All-classic (GPT-2) against all-modern (every component on: Qwen3-style, Llama's pieces and QK-norm) on
    the same data, seeds and steps.

    [bold]Examples[/bold]
      modern-gpt duel --smoke --seeds 3
      modern-gpt duel --data corpus.txt --lrs 1e-3,3e-3,1e-2
    """
    request = request_of("duel", options, lrs=lrs, lr_sweep=lr_sweep)
    _run_ablation(settings, options, request, out=out, resume=resume, fmt=fmt, at_lr=at_lr)


@app.command()
@with_settings(
    components=False, exclude=("model.vocab_size",), options=POWER_OPTIONS, helps={"seeds": POWER_SEEDS_HELP}
)
def power(
    settings,
    options: AblationOptions,
    variant: Annotated[str | None, typer.Option(help=VARIANT_HELP, rich_help_panel=PANEL)] = None,
    out: OutPower = None,
    resume: Resume = None,
    fmt: TableOrJson = "table",
) -> None:
    """How many seeds does my question need? Measures the seed noise of paired differences on your data and
    budget (one architecture, N seeds, each also with another weight init) and prints the smallest effect
    3, 5, 10 and 20 seeds would detect, before an expensive ablation.

    [bold]Examples[/bold]
      modern-gpt power --smoke
      modern-gpt power --config shakespeare --data tinyshakespeare
    """
    request = request_of("power", options, variants=variant)
    _run_ablation(settings, options, request, out=out, resume=resume, fmt=fmt)


REPORT_TRACK_HELP = (
    f"Push this folder to a tracker ({' | '.join(TRACKERS)}; repeat for more): the runs it does not hold yet, "
    "then the summary and verdicts; pushing again logs nothing new."
)
ReportTrack = Annotated[
    list[str] | None, typer.Option("--track", help=REPORT_TRACK_HELP, metavar="NAME", rich_help_panel="Trackers")
]
ReportMlflowUri = Annotated[
    str | None,
    typer.Option(
        "--mlflow-uri", help=_flag_help(OPTIONS[f"{ABLATION}.mlflow_uri"]), metavar="URI", rich_help_panel="Trackers"
    ),
]


SHARE = "Share"
HTML_HELP = (
    "Also write the table, its footnotes, the figures, the runs (seed by seed and as CSV) and the claim test as one "
    "self-contained HTML page: no script, nothing loaded from the network."
)
MARKDOWN_HELP = "Also write that page as one README-ready Markdown file, the runs' CSV inside it."
PAGE_FORCE_HELP = "Replace a page file that --html or --markdown names, if it exists."


def _page_path(flag: str):
    """--html's or --markdown's text as a path: an empty one is one sentence (a Path of it would be '.')."""
    example = "result.html" if flag == "--html" else "RESULT.md"

    def parse(text: str) -> Path:
        if not text:
            raise UserError(f"{flag} is an empty path; give the file to write, e.g. {flag} {example}.")
        return Path(text)

    return parse


Html = Annotated[
    Path | None,
    typer.Option("--html", help=HTML_HELP, metavar="FILE", rich_help_panel=SHARE, parser=_page_path("--html")),
]
Markdown = Annotated[
    Path | None,
    typer.Option(
        "--markdown", help=MARKDOWN_HELP, metavar="FILE", rich_help_panel=SHARE, parser=_page_path("--markdown")
    ),
]
PageForce = Annotated[bool, typer.Option("--force", help=PAGE_FORCE_HELP, rich_help_panel=SHARE)]


def _check_pages(html: Path | None, markdown: Path | None, inputs, force: bool = False) -> None:
    """--html and --markdown checked before anything is read (views.page.check_pages): a folder, a pipe, a file
    the command reads, one file for both, or a file already there without --force is one sentence."""
    from ..views.page import check_pages

    check_pages(html, markdown, inputs, force)


def _write_pages(page, html: Path | None, markdown: Path | None, inputs=(), force: bool = False) -> None:
    from ..views.page import write

    for path in write(page, html, markdown, inputs, force):
        print(f"wrote {path}", file=sys.stderr)


@app.command()
def report(
    folder: Annotated[Path, typer.Argument(help="A results folder written by modern-gpt ablate, duel or power.")],
    fmt: Format = "table",
    plot: Annotated[
        bool, typer.Option("--plot", help="Redraw curves.png (and lr.png after --lrs) from the folder's files.")
    ] = False,
    at_lr: AtLr = None,
    plugin: RecordedPlugins = None,
    track: ReportTrack = None,
    mlflow_uri: ReportMlflowUri = None,
    html: Html = None,
    markdown: Markdown = None,
    force: PageForce = False,
) -> None:
    """Re-render an ablation's table from its results folder alone (nothing is trained).

    [bold]Examples[/bold]
      modern-gpt report results/20261202-101500-cumulative
      modern-gpt report DIR --format csv
      modern-gpt report DIR --html result.html
    """
    from ..ablation.report import plot as draw
    from ..ablation.results import ResultsDir
    from ..verdict.table import at_lr_index

    _check_pages(html, markdown, [folder], force)
    _load_plugins(plugin)
    from ..ablation.ladder import is_ladder
    from ..api import report as api_report

    if is_ladder(folder):  # a ladder's folder: its scale table (each rung is a folder report reads as any other)
        if plot or track or mlflow_uri is not None:
            raise UserError(f"{folder} is a ladder: give --plot or --track with report on one of its rung-N folders.")
        result = api_report(folder, at_lr=at_lr)
        _print_ladder(result, fmt)
    else:
        if plot:
            at_lr_index(ResultsDir(folder).spec.lrs, at_lr)  # refused before drawing
            for path in draw(folder):
                print(f"wrote {path}", file=sys.stderr)
        if track or mlflow_uri is not None:
            _push(folder, track or [], mlflow_uri)
        _print_report(folder, fmt, at_lr)
        result = api_report(folder, at_lr=at_lr) if html or markdown else None
    if html or markdown:
        from ..views.page import folder_page

        _write_pages(folder_page(result), html, markdown, [folder], force)


def _push(folder: Path, names: list[str], mlflow_uri: str | None) -> None:
    """report --track: what each tracker lacks, logged once (tracking_push.push_folder)."""
    from ..ablation.push import push_folder

    for name, (n, summary) in push_folder(folder, names, mlflow_uri).items():
        what = f"logged {n} run{'s' * (n != 1)}" if n else "holds every run already"
        what += (" and the summary" if n else "; logged the summary") if summary else ""
        print(f"{name}: {what}", file=sys.stderr)


# ---------------------------------------------------------------------------
# judge: the verdict for runs that modern-gpt did not train
# ---------------------------------------------------------------------------
JUDGE_FILE_HELP = "A .csv, .jsonl or .parquet file (the suffix, in any case, says which), one row per run."
JUDGE = "The table"
ORDER_HELP = (
    "Every variant, comma separated, in the table's order \\[default: by FILE's row column, one number per "
    "variant, as in runs.csv; else as they first appear, which a footnote says]."
)
REFERENCE_HELP = (
    "Compare every row with this variant \\[default: the variant FILE's reference column names, as in runs.csv; "
    "else each with the row above]."
)
JUDGE_PLACEBO_HELP = (
    "This variant repeats the first row with only its randomness changed: compared with the first row, "
    "and never the row above another \\[default: the one FILE's placebo column marks true, as in runs.csv]."
)
COMPUTE_COL_HELP = "The column of each run's training FLOPs: FILE is a ladder of sizes, and the table gives k."
SIZE_COL_HELP = "The column of each run's model size, where that is all you have: k is then in units of size."
RUNG_COL_HELP = (
    "The column naming each run's rung \\[default: rung if FILE has it, else each variant's distinct computes]."
)
JUDGE_MARGIN_HELP = "In the metric's units: also call a row 'same' when an equivalence test shows |Δ| < this."
PUBLISHED = "Published runs"
THRESHOLD_HELP = (
    "Test each variant's claim that its mean is below this target (above, with --higher-is-better): a one-sided "
    "one-sample t-test, adjusted across the variants, e.g. the NanoGPT speedrun's 3.28 with --alpha 0.01."
)
AT_STEP_HELP = "A folder of logs: each run's evaluation at this step \\[default: its last]."
LOG_PATTERN_HELP = "A folder of logs in another format: a regex matched at a line's start, with a group (?P<loss>...)."


JUDGE_HELP = """The verdict table for runs that modern-gpt did not train: each variant against its reference, paired by seed, with the verdict rule ablate and report use (Hommel's procedure across rows; docs/statistics.md).

[bold]Examples[/bold]
  modern-gpt judge runs.csv --metric val_loss
  modern-gpt judge accuracy.csv --metric acc --higher-is-better
  modern-gpt judge DIR/runs.csv --html page.html
  modern-gpt judge records/2026-07-17_FP8DownProjection --threshold 3.28 --alpha 0.01

FILE is long format, one row per run: a variant column (--variant-col), a seed column (--seed-col, whole numbers) and a metric column (--metric, numbers), e.g. a CSV whose header is variant,seed,val_loss and whose rows read like classic,0,2.3172; other columns are ignored. Every variant needs one row for every seed: run s of a row is paired with run s of its reference. Optional columns diverged (true or false) and error (a message) mark a run that failed, as in modern-gpt's runs.csv: its metric may be empty, and it is left out of the means and pairs. Anything else (a missing or repeated run, a cell that is not a finite number) is refused with its line and column; nothing is guessed.

A results folder's runs.csv gives the table report gives, as it is: modern-gpt judge DIR/runs.csv (its row, reference and placebo columns say the table's order, each row's reference and the placebo; not for --seeds auto or --lrs folders, whose level and rows report reads from meta.json). So does an MLflow export of modern-gpt's runs: mlflow.search_runs's frame written with to_csv, or the CSV of MLflow's UI (tags.variant reads as variant, metrics.val_loss as val_loss, and so on; the summary run is left out).

With --compute-col (or --size-col), FILE is a ladder: runs of every variant and seed at several sizes, and judge gives the scale table modern-gpt scale gives, each row's compute multiplier k with its CI and its trend (a ladder folder's runs.csv, whose reference and placebo columns say the ladder's own: modern-gpt judge DIR/runs.csv --compute-col flops).

FILE may be a folder of training logs, one subfolder per variant and one file per run (modded-nanogpt, llm.c, nanoGPT, an HF trainer_state.json, a metrics.csv): runs that share no seeds are compared by Welch's t-test; a FILE with no seed column is judged the same way. --threshold tests a claim against a target (docs/statistics.md, "Published runs").
"""


Metrics = Annotated[
    list[str] | None,
    typer.Option(
        help="The column of the number compared (lower is better); repeat it to judge several metrics as one family, "
        "the first primary (docs/statistics.md, Several metrics).",
        show_default="val_loss",
    ),
]


@app.command(help=JUDGE_HELP)
def judge(
    file: Annotated[Path, typer.Argument(help=JUDGE_FILE_HELP, show_default=False)],
    variant_col: Annotated[str, typer.Option(help="The column naming each run's variant.")] = "variant",
    seed_col: Annotated[str, typer.Option(help="The column of seeds (whole numbers) that pair the runs.")] = "seed",
    metric: Metrics = None,
    higher_is_better: Annotated[
        bool, typer.Option("--higher-is-better", help="The metric is accuracy-like: higher is better.")
    ] = False,
    order: Annotated[str | None, typer.Option(help=ORDER_HELP, rich_help_panel=JUDGE)] = None,
    reference: Annotated[str | None, typer.Option(help=REFERENCE_HELP, rich_help_panel=JUDGE)] = None,
    placebo: Annotated[str | None, typer.Option(help=JUDGE_PLACEBO_HELP, rich_help_panel=JUDGE)] = None,
    alpha: Alpha = None,
    margin: Annotated[float | None, typer.Option(help=JUDGE_MARGIN_HELP, rich_help_panel=STATS)] = None,
    compute_col: Annotated[str | None, typer.Option(help=COMPUTE_COL_HELP, rich_help_panel=LADDER)] = None,
    size_col: Annotated[str | None, typer.Option(help=SIZE_COL_HELP, rich_help_panel=LADDER)] = None,
    rung_col: Annotated[str | None, typer.Option(help=RUNG_COL_HELP, rich_help_panel=LADDER)] = None,
    trend_margin: Annotated[float | None, typer.Option(help=TREND_MARGIN_HELP, rich_help_panel=LADDER)] = None,
    target_compute: Annotated[float | None, typer.Option(help=TARGET_HELP, rich_help_panel=LADDER)] = None,
    threshold: Annotated[float | None, typer.Option(help=THRESHOLD_HELP, rich_help_panel=PUBLISHED)] = None,
    at_step: Annotated[int | None, typer.Option(help=AT_STEP_HELP, rich_help_panel=PUBLISHED, min=0)] = None,
    log_pattern: Annotated[str | None, typer.Option(help=LOG_PATTERN_HELP, rich_help_panel=PUBLISHED)] = None,
    fmt: Format = "table",
    html: Html = None,
    markdown: Markdown = None,
    force: PageForce = False,
) -> None:
    """The verdict table for runs that modern-gpt did not train (its help: JUDGE_HELP)."""
    from ..verdict.design import ALPHA
    from ..verdict.judge import JudgeSettings, judge_file_runs, names

    _check_pages(html, markdown, [file], force)
    alpha = ALPHA if alpha is None else alpha
    metrics = tuple(metric or ["val_loss"])
    columns = (variant_col, seed_col, metrics[0], higher_is_better, names(order), reference, placebo)
    settings = JudgeSettings(*columns, alpha, margin)
    if len(metrics) > 1:
        ladder = compute_col or size_col or rung_col or trend_margin is not None or target_compute is not None
        logs = at_step is not None or log_pattern is not None or file.is_dir()
        return _judge_metrics(
            file, settings, metrics, fmt, bool(html or markdown or threshold is not None or ladder or logs)
        )
    if _published(file, seed_col, at_step, log_pattern, threshold):
        if html or markdown:  # its table is unpaired: no seed grids nor paired claim test to show
            raise UserError("--html and --markdown make a page of runs paired by seed; leave them out here.")
        return _judge_published(file, settings, threshold, at_step, log_pattern, fmt)
    if compute_col or size_col or rung_col or trend_margin is not None or target_compute is not None:
        from ..verdict.ladder_judge import LadderSettings

        if margin is not None:
            raise UserError("--margin is in the metric's units for one size; for a ladder give --trend-margin.")
        ladder = LadderSettings(compute_col, size_col, rung_col, trend_margin, target_compute)
        return _judge_ladder(file, settings, ladder, fmt, html, markdown, force)
    design, runs, rows, notes = _judging(file, judge_file_runs, settings)
    _print_judged(settings, design, rows, notes, fmt)
    if html or markdown:
        from ..views.page import judged_page

        page = judged_page(design, settings, runs, rows, notes, file)
        _write_pages(page, html, markdown, [file], force)


def _judge_metrics(file: Path, settings, metrics: tuple[str, ...], fmt: str, other: bool) -> None:
    """judge with several --metric columns: every (row, metric) in one family, a block per metric."""
    from ..verdict.judge import judge_file_metrics
    from ..views import render

    if other:
        raise UserError(
            "several --metric columns are judged as one table of runs paired by seed; a folder of logs, a ladder "
            "(--compute-col, --size-col), --threshold, --html and --markdown go with one --metric."
        )
    design, _, result, notes = _judging(file, judge_file_metrics, settings, metrics)
    if fmt == "table":
        for table in render.metrics_tables(design, settings, result):
            render.print_table(console, table)
        render.print_notes(console, notes)
    elif fmt == "markdown":
        print(render.metrics_markdown(design, settings, result, notes), end="")
    elif fmt == "csv":
        print(render.judge_csv(render.metrics_rows(result)), end="")
    else:
        print(render.metrics_json(design, settings, result, notes))


def _published(file: Path, seed_col: str, at_step, log_pattern, threshold) -> bool:
    """A folder of logs, a table without seeds, or a threshold claim: judge's unpaired table."""
    from ..verdict.logs import is_log_folder

    if is_log_folder(file):
        return True
    if at_step is not None or log_pattern is not None:
        raise UserError(f"--at-step and --log-pattern read a folder of logs; {file} is not one.")
    return threshold is not None or (file.is_file() and seed_col == "seed" and not _has_column(file, seed_col))


def _has_column(file: Path, col: str) -> bool:
    from ..verdict.reading import read_file

    return read_file(file).has(col)


def _judge_published(file: Path, s, threshold, at_step, log_pattern, fmt: str) -> None:
    from ..verdict.logs import is_log_folder, judge_logs
    from ..verdict.unpaired import judge_table_file
    from ..views import render

    if is_log_folder(file):
        title, rows, notes = _judging(file, judge_logs, s, threshold, at_step, log_pattern)
    else:
        title, rows, notes = _judging(file, judge_table_file, s, threshold)
    if fmt == "table":
        render.print_table(console, render.published_table(title, rows))
        render.print_notes(console, notes)
    elif fmt == "markdown":
        print(render.published_markdown(title, rows, notes), end="")
    elif fmt == "csv":
        print(render.judge_csv(rows), end="")
    else:
        print(render.to_json({"title": title, "rows": rows, "footnotes": notes}))


def _judging(file: Path, judged, *settings):
    """judged(file, *settings), with a spinner on a terminal while it takes more than a second (a large file)."""
    from ..views.progress import working

    with working(Console(stderr=True), f"judging {file}"):
        return judged(file, *settings)


def _judge_ladder(
    file: Path, settings, ladder, fmt: str, html: Path | None, markdown: Path | None, force: bool = False
) -> None:
    """judge --compute-col (or --size-col): the scale table of a ladder of anyone's runs, and its page."""
    from types import SimpleNamespace

    from ..verdict.ladder_judge import judge_ladder

    design, rows, notes = _judging(file, judge_ladder, settings, ladder)
    table = SimpleNamespace(design=design, rows=rows, notes=notes, size_col=ladder.size_col)
    _print_ladder(SimpleNamespace(table=table, rungs=[]), fmt)
    if html or markdown:
        from ..views.page import judged_ladder_page

        page = judged_ladder_page(design, rows, notes, file, settings, ladder)
        _write_pages(page, html, markdown, [file], force)


def _print_judged(settings, design, rows: list[dict], notes: list[str], fmt: str) -> None:
    from ..verdict.judge import named_columns
    from ..views import render

    if fmt == "table":
        render.print_table(console, render.judged_table(console, design, settings, rows))
        render.print_notes(console, notes)
    elif fmt == "markdown":
        print(render.judge_markdown(design, settings, rows, notes), end="")
    elif fmt == "csv":  # the files name the columns as summary.csv does
        print(render.judge_csv(named_columns(rows, settings.metric)), end="")
    else:
        print(render.judge_json(design, settings, named_columns(rows, settings.metric), notes))


# ---------------------------------------------------------------------------
# research instruments: extrapolate, explain, export
# ---------------------------------------------------------------------------
CONTEXTS_HELP = "Context lengths to evaluate, comma separated."
DATA_HELP = "Evaluate on this text's validation split \\[default: the checkpoint's corpus]."
WINDOWS_HELP = "Windows per context length (non-overlapping, from the start of the validation split)."
CONFIG_JSON_HELP = "A Hugging Face style config.json (Llama, Mistral, Qwen2, Qwen3, OLMo-2, Gemma, GPT-2, GPT-NeoX)."
HF_HELP = "The folder to write: config.json, model.safetensors, tokenizer.json, tokenizer_config.json."
EXPORT_FORCE_HELP = (
    "Write into the folder even when it holds files: those transformers would read are removed "
    "(generation_config.json, weight shards, tokenizer files, ...); any other file but *.md, LICENSE and .git* is refused."
)


@app.command()
def extrapolate(
    checkpoint: Checkpoint,
    contexts: Annotated[str, typer.Option(help=CONTEXTS_HELP)] = "128,256,512,1024,2048",
    data: Annotated[Path | None, typer.Option(help=DATA_HELP)] = None,
    windows: Annotated[int, typer.Option(help=WINDOWS_HELP)] = 8,
    device: Device = "auto",
    fmt: TableOrJson = "table",
    plugin: RecordedPlugins = None,
) -> None:
    """Val loss, bits/char and ms per token at context lengths past the trained one: the context wall."""
    from dataclasses import replace

    from ..core.config import lossy_note
    from ..data.corpus import lost_chars, validation_text
    from ..run.checkpoint import load_checkpoint
    from ..run.extrapolate import extrapolate as run
    from ..run.extrapolate import parse_contexts
    from ..run.train import resolve_device
    from ..views import render

    lengths = parse_contexts(contexts)
    _load_plugins(plugin)
    model, settings, tokenizer = load_checkpoint(checkpoint, resolve_device(device))
    data_cfg = replace(settings.data, path=str(data)) if data else settings.data
    text = validation_text(data_cfg)
    results = run(model, tokenizer, text, lengths, windows)
    lost = lost_chars(tokenizer, text)  # a char tokenizer on other --data meets characters it never saw
    note = f"note: {lossy_note(settings.data.tokenizer, lost, len(text))}" if lost else ""
    if fmt == "json":
        print(render.to_json(render.extrapolate_info(checkpoint, model.config, results)))
        if note:
            print(note, file=sys.stderr)  # stdout stays one JSON document
        return
    console.print(render.extrapolate_table(checkpoint, model.config, results))
    if note:
        console.print(note, markup=False)


@app.command()
def explain(
    config_json: Annotated[Path, typer.Argument(help=CONFIG_JSON_HELP)],
    as_flags: Annotated[
        bool, typer.Option("--as-flags", help="Print only the modern-gpt flags of the closest variant.")
    ] = False,
    fmt: TableOrJson = "table",
) -> None:
    """Explain a real model's config.json in terms of modern-gpt's components, with its parameter count and KV
    cache."""
    from ..hf.explain import explain_config, read_config
    from ..views import render

    info = explain_config(read_config(config_json), str(config_json))
    if as_flags:
        if info["flags"] is None:  # print no flags that `params` would then refuse
            raise UserError(f"{config_json} has no modern-gpt variant to give flags for: {info['flags_problem']}.")
        print(shlex.join(info["flags"]))
        return
    if fmt == "json":
        print(render.to_json(info))
        return
    console.print(render.explain_table(info, config_json))
    for line in render.explain_lines(info):
        console.print(line, highlight=False, markup=False)


@app.command()
def export(
    checkpoint: Checkpoint,
    hf: Annotated[str, typer.Option("--hf", help=HF_HELP, callback=_folder)],
    force: Annotated[bool, typer.Option("--force", help=EXPORT_FORCE_HELP)] = False,
    plugin: RecordedPlugins = None,
) -> None:
    """Write a checkpoint and its tokenizer as the Hugging Face transformers model that holds it exactly (GPT-2, Starcoder2, StableLM, Arcee, Apertus, Llama or Qwen3)."""
    from ..core.files import check_free
    from ..hf.export import export_hf
    from ..run.checkpoint import load_checkpoint

    hf = Path(hf)
    check_free(hf, "--hf", force, source=checkpoint)
    _load_plugins(plugin)
    model, _, tokenizer = load_checkpoint(checkpoint)
    arch = export_hf(model, hf, tokenizer)
    console.print(
        f"wrote {hf} ({arch} and its tokenizer); load it with transformers.pipeline('text-generation', model={str(hf)!r})",
        highlight=False,
        markup=False,
    )
