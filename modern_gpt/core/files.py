"""Atomic file writes, the checks on a folder about to be written, and the lock of a folder one process writes.

A write goes to a temporary file in the same folder, then a rename. So a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import subprocess
from pathlib import Path

from safetensors import SafetensorError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from .errors import UserError


def temporary_beside(path: Path) -> Path:
    """A name for a temporary file in path's folder, hidden and unique to this process."""
    return path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


@contextlib.contextmanager
def atomic_path(path: Path, failed=None):
    """Yields a temporary path beside `path`. On success it is renamed onto `path`, on failure removed.

    The temporary file gets the umask's permissions, not mkstemp's 0600. So it is as readable as any other
    file the user creates. A failed write (a full disk, a folder that cannot be written) is a UserError
    naming the folder. A caller may word an OSError itself with failed(error): a share page names its flag.
    """
    path = Path(path)
    tmp = temporary_beside(path)
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
        if failed is not None and isinstance(e, OSError):
            raise UserError(failed(e)) from None
        raise UserError(f"cannot write {path.name} in {path.parent}: {reason(e)}; {advice(e)}.") from None


def reason(e: BaseException) -> str:
    """Why a write failed, in a few words. An OSError's strerror, or the message inside safetensors' error."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e)
    found = re.search(r'message: "([^"]*)"', text)  # safetensors: IoError(Os { code: 28, ..., message: "..." })
    return found.group(1) if found else ((text.splitlines() or [type(e).__name__])[0][:120] or type(e).__name__)


def not_regular(path: Path) -> str | None:
    """What a path is, as a phrase, when it is not a regular file or a symbolic link to one. None when it is one,
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


FREE = "free some space or make the folder writable, or choose another folder"


def advice(e: BaseException, folder: str = "the folder", instead: str = "choose another folder") -> str:
    """What to do about a failed write, fitting its error. It tells a full disk, a folder that cannot be written,
    a read-only file system, and one that holds no new files (/proc). FREE where the error says nothing."""
    import errno

    code = getattr(e, "errno", None)
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return f"free some space on its disk or {instead}"
    if code in (errno.EACCES, errno.EPERM):
        return f"make {folder} writable or {instead}"
    if code == errno.EROFS:
        return f"its file system is read-only, so {instead}"
    if code is not None:
        return f"that folder cannot hold new files, so {instead}"
    return FREE


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, allow_nan=True) + "\n")


def check_name(path: Path, flag: str) -> None:
    """Each name in the path is within the file system's limit, 255 bytes on most. Otherwise the first stat or
    mkdir raises ENAMETOOLONG, a traceback where one sentence belongs."""
    at = Path(path).absolute()
    existing = next((p for p in (at, *at.parents) if os.path.isdir(p)), Path("/"))
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows), or the name is unknown here
        limit = 255
    for part in Path(path).parts:
        size = len(os.fsencode(part))
        if size > limit:
            raise UserError(
                f"{flag}: the name {part[:24]}… is {size} bytes, and this file system allows at most {limit}; "
                f"choose a shorter {flag}."
            )


def check_free(folder: Path, flag: str, force: bool, source: Path | None = None) -> None:
    """A folder to write a checkpoint or an export into. It is missing or empty, or holds files and --force is
    given. Never `source` (the checkpoint an export reads) or a folder in or above it. --force would replace
    its files."""
    check_name(folder, flag)
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


class FolderLock:
    """A folder taken by one process: an exclusive flock on its .lock file.

    The kernel releases a flock when its owner dies, however it dies. So a dead owner's lock is free, and two
    live processes can never both hold it. The pid written into the file only names the owner in messages.
    Without flock (Windows) there is no lock.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.path = self.folder / ".lock"
        self._fd: int | None = None

    def take(self) -> None:
        """Take the folder for this process, or refuse while another process holds it."""
        if fcntl is None:
            return
        while True:
            self._check_file()
            try:  # never through a link, never blocking (a pipe put there in the meantime)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
            except OSError as e:
                self._check_file()
                raise UserError(f"cannot write results to {self.folder}: {e.strerror or e}.") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                self._check_file()
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                owner = self.owner()
                who = f"pid {owner}" if owner else "its pid not yet written"
                raise UserError(
                    f"{self.folder} is being written by another modern-gpt process ({who}); "
                    "wait for it to finish or stop it first."
                ) from None
            if self._still_ours(fd):
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                self._fd = fd
                return
            os.close(fd)

    def _still_ours(self, fd: int) -> bool:
        """Whether the locked file is still .lock. The owner that unlocked it just before may have removed it."""
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while still holding it, so no one locks a file that is about to go
        os.close(fd)

    def _check_file(self) -> None:
        """.lock is missing or a regular file. Anything else is one sentence naming it: a folder, a link, or a
        pipe that would block every reader."""
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return
        except OSError as e:
            raise UserError(f"cannot read {self.path}: {e.strerror or e}.") from None
        if stat.S_ISREG(mode):
            return
        what = kind(mode)
        if stat.S_ISLNK(mode):
            target = os.readlink(self.path)
            what += f" to {target}" + ("" if os.path.exists(self.path) else ", which does not exist")
        raise UserError(f"{self.path} is {what}, not a lock file; remove it and run again.")

    def owner(self) -> int | None:
        """The pid of the live process that holds the lock, 0 if not written yet. None when no process holds it."""
        if fcntl is None:
            return None
        self._check_file()
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the check: say what it is now
                self._check_file()
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


def git_state(where: Path | None = None) -> tuple[str | None, bool | None]:
    """The commit of the git checkout that holds `where` (this package by default), and whether tracked files
    have uncommitted changes. (None, None) outside a checkout, or without git."""
    cwd = Path(where or Path(__file__).parent)  # this package's checkout by default
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if head.returncode != 0 or not head.stdout.strip():
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head.stdout.strip(), (bool(status.stdout.strip()) if status.returncode == 0 else None)
