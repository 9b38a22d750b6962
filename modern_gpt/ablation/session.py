"""The session of an ablation, a ladder and a training run. One request is built from the keywords or flags
(settings_of), planned or checked against its folder (plan), started or resumed, and trained (train_pending).
It is read back as a Result. modern_gpt.api (a notebook's calls) and the command line (cli/) both call these."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.config import AUTO, AblationOptions, ExecutionOptions, TrackingOptions
from ..core.errors import UserError, did_you_mean
from ..core.settings import (
    ABLATION,
    ALL,
    OPTIONS,
    Settings,
    check_value,
    config_values,
    resolve_options,
    resolve_values,
)
from ..verdict.design import summary_frame

if TYPE_CHECKING:
    import pandas as pd

    from .planning import Request

# Each command's ablation options (the fields of AblationOptions' parts), as its flags have them.
ABLATE_OPTIONS = tuple(s.name for s in OPTIONS.values())  # ablate and duel: every one
TRACK_OPTIONS = tuple(TrackingOptions.names())  # train's
POWER_OPTIONS = ("seeds", "alpha", *ExecutionOptions.names(), *TRACK_OPTIONS)
NOT_A_FLAG = ("model.vocab_size",)  # training sets it from the tokenizer: only params has this flag
RUNG_KEYS = ("model.dim", "model.layers", "model.mlp_hidden", "train.steps", "train.warmup_steps", "train.eval_every")


class Detached(Exception):  # not an error: the runs go on
    """--detach: the runs are submitted and go on without this process. resume is the command line that collects
    them: it waits for those still training, submits again those that did not finish, and prints the table."""

    def __init__(self, what: str, folder: Path, resume: str):
        super().__init__(f"{what}; {resume} collects them and prints the table")
        self.what, self.folder, self.resume = what, folder, resume


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) stopped an ablation. Every finished run is kept in the folder, with the
    summary of what finished. resume is the command line that finishes it."""

    def __init__(self, finished: int, total: int, folder: Path, resume: str):
        super().__init__(f"{finished} of {total} runs finished and kept in {folder}")
        self.finished, self.total, self.folder, self.resume = finished, total, folder, resume


@dataclass
class Result:
    """What an ablation, or a report of its folder, found: the table and the runs as DataFrames, the folder, the
    footnotes. `table` holds the library's own objects (ablation.report.Report) that the command line renders."""

    folder: Path
    summary: pd.DataFrame  # summary.csv's columns
    runs: pd.DataFrame  # runs.csv's columns
    footnotes: list[str]
    table: object  # ablation.report.Report

    @property
    def title(self) -> str:
        from .report import title

        return title(self.table)

    @property
    def metrics(self) -> pd.DataFrame | None:
        """With --eval-data sets, every metric's verdicts as one family: metrics.csv's long form, one row per
        (table row, metric). None for a table of val alone."""
        judged = getattr(self.table, "metrics", None)
        return None if judged is None else judged.table

    def __repr__(self) -> str:
        return f"Result({str(self.folder)!r}: {len(self.summary)} rows, {len(self.runs)} runs)"

    def _repr_html_(self) -> str:
        """A notebook's view: the title, the verdict columns of the summary, the footnotes and the folder."""
        return _html(self.title, self.summary, VERDICT_COLUMNS, self.footnotes, self.folder)


VERDICT_COLUMNS = ("variant", "val_loss", "delta_val", "ci_low", "ci_high", "p_adj", "verdict", "mde", "seeds")
LADDER_COLUMNS = ("variant", "k", "k_low", "k_high", "verdict", "trend_per_10x", "trend")


def _html(title: str, frame: pd.DataFrame, columns: tuple[str, ...], notes: list[str], folder: Path) -> str:
    """A table with its title, footnotes and folder as notebook HTML (every text escaped)."""
    from html import escape

    shown = frame[[c for c in columns if c in frame.columns]]
    items = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return (
        f"<h4>{escape(title)}</h4>{shown.to_html(index=False, na_rep='', float_format=lambda x: f'{x:.4g}')}"
        f"<ul>{items}</ul><p>{escape(str(folder))}</p>"
    )


