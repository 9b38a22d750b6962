"""Planning an ablation: its rows (plans of variants, the placebo, --match-params), its seeds, and the Spec.

The Spec is everything that decides the numbers. meta.json stores it and --resume compares it. Nothing here
trains, reads data or starts a process. The command line asks this module what to run; running.py runs it.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..core.components import COMPONENTS, PLUGINS, SLOTS, component_problem
from ..core.config import (
    AUTO,
    POWER_SEEDS,
    ModelConfig,
    StatisticsOptions,
    kv_cache_bytes_per_token,
    non_embedding_params,
    param_counts,
)
from ..core.errors import UserError
from ..core.schema import short
from ..core.settings import ALL, Settings, from_dict, saved_settings_problem
from ..verdict.design import ALPHA, MAX_SEED, Design, DesignError, Row, check_statistics
from ..verdict.stats import Boundary

# Each plan, and the command that writes and resumes a folder of it: meta.json records the plan alone, so a folder
# read back takes its command from here (a duel or power plan given to ablate is resumed by duel or power).
PLANS = {
    **dict.fromkeys(("cumulative", "single", "leave-one-out", "custom"), "ablate"),
    **{"duel": "duel", "power": "power"},
}
DEFAULT_PLAN = {"ablate": "cumulative", "duel": "duel", "power": "power", "scale": "cumulative"}  # with no --plan
POWER_MIN_SEEDS = 3  # the fewest pairs whose paired sd power reports an mde from
MATCH_TOLERANCE = 0.01  # --match-params: non-embedding parameters within 1% of the first row's


@dataclass(frozen=True)
class Variant:
    name: str
    components: tuple[str, ...]
    reference: int | None  # the row this one is compared with; None for the first row
    mlp_hidden: int | None = None  # set by --match-params
    placebo: bool = False  # the first row again with only its weight-init stream changed: the noise floor
    lr: float | None = None  # with --lrs: this row's learning rate (one run row per variant and learning rate)

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "components": list(self.components),
            "reference": self.reference,
            "mlp_hidden": self.mlp_hidden,
            "placebo": self.placebo,
        }
        return out if self.lr is None else {**out, "lr": self.lr}

    def row(self) -> Row:
        """This run row as a table's Row. Its facts, params and the rest, come from the folder's meta.json."""
        return Row(self.name, self.reference, self.placebo, self.lr, self.components)

    @classmethod
    def from_dict(cls, d: dict) -> Variant:
        return cls(
            d["name"], tuple(d["components"]), d["reference"], d.get("mlp_hidden"), d.get("placebo", False), d.get("lr")
        )


# ---------------------------------------------------------------------------
# The request: what one ablate, duel, power or scale asks for
# ---------------------------------------------------------------------------
TABLE_CHOICES = ("trend_margin", "target_compute")  # they change the scale table, not the rungs: --resume takes them


@dataclass(frozen=True)
class LadderRequest:
    """scale's ladder choices, as typed; ladder.plan_ladder parses them. The rungs' sizes, tokens and learning
    rates are fixed when a ladder starts. A --resume may change the scale table's own (TABLE_CHOICES).
    None: nobody chose it, so its default holds. The other commands' requests leave every one None."""

    rungs: str | None = None  # a count, or widths separated by commas
    depths: str | None = None
    tokens_per_param: float | None = None
    rung_steps: str | None = None
    lr_rule: str | None = None
    trend_margin: float | None = None
    target_compute: float | None = None

    @property
    def rung_choices(self) -> list[str]:
        """The choices given that fix the rungs, not the table's, in the flags' order. --resume refuses them."""
        return [f.name for f in fields(self) if f.name not in TABLE_CHOICES and getattr(self, f.name) is not None]


