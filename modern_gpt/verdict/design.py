"""A table's design, and the one definition of its summary rows.

A Design is what the verdict engine reads besides the runs. It holds the rows, each with the row it is
compared with and the placebo marked. It holds the learning-rate grid, the seeds, alpha, --margin and the
--seeds auto boundary. And it holds what the table's footnotes say of where the runs came from.

An ablation builds its Design from its Spec and its folder (ablation/report.py). judge builds one from a
file of anyone's runs. Nothing here knows how a run was trained. A Design checks itself when it is made.

SummaryRow is the one list of the summary's columns. summary.csv, the JSON document, judge's table, the
trackers and the rich table all read its fields. A new statistic is one field here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from ..core.config import StatisticsOptions
from ..core.errors import UserError
from ..core.schema import short
from .stats import FIXED, Boundary, boundary

ALPHA = StatisticsOptions.alpha  # the default family-wise error rate of a table's verdicts (--alpha)
MAX_SEED = 2**63 - 1  # a seed must fit the 64-bit integer columns of runs.csv (torch takes any below 2**64)
MIN_ALPHA = 1e-10  # a row's level, alpha over rows and looks, keeps its t quantile to about 1e-5
NAN = math.nan


@dataclass(frozen=True)
class Row:
    """One run row: its name, and the run row it is compared with (None: none). Whether it is the placebo: the
    first row again, with only its weight init changed. Its learning rate on a grid, and its facts (NaN: unknown)."""

    name: str
    reference: int | None = None
    placebo: bool = False
    lr: float | None = None  # on a learning-rate grid: this run row's
    components: tuple[str, ...] = ()
    params: float = NAN
    body_params: float = NAN  # non-embedding: what --match-params matches and scaling laws count
    mlp_width: float = NAN
    kv_cache_bytes_per_token: float = NAN
    stable: float = NAN  # a table row over a grid (lr_view): the learning rates at which every seed trained stably
    lrs: int = 1  # a table row over a grid: how many learning rates it was trained at


@dataclass(frozen=True, eq=False)
class Sweep:
    """A table over a learning-rate grid, as lr_view made it: the grid, --at-lr and every run it chose from."""

    lrs: tuple[float, ...]
    at: float | None
    runs: int  # the runs finished, at every learning rate
    run_rows: int
    all: object  # the runs frame of every learning rate
    design: Design  # the design of every run row, before the view


@dataclass(frozen=True, eq=False)
class Design:
    """What a table compares and how it decides; see the module's docstring. rows are run rows. With a grid of K
    learning rates, table row b at lrs[j] is run row b * K + j. It is compared with its reference at that rate."""

    rows: tuple[Row, ...]
    seeds: tuple[int, ...]
    alpha: float = ALPHA
    margin: float | None = None  # with it, `same` when an equivalence test shows |delta| < margin
    min_seeds: int | None = None  # --seeds auto: the first look; seeds then runs to --max-seeds
    lrs: tuple[float, ...] | None = None
    lr: float = NAN  # the learning rate of a row that has none of its own (the summary's lr column)
    any_reference: bool = False  # judge: a row may be compared with any other row, or none; seeds are labels
    looks: dict | None = None  # --seeds auto: the looks recorded so far (meta.json's sequential)
    source: str = ""  # where the runs come from: the corpus's name, or judge's file
    resume: str = ""  # the command that finishes the runs not yet finished
    data_note: str | None = None  # what the table says when a run's tokenizer lost characters
    sweep: Sweep | None = None  # a view of a grid (lr_view): each table row at its chosen learning rate
    prefix: str = field(default="", repr=False)  # how problem() names a key: "spec." for meta.json's
    rows_key: str = field(default="rows", repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if self.lrs is not None:
            object.__setattr__(self, "lrs", tuple(self.lrs))
        why = self.problem()
        if why:
            raise DesignError(why)

    # -- the layout of run rows over a learning-rate grid ------------------------------------------------
    @property
    def runs_per_row(self) -> int:
        """K: the run rows of each table row, one per learning rate. 1 without a grid."""
        return len(self.lrs) if self.lrs else 1

    def run_row(self, row: int, j: int = 0) -> int:
        """The run row of table row `row` at its j-th learning rate."""
        return row * self.runs_per_row + j

    def place(self, run: int) -> tuple[int, int]:
        """The table row and learning-rate index of a run row: run_row's inverse."""
        return divmod(run, self.runs_per_row)

    @property
    def table_rows(self) -> list[Row]:
        """The table's rows: each table row's first run row."""
        return [self.rows[self.run_row(b)] for b in range(len(self.rows) // self.runs_per_row)]

    # -- what the verdicts read ----------------------------------------------------------------------------
    @property
    def sequential(self) -> bool:
        return self.min_seeds is not None

    @property
    def tested_rows(self) -> int:
        """The component rows with a reference: the family whose false positives the rule controls. The placebo
        is tested alone."""
        return sum(r.reference is not None and not r.placebo for r in self.table_rows)

    def family_boundary(self, placebo: bool = False) -> Boundary:
        """The thresholds a table is judged by: alpha / r for a fixed number of seeds, or the --seeds auto
        boundary. The placebo is a family of one. Recomputed from the design, never read from a file."""
        rows = 1 if placebo else max(1, self.tested_rows)
        if not self.sequential:
            return Boundary(self.alpha, (len(self.seeds),), tuple((self.alpha / r,) for r in range(1, rows + 1)), FIXED)
        return boundary(self.alpha, rows, self.min_seeds, len(self.seeds))

    def boundary(self) -> Boundary | None:
        """--seeds auto's thresholds; None for a fixed number of seeds."""
        return self.family_boundary() if self.sequential else None

    def seeds_planned(self) -> int:
        """The seeds the table is about: all of them, or with --seeds auto those up to the last look."""
        if not self.sequential:
            return len(self.seeds)
        seq = self.looks
        return seq["looks"][-1]["seeds"] if seq and seq["looks"] else self.min_seeds

    # -- checks ------------------------------------------------------------------------------------------------
    def problem(self) -> str | None:
        """Why these fields are not a table's, naming the key; None when they are. With prefix "spec.", the key
        is meta.json's."""
        if not self.rows:
            return f"{self.prefix}{self.rows_key} is empty"
        return (
            self._lrs_problem()
            or self._rows_problem()
            or self._seeds_problem()
            or statistics_problem(self.alpha, self.margin, lambda key: f"{self.prefix}{key}")
        )

    def _key(self, i: int) -> str:
        return f"{self.prefix}{self.rows_key}[{i}]"

    def _lrs_problem(self) -> str | None:
        """On a grid: two or more distinct positive learning rates. Each table row's run rows are at them, in order."""
        lrs, rows = self.lrs, self.rows
        if self.sweep is not None:  # a view of a grid: each table row at the learning rate chosen for it
            return None
        if lrs is None:
            bad = next((i for i, r in enumerate(rows) if r.lr is not None), None)
            return None if bad is None else f"{self._key(bad)} has an lr, but {self.prefix}lrs is missing"
        if len(lrs) < 2 or not all(0 < x < math.inf for x in lrs) or len(set(lrs)) < len(lrs):
            return f"{self.prefix}lrs must be two or more distinct positive learning rates, got {list(lrs)}"
        if len(rows) % len(lrs):
            return (
                f"{self.prefix}{self.rows_key} has {len(rows)} rows, not one per learning rate of {self.prefix}lrs "
                "for each row"
            )
        for i, r in enumerate(rows):
            j = self.place(i)[1]
            if r.lr != lrs[j]:
                return f"{self._key(i)}.lr is {r.lr!r}, not {self.prefix}lrs[{j}] {lrs[j]!r}"
        return None

    def _rows_problem(self) -> str | None:
        """Each run row is compared with a row above it at its own learning rate; the first table row with none.
        With any_reference (judge), a reference may be any other row, or none."""
        for i, r in enumerate(self.rows):
            ref, (row, j) = r.reference, self.place(i)
            if self.any_reference:
                wrong = ref is not None and not (0 <= ref < len(self.rows) and ref != i)
            else:
                wrong = (ref is None) != (row == 0) or (
                    ref is not None and not (0 <= ref < i and self.place(ref)[1] == j)
                )
            if wrong:
                return f"{self._key(i)}.reference {ref!r} is not a row above it"
        return None

    def _seeds_problem(self) -> str | None:
        seeds, labels = self.seeds, self.any_reference  # a judged file's seeds are only labels that pair runs
        if not seeds or len(set(seeds)) < len(seeds) or (not labels and min(seeds) < 0):
            return f"{self.prefix}seeds must be distinct seeds of 0 or more, got {short(list(seeds), 60)}"
        if not labels and max(seeds) > MAX_SEED:
            return f"{self.prefix}seeds holds {max(seeds)}, above the largest seed {MAX_SEED}"
        if self.min_seeds is not None and not 2 <= self.min_seeds <= len(seeds):
            return f"{self.prefix}min_seeds must be between 2 and the {len(seeds)} seeds, got {self.min_seeds!r}"
        return None


class DesignError(UserError):
    """A Design that cannot be. Its message names the key (spec.alpha, spec.variants[3].reference, ...). So a
    damaged meta.json is one sentence; results.check_meta says which file."""


def statistics_problem(alpha, margin, name=lambda key: f"--{key}") -> str | None:
    """Why alpha or margin cannot be a table's; None when both can. name(key) names them: a flag, or meta.json's
    spec.alpha."""
    if not 0 < alpha < 1:
        return f"{name('alpha')} must be between 0 and 1, got {alpha!r}"
    if alpha < MIN_ALPHA:  # a row's level alpha/rows/looks near 1e-16 is 1 - q == 0 for the t quantile
        return (
            f"{name('alpha')} {alpha:g} is below {MIN_ALPHA:g}, where the t quantiles lose their precision; give "
            f"{MIN_ALPHA:g} or more"
        )
    if margin is not None and not (0 < margin < math.inf):
        return f"{name('margin')} must be a positive number of nats, got {margin!r}"
    return None


def check_statistics(alpha: float, margin: float | None) -> None:
    """--alpha and --margin, refused in one sentence."""
    why = statistics_problem(alpha, margin)
    if why:
        raise UserError(f"{why}.")


# ---------------------------------------------------------------------------
# The summary row: one per table row, every column of summary.csv, the JSON document, judge and the trackers
# ---------------------------------------------------------------------------
def column(
    default=NAN,
    *,
    help: str,
    verdict: bool = False,
    csv: bool = True,
    training: bool = False,
    tracked: bool = False,
    judge: str | None = None,
    judge_at: int | None = None,
    header: str | None = None,
    fmt: str | None = None,
    table_at: int | None = None,
    when: str | None = None,
):
    """A summary column with its one-line help, and where it goes.

    verdict: filled by the verdict step, after the paired test. The JSON document lists these last.
    csv: a column of summary.csv.
    training: it describes a training run, so judge (anyone's runs) has none.
    tracked: the trackers log it with each row's verdict.
    judge: judge's name for it, where it differs.
    judge_at: its place in judge's table. A column without one comes after those with one.
    header, fmt and table_at: its column in the terminal and Markdown tables, its format there and its place.
    fmt is a format spec, or one of render.py's named cells.
    when: shown only in a table with --match-params ("match") or over a learning-rate grid ("sweep").
    """
    meta = dict(
        help=help,
        verdict=verdict,
        csv=csv,
        training=training,
        tracked=tracked,
        judge=judge,
        judge_at=judge_at,
        header=header,
        fmt=fmt,
        table_at=table_at,
        when=when,
    )
    return field(default=default, metadata=meta)


@dataclass
class SummaryRow:
    """One table row. Field order is summary.csv's column order; see column() for the rest."""

    variant: str = column("", help="the row's name", header="variant", fmt="variant", judge_at=0, table_at=0)
    params: float = column(help="parameters", training=True, header="params", fmt="params", table_at=1)
    train_loss: float = column(
        help="mean final train loss over the seeds", training=True, header="train", fmt=".4f", table_at=5
    )
    val_loss: float = column(
        help="mean final val loss over the seeds", judge="mean", header="val", fmt="val", judge_at=3, table_at=6
    )
    delta_val: float = column(
        help="mean paired Δ val loss against the reference",
        judge="delta",
        tracked=True,
        header="Δ val",
        fmt="+.4f",
        judge_at=4,
        table_at=7,
    )
    spread: float = column(
        help="sd of the val loss over the seeds", header="spread", fmt=".4f", judge_at=14, table_at=8
    )
    ci_low: float = column(
        help="the paired Δ's 95% confidence interval, low end",
        tracked=True,
        header="95% CI",
        fmt="ci",
        judge_at=5,
        table_at=9,
    )
    ci_high: float = column(help="the paired Δ's 95% confidence interval, high end", tracked=True, judge_at=6)
    verdict: str = column(
        "", help="better, worse, same or inconclusive", header="verdict", fmt="verdict", judge_at=9, table_at=11
    )
    secs: float = column(help="mean wall seconds per run", training=True, header="secs", fmt=".1f", table_at=14)
    val_bpc: float = column(help="mean val bits per character", training=True)
    tokens_per_s: float = column(help="mean training tokens per second", training=True)
    flops: float = column(
        help="mean training FLOPs per run (the matmuls of every step, attention included)", training=True
    )
    mfu: float = column(help="mean model FLOPs utilisation: FLOP/s over the peak recorded in each run", training=True)
    kv_cache_bytes_per_token: float = column(help="KV-cache bytes per token at bf16", training=True)
    pairs: int = column(0, help="seeds at which the row and its reference both trained", judge_at=12)
    sd: float = column(help="sd of the paired Δs", judge_at=13)
    p: float = column(help="the paired t-test's p", judge_at=7)
    p_adj: float = column(
        help="p, adjusted over the table's component rows by the table's rule (its verdict footnote): below alpha exactly when the "
        "row is better or worse; a --seeds auto table's is its p on alpha's scale at the boundary it crossed",
        verdict=True,
        tracked=True,
        header="p_adj",
        fmt="p",
        judge_at=8,
        table_at=10,
    )
    p_same: float = column(help="the equivalence test's p (--margin)", judge_at=15)
    p_same_adj: float = column(help="p_same, adjusted with p_adj (below alpha: same)", verdict=True, judge_at=16)
    mde: float = column(
        help="the smallest |Δ| these pairs detect with 80% power",
        verdict=True,
        tracked=True,
        header="mde",
        fmt=".4f",
        judge_at=10,
        table_at=12,
    )
    seeds_needed: float = column(
        help="the pairs that give an inconclusive row 80% power",
        verdict=True,
        header="need",
        fmt="need",
        judge_at=11,
        table_at=13,
    )
    row: int | None = column(None, help="the table row's index", training=True)
    components: str = column("", help="the components on, joined by +", training=True)
    reference: float = column(help="the table row it is compared with, by name (empty: none)", judge_at=1)
    mlp_width: float = column(
        help="the MLP's hidden width", training=True, table_at=2, when="match", header="mlp", fmt="mlp"
    )
    seeds: int = column(0, help="the runs that trained", judge_at=17)
    diverged: int = column(0, help="the runs that diverged or failed", judge="failed", judge_at=18)
    errored: int = column(0, help="of those, the runs that failed with an error (killed, out of memory, a plugin's)")
    epochs: float = column(help="mean epochs of the training split", training=True)
    lr: float = column(help="the learning rate", training=True, table_at=3, when="sweep", header="lr", fmt="g")
    stable: float = column(
        help="over a grid: learning rates at which every seed trained stably",
        training=True,
        table_at=4,
        when="sweep",
        header="stable",
        fmt="stable",
    )
    lrs: int = column(1, help="over a grid: the learning rates tried", training=True)
    placebo: bool = column(
        False, help="the placebo row: the first row with only its weight init changed", csv=False, judge_at=2
    )

    def to_dict(self) -> dict:
        """The row as the JSON document lists it: its own columns, the placebo mark, then the verdict step's."""
        own = [f.name for f in fields(self) if not f.metadata["verdict"] and f.name != "placebo"]
        late = [f.name for f in fields(self) if f.metadata["verdict"]]
        return {name: getattr(self, name) for name in (*own, "placebo", *late)}

    def with_(self, **changes) -> SummaryRow:
        return replace(self, **changes)


SUMMARY_COLUMNS = [f.name for f in fields(SummaryRow) if f.metadata["csv"]]  # summary.csv's columns, in order
TRACKED = tuple(f.name for f in fields(SummaryRow) if f.metadata["tracked"])  # each row's numbers a tracker logs


def judge_columns() -> list[tuple[str, str]]:
    """judge's columns in its order: (the field, judge's name for it). A training column is not one."""
    mine = [f for f in fields(SummaryRow) if not f.metadata["training"]]
    placed = sorted((f for f in mine if f.metadata["judge_at"] is not None), key=lambda f: f.metadata["judge_at"])
    later = [f for f in mine if f.metadata["judge_at"] is None]
    return [(f.name, f.metadata["judge"] or f.name) for f in (*placed, *later)]


def summary_frame(rows: list[SummaryRow]):
    """The summary rows as a DataFrame of summary.csv's columns. The file, the CSV printed, and the API's and
    the trackers' tables are this one frame."""
    import pandas as pd

    names = [r.variant for r in rows]
    cells = [[_cell(r, c, names) for c in SUMMARY_COLUMNS] for r in rows]
    return pd.DataFrame(cells, columns=SUMMARY_COLUMNS)


def _cell(row: SummaryRow, column: str, names: list[str]):
    """A summary row's cell. Its reference is by name, as runs.csv and a ladder's summary name it ("" for none)."""
    value = getattr(row, column)
    if column == "reference":
        return names[int(value)] if isinstance(value, int | float) and math.isfinite(value) else ""
    return value


def table_columns(match: bool, sweep: bool) -> list:
    """The terminal and Markdown table's columns in order, as fields; their metadata holds header and fmt. The
    columns of --match-params (mlp) and of a learning-rate grid (lr, stable) come only in such a table."""
    shown = {None, *(["match"] if match else []), *(["sweep"] if sweep else [])}
    cols = [f for f in fields(SummaryRow) if f.metadata["header"] and f.metadata["when"] in shown]
    return sorted(cols, key=lambda f: f.metadata["table_at"])
