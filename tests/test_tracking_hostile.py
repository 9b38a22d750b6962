"""Trackers that lie (issue 31): a store that looks writable but is not is one sentence, with no retry
(item 8), and a tracker's recorded ids are checked against what it holds before report --track trusts them,
while a tracker that would log nothing is refused before anything trains (item 3)."""

import os
import time
import types

import pytest

from .errhelp import ABLATE, assert_user_error

pytest.importorskip("mlflow")


@pytest.fixture
def no_mlflow_retries(monkeypatch):
    """MLflow's sqlite store retries a store it cannot open ten times over ~100 s: a retry fails the test."""
    from mlflow.store.db import utils

    def sleep(seconds):
        raise AssertionError(f"MLflow retried the store (a sleep of {seconds} s)")

    monkeypatch.setattr(utils, "time", types.SimpleNamespace(sleep=sleep, time=time.time))


def _links(tmp_path):
    """A sqlite store's file that exists only in name: each case's link, made in tmp_path/s."""
    (tmp_path / "s").mkdir()
    (tmp_path / "afile").write_text("not a folder")
    return {
        "a link to a missing folder": tmp_path / "gone" / "m.db",
        "a link that loops": tmp_path / "s" / "m.db",
        "a link into a file": tmp_path / "afile" / "m.db",
        "a link to a link to a missing folder": tmp_path / "s" / "hop.db",
    }


@pytest.mark.parametrize(
    "case",
    ["a link to a missing folder", "a link that loops", "a link into a file", "a link to a link to a missing folder"],
)
def test_a_sqlite_store_whose_file_is_a_dangling_link_is_one_sentence_at_once(run, tmp_path, no_mlflow_retries, case):
    link = tmp_path / "s" / "m.db"
    target = _links(tmp_path)[case]
    if case.startswith("a link to a link"):
        os.symlink(tmp_path / "gone" / "m.db", target)
    os.symlink(target, link)
    result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{link}")
    assert_user_error(result, f"--mlflow-uri sqlite:///{link}: {link} is a link")
    assert "SQLAlchemy" not in result[2] and not (tmp_path / "o").exists()
    assert not (tmp_path / "gone").exists()  # nothing was made where the link points


def test_a_sqlite_file_another_process_holds_is_one_sentence_within_seconds(run, tmp_path, no_mlflow_retries):
    """A database locked by a writer that does not let go: MLflow waits 5 s per try, ten tries."""
    import sqlite3

    store = tmp_path / "m.db"
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{store}")
    finally:
        holder.rollback()
        holder.close()
    assert_user_error(result, f"sqlite:///{store}", "database is locked")


def test_a_sqlite_file_that_is_no_database_is_one_sentence(run, tmp_path, no_mlflow_retries):
    store = tmp_path / "m.db"
    store.write_bytes(b"these bytes are no sqlite database at all, and they are long enough to tell\n" * 4)
    result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{store}")
    assert_user_error(result, f"sqlite:///{store}", "not a database")


# ---------------------------------------------------------------------------
# A tracker "holds" a run only where its own data of it reads back (not where a non-empty file exists)
# ---------------------------------------------------------------------------
def _tracked_ids(folder, name) -> dict[str, str]:
    """The run files' ids of this tracker, by run file name."""
    import json

    return {f.name: json.loads(f.read_text())["tracked"][name] for f in sorted((folder / "runs").glob("*.json"))}


def _damage(path, how: str) -> None:
    """A tracker's file of a run damaged as a hostile tester did: cut to 100 bytes, its bytes replaced by random
    ones, or (TensorBoard) deleted."""
    if how == "deleted":
        path.unlink()
    elif how == "cut short":
        os.truncate(path, 100)
    else:
        path.write_bytes(os.urandom(max(path.stat().st_size, 200)))


