"""Atomic file writes (a temporary file in the same folder, then a rename, so a reader never sees half a file),
and the checks on a folder about to be written."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
from pathlib import Path

from safetensors import SafetensorError

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
    except (OSError, SafetensorError) as e:  # safetensors' writer reports a full disk as its own error
        raise UserError(f"cannot write {path.name} in {path.parent}: {reason(e)}; {FREE}") from None


def reason(e: BaseException) -> str:
    """Why a write failed, in a few words: an OSError's strerror, or the message inside safetensors' error."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e)
    found = re.search(r'message: "([^"]*)"', text)  # safetensors: IoError(Os { code: 28, ..., message: "..." })
    return found.group(1) if found else ((text.splitlines() or [type(e).__name__])[0][:120] or type(e).__name__)


def not_regular(path: Path) -> str | None:
    """What a path is when it is not a regular file (or a symbolic link to one), as a phrase; None when it is one,
    or when nothing is there. A pipe (FIFO) or a device must never be opened for reading: it can block forever."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a dangling symbolic link" if os.path.islink(path) else None
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    return None if stat.S_ISREG(mode) else kind(mode)


def kind(mode: int) -> str:
    """A file type in words, from a stat mode."""
    for test, words in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "not a regular file"


FREE = "free some space or make the folder writable, or choose another folder."


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, allow_nan=True) + "\n")


def check_free(folder: Path, flag: str, force: bool, source: Path | None = None) -> None:
    """A folder to write a checkpoint or an export into: missing or empty, or holding files and --force given.
    Never `source` (the checkpoint an export reads), nor a folder in or above it: --force would replace its files."""
    if source is not None:
        try:
            a, b = folder.resolve(), Path(source).resolve()
        except (RuntimeError, OSError) as e:  # Python 3.11 raises RuntimeError for a symbolic link loop
            raise UserError(f"{flag} {folder} cannot be followed ({e}); choose another {flag}.") from None
        if a == b or b in a.parents or a in b.parents:
            raise UserError(
                f"{flag} {folder} is the checkpoint's folder {source}, or in or above it; choose another {flag}."
            )
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} exists and is not a folder; choose another {flag}.")
    try:
        holds = folder.is_dir() and any(folder.iterdir())
    except OSError as e:  # a folder another user owns, mode 700
        raise UserError(f"cannot read the folder {folder}: {e.strerror or e}; choose another {flag}.") from None
    if holds and not force:
        raise UserError(
            f"{folder} already exists and holds files; choose another {flag}, or add --force to replace them."
        )