def _keys(options: tuple[str, ...], components: bool) -> dict[str, str]:
    """keyword -> its setting's key ('steps' -> 'train.steps', 'data' -> 'data.path', 'seeds' -> 'ablation.seeds')."""
    mine = [s for s in ALL.values() if s.key not in NOT_A_FLAG and (components or not s.is_component)]
    return {s.keyword: s.key for s in mine} | {
        OPTIONS[f"{ABLATION}.{name}"].keyword: f"{ABLATION}.{name}" for name in options
    }


def with_keywords(options: tuple[str, ...] = (), components: bool = False):
    """A command's real signature: its own keywords, then one per setting and option it reads (the one
    settings registry). So help(), Shift-Tab and inspect.signature list steps, dim, seeds, data..."""
    import inspect

    every = {**ALL, **OPTIONS}

    def deco(func):
        own = [p for p in inspect.signature(func).parameters.values() if p.kind is not p.VAR_KEYWORD]
        names = {p.name for p in own}
        more = [
            inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=every[key].annotation)
            for k, key in _keys(options, components).items()
            if k not in names
        ]
        func.__signature__ = inspect.Signature([*own, *more], return_annotation=func.__annotations__.get("return"))
        return func

    return deco


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
    gives them. plugins: --plugin files, and the installed packages' components. components: a one-model command
    switches the files' components on. other_options_ok: the file's other [ablation] keys are let be, as train
    reads --track alone."""
    keys = _keys(options, components)
    flags = {k: v for k, v in flags.items() if v is not None}  # None: not given, as the signature's defaults say
    if "path" in flags and "data" not in flags:  # data's keyword before it was named as its flag: still read
        flags = {("data" if k == "path" else k): v for k, v in flags.items()}
    unknown = [k for k in flags if k not in keys]
    if unknown:
        hint = did_you_mean(unknown[0], keys, f"; see modern-gpt {command} --help for its flags")
        raise UserError(f"{command} has no option {unknown[0]!r}{hint}")
    if isinstance(flags.get("seed_list"), list | tuple):  # seed_list=[3, 7, 11] is --seed-list 3,7,11
        flags = {**flags, "seed_list": ",".join(str(v) for v in flags["seed_list"])}
    every = {**ALL, **OPTIONS}
    listed = {
        k: [v] if every[keys[k]].is_list and isinstance(v, str) else v for k, v in flags.items()
    }  # track="mlflow"
    typed = {keys[k]: list(v) if isinstance(v, tuple) else v for k, v in listed.items()}  # track=("mlflow",) too
    typed = {k: _checked(every[k], v, f"modern_gpt.{command}()") for k, v in typed.items()}
    values = {**(overrides or {}), **typed}
    given = {k: v for k, v in values.items() if k.startswith(f"{ABLATION}.")}
    file = config_values(config, smoke)
    paths = [*file.pop("plugins", []), *(plugins or [])]
    settings = with_plugins(resolve_values(file, {k: v for k, v in values.items() if k in ALL}), paths, components)
    settings = token_vocabulary(settings)
    read = {k: v for k, v in file.items() if not other_options_ok or k in given}
    return settings, resolve_options(read, given, command, options) if options else AblationOptions()


def _checked(setting, value, where: str):
    """check_value's sentence, naming the keyword (steps=) where a config file's names the key (train.steps)."""
    try:
        return check_value(setting, value, where)
    except UserError as e:
        raise UserError(str(e).replace(f"{where}: {setting.key} ", f"{where}: {setting.keyword}= ", 1)) from None


def token_vocabulary(settings: Settings) -> Settings:
    """Token files whose vocabulary no --vocab-size declares take it from their largest id (vocab_size 0). Not
    from the bpe tokenizer's default."""
    if "data.vocab_size" in settings.typed or not settings.data.path:
        return settings
    from dataclasses import replace

    from ..data.tokens import holds_tokens

    if holds_tokens(settings.data.path):
        settings.data = replace(settings.data, vocab_size=0)
    return settings


