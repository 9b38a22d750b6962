"""Weights & Biases: one group per results folder, offline by default."""

from __future__ import annotations

import os
import re
import shutil
import struct
import time
import zlib
from pathlib import Path

from ..core.errors import UserError
from .records import (
    TRAIN,
    TRAIN_EXPERIMENT,
    Tracked,
    artifacts,
    curve,
    named,
    row_of,
    row_stats,
    row_tag,
    run_key,
    run_metrics,
    run_name,
    run_params,
    run_tags,
    several_lrs,
    summary_cells,
    table_rows,
    tracked_ids,
    tracked_records,
    verdict_columns,
)

# ---------------------------------------------------------------------------
# Weights & Biases
# ---------------------------------------------------------------------------
WANDB_PROJECT = "modern-gpt"  # unless WANDB_PROJECT is set
WANDB_OFFLINE = ("offline", "dryrun", "disabled")  # WANDB_MODE values that never reach the network
WANDB_MODES = ("online", "offline", "dryrun", "disabled", "run", "shared")  # what wandb.init takes
LOG_HEADER = b":W&B\xe1\xbe\x00"  # an offline run's log (run-<id>.wandb): ":W&B", 0xBEE1 (little-endian), version 0
LOG_BLOCK = 32 * 1024
LOG_WAIT_S = 10.0  # how long a finished offline run's log may take to be written out (wandb-core writes it late)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4  # a log record's types: a whole record, or its parts


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


def _offline_logs(root: Path, run_id: str) -> list[Path]:
    """The logs (run-<id>.wandb) of the offline run folders of this id under root/wandb."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", run_id):  # a hand-edited id: no folder of it (and no glob pattern)
        return []
    return [log for log in (root / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb") if log.is_file()]


def _offline_log(root: Path, run_id: str, needs: str | None = "val_loss") -> bool:
    """An offline run folder of this id under root/wandb whose log reads back to its end (_log_records) as the
    run of this id, finished (its exit record), with `needs` in its summary (a seed's run: its final val_loss,
    which log_run always writes; None for the summary run)."""
    for log in _offline_logs(root, run_id):
        records = _log_records(log) or []
        kinds: dict[str, list] = {}
        for record in records:
            kinds.setdefault(record.WhichOneof("record_type"), []).append(record)
        summary = {i.key for r in kinds.get("summary", []) for i in r.summary.update}
        ours = any(r.run.run_id == run_id for r in kinds.get("run", []))
        if ours and "exit" in kinds and (needs is None or needs in summary):
            return True
    return False


def _log_records(path: Path) -> list | None:
    """The records of an offline run's log, parsed with wandb's own protobuf messages (wandb.proto), or None where
    the file is not read to its end without a corrupt record. wandb 0.2x and 0.3x have no Python reader of the
    log (wandb-core, in Go, writes it), so its framing, LevelDB's log, is read here (_log_chunks)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    try:
        data = path.read_bytes()
    except OSError:
        return None
    out, parts = [], []
    for kind, chunk in _log_chunks(data):
        if kind is None or (kind in (FULL, FIRST)) == bool(parts):  # corrupt, or a part out of its order
            return None
        parts.append(chunk)
        if kind in (FULL, LAST):
            try:
                out.append(pb.Record.FromString(b"".join(parts)))
            except DecodeError:
                return None
            parts = []
    return None if parts else out


def _log_chunks(data: bytes):
    """(type, data) of each record of a W&B log: a 7-byte header (":W&B", 0xBEE1, version 0), then 32 KiB blocks
    of records, each a CRC-32 of its type and data, a 2-byte length, a 1-byte type (full, or a first, middle or
    last part) and its data; a block's last 6 bytes or fewer are zeros. (None, b"") at a corrupt one."""
    if not data.startswith(LOG_HEADER):
        yield None, b""
        return
    pos = len(LOG_HEADER)
    while pos < len(data):
        room = LOG_BLOCK - pos % LOG_BLOCK
        if room < 7:  # too little for a record's header: zeros to the block's end
            if data[pos : pos + room].strip(b"\0"):
                yield None, b""
                return
            pos += room
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7].ljust(7, b"\0"))
        chunk = data[pos + 7 : pos + 7 + length]
        if kind not in (FULL, FIRST, MIDDLE, LAST) or len(chunk) < length or length > room - 7:
            yield None, b""  # cut short, or bytes of something else
            return
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            yield None, b""
            return
        yield kind, chunk
        pos += 7 + length


