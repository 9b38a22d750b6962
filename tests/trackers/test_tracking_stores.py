"""Trackers that lie (issue 31): a store that looks writable but is not is one sentence, with no retry
(item 8), and a tracker's recorded ids are checked against what it holds before report --track trusts them,
while a tracker that would log nothing is refused before anything trains (item 3)."""

import json
import os
import time
import types

import pytest

from tests.errhelp import ABLATE, assert_user_error

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
def test_a_sqlite_store_whose_file_is_a_dangling_link_is_one_sentence_without_retries(
    run, tmp_path, no_mlflow_retries, case
):
    link = tmp_path / "s" / "m.db"
    target = _links(tmp_path)[case]
    if case.startswith("a link to a link"):
        os.symlink(tmp_path / "gone" / "m.db", target)
    os.symlink(target, link)
    result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{link}")
    assert_user_error(result, f"--mlflow-uri sqlite:///{link}: {link} cannot be written as a sqlite database")
    assert "SQLAlchemy" not in result[2] and not (tmp_path / "o").exists()
    assert not (tmp_path / "gone").exists()  # nothing was made where the link points


def test_a_sqlite_file_another_process_holds_is_one_sentence_without_mlflow_s_retries(run, tmp_path, no_mlflow_retries):
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
# TensorBoard's event folders
# ---------------------------------------------------------------------------
def test_a_file_where_a_tensorboard_run_folder_goes_is_named_with_what_to_do(made, run, tmp_path):
    """BROKE: the error was FileExistsError, advising report --track tensorboard, which failed the same way."""
    pytest.importorskip("tensorboard")
    import shutil

    folder = made("r", tmp_path / "r")
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 0, err
    file = folder / "runs" / "row00-seed1.json"
    record = json.loads(file.read_text())
    victim = folder / record.pop("tracked")["tensorboard"]
    file.write_text(json.dumps(record))  # its id gone from its run file: report --track logs it again
    shutil.rmtree(victim)
    victim.write_text("in the way")
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 2 and "FileExistsError" not in err, err
    assert f"{victim} is a file where TensorBoard writes an event folder; move or delete it first" in err
    victim.rename(tmp_path / "moved")
    code, _, err = run("report", folder, "--track", "tensorboard")
    assert code == 0 and "tensorboard: logged 1 run" in err, err


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