@dataclass(frozen=True)
class Request:
    """One command's plan and statistical choices (and scale's ladder), built once (session.request_of).
    plan_spec plans from it and the Spec keeps it; --resume compares it with the folder's spec. None: nobody
    chose it (no flag, no config file's key). Then its default holds, and --resume does not compare it."""

    command: str  # ablate, duel, power or scale
    plan: str | None = None  # --plan; None: the command's own (DEFAULT_PLAN)
    components: str | None = None  # --components, as typed
    variants: str | None = None  # --variants (power: --variant), as typed
    lrs: str | None = None
    lr_sweep: str | None = None
    seeds: int | str | None = None  # a number, or auto
    seed_list: str | None = None  # --seed-list, as typed
    min_seeds: int | None = None
    max_seeds: int | None = None
    alpha: float | None = None
    margin: float | None = None
    placebo: bool | None = None
    match_params: bool = False  # off is no choice: --resume compares it only when on
    ladder: LadderRequest = LadderRequest()  # scale's

    @property
    def plan_name(self) -> str:
        """The plan it asks for: --plan's, else its command's own."""
        return self.plan or DEFAULT_PLAN[self.command]


# ---------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------
def parse_components(text: str | None) -> tuple[str, ...]:
    """A comma list of component names, checked and in the order given."""
    if text is None:
        return COMPONENTS
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    why = component_problem(names)
    if why:
        raise UserError(f"{why}.")
    if len(set(names)) != len(names):
        raise UserError(f"--components names a component twice: {text}.")
    if not names:
        raise UserError("--components is empty; give a comma list such as rmsnorm,rope.")
    return names


def parse_variant(name: str) -> tuple[str, ...]:
    """'classic', 'modern', or components joined by '+' (e.g. 'rmsnorm+rope'). They go on top of classic or
    modern if named first. 'classic+rope' is 'rope'; 'modern+relu2' is the six with relu2 in swiglu's slot."""
    name = name.strip()
    if name == "classic":
        return ()
    if name == "modern":
        return COMPONENTS
    parts = [p.strip() for p in name.split("+")]
    if parts[0] == "classic" and len(parts) > 1:  # classic+relu2: GPT-2 with these components, as relu2 alone
        parts = parts[1:]
    modern = parts[0] == "modern"  # modern+relu2: the six, a plugin taking its built-in's slot (swiglu's)
    parts = [*COMPONENTS, *parts[1:]] if modern else parts
    why = component_problem(parts)
    if why:
        raise UserError(f"{name!r} is not a variant: {why}; a variant is classic, modern, or components joined by +.")
    mine = [PLUGINS[c] for c in parts if c in PLUGINS]
    displaced = {SLOTS[c.slot] for c in mine} if modern else set()
    return (*(c for c in COMPONENTS if c in parts and c not in displaced), *(c for c in PLUGINS if c in parts))


def make_plan(plan: str, components: tuple[str, ...] = COMPONENTS, variants: str | None = None) -> list[Variant]:
    if plan not in PLANS:
        raise UserError(f"unknown plan {plan!r}; choose one of {', '.join(PLANS)}.")
    if plan not in ("custom", "power") and variants:
        raise UserError("--variants goes with --plan custom; the other plans make their own rows.")
    if plan == "power":  # one architecture; plan_spec adds its placebo
        name = variants or "classic"
        return [Variant(name, parse_variant(name), None)]
    if plan == "cumulative":
        rows = [Variant("classic", (), None)]
        for i, c in enumerate(components):
            rows.append(Variant(f"+{c}", components[: i + 1], i))
        return rows
    if plan == "single":
        return [Variant("classic", (), None)] + [Variant(c, (c,), 0) for c in components]
    if plan == "duel":  # the two complete architectures: GPT-2 against all modern (Llama, plus Qwen3's qk_norm)
        return [Variant("classic", (), None), Variant("modern", COMPONENTS, 0)]
    if plan == "leave-one-out":
        full = (*COMPONENTS, *(c for c in components if c in PLUGINS))  # the six, and the plugins named
        rows = [Variant("modern", full, None)]
        return rows + [Variant(f"-{c}", tuple(x for x in full if x != c), 0) for c in components]
    if not variants:
        raise UserError('--plan custom needs --variants, e.g. --variants "classic;rmsnorm+rope;modern".')
    names = [v.strip() for v in variants.split(";") if v.strip()]
    if not names:
        raise UserError(f'--variants {variants!r} names no rows; give e.g. --variants "classic;rmsnorm+rope;modern".')
    rows = [Variant(n, parse_variant(n), i - 1 if i else None) for i, n in enumerate(names)]
    _check_repeats(rows)
    return rows


