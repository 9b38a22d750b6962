"""What is logged: pure functions of a run's record, of its folder (Tracked), and of the table."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
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
TRAIN_EXPERIMENT = "modern-gpt train"  # MLflow's experiment (W&B's group) of every `train` run
TB_DIR = "tensorboard"  # inside the results folder (or the checkpoint folder of `train`)
ROW_STATS = tuple(c for c in SUMMARY_COLUMNS if c in {*TRACKED, "p"})  # delta_val, ci_low, ci_high, p, p_adj, mde
METRIC_STATS = ("delta", "ci_low", "ci_high", "p", "p_adj", "mde")  # metrics.csv's names of a (row, metric)'s


@dataclass(frozen=True)
class Tracked:
    """What a tracker is told of the folder its runs come from. settings: meta.json's spec. plan: "train" for
    `modern-gpt train`. started: part of each run's key. With --lrs, the grid and rows."""

    settings: dict
    plan: str
    started: str
    lrs: tuple[float, ...] = ()
    variants: tuple[dict, ...] = ()

    @classmethod
    def of(cls, meta: dict) -> Tracked:
        """From a results folder's meta.json. ResultsDir.read_meta checks it against its schema."""
        spec = meta.get("spec") or {}
        lrs, variants = tuple(spec.get("lrs") or ()), tuple(spec.get("variants") or ())
        return cls(spec.get("settings") or {}, str(spec.get("plan", "")), str(meta.get("started")), lrs, variants)


def tracked_ids(record: dict) -> dict[str, str]:
    """A run file's tracker ids. A hand-edited field, or an id of another type, counts as not logged."""
    ids = record.get("tracked")
    return {k: v for k, v in ids.items() if k in TRACKERS and isinstance(v, str) and v} if isinstance(ids, dict) else {}


def tracking_state(meta: dict) -> dict[str, dict]:
    """meta.json's tracking: per tracker, its error, its summary, MLflow's store. Other types count as none."""
    state = meta.get("tracking")
    return {k: v for k, v in state.items() if k in TRACKERS and isinstance(v, dict)} if isinstance(state, dict) else {}


def run_params(tracked: Tracked, record: dict) -> dict[str, object]:
    """A run's settings flattened (model.dim, train.lr, ...), with the model it trained and its identity."""
    settings = {**tracked.settings, "model": run_model(tracked, record)}
    out: dict[str, object] = {
        f"{section}.{key}": value
        for section in ("model", "train", "data")
        for key, value in sorted((settings.get(section) or {}).items())
    }
    keys = ("variant", "components", "seed", "lr", "mlp_width", "params")
    out.update((k, record[k]) for k in keys if record.get(k) is not None)
    if "lr" in record:
        out["train.lr"] = record["lr"]  # a --lrs row trains at its own
    return out


def run_model(tracked: Tracked, record: dict) -> dict:
    """The model a run trained: the folder's settings with the run's components on (`+rmsnorm`: rmsnorm=True).
    It adds its row's MLP width and, when its run file records it, its tokenizer's vocabulary."""
    model = tracked.settings.get("model") or {}
    if tracked.plan == TRAIN:  # `train` logs its settings as trained
        return model
    names, row = str(record.get("components") or "").split("+"), record["row"]
    model = {k: v for k, v in model.items() if k not in ("extra_components", "vocab_size")}
    extra = [c for c in names if c and c not in COMPONENTS]  # a plugin's components
    model |= {c: c in names for c in COMPONENTS} | ({"extra_components": extra} if extra else {})
    model["mlp_hidden"] = tracked.variants[row].get("mlp_hidden") if row < len(tracked.variants) else None
    if isinstance(record.get("vocab_size"), int):
        model["vocab_size"] = record["vocab_size"]
    return model


