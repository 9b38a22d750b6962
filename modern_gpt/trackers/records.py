"""What is logged: pure functions of a run's record, what is tracked of its folder (Tracked) and the summary rows."""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..core.components import COMPONENTS
from ..core.config import TRACKERS
from ..core.errors import UserError
from ..verdict.design import SUMMARY_COLUMNS, TRACKED, SummaryRow, summary_frame

FINAL_METRICS = ("train_loss", "val_loss", "val_bpc", "val_ppl", "best_val_loss", "tokens_per_s", "secs", "steps_done")
TRAIN = "train"  # the plan of a run that `modern-gpt train` logs
TRAIN_EXPERIMENT = "modern-gpt train"  # MLflow's experiment of every `train` run
TB_DIR = "tensorboard"  # inside the results folder (or the checkpoint folder of `train`)
ROW_STATS = tuple(c for c in SUMMARY_COLUMNS if c in {*TRACKED, "p"})  # delta_val, ci_low, ci_high, p, p_adj, mde


# ---------------------------------------------------------------------------
# What is logged: pure functions of a run's record and what is tracked of its folder
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Tracked:
    """What a tracker is told of the folder its runs come from: the settings (as meta.json's spec holds them), the
    plan ("train" for `modern-gpt train`'s one run), when the folder was started (a run's identity: run_key), and
    with --lrs the learning-rate grid and the run rows' names and rates (row_tag)."""

    settings: dict
    plan: str
    started: str
    lrs: tuple[float, ...] = ()
    variants: tuple[dict, ...] = ()

    @classmethod
    def of(cls, meta: dict) -> Tracked:
        """From a results folder's meta.json (its fields as a hand-edited file may hold them: of the wrong type,
        none)."""
        spec = meta.get("spec") if isinstance(meta.get("spec"), dict) else {}
        variants = spec.get("variants") if isinstance(spec.get("variants"), list) else []
        return cls(
            spec.get("settings") if isinstance(spec.get("settings"), dict) else {},
            str(spec.get("plan", "")),
            str(meta.get("started")),
            tuple(spec.get("lrs") or ()),
            tuple(v for v in variants if isinstance(v, dict)),
        )

    @classmethod
    def train(cls, settings: dict, started: str) -> Tracked:
        """`modern-gpt train`'s one run."""
        return cls(settings, TRAIN, started)


def tracked_ids(record: dict) -> dict[str, str]:
    """A run file's tracker ids ("tracked"), those that are ids: a hand-edited field of another type, or an id
    that is not a string, counts as not logged (logging it again replaces any copy, see run_key)."""
    ids = record.get("tracked")
    if not isinstance(ids, dict):
        return {}
    return {k: v for k, v in ids.items() if k in TRACKERS and isinstance(v, str) and v}


def tracking_state(meta: dict) -> dict[str, dict]:
    """meta.json's tracking (per tracker asked for: its error, its summary, MLflow's store), those entries that
    are objects: a hand-edited field of another type counts as none."""
    state = meta.get("tracking")
    if not isinstance(state, dict):
        return {}
    return {k: v for k, v in state.items() if k in TRACKERS and isinstance(v, dict)}


def run_params(tracked: Tracked, record: dict) -> dict[str, object]:
    """A run's settings, flattened (model.dim, train.lr, ...), its model as it trained (run_model), and its
    identity: variant, components, seed, lr."""
    settings = {**tracked.settings, "model": run_model(tracked, record)}
    out: dict[str, object] = {
        f"{section}.{key}": value
        for section in ("model", "train", "data")
        for key, value in sorted((settings.get(section) or {}).items())
    }
    for key in ("variant", "components", "seed", "lr", "mlp_width", "params"):
        if record.get(key) is not None:
            out[key] = record[key]
    if "lr" in record:
        out["train.lr"] = record["lr"]  # a --lrs row trains at its own
    return out


