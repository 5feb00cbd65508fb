"""A store written before runs had owners, heartbeats and one row per metric opens, migrates
once, and two processes opening it at once do not trip over each other."""

import sqlite3
import subprocess
import sys

from caramba.store.runs import SCHEMA, RunStore

OPEN = "import sys\nfrom caramba.store.runs import RunStore\nfor _ in range(20):\n    RunStore(sys.argv[1])\n"


def _old_store(root):
    root.mkdir()
    db = sqlite3.connect(root / "runs.sqlite")
    db.executescript(SCHEMA)  # the first release's tables: no owner/heartbeat, duplicate rows allowed
    db.execute("INSERT INTO runs (id, experiment, status, created) VALUES ('old-run', 'x', 'running', 1)")
    db.executemany("INSERT INTO metrics VALUES ('old-run', 1, 'train', 'loss', ?, ?)", [(1.0, 1), (2.0, 2)])
    db.commit()
    db.close()


def test_an_old_store_is_migrated_in_place(tmp_path):
    _old_store(tmp_path / "s")
    store = RunStore(tmp_path / "s")
    rec = store.get("old-run")
    assert rec.owner == "" and rec.heartbeat is None and rec.status == "running"  # no owner: not judged
    assert store.metrics("old-run") == [(1, "train", "loss", 2.0)]  # the newest of the duplicates
    store.log_metrics("old-run", 1, {"loss": 3.0})
    assert store.metrics("old-run") == [(1, "train", "loss", 3.0)]


def test_processes_opening_an_old_store_at_once_migrate_it_once(tmp_path):
    _old_store(tmp_path / "s")
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, str(tmp_path / "s")], stderr=subprocess.PIPE) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    assert RunStore(tmp_path / "s").metrics("old-run") == [(1, "train", "loss", 2.0)]