def run_metrics(record: dict) -> dict[str, float]:
    """A run's final numbers, NaN for a run that failed, and its further metrics (val_bpb, NAME_loss, NAME_bpb,
    ctx2x_loss, icl_gain). diverged and failed are 0 or 1."""
    out = {k: _number(record.get(k)) for k in FINAL_METRICS}
    out |= {k: _number(v) for k, v in (record.get("metrics") or {}).items() if k not in out}
    out["diverged"] = float(bool(record.get("diverged")))
    out["failed"] = float(bool(record.get("error")))
    return out


def run_tags(tracked: Tracked, record: dict, folder: Path) -> dict[str, str]:
    """The tags a run is found by, and its key. They hold what `modern-gpt judge` needs from a tracker's export:
    its row's reference by name and its placebo mark, as runs.csv has them."""
    tags = {"folder": Path(folder).name, "plan": tracked.plan, "row": str(record["row"])}
    tags |= {"variant": record["variant"], "seed": str(record["seed"])}
    if record.get("lr") is not None:
        tags["lr"] = str(record["lr"])
    variants, row = tracked.variants, record["row"]
    if row < len(variants):  # not `train`'s run
        ref = variants[row].get("reference")
        tags |= {"reference": "" if ref is None else variants[ref]["name"]}
        tags |= {"placebo": str(variants[row].get("placebo") is True).lower()}
    return tags | {"error": (record.get("error") or "")[:500], "modern_gpt.key": run_key(folder, tracked, record)}


def several_lrs(tracked: Tracked) -> bool:
    return len(tracked.lrs) > 1  # --lrs: a variant has a run row per learning rate, which names tell apart


def run_name(tracked: Tracked, record: dict) -> str:
    """A run's display name: "rope seed 2", with --lrs "rope lr 0.003 seed 2"."""
    lr = f" lr {record['lr']:g}" if several_lrs(tracked) and isinstance(record.get("lr"), (int, float)) else ""
    return f"{record['variant']}{lr} seed {record['seed']}"


def row_tag(tracked: Tracked, row: dict[str, str]) -> int:
    """The run row of a summary.csv row. With --lrs, its variant's at the rate the table shows."""
    if several_lrs(tracked):
        for i, v in enumerate(tracked.variants):
            if v.get("name") == row.get("variant") and _number(v.get("lr")) == _number(row.get("lr")):
                return i
    return int(_number(row.get("row")))


def run_key(folder: Path, tracked: Tracked, record: dict | None) -> str:
    """A run's key in a tracker (None: the summary's): its folder, when that was started, its (row, seed).
    It is the same after a resume, another for a folder deleted and made again."""
    where = f"{Path(folder).resolve()}|{tracked.started}"
    what = "summary" if record is None else f"row{record['row']:02d}-seed{record['seed']}"
    return hashlib.sha256(f"{where}|{what}".encode()).hexdigest()[:20]


def run_times(record: dict) -> tuple[int | None, int | None]:
    """When the run started and ended, in Unix milliseconds. Its training time, not when it was logged."""
    started, secs = _number((record.get("timing") or {}).get("started")), _number(record.get("secs"))
    if not (math.isfinite(started) and started > 0):
        return None, None
    start = int(started * 1000)
    return start, start + int(secs * 1000) if math.isfinite(secs) and secs >= 0 else None


def curve(record: dict) -> list[tuple[int, str, float]]:
    """(step, curve/train_loss or curve/val_loss, value) of each finite point of the run's curve."""
    return [
        (int(p["step"]), f"curve/{name}", float(p[name]))
        for p in record.get("curve") or []
        for name in ("train_loss", "val_loss")
        if isinstance(p.get(name), (int, float)) and math.isfinite(p[name])
    ]


def summary_cells(rows: list[SummaryRow]) -> list[dict[str, str]]:
    """The summary rows the ablation hands over, as summary.csv writes them. A tracker shows the file's text."""
    return list(csv.DictReader(io.StringIO(summary_frame(rows).to_csv(index=False))))


