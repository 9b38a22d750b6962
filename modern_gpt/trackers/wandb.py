"""Weights & Biases: one group per results folder, offline unless WANDB_MODE says otherwise. `wandb sync`
uploads later. A run per (row, seed), its id the run's key, later its row's verdict; a run named "summary"."""

from __future__ import annotations

import netrc
import os
import shutil
from pathlib import Path

from ..core.errors import UserError
from . import records as rec

WANDB_OFFLINE = ("offline", "dryrun", "disabled")  # WANDB_MODE values that never reach the network
WANDB_MODES = ("online", "offline", "dryrun", "disabled", "run", "shared")  # what wandb.init takes


def wandb_mode() -> str:
    """WANDB_MODE if set, else offline. An ablation never waits on a login prompt or the network."""
    return os.environ.get("WANDB_MODE") or "offline"


def check_wandb() -> None:
    """Before anything trains: a mode that logs, a key to log with online, and WANDB_DIR a writable folder."""
    mode, where, why = wandb_mode(), os.environ.get("WANDB_DIR"), ""
    if mode == "disabled":  # run ids for nothing, which the run files would record as logged
        why = "logs nothing, though it gives run ids; unset WANDB_MODE to log offline (wandb sync uploads later)"
    elif mode not in WANDB_MODES:
        why = f"which is not a W&B mode ({', '.join(WANDB_MODES)}); unset it to log offline"
    elif mode not in WANDB_OFFLINE and not os.environ.get("WANDB_API_KEY") and not _netrc_key():
        why = "needs a W&B login (wandb login, or WANDB_API_KEY); leave WANDB_MODE unset to log offline"
    if why:
        raise UserError(f"--track wandb with WANDB_MODE={mode}{',' if mode not in WANDB_MODES else ''} {why}.")
    if where and not (Path(where).is_dir() and os.access(where, os.W_OK)):
        raise UserError(f"--track wandb: WANDB_DIR={where} is not a writable folder; create it or unset it.")


def _netrc_key() -> bool:
    """A key saved by `wandb login`, in ~/.netrc or the file NETRC names."""
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _label(key: str, value) -> str:
    return f"{key}={value}"[:64]  # W&B's limit on a tag's length


class WandbBackend:
    name = "wandb"

    def start(self, folder: Path, tracked: rec.Tracked) -> None:
        import wandb

        self.wandb, self.folder, self.tracked = wandb, Path(folder), tracked
        self.root = Path(os.environ.get("WANDB_DIR") or folder)  # wandb adds wandb/offline-run-...
        self.group = rec.TRAIN_EXPERIMENT if tracked.plan == rec.TRAIN else self.folder.name

    def _init(self, key: str, name: str, job_type: str, tags: list[str], config: dict):
        """A new W&B run with the id key. An earlier attempt's offline folder of that id is removed first."""
        for old in (self.root / "wandb").glob(f"offline-run-*-{key}"):
            shutil.rmtree(old, ignore_errors=True)
        resume = "allow" if wandb_mode() not in WANDB_OFFLINE else None  # online, an attempt continues the run
        settings = self.wandb.Settings(console="off", silent=True, x_disable_stats=True, x_save_requirements=False)
        project, where = os.environ.get("WANDB_PROJECT") or "modern-gpt", str(self.root)
        run = dict(project=project, group=self.group, name=name, id=key, job_type=job_type, tags=tags, config=config)
        return self.wandb.init(
            **run, dir=where, mode=wandb_mode(), resume=resume, reinit="create_new", settings=settings
        )

    def log_run(self, record: dict, verdict: str | None = None) -> str:
        """One run. With its row's verdict (log_summary), the same run again, the verdict in its config and tags.
        Offline its folder is written anew; online it is resumed, its history not sent twice."""
        tags = rec.run_tags(self.tracked, record, self.folder)
        key = tags.pop("modern_gpt.key")
        if verdict is not None:
            key = rec.tracked_ids(record).get(self.name) or key  # the run its file records
        keys = ["folder", "plan", "row", "variant"] + (["lr"] if rec.several_lrs(self.tracked) and "lr" in tags else [])
        labels = [_label(k, tags[k]) for k in keys] + ([_label("verdict", verdict)] if verdict is not None else [])
        config = {**{k: v for k, v in tags.items() if v}, **rec.run_params(self.tracked, record), "row": record["row"]}
        config |= {"verdict": verdict} if verdict is not None else {}
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

    def log_summary(self, folder: Path, rows: list, metrics: list, margins=None) -> None:
        """The summary run: the wandb.Tables "verdicts", "metrics" (each further metric's) and "summary", the
        figures, each row's verdicts and numbers (row02.verdict, row02.code_loss.delta, ...). Then each seed's run
        gets its row's verdict."""
        config, key = {"folder": Path(folder).name, "plan": self.tracked.plan}, rec.run_key(folder, self.tracked, None)
        run = self._init(key, "summary", "summary", [*(_label(k, v) for k, v in config.items()), "summary"], config)
        try:
            logged = {}
            for table, cells, metric in (("verdicts", rows, False), ("metrics", metrics, True)):
                if cells:
                    names, data = rec.verdict_columns(cells, metric)
                    logged[table] = self.wandb.Table(columns=names, data=data)
            if rows:
                logged["summary"] = self.wandb.Table(columns=list(rows[0]), data=[list(r.values()) for r in rows])
            logged |= {p.stem: self.wandb.Image(str(p)) for p in rec.artifacts(folder) if p.suffix == ".png"}
            if logged:
                run.log(logged)
            for row in rows:
                at = f"row{rec.row_tag(self.tracked, row):02d}"
                numbers = {"variant": row["variant"], "verdict": row.get("verdict") or "", **rec.row_stats(row)}
                numbers |= {k: v for part in rec.metric_stats(metrics, row["variant"]) for k, v in part.items()}
                run.summary.update({f"{at}.{k}": v for k, v in numbers.items()})
        finally:
            run.finish()
        for record in rec.tracked_records(folder, self.name):
            row, counted = rec.row_of(rows, record)
            if counted and row.get("verdict"):  # the reference row has none
                self.log_run(record, row["verdict"])

    def close(self) -> None:
        self.wandb.teardown()  # stops wandb's service process: nothing of it outlives the ablation
