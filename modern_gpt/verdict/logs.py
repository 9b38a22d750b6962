"""A folder of training logs as runs: subfolders are variants, files are runs, each run's final evaluation its number.

Recognised (docs/statistics.md, "Published runs"):
- modded-nanogpt and llm.c: `step:N/M val_loss:X`.
- nanoGPT's train.py: `step N: train loss X, val loss Y`.
- the HF Trainer's trainer_state.json: `log_history` with `eval_loss`.
- a Lightning or litgpt metrics.csv: a `val_loss` column.
- `--log-pattern`, with a named group `loss`.
A line must start with the pattern. modded-nanogpt's logs open with the training script's own source, which
holds it only inside code. Every file is streamed, so a log of gigabytes costs its read, not its size in RAM.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..core.errors import UserError

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
TEXT_FORMATS = {
    "modded-nanogpt": re.compile(rf"^step:(?P<step>\d+)/(?P<total>\d+) val_loss:(?P<loss>{_NUM})", re.M),
    "nanoGPT": re.compile(rf"^step (?P<step>\d+): train loss {_NUM}, val loss (?P<loss>{_NUM})", re.M),
}
TEXT_SUFFIXES = {".txt", ".log", ".out", ""}
STEPS_SUFFIX = re.compile(r"^(?P<base>.+)-s(?P<steps>\d+)$")  # modded-nanogpt's baseline-s1430: 1430 steps
CHUNK = 1 << 24  # characters read at a time


@dataclass
class Run:
    variant: str
    path: Path
    fmt: str
    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    total: int | None = None  # the planned steps, where the log says
    encoding: str = "utf-8"


def pattern(regex: str) -> re.Pattern:
    """--log-pattern: a regex with a named group `loss`, and optionally `step` and `total`. Matched per line."""
    try:
        compiled = re.compile(regex, re.M)
    except re.error as e:
        raise UserError(f"--log-pattern {regex!r} is not a regular expression ({e}).") from None
    if "loss" not in compiled.groupindex:
        raise UserError(f"--log-pattern {regex!r} has no named group loss: write (?P<loss>...) around the number.")
    return compiled


def _encoding(path: Path) -> str:
    """UTF-8, unless the first bytes say otherwise: a BOM, or the zero bytes of UTF-16 text."""
    with open(path, "rb") as f:
        head = f.read(4096)
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if head.startswith(bom):
            return name
    if head.count(b"\0") > len(head) // 4:
        return "utf-16-le" if head[1:2] == b"\0" else "utf-16-be"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not a character cut by the 4096 bytes
            return "latin-1"
    return "utf-8"


def _scan_text(path: Path, regex: re.Pattern, run: Run) -> None:
    """Every match of regex at a line's start, streamed in chunks cut at a newline."""
    run.encoding = _encoding(path)
    rest = ""
    with open(path, encoding=run.encoding, errors="replace", newline="") as f:
        while True:
            chunk = f.read(CHUNK)
            text = rest + chunk
            cut = text.rfind("\n") + 1 if chunk else len(text)
            for m in regex.finditer(text, 0, cut):
                _add(run, m.groupdict())
            rest = text[cut:]
            if not chunk:
                return


def _add(run: Run, found: dict) -> None:
    try:
        loss = float(found["loss"])
    except (TypeError, ValueError):
        return
    step = found.get("step")
    run.losses.append(loss)
    run.steps.append(int(step) if step and step.isdigit() else len(run.losses))
    if found.get("total") and str(found["total"]).isdigit():
        run.total = int(found["total"])


def _trainer_state(path: Path, run: Run) -> None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable trainer_state.json ({e}).") from None
    for entry in state.get("log_history", []) if isinstance(state, dict) else []:
        if isinstance(entry, dict) and isinstance(entry.get("eval_loss"), int | float):
            _add(run, {"loss": entry["eval_loss"], "step": str(entry.get("step", ""))})
    if isinstance(state, dict) and isinstance(state.get("max_steps"), int) and state["max_steps"] > 0:
        run.total = state["max_steps"]


METRIC_COLUMNS = ("val_loss", "val/loss", "val_loss_epoch", "validation_loss", "eval_loss")


def _metrics_csv(path: Path, run: Run) -> None:
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        reader = csv.DictReader(f)
        col = next((c for c in METRIC_COLUMNS if c in (reader.fieldnames or [])), None)
        if col is None:
            return
        for row in reader:
            if row.get(col) not in (None, ""):
                _add(run, {"loss": row[col], "step": row.get("step") or row.get("iter") or ""})