def _check_repeats(rows: list[Variant]) -> None:
    """Two rows of one model would train it again, adding a zero row to the table's family of tests. Refused,
    naming both spellings. A deliberate repeat is what the placebo row is for."""
    seen: dict[tuple[str, ...], str] = {}
    for v in rows:
        if v.components in seen:
            first = seen[v.components]
            same = f"{first!r} twice" if first == v.name else f"{first!r} and {v.name!r}, the same model"
            raise UserError(
                f"--variants names {same} ({'+'.join(v.components) or 'classic'}); give each model once (the "
                "placebo row, on by default, is the first row trained again with another init)."
            )
        seen[v.components] = v.name


def add_placebo(rows: list[Variant]) -> list[Variant]:
    """The plan with its first row repeated right under it, only the weight-init stream changed. It is compared
    with the first row: its delta shows what initialisation alone does on this data and budget."""
    first = rows[0]
    placebo = replace(first, name=f"{first.name} (placebo)", reference=0, placebo=True)
    shifted = [replace(v, reference=v.reference + 1 if v.reference else v.reference) for v in rows[1:]]
    return [first, placebo, *shifted]


# ---------------------------------------------------------------------------
# Learning rates: --lrs trains every row at each of them
# ---------------------------------------------------------------------------
MAX_LRS = 20


def parse_lrs(lrs: str | None, sweep: str | None) -> list[float] | None:
    """--lrs 1e-3,3e-3,1e-2 or --lr-sweep LOW:HIGH:N, sorted. The sweep is N log-spaced, LOW and HIGH included."""
    if lrs is not None and sweep is not None:
        raise UserError("--lrs and --lr-sweep both choose the learning rates; give one of them.")
    if lrs is None and sweep is None:
        return None
    if sweep is not None:
        parts = sweep.split(":")
        try:
            low, high, n = float(parts[0]), float(parts[1]), int(parts[2])
            if len(parts) != 3:
                raise ValueError
        except (ValueError, IndexError):
            raise UserError(f"--lr-sweep must be LOW:HIGH:N, e.g. 1e-3:1e-2:3, got {sweep!r}.") from None
        if not (0 < low < high < math.inf and 2 <= n <= MAX_LRS):
            raise UserError(
                f"--lr-sweep needs 0 < LOW < HIGH and N from 2 to {MAX_LRS}, got {sweep!r}; for one learning rate give --lr."
            )
        # in log space (HIGH / LOW can overflow), rounded to 3 significant digits, as the table prints them
        step = (math.log(high) - math.log(low)) / (n - 1)
        values = [float(f"{math.exp(math.log(low) + i * step):.3g}") for i in range(n)]
        if len({f"{v:g}" for v in values}) < n:
            raise UserError(
                f"--lr-sweep {sweep} gives learning rates that are equal to 3 significant digits; widen the range or "
                "lower N."
            )
    else:
        try:
            values = [float(x) for x in lrs.split(",") if x.strip()]
        except ValueError:
            raise UserError(
                f"--lrs must be learning rates separated by commas, e.g. 1e-3,3e-3,1e-2, got {lrs!r}."
            ) from None
    if not values or len(values) > MAX_LRS or not all(0 < v < math.inf for v in values):
        given = f"--lrs {lrs!r}" if lrs is not None else f"--lr-sweep {sweep!r}"
        raise UserError(f"{given}: give 1 to {MAX_LRS} positive learning rates separated by commas, e.g. 1e-3,3e-3.")
    if len({f"{v:g}" for v in values}) != len(values):  # as the table and --at-lr print and read them
        raise UserError(f"--lrs names a learning rate twice (or two that print alike): {lrs}.")
    return sorted(values)


def expand_lrs(rows: list[Variant], lrs: list[float]) -> list[Variant]:
    """One run row per table row and learning rate, variant-major: row i at lrs[k] is run row i * K + k.
    Each is compared with its reference at the same rate; the table then picks each row's best."""
    k = len(lrs)
    return [
        replace(v, lr=lr, reference=None if v.reference is None else run_row(v.reference, j, k))
        for v in rows
        for j, lr in enumerate(lrs)
    ]


