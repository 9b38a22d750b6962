"""The Python API: what each command does, as a function that takes the same options as its flags.

    import modern_gpt
    result = modern_gpt.ablate(smoke=True, seeds=3, out="results/x")
    result.summary            # summary.csv as a DataFrame (one row per table row)
    result.runs               # runs.csv as a DataFrame (one row per run)
    result.footnotes          # what the table's reader must know
    modern_gpt.report("results/x", at_lr=None).summary

A keyword is a flag's name with '_' for '-' (steps=60 is --steps 60, data="corpus.txt" is --data corpus.txt,
match_params=True is --match-params); smoke=True and config="mini" choose a settings file as --smoke and --config
do, and plugins=[...] are --plugin files. A mistake raises UserError with the sentence the command line prints.
This module is the public face only: the session (plan, train, write, read back) is ablation/session.py's, which
the command line calls too.
"""

from __future__ import annotations

import os
from pathlib import Path

from .ablation.session import (
    ABLATE_OPTIONS,
    POWER_OPTIONS,
    TRACK_OPTIONS,
    Detached,
    Interrupted,
    LadderResult,
    Result,
    Trained,
    folder_result,
    ladder_result,
    request_of,
    run_ablation,
    run_ladder,
    settings_of,
    train_checkpoint,
    with_keywords,
)
from .core.errors import UserError

__all__ = [
    "ablate",
    "duel",
    "power",
    "power_info",
    "scale",
    "report",
    "train",
    "Result",
    "LadderResult",
    "Trained",
    "Interrupted",
    "Detached",
    "UserError",
]


def _joined(command: str, name: str, value, sep: str = ","):
    """A keyword whose flag takes a list as text (lrs, components, variants, rungs...): a list or tuple is joined
    as the flag writes it (lrs=[1e-3, 3e-3] is --lrs 0.001,0.003); a number is its text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str | int | float) for v in value):
        if not any(isinstance(v, bool) for v in value):
            return sep.join(str(v) for v in value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise UserError(f"modern_gpt.{command}(): {name} must be a string or a list, got {value!r}.")


def _rows(command: str, **rows) -> dict:
    """The plan's keywords as their flags' text (variants rows joined by ';', the other lists by ',')."""
    return {k: _joined(command, k, v, ";" if k == "variants" else ",") for k, v in rows.items()}


# ---------------------------------------------------------------------------
# train: one model to a checkpoint folder
# ---------------------------------------------------------------------------
@with_keywords(TRACK_OPTIONS, components=True)
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
    return train_checkpoint(settings, options.tracking, seed, out, force)


# ---------------------------------------------------------------------------
# ablate, duel and power
# ---------------------------------------------------------------------------
@with_keywords(ABLATE_OPTIONS)
def ablate(
    *,
    plan: str | None = None,
    components: str | list[str] | None = None,
    variants: str | list[str] | None = None,
    lrs: str | list[float] | None = None,
    lr_sweep: str | None = None,
    at_lr: float | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool | None = None,
    **flags,
) -> Result:
    """Train every variant with every seed and return one table: does each component really help? The keywords
    are `modern-gpt ablate`'s flags (see its --help); progress shows the live display on stderr (None: when stderr
    is a terminal, or in IPython)."""
    settings, options = settings_of("ablate", flags, ABLATE_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    rows = _rows("ablate", components=components, variants=variants, lrs=lrs, lr_sweep=lr_sweep)
    request = request_of("ablate", options, plan=plan, **rows)
    return run_ablation(settings, options, request, out, resume, at_lr, _display(progress))


@with_keywords(ABLATE_OPTIONS)
def duel(
    *,
    lrs: str | list[float] | None = None,
    lr_sweep: str | None = None,
    at_lr: float | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool | None = None,
    **flags,
) -> Result:
    """All-classic against all-modern on the same data, seeds and steps (`modern-gpt duel`)."""
    settings, options = settings_of("duel", flags, ABLATE_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    request = request_of("duel", options, **_rows("duel", lrs=lrs, lr_sweep=lr_sweep))
    return run_ablation(settings, options, request, out, resume, at_lr, _display(progress))


@with_keywords(POWER_OPTIONS)
def power(
    *,
    variant: str | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool | None = None,
    **flags,
) -> Result:
    """How many seeds does a question need (`modern-gpt power`): one architecture and its placebo at N seeds."""
    settings, options = settings_of("power", flags, POWER_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    request = request_of("power", options, variants=variant)
    return run_ablation(settings, options, request, out, resume, None, _display(progress))


# ---------------------------------------------------------------------------
# scale: the plan's rows at a ladder of sizes, and the compute multiplier k
# ---------------------------------------------------------------------------
@with_keywords(ABLATE_OPTIONS)
def scale(
    *,
    plan: str | None = None,
    components: str | list[str] | None = None,
    variants: str | list[str] | None = None,
    lrs: str | list[float] | None = None,
    lr_sweep: str | None = None,
    rungs: str | int | list[int] | None = None,
    depths: str | list[int] | None = None,
    tokens_per_param: float | None = None,
    rung_steps: str | list[int] | None = None,
    lr_rule: str | None = None,
    trend_margin: float | None = None,
    target_compute: float | None = None,
    out: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    config: str | None = None,
    smoke: bool = False,
    plugins=(),
    progress: bool | None = None,
    **flags,
) -> LadderResult:
    """The plan's rows at a ladder of model sizes (`modern-gpt scale`): each row's compute multiplier k against
    its reference at each rung and over the ladder, with seed noise in its CI, and whether k changes with scale."""
    settings, options = settings_of("scale", flags, ABLATE_OPTIONS, config=config, smoke=smoke, plugins=plugins)
    rows = _rows("scale", components=components, variants=variants, lrs=lrs, lr_sweep=lr_sweep)
    rows |= _rows("scale", rungs=rungs, depths=depths, rung_steps=rung_steps)  # as their flags' text ("3" too)
    ladder = dict(tokens_per_param=tokens_per_param, lr_rule=lr_rule, trend_margin=trend_margin)
    request = request_of("scale", options, plan=plan, **rows, **ladder, target_compute=target_compute)
    return run_ladder(settings, options, request, out, resume, _display(progress))


# ---------------------------------------------------------------------------
# Reading a folder back
# ---------------------------------------------------------------------------
def power_info(result: Result):
    """A power folder's figures as a DataFrame, one row per seed count (seeds, mde): the paired sd with its CI
    and the placebo's test are in its attrs (sd, sd_low, sd_high, placebo...), as `modern-gpt power` prints them."""
    from .ablation.report import power_frame

    if not isinstance(result, Result) or result.table.spec.plan != "power":
        raise UserError("power_info takes the Result of modern_gpt.power (or of report on a power folder).")
    return power_frame(result.table.spec, result.table.summary)


def report(folder: str | os.PathLike, *, at_lr: float | None = None, plugins=()) -> Result | LadderResult:
    """A results folder's table from its files alone (`modern-gpt report DIR`): nothing is trained. A ladder's
    folder (modern-gpt scale) gives its LadderResult."""
    if not isinstance(folder, str | os.PathLike):
        raise UserError(f"modern_gpt.report() takes a results folder's path, not a {type(folder).__name__}.")
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
    return folder_result(Path(folder), at_lr)


def _display(progress: bool | None):
    """views.progress.display_of, imported when a command runs: `import modern_gpt` loads no rich."""
    from .views.progress import display_of

    return display_of(progress)
