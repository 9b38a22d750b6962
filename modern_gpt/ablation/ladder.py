"""A ladder: the plan's rows at K model sizes (rungs), each rung an ordinary ablation folder, and one scale table.

DIR/ladder.json holds the ladder: the rungs, their tokens and learning rates, the rule that chose them, and each
rung's Spec. DIR/rung-0 ... DIR/rung-K-1 are ablation folders like any other: report, --resume and the trackers
read them as they are. DIR/runs.csv holds the runs the scale table reads, one row per run, with its rung and
training FLOPs (with --lrs, each row's chosen learning rate). So `modern-gpt judge DIR/runs.csv --compute-col
flops` gives the same table. DIR/summary.csv is the scale table (verdict/ladder.py's columns).

Each rung is as fair as any ablation (docs/statistics.md). It keeps the config's heads and KV heads, so
GQA's ratio is the same at every size. It changes the width, and the depth where asked. Its tokens are its
non-embedding parameters (of the plan's first row) times one ratio. By default that is the config's own: its
steps, batch and context over its size. So a ladder whose top rung is the config trains it exactly as `ablate` does.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..core.config import ModelConfig, non_embedding_params, param_counts
from ..core.errors import UserError
from ..core.files import not_regular, write_json
from ..core.schema import problem
from ..core.settings import Settings
from ..model import plugins
from ..verdict.ladder import table_choices_problem
from .planning import LADDER_FILE, Request, Spec, SpecError, plan_spec

FORMAT = 1
MAX_RUNGS = 8
DEFAULT_RUNGS = 3  # halving the width each step down: 16x the parameters from the bottom rung to the top
LR_EXPONENT = -1 / 3  # --lr-rule scaled: lr ∝ N^(-1/3), the exponent of OLMo's ladder law (docs/statistics.md)
LR_RULES = ("scaled", "constant")
MAX_RUNG_STEPS = 10**8  # more steps than anyone waits for is a typing mistake (a ratio of 1e9, say), not a plan


@dataclass(frozen=True)
class Rung:
    """One size: its width and depth, its steps (the warm-up and evaluation interval scaled with them), its lr.
    lr is None with --lrs: every row trains at each. params: the plan's first row's non-embedding parameters."""

    dim: int
    layers: int
    steps: int
    warmup_steps: int
    eval_every: int
    lr: float | None
    params: int

    @property
    def name(self) -> str:
        return f"{self.dim}x{self.layers}"


@dataclass
class Ladder:
    """A ladder as ladder.json holds it."""

    rungs: list[Rung]
    specs: list[Spec]
    lr_rule: str  # how each rung's learning rate was chosen, in words (the table's footnote)
    tokens_per_param: float
    trend_margin: float | None = None
    target_compute: float | None = None
    command: str = ""

    def with_table_choices(self, trend_margin: float | None, target_compute: float | None) -> Ladder:
        """The ladder with the table's own choices, those given (None: kept), checked. They change the scale
        table, not the rungs, so a --resume takes them too."""
        why = table_choices_problem(trend_margin, target_compute)
        if why:
            raise UserError(f"{why}.")
        return replace(
            self,
            trend_margin=self.trend_margin if trend_margin is None else trend_margin,
            target_compute=self.target_compute if target_compute is None else target_compute,
        )

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "command": self.command,
            "rungs": [asdict(r) for r in self.rungs],
            "specs": [s.to_dict() for s in self.specs],
            "lr_rule": self.lr_rule,
            "tokens_per_param": self.tokens_per_param,
            "trend_margin": self.trend_margin,
            "target_compute": self.target_compute,
        }

    @classmethod
    def from_dict(cls, d: dict, path: Path) -> Ladder:
        try:
            if d.get("format", FORMAT) != FORMAT:
                raise ValueError(f"its format is {d.get('format')!r}, not {FORMAT}")
            rungs = [_rung(r, i) for i, r in enumerate(d["rungs"])]
            specs = [Spec.from_dict(s) for s in d["specs"]]
            if len(rungs) != len(specs):
                raise ValueError("its rungs and specs differ in number")
            _agree(rungs, specs)
            for key, low in (("trend_margin", 1.0), ("target_compute", 0.0)):
                x = d.get(key)
                if x is not None and (isinstance(x, bool) or not isinstance(x, int | float) or not low < x < math.inf):
                    raise ValueError(f"{key} is {x!r}, not a number above {low:g}")
            if not isinstance(d["lr_rule"], str):
                raise ValueError(f"lr_rule is {d['lr_rule']!r}, not text")
            return cls(
                rungs,
                specs,
                str(d["lr_rule"]),
                float(d["tokens_per_param"]),
                d.get("trend_margin"),
                d.get("target_compute"),
                str(d.get("command", "")),
            )
        except (KeyError, TypeError, ValueError, SpecError) as e:
            raise UserError(
                f"{path} is not a modern-gpt ladder file or is damaged ({e}); start a new ladder with modern-gpt scale."
            ) from None


def _rung(r, i: int) -> Rung:
    """ladder.json's rungs[i], each field of its type."""
    if not isinstance(r, dict):
        raise ValueError(f"rungs[{i}] is not an object")
    for key in ("dim", "layers", "steps", "warmup_steps", "eval_every", "params"):
        low = 0 if key == "warmup_steps" else 1
        if isinstance(r.get(key), bool) or not isinstance(r.get(key), int) or r[key] < low:
            raise ValueError(f"rungs[{i}].{key} is {r.get(key)!r}, not a whole number of {low} or more")
    lr = r.get("lr")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float) or not 0 < lr < math.inf):
        raise ValueError(f"rungs[{i}].lr is {lr!r}, not a positive number")
    return Rung(**{k: r.get(k) for k in ("dim", "layers", "steps", "warmup_steps", "eval_every", "lr", "params")})


