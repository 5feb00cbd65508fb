"""The run store: one clear error for a folder it cannot use (and nothing recorded), and run-ID
prefixes compared as text.

Tests run as root here, where chmod does not stop a write; the unusable folders are made in
ways that stop root too: a path through a regular file, a store whose ``runs`` folder became a
file, a write that fails as on a read-only mount, a database that refuses writes."""

from __future__ import annotations

import errno
import os
import sqlite3

import pytest

from caramba.errors import ConfigError
from caramba.store.runs import RunNotFound, RunStore, StoreUnavailable, open_runs


def test_a_store_path_through_a_regular_file_is_one_clear_error(tmp_path):
    (tmp_path / "plain").write_text("")
    where = tmp_path / "plain" / "store"
    with pytest.raises(StoreUnavailable) as exc:
        open_runs(where)
    text = str(exc.value)
    assert str(where) in text and "Not a directory" in text and "CARAMBA_STORE" in text
    assert isinstance(exc.value, ConfigError)
    assert sorted(os.listdir(tmp_path)) == ["plain"]


def test_a_read_only_folder_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from pathlib import Path

    def read_only(self, data):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "write_bytes", read_only)
    with pytest.raises(StoreUnavailable, match="Read-only file system"):
        RunStore(tmp_path / "store")
    assert not (tmp_path / "store" / "runs.sqlite").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a chmod 555 folder")
def test_a_folder_without_write_permission_is_refused(tmp_path):
    (tmp_path / "store" / "runs").mkdir(parents=True)
    os.chmod(tmp_path / "store" / "runs", 0o555)
    try:
        with pytest.raises(StoreUnavailable, match="Permission denied"):
            RunStore(tmp_path / "store")
    finally:
        os.chmod(tmp_path / "store" / "runs", 0o755)


def test_a_database_that_refuses_writes_is_a_store_error(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "store")
    real = sqlite3.connect

    class ReadOnly:
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *args):
            if sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
                raise sqlite3.OperationalError("attempt to write a readonly database")
            return self.db.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.db, name)

        def __setattr__(self, name, value):
            if name == "db":
                object.__setattr__(self, name, value)
            else:
                setattr(self.db, name, value)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: ReadOnly(real(*a, **k)))
    with pytest.raises(StoreUnavailable, match="readonly database"):
        store.create_run("exp")
    monkeypatch.setattr(sqlite3, "connect", real)
    assert store.list() == [] and os.listdir(tmp_path / "store" / "runs") == []  # no orphan row, no folder


def test_a_run_that_cannot_get_its_folder_is_not_recorded(tmp_path):
    store = RunStore(tmp_path / "store")
    (tmp_path / "store" / "runs").rmdir()
    (tmp_path / "store" / "runs").write_text("")  # the runs folder became a file
    with pytest.raises(StoreUnavailable):
        store.create_run("exp")
    assert store.list() == []  # no orphan "created" run


def test_run_id_prefixes_are_text_not_like_patterns(tmp_path):
    store = RunStore(tmp_path / "store")
    a = store.create_run("ab_cd")
    b = store.create_run("abxcd")
    assert store.get("ab_").id == a.id and store.get("abx").id == b.id
    assert store.get(a.id).id == a.id
    for ref in ("a%", "%", "_", "ab_c%", "a_x", ""):
        with pytest.raises(RunNotFound):
            store.get(ref)
    with pytest.raises(RunNotFound, match="matches several runs"):
        store.get("ab")


def test_a_store_removed_while_in_use_is_a_store_error(tmp_path):
    import shutil

    store = RunStore(tmp_path / "store")
    store.create_run("exp")
    shutil.rmtree(tmp_path / "store")
    with pytest.raises(StoreUnavailable, match="unable to open"):
        store.list()
    (tmp_path / "store").mkdir()  # an empty folder where the store was: its database is new and empty
    with pytest.raises(StoreUnavailable, match="no such table"):
        store.list()
