"""A persistent job queue with time-bound leases (SQLite).

A job is ``queued`` until it is granted to a node: then it is ``leased`` under a lease that
expires unless renewed. An expired lease puts the job back in the queue (or fails it when its
attempts are used up). Every grant carries a fencing ``token`` (the attempt number): renewals
and outcomes must present it, so a worker that lost its lease can never overwrite the result
of the worker that holds the job now.

Jobs: queued -> leased -> done | failed | cancelled (and leased -> queued on expiry/retry).
Leases: active -> completed | failed | expired | released.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from caramba.actors.messages import Message
from caramba.cluster.profile import HardwareProfile
from caramba.errors import CarambaError

JobState = Literal["queued", "leased", "done", "failed", "cancelled"]
LeaseState = Literal["active", "completed", "failed", "expired", "released"]
FINAL = ("done", "failed", "cancelled")


class QueueError(CarambaError):
    """A queue operation is not possible in the job's current state; the message says why."""


class UnknownJob(QueueError):
    """No job (or lease) with that ID."""


class LeaseLost(QueueError):
    """The lease expired, was completed, or its token is stale: the job may already run elsewhere.
    Stop working on it; whatever the current holder reports is what counts."""


class Requirements(Message):
    """What a job needs from a node: a backend (available there), memory, cores, labels."""

    backend: str | None = None
    min_memory_bytes: int = Field(0, ge=0)
    min_cpus: int = Field(1, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)


def refusal(req: Requirements, profile: HardwareProfile) -> str | None:
    """Why ``profile`` cannot run a job with ``req`` (None: it can)."""
    if req.backend is not None and not profile.has_backend(req.backend):
        info = profile.backends.get(req.backend)
        why = f" ({info.reason})" if info is not None and info.reason else ""
        return f"node '{profile.node_id}' has no backend '{req.backend}'{why}"
    if profile.memory_bytes < req.min_memory_bytes:
        return f"node '{profile.node_id}' has {profile.memory_bytes} bytes of memory, the job needs {req.min_memory_bytes}"
    if profile.cpus < req.min_cpus:
        return f"node '{profile.node_id}' has {profile.cpus} cores, the job needs {req.min_cpus}"
    for k, v in req.labels.items():
        if profile.labels.get(k) != v:
            return f"node '{profile.node_id}' lacks label {k}={v}"
    return None


class JobSpec(Message):
    name: str = ""
    kind: str = "experiment"
    payload: dict[str, Any] = Field(default_factory=dict)
    requirements: Requirements = Field(default_factory=Requirements)
    priority: int = 0
    max_attempts: int = Field(3, ge=1)


class Job(Message):
    id: str
    name: str
    kind: str
    payload: dict[str, Any]
    requirements: Requirements
    priority: int
    state: JobState
    attempts: int
    max_attempts: int
    created: float
    updated: float
    node: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None


class Lease(Message):
    id: str
    job_id: str
    node_id: str
    token: int
    granted: float
    expires: float
    state: LeaseState


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL,
    requirements TEXT NOT NULL, priority INTEGER NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, node TEXT,
    result TEXT, error TEXT, seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    id TEXT PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs(id), node_id TEXT NOT NULL, token INTEGER NOT NULL,
    granted REAL NOT NULL, expires REAL NOT NULL, state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_active ON leases (state, node_id);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, priority, seq);
