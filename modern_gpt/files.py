"""Atomic file writes: a temporary file in the same folder, then a rename, so a reader never sees half a file."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path

from .errors import UserError


@contextlib.contextmanager
def atomic_path(path: Path):
    """Yields a temporary path beside `path`; on success it is renamed onto `path`, on failure removed.

    The temporary file is created with the umask's permissions (not mkstemp's 0600), so that what is
    written is as readable as any other file the user creates. A write that fails (a full disk, a
    folder that cannot be written) is a UserError naming the folder.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # 0o666 less the umask
            mode = os.stat(tmp).st_mode & 0o777
            yield tmp
            os.chmod(tmp, mode)  # a writer that replaced the file (safetensors does) may have left 0600
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())  # the bytes reach the disk before the name does
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except OSError as e:
        raise UserError(f"cannot write {path.name} in {path.parent}: {e.strerror or e}; {FREE}") from None


FREE = "free some space or make the folder writable, or choose another folder."


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, allow_nan=True) + "\n")
