"""The local run store: runs, metrics and artifacts in a directory with one SQLite index.

Layout under the store root (``settings.store``, default ``~/.caramba/store``)::

    runs.sqlite                 runs, metrics and artifacts tables (WAL: readable while a run writes)
    runs/<run id>/              the run's files: resolved manifest, IR, checkpoints, plots

A run ID is ``<experiment>-<yyyymmdd>-<hhmmss>-<4 hex>``; commands accept any unique prefix,
or ``latest``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import sqlite3
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError, ConfigError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    group_id TEXT NOT NULL DEFAULT '',
    arm TEXT NOT NULL DEFAULT '',
    target TEXT NOT NULL DEFAULT '',
    run_name TEXT NOT NULL DEFAULT '',
    seed INTEGER NOT NULL DEFAULT 0,
    backend TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    step INTEGER NOT NULL DEFAULT 0,
    steps INTEGER NOT NULL DEFAULT 0,
    manifest_path TEXT NOT NULL DEFAULT '',
    manifest_sha256 TEXT NOT NULL DEFAULT '',
    config TEXT NOT NULL DEFAULT '{}',
    summary TEXT NOT NULL DEFAULT '{}',
    error TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL,
    split TEXT NOT NULL,
    name TEXT NOT NULL,
    value REAL,
    time REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_run ON metrics(run_id, name, step);
CREATE TABLE IF NOT EXISTS artifacts (
    run_id TEXT NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (run_id, name)
);
"""

STATUSES = ("created", "running", "finished", "failed", "cancelled", "interrupted")

# A running run whose process is gone is "interrupted": on this host its owner's PID is checked;
# a run owned by another host is interrupted once its heartbeat is older than this.
STALE_HEARTBEAT_S = 120.0
HEARTBEAT_EVERY_S = 2.0

_MIGRATIONS = (  # (probe that fails while it is missing, statements): added after the first release
    ("SELECT heartbeat FROM runs LIMIT 0", ("ALTER TABLE runs ADD COLUMN heartbeat REAL",)),
    ("SELECT owner FROM runs LIMIT 0", ("ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT ''",)),
    # one value per (run, split, name, step): a resumed run rewrites its rows, never duplicates them
    ("SELECT 1 FROM metrics INDEXED BY metrics_key LIMIT 0", (
        "DELETE FROM metrics WHERE rowid NOT IN (SELECT MAX(rowid) FROM metrics GROUP BY run_id, split, name, step)",
        "CREATE UNIQUE INDEX IF NOT EXISTS metrics_key ON metrics(run_id, split, name, step)",
    )),
    # what a researcher says about a run (caramba research tag / annotate)
    ("SELECT tags, note FROM runs LIMIT 0", (
        "ALTER TABLE runs ADD COLUMN tags TEXT NOT NULL DEFAULT '[]'",
        "ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT ''",
    )),
    # a deleted run leaves a tombstone: its ID says "deleted", not "no such run"
    ("SELECT id FROM deleted_runs LIMIT 0", (
        "CREATE TABLE IF NOT EXISTS deleted_runs (id TEXT PRIMARY KEY, experiment TEXT NOT NULL, deleted REAL NOT NULL,"
        " ledger_entry TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL DEFAULT '')",
    )),
)

MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_NOTE_CHARS = 20_000
# a tag is one word a filter can match exactly: letters, digits and - _ . : / + =
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+=\-]*$")


def this_process() -> str:
    """The owner string of runs executed by this process: ``host:pid``."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str, heartbeat: float | None, now: float) -> bool:
    import socket

    host, _, pid = owner.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # killed but not yet reaped (its parent died too) is dead as well
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state not in ("Z", "X")
    return heartbeat is not None and now - heartbeat < STALE_HEARTBEAT_S


class RunNotFound(CarambaError):
    """No run matches the given ID or prefix. ``caramba research status`` lists the runs."""


class RunDeleted(RunNotFound):
    """The run was deleted (``caramba research delete``); its ID is kept with when and why,
    and the Notary's ledger records the deletion."""


