"""The command line's shared flags: one flag per setting, generated from the settings dataclasses (so that
train, ablate, duel and scale share one definition of every flag), and the options several commands take."""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path
from typing import Annotated

import typer

from ..ablation.session import settings_of
from ..core.components import COMPONENT_SUMMARY, COMPONENTS
from ..core.errors import UserError
from ..core.settings import ABLATION, CLUSTER, OPTIONS, SECTIONS, Setting, cli_settings

# What a flag's value looks like, where its type alone does not say (a number or auto, a repeatable KEY=VALUE)
METAVARS = {
    f"{ABLATION}.seeds": "N|auto",
    f"{ABLATION}.jobs": "N|auto",
    f"{ABLATION}.seed_list": "S,S,...",
    f"{ABLATION}.sbatch": "KEY=VALUE",
    f"{ABLATION}.track": "NAME",
    f"{ABLATION}.time_limit": "MINUTES|HH:MM:SS",
    f"{ABLATION}.ray_address": "HOST:PORT",
    f"{ABLATION}.mlflow_uri": "URI",
    "train.compile": "auto|on|off",
    "data.path": "PATH|NAME",
    "data.eval_data": "NAME=PATH",
}


# ---------------------------------------------------------------------------
# Settings flags: generated from the settings dataclasses, so that train, ablate
# and duel share one definition of every flag.
# ---------------------------------------------------------------------------
def _option(name: str, annotation, default, *flags: str, help: str, panel: str, metavar=None) -> inspect.Parameter:
    hidden = panel == CLUSTER  # --help shows them in a line; --help-all lists them
    opt = typer.Option(*flags, help=help, rich_help_panel=panel, show_default=False, metavar=metavar, hidden=hidden)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, opt]
    )


def _flag_help(s: Setting) -> str:
    """A setting's flag help: the dataclass field's own (see settings.py), with its default."""
    default = f" \\[default: {s.default}]" if s.default not in (None, "") else ""
    return s.help.replace("[", "\\[") + default


def _setting_option(s: Setting, help: str | None = None) -> inspect.Parameter:
    flags = s.flags if s.type is not bool else (f"{s.flags[0]}/--no-{s.flags[0][2:]}",)
    kind = str if typing.get_args(s.type) else s.type  # int | str, a number or auto: its dataclass parses it
    kind = list[str] if s.is_list else kind  # repeatable: --track mlflow --track tensorboard
    metavar = METAVARS.get(s.key, "NAME" if s.is_list else None)
    return _option(s.param, kind | None, None, *flags, help=help or _flag_help(s), panel=s.panel, metavar=metavar)


def _file_options() -> list[inspect.Parameter]:
    """--config and --smoke: the settings file."""
    config_help = "TOML settings file, or a shipped one by name: smoke, mini, shakespeare."
    smoke_help = "Tiny settings and the built-in corpus: a CPU run in seconds (configs/smoke.toml)."
    return [
        _option("config", str | None, None, "--config", "-c", help=config_help, panel="Settings"),
        _option("smoke", bool, False, "--smoke", help=smoke_help, panel="Settings"),
        _option("plugin", list[str] | None, None, "--plugin", help=PLUGIN_HELP, panel="Settings", metavar="PATH"),
    ]


PLUGIN_HELP = (
    "A Python file of components of your own (docs/components.md); repeat for more. train and params switch its "
    "components on (generate reads them from the checkpoint); the ablations take their names in --components "
    "and --variants."
)


RECORDED_PLUGIN_HELP = (
    "A plugin file it was made with, on any path: an unchanged copy (the same sha256) stands in for the "
    "recorded one; repeat for more."
)
RecordedPlugins = Annotated[
    list[str] | None, typer.Option("--plugin", help=RECORDED_PLUGIN_HELP, show_default=False, metavar="PATH")
]


def _load_plugins(paths: list[str] | None) -> None:
    """report, generate, extrapolate and export: the --plugin files, loaded before the folder or checkpoint is
    read, so that its recorded plugins match them by source wherever they lie (plugins.check_recorded)."""
    if paths:
        from ..model.plugins import load

        load(paths)


def _show_all(ctx: typer.Context, value: bool) -> None:
    """--help-all: the help with every flag, the cluster flags that --help leaves out included."""
    if value and not ctx.resilient_parsing:
        for param in ctx.command.params:
            param.hidden = False
        typer.echo(ctx.get_help())
        raise typer.Exit()


def _help_all() -> inspect.Parameter:
    help = f"Show every flag, the {CLUSTER} flags (--ray-address, --partition, --sbatch, ...) included, and exit."
    opt = typer.Option("--help-all", help=help, is_eager=True, expose_value=False, callback=_show_all)
    return inspect.Parameter("help_all", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[bool, opt])


def _component_switches() -> list[inspect.Parameter]:
    flags = [(c, "--" + c.replace("_", "-"), COMPONENT_SUMMARY[c]) for c in COMPONENTS]
    flags.append(("modern", "--modern", "All the components."))
    return [_option(name, bool, False, flag, help=text, panel="Components") for name, flag, text in flags]