def with_plugins(settings: Settings, paths: list[str], switch_on: bool) -> Settings:
    """Load the plugin files and the installed packages' plugins (entry points). For a command that builds models,
    torch loads only now; with no entry point, nothing heavy is imported. A one-model command switches the files'
    components on. A collision with a built-in switch is refused by name."""
    from dataclasses import replace

    from ..model.plugins import load

    loaded = load(paths)  # and the installed packages' (entry points), which only the ablations switch on
    if switch_on and paths:
        names = tuple(dict.fromkeys(n for p in loaded[: len(paths)] for n in p.names))
        settings.model = replace(settings.model, extra_components=names)
    return settings


def request_of(command: str, options: AblationOptions, **rows) -> Request:
    """The command's request (planning.Request), built once. It holds the rows' flags, scale's ladder flags
    (planning.LadderRequest), and the ablation's options a flag or the config file gave. None for one nobody
    gave: its default, which --resume does not compare."""
    from .planning import LadderRequest, Request

    stats = options.statistics  # each of its options is a field of Request's, of the same name
    chosen = {name: stats.choice(name) for name in stats.names() if name != "match_params"}
    ladder = LadderRequest(**{f.name: rows.pop(f.name) for f in fields(LadderRequest) if f.name in rows})
    return Request(command, **rows, **chosen, ladder=ladder, match_params=stats.match_params)  # off is no choice


@dataclass
class Trained:
    """One trained model (`modern-gpt train`): its checkpoint folder and the run's numbers (run.train.RunResult).
    Also the settings it trained with (the tokenizer's vocab_size set), the corpus's name, whether its tokenizer
    gives the validation text back, and the trackers' run ids."""

    folder: Path
    result: object
    settings: Settings
    corpus: object  # data.corpus.Corpus
    tracked: dict[str, str]

    @property
    def failed(self) -> bool:
        return bool(self.result.diverged or self.result.error)


def train_checkpoint(
    settings: Settings, tracking: TrackingOptions, seed: int, out, force: bool, display=None
) -> Trained:
    """The one run of `train`: checked, trained, its checkpoint written (weights only when it trained), and logged
    to the trackers asked for. display(corpus name) -> a context manager yielding progress(step, loss), or None.
    views/progress.py's run_progress is one; None: quiet."""
    import contextlib
    import time

    from ..core.components import label
    from ..core.files import check_free
    from ..data.corpus import load_corpus
    from ..run.checkpoint import save_checkpoint
    from ..run.train import pin_threads, train_run
    from .planning import check_read

    check_read(settings, [settings.model.components])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(out) if out else Path("checkpoints") / f"{stamp}-{label(settings.model.components)}"
    check_free(out, "--out", force)
    _check_tracking(tracking)
    corpus = load_corpus(settings.data)
    from dataclasses import replace

    from ..model.plugins import check_forward, guarded_train

    check_forward(replace(settings.model, vocab_size=corpus.tokenizer.vocab_size))  # a plugin's forward and backward
    pin_threads(settings.train)  # before the guard, which then sees only the plugin's changes
    with display(corpus.name) if display else contextlib.nullcontext() as progress, guarded_train(settings.model):
        result, model = train_run(settings.model, corpus, settings.train, seed, progress=progress)
    settings.model = model.config  # with the tokenizer's vocab_size
    metrics = result.to_dict()
    trained = not (result.diverged or result.error)
    save_checkpoint(out, model if trained else None, settings, corpus.tokenizer, metrics)
    tracked = {}
    if tracking.track:  # logged after the checkpoint is written (a tracker's failure is a warning)
        from ..trackers.tracking import log_train

        tracked = log_train(tracking.track, tracking.mlflow_uri, out, settings, seed, metrics)
    return Trained(out, result, settings, corpus, tracked)