DEFAULT_SEEDS = StatisticsOptions.seeds  # the defaults are StatisticsOptions' (config.py): --seeds, then auto's
MAX_SEEDS = 10_000  # --seeds N: more runs than anyone waits for is a typing mistake
AUTO_MIN_SEEDS, AUTO_MAX_SEEDS = StatisticsOptions.min_seeds, StatisticsOptions.max_seeds
MAX_AUTO_SEEDS = 30  # --seeds auto: looks up to here keep the boundary's simulation to seconds and bounded memory


def parse_seeds(text: str | int | None) -> int | str | None:
    """--seeds: a whole number, or auto (seeds until every row is decided)."""
    if text is None or isinstance(text, int):
        return text
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise UserError(f"--seeds must be a whole number or auto, got {text!r}.") from None


def _seed_range(text: str) -> list[int]:
    """One entry of --seed-list: a seed, or a range a-b of seeds. Both ends are included, as a table's footnote
    prints the fresh seeds of a rerun."""
    low, dash, high = text.strip().partition("-")
    if not dash:
        return [int(low)]
    a, b = int(low), int(high)
    if not 0 <= a <= b or b - a >= MAX_SEEDS:
        raise ValueError(text)
    return list(range(a, b + 1))


def seed_list(seeds: int | None, seed_list_text: str | None) -> list[int]:
    if seeds is not None and seed_list_text is not None:
        raise UserError("--seeds and --seed-list both choose the seeds; give one of them.")
    if seed_list_text is not None:  # an empty list is a mistake, not the default
        try:
            out = [n for s in seed_list_text.split(",") if s.strip() for n in _seed_range(s)]
        except ValueError:
            raise UserError(
                f"--seed-list must be whole numbers (or ranges such as 5-28) separated by commas, got "
                f"{seed_list_text!r}."
            ) from None
        if not out or min(out) < 0 or max(out) > MAX_SEED or len(set(out)) != len(out):
            raise UserError(
                f"--seed-list needs distinct seeds from 0 to {MAX_SEED} (they are stored as 64-bit integers), "
                f"got {seed_list_text!r}."
            )
        return out
    n = DEFAULT_SEEDS if seeds is None else seeds
    if not 1 <= n <= MAX_SEEDS:
        raise UserError(f"--seeds must be between 1 and {MAX_SEEDS:,}, got {n}.")
    return list(range(n))


def match_params(variants: list[Variant], base: ModelConfig) -> list[Variant]:
    """Give every row after the first an MLP hidden width that brings its non-embedding
    parameter count within 1% of the first row's."""
    target = non_embedding_params(param_counts(base.with_components(variants[0].components)))
    out = [variants[0]]
    for v in variants[1:]:
        cfg = base.with_components(v.components)

        def count(hidden: int, cfg=cfg) -> int:
            return non_embedding_params(param_counts(replace(cfg, mlp_hidden=hidden)))

        slope = count(2) - count(1)  # the count is linear in the hidden width
        hidden = max(1, round((target - count(1)) / slope) + 1)
        if abs(count(hidden) - target) > MATCH_TOLERANCE * target:
            raise UserError(
                f"--match-params cannot bring {v.name} within 1% of {variants[0].name}'s {target:,} non-embedding "
                f"parameters by its MLP width alone (closest: {count(hidden):,} at width {hidden})."
            )
        out.append(replace(v, mlp_hidden=hidden))
    return out


def variant_config(base: ModelConfig, v: Variant) -> ModelConfig:
    cfg = base.with_components(v.components)
    return replace(cfg, mlp_hidden=v.mlp_hidden) if v.mlp_hidden is not None else cfg


# ---------------------------------------------------------------------------
# The specification: everything that decides the numbers. --resume compares it.
# ---------------------------------------------------------------------------
class SpecError(UserError):
    """A Spec that cannot be. Its message names the key (spec.alpha, spec.variants[3].reference, ...). So a
    damaged meta.json is one sentence; results.check_meta says which file."""