def _wandb_tag(key: str, value) -> str:
    return f"{key}={value}"[:64]  # W&B's limit on a tag's length


class WandbBackend:
    """Offline unless WANDB_MODE says otherwise: nothing reaches the network and no login is needed; `wandb sync`
    uploads the run folders later. An ablation is one W&B group (named after its results folder) in the project modern-gpt
    (or WANDB_PROJECT): one W&B run per (row, seed), tagged folder=, plan=, row= and variant=, with its settings as
    config, its curves as history and its final metrics in its summary, and once the table is written its row's
    verdict (config.verdict and a tag verdict=); and one run named "summary" (job type summary) holding the
    verdict table (wandb.Table "verdicts": variant, verdict, delta_val, ci_low, ci_high, p, p_adj, mde, reference,
    its numbers typed) and summary.csv as tables, curves.png and lr.png as images, and each row's Δ, CI, p,
    p_adj, mde and verdict in its summary (rowNN.verdict), which the W&B runs table shows and filters.

    A run's W&B id is its run_key, so logging it again (a kill after logging and before its run file was
    written) replaces the earlier offline folder instead of adding a second run."""

    name = "wandb"

    def start(self, folder: Path, tracked: Tracked) -> None:
        import wandb

        self.wandb, self.folder, self.tracked = wandb, Path(folder), tracked
        self.root = wandb_root(self.folder)
        train = tracked.plan == TRAIN
        self.group = TRAIN_EXPERIMENT if train else self.folder.name
        self.damaged: set[str] = set()  # run ids whose offline log held() found, and could not read back

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
        """One run; with its row's verdict (log_summary), the same run again, the verdict in its config and
        tags: offline, its folder is written anew (an offline run cannot be reopened); online, the run is
        resumed and its history, already there, is not sent twice."""
        tags = run_tags(self.tracked, record, self.folder)
        key = tags.pop("modern_gpt.key")
        if verdict is not None:
            key = tracked_ids(record).get(self.name) or key  # the run its file records
        keys = ("folder", "plan", "row", "variant", *(("lr",) if several_lrs(self.tracked) and "lr" in tags else ()))
        labels = [_wandb_tag(k, tags[k]) for k in keys]
        config = {**{k: v for k, v in tags.items() if v}, **run_params(self.tracked, record), "row": record["row"]}
        if verdict is not None:
            labels.append(_wandb_tag("verdict", verdict))
            config["verdict"] = verdict
        run = self._init(key, run_name(self.tracked, record), "run", labels, config)
        try:
            if verdict is None or wandb_mode() in WANDB_OFFLINE:
                steps: dict[int, dict[str, float]] = {}
                for step, name, value in curve(record):
                    steps.setdefault(step, {})[name] = value
                for step in sorted(steps):
                    run.log(steps[step], step=step)
            run.summary.update(run_metrics(record))
        finally:
            run.finish(exit_code=1 if record.get("error") else 0)
        self._written(run.id, "val_loss")
        return run.id

    def _written(self, run_id: str, needs: str | None) -> None:
        """Offline, wait until the run's log reads back (_offline_log): wandb's finish returns before wandb-core
        has written it out (seen: its 7-byte header alone, for a run logged in the same process as another)."""
        deadline = time.monotonic() + LOG_WAIT_S
        while wandb_mode() in WANDB_OFFLINE and not _offline_log(self.root, run_id, needs):
            if time.monotonic() > deadline:
                return  # held() then finds no such run: the tracker failed
            time.sleep(0.02)

    def held(self, ids: list[str]) -> set[str]:
        """Of these run ids, those W&B holds now: offline, an offline-run folder with its log under the root runs
        go to now (WANDB_DIR or the results folder); online, a run of the project that W&B's API finds."""
        if wandb_mode() in WANDB_OFFLINE:
            out = {i for i in ids if _offline_log(self.root, i)}
            self.damaged = (self.damaged - out) | {i for i in ids if i not in out and _offline_logs(self.root, i)}
            return out
        from wandb.apis.public.runs import RunNotFoundError

        api = self.wandb.Api(timeout=15)
        entity = os.environ.get("WANDB_ENTITY") or api.default_entity
        out = set()
        for i in ids:
            try:
                api.run(f"{entity}/{self.project}/{i}")
                out.add(i)
            except RunNotFoundError:  # any other error is the tracker's failure (Tracking switches it off)
                pass
        return out

    def holds_summary(self) -> bool:
        key = run_key(self.folder, self.tracked, None)
        if wandb_mode() in WANDB_OFFLINE:
            return _offline_log(self.root, key, needs=None)
        return bool(self.held([key]))

    @property
    def where(self) -> str:
        """Where held() looks, for the sentence that says what it lacks."""
        if wandb_mode() not in WANDB_OFFLINE:
            return f"in the project {self.project}"
        n = len(self.damaged)
        if not n:
            return f"offline, in {self.root / 'wandb'}"
        its = "its offline run folder, replaced" if n == 1 else "their offline run folders, replaced"
        return f"offline, in {self.root / 'wandb'}; the logs of {n} of them do not read back: {its}"

    @property
    def project(self) -> str:
        return os.environ.get("WANDB_PROJECT") or WANDB_PROJECT

    def log_summary(self, folder: Path, summary: list, margins=None) -> None:
        """The summary run: the verdict table (variant, verdict, Δ, CI, p, p_adj, mde, reference: typed
        columns) and summary.csv as wandb.Table's, the figures, and each row's numbers in its summary
        (row02.verdict, row02.delta_val, ...); then every seed's run gets its row's verdict (log_run)."""
        rows = named(summary_cells(summary))
        key = run_key(folder, self.tracked, None)
        plan = self.tracked.plan
        labels = [_wandb_tag("folder", Path(folder).name), _wandb_tag("plan", plan), "summary"]
        run = self._init(key, "summary", "summary", labels, {"folder": Path(folder).name, "plan": plan})
        try:
            logged = self._tables(rows) if rows else {}
            for path in artifacts(folder):
                if path.suffix == ".png":
                    logged[path.stem] = self.wandb.Image(str(path))
            if logged:
                run.log(logged)
            verdicts = {}
            for row in rows:
                at = f"row{row_tag(self.tracked, row):02d}"
                verdicts.update({f"{at}.variant": row["variant"], f"{at}.verdict": row.get("verdict") or ""})
                verdicts.update({f"{at}.{k}": v for k, v in row_stats(row).items()})
            run.summary.update(verdicts)
        finally:
            run.finish()
        self._written(key, None)
        for record in tracked_records(folder, self.name):
            row, counted = row_of(rows, record)
            if counted and row.get("verdict"):  # the reference row has none
                self.log_run(record, row["verdict"])

    def _tables(self, rows: list[dict[str, str]]) -> dict:
        """The verdict table, its numbers typed (the W&B table sorts and plots them), and summary.csv's cells."""
        columns, cells = verdict_columns(rows), list(rows[0])
        return {
            "verdicts": self.wandb.Table(columns=list(columns), data=table_rows(columns)),
            "summary": self.wandb.Table(columns=cells, data=[[r.get(c, "") for c in cells] for r in rows]),
        }

    def close(self) -> None:
        self.wandb.teardown()  # stops wandb's service process: nothing of it outlives the ablation
