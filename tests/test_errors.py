"""Bad input, faults and interruption: one clear sentence for every mistake, nothing lost."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import modern_gpt.model as model_module
from modern_gpt.model import COMPONENTS
from modern_gpt.results import ResultsDir

from .clihelp import CLASSIC_ROPE, Quiet, cli, cli_process, tiny, wait_for_runs

TINY = tiny(steps=3)


def assert_user_error(result, *fragments):
    code, out, err = result
    assert code == 2, (code, out, err)
    assert err.startswith("modern-gpt: error: ") and err.count("\n") == 1, err  # one sentence, one line
    assert "Traceback" not in err + out
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def write(path, data: bytes):
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def test_missing_data_path(run, tmp_path):
    assert_user_error(run("train", *TINY, "--data", tmp_path / "nope.txt"), "nope.txt does not exist")


def test_empty_file(run, tmp_path):
    assert_user_error(run("train", *TINY, "--data", write(tmp_path / "e.txt", b"")), "e.txt is empty")


def test_binary_file(run, tmp_path):
    path = write(tmp_path / "b.txt", b"PK\x03\x04\x00\x00binary")
    assert_user_error(run("train", *TINY, "--data", path), "b.txt looks binary", "byte offset 4")


def test_non_utf8_file(run, tmp_path):
    path = write(tmp_path / "latin1.txt", "café au lait ".encode("latin-1") * 10)
    assert_user_error(run("train", *TINY, "--data", path), "latin1.txt is not valid UTF-8 (byte offset 3)")


def test_folder_without_txt_files(run, tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "notes.md").write_text("no")
    assert_user_error(
        run("train", *TINY, "--data", tmp_path / "corpus"), "holds no .txt, .jsonl (.ndjson, .json) or .parquet files"
    )


def test_corpus_too_short_for_the_context(run, tmp_path):
    path = write(tmp_path / "short.txt", b"a short text of a few dozen characters, no more." * 3)
    assert_user_error(
        run("train", *TINY, "--data", path, "--context", "64"),
        "too short for context 64",
        "has 15 tokens and needs at least 65",
    )


# ---------------------------------------------------------------------------
# names, shapes, settings
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,fragments",
    [
        (
            ["--components", "rmsnorm,flash"],
            ["unknown component 'flash'", ", ".join(COMPONENTS)],
        ),
        (["--plan", "greedy"], ["unknown plan 'greedy'", "cumulative, single, leave-one-out, custom"]),
        (
            ["--plan", "custom", "--variants", "classic;fancy"],
            ["'fancy' is not a variant: unknown component 'fancy'", "classic, modern"],
        ),
        (["--seeds", "0"], ["--seeds must be between 1 and 10,000"]),
        (["--seeds", "-2"], ["--seeds must be between 1 and 10,000"]),
        (["--steps", "0"], ["steps must be at least 1, got 0"]),
        (["--batch-size", "-4"], ["batch_size must be at least 1, got -4"]),
        (["--lr", "0"], ["lr must be a positive number, got 0.0"]),
        (["--lr", "-0.001"], ["lr must be a positive number"]),
        (["--dim", "30", "--heads", "4"], ["dim 30 is not divisible by 4 heads"]),
        (["--jobs", "0"], ["--jobs must be at least 1"]),
        (["--format", "xml"], ["unknown format 'xml'; choose one of table, markdown, csv, json"]),
    ],
)
def test_bad_ablation_settings(run, args, fragments):
    assert_user_error(run("ablate", "--smoke", *args), *fragments)


def test_invalid_model_shapes(run):
    assert_user_error(
        run("params", "--heads", "8", "--dim", "64", "--gqa", "--kv-heads", "3"),
        "8 heads with 3 KV heads: 8 is not divisible by 3",
    )
    assert_user_error(run("params", "--dim", "12", "--heads", "4", "--rope"), "rope needs an even head dimension")


def test_unknown_or_mistyped_config_keys(run, tmp_path):
    bad_key = tmp_path / "typo.toml"
    bad_key.write_text("[model]\ndimm = 64\n")
    assert_user_error(
        run("train", "--config", bad_key), "typo.toml: unknown key 'dimm' in [model]; did you mean 'dim'?"
    )
    bad_type = tmp_path / "type.toml"
    bad_type.write_text('[train]\nsteps = "many"\n')
    assert_user_error(run("train", "--config", bad_type), "type.toml: train.steps must be an integer, got 'many'")
    bad_section = tmp_path / "section.toml"
    bad_section.write_text("[optimizer]\nlr = 1\n")
    assert_user_error(run("train", "--config", bad_section), "unknown section [optimizer]")
    broken = tmp_path / "broken.toml"
    broken.write_text("[model\n")
    assert_user_error(run("train", "--config", broken), "broken.toml is not valid TOML")
    assert_user_error(run("train", "--config", "nano"), "config file nano does not exist", "mini, shakespeare, smoke")


def test_unwritable_results_and_checkpoint_folders(run, tmp_path):
    blocker = write(tmp_path / "a-file", b"x")
    assert_user_error(run("ablate", "--smoke", "--steps", "2", "--out", blocker / "results"), "cannot write results to")
    assert_user_error(run("train", *TINY, "--out", blocker / "ckpt"), "cannot write the checkpoint to")


def test_resume_on_a_folder_that_is_not_results(run, tmp_path):
    assert_user_error(run("ablate", "--resume", tmp_path), "is not a results folder")
    assert_user_error(run("report", tmp_path), "is not a results folder")


def test_generate_on_bad_checkpoints(run, tmp_path):
    assert_user_error(run("generate", tmp_path / "none"), "is not a checkpoint folder (it does not exist)")
    assert_user_error(
        run("generate", tmp_path), "is not a checkpoint folder: model.safetensors, config.json, tokenizer.json missing"
    )
    ckpt = tmp_path / "ckpt"
    assert run("train", *TINY, "--out", ckpt)[0] == 0
    weights = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    assert_user_error(run("generate", ckpt), "model.safetensors is damaged or truncated")
    (ckpt / "model.safetensors").write_bytes(weights)
    (ckpt / "config.json").write_text('{"model": {"dim": ')
    assert_user_error(run("generate", ckpt), "config.json is damaged")


def test_a_damaged_runs_csv_is_one_sentence_and_resume_rebuilds_it(run, tmp_path):
    folder = tmp_path / "r"
    variants = ["--plan", "custom", "--variants", "classic;rope"]
    assert run("ablate", "--smoke", "--jobs", "1", "--seeds", "1", "--steps", "2", *variants, "--out", folder)[0] == 0
    (folder / "runs.csv").write_text("garbage\n")
    assert_user_error(run("report", folder), "runs.csv is damaged")
    assert run("ablate", "--resume", folder, "--jobs", "1")[0] == 0
    assert len(pd.read_csv(folder / "runs.csv")) == len(json.loads((folder / "meta.json").read_text())["variants"])


@pytest.mark.slow
def test_debug_shows_the_traceback():
    plain = cli("train", "--data", "/nonexistent/corpus.txt")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert (
        plain.stderr
        == "modern-gpt: error: data path /nonexistent/corpus.txt does not exist; give a .txt, .jsonl (.ndjson, .json) or .parquet file, or a folder of them.\n"
    )
    debug = cli("--debug", "train", "--data", "/nonexistent/corpus.txt")
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "DataError" in debug.stderr


# ---------------------------------------------------------------------------
# runtime faults
# ---------------------------------------------------------------------------
def test_a_diverged_run_and_an_oom_are_recorded_and_the_ablation_goes_on(run, tmp_path, monkeypatch):
    forward = model_module.GPT.forward

    def faulty(self, idx, targets=None, cache=None):
        if self.config.swiglu and self.training:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        logits, loss = forward(self, idx, targets, cache)
        if self.config.rope and loss is not None:
            loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(model_module.GPT, "forward", faulty)
    folder = tmp_path / "faults"
    code, out, err = run(
        "ablate",
        "--smoke",
        "--jobs",
        "1",
        "--seeds",
        "2",
        "--steps",
        "4",
        "--plan",
        "custom",
        "--variants",
        "classic;rope;swiglu;rmsnorm",
        "--out",
        folder,
    )
    assert code == 0, err
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    by_variant = runs.groupby("variant")
    assert list(by_variant.get_group("rope").diverged) == [True, True]
    assert all(
        e.startswith("out of memory at step 1: CUDA out of memory") for e in by_variant.get_group("swiglu").error
    )
    assert list(by_variant.get_group("rmsnorm").diverged) == [False, False]  # the ablation went on
    assert "rope, seed 0: diverged (loss NaN or infinite) after 0 steps; left out of the means." in out
    assert "swiglu, seed 1: out of memory at step 1" in out
    assert out.count("diverged") >= 2


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGHUP", "SIGINT to the group, --jobs 2"])
def test_interrupts_stop_promptly_keep_finished_runs_and_say_how_to_resume(tmp_path, how):
    folder = tmp_path / "r"
    jobs = ["--jobs", "2"] if "jobs" in how else []
    short = ["--steps", "30", "--eval-every", "30"]  # runs of a third of the smoke's: the resume below is quick
    proc = cli_process("ablate", "--smoke", "--seeds", "3", *short, "--out", folder, *jobs, start_new_session=True)
    wait_for_runs(folder, 3, proc)
    sent = time.time()
    if "group" in how:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    else:
        proc.send_signal(getattr(signal, how))
    out, err = proc.communicate(timeout=30)
    assert time.time() - sent < 10, "did not stop promptly"
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert f"Resume with: modern-gpt ablate --resume {folder}" in err
    kept = len(list((folder / "runs").glob("*.json")))
    meta = json.loads((folder / "meta.json").read_text())
    total = len(meta["variants"]) * 3
    assert kept >= 3 and f"{kept} of {total} runs finished and kept" in err
    assert meta["status"] == "interrupted"
    assert not (folder / ".lock").exists()
    if "group" not in how:
        return
    resumed = cli("ablate", "--resume", folder, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert len(pd.read_csv(folder / "runs.csv")) == total


@pytest.mark.slow
def test_a_live_writer_locks_the_folder_and_a_dead_ones_lock_is_taken_over(tmp_path):
    folder = tmp_path / "r"
    proc = cli_process("ablate", "--smoke", "--seeds", "3", "--out", folder)
    try:
        wait_for_runs(folder, 1, proc)
        second = cli("ablate", "--resume", folder)
        assert second.returncode == 2
        assert f"is being written by another modern-gpt process (pid {proc.pid})" in second.stderr
    finally:
        proc.kill()
        proc.wait()
    assert (folder / ".lock").read_text() == str(proc.pid)  # SIGKILL left the lock behind
    results = ResultsDir(folder)
    results.lock()  # the owner is dead: taken over
    assert (folder / ".lock").read_text() == str(os.getpid())
    results.unlock()
    assert not (folder / ".lock").exists()


# ---------------------------------------------------------------------------
# hardening (issue 10): every hostile input ends in one sentence and exit 2, or a recorded run
# ---------------------------------------------------------------------------
ABLATE = ["ablate", *TINY, "--jobs", "1", *CLASSIC_ROPE]


def assert_ablation_error(result, *fragments):
    """An ablation that started and then failed: its progress lines on stderr, then the one sentence, exit 2."""
    code, out, err = result
    last = err.rstrip("\n").split("\n")[-1]
    assert_user_error((code, out, last + "\n"), *fragments)
    assert "Traceback" not in err


def make_results(run, folder):
    code, out, err = run(*ABLATE, "--out", folder)
    assert code == 0, err
    return json.loads((folder / "meta.json").read_text())


def make_checkpoint(run, folder):
    code, out, err = run("train", *TINY, "--out", folder)
    assert code == 0, err
    return folder


def test_non_regular_data_paths_are_refused(run, tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        assert_user_error(run("train", *TINY, "--data", path), f"{path} is not a regular file")
    ckpt = make_checkpoint(run, tmp_path / "ckpt")
    assert_user_error(run("extrapolate", ckpt, "--contexts", "16", "--data", fifo), "is not a regular file")


def test_misleading_messages_name_the_real_cause(run, tmp_path):
    utf16 = write(
        tmp_path / "u16.txt", "a plain English sentence, saved by an editor as UTF-16.\n".encode("utf-16") * 20
    )
    assert_user_error(run("train", *TINY, "--data", utf16), "u16.txt is UTF-16LE text", "iconv -f UTF-16LE -t UTF-8")
    (tmp_path / "conf").mkdir()
    assert_user_error(run("train", "--config", tmp_path / "conf"), "conf is a folder")
    assert_user_error(run("train", *TINY, "--val-fraction", "0.999999"), "training split has", "--val-fraction")


@pytest.mark.parametrize(
    "args,fragments",
    [
        (
            ["ablate", "--seeds", "2", "--batch-size", "abc"],
            ["Invalid value for '--batch-size'", "see modern-gpt ablate --help"],
        ),
        (["ablate", "--seedz", "3"], ["No such option: --seedz", "--seeds"]),
        (["generate"], ["Missing argument"]),
        (["fly"], ["No such command 'fly'"]),
    ],
)
def test_usage_errors_are_one_line(run, args, fragments):
    assert_user_error(run(*args), *fragments)


def test_generate_values_are_checked(run, tmp_path):
    assert_user_error(run("generate", tmp_path, "--temperature", "nan"), "--temperature must be a finite number")
    assert_user_error(run("generate", tmp_path, "--temperature", "inf"), "--temperature must be a finite number")
    assert_user_error(run("generate", tmp_path, "--seed", str(2**64)), "--seed must be between 0 and")
    assert_user_error(run("generate", tmp_path, "--seed", "-1"), "--seed must be between 0 and")


def test_empty_plans_and_ignored_flags_are_refused_before_anything_is_written(run, tmp_path):
    assert_user_error(run("ablate", *TINY, "--plan", "custom", "--variants", ";;"), "names no rows")
    assert_user_error(
        run("ablate", *TINY, "--plan", "custom", "--variants", "classic;rope", "--components", "rope"),
        "--components does not go with --plan custom",
    )
    assert_user_error(run("ablate", *TINY, "--out", ""), "--out is empty")
    assert_user_error(run("train", *TINY, "--out", ""), "--out is empty")
    assert_user_error(run("ablate", "--smoke", "--batch-size", "1000000000"), "--batch-size 1000000000", "GB")
    assert not (tmp_path / "results").exists() and not (tmp_path / "checkpoints").exists()


def test_existing_folders_are_not_overwritten_without_force(run, tmp_path):
    ckpt = make_checkpoint(run, tmp_path / "ckpt")
    weights = (ckpt / "model.safetensors").read_bytes()
    assert_user_error(run("train", *TINY, "--out", ckpt), "already exists and holds files", "--force")
    assert (ckpt / "model.safetensors").read_bytes() == weights
    assert run("train", *TINY, "--seed", "1", "--out", ckpt, "--force")[0] == 0
    assert (ckpt / "model.safetensors").read_bytes() != weights
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("mine")
    assert_user_error(run("export", ckpt, "--hf", tmp_path / "hf"), "already exists and holds files", "--force")
    assert_user_error(run("export", ckpt, "--hf", ""), "--hf is empty")
    # a diverged run written over a checkpoint leaves no stale weights behind, and says it diverged
    assert run("train", *TINY, "--lr", "1e9", "--out", ckpt, "--force")[0] == 0
    assert_user_error(run("generate", ckpt), "holds a run that diverged", "no weights were saved")


def test_resume_refuses_another_out_and_another_commands_folder(run, tmp_path):
    folder = tmp_path / "r"
    make_results(run, folder)
    assert_user_error(run("ablate", "--resume", folder, "--out", tmp_path / "other"), "leave out --out")
    assert_user_error(run("duel", "--resume", folder), "was written by modern-gpt ablate")
    assert run("ablate", "--resume", folder, "--out", folder)[0] == 0  # the same folder is no contradiction
    assert_user_error(run(*ABLATE, "--out", folder), "already holds an ablation", f"--resume {folder}")


def test_a_half_created_folder_gets_the_same_advice_from_out_and_resume(run, tmp_path):
    folder = tmp_path / "half"
    (folder / "runs").mkdir(parents=True)
    assert_user_error(run(*ABLATE, "--out", folder), "left half-created", "delete it")
    assert_user_error(run("ablate", "--resume", folder), "left half-created", "delete it")
    assert_user_error(run("report", folder), "left half-created", "delete it")


def test_files_respect_the_umask(run, tmp_path):
    old = os.umask(0o022)
    try:
        ckpt = make_checkpoint(run, tmp_path / "ckpt")
        folder = tmp_path / "r"
        make_results(run, folder)
    finally:
        os.umask(old)
    files = [*ckpt.iterdir(), *folder.glob("*.*"), *(folder / "runs").iterdir()]
    assert len(files) > 8
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {f.name: "0o644" for f in files}


def _full_disk_after(monkeypatch, calls: int):
    """os.fsync (which every atomic write calls once) fails with ENOSPC from the call numbered `calls` on."""
    real, count = os.fsync, [0]

    def fsync(fd):
        count[0] += 1
        if count[0] > calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return lambda: monkeypatch.setattr(os, "fsync", real)


def test_a_full_disk_is_one_sentence_and_keeps_finished_runs(run, tmp_path, monkeypatch):
    folder = tmp_path / "r"
    # meta.json twice, the empty tables, then two runs of three files each: the third run cannot be written
    free = _full_disk_after(monkeypatch, 4 + 3 * 2)
    assert_ablation_error(run(*ABLATE, "--out", folder), "cannot write", "No space left on device", "free some space")
    free()
    kept = {f.name: f.read_bytes() for f in (folder / "runs").iterdir()}
    assert len(kept) == 2 and not list(folder.glob(".*.tmp"))
    code, out, err = run("ablate", "--resume", folder, "--jobs", "1")
    assert code == 0, err
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "finished"
    assert len(pd.read_csv(folder / "runs.csv")) == len(meta["variants"]) * 2
    assert all((folder / "runs" / name).read_bytes() == data for name, data in kept.items())  # nothing finished lost
    _full_disk_after(monkeypatch, 0)
    assert_user_error(run("report", folder, "--plot"), "cannot write curves.png in", "No space left on device")
    assert_user_error(run("train", *TINY, "--out", tmp_path / "ckpt"), "cannot write", "No space left on device")


def test_a_failure_during_the_ablation_marks_the_folder_failed(run, tmp_path, monkeypatch):
    import modern_gpt.running as running
    from modern_gpt.errors import UserError

    train_run = running.train_run

    def failing(cfg, *args, **kwargs):
        if cfg.rope:
            raise UserError("the rope run cannot start.")
        return train_run(cfg, *args, **kwargs)

    monkeypatch.setattr(running, "train_run", failing)
    folder = tmp_path / "r"
    assert_ablation_error(run(*ABLATE, "--out", folder), "the rope run cannot start")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["error"] == "the rope run cannot start."
    assert not (folder / ".lock").exists()
    code, out, err = run("report", folder)
    assert code == 0 and "The ablation failed: the rope run cannot start;" in out


def test_out_of_memory_on_the_cpu_is_a_recorded_run(run, tmp_path, monkeypatch):
    forward = model_module.GPT.forward

    def faulty(self, idx, targets=None, cache=None):
        if self.config.rope and self.training:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes."
            )
        if self.config.swiglu and self.training:
            raise MemoryError()
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", faulty)
    folder = tmp_path / "r"
    code, out, err = run(
        "ablate",
        *TINY,
        "--jobs",
        "1",
        "--seeds",
        "1",
        "--plan",
        "custom",
        "--variants",
        "classic;rope;swiglu",
        "--out",
        folder,
    )
    assert code == 0, err
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False).set_index("variant")
    assert runs.loc["rope", "error"].startswith("out of memory at step 1: [enforce fail")
    assert runs.loc["swiglu", "error"] == "out of memory at step 1: MemoryError"
    assert runs.loc["classic", "error"] == ""


@pytest.mark.slow
def test_the_report_tells_a_dead_or_live_writer(run, tmp_path):
    folder = tmp_path / "r"
    meta = make_results(run, folder)
    meta["status"] = "running"  # what a SIGKILLed ablation leaves
    (folder / "meta.json").write_text(json.dumps(meta))
    code, out, err = run("report", folder)
    assert code == 0 and "stopped before the end (it holds no lock)" in out
    holder = cli_process_python(
        f"from modern_gpt.results import ResultsDir; r = ResultsDir({str(folder)!r}); r.lock(); print('locked', flush=True); input()"
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


def test_odd_lock_files(run, tmp_path):
    folder = tmp_path / "r"
    make_results(run, folder)
    (folder / ".lock").write_text("99999999999999999999")  # an impossible pid, left by no live process
    assert run("ablate", "--resume", folder)[0] == 0
    (folder / ".lock").mkdir()
    assert_user_error(run("ablate", "--resume", folder), ".lock is a folder")  # refused before any progress line


def _contend(folder: str, barrier, outcomes) -> None:
    """Take the folder's lock at the instant the barrier opens; while holding it, no other holder may exist."""
    from modern_gpt.errors import UserError

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