def _kind(path: Path, custom: re.Pattern | None) -> str | None:
    if path.name == "trainer_state.json":
        return "HF trainer_state.json"
    if path.name == "metrics.csv":
        return "metrics.csv"
    if path.suffix.lower() in TEXT_SUFFIXES and not path.name.startswith("."):
        return "log-pattern" if custom is not None else "text"
    return None


def read_run(path: Path, variant: str, custom: re.Pattern | None = None) -> Run | None:
    """One file's evaluations. None when the file is not a kind of log: a README, the training script."""
    kind = _kind(path, custom)
    if kind is None:
        return None
    run = Run(variant, path, kind)
    try:
        if kind == "HF trainer_state.json":
            _trainer_state(path, run)
        elif kind == "metrics.csv":
            _metrics_csv(path, run)
        elif custom is not None:
            _scan_text(path, custom, run)
        else:
            for name, regex in TEXT_FORMATS.items():
                _scan_text(path, regex, run)
                if run.losses:
                    run.fmt = name
                    break
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror or e}).") from None
    return run


def _checkpoint_copies(paths: list[Path]) -> list[Path]:
    """HF's output folder keeps a trainer_state.json in each checkpoint-N/. A run is its own folder's state, or
    else its newest checkpoint's."""
    keep, states = [], {}
    for p in paths:
        inside = re.fullmatch(r"checkpoint-(\d+)", p.parent.name)
        if p.name != "trainer_state.json":
            keep.append(p)
            continue
        home, rank = (p.parent.parent, int(inside.group(1))) if inside else (p.parent, math.inf)
        if home not in states or rank > states[home][0]:
            states[home] = (rank, p)
    return sorted(keep + [p for _, p in states.values()])


def is_log_folder(folder: Path) -> bool:
    """A folder judge reads as logs: not a modern-gpt results or ladder folder, nor named as a table file."""
    if not folder.is_dir() or folder.suffix.lower() in (".csv", ".jsonl", ".parquet"):
        return False
    return not any((folder / n).exists() for n in ("meta.json", "ladder.json", "runs.csv"))


def read_folder(folder: Path, custom: re.Pattern | None = None) -> list[Run]:
    """Every run under folder. Each subfolder is a variant, and its files at any depth are its runs. Files
    directly in folder are one variant named after it."""
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder of logs.")
    subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    groups = [(s.name, sorted(q for q in s.rglob("*") if q.is_file())) for s in subs]
    own = sorted(q for q in folder.iterdir() if q.is_file())
    if not any(files for _, files in groups) or (own and not subs):
        groups = [(folder.name, own)]
    runs = []
    for variant, files in groups:
        for path in _checkpoint_copies(files):
            run = read_run(path, variant, custom)
            if run is not None:
                runs.append(run)
    if not any(r.losses for r in runs):
        raise UserError(
            f"{folder} holds no log judge recognises: no line like 'step:1390/1390 val_loss:3.2821' (modded-nanogpt, "
            "llm.c) or 'step 500: train loss 1.2, val loss 1.4' (nanoGPT), no trainer_state.json with eval_loss, "
            "no metrics.csv with val_loss; give --log-pattern with a group (?P<loss>...) for another format."
        )
    return runs


def final(run: Run, at_step: int | None) -> float | None:
    """The run's number: its last evaluation, or its evaluation at at_step. None where it has none there."""
    if not run.losses:
        return None
    if at_step is None:
        return run.losses[-1]
    hits = [loss for step, loss in zip(run.steps, run.losses, strict=True) if step == at_step]
    return hits[-1] if hits else None