def _switched_on(kw: dict) -> dict[str, bool]:
    """The components the switches turn on (every one with --modern), as overrides; takes the switches from kw."""
    modern = kw.pop("modern")
    return {f"model.{c}": True for c in COMPONENTS if kw.pop(c) or modern}


def with_settings(
    sections: tuple[str, ...] = tuple(SECTIONS),
    components: bool = True,
    exclude: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
    helps: dict[str, str] | None = None,
    other_options_ok: bool = False,
):
    """Adds --config, --smoke, one flag per setting, (optionally) the component switches, and the flags of these
    ablation options (the field names of AblationOptions' parts; helps: a command's own help of some). It is
    called with `settings`, the resolved Settings, and with options also `options`, the resolved AblationOptions:
    each the defaults, then the config file, then the flags. other_options_ok: the config file's other [ablation]
    keys are let be (train reads --track alone, and an ablation's config file trains one model too)."""
    settings = cli_settings(sections, exclude)
    chosen = [OPTIONS[f"{ABLATION}.{name}"] for name in options]

    def deco(func):
        hints = typing.get_type_hints(func, include_extras=True)  # annotations are strings in this module
        own = [p for p in inspect.signature(func).parameters.values() if p.name not in ("settings", "options")]
        params = [p.replace(annotation=hints[p.name]) for p in own]
        params += [_setting_option(s, (helps or {}).get(s.name)) for s in chosen]
        params += _file_options() + [_setting_option(s) for s in settings]
        params += _component_switches() if components else []
        params += [_help_all()] if any(s.panel == CLUSTER for s in [*chosen, *settings]) else []

        @functools.wraps(func)
        def wrapper(**kw):
            kw.pop("help_all", None)  # --help-all has printed the help and exited, or was not given
            overrides = {s.key: kw.pop(s.param) for s in settings}
            overrides.update(_switched_on(kw) if components else {})
            overrides.update({s.key: kw.pop(s.param) for s in chosen})
            kw["settings"], parsed = settings_of(
                func.__name__,
                {},
                options,
                config=kw.pop("config"),
                smoke=kw.pop("smoke"),
                plugins=kw.pop("plugin") or [],
                components=components,
                other_options_ok=other_options_ok,
                overrides=overrides,
            )
            if options:
                kw["options"] = parsed
            return func(**kw)

        wrapper.__signature__ = inspect.Signature(params)
        return wrapper

    return deco


# ---------------------------------------------------------------------------
# Options several commands share, declared once (the huggingface_hub CLI style),
# each with its check where the check is about the flag alone.
# ---------------------------------------------------------------------------
FORMATS = ("table", "markdown", "csv", "json")  # a results folder's table: ablate, duel and report
TABLE_OR_JSON = ("table", "json")  # the other commands


def _choices(allowed: tuple[str, ...]) -> str:
    return f"{', '.join(allowed[:-1])} or {allowed[-1]}."


def _format_of(allowed: tuple[str, ...]):
    """The check of a --format that allows these."""

    def check(value: str) -> str:
        if value not in allowed:
            raise UserError(f"unknown format {value!r}; choose one of {', '.join(allowed)}.")
        return value

    return check


def _seed(value: int) -> int:
    from ..ablation.planning import MAX_SEED  # the one largest seed: an ablation's, stored in runs.csv's 64-bit columns

    if not 0 <= value <= MAX_SEED:
        raise UserError(f"--seed must be between 0 and {MAX_SEED}, got {value}.")
    return value


def _folder(param: typer.CallbackParam, value: str | None) -> str | None:
    """A folder given on the command line; an empty one (--out '') would mean the current folder: refused."""
    if value is not None and not value.strip():
        raise UserError(f"{param.opts[0]} is empty; give a folder name.")
    return value


def _out(what: str, default: str, panel: str | None = None):
    """--out: the folder a command writes, `default` when it is not given."""
    help = f"{what} folder \\[default: {default}]."
    return Annotated[str | None, typer.Option(help=help, rich_help_panel=panel, callback=_folder, metavar="DIR")]


DEVICE_HELP = "auto | cpu | cuda | mps (auto: cuda, then mps, then cpu)."
SEED_HELP = "Seed of every random stream: the same seed gives the same run, or the same text."
FORCE_HELP = "Write into the output folder even when it holds files (they are replaced)."
Format = Annotated[str, typer.Option("--format", help=_choices(FORMATS), callback=_format_of(FORMATS))]
TableOrJson = Annotated[str, typer.Option("--format", help=_choices(TABLE_OR_JSON), callback=_format_of(TABLE_OR_JSON))]
Checkpoint = Annotated[Path, typer.Argument(help="A checkpoint folder written by modern-gpt train.")]
Device = Annotated[str, typer.Option(help=DEVICE_HELP)]
Seed = Annotated[int, typer.Option(help=SEED_HELP, callback=_seed)]
Force = Annotated[bool, typer.Option("--force", help=FORCE_HELP)]