def _agree(rungs: list[Rung], specs: list[Spec]) -> None:
    """Each rung as its spec trains it, and the rungs growing. A hand-edited rung would label another's numbers."""
    for i, (r, spec) in enumerate(zip(rungs, specs, strict=True)):
        m, t = spec.settings.model, spec.settings.train
        if (m.dim, m.layers, t.steps) != (r.dim, r.layers, r.steps):
            raise ValueError(
                f"rungs[{i}] says {r.dim}x{r.layers} for {r.steps} steps and specs[{i}] {m.dim}x{m.layers} for {t.steps}"
            )
    if any(b.params <= a.params for a, b in zip(rungs, rungs[1:], strict=False)):
        raise ValueError("its rungs do not grow in size from first to last")


def is_ladder(folder) -> bool:
    """A folder holding ladder.json, of any kind. A pipe or a folder so named is then named by read."""
    return os.path.lexists(Path(folder) / LADDER_FILE)


def rung_folder(folder: Path, i: int) -> Path:
    return Path(folder) / f"rung-{i}"


def read(folder: Path, read_only: bool = False) -> Ladder:
    """ladder.json, checked, after loading the plugins its rungs recorded (their specs name their components).
    read_only (a report): a missing plugin file is stood in for (_missing_note)."""
    path = Path(folder) / LADDER_FILE
    if not os.path.lexists(path):
        raise UserError(_no_ladder(Path(folder)))
    odd = not_regular(path)
    if odd:  # a pipe would block the read for ever
        raise UserError(f"{path} is {odd}, not a ladder file; start a new ladder with modern-gpt scale.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(
            f"{path} cannot be read as a ladder file ({e}); start a new ladder with modern-gpt scale."
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a modern-gpt ladder file; start a new ladder with modern-gpt scale.")
    for meta in sorted(m for m in Path(folder).glob("rung-*/meta.json") if m.is_file()):  # as a folder reads its own
        recorded = None
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a damaged rung is named where it is read
            recorded = json.loads(meta.read_text(encoding="utf-8")).get("plugins")
        if recorded is not None and problem(recorded, [plugins.RECORD_SCHEMA]) is None:
            plugins.check_recorded(recorded, meta.parent, read_only=read_only)
    return Ladder.from_dict(data, path)


def _no_ladder(folder: Path) -> str:
    """Why a folder given as a ladder holds none. It does not exist, it is an ablation (a rung), or something else."""
    if not folder.exists():
        return f"{folder} does not exist; give the folder modern-gpt scale wrote (the one holding ladder.json)."
    if (folder / "meta.json").exists():
        if is_ladder(folder.parent):
            return (
                f"{folder} is a rung of the ladder {folder.parent}: {resume_command(folder.parent)} resumes the ladder."
            )
        return f"{folder} is an ablation folder, not a ladder: modern-gpt ablate --resume {shlex.quote(str(folder))} resumes it."
    return f"{folder} holds no {LADDER_FILE}, so it is no ladder; give the folder modern-gpt scale wrote."


def lost_rung(folder: Path, where: Path) -> str:
    """A rung folder without meta.json: what it is and how to train that rung again."""
    return (
        f"{where} holds no meta.json, so it is no rung of this ladder any more; delete {where} and "
        f"{resume_command(folder)} starts that rung again."
    )


def write(folder: Path, ladder: Ladder) -> None:
    write_json(Path(folder) / LADDER_FILE, ladder.to_dict())


def check_rungs(folder: Path, ladder: Ladder) -> None:
    """Each rung folder's own meta.json against ladder.json (plan, rows, seeds, size, data), before a number is
    read. Rungs are matched by position. A rung copied from another ladder, or two rungs swapped, would lend
    their runs to the wrong rows or size."""
    from .results import ResultsDir

    for i, want in enumerate(ladder.specs):
        where = rung_folder(folder, i)
        if not (where / "meta.json").is_file():
            continue
        why = _spec_differs(ResultsDir(where, read_only=True).spec, want)
        if why:
            raise UserError(
                f"{where} is not rung {i} of the ladder in {folder}: its meta.json {why}; put back that rung's own "
                "folder, or start a new ladder."
            )


def _spec_differs(got: Spec, want: Spec) -> str | None:
    """How a rung's spec differs from the one ladder.json holds for it, in words, or None."""
    gm, wm = got.settings.model, want.settings.model
    rows = [(v.name, v.components, v.reference, v.placebo) for v in got.variants]
    if got.plan != want.plan or rows != [(v.name, v.components, v.reference, v.placebo) for v in want.variants]:
        named = ", ".join(v.name for v in got.table_variants)
        return f"holds the rows {named} of plan {got.plan}, and ladder.json {', '.join(v.name for v in want.table_variants)}"
    if (gm.dim, gm.layers, got.settings.train.steps) != (wm.dim, wm.layers, want.settings.train.steps):
        return (
            f"trains {gm.dim}x{gm.layers} for {got.settings.train.steps} steps, and ladder.json's rung "
            f"{wm.dim}x{wm.layers} for {want.settings.train.steps}"
        )
    if list(got.seeds) != list(want.seeds) or (want.data_key and got.data_key != want.data_key):
        return "has other seeds or another corpus than ladder.json's"
    return None


def resume_command(folder) -> str:
    return f"modern-gpt scale --resume {shlex.quote(str(folder))}"


# ---------------------------------------------------------------------------
# Planning: the rungs' sizes, tokens and learning rates
# ---------------------------------------------------------------------------
def _numbers(text: str, flag: str, kind=int) -> list:
    """A comma list of whole numbers. An empty entry ('32,,64', a trailing comma) is a typing mistake, not a skip."""
    parts = [x.strip() for x in str(text).split(",")]
    if not any(parts):
        raise UserError(f"{flag} is empty; give numbers separated by commas.")
    if not all(parts):
        raise UserError(f"{flag} {text!r} has an empty entry; give one number between each pair of commas.")
    try:
        return [kind(x) for x in parts]
    except ValueError:
        raise UserError(f"{flag} must be whole numbers separated by commas, got {text!r}.") from None


def parse_widths(text: str | int | None, dim: int) -> list[int]:
    """--rungs: a count (the config's width halved at each rung down), or widths separated by commas."""
    text = str(DEFAULT_RUNGS if text is None else text).strip()
    if "," not in text:
        try:
            k = int(text)
        except ValueError:
            raise UserError(f"--rungs must be a count (such as 3) or widths such as 32,64,128, got {text!r}.") from None
        if not 3 <= k <= MAX_RUNGS:
            raise UserError(
                f"--rungs {k}: a ladder has 3 to {MAX_RUNGS} rungs; to give widths, separate them by commas "
                "(--rungs 32,64,128)."
            )
        widths = [dim // 2 ** (k - 1 - i) for i in range(k)]
        if widths[0] < 1 or any(w * 2 ** (k - 1 - i) != dim for i, w in enumerate(widths)):
            raise UserError(
                f"--rungs {k} halves the width {dim} {k - 1} times, which does not stay a whole number; give the "
                "widths (--rungs 24,48,96) or fewer rungs."
            )
        return widths
    return _numbers(text, "--rungs")


def _rung_model(base: ModelConfig, dim: int, layers: int) -> ModelConfig:
    """The config at another width and depth. The heads and KV heads stay; an explicit MLP width scales with dim."""
    hidden = None if base.mlp_hidden is None else max(1, round(base.mlp_hidden * dim / base.dim))
    return replace(base, dim=dim, layers=layers, mlp_hidden=hidden)


def _body(model: ModelConfig, components: tuple[str, ...]) -> int:
    return non_embedding_params(param_counts(model.with_components(components)))


def plan_ladder(settings: Settings, request: Request) -> Ladder:
    """The ladder of a new `modern-gpt scale`: its rungs and each rung's Spec (plan_spec's, at that size).
    It is planned from the request's ladder choices (request.ladder)."""
    base, asked = settings.model, request.ladder
    widths = parse_widths(asked.rungs, base.dim)
    layers = _numbers(asked.depths, "--depths") if asked.depths is not None else [base.layers] * len(widths)
    if len(layers) != len(widths):
        raise UserError(f"--depths gives {len(layers)} depths for {len(widths)} rungs; give one per rung.")
    if len(widths) < 3:
        raise UserError(
            f"a ladder needs at least 3 rungs, got {len(widths)}: a curved loss-compute fit and a trend across sizes "
            "both need three; give --rungs 3 or more."
        )
    if min(widths) < 1 or min(layers) < 1:
        raise UserError("--rungs widths and --depths must be positive whole numbers.")
    first = plan_spec(settings, request).table_variants[0].components  # the plan's first row
    models = []
    for w, d in zip(widths, layers, strict=True):
        _check_shape(base, w, d)
        models.append(_rung_model(base, w, d))
    sizes = [_body(m, first) for m in models]
    if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
        shown = ", ".join(f"{m.dim}x{m.layers}: {n:,}" for m, n in zip(models, sizes, strict=True))
        raise UserError(f"the rungs must grow in size from first to last, and their parameters do not ({shown}).")
    steps, ratio = _steps(settings, models, sizes, first, asked.tokens_per_param, asked.rung_steps)
    rule, lrs = _learning_rates(settings, sizes, asked.lr_rule, request)
    train = settings.train
    out = []
    for m, n, s, lr in zip(models, sizes, steps, lrs, strict=True):
        share = s / train.steps
        warm = min(max(0, round(train.warmup_steps * share)), s - 1) if train.warmup_steps else 0
        out.append(Rung(m.dim, m.layers, s, warm, max(1, round(train.eval_every * share)), lr, n))
    specs = [plan_spec(rung_settings(settings, r), request) for r in out]
    return Ladder(out, specs, rule, ratio).with_table_choices(asked.trend_margin, asked.target_compute)


def rung_settings(settings: Settings, r: Rung) -> Settings:
    model = _rung_model(settings.model, r.dim, r.layers)
    train = replace(settings.train, steps=r.steps, warmup_steps=r.warmup_steps, eval_every=r.eval_every)
    if r.lr is not None:
        train = replace(train, lr=r.lr)
    return replace(settings, model=model, train=train)


def _check_shape(base: ModelConfig, dim: int, layers: int) -> None:
    """A rung's shape, checked before its config is made. The heads divide the width; RoPE's head width is even."""
    why = None
    if dim % base.heads:
        why = f"the width {dim} is not divisible by the {base.heads} heads"
    elif (dim // base.heads) % 2:
        why = f"the width {dim} gives {base.heads} heads of odd width {dim // base.heads}, which RoPE cannot rotate"
    if why:
        raise UserError(f"rung {dim}x{layers}: {why}; choose widths that are multiples of {2 * base.heads}.")


def _steps(
    settings: Settings,
    models: list[ModelConfig],
    sizes: list[int],
    first: tuple[str, ...],
    ratio: float | None,
    rung_steps: str | None,
) -> tuple[list[int], float]:
    """Each rung's steps, and the tokens per non-embedding parameter: the config's own ratio unless given."""
    train, context = settings.train, settings.model.context
    per_step = train.batch_size * context
    if rung_steps is not None:
        if ratio is not None:
            raise UserError("--rung-steps and --tokens-per-param both set the rungs' tokens; give one of them.")
        steps = _numbers(rung_steps, "--rung-steps")
        if len(steps) != len(models) or min(steps) < 1 or max(steps) > MAX_RUNG_STEPS:
            raise UserError(
                f"--rung-steps needs one whole number from 1 to {MAX_RUNG_STEPS:,} per rung ({len(models)}), got "
                f"{rung_steps!r}."
            )
        low = next((i for i in range(1, len(steps)) if steps[i] < steps[i - 1]), None)
        if (
            low is not None
        ):  # refused now, not after every run has trained (a rung of fewer steps need not reach a lower loss)
            m, below = models[low], models[low - 1]
            raise UserError(
                f"--rung-steps {rung_steps}: rung {m.dim}x{m.layers} would train fewer steps ({steps[low]}) than the "
                f"smaller rung {below.dim}x{below.layers} below it ({steps[low - 1]}); give each rung at least the "
                "steps of the one below."
            )
        return steps, steps[-1] * per_step / sizes[-1]
    if ratio is None:
        ratio = train.steps * per_step / _body(settings.model, first)  # the config's own
    elif not 0 < ratio < math.inf:
        raise UserError(f"--tokens-per-param must be a positive number, got {ratio}.")
    steps = [round(ratio * n / per_step) for n in sizes]
    for m, n, s in zip(models, sizes, steps, strict=True):
        if s > MAX_RUNG_STEPS:
            raise UserError(
                f"rung {m.dim}x{m.layers} would train {s:,} steps ({ratio:.3g} tokens per parameter of its {n:,}), more "
                f"than the {MAX_RUNG_STEPS:,} a ladder takes; give a lower --tokens-per-param or smaller rungs."
            )
        if s < 1:
            raise UserError(
                f"rung {m.dim}x{m.layers} gets {ratio * n:,.0f} tokens ({ratio:.3g} per parameter of its {n:,}), "
                f"below one batch of {per_step:,}; give a higher --tokens-per-param, wider rungs, or --rung-steps."
            )
    return steps, ratio


def _learning_rates(
    settings: Settings, sizes: list[int], rule: str | None, request: Request
) -> tuple[str, list[float | None]]:
    """Each rung's learning rate and the rule, in words. With --lrs, every rung trains every row at each."""
    grid = request.lrs is not None or request.lr_sweep is not None
    if grid:
        if rule is not None:
            raise UserError("--lr-rule chooses one learning rate per rung, and --lrs trains each at several; give one.")
        return "every row at each of --lrs at every rung, each at its own best (the fair version)", [None] * len(sizes)
    rule = rule or "scaled"
    if rule not in LR_RULES:
        raise UserError(f"--lr-rule must be one of {', '.join(LR_RULES)}, got {rule!r}.")
    lr, top = settings.train.lr, sizes[-1]
    if rule == "constant":
        return f"--lr-rule constant: {lr:g} at every rung", [lr] * len(sizes)
    rates = [float(f"{lr * (n / top) ** LR_EXPONENT:.3g}") for n in sizes]
    shown = ", ".join(f"{x:g}" for x in rates)
    return f"--lr-rule scaled: lr {lr:g} at the top rung times (N / N_top)^(-1/3), so {shown}", rates


# ---------------------------------------------------------------------------
# The scale table: every rung's runs, one frame, verdict/ladder.py's table
# ---------------------------------------------------------------------------
@dataclass
class LadderReport:
    """A ladder folder's tables: the ladder, the scale design, rows and footnotes, each rung's ordinary Report.
    runs: the runs the scale table read (runs.csv's frame)."""

    ladder: Ladder
    design: object  # verdict.ladder.LadderDesign
    rows: list  # verdict.ladder.LadderRow
    notes: list[str]
    rungs: list  # ablation.report.Report per rung
    runs: object  # pandas.DataFrame
    holdout: list = ()  # verdict.ladder.HeldOut per row: the top rung predicted from the rungs below it
    metrics: list = ()  # with --eval-data: k per further metric, descriptive (verdict/ladder_metrics.py)


RUN_FRAME = [
    "rung",
    "rung_name",
    "row",
    "variant",
    "reference",  # the row's reference by name ("" for none) and its placebo mark, as an ablation's runs.csv says
    "placebo",  # them: judge --compute-col then compares each row as the scale table does
    "seed",
    "lr",
    "params",
    "flops",
    "mfu",
    "val_loss",
    "train_loss",
    "epochs",
    "steps_done",
    "diverged",
    "error",
]


def load(folder) -> LadderReport:
    """The scale table of a ladder folder from its files alone: each rung's meta.json and runs/."""

    from ..verdict.design import Row
    from ..verdict.ladder import LadderDesign, LadderError, holdout_check, ladder_table
    from ..verdict.ladder_metrics import further_metrics, metric_ks
    from ..verdict.table import failed
    from . import report
    from .results import ResultsDir

    folder = Path(folder)
    ladder = read(folder, read_only=True)
    check_rungs(folder, ladder)
    reps, missing = [], set()
    for i in range(len(ladder.rungs)):
        where = rung_folder(folder, i)
        if not where.exists():
            raise UserError(f"{where} is missing: this ladder never started that rung; {resume_command(folder)} does.")
        if not (where / "meta.json").is_file():
            raise UserError(lost_rung(folder, where))
        results = ResultsDir(where, read_only=True)  # nothing trains: a missing plugin file is a footnote
        reps.append(report.load(results))
        missing.update(results.missing_plugins)
    sets = [name for name, _ in ladder.specs[0].settings.data.eval_sets]
    further = further_metrics(set().union(*(rep.runs.columns for rep in reps)), sets)
    runs = _run_frame(ladder, reps, RUN_FRAME + further)  # without sets: runs.csv as before
    runs["failed"] = failed(runs).to_numpy()
    first = reps[-1].design
    rows = tuple(Row(r.name, r.reference, r.placebo) for r in first.rows)
    design = LadderDesign(
        rows,
        tuple(r.name for r in ladder.rungs),
        tuple(ladder.specs[0].seeds),
        ladder.specs[0].alpha,
        ladder.trend_margin,
        ladder.target_compute,
        source=ladder.specs[0].data_name,
        lr_rule=ladder.lr_rule,
    )
    try:
        table, notes = ladder_table(design, runs)
    except LadderError as e:
        expected = sum(len(s.table_variants) * len(s.seeds) for s in ladder.specs)
        unfinished = (
            f" ({len(runs)} of its {expected} runs are in); {resume_command(folder)} trains the rest"
            if len(runs) < expected
            else ""
        )
        raise UserError(f"{folder}: {str(e).rstrip('.')}{unfinished}.") from None
    held, held_notes = holdout_check(design, runs, _edge_rows(reps))
    ks, k_notes = metric_ks(design, runs, further)
    notes = _rung_notes(ladder, reps) + notes + k_notes + held_notes + _missing_note(sorted(missing))
    return LadderReport(ladder, design, table, notes, reps, runs.drop(columns=["failed"]), held, ks)


def _run_frame(ladder: Ladder, reps: list, columns: list[str]):
    """Every rung's runs in one frame, each with its rung, its row's name, reference and placebo mark."""
    import pandas as pd

    frames = []
    for i, (r, rep) in enumerate(zip(ladder.rungs, reps, strict=True)):
        runs = rep.runs.copy()
        runs["rung"], runs["rung_name"] = i, r.name
        plan = [rep.design.rows[k] for k in runs["row"]]
        runs["variant"] = [v.name for v in plan]
        runs["reference"] = ["" if v.reference is None else rep.design.rows[v.reference].name for v in plan]
        runs["placebo"] = [v.placebo for v in plan]
        frames.append(runs.reindex(columns=columns))
    return pd.concat(frames, ignore_index=True)


def _edge_rows(reps: list) -> tuple[int, ...]:
    """The rows whose best learning rate is at the grid's edge at any rung (with --lrs). They get no prediction."""
    out = set()
    for rep in reps:
        sweep = rep.design.sweep
        if sweep is not None and sweep.at is None:
            edges = (min(sweep.lrs), max(sweep.lrs))
            out |= {i for i, row in enumerate(rep.design.rows) if row.lr in edges}
    return tuple(sorted(out))


def _missing_note(missing: list[str]) -> list[str]:
    """A ladder whose plugin file is gone. Its scale table is read from the runs alone."""
    if not missing:
        return []
    return [
        f"Missing plugin: {'; '.join(missing)} made this ladder's runs and is gone; the table is read from the runs "
        "alone, and resuming the ladder needs the file back (or a copy given with --plugin)."
    ]


def _rung_notes(ladder: Ladder, reps: list) -> list[str]:
    """What a rung's own table warns of that the scale table inherits. Memorised training splits, unfinished
    or failed runs, and a best learning rate at the edge of its grid."""
    from ..verdict.table import failure_notes, unfinished_notes

    out = []
    for r, rep in zip(ladder.rungs, reps, strict=True):
        epochs = max((s.epochs for s in rep.summary if math.isfinite(s.epochs)), default=math.nan)
        if epochs > 1:
            out.append(
                f"Rung {r.name} trained {epochs:.2g} epochs of the training split: its rows may have memorised it "
                "(its own table says more: modern-gpt report on its folder)."
            )
        runs, seeds = rep.runs, rep.design.seeds_planned()  # its failed and missing runs, as its own table names them
        mine = failure_notes(runs) + unfinished_notes(rep.design, runs, rep.summary, seeds)
        out += [f"Rung {r.name}: {note}" for note in mine] + _edge_notes(r, rep.design)
    return out


def _edge_notes(r: Rung, design) -> list[str]:
    """With --lrs: the rows whose best learning rate at this rung is the grid's smallest or largest. A better one
    may lie outside it. A wrong rate at one rung reads as a gain that changes with scale."""
    if design.sweep is None or design.sweep.at is not None:
        return []
    low, high = min(design.sweep.lrs), max(design.sweep.lrs)
    edge = [f"{row.name} ({row.lr:g})" for row in design.rows if row.lr in (low, high)]
    if not edge:
        return []
    return [
        f"Rung {r.name}: the best learning rate of {', '.join(edge[:6])} is at the edge of the grid "
        f"{low:g}-{high:g}; a better one may lie outside it: widen --lrs."
    ]


def write_files(folder: Path, rep: LadderReport) -> None:
    """runs.csv (the scale table's runs) and summary.csv (the scale table) beside ladder.json."""
    import pandas as pd

    from ..core.files import atomic_path

    summary = pd.DataFrame([row.cells() for row in rep.rows])
    files = [("runs.csv", rep.runs), ("summary.csv", summary)]
    if rep.holdout:
        files.append(("holdout.csv", pd.DataFrame([asdict(r) for r in rep.holdout])))
    for name, frame in files:
        with atomic_path(Path(folder) / name) as tmp:
            frame.to_csv(tmp, index=False)
