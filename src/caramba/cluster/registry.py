"""Node registry: which nodes exist, what they can run, and whether they are alive.

A node registers its HardwareProfile and then heartbeats. Health follows from the age of the
last heartbeat: ``alive`` within ``heartbeat_ttl``, ``suspect`` up to ``dead_after``, then
``dead``. Only alive nodes get new work. Times come from ``clock`` (or an explicit ``now``),
so schedules can be tested without waiting.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Literal

from caramba.actors.messages import Message
from caramba.cluster.profile import HardwareProfile
from caramba.errors import CarambaError, did_you_mean

Health = Literal["alive", "suspect", "dead"]


class UnknownNode(CarambaError):
    """No node with that ID registered; the message lists the known ones."""


class NodeInfo(Message):
    profile: HardwareProfile
    registered: float
    last_heartbeat: float
    health: Health

    @property
    def node_id(self) -> str:
        return self.profile.node_id


class NodeRegistry:
    """Nodes in an SQLite file (``":memory:"`` for a throwaway registry)."""

    def __init__(
        self,
        path: str | os.PathLike = ":memory:",
        *,
        heartbeat_ttl: float = 10.0,
        dead_after: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.heartbeat_ttl = heartbeat_ttl
        self.dead_after = dead_after if dead_after is not None else 3 * heartbeat_ttl
        self.clock = clock
        self._lock = threading.RLock()
        self._db = sqlite3.connect(os.fspath(path), timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS nodes (node_id TEXT PRIMARY KEY, profile TEXT NOT NULL, "
            "registered REAL NOT NULL, last_heartbeat REAL NOT NULL)"
        )

    def _now(self, now: float | None) -> float:
        return float(self.clock() if now is None else now)

    def health(self, last_heartbeat: float, now: float) -> Health:
        age = now - last_heartbeat
        if age <= self.heartbeat_ttl:
            return "alive"
        return "suspect" if age <= self.dead_after else "dead"

    def register(self, profile: HardwareProfile, now: float | None = None) -> NodeInfo:
        """Add or update a node; registering counts as a heartbeat."""
        t = self._now(now)
        with self._lock:
            self._db.execute(
                "INSERT INTO nodes (node_id, profile, registered, last_heartbeat) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(node_id) DO UPDATE SET profile = excluded.profile, last_heartbeat = excluded.last_heartbeat",
                (profile.node_id, profile.model_dump_json(), t, t),
            )
        return self.get(profile.node_id, t)

    def heartbeat(self, node_id: str, now: float | None = None) -> NodeInfo:
        t = self._now(now)
        with self._lock:
            cur = self._db.execute("UPDATE nodes SET last_heartbeat = MAX(last_heartbeat, ?) WHERE node_id = ?", (t, node_id))
            if cur.rowcount == 0:
                raise self._unknown(node_id)
        return self.get(node_id, t)

    def _unknown(self, node_id: str) -> UnknownNode:
        known = [r[0] for r in self._db.execute("SELECT node_id FROM nodes")]
        return UnknownNode(f"no node '{node_id}' is registered; {did_you_mean(node_id, known)}")

    def get(self, node_id: str, now: float | None = None) -> NodeInfo:
        t = self._now(now)
        with self._lock:
            row = self._db.execute(
                "SELECT profile, registered, last_heartbeat FROM nodes WHERE node_id = ?", (node_id,)
            ).fetchone()
            if row is None:
                raise self._unknown(node_id)
        return NodeInfo(
            profile=HardwareProfile.model_validate_json(row[0]), registered=row[1], last_heartbeat=row[2],
            health=self.health(row[2], t),
        )

    def nodes(self, now: float | None = None, health: Health | None = None) -> list[NodeInfo]:
        t = self._now(now)
        with self._lock:
            rows = self._db.execute("SELECT profile, registered, last_heartbeat FROM nodes ORDER BY node_id").fetchall()
        out = [
            NodeInfo(profile=HardwareProfile.model_validate_json(p), registered=r, last_heartbeat=h, health=self.health(h, t))
            for p, r, h in rows
        ]
        return [n for n in out if health is None or n.health == health]

    def remove(self, node_id: str) -> None:
        with self._lock:
            if self._db.execute("DELETE FROM nodes WHERE node_id = ?", (node_id,)).rowcount == 0:
                raise self._unknown(node_id)

    def close(self) -> None:
        with self._lock:
            self._db.close()