class StoreUnavailable(ConfigError):
    """The run store's folder cannot be created or written: a path through a regular file, a
    read-only disk, no permission, a database that refuses writes. Nothing was recorded. Point
    the ``store`` setting (caramba.yml, ``CARAMBA_STORE`` or ``--store``) at a writable folder."""


def _unusable(where: Path, exc: BaseException) -> StoreUnavailable:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return StoreUnavailable(f"the run store {where} cannot be used: {reason}",
                            hint="point the `store` setting (caramba.yml, CARAMBA_STORE or --store) at a folder "
                            "this process can write")


# sqlite's words for a store it cannot write (or that lost its database), as opposed to a busy one
_UNWRITABLE = ("readonly", "read-only", "unable to open", "disk i/o error", "permission", "no such table")


@dataclass
class RunRecord:
    id: str
    experiment: str
    status: str
    created: float
    dir: Path
    group_id: str = ""
    arm: str = ""
    target: str = ""
    run_name: str = ""
    seed: int = 0
    backend: str = ""
    started: float | None = None
    finished: float | None = None
    step: int = 0
    steps: int = 0
    manifest_path: str = ""
    manifest_sha256: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    heartbeat: float | None = None
    owner: str = ""
    tags: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def seconds(self) -> float | None:
        if self.started is None:
            return None
        return (self.finished or time.time()) - self.started

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "dir"}
        d["dir"] = str(self.dir)
        return d


@dataclass(frozen=True)
class Artifact:
    run_id: str
    name: str
    kind: str
    sha256: str
    size: int
    path: Path