@pytest.mark.parametrize("how", ["deleted", "written over", "cut short"])
def test_a_tensorboard_run_whose_events_do_not_read_back_is_logged_again_beside_it(made, run, tmp_path, how):
    """BROKE: with its events file deleted (its .hparams file kept), written over or cut short, report --track
    tensorboard said "holds every run already". Now the run is logged again into a fresh folder, the damaged
    one moved aside out of tensorboard/ (where TensorBoard would read it as points of the run), as the warning
    says."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = made("r", tmp_path / "r")
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 0, err
    ids = _tracked_ids(folder, "tensorboard")
    victim = folder / ids["row01-seed1.json"]
    (events,) = [f for f in victim.glob("events.out.tfevents.*") if not f.name.endswith(".hparams")]
    _damage(events, how)
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 0 and f"tensorboard does not hold 1 of the {len(ids)} runs" in err, err
    assert f"its folder goes to {folder / 'tensorboard-damaged'}" in err and "tensorboard: logged 1 run" in err
    assert (folder / "tensorboard-damaged" / victim.relative_to(folder / "tensorboard")).is_dir()
    assert _tracked_ids(folder, "tensorboard") == ids  # the same folder, written anew
    loaded = EventAccumulator(str(victim)).Reload()
    assert len(loaded.Scalars("final/val_loss")) == 1  # one point: nothing of the damaged file mixed in
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 0 and err.endswith("tensorboard: holds every run already\n"), err


def test_a_file_where_a_tensorboard_run_folder_goes_is_named_with_what_to_do(made, run, tmp_path):
    """BROKE: the error was FileExistsError, advising report --track tensorboard, which failed the same way."""
    pytest.importorskip("tensorboard")
    import shutil

    folder = made("r", tmp_path / "r")
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 0, err
    victim = folder / _tracked_ids(folder, "tensorboard")["row00-seed1.json"]
    shutil.rmtree(victim)
    victim.write_text("in the way")
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 2 and "FileExistsError" not in err, err
    assert f"{victim} is a file where TensorBoard writes an event folder; move or delete it first" in err
    victim.rename(tmp_path / "moved")
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 0 and "tensorboard: logged 1 run" in err, err


@pytest.fixture(scope="module")
def wandb_logged(tmp_path_factory):
    """A tiny results folder pushed to W&B offline (report --track wandb): its folder and the W&B root."""
    pytest.importorskip("wandb")
    from .clihelp import invoke
    from .wandbread import offline_env

    base = tmp_path_factory.mktemp("wandb-hostile")
    with pytest.MonkeyPatch.context() as mp:
        offline_env(mp, base / "wb")
        (base / "wb").mkdir()
        invoke(*ABLATE, "--out", base / "r", "--track", "wandb")
    return base / "r", base / "wb"


def _wandb_copy(wandb_logged, tmp_path, monkeypatch):
    import shutil

    from .wandbread import offline_env

    folder = shutil.copytree(wandb_logged[0], tmp_path / "r")
    root = shutil.copytree(wandb_logged[1], tmp_path / "wb")
    offline_env(monkeypatch, root)
    return folder, root


@pytest.mark.parametrize("how", ["cut short", "written over", "a flipped byte"])
def test_a_wandb_offline_log_that_does_not_read_back_is_not_held(wandb_logged, tmp_path, monkeypatch, how):
    """BROKE: a run-<id>.wandb cut to 100 bytes or written over with random bytes was held. Now the log is read
    to its end (each record's checksum, wandb's own protobuf Record) and must be this run's, finished, with its
    final val_loss."""
    import json

    from modern_gpt.trackers.records import Tracked
    from modern_gpt.trackers.wandb import WandbBackend

    folder, root = _wandb_copy(wandb_logged, tmp_path, monkeypatch)
    ids = _tracked_ids(folder, "wandb")
    backend = WandbBackend()
    backend.start(folder, Tracked.of(json.loads((folder / "meta.json").read_text())))
    assert backend.held(sorted(ids.values())) == set(ids.values())
    victim = ids["row02-seed0.json"]
    (log,) = (root / "wandb").glob(f"offline-run-*-{victim}/run-{victim}.wandb")
    if how == "a flipped byte":
        data = bytearray(log.read_bytes())
        data[len(data) // 2] ^= 0x40
        log.write_bytes(bytes(data))
    else:
        _damage(log, how)
    assert backend.held(sorted(ids.values())) == set(ids.values()) - {victim}
    assert "the logs of 1 of them do not read back" in backend.where


def test_report_track_wandb_logs_again_a_run_whose_offline_log_is_cut_short(wandb_logged, tmp_path, monkeypatch, run):
    folder, root = _wandb_copy(wandb_logged, tmp_path, monkeypatch)
    ids = _tracked_ids(folder, "wandb")
    (log,) = (root / "wandb").glob(f"offline-run-*-{ids['row01-seed0.json']}/run-*.wandb")
    os.truncate(log, 100)
    code, _, err = run("report", folder, "--track", "wandb")
    assert code == 0 and f"wandb does not hold 1 of the {len(ids)} runs" in err, err
    assert "the logs of 1 of them do not read back" in err and "wandb: logged 1 run and the summary" in err
    assert len(list((root / "wandb").glob(f"offline-run-*-{ids['row01-seed0.json']}"))) == 1  # replaced
    code, _, err = run("report", folder, "--track", "wandb")
    assert code == 0 and err.endswith("wandb: holds every run already\n"), err


# ---------------------------------------------------------------------------
# MLflow's stores: its own lines kept off stderr, URIs it cannot use refused in one sentence, nothing left behind
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "uri, why",
    [("bogus://x", "knows no bogus: stores"), ("file:///{tmp}/fstore", "refuses file stores"), ("{tmp}/fs", "file")],
)
def test_a_store_the_installed_mlflow_cannot_open_is_one_sentence_naming_those_it_can(run, tmp_path, uri, why):
    """BROKE: MLflow's raw exception, the file: one cut off mid-URL ("See htt")."""
    from modern_gpt.trackers.checks import _file_store_refused

    if "file" in why and not _file_store_refused():
        pytest.skip("this MLflow opens file stores")
    uri = uri.format(tmp=tmp_path)
    result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", uri)
    assert_user_error(result, f"--mlflow-uri {uri}: MLflow cannot use this store", why, "sqlite:///PATH.db")
    assert "See htt" not in result[2] and "Exception" not in result[2] and not (tmp_path / "o").exists()


def test_a_store_that_fills_its_disk_as_it_is_made_leaves_no_file_behind_nor_mlflow_s_info(run, tmp_path):
    """BROKE: a full disk left an empty m.db (here: files of 16 KiB at most, as a nearly full disk allows), and
    making a new store printed "INFO mlflow.store.db.utils: Creating initial MLflow database tables..."."""
    import logging
    import resource
    import signal

    store, records = tmp_path / "m.db", []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("mlflow.store.db.utils").addHandler(handler)
    limit, was = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, limit[1]))
    try:
        result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{store}")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, was)
        logging.getLogger("mlflow.store.db.utils").removeHandler(handler)
    assert_user_error(result, f"sqlite:///{store}", "MLflow cannot use this store")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert [r.getMessage() for r in records if r.levelno < logging.WARNING] == []