def run_model(tracked: Tracked, record: dict) -> dict:
    """The model a run trained: the folder's settings with the run's components switched on, its row's MLP width
    and its tokenizer's vocabulary (left out for a run file from before it was recorded, not the setting's 256)."""
    model = dict(tracked.settings.get("model") or {})
    if tracked.plan == TRAIN:  # `train` logs its settings as trained
        return model
    names = str(record.get("components") or "").split("+")
    model.update({c: c in names for c in COMPONENTS})
    extra = [c for c in names if c and c not in COMPONENTS]
    model.pop("extra_components", None)
    if extra:  # a plugin's components (a model without plugins has no such setting)
        model["extra_components"] = extra
    row = record.get("row")
    variant = tracked.variants[row] if isinstance(row, int) and 0 <= row < len(tracked.variants) else {}
    model["mlp_hidden"] = variant.get("mlp_hidden")
    model.pop("vocab_size", None)
    if isinstance(record.get("vocab_size"), int):
        model["vocab_size"] = record["vocab_size"]
    return model


def run_metrics(record: dict) -> dict[str, float]:
    """A run's final numbers (NaN for a run that failed), diverged as 0 or 1."""
    out = {k: _number(record.get(k)) for k in FINAL_METRICS}
    further = record.get("metrics")  # val_bpb, ctx2x_loss, icl_gain, NAME_loss and NAME_bpb (run/evaluation.py)
    if isinstance(further, dict):
        out.update((k, _number(v)) for k, v in further.items() if isinstance(k, str) and k not in out)
    out["diverged"] = float(bool(record.get("diverged")))
    out["failed"] = float(bool(record.get("error")))
    return out


def run_tags(tracked: Tracked, record: dict, folder: Path) -> dict[str, str]:
    """The tags a run is found by: the folder, the plan, its row (its run file's, one per variant and learning
    rate), variant, seed and lr, what `modern-gpt judge` needs to give the report's table from the tracker's
    export (the row's reference, by name, and whether it is the placebo; see row_marks), and its key (see
    run_key)."""
    return {
        "folder": Path(folder).name,
        "plan": tracked.plan,
        "row": str(record["row"]),
        "variant": record["variant"],
        "seed": str(record["seed"]),
        **({"lr": str(record["lr"])} if record.get("lr") is not None else {}),
        **row_marks(tracked, record),
        "error": (record.get("error") or "")[:500],
        "modern_gpt.key": run_key(folder, tracked, record),
    }


def row_marks(tracked: Tracked, record: dict) -> dict[str, str]:
    """A run's reference (the name of the row it is compared with, "" for the first row) and placebo ("true" or
    "false"), as the plan in meta.json says (runs.csv's columns of the same names); none for `train`'s one run or
    a row the plan does not hold (a hand-edited meta.json)."""
    variants, row = tracked.variants, record.get("row")
    if not isinstance(row, int) or not 0 <= row < len(variants):
        return {}
    v, ref = variants[row], variants[row].get("reference")
    if isinstance(ref, bool) or not (ref is None or (isinstance(ref, int) and 0 <= ref < len(variants))):
        return {}
    name = "" if ref is None else variants[ref].get("name")
    if not isinstance(name, str):
        return {}
    return {"reference": name, "placebo": "true" if v.get("placebo") is True else "false"}


def several_lrs(tracked: Tracked) -> bool:
    """Trained with --lrs: a variant has a run row per learning rate, which its names must tell apart."""
    return len(tracked.lrs) > 1


def run_name(tracked: Tracked, record: dict) -> str:
    """A run's display name: "rope seed 2", with --lrs "rope lr 0.003 seed 2"."""
    lr = f" lr {record['lr']:g}" if several_lrs(tracked) and isinstance(record.get("lr"), (int, float)) else ""
    return f"{record['variant']}{lr} seed {record['seed']}"


def row_tag(tracked: Tracked, row: dict[str, str]) -> int:
    """The run row (the runs' row tag) of a summary.csv row: with --lrs, its variant's at the learning rate the
    table shows it at (summary.csv's row counts table rows); else the same number."""
    if several_lrs(tracked):
        for i, v in enumerate(tracked.variants):
            if v.get("name") == row.get("variant") and _number(v.get("lr")) == _number(row.get("lr")):
                return i
    return int(_number(row.get("row")))


def run_key(folder: Path, tracked: Tracked, record: dict | None) -> str:
    """A run's (or with None, the summary's) identity in a tracker: its folder, when the folder was started, and
    its (row, seed); the same after a resume, another for a folder deleted and made again."""
    where = f"{Path(folder).resolve()}|{tracked.started}"
    what = "summary" if record is None else f"row{record['row']:02d}-seed{record['seed']}"
    return hashlib.sha256(f"{where}|{what}".encode()).hexdigest()[:20]