class RunStore:
    """Runs, metrics and artifacts on local disk (directory + SQLite)."""

    def __init__(self, root: str | Path) -> None:
        """Open (creating if needed) the store at ``root``; a folder that cannot be created or
        written raises StoreUnavailable naming it, before anything is recorded."""
        self.root = Path(root).expanduser()
        self.db_path = self.root / "runs.sqlite"
        try:
            (self.root / "runs").mkdir(parents=True, exist_ok=True)
            probe = self.root / "runs" / f".write-probe-{os.getpid()}-{secrets.token_hex(4)}"
            probe.write_bytes(b"")  # a read-only mount lets mkdir(exist_ok) pass; a write does not
            probe.unlink()
        except OSError as exc:
            raise _unusable(self.root, exc) from None
        with self._db() as db:
            db.executescript(SCHEMA)
            _migrate(db)

    def _now(self) -> float:
        """The time recorded for a change (a replicated store replays changes at their time)."""
        return time.time()

    @contextmanager
    def _db(self):
        try:
            db = sqlite3.connect(self.db_path, timeout=30)
        except sqlite3.Error as exc:
            raise _unusable(self.db_path, exc) from None
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a commit survives a killed process (what resume relies on) without an
            # fsync per metric row; only a power loss can lose the newest commits
            db.execute("PRAGMA synchronous=NORMAL")
            db.row_factory = sqlite3.Row
            yield db
            db.commit()
        except sqlite3.OperationalError as exc:
            if any(w in str(exc).lower() for w in _UNWRITABLE):
                raise _unusable(self.db_path, exc) from None
            raise
        finally:
            db.close()

    # ---- runs ------------------------------------------------------------------------------
    def create_run(self, experiment: str, *, group_id: str = "", arm: str = "", target: str = "",
                   run_name: str = "", seed: int = 0, backend: str = "", steps: int = 0,
                   manifest_path: str = "", manifest_sha256: str = "", config: Mapping[str, Any] | None = None) -> RunRecord:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in experiment)[:40] or "run"
        run_id = f"{safe}-{stamp}-{secrets.token_hex(2)}"
        now = self._now()
        folder = self.run_dir(run_id)
        try:  # the folder first: a store that cannot hold the run's files records no run
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unusable(self.root, exc) from None
        try:
            with self._db() as db:
                db.execute(
                    "INSERT INTO runs (id, experiment, group_id, arm, target, run_name, seed, backend, status, created,"
                    " steps, manifest_path, manifest_sha256, config) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, experiment, group_id, arm, target, run_name, seed, backend, "created", now, steps,
                     manifest_path, manifest_sha256, json.dumps(dict(config or {}), default=str)),
                )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return self.get(run_id)

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def start(self, run_id: str, owner: str | None = None) -> None:
        """Mark a run running in this process (``owner``: ``host:pid``, default this process)."""
        now = self._now()
        with self._db() as db:
            db.execute("UPDATE runs SET status='running', started=COALESCE(started, ?), finished=NULL, error='',"
                       " heartbeat=?, owner=? WHERE id=?", (now, now, owner or this_process(), run_id))

    def heartbeat(self, run_id: str) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET heartbeat=? WHERE id=?", (self._now(), run_id))

    def interrupt(self, run_id: str, reason: str) -> None:
        """Record that a run stopped before its end and can be resumed."""
        with self._db() as db:
            db.execute("UPDATE runs SET status='interrupted', error=? WHERE id=? AND status IN ('created', 'running')",
                       (reason, run_id))

    def update_config(self, run_id: str, values: Mapping[str, Any]) -> None:
        rec = self.get(run_id)
        with self._db() as db:
            db.execute("UPDATE runs SET config=? WHERE id=?", (json.dumps({**rec.config, **values}, default=str), run_id))

    def commit_checkpoint(self, run_id: str, step: int, rows: "list[tuple[int, str, Mapping[str, float]]]",
                          artifact: "Artifact | None" = None) -> None:
        """One transaction: the metric rows up to ``step``, the checkpoint artifact and the step.
        Either all of it is stored or none (a crash in between leaves the previous commit)."""
        now = self._now()
        with self._db() as db:
            # a row already logged live keeps the time it was logged at (the wall-time axis)
            db.executemany("INSERT INTO metrics VALUES (?,?,?,?,?,?) ON CONFLICT(run_id, split, name, step) "
                           "DO UPDATE SET value = excluded.value",
                           [(run_id, int(i), split, k, float(v), now) for i, split, vals in rows for k, v in vals.items()])
            if artifact is not None:
                db.execute("INSERT OR REPLACE INTO artifacts VALUES (?,?,?,?,?,?)",
                           (run_id, artifact.name, artifact.kind, artifact.sha256, artifact.size, now))
            db.execute("UPDATE runs SET step=?, heartbeat=? WHERE id=?", (int(step), now, run_id))

    # ---- what a researcher says about a run ----------------------------------------------------
    def tag(self, run_id: str, add: "list[str] | tuple[str, ...]" = (), remove: "list[str] | tuple[str, ...]" = ()) -> RunRecord:
        """Add and remove tags of a run (kept in the order first given); returns the run."""
        for t in [*add, *remove]:
            check_tag(t)
        rec = self.get(run_id)
        tags = [t for t in rec.tags if t not in set(remove)]
        tags += [t for t in dict.fromkeys(add) if t not in tags]
        if len(tags) > MAX_TAGS:
            raise ConfigError(f"run {rec.id} would have {len(tags)} tags; at most {MAX_TAGS}",
                              hint="remove some with `caramba research tag RUN --remove TAG`")
        with self._db() as db:
            db.execute("UPDATE runs SET tags=? WHERE id=?", (json.dumps(tags), rec.id))
        return self.get(rec.id)

    def annotate(self, run_id: str, note: str) -> RunRecord:
        """Set the run's note (free text; an empty one clears it); returns the run."""
        if not isinstance(note, str):
            raise ConfigError(f"a run's note is text, not {type(note).__name__}")
        if len(note) > MAX_NOTE_CHARS:
            raise ConfigError(f"a run's note is at most {MAX_NOTE_CHARS:,} characters; this one has {len(note):,}")
        if "\x00" in note:
            raise ConfigError("a run's note cannot hold a NUL character")
        try:
            note.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigError(f"a run's note must be Unicode text: position {exc.start} holds a lone surrogate") from None
        rec = self.get(run_id)
        with self._db() as db:
            db.execute("UPDATE runs SET note=? WHERE id=?", (note, rec.id))
        return self.get(rec.id)

    def delete(self, run_id: str, *, ledger_entry: str = "", reason: str = "") -> None:
        """Forget a run: its record, metrics, artifacts and folder. A tombstone keeps its ID,
        when and why it was deleted, and the ledger entry that records the deletion (see
        ``caramba.run.manage.delete_run``, which records it with the Notary first)."""
        rec = self.get(run_id)
        with self._db() as db:
            db.execute("DELETE FROM metrics WHERE run_id = ?", (rec.id,))
            db.execute("DELETE FROM artifacts WHERE run_id = ?", (rec.id,))
            db.execute("DELETE FROM runs WHERE id = ?", (rec.id,))
            db.execute("INSERT OR REPLACE INTO deleted_runs VALUES (?,?,?,?,?)",
                       (rec.id, rec.experiment, self._now(), ledger_entry, reason))
        shutil.rmtree(self.run_dir(rec.id), ignore_errors=True)

    def deleted(self, run_id: str) -> "dict[str, Any] | None":
        """The tombstone of a deleted run (``id, experiment, deleted, ledger_entry, reason``), or None."""
        with self._db() as db:
            row = db.execute("SELECT * FROM deleted_runs WHERE id = ?", (run_id,)).fetchone()
        return dict(row) if row is not None else None

    def _tombstone(self, ref: str) -> None:
        gone = self.deleted(ref)
        if gone is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(gone["deleted"]))
            why = f" ({gone['reason']})" if gone["reason"] else ""
            raise RunDeleted(f"run {ref} was deleted at {when}{why}",
                             hint="the Notary's ledger keeps its evidence: `caramba notary log --subject " + ref + "`")

    def rewind(self, run_id: str, step: int) -> None:
        """Forget what a run recorded after ``step`` (a resumed run computes it again)."""
        with self._db() as db:
            db.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", (run_id, int(step)))
            db.execute("UPDATE runs SET step=? WHERE id=?", (int(step), run_id))

    def progress(self, run_id: str, step: int) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET step=? WHERE id=?", (step, run_id))

    def finish(self, run_id: str, status: str = "finished", summary: Mapping[str, Any] | None = None,
               error: str = "") -> None:
        if status not in STATUSES:
            raise CarambaError(f"unknown run status '{status}'; one of {', '.join(STATUSES)}")
        with self._db() as db:
            db.execute("UPDATE runs SET status=?, finished=?, summary=?, error=? WHERE id=?",
                       (status, self._now(), json.dumps(dict(summary or {}), default=str), error, run_id))

    def update_summary(self, run_id: str, values: Mapping[str, Any]) -> None:
        rec = self.get(run_id)
        with self._db() as db:
            db.execute("UPDATE runs SET summary=? WHERE id=?", (json.dumps({**rec.summary, **values}, default=str), run_id))

    def _record(self, row: sqlite3.Row) -> RunRecord:
        d = dict(row)
        d["config"] = json.loads(d["config"] or "{}")
        d["summary"] = json.loads(d["summary"] or "{}")
        tags = json.loads(d.get("tags") or "[]")
        d["tags"] = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
        d["note"] = d.get("note") or ""
        if d["status"] in ("running", "created") and d.get("owner") and not _owner_alive(d["owner"], d.get("heartbeat"), time.time()):
            d["status"] = "interrupted"  # its process died: `caramba research resume` continues it
            d["error"] = d["error"] or f"the process running it ({d['owner']}) is gone"
        return RunRecord(dir=self.run_dir(d["id"]), **d)

    def get(self, ref: str) -> RunRecord:
        """A run by ID, unique ID prefix, or ``latest``. A prefix is compared as text (``_``
        and ``%`` are characters, not wildcards)."""
        if not ref:
            raise RunNotFound("an empty run ID matches no run", hint="`caramba research status` lists the runs")
        with self._db() as db:
            if ref == "latest":
                row = db.execute("SELECT * FROM runs ORDER BY created DESC LIMIT 1").fetchone()
                if row is None:
                    raise RunNotFound(f"the store {self.root} has no runs yet")
                return self._record(row)
            rows = db.execute("SELECT * FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created DESC LIMIT 5",
                              (len(ref), ref)).fetchall()
        exact = [r for r in rows if r["id"] == ref]
        if exact:
            return self._record(exact[0])
        if not rows:
            self._tombstone(ref)
            raise RunNotFound(f"no run '{ref}' in {self.root}", hint="`caramba research status` lists the runs")
        if len(rows) > 1:
            raise RunNotFound(f"'{ref}' matches several runs: {', '.join(r['id'] for r in rows)}; give more of the ID")
        return self._record(rows[0])

    def list(self, limit: int = 50, experiment: str | None = None, group_id: str | None = None) -> "list[RunRecord]":
        q, args = "SELECT * FROM runs", []
        where = []
        if experiment:
            where.append("experiment = ?")
            args.append(experiment)
        if group_id:
            where.append("group_id = ?")
            args.append(group_id)
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY created DESC LIMIT ?"
        args.append(limit)
        with self._db() as db:
            return [self._record(r) for r in db.execute(q, args).fetchall()]

    # ---- metrics ---------------------------------------------------------------------------
    def log_metrics(self, run_id: str, step: int, values: Mapping[str, float], split: str = "train") -> None:
        now = self._now()
        rows = [(run_id, int(step), split, k, float(v), now) for k, v in values.items()]
        with self._db() as db:
            db.executemany("INSERT OR REPLACE INTO metrics VALUES (?,?,?,?,?,?)", rows)
            db.execute("UPDATE runs SET step=MAX(step, ?), heartbeat=? WHERE id=?", (int(step), now, run_id))

    def log_rows(self, run_id: str, rows: "list[tuple[int, str, Mapping[str, float]]]") -> None:
        """Several ``(step, split, values)`` rows in one transaction."""
        now = self._now()
        flat = [(run_id, int(i), split, k, float(v), now) for i, split, vals in rows for k, v in vals.items()]
        if not flat:
            return
        with self._db() as db:
            db.executemany("INSERT OR REPLACE INTO metrics VALUES (?,?,?,?,?,?)", flat)
            db.execute("UPDATE runs SET step=MAX(step, ?), heartbeat=? WHERE id=?",
                       (max(int(r[0]) for r in rows), now, run_id))

    def metrics(self, run_id: str, name: str | None = None, split: str | None = None) -> list[tuple[int, str, str, float]]:
        """``(step, split, name, value)`` rows in step order."""
        q, args = "SELECT step, split, name, value FROM metrics WHERE run_id = ?", [run_id]
        if name is not None:
            q += " AND name = ?"
            args.append(name)
        if split is not None:
            q += " AND split = ?"
            args.append(split)
        with self._db() as db:
            rows = db.execute(q + " ORDER BY step, rowid", args).fetchall()
        # SQLite stores NaN as NULL: a diverged loss reads back as nan.
        return [(r[0], r[1], r[2], float("nan") if r[3] is None else r[3]) for r in rows]

    def timed_series(self, run_id: str, name: str, split: str) -> list[tuple[int, float, float]]:
        """``(step, value, time)`` of one metric in step order; ``time`` is when the row was
        first logged (seconds since the epoch)."""
        with self._db() as db:
            rows = db.execute("SELECT step, value, time FROM metrics WHERE run_id = ? AND name = ? AND split = ?"
                              " ORDER BY step, rowid", (run_id, name, split)).fetchall()
        return [(r[0], float("nan") if r[1] is None else r[1], r[2]) for r in rows]

    def series(self, run_id: str, name: str, split: str) -> tuple[list[int], list[float]]:
        rows = self.metrics(run_id, name, split)
        return [r[0] for r in rows], [r[3] for r in rows]

    # ---- artifacts -------------------------------------------------------------------------
    def _place_artifact(self, run_id: str, name: str, data: bytes | str | Path) -> tuple[Path, str, int]:
        """Put ``data`` at ``name`` in the run folder (text and bytes through a temporary file);
        returns (path, sha256, size)."""
        if not name or Path(name).is_absolute() or ".." in Path(name).parts:
            raise CarambaError(f"artifact name '{name}' must be a relative path inside the run folder")
        path = self.run_dir(run_id) / name
        if isinstance(data, Path):
            if data.resolve() != path.resolve():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data.read_bytes())
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            tmp.write_bytes(data.encode() if isinstance(data, str) else data)
            tmp.replace(path)
        digest, size = _sha256(path)
        return path, digest, size

    def add_artifact(self, run_id: str, name: str, data: bytes | str | Path, kind: str = "file") -> Artifact:
        """Store ``data`` (bytes, text, or a file already written in the run folder) as ``name``."""
        path, digest, size = self._place_artifact(run_id, name, data)
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO artifacts VALUES (?,?,?,?,?,?)", (run_id, name, kind, digest, size, self._now()))
        return Artifact(run_id, name, kind, digest, size, path)

    def artifacts(self, run_id: str, kind: str | None = None) -> list[Artifact]:
        q, args = "SELECT name, kind, sha256, size FROM artifacts WHERE run_id = ?", [run_id]
        if kind is not None:
            q += " AND kind = ?"
            args.append(kind)
        with self._db() as db:
            rows = db.execute(q + " ORDER BY created, name", args).fetchall()
        return [Artifact(run_id, r["name"], r["kind"], r["sha256"], r["size"], self.run_dir(run_id) / r["name"]) for r in rows]

    def remove_artifact(self, run_id: str, name: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM artifacts WHERE run_id = ? AND name = ?", (run_id, name))
        (self.run_dir(run_id) / name).unlink(missing_ok=True)


def check_tag(tag: Any) -> str:
    """``tag`` if it is a valid tag, else ConfigError saying what a tag may hold."""
    if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_CHARS or not _TAG.match(tag):
        shown = repr(tag) if len(repr(tag)) <= 80 else repr(tag)[:77] + "..."
        raise ConfigError(f"tag {shown} is not a tag: 1 to {MAX_TAG_CHARS} characters, letters, digits and "
                          "- _ . : / + =, starting with a letter or digit", hint="e.g. baseline, lr-sweep, paper:fig2")
    return tag


def _migrate(db: sqlite3.Connection) -> None:
    """Add what later releases need to an existing store. Two processes may open a store at
    once (a run and `caramba research status`): the changes are made under the write lock,
    after looking again."""
    if not _missing(db):
        return
    db.execute("BEGIN IMMEDIATE")
    for _probe, statements in _missing(db):
        for st in statements:
            db.execute(st)


def _missing(db: sqlite3.Connection) -> list[tuple[str, tuple[str, ...]]]:
    out = []
    for probe, statements in _MIGRATIONS:
        try:
            db.execute(probe).fetchall()
        except sqlite3.OperationalError:
            out.append((probe, statements))
    return out


def _sha256(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def open_runs(root: str | Path | None = None) -> RunStore:
    """The run store at ``root`` (default: the ``store`` setting): a folder or a URL
    (``file://``, ``s3://``; ``caramba.store.registry``); StoreUnavailable when it cannot be
    used."""
    if root is None:
        from caramba.config import settings

        root = settings().store
    from caramba.store.registry import open_store_url

    return open_store_url(root)


__all__ = ["Artifact", "RunDeleted", "RunNotFound", "RunRecord", "RunStore", "StoreUnavailable", "check_tag", "open_runs"]