@dataclass
class LadderResult:
    """What a ladder found: the scale table (k, its CI and the trend per row) and its runs as DataFrames. Also the
    folder, the footnotes, each rung's Result, and `table`: ablation.ladder.LadderReport, which the CLI renders."""

    folder: Path
    summary: pd.DataFrame  # the ladder's summary.csv
    runs: pd.DataFrame  # the ladder's runs.csv
    footnotes: list[str]
    rungs: list[Result]
    table: object

    def __repr__(self) -> str:
        return f"LadderResult({str(self.folder)!r}: {len(self.summary)} rows, {len(self.rungs)} rungs)"

    def _repr_html_(self) -> str:
        title = f"compute multiplier k of {len(self.summary)} rows at {len(self.rungs)} rungs"
        return _html(title, self.summary, LADDER_COLUMNS, self.footnotes, self.folder)


def run_ladder(
    settings: Settings,
    options: AblationOptions,
    request: Request,
    out=None,
    resume=None,
    display: Callable | None = None,
    command_line: str = "(called from Python)",
) -> LadderResult:
    """Plan the ladder (or check a resume), start every rung's folder, train each rung in turn, write the scale
    table. Each rung is checked as an ablation is: memory, plugins. The top rung goes first, so a size that cannot
    fit is refused before any folder is made. request: scale's (request_of, with its ladder choices). Ctrl-C
    raises Interrupted naming the ladder's resume command."""
    from . import ladder as lad
    from .planning import parse_seeds

    check_main_guard("scale", options.execution)
    if parse_seeds(request.seeds) == AUTO:
        raise UserError(
            "scale takes a fixed number of seeds: a ladder's verdicts pool every rung's seeds at once, so --seeds "
            "auto's looks do not apply; give --seeds N (5 advised)."
        )
    if resume is not None:
        folder = Path(resume)
        ladder = lad.read(folder)
        lad.check_rungs(folder, ladder)
        _check_ladder_resume(folder, ladder, settings, request, out)
        ladder = ladder.with_table_choices(request.ladder.trend_margin, request.ladder.target_compute)
    else:
        ladder = lad.plan_ladder(settings, request)
        ladder.command = command_line
        from .running import default_folder

        folder = Path(out) if out is not None else default_folder("scale")
    _check_tracking(options.tracking)
    _start_rungs(folder, ladder, options, command_line, fresh=resume is None)
    from .running import resume as resume_ablation

    done, every = 0, _runs(ladder.specs)
    for i in range(len(ladder.rungs)):
        ablation = resume_ablation(lad.rung_folder(folder, i), options)
        try:
            train_pending(ablation, display or _quiet)
        except Interrupted as e:
            raise Interrupted(done + e.finished, every, folder, lad.resume_command(folder)) from None
        except Detached as e:  # the ladder's folder, which scale(resume=...) takes, not the rung's
            raise Detached(e.what, folder, lad.resume_command(folder)) from None
        done += ablation.total
    return ladder_result(folder)


def _runs(specs) -> int:
    return sum(len(s.variants) * len(s.seeds) for s in specs)


def _prestart(execution: ExecutionOptions, specs) -> None:
    """What the executor starts before torch loads for these specs' runs (the local pool's fork server)."""
    from .executors import executor_class

    executor_class(execution).prestart(execution, _runs(specs))


def _start_rungs(folder: Path, ladder, options: AblationOptions, command_line: str, fresh: bool) -> None:
    """Every rung's folder that does not exist yet, the top rung first; ladder.json once they all do. A refusal
    on a fresh ladder removes what this call made."""
    import shutil

    from . import ladder as lad
    from .results import ResultsDir
    from .running import start

    if fresh:
        ResultsDir(folder).check_new()
        _prestart(options.execution, ladder.specs)
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


