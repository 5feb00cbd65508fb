"""The Model actor: numbered versions of models, each backed by a checkpoint and a VERIFIED claim.

An experiment works on a copy of version N and asks for N+1 with ``Commit``. The Model actor
asks the Notary itself before it records anything: a claim that is not VERIFIED, or that does
not cite the very checkpoint being committed, is refused (``NotVerified``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from caramba.actors.base import Actor, handler
from caramba.actors.messages import Message
from caramba.actors.notary import GetEntry, ValidityOf
from caramba.errors import CarambaError


class NotVerified(CarambaError):
    """The Notary did not answer VERIFIED for the claim behind a commit, or the claim does not
    cite the checkpoint being committed. The message carries the Notary's reason chain."""


class UnknownVersion(CarambaError):
    """No such model or version; ``Versions(model)`` lists what exists."""


class ModelVersion(Message):
    model: str
    version: int
    parent: int | None
    key: str
    sha256: str
    size: int
    claim: str
    run_id: str = ""
    metrics: dict[str, Any] = Field(default_factory=dict)
    time: float = 0.0


class Commit(Message):
    """Record version ``parent + 1``-style: the next number, derived from ``parent`` (None: a first version)."""

    model: str
    parent: int | None
    key: str
    sha256: str
    size: int
    claim: str
    run_id: str = ""
    metrics: dict[str, Any] = Field(default_factory=dict)


class GetVersion(Message):
    model: str
    version: int | None = None  # None: the latest


class Versions(Message):
    model: str


class VersionList(Message):
    versions: list[ModelVersion] = Field(default_factory=list)


class ModelActor(Actor):
    """Model versions in ``root/models.sqlite``; validity questions go to ``notary``."""

    def __init__(self, root: str, notary: str = "notary") -> None:
        self.root = Path(root)
        self.notary = notary
        self._lock = threading.Lock()

    def started(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.root / "models.sqlite", timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS versions (model TEXT NOT NULL, version INTEGER NOT NULL, parent INTEGER, "
            "key TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL, claim TEXT NOT NULL, run_id TEXT NOT NULL, "
            "metrics TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (model, version))"
        )

    def stopped(self) -> None:
        self.db.close()

    def _rows(self, model: str) -> list[ModelVersion]:
        rows = self.db.execute(
            "SELECT model, version, parent, key, sha256, size, claim, run_id, metrics, time FROM versions "
            "WHERE model = ? ORDER BY version", (model,),
        ).fetchall()
        return [
            ModelVersion(model=r[0], version=r[1], parent=r[2], key=r[3], sha256=r[4], size=r[5], claim=r[6],
                         run_id=r[7], metrics=json.loads(r[8]), time=r[9])
            for r in rows
        ]

    @handler
    def commit(self, msg: Commit) -> ModelVersion:
        notary = self.context.lookup(self.notary)
        verdict = notary.ask(ValidityOf(entry=msg.claim))
        if not verdict.valid:
            raise NotVerified(
                f"model '{msg.model}': claim {msg.claim[:12]}… is {verdict.verdict}, not VERIFIED:\n{verdict.explain()}"
            )
        claim = notary.ask(GetEntry(ref=msg.claim))
        cited = claim.payload.get("checkpoint", {})
        if claim.kind != "claim" or cited.get("sha256") != msg.sha256 or cited.get("key") != msg.key:
            raise NotVerified(f"model '{msg.model}': claim {msg.claim[:12]}… does not cite checkpoint {msg.key} ({msg.sha256[:12]}…)")
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")  # other processes may share this file: number versions atomically
            try:
                row = self._next_version(msg)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return row

    def _next_version(self, msg: Commit) -> ModelVersion:
        existing = self._rows(msg.model)
        for v in existing:  # idempotent: the same claim commits once
            if v.claim == msg.claim:
                return v
        if msg.parent is not None and msg.parent not in {v.version for v in existing}:
            raise UnknownVersion(f"model '{msg.model}' has no version {msg.parent} to build on")
        version = (existing[-1].version if existing else 0) + 1
        row = ModelVersion(
            model=msg.model, version=version, parent=msg.parent, key=msg.key, sha256=msg.sha256, size=msg.size,
            claim=msg.claim, run_id=msg.run_id, metrics=msg.metrics, time=time.time(),
        )
        self.db.execute(
            "INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row.model, row.version, row.parent, row.key, row.sha256, row.size, row.claim, row.run_id,
             json.dumps(row.metrics, allow_nan=True), row.time),
        )
        return row

    @handler
    def get(self, msg: GetVersion) -> ModelVersion:
        rows = self._rows(msg.model)
        if not rows:
            raise UnknownVersion(f"no model '{msg.model}' (no version committed yet)")
        if msg.version is None:
            return rows[-1]
        for r in rows:
            if r.version == msg.version:
                return r
        raise UnknownVersion(f"model '{msg.model}' has no version {msg.version}; it has {', '.join(str(r.version) for r in rows)}")

    @handler
    def versions(self, msg: Versions) -> VersionList:
        return VersionList(versions=self._rows(msg.model))
