"""Trackers that lie (issue 31): a store that looks writable but is not is one sentence within a second or two
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
    start = time.monotonic()
    result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{link}")
    assert time.monotonic() - start < 5
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
        start = time.monotonic()
        result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{store}")
        assert time.monotonic() - start < 5
    finally:
        holder.rollback()
        holder.close()
    assert_user_error(result, f"sqlite:///{store}", "database is locked")


def test_a_sqlite_file_that_is_no_database_is_one_sentence(run, tmp_path, no_mlflow_retries):
    store = tmp_path / "m.db"
    store.write_bytes(b"these bytes are no sqlite database at all, and they are long enough to tell\n" * 4)
    result = run(*ABLATE, "--out", tmp_path / "o", "--track", "mlflow", "--mlflow-uri", f"sqlite:///{store}")
    assert_user_error(result, f"sqlite:///{store}", "not a database")