def run_times(record: dict) -> tuple[int | None, int | None]:
    """When the run started and ended, in Unix milliseconds (its timing.started and secs), so that a tracker shows
    its training time rather than the moment it was logged; None for what the record lacks (an older file)."""
    started, secs = _number((record.get("timing") or {}).get("started")), _number(record.get("secs"))
    if not (math.isfinite(started) and started > 0):
        return None, None
    start = int(started * 1000)
    return start, start + int(secs * 1000) if math.isfinite(secs) and secs >= 0 else None


def curve(record: dict) -> list[tuple[int, str, float]]:
    """(step, curve/train_loss or curve/val_loss, value) of each finite point of the run's curve (named apart
    from the final train_loss and val_loss, which are measured on more windows)."""
    return [
        (int(p["step"]), f"curve/{name}", float(p[name]))
        for p in record.get("curve") or []
        for name in ("train_loss", "val_loss")
        if isinstance(p.get(name), (int, float)) and math.isfinite(p[name])
    ]


def summary_cells(rows: list[SummaryRow]) -> list[dict[str, str]]:
    """The summary rows (the ablation hands them over) as summary.csv writes their cells: what a tracker shows is
    the file's text, and no tracker reads the file."""
    return list(csv.DictReader(io.StringIO(summary_frame(rows).to_csv(index=False))))


def row_stats(row: dict[str, str]) -> dict[str, float]:
    """A table row's Δ, CI, p, p_adj and mde that it has (the first row, the reference, has none)."""
    out = {}
    for key in ROW_STATS:
        value = _number(row.get(key))
        if math.isfinite(value):
            out[key] = value
    return out


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def slug(text: str) -> str:
    """A variant's name as a folder or key name: "classic (placebo)" -> "classic_placebo"."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_") or "row"


def artifacts(folder: Path) -> list[Path]:
    """The summary's files: summary.csv, curves.png and lr.png, those that exist."""
    return [p for p in (Path(folder) / n for n in ("summary.csv", "curves.png", "lr.png")) if p.is_file()]


def first_line(e: BaseException) -> str:
    """An error in one line: its type and first line, or a UserError's own sentence (it says what to do)."""
    text = (str(e).strip().splitlines() or [""])[0][:300]
    return text if isinstance(e, UserError) else f"{type(e).__name__}: {text}".rstrip(": ")


# ---------------------------------------------------------------------------
# The table as the trackers show it: each row's verdict on first open
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Margins:
    """Each table row's Δ and 95% CI at more than one point, for the trackers' margin charts: at each look of
    --seeds auto (steps: the pairs each look saw) or at each learning rate of --lrs (steps: the rate's index in
    lrs, every row at that rate against its reference at it). Empty (axis "") for a table of one point per row."""

    axis: str = ""  # "pairs" or "lr"
    steps: tuple[int, ...] = ()
    lrs: tuple[float, ...] = ()
    rows: dict = field(default_factory=dict)  # variant -> ((delta, ci_low, ci_high), ...), one per step

    def of(self, variant: str) -> list[tuple[int, float, float, float]]:
        """A row's points, (step, Δ, low, high), those it has (a look before a row's first pair has none)."""
        points = zip(self.steps, self.rows.get(variant, ()), strict=False)
        return [(step, *p) for step, p in points if all(math.isfinite(x) for x in p)]

    def axis_text(self) -> str:
        """What the steps are: "step = pairs at each look" or "step 0, 1, 2 = lr 0.001, 0.003, 0.01"."""
        if self.axis == "lr":
            return f"step {', '.join(map(str, self.steps))} = lr {', '.join(f'{lr:g}' for lr in self.lrs)}"
        return "step = the pairs at each look of --seeds auto" if self.axis else ""


def tracked_records(folder: Path, name: str) -> list[dict]:
    """The folder's run files that this tracker logged."""
    import json

    out = []
    for f in sorted((Path(folder) / "runs").glob("*.json")):
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and tracked_ids(record).get(name):
            out.append(record)
    return out


