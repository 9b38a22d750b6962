"""What the tests share: the real console-script entry point run in process or as a subprocess, the flags of
a tiny run, and waiting for an ablation's runs. The pytest fixtures built on these are in conftest.py."""

import os
import signal
import subprocess
import sys
import time

from typer.testing import CliRunner

from modern_gpt.cli.commands import app, main

runner = CliRunner()
# A two-variant ablation, classic then RoPE (three rows with the placebo), two seeds each: six runs.
CLASSIC_ROPE = ["--seeds", "2", "--plan", "custom", "--variants", "classic;rope"]


def tiny(steps: int, eval_every: int | None = None, dim: int = 16, heads: int = 2, layers: int = 1) -> list[str]:
    """The flags of a tiny run on the built-in smoke corpus: context 16, a small model, a few steps."""
    shape = ["--context", "16", "--dim", str(dim), "--heads", str(heads), "--layers", str(layers)]
    return ["--smoke", "--steps", str(steps), "--eval-every", str(eval_every or steps), *shape]


def invoke(*args) -> str:
    """The typer app run through CliRunner, which must exit 0: its stdout."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


TIMING = [
    "secs",
    "tokens_per_s",
    "mfu",
]  # the only columns of runs.csv and summary.csv allowed to differ between identical runs


def run_values(folder, *, threads: bool = False):
    """runs.csv as a frame without what may differ between identical runs: the timing, and unless threads is
    asked for, the torch threads (--jobs auto and --jobs 1 pin them differently)."""
    import pandas as pd

    drop = TIMING if threads else [*TIMING, "threads"]
    return pd.read_csv(os.path.join(folder, "runs.csv")).drop(columns=drop)


def flat(text: str) -> str:
    """text with its whitespace removed, to find a sentence the console wrapped: under pytest -n a temporary path
    is longer, and the console breaks a line anywhere, inside a path too."""
    return "".join(text.split())


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


def main_ok(*args) -> None:
    """main() with argv set, which must exit 0, for the module and session fixtures that cannot use run_ok; the
    SIGTERM and SIGHUP handlers the command line installs are put back."""
    import pytest

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["modern-gpt", *map(str, args)])
        with pytest.raises(SystemExit) as e:
            main()
    for s, h in handlers.items():
        signal.signal(s, h)
    assert not e.value.code


# The verdict table a tracker's summary run holds (MLflow's verdicts.json, W&B's wandb.Table): its columns, in order
VERDICT_COLUMNS = ["variant", "verdict", "delta_val", "ci_low", "ci_high", "p", "p_adj", "mde", "reference"]


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored, and a child inherits that: the Ctrl-C tests
    # would then test nothing. Each command starts with the SIGINT a terminal user has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli_process(*args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "modern_gpt", *map(str, args)],
        env=env,
        text=True,
        preexec_fn=_default_sigint,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs},
    )


def cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = cli_process(*args)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def concurrently(start, cases, width: int = 2, timeout: float = 120) -> list[subprocess.CompletedProcess]:
    """start(case) -> a Popen for each case, at most `width` of them running at once (the test machine has two
    cores, and start-up is most of a short command's time): each one's CompletedProcess, in order, with its
    seconds; returncode None for one still running `timeout` seconds after it started (it is then killed). The
    commands' output is read one command at a time: it must be short (a pipe holds 64 KiB)."""
    results: list = [None] * len(cases)
    running: list[tuple[int, float, subprocess.Popen]] = []  # oldest first
    try:
        for i in range(len(cases) + width):
            if i < len(cases):
                running.append((i, time.time(), start(cases[i])))
            if len(running) == width or (i >= len(cases) and running):
                j, t0, proc = running[0]
                try:
                    out, err = proc.communicate(timeout=max(0.0, t0 + timeout - time.time()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, err = proc.communicate()
                    proc.returncode = None
                results[j] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
                results[j].seconds = time.time() - t0
                running.pop(0)
    finally:
        for _, _, proc in running:  # what is left when one failed
            proc.kill()
            proc.communicate()
    return results


def wait_for_runs(folder, n: int, proc: subprocess.Popen, limit: float = 120) -> None:
    """Until the ablation that proc writes into folder has n finished runs; fails if proc ends first."""
    deadline = time.time() + limit
    while len(list((folder / "runs").glob("*.json"))) < n:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)


class Quiet:
    """A display that shows nothing (every method a no-op)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def interrupt(folder, keep: int) -> None:
    """The folder as an interrupted ablation leaves it: the first `keep` runs (seed-major) kept, the rest gone."""
    files = sorted((folder / "runs").glob("*.json"), key=lambda f: (int(f.stem.split("seed")[1]), f.stem))
    for f in files[keep:]:
        f.unlink()
    import json

    meta = json.loads((folder / "meta.json").read_text())
    meta["status"] = "interrupted"
    (folder / "meta.json").write_text(json.dumps(meta))


def user_error(run, *args) -> str:
    """run(*args) (the run fixture), which must be a user error: its one-line stderr."""
    code, _, err = run(*args)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err
