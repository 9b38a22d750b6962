"""The Python API: what each command does, as a function that takes the same options as its flags.

    import modern_gpt
    result = modern_gpt.ablate(smoke=True, seeds=3, out="results/x")
    result.summary            # summary.csv as a DataFrame (one row per table row)
    result.runs               # runs.csv as a DataFrame (one row per run)
    result.footnotes          # what the table's reader must know
    modern_gpt.report("results/x", at_lr=None).summary

A keyword is a flag's name with '_' for '-' (steps=60 is --steps 60, match_params=True is --match-params, lr=3e-3 is
--lr 3e-3); smoke=True and config="mini" choose a settings file as --smoke and --config do, and plugins=[...] are
--plugin files. A mistake raises UserError with the sentence the command line prints. The command line (cli/) is
a thin layer over these functions: it parses the flags, calls them and prints what they return.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .core.config import AUTO, AblationOptions
from .core.errors import UserError, did_you_mean
from .core.settings import (
    ABLATION,
    ALL,
    OPTIONS,
    Settings,
    check_value,
    config_values,
    resolve_options,
    resolve_values,
)

# Each command's ablation options (AblationOptions' fields), as its flags have them.
ABLATE_OPTIONS = tuple(s.name for s in OPTIONS.values())  # ablate and duel: every one
TRACK_OPTIONS = ("track", "mlflow_uri")  # train's
POWER_OPTIONS = (
    *("seeds", "alpha", "jobs", "executor", "ray_address", "cpus_per_run", "gpus_per_run", "max_retries"),
    *("partition", "time_limit", "array_parallelism", "sbatch", "runs_per_task", "detach"),  # --executor slurm's
    *TRACK_OPTIONS,
)
NOT_A_FLAG = ("model.vocab_size",)  # training sets it from the tokenizer: only params has this flag


class Detached(Exception):  # not an error: the runs go on
    """--detach: the runs are submitted and go on without this process; resume is the command line that collects
    them (it waits for those still training, submits again those that did not finish, and prints the table)."""

    def __init__(self, what: str, folder: Path, resume: str):
        super().__init__(f"{what}; {resume} collects them and prints the table")
        self.folder, self.resume = folder, resume


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) stopped an ablation: every finished run is kept in the folder, with the
    summary of what finished; resume is the command line that finishes it."""

    def __init__(self, finished: int, total: int, folder: Path, resume: str):
        super().__init__(f"{finished} of {total} runs finished and kept in {folder}")
        self.finished, self.total, self.folder, self.resume = finished, total, folder, resume


@dataclass
class Result:
    """What an ablation (or a report of its folder) found: the table and the runs as DataFrames, the folder, the
    footnotes, and `table`, the library's own objects (ablation.report.Report) that the command line renders."""

    folder: Path
    summary: object  # pandas.DataFrame: summary.csv's columns
    runs: object  # pandas.DataFrame: runs.csv's columns
    footnotes: list[str]
    table: object  # ablation.report.Report

    @property
    def title(self) -> str:
        from .ablation.report import title

        return title(self.table)

    def __repr__(self) -> str:
        return f"Result({str(self.folder)!r}: {len(self.summary)} rows, {len(self.runs)} runs)"


# ---------------------------------------------------------------------------
# Keywords -> settings and options
# ---------------------------------------------------------------------------
def _keys(options: tuple[str, ...], components: bool) -> dict[str, str]:
    """keyword -> its setting's key ('steps' -> 'train.steps', 'seeds' -> 'ablation.seeds')."""
    keys = {s.name: s.key for s in ALL.values() if s.key not in NOT_A_FLAG and (components or not s.is_component)}
    return keys | {name: f"{ABLATION}.{name}" for name in options}