def metric_cells(folder: Path) -> list[dict[str, str]]:
    """metrics.csv's (row, metric) verdicts with --eval-data sets, written just before the trackers are told.
    val_loss's are left out: they are the summary's. Each Δ is also delta_val, the summary's name."""
    path = Path(folder) / "metrics.csv"
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as f:
        return [{**r, "delta_val": r["delta"]} for r in csv.DictReader(f) if r["metric"] != "val_loss"]


def metric_stats(cells: list[dict[str, str]], variant: str) -> tuple[dict[str, float], dict[str, str]]:
    """A table row's numbers on each further metric (code_loss.delta, code_loss.p_adj, ...). Also its verdicts
    on those it is tested on (code_loss.verdict, ...)."""
    mine = [c for c in cells if c["variant"] == variant]
    numbers = {f"{c['metric']}.{k}": v for c in mine for k in METRIC_STATS if math.isfinite(v := _number(c[k]))}
    return numbers, {f"{c['metric']}.verdict": c["verdict"] for c in mine if c["verdict"]}


def row_stats(row: dict[str, str]) -> dict[str, float]:
    """The Δ, CI, p, p_adj and mde a table row has. The first row, the reference, has none."""
    return {k: v for k in ROW_STATS if math.isfinite(v := _number(row.get(k)))}


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def slug(text: str) -> str:
    """A variant's name as a folder or key name: "classic (placebo)" -> "classic_placebo"."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_") or "row"


def artifacts(folder: Path) -> list[Path]:
    """The summary's files that exist: summary.csv, metrics.csv, curves.png and lr.png."""
    names = ("summary.csv", "metrics.csv", "curves.png", "lr.png")
    return [p for p in (Path(folder) / n for n in names) if p.is_file()]


def error_line(e: BaseException) -> str:
    """An error in one line: its type and first line. A UserError keeps its own sentence, which says what to do."""
    text = (str(e).strip().splitlines() or [""])[0][:300]
    return text if isinstance(e, UserError) else f"{type(e).__name__}: {text}".rstrip(": ")


@dataclass(frozen=True)
class Margins:
    """Each table row's Δ and 95% CI at more than one point, for the margin charts. With --seeds auto, at each
    look (steps: the pairs it saw). With --lrs, at each learning rate (steps: the rate's index in lrs)."""

    axis: str = ""  # "pairs" or "lr"; "" for a table of one point per row
    steps: tuple[int, ...] = ()
    lrs: tuple[float, ...] = ()
    rows: dict = field(default_factory=dict)  # variant -> ((delta, ci_low, ci_high), ...), one per step

    def of(self, variant: str) -> list[tuple[int, float, float, float]]:
        """A row's points, (step, Δ, low, high), those it has. A look before a row's first pair has none."""
        points = zip(self.steps, self.rows.get(variant, ()), strict=False)
        return [(step, *p) for step, p in points if all(math.isfinite(x) for x in p)]

    def axis_text(self) -> str:
        if self.axis == "lr":
            return f"step {', '.join(map(str, self.steps))} = lr {', '.join(f'{lr:g}' for lr in self.lrs)}"
        return "step = the pairs at each look of --seeds auto" if self.axis else ""


def tracked_records(folder: Path, name: str) -> list[dict]:
    """The folder's run files that this tracker logged."""
    out = []
    for f in sorted((Path(folder) / "runs").glob("*.json")):
        with contextlib.suppress(OSError, ValueError):  # a damaged file: the report names it
            out.append(json.loads(f.read_text(encoding="utf-8")))
    return [r for r in out if isinstance(r, dict) and tracked_ids(r).get(name)]


def row_of(rows: list[dict[str, str]], record: dict) -> tuple[dict[str, str] | None, bool]:
    """The table row a run belongs to, and whether the table counts it. With --lrs: only at the row's rate."""
    row = next((r for r in rows if r["variant"] == record.get("variant")), None)
    return row, row is not None and (not row.get("lr") or _number(row["lr"]) == _number(record.get("lr")))