@dataclass
class Spec:
    settings: Settings
    plan: str
    variants: list[Variant]  # the run rows: one per table row, or with --lrs one per table row and lr (run_row)
    seeds: list[int]
    match_params: bool = False
    data_key: str = ""  # the corpus's content hash and tokenizer settings
    data_name: str = ""
    alpha: float = ALPHA  # the family-wise error rate of the table's verdicts
    margin: float | None = None  # nats: with it, `same` when an equivalence test shows |delta| < margin
    min_seeds: int | None = None  # --seeds auto: the first look; the seeds list then runs to --max-seeds
    lrs: list[float] | None = None  # --lrs: every row at each; variants then holds one run row per row and lr
    # The request it was planned from (None: read from a folder, whose meta.json holds the numbers alone)
    request: Request | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        why = self.problem()
        if why:
            raise SpecError(why)

    def to_dict(self) -> dict:
        out = {
            "settings": self.settings.to_dict(),
            "plan": self.plan,
            "variants": [v.to_dict() for v in self.variants],
            "seeds": self.seeds,
            "match_params": self.match_params,
            "data_key": self.data_key,
            "data_name": self.data_name,
            "alpha": self.alpha,
            "margin": self.margin,
            "min_seeds": self.min_seeds,
        }
        return out if self.lrs is None else {**out, "lrs": self.lrs}

    @classmethod
    def from_dict(cls, d: dict) -> Spec:
        """meta.json's spec, checked against results.META_SCHEMA first. A key an older folder lacks takes its default.
        Its settings must be complete: a missing one would silently take its default, and runs be redone."""
        found = saved_settings_problem(d["settings"])
        missing = [k for k in ALL if k.split(".")[1] not in d["settings"][k.split(".")[0]] and k not in OPTIONAL]
        if found or missing:
            raise SpecError(
                f"spec.settings: {found} (read from meta.json)" if found else f"spec.settings.{missing[0]} is missing"
            )
        return cls(
            from_dict(d["settings"]),
            d["plan"],
            [Variant.from_dict(v) for v in d["variants"]],
            list(d["seeds"]),
            d["match_params"],
            d["data_key"],
            d["data_name"],
            d.get("alpha", ALPHA),
            d.get("margin"),
            d.get("min_seeds"),
            d.get("lrs"),
        )

    @staticmethod
    def command_in(meta: dict) -> str:
        """The command of the plan a meta.json names, read even when the rest is damaged (for advice). ablate's
        when it names none or an unknown one."""
        plan = (
            meta.get("spec", {}).get("plan") if isinstance(meta, dict) and isinstance(meta.get("spec"), dict) else None
        )
        return PLANS.get(plan, "ablate") if isinstance(plan, str) else "ablate"

    # -- the table it plans: its Design ---------------------------------------------------------------------
    @property
    def design(self) -> Design:
        """The table this spec plans, as the verdict engine reads it: rows, seeds, learning-rate grid, statistics
        settings. The rows lack the facts a folder's meta.json adds (ablation/report.py)."""
        rows = tuple(v.row() for v in self.variants)
        return Design(
            rows,
            tuple(self.seeds),
            self.alpha,
            self.margin,
            self.min_seeds,
            self.lrs,
            lr=self.settings.train.lr,
            source=self.data_name,
            prefix="spec.",
            rows_key="variants",
        )

    @property
    def table_variants(self) -> list[Variant]:
        """The table's rows: each table row's first run row. Run row b * K + j is table row b at lrs[j]."""
        k = len(self.lrs) if self.lrs else 1
        return self.variants[::k]

    @property
    def sequential(self) -> bool:
        return self.min_seeds is not None

    def boundary(self) -> Boundary | None:
        """--seeds auto's thresholds; None for a fixed number of seeds."""
        return self.design.boundary()

    # -- the folder ----------------------------------------------------------------------------------------
    @property
    def command(self) -> str:
        """The command that writes (and resumes) a results folder of this plan (PLANS)."""
        return PLANS[self.plan]

    def resume_command(self, folder) -> str:
        """What finishes a folder of this spec, as a user types it."""
        return resume_command(self.command, folder)

    # -- checks ----------------------------------------------------------------------------------------------
    def problem(self) -> str | None:
        """Why these fields are not an ablation's, naming meta.json's key; None when they are."""
        if self.plan not in PLANS:
            return f"spec.plan {self.plan!r} is not one of {', '.join(PLANS)}"
        if not self.variants:
            return "spec.variants is empty"
        try:
            self.design  # noqa: B018 (a Design checks itself as it is made)
        except DesignError as e:
            return str(e)
        unknown = next(
            ((i, why) for i, v in enumerate(self.variants) if (why := component_problem(v.components))), None
        )
        if unknown:
            return f"spec.variants[{unknown[0]}]: {unknown[1]}"
        return self._plan_problem()

    def _plan_problem(self) -> str | None:
        """Why a plan's name and its rows disagree, or None. report reads the name for a duel or power folder."""
        names = [v.name for v in self.variants if not v.placebo]
        if self.plan == "duel" and sorted(set(names)) != ["classic", "modern"]:
            return f"spec.plan is duel, but its rows are {names[:4]}, not classic and modern"
        if self.plan == "power" and (len(self.variants) != 2 or not self.variants[1].placebo):
            return f"spec.plan is power, but its {len(self.variants)} rows are not one architecture and its placebo"
        return None