def named(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """summary.csv's cells with each row's reference by name, "" for the first row: what a tracker shows beside
    a verdict (verdict.design.summary_frame writes it by name)."""
    return [{**r, "reference": r.get("reference") or ""} for r in rows]


def row_of(rows: list[dict[str, str]], record: dict) -> tuple[dict[str, str] | None, bool]:
    """The table row (summary.csv's cells) a run belongs to, and whether it is one of the row's seeds as the
    table counts them: with --lrs, a run at the learning rate the table shows its row at (the others are the
    row's too, at rates the table did not choose)."""
    row = next((r for r in rows if r["variant"] == record.get("variant")), None)
    if row is None:
        return None, False
    return row, not row.get("lr") or _number(row["lr"]) == _number(record.get("lr"))


def signed(value: float) -> str:
    return f"{value:+.4f}"


def ci_text(row: dict[str, str]) -> str:
    """A row's Δ and 95% CI as the table prints them: "Δ -0.0730 [-0.0776, -0.0684]"; "" for the reference."""
    stats = row_stats(row)
    if "delta_val" not in stats:
        return ""
    ci = f" [{signed(stats['ci_low'])}, {signed(stats['ci_high'])}]" if "ci_low" in stats else ""
    return f"Δ {signed(stats['delta_val'])}{ci}"


def row_title(row: dict[str, str]) -> str:
    """A table row's name where a tracker shows names first (MLflow's runs, TensorBoard's charts): its verdict
    first, so that a narrow column still shows it: "better: rope, Δ -0.0730 [-0.0776, -0.0684]"."""
    verdict = row.get("verdict") or ("reference" if not row.get("reference") else "no verdict")
    numbers = ci_text(row)
    return f"{verdict}: {row['variant']}" + (f", {numbers}" if numbers else "")


def answer(rows: list[dict[str, str]]) -> str:
    """The table in one short line, which a tracker shows before anything is opened: the rows found better,
    worse or the same, each with its Δ and CI, then how many are inconclusive."""
    tested = [r for r in rows if r.get("reference")]
    parts = []
    for verdict in ("better", "worse", "same"):
        found = [f"{r['variant']} ({ci_text(r)})" for r in tested if r.get("verdict") == verdict]
        if found:
            parts.append(f"{verdict}: {', '.join(found)}")
    rest = sum(r.get("verdict") not in ("better", "worse", "same") for r in tested)
    if not parts:
        return f"all {rest} rows inconclusive" if rest > 1 else "1 row, inconclusive" if rest else "no row is tested"
    return "; ".join(parts) + (f"; {rest} inconclusive" if rest else "")


ABOUT = (
    "Δ val: the mean paired difference in val loss against the row's reference (negative is better), with its "
    "95% CI; p_adj: p adjusted across the table's rows; mde: the smallest |Δ| these pairs detect with 80% power."
)


def verdict_table(rows: list[dict[str, str]]) -> str:
    """The verdict table in Markdown, as MLflow's description and TensorBoard's text tab render it."""
    lines = [
        "| variant | verdict | Δ val | 95% CI | p | p_adj | mde | reference |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        s = row_stats(r)
        ci = f"[{signed(s['ci_low'])}, {signed(s['ci_high'])}]" if "ci_low" in s else ""
        cells = [
            _cell(r["variant"]),
            r.get("verdict") or "",
            signed(s["delta_val"]) if "delta_val" in s else "",
            ci,
            *(f"{s[k]:.4g}" if k in s else "" for k in ("p", "p_adj", "mde")),
            _cell(r.get("reference") or ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    """A name in a Markdown table cell: its | escaped, nothing else of it read as markup."""
    return re.sub(r"([\\|*_`\[\]<>])", r"\\\1", text)


def verdict_columns(rows: list[dict[str, str]]) -> dict[str, list]:
    """The verdict table as typed columns (numbers as floats, None where a row has none), for a tracker's own
    table (MLflow's log_table, W&B's wandb.Table): variant, verdict, the row's numbers and its reference."""
    out: dict[str, list] = {"variant": [r["variant"] for r in rows], "verdict": [r.get("verdict") or "" for r in rows]}
    for key in ROW_STATS:
        out[key] = [row_stats(r).get(key) for r in rows]
    out["reference"] = [r.get("reference") or "" for r in rows]
    return out


def table_rows(columns: dict[str, list]) -> list[list]:
    """verdict_columns' table as its rows."""
    return [list(cells) for cells in zip(*columns.values(), strict=True)]