@pytest.mark.slow
def test_ctrl_c_during_start_up_is_quiet():
    # From 0.3 s: earlier, the signal can land in Python's own start-up (site, the editable install's import
    # hooks; about 50 ms here), before any code of modern-gpt runs, where no program can catch it.
    for delay in (0.3, 0.8):
        proc = cli_process("params")
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert "Traceback" not in err, err
        assert proc.returncode in (0, 130), (proc.returncode, err)
        if proc.returncode == 130:
            assert err.strip() == "modern-gpt: interrupted"


@pytest.mark.slow
def test_workers_train_on_the_corpus_the_driver_hashed(tmp_path):
    from modern_gpt import planning, running
    from modern_gpt.settings import resolve

    corpus = write(tmp_path / "corpus.txt", ("the quick brown fox jumps over the lazy dog. " * 200).encode())
    overrides = {
        "data.path": str(corpus),
        "train.steps": 2,
        "train.eval_every": 2,
        "train.threads": 1,
        "model.context": 16,
        "model.dim": 16,
        "model.heads": 2,
        "model.layers": 1,
    }
    settings = resolve(None, True, overrides)
    ablations = {}
    for jobs in (1, 2):
        spec = planning.plan_spec(settings, "custom", variants="classic;rope", seed_list_text="0,1")
        ablations[jobs] = running.start(spec, tmp_path / f"jobs{jobs}", jobs, "test")
    ablations[1].run(Quiet())
    # the data file changes after the driver read and hashed it: the workers must not read it again
    corpus.write_bytes(("ZYXWVU 0123456789 other text altogether! " * 300).encode())
    ablations[2].run(Quiet())
    one, two = (pd.read_csv(tmp_path / f"jobs{j}" / "runs.csv") for j in (1, 2))
    assert len(one) == len(two) == len(ablations[1].spec.variants) * 2
    assert list(two["val_loss"]) == list(one["val_loss"])  # bitwise: the same tokens, one thread per run


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
def test_a_worker_killed_from_outside_has_its_run_started_again_and_the_ablation_ends(tmp_path):
    """kill -9 of one pool process: its run is started again (--max-retries), the ablation ends, and every run is
    recorded exactly once."""
    folder = tmp_path / "r"
    proc = cli_process("ablate", "--smoke", *CLASSIC_ROPE, "--eval-tokens", "1024", "--jobs", "2", "--out", folder)
    wait_for_runs(folder, 1, proc)
    workers = [c for c in _children(proc.pid) if "resource_tracker" not in Path(f"/proc/{c}/cmdline").read_text()]
    assert workers
    os.kill(workers[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and err.count("] ") == 6  # one line per run: none lost, none twice
    meta = json.loads((folder / "meta.json").read_text())
    runs = pd.read_csv(folder / "runs.csv", keep_default_na=False)
    assert meta["status"] == "finished" and len(runs) == 6 and not runs.duplicated(["row", "seed"]).any()
    assert (runs.error == "").all()  # the killed run finished when it was started again
    assert len(list((folder / "runs").glob("*.json"))) == 6 and not (folder / ".lock").exists()


# ---------------------------------------------------------------------------
# hardening, after the review: each class of defect it found
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One tiny results folder and one checkpoint, made in process once; each test works on a copy."""
    import shutil

    from modern_gpt.cli import main

    base = tmp_path_factory.mktemp("made")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    with pytest.MonkeyPatch.context() as mp:
        for args in ([*ABLATE, "--out", base / "r"], ["train", *TINY, "--out", base / "ckpt"]):
            mp.setattr(sys, "argv", ["modern-gpt", *map(str, args)])
            with pytest.raises(SystemExit) as e:
                main()
            assert not e.value.code
    for s, h in handlers.items():
        signal.signal(s, h)
    return lambda name, to: Path(shutil.copytree(base / name, to, symlinks=True))


def test_safetensors_own_full_disk_error_is_one_sentence(run, tmp_path, monkeypatch, made):
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    monkeypatch.setattr(safetensors.torch, "serialize_file", full)
    assert_user_error(
        run("train", *TINY, "--out", tmp_path / "c"), "cannot write model.safetensors in", "No space left"
    )
    ckpt = made("ckpt", tmp_path / "ckpt")
    assert_user_error(run("export", ckpt, "--hf", tmp_path / "hf"), f"in {tmp_path / 'hf'}", "No space left on device")


def test_meta_json_settings_and_plan_must_be_whole_and_agree(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    meta = json.loads((folder / "meta.json").read_text())
    runs = {f.name: f.read_bytes() for f in (folder / "runs").iterdir()}
    for section in ("train", "data", "model"):
        bad = json.loads(json.dumps(meta))
        bad["spec"]["settings"][section] = {}
        (folder / "meta.json").write_text(json.dumps(bad))
        for args in (["report", folder], ["ablate", "--resume", folder]):
            assert_user_error(run(*args), "meta.json", f"spec.settings.{section}.", "is missing")
    assert {f.name: f.read_bytes() for f in (folder / "runs").iterdir()} == runs  # no finished run redone
    for plan, what in (("duel", "spec.plan is duel, but its rows are"), ("power", "spec.plan is power")):
        (folder / "meta.json").write_text(json.dumps({**meta, "spec": {**meta["spec"], "plan": plan}}))
        assert_user_error(run("report", folder), "meta.json", what)


def test_runs_csv_is_checked_against_the_run_files(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    truth = json.loads(run("report", folder, "--format", "json")[1])
    table = pd.read_csv(folder / "runs.csv")
    table["val_loss"] += 1.0  # as a runs.csv copied from another ablation of the same rows and seeds
    table.to_csv(folder / "runs.csv", index=False)
    code, out, err = run("report", folder, "--format", "json")
    assert code == 0 and json.loads(out)["rows"] == truth["rows"] and "does not match the run files" in out
    (folder / "runs" / "row02-seed1.json").unlink()
    code, out, err = run("report", folder, "--format", "json")
    assert code == 0 and json.loads(out)["rows"][2]["seeds"] == 1
    header, rest = (folder / "runs.csv").read_text().split("\n", 1)
    (folder / "runs.csv").write_text(header.replace("val_loss,", "val_loss,val_loss,", 1) + "\n" + rest)
    assert_user_error(run("report", folder), "runs.csv is damaged", "names the column val_loss twice")


def test_pipes_and_links_in_a_results_folder_never_block(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    os.mkfifo(folder / "runs" / "row09-seed0.json")
    code, out, err = run("report", folder)
    assert code == 0 and "runs/row09-seed0.json (it is a pipe (FIFO), not a file)" in out
    assert run("ablate", "--resume", folder)[0] == 0
    lock = folder / ".lock"
    for make, what in (
        (os.mkfifo, "is a pipe (FIFO), not a lock file"),
        (lambda p: p.symlink_to("/dev/zero"), "is a symbolic link to /dev/zero, not a lock file"),
        (lambda p: p.symlink_to(tmp_path / "gone"), f"is a symbolic link to {tmp_path / 'gone'}, which does not exist"),
    ):
        make(lock)
        for args in (["report", folder], ["ablate", "--resume", folder], [*ABLATE, "--out", folder]):
            assert_user_error(run(*args), f"{lock} {what}")
        lock.unlink()


def test_checkpoint_refusals_name_the_real_cause(run, tmp_path, made):
    from safetensors.torch import load_file, save_file

    ckpt = made("ckpt", tmp_path / "ckpt")
    for command in (["generate", ckpt], ["extrapolate", ckpt, "--contexts", "16"]):
        assert_user_error(run(*command, "--device", "bogus"), "unknown --device 'bogus'")
    for hf in (ckpt, ckpt / "hf", tmp_path):
        assert_user_error(run("export", ckpt, "--hf", hf, "--force"), "is the checkpoint's folder")
    assert_user_error(
        run("export", "/dev/null", "--hf", tmp_path / "x"), "/dev/null is not a checkpoint folder (it is not a folder)"
    )
    weights = load_file(ckpt / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, ckpt / "model.safetensors")
    assert_user_error(run("generate", ckpt, "--device", "cpu"), "holds weights that are not finite", name)


def test_data_messages_and_the_token_cache(run, tmp_path, monkeypatch):
    from modern_gpt.data import DataConfig, load_corpus

    fifo = tmp_path / "tok.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        assert_user_error(run("train", *TINY, "--tokenizer", path), f"{path} is not a regular file")
    assert_user_error(
        run("train", *TINY, "--data", tmp_path / "nope"), "give a .txt, .jsonl (.ndjson, .json) or .parquet file"
    )
    pd.DataFrame({"text": [b"\x01" * 5000]}).to_parquet(tmp_path / "b.parquet")
    code, out, err = run("train", *TINY, "--data", tmp_path / "b.parquet")
    assert_user_error((code, out, err), "row 1", "not a string", "...")
    assert len(err) < 300  # the 5000 bytes are cut short
    old = os.umask(0o022)
    try:
        load_corpus(DataConfig(cache_dir=str(tmp_path / "cache")))
    finally:
        os.umask(old)
    (entry,) = (tmp_path / "cache").iterdir()
    assert oct(entry.stat().st_mode & 0o777) == "0o755"


def test_power_says_how_to_resume_its_own_folder(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    meta = json.loads((folder / "meta.json").read_text())
    meta["spec"]["plan"] = "power"
    (folder / "meta.json").write_text(json.dumps(meta))
    assert_user_error(run("power", *TINY, "--seeds", "3", "--out", folder), f"modern-gpt power --resume {folder}")
