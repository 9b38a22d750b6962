"""Other processes: a signal stops a command quietly and an ablation promptly, saying how to resume; a results
folder's lock has one owner, live or dead; a worker killed from outside has its run started again."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from modern_gpt.ablation.results import ResultsDir
from tests.clihelp import CLASSIC_ROPE, cli_process, invoke, wait_for_runs
from tests.errhelp import ABLATE, assert_user_error

# Fifteen runs (classic, its placebo and +rope, 5 seeds) of a third of the smoke's steps: the resume below is quick,
# and twelve runs still to go after the third leave the signal time to land on a busy machine (with nine, a slow
# poll once saw the ablation finish first: exit 0, not 130)
INTERRUPTED = ["--smoke", "--seeds", "5", "--steps", "30", "--eval-every", "30", "--plan", "custom", "--variants"]
SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"]


def _interruptible(folder, *jobs) -> subprocess.Popen:
    return cli_process("ablate", *INTERRUPTED, "classic;rope", "--out", folder, *jobs, start_new_session=True)


@pytest.fixture(scope="module")
def signalled(tmp_path_factory) -> dict:
    """One ablation per signal, all at once (each trains in its own process, on one core): each is sent its signal
    once it has three finished runs. how -> (folder, exit code, stderr, seconds from the signal to the exit)."""
    procs = {how: (tmp_path_factory.mktemp(how) / "r",) for how in SIGNALS}
    procs = {how: (folder, _interruptible(folder)) for how, (folder,) in procs.items()}
    sent, ended, deadline = {}, {}, time.time() + 150
    try:
        while len(ended) < len(procs):
            for how, (folder, proc) in procs.items():
                if how not in sent and proc.poll() is None and len(list((folder / "runs").glob("*.json"))) >= 3:
                    proc.send_signal(getattr(signal, how))
                    sent[how] = time.time()
                if how not in ended and proc.poll() is not None:
                    ended[how] = time.time()
            assert time.time() < deadline, (sent, ended)
            time.sleep(0.02)
    finally:
        for _, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return {
        how: (folder, proc.returncode, proc.communicate()[1], ended[how] - sent.get(how, -math.inf))
        for how, (folder, proc) in procs.items()
    }


@pytest.mark.slow
@pytest.mark.parametrize("how", [*SIGNALS, "SIGINT to the group, --jobs 2"])
def test_interrupts_stop_promptly_keep_finished_runs_and_say_how_to_resume(request, tmp_path, how):
    if "group" in how:
        folder = tmp_path / "r"
        proc = _interruptible(folder, "--jobs", "2")
        wait_for_runs(folder, 3, proc)
        sent = time.time()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        _, err = proc.communicate(timeout=30)
        code, secs = proc.returncode, time.time() - sent
    else:
        folder, code, err, secs = request.getfixturevalue("signalled")[how]
    assert math.isfinite(secs), "it ended before its signal was sent"  # a slow stop: pytest-timeout's to catch
    assert code == 130, err
    assert "Traceback" not in err
    assert f"Resume with: modern-gpt ablate --resume {folder}" in err
    kept = len(list((folder / "runs").glob("*.json")))
    meta = json.loads((folder / "meta.json").read_text())
    total = len(meta["variants"]) * 5
    assert total == 15 and kept >= 3 and f"{kept} of {total} runs finished and kept" in err
    assert meta["status"] == "interrupted"
    assert not (folder / ".lock").exists()
    if "group" not in how:
        return
    invoke("ablate", "--resume", folder)  # in this process: what is tested here is the folder the signal left
    assert len(pd.read_csv(folder / "runs.csv")) == total


@pytest.mark.slow
def test_an_ablation_leaves_no_process_behind(tmp_path):
    """The workers' fork server ends with the command (executors.stop_server): communicate() returns once every
    holder of the command's pipes has closed them, and then nothing of its session is left running (a zombie is
    dead already: reaping it is init's work, and in some containers PID 1 does it late)."""
    short = ["--steps", "5", "--eval-every", "5", "--eval-tokens", "1024", "--plan", "custom", "--variants", "rope"]
    args = ("ablate", "--smoke", "--seeds", "2", *short, "--jobs", "2", "--out", tmp_path / "r")
    proc = cli_process(*args, start_new_session=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert len(pd.read_csv(tmp_path / "r" / "runs.csv")) == 4
    running = [p for p in Path("/proc").glob("[0-9]*") if _state_in_session(p, proc.pid) not in (None, "Z")]
    assert running == [], [(p / "cmdline").read_bytes() for p in running]


@pytest.mark.slow
def test_a_tmpdir_too_long_for_the_fork_servers_socket_spawns_the_workers_instead(tmp_path, monkeypatch):
    """The fork server listens on a Unix socket in TMPDIR, whose path may hold about 100 bytes; a longer TMPDIR
    (a cluster's per-job folder) made it raise AF_UNIX path too long, a traceback. The workers are then spawned,
    as where there is no fork server, and the values are those of --jobs 1."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    short = ["--steps", "5", "--eval-every", "5", "--eval-tokens", "1024", *CLASSIC_ROPE]
    args = ("ablate", "--smoke", *short, "--no-placebo")  # 2 seeds of classic and rope: 4 runs
    monkeypatch.setenv("TMPDIR", str(deep))
    proc = cli_process(*args, "--jobs", "2", "--out", tmp_path / "pool")
    monkeypatch.delenv("TMPDIR")
    invoke(*args, "--jobs", "1", "--out", tmp_path / "one")  # the reference, in this process meanwhile
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err
    columns = ["row", "seed", "train_loss", "val_loss"]
    pool, one = (pd.read_csv(tmp_path / f / "runs.csv")[columns] for f in ("pool", "one"))
    assert len(pool) == 4
    pd.testing.assert_frame_equal(pool, one)


def _state_in_session(proc_dir: Path, session: int) -> str | None:
    """The state letter of the process proc_dir when it belongs to the session, else None."""
    try:  # /proc/PID/stat: "pid (comm) state ppid pgrp session ...", comm may hold spaces
        fields = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0] if fields[3] == str(session) else None


# A sitecustomize.py for the command's process: the first import of $HELD_IMPORT touches $HELD_FILE and then
# waits a minute, so that a SIGINT sent once the file exists lands inside that import, however fast the machine.
HOLD_AN_IMPORT = """
import os, sys, time


class Hold:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["HELD_IMPORT"]:
            sys.meta_path.remove(self)
            open(os.environ["HELD_FILE"], "w").close()
            time.sleep(60)
        return None


sys.meta_path.insert(0, Hold())
"""


@pytest.mark.slow
def test_ctrl_c_during_start_up_is_quiet(tmp_path, monkeypatch):
    """Ctrl-C while cli.py loads (before main() has a handler: __main__.py's catches it) and while a command
    loads torch (main()'s): exit 130 with one line, no traceback. The signal is sent only while the command is
    held inside that import, so the test cannot pass by the command finishing first."""
    (tmp_path / "sitecustomize.py").write_text(HOLD_AN_IMPORT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.chdir(tmp_path)  # train writes its checkpoint here, were it ever to get that far
    for module, args in (("modern_gpt.cli.commands", ["params"]), ("torch", ["train", "--smoke", "--steps", "1"])):
        held = tmp_path / f"holding-{module}"
        monkeypatch.setenv("HELD_IMPORT", module)
        monkeypatch.setenv("HELD_FILE", str(held))
        proc = cli_process(*args)
        deadline = time.monotonic() + 60
        while not held.exists():
            assert proc.poll() is None, f"{args} ended without importing {module}: {proc.communicate()}"
            assert time.monotonic() < deadline, f"{args} did not import {module} within a minute"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, (module, proc.returncode, err)
        assert err.strip() == "modern-gpt: interrupted" and out == "", (module, out, err)


@pytest.mark.slow
def test_a_live_writer_locks_the_folder_and_a_dead_ones_lock_is_taken_over(run, tmp_path):
    folder = tmp_path / "r"
    # Its first run finishes soon (30 steps), and the 79 runs after it outlast the second command (in this process).
    proc = cli_process("ablate", "--smoke", "--seeds", "10", "--steps", "30", "--eval-every", "30", "--out", folder)
    try:
        wait_for_runs(folder, 1, proc)
        code, _, err = run("ablate", "--resume", folder)
        assert code == 2 and proc.poll() is None, err  # refused while the writer still ran
        assert f"is being written by another modern-gpt process (pid {proc.pid})" in err
    finally:
        proc.kill()
        proc.wait()
    assert (folder / ".lock").read_text() == str(proc.pid)  # SIGKILL left the lock behind
    results = ResultsDir(folder)
    results.lock()  # the owner is dead: taken over
    assert (folder / ".lock").read_text() == str(os.getpid())
    results.unlock()
    assert not (folder / ".lock").exists()


@pytest.mark.slow
def test_the_report_tells_a_dead_or_live_writer(run, made, tmp_path):
    folder = made("r", tmp_path / "r")  # a copy of the session's tiny ablation (errhelp.ABLATE)
    meta = json.loads((folder / "meta.json").read_text())
    meta["status"] = "running"  # what a SIGKILLed ablation leaves
    (folder / "meta.json").write_text(json.dumps(meta))
    code, out, err = run("report", folder)
    assert code == 0 and "stopped before the end (it holds no lock)" in out
    holder = cli_process_python(
        f"from modern_gpt.ablation.results import ResultsDir; r = ResultsDir({str(folder)!r}); r.lock(); print('locked', flush=True); input()"
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, out, err = run("report", folder)
        assert code == 0 and f"Still running (pid {holder.pid})" in out
        assert_user_error(run(*ABLATE, "--out", folder), f"pid {holder.pid}")
        assert_user_error(run("ablate", "--resume", folder), f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()


def cli_process_python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_odd_lock_files(run, made, tmp_path):
    folder = made("r", tmp_path / "r")
    (folder / ".lock").write_text("99999999999999999999")  # an impossible pid, left by no live process
    assert run("ablate", "--resume", folder)[0] == 0
    (folder / ".lock").mkdir()
    assert_user_error(run("ablate", "--resume", folder), ".lock is a folder")  # refused before any progress line


def _contend(folder: str, barrier, outcomes) -> None:
    """Take the folder's lock at the instant the barrier opens; while holding it, no other holder may exist."""
    from modern_gpt.core.errors import UserError

    results = ResultsDir(folder)
    barrier.wait()
    try:
        results.lock()
    except UserError:
        outcomes.put("refused")
        return
    try:  # a second holder's O_EXCL would fail while the first holds the token
        fd = os.open(os.path.join(folder, "token"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        outcomes.put("overlap")
        return
    time.sleep(0.05)
    os.close(fd)
    os.unlink(os.path.join(folder, "token"))
    results.unlock()
    outcomes.put("held")


@pytest.mark.slow
def test_the_lock_has_one_owner_when_processes_contend_at_the_same_instant(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("fork")  # the children use no torch: forking is safe, and starts them at once
    for trial in range(10):
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        barrier, outcomes = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_contend, args=(str(folder), barrier, outcomes)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        results = sorted(outcomes.get(timeout=10) for _ in procs)
        assert "overlap" not in results and results.count("held") >= 1, results
        assert all(p.exitcode == 0 for p in procs)
        assert not (folder / ".lock").exists()  # every holder unlocked


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
@pytest.mark.parametrize("killed", ["a worker", "the fork server and a worker"])
def test_a_worker_killed_from_outside_has_its_run_started_again_and_the_ablation_ends(tmp_path, killed):
    """kill -9 of one pool process: its run is started again (--max-retries), the ablation ends, and every run is
    recorded exactly once. The workers are forks of a fork server (executors.py); killed too, it is started
    again for the worker that replaces the dead one."""
    folder = tmp_path / "r"
    proc = cli_process("ablate", "--smoke", *CLASSIC_ROPE, "--eval-tokens", "1024", "--jobs", "2", "--out", folder)
    wait_for_runs(folder, 1, proc)
    server = [c for c in _children(proc.pid) if "forkserver" in Path(f"/proc/{c}/cmdline").read_text()]
    assert len(server) == 1
    workers = _children(server[0])
    assert workers
    if killed != "a worker":
        os.kill(server[0], signal.SIGKILL)
    os.kill(workers[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and err.count("] ") == 6  # one line per run: none lost, none twice
    meta = json.loads((folder / "meta.json").read_text())
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    assert meta["status"] == "finished" and len(runs) == 6 and not runs.duplicated(["row", "seed"]).any()
    assert (runs.error == "").all()  # the killed run finished when it was started again
    assert len(list((folder / "runs").glob("*.json"))) == 6 and not (folder / ".lock").exists()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "table"])
def test_a_pipe_closed_early_ends_quietly(tmp_path, fmt):
    """Issue 43, class 4: `--format json | head -c 1` printed a 29-line BrokenPipeError traceback. The reader
    here has closed its end before the command writes a byte, which is the late write of a slow command."""
    folder = tmp_path / "r"
    invoke(*ABLATE, "--out", folder)
    read, write = os.pipe()
    os.close(read)  # the reader is gone
    for args in (("report", folder), ("judge", folder / "runs.csv")):
        proc = cli_process(*args, "--format", fmt, stdout=write)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (1, 128 + signal.SIGPIPE) and err == "", (args, proc.returncode, err)
    os.close(write)


def test_a_signal_inside_importlibs_lock_callback_is_sent_again_not_lost():
    """Python ignores an exception raised in a weakref callback (importlib's module-lock `cb`), so a SIGTERM landing
    there must not raise: it is delivered again once the callback has returned. Elsewhere it raises at once."""
    from types import SimpleNamespace

    from modern_gpt.cli.commands import _terminate

    cb = SimpleNamespace(f_code=SimpleNamespace(co_name="cb", co_filename="<frozen importlib._bootstrap>"))
    got = []
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    try:
        _terminate(signal.SIGUSR1, cb)  # returns: nothing raised inside the callback
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert got == [signal.SIGUSR1]
    with pytest.raises(KeyboardInterrupt):
        _terminate(signal.SIGTERM, sys._getframe())