def run_row(row: int, j: int, k: int) -> int:
    """The layout of an ablation over K learning rates, variant-major. Table row `row` at lrs[j] is run row
    row * K + j. Spec.run_row and Spec.place read it; expand_lrs writes it."""
    return row * k + j


LADDER_FILE = "ladder.json"  # a ladder's folder (ablation/ladder.py) holds it; each rung is a folder under it


def resume_command(command: str, folder) -> str:
    """The command line that finishes a folder of this command's, quoted as a shell reads it. A rung of a ladder is
    finished by the ladder's own resume, which also writes the scale table again."""
    parent = Path(folder).parent
    if (parent / LADDER_FILE).is_file():
        return f"modern-gpt scale --resume {shlex.quote(str(parent))}"
    return f"modern-gpt {command} --resume {shlex.quote(str(folder))}"


def variant_info(spec: Spec, vocab_size: int) -> list[dict]:
    """Per row: the facts that do not need a run (params, MLP width, KV-cache bytes)."""
    base = replace(spec.settings.model, vocab_size=vocab_size)
    out = []
    for v in spec.variants:
        cfg = variant_config(base, v)
        out.append(
            {
                **v.to_dict(),
                "params": param_counts(cfg)["total"],
                "body_params": non_embedding_params(param_counts(cfg)),
                "hidden": cfg.mlp_width,
                "kv_cache_bytes_per_token": kv_cache_bytes_per_token(cfg),
            }
        )
    return out


def plan_spec(settings: Settings, request: Request) -> Spec:
    """The specification of a new ablation from the command's request (None: the default)."""
    r, plan = request, request.plan_name
    settings, rates = _learning_rates(settings, plan, r.lrs, r.lr_sweep)
    alpha = ALPHA if r.alpha is None else r.alpha
    check_statistics(alpha, r.margin)
    rows = _rows(settings, plan, r.components, r.variants, r.match_params, r.placebo, rates)
    seeds = parse_seeds(POWER_SEEDS if plan == "power" and r.seeds is None else r.seeds)
    kept = dict(alpha=alpha, margin=r.margin, lrs=rates, request=request)
    if seeds == AUTO:
        low, high = _auto_seeds(r.seed_list, r.min_seeds, r.max_seeds)
        spec = Spec(settings, plan, rows, list(range(high)), r.match_params, min_seeds=low, **kept)
        spec.boundary()  # the boundary's simulation (a second or two) runs before any folder is made
        return spec
    if r.min_seeds is not None or r.max_seeds is not None:
        raise UserError("--min-seeds and --max-seeds go with --seeds auto.")
    chosen = seed_list(seeds, r.seed_list)
    if plan == "power" and len(chosen) < POWER_MIN_SEEDS:
        raise UserError(
            f"power needs at least {POWER_MIN_SEEDS} seeds to measure a paired sd ({POWER_SEEDS} advised), got "
            f"{len(chosen)}."
        )
    return Spec(settings, plan, rows, chosen, r.match_params, **kept)


def _learning_rates(
    settings: Settings, plan: str, lrs: str | None, lr_sweep: str | None
) -> tuple[Settings, list[float] | None]:
    """--lrs or --lr-sweep: two or more learning rates. One is a plain ablation at it (the settings' lr)."""
    rates = parse_lrs(lrs, lr_sweep)
    if rates is not None and "train.lr" in settings.typed:  # else one of them would be silently dropped
        raise UserError(
            f"--lr and {'--lrs' if lrs is not None else '--lr-sweep'} both set the learning rate; give one of them."
        )
    if rates is not None and plan == "power":
        raise UserError("power measures seed noise at one learning rate; give --lr, not --lrs.")
    if rates is not None and len(rates) == 1:
        return replace(settings, train=replace(settings.train, lr=rates[0])), None
    return settings, rates


