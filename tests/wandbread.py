"""W&B's offline run folders read back: the records of a run-<id>.wandb file, parsed with wandb's own protobuf
messages (wandb.proto). wandb 0.31 has no Python reader of its log format any more (the Go core writes it), so
the framing is read here: a 7-byte header (":W&B", 0xBEE1, version 0), then LevelDB-log records in 32 KiB
blocks, each a 4-byte checksum, a 2-byte length, a 1-byte type (full, first, middle, last) and its data."""

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BLOCK = 32 * 1024
HEADER = 7  # each record's and the file's
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list:
    """Every wandb_internal_pb2.Record in the file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1 and data[6] == 0, data[:7]
    out, pos, parts = [], HEADER, []
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        if kind == 0 and length == 0:  # zero padding
            pos += BLOCK - pos % BLOCK
            continue
        parts.append(data[pos + 7 : pos + 7 + length])
        pos += HEADER + length
        assert kind in (FULL, FIRST, MIDDLE, LAST), kind
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            out.append(record)
            parts = []
    return out


@dataclass
class Run:
    """What an offline W&B run holds: its identity, config, history rows and final summary."""

    id: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    exit_code: int | None = None
    folder: Path | None = None


def _items(items) -> dict:
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in items}


def read(folder: Path) -> Run:
    """One offline-run-<time>-<id> folder."""
    run = Run(folder=Path(folder))
    for r in records(next(Path(folder).glob("run-*.wandb"))):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run.id, run.name, run.group, run.job_type = (
                r.run.run_id,
                r.run.display_name,
                r.run.run_group,
                r.run.job_type,
            )
            run.tags = list(r.run.tags)
            run.config.update(_items(r.run.config.update))
        elif kind == "config":
            run.config.update(_items(r.config.update))
        elif kind == "history":
            run.history.append(_items(r.history.item))
        elif kind == "summary":
            run.summary.update(_items(r.summary.update))
        elif kind == "exit":
            run.exit_code = r.exit.exit_code
    run.config = {k: v.get("value", v) if isinstance(v, dict) else v for k, v in run.config.items()}
    return run


def runs(root: Path) -> list[Run]:
    """Every offline run under root/wandb (root: WANDB_DIR or the results folder)."""
    return [read(f) for f in sorted((Path(root) / "wandb").glob("offline-run-*")) if f.is_dir()]


def offline_env(mp: pytest.MonkeyPatch, root: Path) -> None:
    """W&B offline, writing only under root: no login, no network, nothing in the user's home."""
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "MLFLOW_TRACKING_URI"):
        mp.delenv(name, raising=False)
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    mp.setenv("WANDB_DIR", str(root))
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        mp.setenv(name, str(root / name.lower()))