def _check_ladder_resume(folder: Path, ladder, settings: Settings, request: Request, out) -> None:
    """--resume DIR of a ladder. Its rungs are fixed when it starts; the flags given must agree with it. The
    table's own choices (planning.TABLE_CHOICES) may change."""
    from dataclasses import replace

    from .planning import check_resume

    if out is not None and os.path.realpath(out) != os.path.realpath(folder):
        raise UserError(f"--resume {folder} finishes the ladder in its own folder; leave out --out {out}.")
    named = request.ladder.rung_choices
    rung_set = [k for k in settings.typed if k in RUNG_KEYS or k == "train.lr"]
    if named or rung_set:
        what = "--" + (named[0] if named else rung_set[0].split(".")[1]).replace("_", "-")
        raise UserError(
            f"{what} with --resume: a ladder's rungs, their sizes, steps and learning rates are fixed when it "
            f"starts; resume with --resume {folder} alone, or start a new ladder."
        )
    top = ladder.specs[-1]
    kept = tuple(k for k in settings.given if k not in RUNG_KEYS and k != "train.lr")  # the rungs set those
    check_resume(folder, top, replace(settings, given=kept), request)


def ladder_result(folder, draw: bool = True) -> LadderResult:
    """A ladder folder's scale table from its files (`modern-gpt report DIR` of a ladder). Writes its runs.csv
    and summary.csv, and with draw scale.png."""
    import pandas as pd

    from . import ladder as lad

    folder = Path(folder)
    rep = lad.load(folder)
    lad.write_files(folder, rep)
    if draw:
        from .plot import plot_ladder

        plot_ladder(rep, folder / "scale.png")
    rungs = [folder_result(lad.rung_folder(folder, i), None) for i in range(len(rep.rungs))]
    summary = pd.DataFrame([row.cells() for row in rep.rows])
    return LadderResult(folder, summary, rep.runs, rep.notes, rungs, rep)


def folder_result(folder: Path, at_lr: float | None) -> Result:
    """A results folder's Result, read from its files. Nothing trains: a missing plugin file is a footnote."""
    from .report import load
    from .results import ResultsDir

    results = ResultsDir(folder, read_only=True)
    table = load(results, at_lr, verdicts=results.spec.plan != "power")
    return Result(folder, summary_frame(table.summary), table.scan.runs_frame(), table.notes, table)


def plan(settings: Settings, request: Request, out, resume):
    """The Spec of a new ablation, and the learning rates, for at_lr. With resume the Spec is None, and the
    flags given must agree with its folder."""
    from .planning import check_resume, parse_seeds, plan_spec

    if request.command == "power" and parse_seeds(request.seeds) == AUTO:
        raise UserError("power measures the seed noise at a number of seeds; give --seeds N, not auto.")
    if resume is None:
        spec = plan_spec(settings, request)
        return spec, spec.lrs
    if out is not None and os.path.realpath(out) != os.path.realpath(resume):  # a link loop is no traceback
        raise UserError(f"--resume {resume} finishes the ablation in its own folder; leave out --out {out}.")
    from .results import ResultsDir

    results = ResultsDir(resume)
    results.check_resumed_by(request.command)
    check_resume(resume, results.spec, settings, request)  # only what was given is compared
    return None, results.spec.lrs


def run_ablation(
    settings: Settings,
    options: AblationOptions,
    request: Request,
    out=None,
    resume=None,
    at_lr: float | None = None,
    display: Callable | None = None,
    command_line: str = "(called from Python)",
) -> Result:
    """Plan (or check a resume), start or resume on the chosen executor, and train what is pending with a display.
    Then write summary.csv and the figures, log the summary to the trackers, and return the table. request: the
    command's (request_of). display(ablation) -> a context manager with start, step and finished
    (views/progress.py's; None: quiet). Ctrl-C raises Interrupted once the summary of what finished is written."""
    check_main_guard(request.command, options.execution)
    out = None if out is None else Path(out)
    resume = None if resume is None else Path(resume)
    requested, lrs = plan(settings, request, out, resume)
    if resume is None:  # a new ablation: the workers' fork server imports torch while this process imports
        _prestart(options.execution, [requested])  # pandas and torch
    from ..verdict.table import at_lr_index  # pandas loads here, after the plan's checks

    at_lr_index(lrs, at_lr)  # a wrong at_lr is refused before anything trains
    _check_tracking(options.tracking)
    from .running import resume as resume_ablation  # torch loads here, after every check of the flags
    from .running import start

    if resume is not None:
        _check_resume_store(resume, options.tracking)
        ablation = resume_ablation(resume, options)
    else:
        ablation = start(requested, out, command_line, options)
    table = train_pending(ablation, display or _quiet)
    if at_lr is not None:  # every row at one learning rate: another view of the folder
        return folder_result(ablation.results.path, at_lr)
    return Result(ablation.results.path, summary_frame(table.summary), table.scan.runs_frame(), table.notes, table)