def _rows(
    settings: Settings,
    plan: str,
    components: str | None,
    variants: str | None,
    match: bool,
    placebo: bool | None,
    rates: list[float] | None,
) -> list[Variant]:
    """The run rows: the plan's rows, matched in size, with the placebo, one per learning rate. The placebo is
    on unless --no-placebo, and always for power."""
    if plan == "custom" and components is not None:
        raise UserError("--components does not go with --plan custom, whose rows --variants names; leave one out.")
    rows = make_plan(plan, parse_components(components), variants)
    check_read(settings, [v.components for v in rows], plan=True)
    if match:
        rows = match_params(rows, settings.model)
    if placebo is None or placebo or plan == "power":
        rows = add_placebo(rows)
    # one run row per row and learning rate; the table rows, and so the tested rows, stay the same
    return expand_lrs(rows, rates) if rates else rows


def _auto_seeds(seed_list_text: str | None, min_seeds: int | None, max_seeds: int | None) -> tuple[int, int]:
    """--seeds auto's first look and last seed count, checked."""
    if seed_list_text is not None:
        raise UserError("--seeds auto chooses seeds 0, 1, 2, ... itself; leave out --seed-list.")
    low, high = AUTO_MIN_SEEDS if min_seeds is None else min_seeds, AUTO_MAX_SEEDS if max_seeds is None else max_seeds
    if low < 2:
        raise UserError(f"--min-seeds must be at least 2 (a paired test needs two pairs), got {low}.")
    if high > MAX_AUTO_SEEDS:
        raise UserError(
            f"--max-seeds must be at most {MAX_AUTO_SEEDS} (its boundary is calibrated by simulation), got "
            f"{high}; for more seeds give --seeds N."
        )
    if high < low:
        raise UserError(f"--max-seeds ({high}) must be at least --min-seeds ({low}).")
    return low, high


# Settings that one component alone reads: given while no model has it, they would change nothing, silently.
READ_BY = {"model.kv_heads": "gqa", "model.rope_base": "rope", "model.multiple_of": "swiglu"}


def check_read(settings: Settings, models: list[tuple[str, ...]], plan: bool = False) -> None:
    """Refuse a setting given, by a flag or the config file, that none of these models reads. models: the
    components of each (plan: a plan's rows). Such are --kv-heads without gqa, --rope-base without rope, --multiple-of
    without swiglu or with --mlp-hidden, which overrides it. Ignored, it would look like a choice that was made."""
    have = {c for components in models for c in components}
    for key, component in READ_BY.items():
        if key not in settings.given:
            continue
        given = ALL[key].flags[0] if key in settings.typed else f"{key.split('.')[1]} (in the config file)"
        if component not in have:
            why = (
                f"and no row of this plan has it; add a row with {component}"
                if plan
                else "which is off; add --" + component.replace("_", "-")
            )
            raise UserError(f"{given} is read by {component} alone, {why}, or leave out {given.split()[0]}.")
        if key == "model.multiple_of" and settings.model.mlp_hidden is not None:
            raise UserError(f"{given} rounds SwiGLU's width, which --mlp-hidden sets outright; give one of them.")
    _check_windows(settings)
    # A typed --vocab-size with char, byte or a tokenizer file (whose vocabularies are fixed) would be ignored. A
    # config file's vocab_size is not refused: --tokenizer char over configs/mini.toml is a choice, not a slip.
    if "data.vocab_size" in settings.typed and settings.data.tokenizer != "bpe" and not _token_data(settings):
        raise UserError(
            f"--vocab-size sizes the bpe tokenizer trained here alone, and the tokenizer is {settings.data.tokenizer}; "
            "add --tokenizer bpe, or leave out --vocab-size."
        )


OPTIONAL = ("data.val_data", "data.eval_data")  # saved only when set (Settings.to_dict): a folder without it has none