def settings_of(
    command: str,
    flags: dict,
    options: tuple[str, ...] = (),
    *,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    components: bool = False,
    other_options_ok: bool = False,
    overrides: dict | None = None,
) -> tuple[Settings, AblationOptions]:
    """A command's Settings and AblationOptions: the defaults, then --smoke's or --config's file, then the keywords
    (None: not given). flags are keywords by name (steps=60); overrides by key (train.steps), as the command line
    gives them. plugins: --plugin files (and the installed packages' components); components: a one-model command
    switches the files' components on. other_options_ok: the file's other [ablation] keys are let be (train reads
    --track alone)."""
    keys = _keys(options, components)
    unknown = [k for k in flags if k not in keys]
    if unknown:
        hint = did_you_mean(unknown[0], keys, f"; see modern-gpt {command} --help for its flags")
        raise UserError(f"{command} has no option {unknown[0]!r}{hint}")
    typed = {keys[k]: list(v) if isinstance(v, tuple) else v for k, v in flags.items()}  # track=("mlflow",) too
    every = {**ALL, **OPTIONS}
    typed = {k: check_value(every[k], v, f"modern_gpt.{command}()") for k, v in typed.items()}
    values = {**(overrides or {}), **typed}
    given = {k: v for k, v in values.items() if k.startswith(f"{ABLATION}.")}
    file = config_values(config, smoke)
    paths = [*file.pop("plugins", []), *(plugins or [])]
    settings = with_plugins(resolve_values(file, {k: v for k, v in values.items() if k in ALL}), paths, components)
    settings = token_vocabulary(settings)
    read = {k: v for k, v in file.items() if not other_options_ok or k in given}
    return settings, resolve_options(read, given, command, options) if options else AblationOptions()


def token_vocabulary(settings: Settings) -> Settings:
    """Token files whose vocabulary no --vocab-size declares take it from their largest id (vocab_size 0), not
    from the bpe tokenizer's default."""
    if "data.vocab_size" in settings.typed or not settings.data.path:
        return settings
    from dataclasses import replace

    from .data.tokens import holds_tokens

    if holds_tokens(settings.data.path):
        settings.data = replace(settings.data, vocab_size=0)
    return settings


def with_plugins(settings: Settings, paths: list[str], switch_on: bool) -> Settings:
    """Load the plugin files (a command that builds models: torch loads only now) and the installed packages'
    (entry points; none, and nothing heavy is imported), and for a one-model command switch the files' components
    on (a collision with a built-in switch is refused by name)."""
    from dataclasses import replace

    from .model.plugins import load

    loaded = load(paths)  # and the installed packages' (entry points), which only the ablations switch on
    if switch_on and paths:
        names = tuple(dict.fromkeys(n for p in loaded[: len(paths)] for n in p.names))
        settings.model = replace(settings.model, extra_components=names)
    return settings


def plan_choices(options: AblationOptions, **rows) -> dict:
    """plan_spec's choices (planning.py): the rows' flags, and the ablation's options that a flag or the config
    file gave; None for one nobody gave (its default), which --resume does not compare."""
    return {
        **rows,
        "seeds": options.choice("seeds"),
        "seed_list_text": options.choice("seed_list"),
        "min_seeds": options.choice("min_seeds"),
        "max_seeds": options.choice("max_seeds"),
        "alpha": options.choice("alpha"),
        "margin": options.choice("margin"),
        "placebo": options.choice("placebo"),
        "match": options.match_params,  # off is no choice: --resume compares it only when on
    }


# ---------------------------------------------------------------------------
# train: one model to a checkpoint folder
# ---------------------------------------------------------------------------
@dataclass
class Trained:
    """One trained model (`modern-gpt train`): its checkpoint folder, the run's numbers (run.train.RunResult), the
    settings it trained with (the tokenizer's vocab_size set), the corpus's name and whether its tokenizer gives
    the validation text back, and the trackers' run ids."""

    folder: Path
    result: object
    settings: Settings
    corpus: object  # data.corpus.Corpus
    tracked: dict[str, str]

    @property
    def failed(self) -> bool:
        return bool(self.result.diverged or self.result.error)


def train(
    *,
    seed: int = 0,
    out: str | os.PathLike | None = None,
    force: bool = False,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    **flags,
) -> Trained:
    """Train one model and write a checkpoint folder (`modern-gpt train`): the keywords are its flags, the
    components' switches included (rope=True)."""
    settings, options = settings_of(
        "train",
        flags,
        TRACK_OPTIONS,
        config=config,
        smoke=smoke,
        plugins=plugins,
        components=True,
        other_options_ok=True,
    )
    return train_checkpoint(settings, options, seed, out, force)


