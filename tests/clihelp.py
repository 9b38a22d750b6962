"""Running the real console-script entry point, in process or as a subprocess."""

import os
import signal
import subprocess
import sys

from modern_gpt.cli import main


def run_main(capsys, monkeypatch, *args) -> tuple[int, str, str]:
    """main() with argv set, as the console script runs it: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["modern-gpt", *map(str, args)])
    handler = signal.getsignal(signal.SIGTERM)
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        signal.signal(signal.SIGTERM, handler)
    out, err = capsys.readouterr()
    return code, out, err


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored, and a child inherits that: the Ctrl-C tests
    # would then test nothing. Each command starts with the SIGINT a terminal user has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli_process(*args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "modern_gpt", *map(str, args)],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint, **kwargs,
    )  # fmt: skip


def cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = cli_process(*args)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
