"""A results folder: what an ablation writes, and how it is read back.

    meta.json     the command line, every setting, the plan, versions, device, git commit, times
    runs/         one JSON file per finished run (the source of truth; written atomically)
    runs.csv      one row per variant x seed, rebuilt from runs/ after every finished run
    curves.csv    variant, seed, step, train_loss, val_loss
    summary.csv   one row per table row
    .lock         flock'ed by the process writing the folder; holds its pid, for messages

Every file is written to a temporary name and renamed, so a SIGKILL at any
moment leaves each file whole and `--resume` able to finish.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

import numpy as np
import pandas as pd

from .components import component_problem
from .errors import UserError
from .files import atomic_path, kind, not_regular, write_json
from .schema import problem
from .settings import ALL, from_dict, saved_settings_problem

RUN_COLUMNS = [
    "row",
    "variant",
    "components",
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
    "secs",
    "threads",
    "device",
    "diverged",
    "spikes",
    "error",
]
CURVE_COLUMNS = ["variant", "row", "seed", "step", "train_loss", "val_loss"]
SUMMARY_COLUMNS = [
    "variant",
    "params",
    "train_loss",
    "val_loss",
    "delta_val",
    "spread",
    "ci_low",
    "ci_high",
    "verdict",
    "secs",
    "val_bpc",
    "tokens_per_s",
    "kv_cache_bytes_per_token",
    "pairs",
    "sd",
    "p",
    "p_holm",
    "p_same",
    "p_same_holm",
    "mde",
    "seeds_needed",
    "row",
    "components",
    "reference",
    "mlp_width",
    "seeds",
    "diverged",
    "epochs",
    "lr",
    "stable",
    "lrs",
]

# What each file must hold for --resume and report to trust it (the notation is in schema.py). Other keys are
# tolerated; a key that the code reads back gets a line here.
VARIANT_SCHEMA = {
    "name": str,
    "components": [str],
    "reference": (int, None),
    "mlp_hidden?": (int, None),
    "lr?": (float, None),
}
MAX_SEED = 2**63 - 1  # a seed must fit the integer columns of runs.csv
META_SCHEMA = {  # written by ablate.start
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
    "variants": [{**VARIANT_SCHEMA, "params": int, "hidden": int, "kv_cache_bytes_per_token": int}],
    "status": str,
    "threads?": (int, None),  # every run's torch threads, pinned by the first (running.first_threads)
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
RUN_SCHEMA = {  # written by ablate.execute: train.RunResult and the run's identity
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
}
# runs.csv: the columns the table, the footnotes and the plot read, and which must be numbers
RUNS_CSV_NUMBERS = (
    "row",
    "seed",
    "train_loss",
    "val_loss",
    "best_val_loss",
    "best_step",
    "val_bpc",
    "steps_done",
    "epochs",
    "tokens_per_s",
    "secs",
)
RUNS_CSV_REQUIRED = ("variant", "diverged", "error", *RUNS_CSV_NUMBERS)
# what a folder trained at several learning rates (--lrs) reads besides: the choice and the stable column
SWEEP_NUMBERS = ("lr", "val_loss_tune", "val_loss_test", "spikes")


def sweep_numbers(meta: dict) -> tuple[str, ...]:
    """The columns runs.csv must hold as numbers beyond RUNS_CSV_NUMBERS: SWEEP_NUMBERS with --lrs, else none."""
    return SWEEP_NUMBERS if meta["spec"].get("lrs") else ()


def settings_hash(settings: dict, data_key: str) -> str:
    """A run's settings and data, in 16 hex digits: a run file carries it so that a foreign one is recognised."""
    text = json.dumps({"settings": settings, "data_key": data_key}, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def command_of(plan: str) -> str:
    """The command that writes (and resumes) a results folder of this plan."""
    return plan if plan in ("duel", "power") else "ablate"


def check_meta(meta, path: Path) -> None:
    """meta.json against META_SCHEMA, its plan's rows and seeds, and its settings: one sentence for what is wrong."""
    found = problem(meta, META_SCHEMA)
    spec = meta["spec"] if found is None else {}
    if found is None and not spec["variants"]:
        found = "spec.variants is empty"
    if found is None and len(meta["variants"]) != len(spec["variants"]):
        found = f"variants has {len(meta['variants'])} rows and spec.variants {len(spec['variants'])}"
    if found is None:
        found = _lrs_problem(spec)
    k = len(spec.get("lrs") or [1]) if found is None else 1  # run rows per table row
    for i, v in enumerate(spec.get("variants", []) if found is None else []):
        unknown = component_problem(v["components"])
        ref = v["reference"]
        if unknown:
            found = f"spec.variants[{i}]: {unknown}"
        elif (ref is None) != (i < k) or (ref is not None and not (0 <= ref < i and ref % k == i % k)):
            found = f"spec.variants[{i}].reference {ref!r} is not a row above it"
        if found:
            break
    if found is None and (not spec["seeds"] or min(spec["seeds"]) < 0 or len(set(spec["seeds"])) < len(spec["seeds"])):
        found = f"spec.seeds must be distinct seeds of 0 or more, got {spec['seeds']}"
    if found is None:
        found = statistics_problem(meta)
    if found is None:
        found = saved_settings_problem(spec["settings"])
        found = found and f"spec.settings: {found} (read from meta.json)"
    if found is None:  # every setting: one that is missing would silently take its default, and runs be redone
        missing = [k for k in ALL if k.split(".")[1] not in spec["settings"][k.split(".")[0]]]
        found = f"spec.settings.{missing[0]} is missing" if missing else None
    if found is None:
        found = _plan_problem(spec["plan"], meta["variants"])
    if found is None and meta.get("threads") is not None and meta["threads"] < 1:
        found = f"threads must be 1 or more, got {meta['threads']}"
    if found:
        raise UserError(
            f"{path} is not a modern-gpt results file or is damaged: {found}; "
            "give a folder written by modern-gpt ablate, duel or power, or start a new ablation."
        )


def _lrs_problem(spec: dict) -> str | None:
    """With --lrs: a list of positive learning rates, and each table row's run rows at them in order."""
    lrs, variants = spec.get("lrs"), spec["variants"]
    if lrs is None:
        bad = next((i for i, v in enumerate(variants) if v.get("lr") is not None), None)
        return None if bad is None else f"spec.variants[{bad}] has an lr, but spec.lrs is missing"
    if len(lrs) < 2 or not all(0 < x < float("inf") for x in lrs) or len(set(lrs)) < len(lrs):
        return f"spec.lrs must be two or more distinct positive learning rates, got {lrs}"
    if len(variants) % len(lrs):
        return f"spec.variants has {len(variants)} rows, not one per learning rate of spec.lrs for each row"
    for i, v in enumerate(variants):
        if v.get("lr") != lrs[i % len(lrs)]:
            return f"spec.variants[{i}].lr is {v.get('lr')!r}, not spec.lrs[{i % len(lrs)}] {lrs[i % len(lrs)]!r}"
    return None


def statistics_problem(meta: dict) -> str | None:
    """The verdict's settings in meta.json, beyond their types: what report and --resume would trip on."""
    spec, seq = meta["spec"], meta.get("sequential")
    alpha, margin, low = spec.get("alpha", 0.05), spec.get("margin"), spec.get("min_seeds")
    if max(spec["seeds"]) > MAX_SEED:
        return f"spec.seeds holds {max(spec['seeds'])}, above the largest seed {MAX_SEED}"
    if not 0 < alpha < 1:
        return f"spec.alpha must be between 0 and 1, got {alpha!r}"
    if margin is not None and not 0 < margin < float("inf"):
        return f"spec.margin must be a positive number, got {margin!r}"
    if low is not None and not 2 <= low <= len(spec["seeds"]):
        return f"spec.min_seeds must be between 2 and the {len(spec['seeds'])} seeds, got {low!r}"
    if seq is not None and (low is None or seq["min_seeds"] != low):
        return "sequential does not match spec.min_seeds"
    return None


def _plan_problem(plan: str, variants: list[dict]) -> str | None:
    """Why a plan's name and its rows disagree (what report reads for a duel or power folder), or None."""
    from .planning import PLANS

    if plan not in PLANS:
        return f"spec.plan {plan!r} is not one of {', '.join(PLANS)}"
    names = [v["name"] for v in variants if not v.get("placebo")]
    if plan == "duel" and sorted(set(names)) != ["classic", "modern"]:
        return f"spec.plan is duel, but its rows are {names[:4]}, not classic and modern"
    if plan == "power" and (len(variants) != 2 or not variants[1].get("placebo")):
        return f"spec.plan is power, but its {len(variants)} rows are not one architecture and its placebo"
    return None


def failed(runs: pd.DataFrame) -> pd.Series:
    """Which runs diverged or failed: the table leaves them out of its means and the plot out of its curves."""
    return runs["diverged"].astype(bool) | (runs["error"] != "") | ~np.isfinite(runs["val_loss"].astype(float))


def unstable(runs: pd.DataFrame) -> pd.Series:
    """Which runs did not train stably (what the `stable` column of a --lrs table counts): failed, or a loss spike."""
    return failed(runs) | (runs["spikes"] > 0)


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


TEXT_COLUMNS = ("variant", "components", "error", "verdict", "device")
# pandas 3 reads floats back exactly by default; older versions need to be asked
_EXACT = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def read_csv(path: Path) -> pd.DataFrame:
    """A results CSV with every float exactly as written and text columns as text ("" when empty)."""
    what = not_regular(path)
    if what:
        raise UserError(f"{path} is {what}, not a file; {REBUILD}")
    try:
        with open(path, encoding="utf-8") as f:
            header = f.readline().strip().split(",")
        twice = next((c for i, c in enumerate(header) if c in header[:i]), None)
        if twice is not None:
            raise UserError(f"{path} is damaged (its header names the column {twice[:80]} twice); {REBUILD}")
        text = {c: str for c in TEXT_COLUMNS if c in header}
        frame = pd.read_csv(path, dtype=text, **_EXACT)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise UserError(f"{path} is damaged ({(str(e).splitlines() or ['empty'])[0]}); {REBUILD}") from None
    for col in ("row", "seed", "val_loss") if path.name == "runs.csv" else ():
        if col not in frame:
            raise UserError(f"{path} is damaged (no {col} column); {REBUILD}")
    for col in text:
        frame[col] = frame[col].fillna("")
    return frame


REBUILD = "delete it, and report and --resume rebuild it from runs/."


def _foreign(record: dict, spec: dict, hashes: dict[float, str]) -> str | None:
    """Why a run file does not belong to this ablation, or None when it does."""
    row, seed, variants = record["row"], record["seed"], spec["variants"]
    if not 0 <= row < len(variants):
        return f"row {row} is outside the plan's {len(variants)} rows"
    if seed not in spec["seeds"]:
        return f"seed {seed} is not one of the plan's seeds"
    v = variants[row]
    if record["variant"] != v["name"] or record["components"] != "+".join(v["components"]):
        return f"it is a run of {record['variant']!r}, and row {row} is {v['name']!r}"
    if v.get("mlp_hidden") is not None and record.get("mlp_width") != v["mlp_hidden"]:
        return f"its MLP width {record.get('mlp_width')} is not the plan's {v['mlp_hidden']}"
    if record["settings_hash"] != hashes[v.get("lr") or next(iter(hashes))]:
        return "it was made with other settings or data"
    return None


def _tables(finished: dict[tuple[int, int], dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv and curves.csv as frames, from run records."""
    records = [finished[k] for k in sorted(finished)]
    runs = pd.DataFrame([{c: r.get(c) for c in RUN_COLUMNS} for r in records], columns=RUN_COLUMNS)
    curves = pd.DataFrame(
        [
            {"variant": r["variant"], "row": r["row"], "seed": r["seed"], **point}
            for r in records
            for point in r["curve"]
        ],
        columns=CURVE_COLUMNS,
    )
    return runs, curves


def _reread(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame exactly as read_csv would read it back from a file."""
    text = {c: str for c in TEXT_COLUMNS if c in frame}
    out = pd.read_csv(io.StringIO(frame.to_csv(index=False)), dtype=text, **_EXACT)
    for col in text:
        out[col] = out[col].fillna("")
    return out


def _check_runs(frame: pd.DataFrame, path: Path, meta: dict) -> None:
    """runs.csv's columns, numbers, rows and seeds against RUNS_CSV_* and the plan; numbers made numeric in place."""

    def damaged(what: str) -> UserError:
        return UserError(f"{path} is damaged ({what}); {REBUILD}")

    for col in (*RUNS_CSV_REQUIRED, *sweep_numbers(meta)):
        if col not in frame:
            raise damaged(f"no {col} column")
    for col in (*RUNS_CSV_NUMBERS, *sweep_numbers(meta)):
        numbers = pd.to_numeric(frame[col], errors="coerce")
        bad = numbers.isna() & frame[col].notna()
        if col in ("row", "seed"):
            bad |= numbers.isna() | (numbers != numbers.round())
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise damaged(f"line {i + 2} has {frame[col].iloc[i]!r} in column {col}, not a number")
        frame[col] = numbers.astype(int) if col in ("row", "seed") else numbers.astype(float)
    flags = frame["diverged"].map(
        {True: True, False: False, "True": True, "False": False, "true": True, "false": False}
    )
    if flags.isna().any():
        i = int(flags.isna().to_numpy().nonzero()[0][0])
        raise damaged(f"line {i + 2} has {frame['diverged'].iloc[i]!r} in column diverged, not True or False")
    frame["diverged"] = flags.astype(bool)
    rows, seeds = len(meta["variants"]), set(meta["spec"]["seeds"])
    for i, (row, seed) in enumerate(zip(frame["row"], frame["seed"], strict=True)):
        if not 0 <= row < rows or seed not in seeds:
            raise damaged(f"line {i + 2} is row {row}, seed {seed}, outside the plan's {rows} rows and seeds")
    if frame.duplicated(["row", "seed"]).any():
        i = int(frame.duplicated(["row", "seed"]).to_numpy().nonzero()[0][0])
        raise damaged(f"line {i + 2} repeats row {frame['row'].iloc[i]}, seed {frame['seed'].iloc[i]}")


def _same(frame: pd.DataFrame, rebuilt: pd.DataFrame, keys: list[str], columns) -> bool:
    """Whether a CSV read back holds exactly what the run files hold, in these columns (NaN equal to NaN)."""
    if len(frame) != len(rebuilt) or any(c not in frame or c not in rebuilt for c in columns):
        return False
    a, b = (f.sort_values(keys).reset_index(drop=True) for f in (frame, rebuilt))
    for c in columns:
        x, y = pd.to_numeric(a[c], errors="coerce"), pd.to_numeric(b[c], errors="coerce")
        if x.notna().any() or y.notna().any():
            if not np.array_equal(x.to_numpy(float), y.to_numpy(float), equal_nan=True):
                return False
        elif list(a[c].astype(str)) != list(b[c].astype(str)):
            return False
    return True


class ResultsDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.runs_dir = self.path / "runs"
        self.notes: list[str] = []  # what reading the folder found and worked around, for the report's footnotes

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
        """A folder for a new ablation: missing or empty, else refused with the advice that fits what it holds."""
        p = self.path
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
            try:
                plan = json.loads((p / "meta.json").read_text(encoding="utf-8"))["spec"]["plan"]
            except (OSError, ValueError, KeyError, TypeError):
                plan = None
            raise UserError(
                f"{p} already holds an ablation; finish it with modern-gpt {command_of(plan)} --resume {p}, or choose "
                "another --out."
            )
        raise UserError(f"{p} already exists and is not an empty folder; choose another --out.")

    def read_meta(self) -> dict:
        """meta.json, checked against META_SCHEMA: a damaged or foreign file is one sentence naming it."""
        if not self.is_results():
            if self.path.is_dir() and self.half_created():
                raise self.half_created_error()
            what = not_regular(self.path / "meta.json") if self.path.is_dir() else None
            if what:  # never opened: a pipe would block the read
                raise UserError(f"{self.path}/meta.json is {what}, not a file; start a new ablation.")
            raise UserError(
                f"{self.path} is not a results folder (no meta.json and runs/ in it); give a folder written by modern-gpt "
                "ablate, duel or power."
            )
        path = self.path / "meta.json"
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"{path} is damaged ({str(e).splitlines()[0]}); start a new ablation.") from None
        check_meta(meta, path)
        return meta

    def check_resumed_by(self, command: str) -> None:
        """--resume with the command that wrote the folder; another command is refused, naming the right one."""
        written_by = command_of(self.read_meta()["spec"]["plan"])
        if written_by != command:
            raise UserError(
                f"{self.path} was written by modern-gpt {written_by}; resume it with modern-gpt {written_by} "
                f"--resume {self.path}."
            )

    def write_meta(self, meta: dict) -> None:
        write_json(self.path / "meta.json", meta)

    # -- the lock ------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.path / ".lock"

    def lock(self) -> None:
        """Take the folder for this process, or refuse while another process holds it.

        An exclusive flock on .lock: the kernel releases it when its owner dies, however it dies, so a
        dead owner's lock is free and two live processes can never both hold it. The pid written into
        the file only names the owner in the message.
        """
        if fcntl is None:  # no flock on this platform: no lock
            return
        while True:
            self._check_lock_file()
            try:  # never through a link, never blocking (a pipe put there in the meantime)
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
            except OSError as e:
                self._check_lock_file()
                raise UserError(f"cannot write results to {self.path}: {e.strerror or e}.") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                self._check_lock_file()
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                owner = self.owner()
                who = f"pid {owner}" if owner else "its pid not yet written"
                raise UserError(
                    f"{self.path} is being written by another modern-gpt process ({who}); "
                    "wait for it to finish or stop it first."
                ) from None
            try:  # the file may have been removed by the owner that unlocked it just before: lock the new one
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            self._lock_fd = fd
            return

    def unlock(self) -> None:
        fd = getattr(self, "_lock_fd", None)
        if fd is None:
            return
        self._lock_fd = None
        with contextlib.suppress(OSError):
            self.lock_path.unlink()  # while still holding it, so no one locks a file that is about to go
        os.close(fd)

    def _check_lock_file(self) -> None:
        """.lock is missing or a regular file; anything else (a folder, a link, a pipe that would block every
        reader) is one sentence naming it."""
        try:
            mode = os.lstat(self.lock_path).st_mode
        except FileNotFoundError:
            return
        except OSError as e:
            raise UserError(f"cannot read {self.lock_path}: {e.strerror or e}.") from None
        if stat.S_ISREG(mode):
            return
        what = kind(mode)
        if stat.S_ISLNK(mode):
            target = os.readlink(self.lock_path)
            what += f" to {target}" + ("" if os.path.exists(self.lock_path) else ", which does not exist")
        raise UserError(f"{self.lock_path} is {what}, not a lock file; remove it and run again.")

    def owner(self) -> int | None:
        """The pid of the live process that holds the folder's lock, or None when no process holds it."""
        if fcntl is None:
            return None
        self._check_lock_file()
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the check: say what it is now
                self._check_lock_file()
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:  # held
                text = os.read(fd, 32).decode(errors="replace").strip()
                return int(text) if text.isdigit() else 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    # -- runs ----------------------------------------------------------------
    def run_file(self, row: int, seed: int) -> Path:
        return self.runs_dir / f"row{row:02d}-seed{seed}.json"

    def finished(self) -> dict[tuple[int, int], dict]:
        """Every finished run of this folder's ablation, keyed by (row, seed).

        A file that cannot be parsed, does not match RUN_SCHEMA, or belongs elsewhere (a row or seed outside
        the plan, another variant, other settings or data: a file copied from another ablation) is left out
        and named in self.rejected; --resume runs its run again.
        """
        spec = self.read_meta()["spec"]
        # normalised as a run sees them (a setting that meta.json lacks takes its default), then hashed; with
        # --lrs, each run row's settings hold its own learning rate
        settings = from_dict(spec["settings"]).to_dict()
        hashes = {
            lr: settings_hash({**settings, "train": {**settings["train"], "lr": lr}}, spec["data_key"])
            for lr in spec.get("lrs") or [settings["train"]["lr"]]
        }
        out, self.rejected = {}, []
        for f in sorted(self.runs_dir.glob("*.json")):
            what = not_regular(f)
            if what:  # a pipe would block the read forever
                self.rejected.append(f"runs/{f.name} (it is {what}, not a file)")
                continue
            try:
                record = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self.rejected.append(f"runs/{f.name} (it cannot be read)")
                continue
            if isinstance(record, dict) and "mlp_hidden" in record:  # its name in run files before the rename
                record.setdefault("mlp_width", record.pop("mlp_hidden"))
            why = problem(record, RUN_SCHEMA) or _foreign(record, spec, hashes)
            if why is None and spec.get("lrs") and not {"val_loss_tune", "val_loss_test", "lr"} <= set(record):
                why = "it has no val_loss_tune and val_loss_test, which a run of a folder with --lrs records"
            if why is None and f.name != self.run_file(record["row"], record["seed"]).name:
                why = f"its name does not match its row {record['row']} and seed {record['seed']}"
            if why:
                self.rejected.append(f"runs/{f.name} ({why})")
            else:
                out[(record["row"], record["seed"])] = record
        return out

    def health_notes(self, meta: dict) -> list[str]:
        """What a reader of the table must know about the folder itself: a writer still at work, one that died
        or failed (meta.json's status alone can say `running` for a process long gone), run files left out."""
        notes, status, owner = [], meta.get("status"), self.owner()
        resume = f"modern-gpt {command_of(meta['spec']['plan'])} --resume {self.path}"
        if owner is not None:
            notes.append(f"Still running (pid {owner or 'unknown'}): the table shows the runs finished so far.")
        elif status == "running":
            notes.append(
                f"The process that wrote this folder stopped before the end (it holds no lock); {resume} finishes it."
            )
        elif status == "failed":
            notes.append(
                f"The ablation failed: {str(meta.get('error') or 'no reason recorded').rstrip('.')}; {resume} runs what is left."
            )
        self.finished()
        notes += [f"{r} is left out of the table: it does not belong to this ablation." for r in self.rejected]
        return notes + self.notes

    def write_run(self, record: dict) -> None:
        """One finished run: its own file first, then runs.csv and curves.csv rebuilt from all of them."""
        write_json(self.run_file(record["row"], record["seed"]), record)
        self.write_tables(self.finished())

    def write_tables(self, finished: dict[tuple[int, int], dict]) -> None:
        runs, curves = _tables(finished)
        _write_csv(self.path / "runs.csv", runs)
        _write_csv(self.path / "curves.csv", curves)

    def runs(self) -> pd.DataFrame:
        """runs.csv, checked against the plan; rebuilt from runs/ (the source of truth) when it is gone."""
        path = self.path / "runs.csv"
        if not path.exists():
            return _reread(_tables(self.finished())[0])
        frame = read_csv(path)
        _check_runs(frame, path, self.read_meta())
        rebuilt = _reread(_tables(self.finished())[0])
        if not _same(frame, rebuilt, ["row", "seed"], (*RUNS_CSV_REQUIRED, *sweep_numbers(self.read_meta()))):
            self.notes.append(
                "runs.csv does not match the run files in runs/ (edited, or copied from elsewhere): the table is "
                "built from runs/, and --resume rewrites runs.csv."
            )
            return rebuilt
        return frame

    def curves(self) -> pd.DataFrame:
        path = self.path / "curves.csv"
        if not path.exists():
            return _reread(_tables(self.finished())[1])
        frame = read_csv(path)
        missing = [c for c in ("row", "seed", "step", "val_loss") if c not in frame]
        bad = [  # a header alone (every run diverged before its first evaluation) has no cells to check
            c
            for c in ("row", "seed", "step", "val_loss")
            if c in frame and len(frame) and not pd.api.types.is_numeric_dtype(frame[c])
        ]
        if missing or bad:
            what = f"no {missing[0]} column" if missing else f"a cell of column {bad[0]} is not a number"
            raise UserError(f"{path} is damaged ({what}); {REBUILD}")
        rebuilt = _reread(_tables(self.finished())[1])
        if not _same(frame, rebuilt, ["row", "seed", "step"], ("row", "seed", "step", "train_loss", "val_loss")):
            return rebuilt  # runs/ is the source of truth
        return frame

    # -- summary -------------------------------------------------------------
    def write_summary(self, rows: list[dict]) -> None:
        _write_csv(self.path / "summary.csv", pd.DataFrame(rows, columns=SUMMARY_COLUMNS))

    def summary(self) -> pd.DataFrame:
        return read_csv(self.path / "summary.csv")
