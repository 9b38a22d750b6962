"""A results folder: what an ablation writes, and how it is read back.

    meta.json     the command line, every setting, the plan, versions, device, git commit, times
    runs/         one JSON file per finished run (the source of truth; written atomically)
    runs.csv      one row per variant x seed, rebuilt from runs/ after every finished run
    curves.csv    variant, seed, step, train_loss, val_loss
    summary.csv   one row per table row
    .lock         the pid of the process writing the folder

Every file is written to a temporary name and renamed, so a SIGKILL at any
moment leaves each file whole and `--resume` able to finish.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import UserError
from .files import atomic_path, write_json

RUN_COLUMNS = [
    "row", "variant", "components", "seed", "params", "mlp_hidden", "train_loss", "val_loss", "val_tokens", "best_val_loss",
    "best_step", "val_bpc", "val_ppl", "steps_done", "tokens_seen", "epochs", "tokens_per_s", "secs", "threads",
    "device", "diverged", "error",
]  # fmt: skip
CURVE_COLUMNS = ["variant", "row", "seed", "step", "train_loss", "val_loss"]
SUMMARY_COLUMNS = [
    "variant", "params", "train_loss", "val_loss", "delta_val", "spread", "ci_low", "ci_high", "verdict", "secs",
    "val_bpc", "tokens_per_s", "kv_cache_bytes_per_token", "p_holm",
    "row", "components", "reference", "mlp_hidden", "seeds", "diverged", "epochs",
]  # fmt: skip


def failed(runs: pd.DataFrame) -> pd.Series:
    """Which runs diverged or failed: the table leaves them out of its means and the plot out of its curves."""
    return runs["diverged"].astype(bool) | (runs["error"] != "") | ~np.isfinite(runs["val_loss"].astype(float))


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


TEXT_COLUMNS = ("variant", "components", "error", "verdict", "device")
# pandas 3 reads floats back exactly by default; older versions need to be asked
_EXACT = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def read_csv(path: Path) -> pd.DataFrame:
    """A results CSV with every float exactly as written and text columns as text ("" when empty)."""
    try:
        with open(path, encoding="utf-8") as f:
            header = f.readline().strip().split(",")
        text = {c: str for c in TEXT_COLUMNS if c in header}
        frame = pd.read_csv(path, dtype=text, **_EXACT)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise UserError(
            f"{path} is damaged ({str(e).splitlines()[0]}); modern-gpt ablate --resume rebuilds it from runs/."
        ) from None
    for col in ("row", "seed", "val_loss") if path.name == "runs.csv" else ():
        if col not in frame:
            raise UserError(f"{path} is damaged (no {col} column); modern-gpt ablate --resume rebuilds it from runs/.")
    for col in text:
        frame[col] = frame[col].fillna("")
    return frame


class ResultsDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.runs_dir = self.path / "runs"

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

    def read_meta(self) -> dict:
        if not self.is_results():
            raise UserError(
                f"{self.path} is not a results folder (no meta.json and runs/ in it); give a folder written by modern-gpt ablate."
            )
        try:
            return json.loads((self.path / "meta.json").read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"{self.path}/meta.json is damaged ({e}).") from None

    def write_meta(self, meta: dict) -> None:
        write_json(self.path / "meta.json", meta)

    # -- the lock ------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.path / ".lock"

    def lock(self) -> None:
        """Take the folder for this process; refuse while a live process holds it, take over from a dead one."""
        while True:
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    owner = int(self.lock_path.read_text().strip() or 0)
                except (OSError, ValueError):
                    owner = 0
                if owner and owner != os.getpid() and _alive(owner):
                    raise UserError(
                        f"{self.path} is being written by another modern-gpt process (pid {owner}); "
                        "wait for it to finish or stop it first."
                    ) from None
                self.lock_path.unlink(missing_ok=True)  # left by a dead process: take it over
                continue
            except OSError as e:
                raise UserError(f"cannot write results to {self.path}: {e.strerror or e}.") from None
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return

    def unlock(self) -> None:
        try:
            if self.lock_path.read_text().strip() == str(os.getpid()):
                self.lock_path.unlink()
        except OSError:
            pass

    # -- runs ----------------------------------------------------------------
    def run_file(self, row: int, seed: int) -> Path:
        return self.runs_dir / f"row{row:02d}-seed{seed}.json"

    def finished(self) -> dict[tuple[int, int], dict]:
        """Every finished run, keyed by (row, seed). A file that cannot be parsed is ignored and will be re-run."""
        out = {}
        for f in sorted(self.runs_dir.glob("row*-seed*.json")):
            try:
                record = json.loads(f.read_text())
                out[(int(record["row"]), int(record["seed"]))] = record
            except (OSError, ValueError, KeyError):
                continue
        return out

    def write_run(self, record: dict) -> None:
        """One finished run: its own file first, then runs.csv and curves.csv rebuilt from all of them."""
        write_json(self.run_file(record["row"], record["seed"]), record)
        self.write_tables(self.finished())

    def write_tables(self, finished: dict[tuple[int, int], dict]) -> None:
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
        _write_csv(self.path / "runs.csv", runs)
        _write_csv(self.path / "curves.csv", curves)

    def runs(self) -> pd.DataFrame:
        path = self.path / "runs.csv"
        return read_csv(path) if path.is_file() else pd.DataFrame(columns=RUN_COLUMNS)

    def curves(self) -> pd.DataFrame:
        path = self.path / "curves.csv"
        return read_csv(path) if path.is_file() else pd.DataFrame(columns=CURVE_COLUMNS)

    # -- summary -------------------------------------------------------------
    def write_summary(self, rows: list[dict]) -> None:
        _write_csv(self.path / "summary.csv", pd.DataFrame(rows, columns=SUMMARY_COLUMNS))

    def summary(self) -> pd.DataFrame:
        return read_csv(self.path / "summary.csv")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
