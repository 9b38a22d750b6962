"""Weights & Biases: one group per results folder, offline by default."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..core.errors import UserError
from . import records as rec

# ---------------------------------------------------------------------------
# Weights & Biases
# ---------------------------------------------------------------------------
WANDB_PROJECT = "modern-gpt"  # unless WANDB_PROJECT is set
WANDB_OFFLINE = ("offline", "dryrun", "disabled")  # WANDB_MODE values that never reach the network
WANDB_MODES = ("online", "offline", "dryrun", "disabled", "run", "shared")  # what wandb.init takes


def wandb_mode() -> str:
    """WANDB_MODE if set, else offline: an ablation never waits on a login prompt or the network."""
    return os.environ.get("WANDB_MODE") or "offline"


def wandb_root(folder: Path) -> Path:
    """Where the run folders go: WANDB_DIR, else the results folder (wandb adds wandb/offline-run-...)."""
    return Path(os.environ.get("WANDB_DIR") or folder)


def check_wandb() -> None:
    """Before anything trains: a mode that logs (disabled gives run ids and logs nothing, which the run files
    would record as logged), online mode has a key to log with, and WANDB_DIR (if set) is a writable folder."""
    if wandb_mode() == "disabled":
        raise UserError(
            "--track wandb with WANDB_MODE=disabled logs nothing, though it gives run ids; unset WANDB_MODE to log "
            "offline (wandb sync uploads later), or leave out --track wandb."
        )
    if wandb_mode() not in WANDB_MODES:
        raise UserError(
            f"--track wandb with WANDB_MODE={wandb_mode()}, which is not a W&B mode ({', '.join(WANDB_MODES)}); "
            "unset it to log offline."
        )
    if wandb_mode() not in WANDB_OFFLINE and not os.environ.get("WANDB_API_KEY") and not _netrc_key():
        raise UserError(
            f"--track wandb with WANDB_MODE={wandb_mode()} needs a W&B login (wandb login, or WANDB_API_KEY); "
            "leave WANDB_MODE unset to log offline and upload later with wandb sync."
        )
    where = os.environ.get("WANDB_DIR")
    if where and not (Path(where).is_dir() and os.access(where, os.W_OK)):
        raise UserError(f"--track wandb: WANDB_DIR={where} is not a writable folder; create it or unset it.")


def _netrc_key() -> bool:
    """A key saved by `wandb login` (in ~/.netrc, or the file NETRC names)."""
    import netrc

    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _wandb_tag(key: str, value) -> str:
    return f"{key}={value}"[:64]  # W&B's limit on a tag's length


class WandbBackend:
    """One W&B group per results folder, offline unless WANDB_MODE says otherwise (`wandb sync` uploads later):
    a run per (row, seed), its id the run's key (logging it again replaces it), then its row's verdict; and a
    run named "summary" with the verdict table (wandb.Table "verdicts"), summary.csv and the figures."""

    name = "wandb"

    def start(self, folder: Path, tracked: rec.Tracked) -> None:
        import wandb

        self.wandb, self.folder, self.tracked = wandb, Path(folder), tracked
        self.root = wandb_root(self.folder)
        train = tracked.plan == rec.TRAIN
        self.group = rec.TRAIN_EXPERIMENT if train else self.folder.name

    def _init(self, key: str, name: str, job_type: str, tags: list[str], config: dict):
        """A new W&B run with the id key, after removing an earlier attempt's offline folder of that id."""
        for old in (self.root / "wandb").glob(f"offline-run-*-{key}"):
            shutil.rmtree(old, ignore_errors=True)
        online = wandb_mode() not in WANDB_OFFLINE
        settings = self.wandb.Settings(console="off", silent=True, x_disable_stats=True, x_save_requirements=False)
        return self.wandb.init(
            project=self.project,
            group=self.group,
            name=name,
            id=key,
            job_type=job_type,
            tags=tags,
            config=config,
            dir=str(self.root),
            mode=wandb_mode(),
            resume="allow" if online else None,  # online, a second attempt continues the same run
            reinit="create_new",
            settings=settings,
        )

    def log_run(self, record: dict, verdict: str | None = None) -> str:
        """One run; with its row's verdict (log_summary), the same run again, the verdict in its config and tags
        (offline, its folder is written anew; online, the run is resumed and its history not sent twice)."""
        tags = rec.run_tags(self.tracked, record, self.folder)
        key = tags.pop("modern_gpt.key")
        if verdict is not None:
            key = rec.tracked_ids(record).get(self.name) or key  # the run its file records
        keys = (
            "folder",
            "plan",
            "row",
            "variant",
            *(("lr",) if rec.several_lrs(self.tracked) and "lr" in tags else ()),
        )
        labels = [_wandb_tag(k, tags[k]) for k in keys]
        config = {**{k: v for k, v in tags.items() if v}, **rec.run_params(self.tracked, record), "row": record["row"]}
        if verdict is not None:
            labels.append(_wandb_tag("verdict", verdict))
            config["verdict"] = verdict
        run = self._init(key, rec.run_name(self.tracked, record), "run", labels, config)
        try:
            if verdict is None or wandb_mode() in WANDB_OFFLINE:
                steps: dict[int, dict[str, float]] = {}
                for step, name, value in rec.curve(record):
                    steps.setdefault(step, {})[name] = value
                for step in sorted(steps):
                    run.log(steps[step], step=step)
            run.summary.update(rec.run_metrics(record))
        finally:
            run.finish(exit_code=1 if record.get("error") else 0)
        return run.id

    @property
    def project(self) -> str:
        return os.environ.get("WANDB_PROJECT") or WANDB_PROJECT

    def log_summary(self, folder: Path, summary: list, margins=None) -> None:
        """The summary run: the verdict table (variant, verdict, Δ, CI, p, p_adj, mde, reference: typed
        columns) and summary.csv as wandb.Table's, the figures, and each row's numbers in its summary
        (row02.verdict, row02.delta_val, ...); then every seed's run gets its row's verdict (log_run)."""
        rows = rec.named(rec.summary_cells(summary))
        key = rec.run_key(folder, self.tracked, None)
        plan = self.tracked.plan
        labels = [_wandb_tag("folder", Path(folder).name), _wandb_tag("plan", plan), "summary"]
        run = self._init(key, "summary", "summary", labels, {"folder": Path(folder).name, "plan": plan})
        try:
            logged = self._tables(rows) if rows else {}
            for path in rec.artifacts(folder):
                if path.suffix == ".png":
                    logged[path.stem] = self.wandb.Image(str(path))
            if logged:
                run.log(logged)
            verdicts = {}
            for row in rows:
                at = f"row{rec.row_tag(self.tracked, row):02d}"
                verdicts.update({f"{at}.variant": row["variant"], f"{at}.verdict": row.get("verdict") or ""})
                verdicts.update({f"{at}.{k}": v for k, v in rec.row_stats(row).items()})
            run.summary.update(verdicts)
        finally:
            run.finish()
        for record in rec.tracked_records(folder, self.name):
            row, counted = rec.row_of(rows, record)
            if counted and row.get("verdict"):  # the reference row has none
                self.log_run(record, row["verdict"])

    def _tables(self, rows: list[dict[str, str]]) -> dict:
        """The verdict table, its numbers typed (the W&B table sorts and plots them), and summary.csv's cells."""
        columns, cells = rec.verdict_columns(rows), list(rows[0])
        return {
            "verdicts": self.wandb.Table(columns=list(columns), data=rec.table_rows(columns)),
            "summary": self.wandb.Table(columns=cells, data=[[r.get(c, "") for c in cells] for r in rows]),
        }

    def close(self) -> None:
        self.wandb.teardown()  # stops wandb's service process: nothing of it outlives the ablation