def ci_text(row: dict[str, str]) -> str:
    """A row's Δ and 95% CI as the table prints them: "Δ -0.0730 [-0.0776, -0.0684]". "" for the reference."""
    stats = row_stats(row)
    if "delta_val" not in stats:
        return ""
    ci = f" [{stats['ci_low']:+.4f}, {stats['ci_high']:+.4f}]" if "ci_low" in stats else ""
    return f"Δ {stats['delta_val']:+.4f}{ci}"


def row_title(row: dict[str, str]) -> str:
    """A table row's name, its verdict first: "better: rope, Δ -0.0730 [-0.0776, -0.0684]"."""
    verdict = row.get("verdict") or ("reference" if not row.get("reference") else "no verdict")
    numbers = ci_text(row)
    return f"{verdict}: {row['variant']}" + (f", {numbers}" if numbers else "")


def answer(rows: list[dict], verdicts=("better", "worse", "same"), said=ci_text) -> str:
    """The table in one line: the rows of each verdict, with said(row) (Δ and CI), then the inconclusive count."""
    tested = [r for r in rows if r.get("reference")]
    parts = []
    for verdict in verdicts:
        found = [f"{r['variant']} ({said(r)})" for r in tested if r.get("verdict") == verdict]
        if found:
            parts.append(f"{verdict}: {', '.join(found)}")
    rest = sum(r.get("verdict") not in verdicts for r in tested)
    if not parts:
        return f"all {rest} rows inconclusive" if rest > 1 else "1 row, inconclusive" if rest else "no row is tested"
    return "; ".join(parts) + (f"; {rest} inconclusive" if rest else "")


ABOUT = (
    "Δ: the mean paired difference against the row's reference (negative is better), with its 95% CI; p_adj: "
    "p adjusted across the table (with further metrics, across every row and metric); mde: the smallest |Δ| "
    "these pairs detect with 80% power."
)


def verdict_table(rows: list[dict[str, str]], metrics: list[dict[str, str]] = ()) -> str:
    """The verdict table in Markdown, then each further metric's. For MLflow's description and TensorBoard's text."""
    out = ""
    for title, cells, what in (("Δ val", rows, ()), ("Δ", metrics, ("metric",))):
        if not cells:
            continue
        head = ["variant", *what, "verdict", title, "95% CI", "p", "p_adj", "mde", "reference"]
        lines = ["| " + " | ".join(head) + " |", "|---" * len(what) + "|---|---|---:|---|---:|---:|---:|---|"]
        for r in cells:
            s = row_stats(r)
            ci = f"[{s['ci_low']:+.4f}, {s['ci_high']:+.4f}]" if "ci_low" in s else ""
            numbers = [f"{s['delta_val']:+.4f}" if "delta_val" in s else "", ci]
            numbers += [f"{s[k]:.4g}" if k in s else "" for k in ("p", "p_adj", "mde")]
            row = [_cell(r["variant"]), *(_cell(r[k]) for k in what), r.get("verdict") or "", *numbers]
            lines.append("| " + " | ".join([*row, _cell(r.get("reference") or "")]) + " |")  # | escaped, no markup
        out += ("\n\n" if out else "") + "\n".join(lines)
    return out


def _cell(text: str) -> str:
    return re.sub(r"([\\|*_`\[\]<>])", r"\\\1", text)


def verdict_columns(rows: list[dict[str, str]], metric: bool = False) -> tuple[list[str], list[list]]:
    """The verdict table's column names and rows, for MLflow's log_table and W&B's wandb.Table. Numbers are typed,
    None where a row has none. metric: metric_cells' rows, with their metric's name."""
    names = ["variant", *(["metric"] if metric else []), "verdict", *ROW_STATS, "reference"]
    cells = [{**r, **dict.fromkeys(ROW_STATS), **row_stats(r), "reference": r.get("reference") or ""} for r in rows]
    return names, [[c[k] for k in names] for c in cells]