def _token_data(settings: Settings) -> bool:
    """Token files with no tokenizer file: --vocab-size declares their vocabulary."""
    from ..data.tokens import holds_tokens

    return settings.data.tokenizer_file is None and bool(settings.data.path) and holds_tokens(settings.data.path)


def _check_windows(settings: Settings) -> None:
    """--eval-tokens below one context window would silently be rounded up to one window. The final losses
    would average more tokens than were asked for."""
    asked, context = settings.train.eval_tokens, settings.model.context
    if asked < context:
        given = "--eval-tokens" if "train.eval_tokens" in settings.typed else "eval_tokens (in the config file)"
        raise UserError(
            f"{given} {asked} is below one window of --context {context} tokens, the fewest a loss is measured on; "
            f"give {context} or more."
        )


def resume_differences(stored: Spec, settings: Settings, request: Request) -> list[str]:
    """What the flags given with --resume ask for that the folder's spec does not hold: 'what: stored -> given'.
    Only what was given is compared. A default nobody typed is no difference: the request's None, match_params off."""
    out = []

    def differ(what: str, a, b) -> None:
        if a != b:
            out.append(f"{what}: {short(a, 60)} -> {short(b, 60)}")

    now, held = settings.to_dict(), stored.settings.to_dict()
    for key in settings.given:
        section, name = key.split(".")
        if key == "train.compile" and now["train"]["compile"] == "auto":  # the folder's choice is auto's
            continue
        differ(f"settings.{key}", held[section].get(name), now[section][name])
    plan = request.plan or stored.plan
    differ("plan", stored.plan, plan)
    if any(c is not None for c in (request.plan, request.components, request.variants)):
        asked = make_plan(plan, parse_components(request.components), request.variants)
        rows = [v for v in stored.table_variants if not v.placebo]  # the table's rows, without the placebo
        differ("rows", [v.name for v in rows], [v.name for v in asked])
    if request.placebo is not None:
        differ("placebo", any(v.placebo for v in stored.variants), request.placebo)
    if request.match_params:
        differ("match_params", stored.match_params, True)
    if request.lrs is not None or request.lr_sweep is not None:
        rates = parse_lrs(request.lrs, request.lr_sweep)
        if len(rates) == 1:  # a plain ablation at it
            differ("settings.train.lr", held["train"]["lr"], rates[0])
        differ("lrs", stored.lrs, None if len(rates) == 1 else rates)
    for name in ("alpha", "margin"):
        if getattr(request, name) is not None:
            differ(name, getattr(stored, name), getattr(request, name))
    return out


def seeds_problem(stored: Spec, request: Request) -> str | None:
    """Why the seeds given with --resume are not the folder's, or None when none are given or they agree. Seeds
    are fixed when a folder starts. --resume cannot add any, as its runs are paired seed by seed."""
    seeds, text = parse_seeds(request.seeds), request.seed_list
    low, high = request.min_seeds, request.max_seeds
    if seeds is None and text is None and low is None and high is None:
        return None
    have, auto = stored.seeds, stored.min_seeds
    if seeds == AUTO or low is not None or high is not None:
        asked = ("auto", AUTO_MIN_SEEDS if low is None else low, AUTO_MAX_SEEDS if high is None else high)
        differs = auto is None or asked != ("auto", auto, len(have))
    else:
        asked = seed_list(seeds, text)
        differs = auto is not None or asked != have
    if not differs:
        return None
    held = f"--seeds auto from {auto} to {len(have)}" if auto is not None else f"seeds {short(have, 60)}"
    return (
        f"--resume cannot change or add seeds: the folder was made with {held}, fixed when it started; resume "
        "it without seed flags, or start a new folder with the seeds you want"
    )


def check_resume(folder, stored: Spec, settings: Settings, request: Request) -> None:
    """Flags given with --resume must agree with the folder (stored: its spec). Else one sentence names what
    differs among what was given, or says that seeds cannot be added."""
    why = seeds_problem(stored, request)
    if why:
        raise UserError(f"{folder}: {why}.")
    diffs = resume_differences(stored, settings, request)
    if diffs:
        raise UserError(
            f"{folder} was made with other settings ({'; '.join(diffs[:4])}); resume with the same settings, "
            f"or with --resume {shlex.quote(str(folder))} alone, which reuses them."
        )