def train_pending(ablation, display: Callable):
    """Train what is pending. Then read the folder once into its table (ablation.report.Report, returned), write
    its files and log its summary to the trackers. On Ctrl-C, the summary of what finished is written, the
    trackers closed without one, and Interrupted raised."""
    from . import report
    from .executors import Detached as Handed

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
        report.write(folder, draw=False, scan=ablation.scan())  # the summary of what finished, from memory
        done = len(ablation.finished())
        raise Interrupted(done, ablation.total, folder, ablation.spec.resume_command(folder)) from None
    table = report.load(ablation.results, verdicts=ablation.spec.plan != "power")  # runs/ read once
    report.write_report(ablation.results, table)
    ablation.finish_tracking(table.summary)  # the summary, the figures and the verdicts to the trackers
    return table


def _check_resume_store(folder: Path, tracking: TrackingOptions) -> None:
    """--resume --track mlflow: into the store the folder's earlier runs are in (tracking.check_resume_store)."""
    if "mlflow" in tracking.track:
        from ..trackers.checks import check_resume_store
        from .results import ResultsDir

        check_resume_store(folder, ResultsDir(folder).read_meta(), tracking.track, tracking.mlflow_uri)


def _check_tracking(tracking: TrackingOptions) -> None:
    """--track: every tracker installed and its store reachable, before anything trains (tracking.check)."""
    if tracking.track:
        from ..trackers.checks import check

        check(tracking.track, tracking.mlflow_uri)


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


# ---------------------------------------------------------------------------
# A plain script: its workers would run it again
# ---------------------------------------------------------------------------
def unguarded_call() -> tuple[str, int] | None:
    """(file, line) of the top-level line of the __main__ script calling now, outside any
    `if __name__ == "__main__":` block. None otherwise: a notebook, python -c, a call from a function or under
    the guard. The workers of multiprocessing's spawn and forkserver run that script again as they start.
    Its own check, spawn._check_not_importing_main, then ends them with a traceback."""
    import ast
    import sys

    main = sys.modules.get("__main__")
    path, spec = getattr(main, "__file__", None), getattr(main, "__spec__", None)
    if spec is not None and spec.name.rpartition(".")[2] == "__main__":  # python -m pkg: never imported again
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None or path is None or os.path.realpath(frame.f_code.co_filename) != os.path.realpath(path):
        return None
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    line = frame.f_lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.lineno <= line <= node.end_lineno:
            return None
    return path, line


def _is_main_test(test) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    import ast

    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]


def check_main_guard(command: str, execution: ExecutionOptions) -> None:
    """Refuse, before anything is read or started, a top-level call in a plain script whose runs may train in
    worker processes (jobs above 1, or auto). Each worker would run the script again. On a GPU jobs=auto trains
    one run at a time, as jobs=1 does, but the rule is the same on every machine."""
    if execution.executor != "local" or execution.jobs == 1:
        return
    where = unguarded_call()
    if where is not None:
        raise UserError(
            f"modern_gpt.{command}() is called at the top level of {where[0]} (line {where[1]}), which the worker "
            f"processes of jobs={execution.jobs!r} import again as they start; put the call under "
            '`if __name__ == "__main__":`, or give jobs=1.'
        )