def train_checkpoint(
    settings: Settings, options: AblationOptions, seed: int, out, force: bool, display=None
) -> Trained:
    """The one run of `train`: checked, trained, its checkpoint written (weights only when it trained), and logged
    to the trackers asked for. display(corpus name) -> a context manager yielding progress(step, loss), or None
    (ablation/progress.py's run_progress is one; None: quiet)."""
    import contextlib
    import time

    from .ablation.planning import check_read
    from .core.components import label
    from .core.files import check_free
    from .data.corpus import load_corpus
    from .run.checkpoint import save_checkpoint
    from .run.train import pin_threads, train_run

    check_read(settings, [settings.model.components])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(out) if out else Path("checkpoints") / f"{stamp}-{label(settings.model.components)}"
    check_free(out, "--out", force)
    _check_tracking(options)
    corpus = load_corpus(settings.data)
    from dataclasses import replace

    from .model.plugins import check_forward, guarded_train

    check_forward(replace(settings.model, vocab_size=corpus.tokenizer.vocab_size))  # a plugin's forward and backward
    pin_threads(settings.train)  # before the guard, which then sees only the plugin's changes
    with display(corpus.name) if display else contextlib.nullcontext() as progress, guarded_train(settings.model):
        result, model = train_run(settings.model, corpus, settings.train, seed, progress=progress)
    settings.model = model.config  # with the tokenizer's vocab_size
    metrics = result.to_dict()
    trained = not (result.diverged or result.error)
    save_checkpoint(out, model if trained else None, settings, corpus.tokenizer, metrics)
    tracked = {}
    if options.track:  # logged after the checkpoint is written (a tracker's failure is a warning)
        from .trackers.tracking import log_train

        tracked = log_train(options.track, options.mlflow_uri, out, settings, seed, metrics)
    return Trained(out, result, settings, corpus, tracked)


