"""A results folder: what an ablation writes, and how it is read back.

    meta.json     the command line, every setting, the plan (planning.Spec), versions, device, git commit, times
    runs/         one JSON file per finished run: the source of truth, the only runs report reads
    runs.csv      one row per variant x seed, rebuilt from runs/ after every finished run (for you; never read)
    curves.csv    variant, seed, step, train_loss, val_loss (likewise)
    summary.csv   one row per table row (written by report)
    .lock         flock'ed by the process writing the folder (files.FolderLock); holds its pid, for messages

Every file is written to a temporary name and renamed, so a SIGKILL at any
moment leaves each file whole and `--resume` able to finish.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import UserError
from ..core.files import FolderLock, atomic_path, check_name, not_regular, write_json
from ..core.schema import problem
from ..model import plugins
from ..verdict.design import SummaryRow, summary_frame
from .planning import LADDER_FILE, Spec, SpecError, resume_command

if TYPE_CHECKING:  # pandas (about 0.3 s, and pyarrow's allocator thread) loads where a frame is made: a worker,
    import pandas as pd  # which imports this module for settings_hash, never makes one (executors.SERVER_PRELOAD)

RUN_COLUMNS = [
    "row",
    "variant",
    "components",
    "reference",  # the name of the row this run's row is compared with, "" for none (the plan's, as report reads it)
    "placebo",  # the row is the placebo: judge reads these two columns, so that its table is report's
    "seed",
    "lr",
    "params",
    "mlp_width",
    "train_loss",
    "val_loss",
    "val_tokens",
    "val_loss_tune",
    "val_loss_test",
    "best_val_loss",
    "best_step",
    "val_bpc",
    "lossless",
    "val_ppl",
    "steps_done",
    "tokens_seen",
    "epochs",
    "tokens_per_s",
    "flops",
    "mfu",
    "secs",
    "threads",
    "device",
    "diverged",
    "spikes",
    "error",
]
CURVE_COLUMNS = ["variant", "row", "seed", "step", "train_loss", "val_loss"]

# What each file must hold for --resume and report to trust it (the notation is in schema.py). Other keys are
# tolerated; a key that the code reads back gets a line here.
VARIANT_SCHEMA = {
    "name": str,
    "components": [str],
    "reference": (int, None),
    "mlp_hidden?": (int, None),
    "lr?": (float, None),
}
META_SCHEMA = {  # written by running.start; planning.Spec checks the spec's values
    "command": str,
    "spec": {
        "settings": {"model": dict, "train": dict, "data": dict},
        "plan": str,
        "variants": [VARIANT_SCHEMA],
        "seeds": [int],
        "match_params": bool,
        "data_key": str,
        "data_name": str,
        "alpha?": float,
        "margin?": (float, None),
        "min_seeds?": (int, None),
        "lrs?": ([float], None),
    },
    "variants": [
        {**VARIANT_SCHEMA, "params": int, "body_params?": int, "hidden": int, "kv_cache_bytes_per_token": int}
    ],  # body_params: non-embedding (a folder from before it has none)
    "status": str,
    "plugins?": [plugins.RECORD_SCHEMA],  # each plugin file the models use: name, path, sha256 (plugins.py)
    "threads?": (int, None),  # every run's torch threads, pinned by the first (running.first_threads)
    "compile?": {"choice": str, "why": str},  # --compile's choice for every run, and why (compiling.decide)
    "sequential?": {  # --seeds auto: the boundary and every look
        "min_seeds": int,
        "max_seeds": int,
        "method?": str,  # optional here so that --resume can rewrite an older folder; report checks them
        "levels?": [float],
        "looks": [{"seeds": int, "decided": int, "rows": int, "futile?": int}],
        "stopped?": bool,
    },
}
NUMBER = (float, None)  # NaN for a run that diverged or failed; null in a hand-edited file
RUN_SCHEMA = {  # written by running.execute: train.RunResult and the run's identity
    "row": int,
    "seed": int,
    "variant": str,
    "components": str,
    "settings_hash": str,
    "params": int,
    "train_loss": NUMBER,
    "val_loss": NUMBER,
    "best_val_loss": NUMBER,
    "best_step": int,
    "val_bpc": NUMBER,
    "steps_done": int,
    "epochs": NUMBER,
    "tokens_per_s": NUMBER,
    "secs": NUMBER,
    "diverged": bool,
    "error": str,
    "curve": [{"step": int, "train_loss": NUMBER, "val_loss": NUMBER}],
    "lr?": float,
    "val_loss_tune?": NUMBER,
    "val_loss_test?": NUMBER,
    "spikes?": int,
    "lossless?": bool,
    "timing?": (dict, None),  # where a run's secs went (train.RunResult.timing): the run's file only, not runs.csv
    "compile?": str,  # on or off: the ablation's one choice (compiling.py)
    "flops?": NUMBER,  # training FLOPs (compiling.step_flops x steps); older run files have none
    "mfu?": NUMBER,
    "peak_flops?": NUMBER,
    "peak?": str,
    "vocab_size?": int,  # the tokenizer's: what the trackers log as model.vocab_size
    "metrics?": (dict, None),  # train.RunResult.metrics: runs.csv's further columns (metric_columns); older runs: none
    "metric_notes?": (dict, None),
}
METRICS_AFTER = "val_ppl"  # runs.csv's further metric columns come after this one


def metric_columns(records: list[dict]) -> list[str]:
    """The further metrics the runs hold (train.RunResult.metrics), in the order of the first run that has each.
    They are val_bpb, ctx2x_loss, icl_gain, NAME_loss and NAME_bpb per --eval-data set; none for older folders."""
    out: dict[str, None] = {}
    for r in records:
        got = r.get("metrics")
        if isinstance(got, dict):
            out.update((k, None) for k in got if isinstance(k, str) and k not in RUN_COLUMNS)
    return list(out)


def _metrics(record: dict, names: list[str]) -> dict:
    """A run's further metrics as numbers. NaN for one it lacks (a failed run's, an older run's), or one that is no
    number in a hand-edited file."""
    got = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    number = (int, float)
    return {
        k: float(got[k]) if isinstance(got.get(k), number) and not isinstance(got.get(k), bool) else float("nan")
        for k in names
    }


def settings_hash(settings: dict, data_key: str) -> str:
    """A run's settings and data, in 16 hex digits. A run file carries it, so a foreign one is recognised."""
    # compile on and off hash as the true and false they were before --compile auto: older run files stay theirs
    train = settings["train"]
    if train.get("compile") in ("on", "off"):
        settings = {**settings, "train": {**train, "compile": train["compile"] == "on"}}
    text = json.dumps({"settings": settings, "data_key": data_key}, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# meta.json's layout, written in it as "format": a later modern-gpt that changes the layout writes a higher
# number, and this one refuses such a folder by name rather than misread it. A folder without the key was
# written before the number existed, in format 1's layout.
FORMAT = 1


def check_format(meta, path: Path) -> None:
    """A meta.json of a later format (or a format that is no number) is refused in one sentence."""
    found = meta.get("format", FORMAT) if isinstance(meta, dict) else FORMAT
    if isinstance(found, bool) or not isinstance(found, int) or found < 1:
        raise UserError(f"{path} is damaged: its format is {found!r}, not a whole number; start a new ablation.")
    if found > FORMAT:
        raise UserError(
            f"{path} was written by a later modern-gpt (meta.json format {found}; this one reads format {FORMAT}); "
            "read it with that version of modern-gpt, or upgrade this one."
        )


def check_meta(meta, path: Path, missing: list | None = None) -> Spec:
    """meta.json against META_SCHEMA, its settings, and its spec (which checks itself). What is wrong is one
    sentence. Returns the spec. Given a list (a report, which needs no model), a recorded plugin whose file is
    missing is stood in for and named in it, instead of refused."""
    check_format(meta, path)
    found, spec = problem(meta, META_SCHEMA), None
    if found is None:  # before the spec names their components
        gone = plugins.check_recorded(meta.get("plugins"), path.parent, read_only=missing is not None)
        missing is None or missing.extend(gone)
        try:
            spec = Spec.from_dict(meta["spec"])
        except SpecError as e:
            found = str(e)
    if found is None and len(meta["variants"]) != len(spec.variants):
        found = f"variants has {len(meta['variants'])} rows and spec.variants {len(spec.variants)}"
    seq = meta.get("sequential") if found is None else None
    if seq is not None and seq["min_seeds"] != spec.min_seeds:
        found = "sequential does not match spec.min_seeds"
    if found is None and meta.get("threads") is not None and meta["threads"] < 1:
        found = f"threads must be 1 or more, got {meta['threads']}"
    if found:
        raise UserError(
            f"{path} is not a modern-gpt results file or is damaged: {found}; "
            "give a folder written by modern-gpt ablate, duel or power, or start a new ablation."
        )
    return spec


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


TEXT_COLUMNS = ("variant", "components", "reference", "error", "verdict", "device")


def _exact(pd) -> dict:
    """pandas 3 reads floats back exactly by default; older versions need to be asked."""
    return {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def _foreign(record: dict, spec: Spec, hashes: dict[float, str]) -> str | None:
    """Why a run file does not belong to this ablation, or None when it does."""
    row, seed, variants = record["row"], record["seed"], spec.variants
    if not 0 <= row < len(variants):
        return f"row {row} is outside the plan's {len(variants)} rows"
    if seed not in spec.seeds:
        return f"seed {seed} is not one of the plan's seeds"
    v = variants[row]
    if record["variant"] != v.name or record["components"] != "+".join(v.components):
        return f"it is a run of {record['variant']!r}, and row {row} is {v.name!r}"
    if v.mlp_hidden is not None and record.get("mlp_width") != v.mlp_hidden:
        return f"its MLP width {record.get('mlp_width')} is not the plan's {v.mlp_hidden}"
    if record["settings_hash"] != hashes[v.lr or next(iter(hashes))]:
        return "it was made with other settings or data"
    if spec.lrs and not {"val_loss_tune", "val_loss_test", "lr"} <= set(record):
        return "it has no val_loss_tune and val_loss_test, which a run of a folder with --lrs records"
    return None


def _hashes(spec: Spec) -> dict[float, str]:
    """The settings hash a run of this spec carries, per learning rate. The settings are normalised as a run sees
    them: a setting meta.json lacks takes its default. With --lrs, each run row's hold its own lr."""
    settings = spec.settings.to_dict()
    return {
        lr: settings_hash({**settings, "train": {**settings["train"], "lr": lr}}, spec.data_key)
        for lr in spec.lrs or [settings["train"]["lr"]]
    }


def _reread(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame exactly as pandas.read_csv reads it back from its CSV: text columns as text, "" when empty.
    So the table is the same whether computed while the runs are written or later."""
    import pandas as pd

    text = {c: str for c in TEXT_COLUMNS if c in frame}
    out = pd.read_csv(io.StringIO(frame.to_csv(index=False)), dtype=text, **_exact(pd))
    for col in text:
        out[col] = out[col].fillna("")
    return out


@dataclass(frozen=True)
class Scan:
    """What runs/ holds, read once. records: each finished run of the ablation, keyed (row, seed). rejected:
    the files left out, each as 'runs/NAME (why)'. variants: the plan's run rows (planning.Variant), which say
    each run's reference and placebo mark."""

    records: dict[tuple[int, int], dict]
    rejected: list[str] = field(default_factory=list)
    variants: tuple = ()

    def _ordered(self) -> list[dict]:
        return [self.records[k] for k in sorted(self.records)]

    def _marks(self, record: dict) -> dict:
        """The run's row's reference by name ("" for none), and whether it is the placebo. None: not in the plan."""
        row, rows = record.get("row"), self.variants
        if not isinstance(row, int) or not 0 <= row < len(rows):
            return {"reference": None, "placebo": None}
        ref = rows[row].reference
        return {"reference": "" if ref is None else rows[ref].name, "placebo": rows[row].placebo}

    def runs_frame(self) -> pd.DataFrame:
        """runs.csv as a frame: what is written (runs() is what the table reads)."""
        import pandas as pd

        records = self._ordered()
        extra = metric_columns(records)
        rows = [{**{c: r.get(c) for c in RUN_COLUMNS}, **self._marks(r), **_metrics(r, extra)} for r in records]
        at = RUN_COLUMNS.index(METRICS_AFTER) + 1
        return pd.DataFrame(rows, columns=RUN_COLUMNS[:at] + extra + RUN_COLUMNS[at:])

    def curves_frame(self) -> pd.DataFrame:
        """curves.csv as a frame: what is written (curves() is what the plot reads)."""
        import pandas as pd

        points = [
            {"variant": r["variant"], "row": r["row"], "seed": r["seed"], **point}
            for r in self._ordered()
            for point in r["curve"]
        ]
        return pd.DataFrame(points, columns=CURVE_COLUMNS)

    def runs(self) -> pd.DataFrame:
        return _reread(self.runs_frame())

    def curves(self) -> pd.DataFrame:
        return _reread(self.curves_frame())


class ResultsDir:
    def __init__(self, path: Path, read_only: bool = False):
        self.path = Path(path)
        self.runs_dir = self.path / "runs"
        self.folder_lock = FolderLock(self.path)
        self._meta: dict | None = None  # meta.json, read and checked once
        self._spec: Spec | None = None
        # read_only (report): a recorded plugin whose file is missing is named here, not refused; nothing trains
        self.missing_plugins: list[str] | None = [] if read_only else None

    # -- creating and opening -------------------------------------------------
    def create(self, meta: dict) -> None:
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UserError(f"cannot write results to {self.path}: {e.strerror or e}; choose another --out.") from None
        self.write_meta(meta)

    def is_results(self) -> bool:
        return (self.path / "meta.json").is_file() and self.runs_dir.is_dir()

    def half_created(self) -> bool:
        """A folder that modern-gpt began to create and never finished: runs/ (empty), no meta.json."""
        return (
            self.runs_dir.is_dir()
            and not (self.path / "meta.json").exists()
            and not any(self.runs_dir.iterdir())
            and all(f.name in ("runs", ".lock", ".write-test") or f.name.endswith(".tmp") for f in self.path.iterdir())
        )

    def half_created_error(self) -> UserError:
        return UserError(
            f"{self.path} was left half-created (no meta.json, no runs: nothing ran in it); delete it, "
            "then start the ablation again."
        )

    def check_new(self) -> None:
        """A folder for a new ablation: missing or empty. Else refused, with the advice that fits what it holds."""
        p = self.path
        check_name(p, "--out")
        if not p.exists():
            return
        if not p.is_dir():
            raise UserError(f"{p} exists and is not a folder; choose another --out.")
        if not any(p.iterdir()):
            return
        owner = self.owner()
        if owner is not None:
            who = f"pid {owner}" if owner else "its pid not yet written"
            raise UserError(f"{p} is being written by another modern-gpt process ({who}); choose another --out.")
        if self.half_created():
            raise self.half_created_error()
        if self.is_results():
            try:  # the command even of a damaged meta.json's plan: the advice names it
                command = Spec.command_in(json.loads((p / "meta.json").read_text(encoding="utf-8")))
            except (OSError, ValueError):
                command = "ablate"
            raise UserError(
                f"{p} already holds an ablation; finish it with {resume_command(command, p)}, or choose another --out."
            )
        if os.path.lexists(p / LADDER_FILE):
            raise UserError(
                f"{p} already holds a ladder; finish it with modern-gpt scale --resume {shlex.quote(str(p))}, or "
                "choose another --out."
            )
        raise UserError(f"{p} already exists and is not an empty folder; choose another --out.")

    def read_meta(self) -> dict:
        """meta.json, checked against META_SCHEMA and the Spec. A damaged or foreign file is one sentence naming
        it. Read once; write_meta keeps it current."""
        if self._meta is None:
            self._check_is_results()
            path = self.path / "meta.json"
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise UserError(f"{path} is damaged ({str(e).splitlines()[0]}); start a new ablation.") from None
            self._spec = check_meta(meta, path, self.missing_plugins)
            self._meta = meta
        return self._meta

    def _check_is_results(self) -> None:
        if self.is_results():
            return
        if self.path.is_dir() and self.half_created():
            raise self.half_created_error()
        what = not_regular(self.path / "meta.json") if self.path.is_dir() else None
        if what:  # never opened: a pipe would block the read
            raise UserError(f"{self.path}/meta.json is {what}, not a file; start a new ablation.")
        if os.path.lexists(self.path / LADDER_FILE):
            raise UserError(
                f"{self.path} is a ladder, not one ablation: modern-gpt scale --resume {shlex.quote(str(self.path))} "
                "resumes it, and each of its rung-N folders is an ablation folder."
            )
        raise UserError(
            f"{self.path} is not a results folder (no meta.json and runs/ in it, nor a ladder's ladder.json); give a "
            "folder written by modern-gpt ablate, duel, power or scale."
        )

    @property
    def spec(self) -> Spec:
        """meta.json's spec: the one place it is read."""
        self.read_meta()
        return self._spec

    def check_resumed_by(self, command: str) -> None:
        """--resume with the command that wrote the folder. Another command is refused, naming the right one."""
        if self.spec.command != command:
            raise UserError(
                f"{self.path} was written by modern-gpt {self.spec.command}; resume it with "
                f"{self.spec.resume_command(self.path)}."
            )

    def write_meta(self, meta: dict) -> None:
        write_json(self.path / "meta.json", meta)
        if self._meta is not None:  # the spec never changes once written
            self._meta = meta

    # -- the lock: files.FolderLock ----------------------------------------------
    def lock(self) -> None:
        """Take the folder for this process, or refuse while another process holds it."""
        self.folder_lock.take()

    def unlock(self) -> None:
        self.folder_lock.release()

    def owner(self) -> int | None:
        """The pid of the live process that holds the folder's lock, or None when no process holds it."""
        return self.folder_lock.owner()

    # -- runs ----------------------------------------------------------------
    def run_file(self, row: int, seed: int) -> Path:
        return self.runs_dir / f"row{row:02d}-seed{seed}.json"

    def scan(self) -> Scan:
        """Every finished run of this folder's ablation, read from runs/ once.

        A file is left out, and named in the scan's rejected, if it cannot be parsed or does not match RUN_SCHEMA.
        So is one that belongs elsewhere: a row or seed outside the plan, another variant, other settings or data
        (a file copied from another ablation). --resume runs its run again.
        """
        spec = self.spec
        hashes = _hashes(spec)
        records, rejected = {}, []
        for f in sorted(self.runs_dir.glob("*.json")):
            record, why = self._run_record(f, spec, hashes)
            if why:
                rejected.append(f"runs/{f.name} ({why})")
            else:
                records[(record["row"], record["seed"])] = record
        return Scan(records, rejected, spec.variants)

    def _run_record(self, f: Path, spec: Spec, hashes: dict[float, str]) -> tuple[dict | None, str | None]:
        """One run file's record, or why it is left out."""
        what = not_regular(f)
        if what:  # a pipe would block the read forever
            return None, f"it is {what}, not a file"
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, "it cannot be read"
        why = problem(record, RUN_SCHEMA) or _foreign(record, spec, hashes)
        if why is None and f.name != self.run_file(record["row"], record["seed"]).name:
            why = f"its name does not match its row {record['row']} and seed {record['seed']}"
        return record, why

    def finished(self) -> dict[tuple[int, int], dict]:
        """Every finished run of this folder's ablation, keyed by (row, seed) (scan's records)."""
        return self.scan().records

    def health_notes(self, rejected: list[str]) -> list[str]:
        """What a reader of the table must know about the folder itself. A writer still at work, one that died or
        failed (meta.json's status alone can say `running` for a process long gone), and run files left out."""
        meta, owner = self.read_meta(), self.owner()
        notes, status, resume = [], meta.get("status"), self.spec.resume_command(self.path)
        if owner is not None:
            notes.append(f"Still running (pid {owner or 'unknown'}): the table shows the runs finished so far.")
        elif status == "running":
            notes.append(
                f"The process that wrote this folder stopped before the end (it holds no lock); {resume} finishes it."
            )
        elif status == "detached":  # --executor slurm --detach: the driver submitted the runs and exited
            notes.append(
                f"Detached: its runs were submitted to Slurm, and the table shows those collected so far; {resume} "
                "collects the others, submitting again any that did not finish."
            )
        elif status == "failed":
            notes.append(
                f"The ablation failed: {str(meta.get('error') or 'no reason recorded').rstrip('.')}; {resume} runs what is left."
            )
        return notes + [f"{r} is left out of the table: it does not belong to this ablation." for r in rejected]

    def write_run(self, record: dict, finished: dict[tuple[int, int], dict]) -> None:
        """One finished run: its own file first, then added to `finished`, the driver's records read from runs/ once.
        runs.csv and curves.csv are written from them, so no run file is read again."""
        write_json(self.run_file(record["row"], record["seed"]), record)
        finished[(record["row"], record["seed"])] = record
        self.write_tables(finished)

    def write_tables(self, finished: dict[tuple[int, int], dict]) -> None:
        """runs.csv and curves.csv from the finished runs, for you and pandas. report reads runs/ itself."""
        scan = Scan(finished, variants=self.spec.variants)
        runs, curves = scan.runs_frame(), scan.curves_frame()
        _write_csv(self.path / "runs.csv", runs)
        _write_csv(self.path / "curves.csv", curves)

    def write_summary(self, rows: list[SummaryRow], metrics=None) -> None:
        """summary.csv. With several metrics judged (verdict.metrics.MetricsVerdict), metrics.csv too: their long
        form, one row per (table row, metric)."""
        _write_csv(self.path / "summary.csv", summary_frame(rows))
        if metrics is not None:
            _write_csv(self.path / "metrics.csv", metrics.table)