"""
_JOB = "id, name, kind, payload, requirements, priority, state, attempts, max_attempts, created, updated, node, result, error"
_LEASE = "id, job_id, node_id, token, granted, expires, state"


def _job(row: tuple) -> Job:
    return Job(
        id=row[0], name=row[1], kind=row[2], payload=json.loads(row[3]),
        requirements=Requirements.model_validate_json(row[4]), priority=row[5], state=row[6], attempts=row[7],
        max_attempts=row[8], created=row[9], updated=row[10], node=row[11],
        result=json.loads(row[12]) if row[12] is not None else None, error=row[13],
    )


def _lease(row: tuple) -> Lease:
    return Lease(id=row[0], job_id=row[1], node_id=row[2], token=row[3], granted=row[4], expires=row[5], state=row[6])


class JobQueue:
    """The queue in an SQLite file (``":memory:"`` for a throwaway one)."""

    def __init__(self, path: str | os.PathLike = ":memory:", clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self._db = sqlite3.connect(os.fspath(path), timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def _now(self, now: float | None) -> float:
        return float(self.clock() if now is None else now)

    def _tx(self):
        return _Tx(self)

    # ---- jobs ----------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, now: float | None = None) -> Job:
        t = self._now(now)
        jid = uuid.uuid4().hex[:16]
        with self._tx() as db:
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            db.execute(
                f"INSERT INTO jobs ({_JOB}, seq) VALUES (?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?, ?, NULL, NULL, NULL, ?)",
                (jid, spec.name or jid, spec.kind, json.dumps(spec.payload, allow_nan=True),
                 spec.requirements.model_dump_json(), spec.priority, spec.max_attempts, t, t, seq),
            )
        return self.job(jid)

    def job(self, job_id: str) -> Job:
        with self._lock:
            row = self._db.execute(f"SELECT {_JOB} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(f"no job '{job_id}'")
        return _job(row)

    def jobs(self, state: JobState | None = None) -> list[Job]:
        sql = f"SELECT {_JOB} FROM jobs" + (" WHERE state = ?" if state else "") + " ORDER BY seq"
        with self._lock:
            rows = self._db.execute(sql, (state,) if state else ()).fetchall()
        return [_job(r) for r in rows]

    def queued(self) -> list[Job]:
        """Queued jobs in the order they should be placed: priority, then age."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_JOB} FROM jobs WHERE state = 'queued' ORDER BY priority DESC, seq").fetchall()
        return [_job(r) for r in rows]

    def cancel(self, job_id: str, now: float | None = None) -> Job:
        t = self._now(now)
        with self._tx() as db:
            job = self.job(job_id)
            if job.state in FINAL:
                return job
            db.execute("UPDATE leases SET state = 'released' WHERE job_id = ? AND state = 'active'", (job_id,))
            db.execute("UPDATE jobs SET state = 'cancelled', updated = ? WHERE id = ?", (t, job_id))
        return self.job(job_id)

    # ---- leases --------------------------------------------------------------------------------
    def grant(self, job_id: str, node_id: str, ttl: float, now: float | None = None) -> Lease:
        """Lease a queued job to ``node_id`` for ``ttl`` seconds."""
        t = self._now(now)
        with self._tx() as db:
            job = self.job(job_id)
            if job.state != "queued":
                raise QueueError(f"job '{job.name}' is {job.state}, not queued")
            lid = uuid.uuid4().hex[:16]
            token = job.attempts + 1
            db.execute(f"INSERT INTO leases ({_LEASE}) VALUES (?, ?, ?, ?, ?, ?, 'active')", (lid, job_id, node_id, token, t, t + ttl))
            db.execute("UPDATE jobs SET state = 'leased', attempts = ?, node = ?, updated = ? WHERE id = ?", (token, node_id, t, job_id))
        return self.lease(lid)

    def lease(self, lease_id: str) -> Lease:
        with self._lock:
            row = self._db.execute(f"SELECT {_LEASE} FROM leases WHERE id = ?", (lease_id,)).fetchone()
        if row is None:
            raise UnknownJob(f"no lease '{lease_id}'")
        return _lease(row)

    def leases(self, *, job_id: str | None = None, node_id: str | None = None, state: LeaseState | None = None) -> list[Lease]:
        sql, args = f"SELECT {_LEASE} FROM leases WHERE 1", []
        for col, val in (("job_id", job_id), ("node_id", node_id), ("state", state)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY granted, id", args).fetchall()
        return [_lease(r) for r in rows]

    def active_counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT node_id, COUNT(*) FROM leases WHERE state = 'active' GROUP BY node_id").fetchall()
        return dict(rows)

    def _held(self, lease_id: str, token: int, t: float) -> Lease:
        """The lease if it is active, unexpired and ``token`` is current; otherwise LeaseLost."""
        lease = self.lease(lease_id)
        if lease.token != token:
            raise LeaseLost(f"lease {lease_id} token {token} is stale (current {lease.token})")
        if lease.state != "active":
            raise LeaseLost(f"lease {lease_id} of job {lease.job_id} is {lease.state}")
        if lease.expires < t:
            raise LeaseLost(f"lease {lease_id} of job {lease.job_id} expired at {lease.expires:.3f} (now {t:.3f})")
        return lease

    def renew(self, lease_id: str, token: int, ttl: float, now: float | None = None) -> Lease:
        t = self._now(now)
        with self._tx() as db:
            self._held(lease_id, token, t)
            db.execute("UPDATE leases SET expires = ? WHERE id = ?", (t + ttl, lease_id))
        return self.lease(lease_id)

    def complete(self, lease_id: str, token: int, result: dict[str, Any] | None = None, now: float | None = None) -> Job:
        t = self._now(now)
        with self._tx() as db:
            lease = self._held(lease_id, token, t)
            db.execute("UPDATE leases SET state = 'completed' WHERE id = ?", (lease_id,))
            db.execute("UPDATE jobs SET state = 'done', result = ?, error = NULL, updated = ? WHERE id = ?",
                       (json.dumps(result or {}, allow_nan=True), t, lease.job_id))
        return self.job(lease.job_id)

    def fail(self, lease_id: str, token: int, error: str, *, retry: bool = True, now: float | None = None) -> Job:
        """The holder gave up: requeue (``retry`` and attempts left) or fail the job."""
        t = self._now(now)
        with self._tx() as db:
            lease = self._held(lease_id, token, t)
            job = self.job(lease.job_id)
            state = "queued" if retry and job.attempts < job.max_attempts else "failed"
            db.execute("UPDATE leases SET state = 'failed' WHERE id = ?", (lease_id,))
            db.execute("UPDATE jobs SET state = ?, error = ?, updated = ? WHERE id = ?", (state, error, t, lease.job_id))
        return self.job(lease.job_id)

    def expire(self, now: float | None = None) -> list[Lease]:
        """Expire active leases past their deadline and requeue (or fail) their jobs."""
        t = self._now(now)
        with self._tx() as db:
            rows = db.execute(f"SELECT {_LEASE} FROM leases WHERE state = 'active' AND expires < ?", (t,)).fetchall()
            for row in rows:
                lease = _lease(row)
                job = self.job(lease.job_id)
                state = "queued" if job.attempts < job.max_attempts else "failed"
                db.execute("UPDATE leases SET state = 'expired' WHERE id = ?", (lease.id,))
                db.execute(
                    "UPDATE jobs SET state = ?, error = ?, updated = ? WHERE id = ?",
                    (state, f"lease {lease.id} on node '{lease.node_id}' expired (attempt {lease.token})", t, job.id),
                )
        return [self.lease(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error), under the queue's lock."""

    def __init__(self, q: JobQueue) -> None:
        self.q = q

    def __enter__(self) -> sqlite3.Connection:
        self.q._lock.acquire()
        self.q._db.execute("BEGIN IMMEDIATE")
        return self.q._db

    def __exit__(self, exc_type, *rest: object) -> None:
        try:
            self.q._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.q._lock.release()