# ---------------------------------------------------------------------------
# ablate, duel and power
# ---------------------------------------------------------------------------
def ablate(
    *,
    plan: str | None = None,
    components: str | None = None,
    variants: str | None = None,
    lrs: str | None = None,
    lr_sweep: str | None = None,
    at_lr: float | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool = False,
    **flags,
) -> Result:
    """Train every variant with every seed and return one table: does each component really help? The keywords
    are `modern-gpt ablate`'s flags (see its --help); progress=True shows the live display on stderr."""
    settings, options = settings_of("ablate", flags, ABLATE_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    choices = plan_choices(options, plan=plan, components=components, variants=variants, lrs=lrs, lr_sweep=lr_sweep)
    return run_ablation("cumulative", settings, options, choices, out, resume, at_lr, _display(progress))


def duel(
    *,
    lrs: str | None = None,
    lr_sweep: str | None = None,
    at_lr: float | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool = False,
    **flags,
) -> Result:
    """All-classic against all-modern on the same data, seeds and steps (`modern-gpt duel`)."""
    settings, options = settings_of("duel", flags, ABLATE_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    choices = plan_choices(options, lrs=lrs, lr_sweep=lr_sweep)
    return run_ablation("duel", settings, options, choices, out, resume, at_lr, _display(progress))


def power(
    *,
    variant: str | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool = False,
    **flags,
) -> Result:
    """How many seeds does a question need (`modern-gpt power`): one architecture and its placebo at N seeds."""
    settings, options = settings_of("power", flags, POWER_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    return run_ablation(
        "power", settings, options, plan_choices(options, variants=variant), out, resume, None, _display(progress)
    )


# ---------------------------------------------------------------------------
# scale: the plan's rows at a ladder of sizes, and the compute multiplier k
# ---------------------------------------------------------------------------
TABLE_CHOICES = ("trend_margin", "target_compute")  # they change the scale table, not the rungs: --resume takes them
LADDER_CHOICES = ("rungs", "depths", "tokens_per_param", "rung_steps", "lr_rule", "trend_margin", "target_compute")
RUNG_KEYS = ("model.dim", "model.layers", "model.mlp_hidden", "train.steps", "train.warmup_steps", "train.eval_every")


@dataclass
class LadderResult:
    """What a ladder found: the scale table (k, its CI and the trend per row) and its runs as DataFrames, the
    folder, the footnotes, each rung's Result, and `table`, ablation.ladder.LadderReport, that the CLI renders."""

    folder: Path
    summary: object  # pandas.DataFrame: the ladder's summary.csv
    runs: object  # pandas.DataFrame: the ladder's runs.csv
    footnotes: list[str]
    rungs: list[Result]
    table: object

    def __repr__(self) -> str:
        return f"LadderResult({str(self.folder)!r}: {len(self.summary)} rows, {len(self.rungs)} rungs)"


def scale(
    *,
    plan: str | None = None,
    components: str | None = None,
    variants: str | None = None,
    lrs: str | None = None,
    lr_sweep: str | None = None,
    rungs: str | int | None = None,
    depths: str | None = None,
    tokens_per_param: float | None = None,
    rung_steps: str | None = None,
    lr_rule: str | None = None,
    trend_margin: float | None = None,
    target_compute: float | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool = False,
    **flags,
) -> LadderResult:
    """The plan's rows at a ladder of model sizes (`modern-gpt scale`): each row's compute multiplier k against
    its reference at each rung and over the ladder, with seed noise in its CI, and whether k changes with scale."""
    settings, options = settings_of("scale", flags, ABLATE_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    choices = plan_choices(options, plan=plan, components=components, variants=variants, lrs=lrs, lr_sweep=lr_sweep)
    given = dict(rungs=rungs, depths=depths, tokens_per_param=tokens_per_param, rung_steps=rung_steps)
    given.update(lr_rule=lr_rule, trend_margin=trend_margin, target_compute=target_compute)
    return run_ladder(settings, options, choices, given, out, resume, _display(progress))


def run_ladder(
    settings: Settings,
    options: AblationOptions,
    choices: dict,
    ladder_choices: dict,
    out=None,
    resume=None,
    display: Callable | None = None,
    command_line: str = "(called from Python)",
) -> LadderResult:
    """Plan the ladder (or check a resume), start every rung's folder (each checked as an ablation is: memory,
    plugins; the top rung first, so a size that cannot fit is refused before any folder is made), train each
    rung in turn, then write the scale table. Ctrl-C raises Interrupted naming the ladder's resume command."""
    from .ablation import ladder as lad
    from .ablation.planning import parse_seeds

    if parse_seeds(choices["seeds"]) == AUTO:
        raise UserError(
            "scale takes a fixed number of seeds: a ladder's verdicts pool every rung's seeds at once, so --seeds "
            "auto's looks do not apply; give --seeds N (5 advised)."
        )
    if resume is not None:
        folder = Path(resume)
        ladder = lad.read(folder)
        lad.check_rungs(folder, ladder)
        _check_ladder_resume(folder, ladder, settings, choices, ladder_choices, out)
        ladder = ladder.with_table_choices(ladder_choices.get("trend_margin"), ladder_choices.get("target_compute"))
    else:
        plan_name = choices.get("plan") or "cumulative"
        rows = {k: v for k, v in choices.items() if k != "plan"}
        ladder = lad.plan_ladder(settings, plan_name, rows, **ladder_choices)
        ladder.command = command_line
        folder = Path(out) if out is not None else _default_folder("scale")
    _check_tracking(options)
    _start_rungs(folder, ladder, options, command_line, fresh=resume is None)
    from .ablation.running import resume as resume_ablation

    done, every = 0, sum(len(s.variants) * len(s.seeds) for s in ladder.specs)
    for i in range(len(ladder.rungs)):
        ablation = resume_ablation(lad.rung_folder(folder, i), options)
        try:
            train_pending(ablation, display or _quiet)
        except Interrupted as e:
            raise Interrupted(done + e.finished, every, folder, lad.resume_command(folder)) from None
        done += ablation.total
    return ladder_result(folder)


def _start_rungs(folder: Path, ladder, options: AblationOptions, command_line: str, fresh: bool) -> None:
    """Every rung's folder that does not exist yet, the top rung first; ladder.json once they all are. A refusal
    on a fresh ladder removes what this call made."""
    import shutil

    from .ablation import ladder as lad
    from .ablation.executors import prestart
    from .ablation.results import ResultsDir
    from .ablation.running import start

    if fresh:
        ResultsDir(folder).check_new()
        prestart(options, sum(len(s.variants) * len(s.seeds) for s in ladder.specs))
    made = []
    try:
        for i in reversed(range(len(ladder.rungs))):
            where = lad.rung_folder(folder, i)
            if (where / "meta.json").is_file():
                continue
            if where.exists() and (not where.is_dir() or any(where.iterdir())):
                raise UserError(lad.lost_rung(folder, where))  # not "choose another --out": none was given
            ablation = start(ladder.specs[i], where, command_line, options)
            ablation.executor.close()
            made.append(where)
        lad.write(folder, ladder)  # the specs now hold the corpus's name and key (start sets them)
    except BaseException:
        if fresh:
            for where in made:
                shutil.rmtree(where, ignore_errors=True)
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def _check_ladder_resume(folder: Path, ladder, settings: Settings, choices: dict, given: dict, out) -> None:
    """--resume DIR of a ladder: its rungs are fixed when it starts, and the flags given must agree with it."""
    from dataclasses import replace

    from .ablation.planning import check_resume

    if out is not None and os.path.realpath(out) != os.path.realpath(folder):
        raise UserError(f"--resume {folder} finishes the ladder in its own folder; leave out --out {out}.")
    named = [k for k, v in given.items() if v is not None and k not in TABLE_CHOICES]
    rung_set = [k for k in settings.typed if k in RUNG_KEYS or k == "train.lr"]
    if named or rung_set:
        what = "--" + (named[0] if named else rung_set[0].split(".")[1]).replace("_", "-")
        raise UserError(
            f"{what} with --resume: a ladder's rungs, their sizes, steps and learning rates are fixed when it "
            f"starts; resume with --resume {folder} alone, or start a new ladder."
        )
    top = ladder.specs[-1]
    kept = tuple(k for k in settings.given if k not in RUNG_KEYS and k != "train.lr")  # the rungs set those
    check_resume(folder, top, replace(settings, given=kept), choices)


def ladder_result(folder, draw: bool = True) -> LadderResult:
    """A ladder folder's scale table from its files (`modern-gpt report DIR` of a ladder); writes its runs.csv and
    summary.csv, and with draw scale.png."""
    import pandas as pd

    from .ablation import ladder as lad

    folder = Path(folder)
    rep = lad.load(folder)
    lad.write_files(folder, rep)
    if draw:
        from .ablation.plot import plot_ladder

        plot_ladder(rep, folder / "scale.png")
    rungs = [_result(lad.rung_folder(folder, i), None) for i in range(len(rep.rungs))]
    summary = pd.DataFrame([row.cells() for row in rep.rows])
    return LadderResult(folder, summary, rep.runs, rep.notes, rungs, rep)


def _default_folder(what: str) -> Path:
    from .ablation.running import default_folder

    return default_folder(what)


def power_info(result: Result) -> dict:
    """A power folder's figures: the paired sd with its CI, the placebo's test and the mde table."""
    from .ablation.report import power_info as info

    return info(result.table.spec, result.table.summary)


def report(folder: str | os.PathLike, *, at_lr: float | None = None, plugins=()) -> Result | LadderResult:
    """A results folder's table from its files alone (`modern-gpt report DIR`): nothing is trained. A ladder's
    folder (modern-gpt scale) gives its LadderResult."""
    if plugins:
        from .model.plugins import load

        load(list(plugins))
    from .ablation.ladder import is_ladder

    if is_ladder(folder):
        if at_lr is not None:
            raise UserError(
                f"{folder} is a ladder: each rung's table shows each row at its own best learning rate; "
                "give --at-lr with report on a rung's folder."
            )
        return ladder_result(folder, draw=False)
    return _result(Path(folder), at_lr)


def _result(folder: Path, at_lr: float | None) -> Result:
    from .ablation.report import load
    from .ablation.results import ResultsDir
    from .verdict.design import summary_frame

    results = ResultsDir(folder, read_only=True)  # nothing trains: a missing plugin file is a footnote
    table = load(results, at_lr, verdicts=results.spec.plan != "power")
    return Result(folder, summary_frame(table.summary), table.scan.runs_frame(), table.notes, table)


# ---------------------------------------------------------------------------
# What ablate, duel and power share: plan, start or resume, train, write, report
# ---------------------------------------------------------------------------
def plan(command: str, settings: Settings, choices: dict, out, resume):
    """The Spec of a new ablation, or None with resume, whose flags given must agree with its folder; and the
    learning rates, for at_lr."""
    from .ablation.planning import check_resume, command_of, parse_seeds, plan_spec

    if command == "power" and parse_seeds(choices["seeds"]) == AUTO:
        raise UserError("power measures the seed noise at a number of seeds; give --seeds N, not auto.")
    plan, choices = choices.get("plan"), {k: v for k, v in choices.items() if k != "plan"}
    if resume is None:
        spec = plan_spec(settings, plan or command, **choices)
        return spec, spec.lrs
    if out is not None and os.path.realpath(out) != os.path.realpath(resume):  # a link loop is no traceback
        raise UserError(f"--resume {resume} finishes the ablation in its own folder; leave out --out {out}.")
    from .ablation.results import ResultsDir

    results = ResultsDir(resume)
    results.check_resumed_by(command_of(command))
    check_resume(resume, results.spec, settings, {**choices, "plan": plan})  # only what was given is compared
    return None, results.spec.lrs


def run_ablation(
    command: str,
    settings: Settings,
    options: AblationOptions,
    choices: dict,
    out=None,
    resume=None,
    at_lr: float | None = None,
    display: Callable | None = None,
    command_line: str = "(called from Python)",
) -> Result:
    """Plan (or check a resume), start or resume on the chosen executor and train what is pending with a display,
    then write summary.csv and the figures, log the summary to the trackers, and return the table. choices: see
    plan_choices. display(ablation) -> a context manager with start, step and finished (ablation/progress.py's; None:
    quiet). Ctrl-C raises Interrupted once the summary of what finished is written."""
    out = None if out is None else Path(out)
    resume = None if resume is None else Path(resume)
    requested, lrs = plan(command, settings, choices, out, resume)
    from .ablation.executors import prestart

    if resume is None:  # a new ablation: the workers' fork server imports torch while this process imports
        prestart(options, len(requested.variants) * len(requested.seeds))  # pandas and torch
    from .verdict.table import at_lr_index  # pandas loads here, after the plan's checks

    at_lr_index(lrs, at_lr)  # a wrong at_lr is refused before anything trains
    _check_tracking(options)
    from .ablation.running import resume as resume_ablation  # torch loads here, after every check of the flags
    from .ablation.running import start

    if resume is not None:
        _check_resume_store(resume, options)
        ablation = resume_ablation(resume, options)
    else:
        ablation = start(requested, out, command_line, options)
    train_pending(ablation, display or _quiet)
    return _result(ablation.results.path, at_lr)


def train_pending(ablation, display: Callable) -> None:
    """Train what is pending; then write the report's files and log the summary to the trackers. Ctrl-C: the
    summary of what finished is written, the trackers closed without one, and Interrupted raised."""
    from .ablation import report
    from .ablation.executors import Detached as Handed

    folder = ablation.results.path
    try:
        try:
            with display(ablation) as shown:
                ablation.run(shown)
        except BaseException:
            ablation.finish_tracking(None)  # closed, without a summary of an ablation that stopped
            raise
    except Handed as e:  # --detach: the runs train on without this process
        raise Detached(str(e), folder, ablation.spec.resume_command(folder)) from None
    except KeyboardInterrupt:
        report.write(folder, draw=False)  # the summary of what finished
        done = len(ablation.results.finished())
        raise Interrupted(done, ablation.total, folder, ablation.spec.resume_command(folder)) from None
    summary = report.write(folder)
    ablation.finish_tracking(summary)  # the summary, the figures and the verdicts to the trackers


def _check_resume_store(folder: Path, options: AblationOptions) -> None:
    """--resume --track mlflow: into the store the folder's earlier runs are in (tracking.check_resume_store)."""
    if "mlflow" in options.track:
        from .ablation.results import ResultsDir
        from .trackers.checks import check_resume_store

        check_resume_store(folder, ResultsDir(folder).read_meta(), options.track, options.mlflow_uri)


def _check_tracking(options: AblationOptions) -> None:
    """--track: every tracker installed and its store reachable, before anything trains (tracking.check)."""
    if options.track:
        from .trackers.checks import check

        check(options.track, options.mlflow_uri)


class _Quiet:
    """A display that shows nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _quiet(ablation) -> _Quiet:
    return _Quiet()


def _display(progress: bool) -> Callable | None:
    """progress=True: the command line's live display, on stderr."""
    if not progress:
        return None
    from rich.console import Console

    from .ablation.progress import ablation_display

    err = Console(stderr=True)
    return lambda ablation: ablation_display(ablation, err, err)