def runs_frame(runs: list[Run], at_step: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    """One row per run that gives a number (variant, run, loss, steps), and footnotes on the runs left out or
    flagged. Flags: no evaluation, cut short, no evaluation at --at-step, same-seed repeats, another encoding,
    mixed formats."""
    rows, notes = [], []
    empty = [r for r in runs if not r.losses]
    if empty:
        notes.append(f"No evaluation in {_files(empty)}: left out.")
    short = [r for r in runs if r.losses and r.total is not None and r.steps[-1] < r.total]
    if short and at_step is None:
        notes.append(f"Cut short (the last evaluation is before the planned total): {_files(short)}; left out.")
    missing = [r for r in runs if r.losses and at_step is not None and final(r, at_step) is None]
    if missing:
        notes.append(f"No evaluation at step {at_step} in {_files(missing)}: left out.")
    kept = [r for r in runs if not (r in short and at_step is None) and final(r, at_step) is not None]
    diverged = [r for r in kept if not math.isfinite(final(r, at_step))]
    if diverged:  # a loss of nan or inf, left out as runs.csv's diverged runs are: kept, it blanked the row's mean
        notes.append(f"Diverged (the loss is not finite): {_files(diverged)}; left out.")
    for r in runs:
        if r not in kept or r in diverged:
            continue
        m = STEPS_SUFFIX.match(r.variant)
        steps = int(m.group("steps")) if m else (r.total or r.steps[-1])
        rows.append({"variant": r.variant, "run": r.path.stem, "loss": final(r, at_step), "steps": steps})
    notes += _repeats(runs) + _encodings(runs) + _formats(runs)
    return pd.DataFrame(rows, columns=["variant", "run", "loss", "steps"]), notes


def _files(runs: list[Run], limit: int = 4) -> str:
    names = [f"{r.variant}/{r.path.name}" for r in runs]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _repeats(runs: list[Run]) -> list[str]:
    """Runs whose whole evaluation sequence (two or more evaluations) is identical: the same seed run twice."""
    seen: dict[str, list[Run]] = {}
    for r in runs:
        if len(r.losses) >= 2:
            key = hashlib.sha256(repr((r.steps, r.losses)).encode()).hexdigest()
            seen.setdefault(key, []).append(r)
    groups = [g for g in seen.values() if len(g) > 1]
    return [
        f"Same-seed repeats: {_files(g)} have identical evaluations at every step; they count as "
        f"{len(g)} runs here, but are one run's randomness."
        for g in groups
    ]


def _encodings(runs: list[Run]) -> list[str]:
    other = [r for r in runs if r.encoding not in ("utf-8", "utf-8-sig")]
    return [f"Read as {other[0].encoding}, not UTF-8: {_files(other)}."] if other else []


def _formats(runs: list[Run]) -> list[str]:
    kinds = sorted({r.fmt for r in runs if r.losses})
    if len(kinds) < 2:
        return []
    return [f"The logs are of {len(kinds)} formats ({', '.join(kinds)}): check that their losses are comparable."]


def step_variants(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Variants that differ only in their steps, as baseline and baseline-s1480: base name -> the variants."""
    groups: dict[str, list[str]] = {}
    for v in frame["variant"].unique():
        m = STEPS_SUFFIX.match(v)
        groups.setdefault(m.group("base") if m else v, []).append(v)
    return {b: vs for b, vs in groups.items() if len(vs) > 1 and len(set(frame[frame.variant.isin(vs)].steps)) > 1}


def judge_logs(
    folder: Path, s, threshold_at: float | None = None, at_step: int | None = None, log_pattern: str | None = None
) -> tuple[str, list[dict], list[str]]:
    """`modern-gpt judge DIR` on a folder of logs: the title, the rows (unpaired.table's) and the footnotes."""
    from .unpaired import table

    if s.metric != "val_loss":  # the logs give one number, which no column name chooses
        raise UserError(
            f"--metric {s.metric}: a folder of logs is judged on each run's validation loss; leave --metric out, and give "
            "--log-pattern with a group (?P<loss>...) to read another number."
        )
    custom = pattern(log_pattern) if log_pattern is not None else None
    frame, notes = runs_frame(read_folder(Path(folder), custom), at_step)
    counts = frame.groupby("variant", sort=False).size()
    single = [v for v, n in counts.items() if n < 2]
    if single:
        notes.append(f"One run only (no spread, so no test): {', '.join(single)}.")
    if frame.empty:
        raise UserError(f"{folder}: no run gives a number ({' '.join(notes)})")
    rows, more = table(
        frame, "loss", s.alpha, s.reference, threshold_at, s.higher_is_better, list(s.order) if s.order else None
    )
    notes = more + notes + exchange_notes(frame)
    if len(counts) == 1 and threshold_at is None:
        notes.insert(0, "One variant: nothing to compare it with; --threshold tests its claim against a target.")
    which = f"at step {at_step}" if at_step is not None else "final"
    title = f"{which} validation loss of {len(frame)} runs in {len(counts)} variants, from {folder}"
    return title, rows, notes


def exchange_notes(frame: pd.DataFrame) -> list[str]:
    """The loss a step buys, from variants that differ only in their steps. It is the slope of their mean loss
    over their steps, with a 95% CI. Least squares, weighted by each mean's standard error."""
    from .unpaired import exchange_rate

    notes = []
    for base, variants in step_variants(frame).items():
        sub = frame[frame["variant"].isin(variants)]
        rate = exchange_rate(sub["steps"].to_numpy(float), sub["loss"].to_numpy(float), sub["variant"].to_numpy())
        if rate is None:
            continue
        slope, low, high, points = rate
        two = " (a fit of two points is all there is: no check that loss is straight in steps)" if points == 2 else ""
        notes.append(
            f"Steps as compute, {base}: 100 more steps change the loss by {100 * slope:+.4f} "
            f"(95% CI {100 * low:+.4f} to {100 * high:+.4f}), from {points} step counts ({', '.join(variants)}){two}."
        )
    return notes
